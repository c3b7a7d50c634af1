// dl_adaptive: whether a cache could pick, per launch, between an exec instantiated for device
// launch and a default one by whether the stream is idle (issue 31: device-launch execs help a
// step that waits for its result at wide fans, and hurt steps enqueued back to back). No Rust:
// built and run on the GPU machine with
//
//   nvcc -O2 -o /tmp/dl_adaptive examples/probes/dl_adaptive.cu -lcuda && /tmp/dl_adaptive SHAPE K
//
// Shapes as read_switch.cu (chain: K `add`; fan: `add`, K `acc` into their own buffers, `add`;
// then an 8-byte copy into pinned memory). Two patterns, each variant interleaved per
// repetition, medians of 100 repetitions:
//   read:  per step launch + cuStreamSynchronize + read (bench's rc);
//   b2b:   STEPS launches back to back, one synchronize (bench's c).
// Variants: default exec; device-launch exec; default exec with a cuStreamQuery before each
// launch (what the check costs); adaptive: cuStreamQuery, device-launch exec if the stream is
// idle, else the default one.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>
__global__ void add(unsigned *x, unsigned n, unsigned s) { unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += s; }
__global__ void acc(const unsigned *x, unsigned *y, unsigned n) { unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += x[i]; }
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("error %d at %s\n", r_, #x); return 1; } } while (0)
int main(int argc, char **argv) {
  bool fan = argc > 1 && !strcmp(argv[1], "fan");
  int K = argc > 2 ? atoi(argv[2]) : 1;
  int STEPS = K >= 1000 ? 10 : K >= 100 ? 20 : 50;
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUstream cs = (CUstream)s;
  const unsigned N = 256;
  unsigned *p; CK(cudaMalloc(&p, 4 * N)); CK(cudaMemset(p, 0, 4 * N));
  std::vector<unsigned *> mid(fan ? K : 0);
  for (auto &m : mid) { CK(cudaMalloc(&m, 4 * N)); CK(cudaMemset(m, 0, 4 * N)); }
  unsigned *h; CK(cuMemHostAlloc((void **)&h, 4096, 0));
  cudaGraph_t g; CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  if (fan) {
    add<<<1, 32, 0, s>>>(p, N, 1);
    cudaEvent_t fork; CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)); CK(cudaEventRecord(fork, s));
    std::vector<cudaStream_t> side(K); std::vector<cudaEvent_t> done(K);
    for (int k = 0; k < K; k++) {
      CK(cudaStreamCreateWithFlags(&side[k], cudaStreamNonBlocking)); CK(cudaStreamWaitEvent(side[k], fork, 0));
      acc<<<1, 32, 0, side[k]>>>(p, mid[k], N);
      CK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming)); CK(cudaEventRecord(done[k], side[k])); CK(cudaStreamWaitEvent(s, done[k], 0));
    }
    add<<<1, 32, 0, s>>>(p, N, 1);
  } else {
    for (int k = 0; k < K; k++) add<<<1, 32, 0, s>>>(p, N, 1);
  }
  CK(cudaMemcpyAsync(h, p, 8, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e, d;
  CK(cudaGraphInstantiate(&e, g, 0));
  CK(cudaGraphInstantiateWithFlags(&d, g, cudaGraphInstantiateFlagDeviceLaunch));
  CK(cudaGraphUpload(e, s)); CK(cudaGraphUpload(d, s));
  CK(cudaStreamSynchronize(s));
  const char *names[] = {"default exec", "device-launch exec", "default + cuStreamQuery", "adaptive (query: idle -> device-launch)"};
  const int V = 4, REPS = 100;
  volatile unsigned sink = 0;
  printf("%s K = %d, %d steps per repetition, medians of %d, us per step\n", fan ? "fan" : "chain", K, STEPS, REPS);
  printf("%-42s %10s %10s %12s %12s\n", "variant", "read", "b2b", "read/default", "b2b/default");
  double r[2][V];
  for (int pat = 0; pat < 2; pat++) {
    std::vector<std::vector<double>> t(V);
    long idle = 0, busy = 0;
    for (int rep = 0; rep < REPS + 1; rep++) {
      for (int v = 0; v < V; v++) {
        double t0 = now();
        for (int i = 0; i < STEPS; i++) {
          cudaGraphExec_t x = v == 1 ? d : e;
          if (v >= 2) {
            bool quiet = cuStreamQuery(cs) == CUDA_SUCCESS;
            if (v == 3 && quiet) x = d;
            if (v == 3) (quiet ? idle : busy)++;
          }
          cudaGraphLaunch(x, s);
          if (pat == 0) { cuStreamSynchronize(cs); sink += h[0]; }
        }
        if (pat == 1) cuStreamSynchronize(cs);
        if (rep > 0) t[v].push_back((now() - t0) / STEPS);
      }
    }
    for (int v = 0; v < V; v++) { std::sort(t[v].begin(), t[v].end()); r[pat][v] = t[v][REPS / 2]; }
    printf("(%s: adaptive found the stream idle %ld times, busy %ld)\n", pat ? "b2b" : "read", idle, busy);
  }
  for (int v = 0; v < V; v++) printf("%-42s %10.2f %10.2f %12.3f %12.3f\n", names[v], r[0][v], r[1][v], r[0][v] / r[0][0], r[1][v] / r[1][0]);
  return 0;
}
