// copy_kernel: an 8-byte result copied to pinned host memory at the end of a step, as a memcpy
// node (what `graph!`'s `copy` into a `PinnedBuffer` makes) or as a one-thread kernel node that
// stores the 8 bytes through the pinned memory's device address (unified addressing). dl_adaptive
// found the memcpy node's step 12.75 µs back to back at one kernel (1.7 without the copy). No
// Rust: built and run on the GPU machine with
//
//   nvcc -O2 -o /tmp/copy_kernel examples/probes/copy_kernel.cu -lcuda && /tmp/copy_kernel SHAPE K [BYTES]
//
// BYTES (default 8, a multiple of 8): the size of the copied result; the kernel node is one block
// of up to 256 threads storing 8-byte words in a grid-stride loop.
// Shapes as read_switch.cu. Patterns: read (launch + cuStreamSynchronize + read, bench's rc) and
// b2b (STEPS launches, one synchronize). Variants: memcpy node; kernel node; no copy at all (the
// floor); memcpy node in a device-launch exec. Each read checks the value the step wrote (the
// chain's first element counts the steps), so a variant that read stale memory fails loudly.
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
__global__ void copy8(const unsigned long long *src, unsigned long long *dst, unsigned n) {
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("error %d at %s\n", r_, #x); exit(1); } } while (0)
int main(int argc, char **argv) {
  bool fan = argc > 1 && !strcmp(argv[1], "fan");
  int K = argc > 2 ? atoi(argv[2]) : 1;
  int STEPS = K >= 1000 ? 10 : K >= 100 ? 20 : 50;
  unsigned BYTES = argc > 3 ? (unsigned)atoi(argv[3]) : 8;
  if (BYTES < 8 || BYTES % 8) { printf("BYTES: a multiple of 8\n"); return 1; }
  unsigned words = BYTES / 8, threads = words < 256 ? words : 256;
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUstream cs = (CUstream)s;
  const unsigned N = 256 > BYTES / 4 ? 256 : BYTES / 4;
  unsigned *p; CK(cudaMalloc(&p, 4 * N)); CK(cudaMemset(p, 0, 4 * N));
  std::vector<unsigned *> mid(fan ? K : 0);
  for (auto &m : mid) { CK(cudaMalloc(&m, 4 * N)); CK(cudaMemset(m, 0, 4 * N)); }
  unsigned *h; CK(cuMemHostAlloc((void **)&h, BYTES < 4096 ? 4096 : BYTES, 0));
  // Each step adds `per` to p[0]: the chain's K adds, or the fan's two.
  unsigned per = fan ? 2 : K;
  // 0: memcpy node, 1: kernel node, 2: no copy.
  cudaGraph_t g[3];
  for (int v = 0; v < 3; v++) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
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
    if (v == 0) CK(cudaMemcpyAsync(h, p, BYTES, cudaMemcpyDeviceToHost, s));
    if (v == 1) copy8<<<1, threads, 0, s>>>((const unsigned long long *)p, (unsigned long long *)h, words);
    CK(cudaStreamEndCapture(s, &g[v]));
  }
  cudaGraphExec_t e[4];
  for (int v = 0; v < 3; v++) CK(cudaGraphInstantiate(&e[v], g[v], 0));
  CK(cudaGraphInstantiateWithFlags(&e[3], g[0], cudaGraphInstantiateFlagDeviceLaunch));
  for (int v = 0; v < 4; v++) CK(cudaGraphUpload(e[v], s));
  CK(cudaStreamSynchronize(s));
  const char *names[] = {"memcpy node", "kernel node (store to pinned)", "no copy (floor)", "memcpy node, device-launch exec"};
  const int V = 4, REPS = 100;
  unsigned expect = 0;
  printf("%s K = %d, %u bytes copied, %d steps per repetition, medians of %d, us per step\n", fan ? "fan" : "chain", K, BYTES, STEPS, REPS);
  double r[2][V];
  long wrong = 0;
  for (int pat = 0; pat < 2; pat++) {
    std::vector<std::vector<double>> t(V);
    for (int rep = 0; rep < REPS + 1; rep++) {
      for (int v = 0; v < V; v++) {
        double t0 = now();
        for (int i = 0; i < STEPS; i++) {
          cudaGraphLaunch(e[v], s);
          expect += per;
          if (pat == 0) {
            cuStreamSynchronize(cs);
            volatile unsigned got = h[0];
            if (v != 2 && got != expect) wrong++;
          }
        }
        if (pat == 1) cuStreamSynchronize(cs);
        if (rep > 0) t[v].push_back((now() - t0) / STEPS);
      }
    }
    for (int v = 0; v < V; v++) { std::sort(t[v].begin(), t[v].end()); r[pat][v] = t[v][REPS / 2]; }
  }
  printf("%-34s %10s %10s %10s %10s\n", "variant", "read", "b2b", "read/memcpy", "b2b/memcpy");
  for (int v = 0; v < V; v++) printf("%-34s %10.2f %10.2f %10.3f %10.3f\n", names[v], r[0][v], r[1][v], r[0][v] / r[0][0], r[1][v] / r[1][0]);
  printf("reads that did not see their step's value: %ld%s\n", wrong, wrong ? "  <-- WRONG" : "");
  return wrong ? 1 : 0;
}
