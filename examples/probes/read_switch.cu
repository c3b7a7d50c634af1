// read_switch: in a loop that waits for every step and reads its 8-byte result (bench's read
// rows, issue 31), what launching the other of two execs costs against relaunching one exec and
// against one set-params of the copy node (rc1). No Rust: built and run on the GPU machine with
//
//   nvcc -O2 -o /tmp/read_switch examples/probes/read_switch.cu -lcuda && /tmp/read_switch SHAPE K
//
// SHAPE chain: K launches of `add` on one buffer; fan: `add` on p, K `acc(p -> mid[i])`, `add`
// on p (bench's shapes), then the copy of p's first 8 bytes into pinned memory. Prints the median
// µs per step of 100 repetitions of STEPS steps per variant, variants interleaved per repetition.
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
  int STEPS = K >= 1000 ? 5 : K >= 100 ? 20 : 50;
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
  size_t nn = 0; CK(cudaGraphGetNodes(g, nullptr, &nn));
  std::vector<cudaGraphNode_t> nodes(nn); CK(cudaGraphGetNodes(g, nodes.data(), &nn));
  cudaGraphNode_t copy = nullptr;
  for (auto n : nodes) { cudaGraphNodeType ty; CK(cudaGraphNodeGetType(n, &ty)); if (ty == cudaGraphNodeTypeMemcpy) copy = n; }
  if (!copy) { printf("no copy node\n"); return 1; }
  // e: rc's exec; e1: rc1's (copy destination set before every launch, alternating h / h + 64);
  // ea, eb: the two memoized execs, one per destination.
  cudaGraphExec_t e, e1, ea, eb;
  CK(cudaGraphInstantiate(&e, g, 0)); CK(cudaGraphInstantiate(&e1, g, 0));
  CK(cudaGraphInstantiate(&ea, g, 0)); CK(cudaGraphInstantiate(&eb, g, 0));
  CK(cudaGraphExecMemcpyNodeSetParams1D(eb, copy, h + 64, p, 8, cudaMemcpyDeviceToHost));
  // da, db: the same two execs instantiated for device launch (uploaded once, to stay
  // resident); skipped when the driver refuses the flag for this graph.
  cudaGraphExec_t da = nullptr, db = nullptr;
  bool dev = cudaGraphInstantiateWithFlags(&da, g, cudaGraphInstantiateFlagDeviceLaunch) == cudaSuccess &&
             cudaGraphInstantiateWithFlags(&db, g, cudaGraphInstantiateFlagDeviceLaunch) == cudaSuccess;
  cudaGetLastError();
  if (dev) CK(cudaGraphExecMemcpyNodeSetParams1D(db, copy, h + 64, p, 8, cudaMemcpyDeviceToHost));
  if (dev) { CK(cudaGraphUpload(da, s)); CK(cudaGraphUpload(db, s)); }
  else printf("device-launch instantiation refused: its rows repeat rc\n");
  for (auto x : {e, e1, ea, eb}) CK(cudaGraphUpload(x, s));
  CK(cudaStreamSynchronize(s));
  CUevent dt; CK(cuEventCreate(&dt, CU_EVENT_DISABLE_TIMING));
  const char *names[] = {"rc: one exec, launch+sync+read", "rc1: set-params (dst alternating) + launch + sync",
                         "two execs alternating, launch + sync", "two execs alternating, record(dt)+evsync",
                         "one exec, record(dt)+evsync", "rc1 again (order check)", "rc again (order check)",
                         "two device-launch execs alternating, launch + sync", "two execs alternating again (order check)"};
  const int V = sizeof(names) / sizeof(names[0]);
  const int REPS = 100;
  std::vector<std::vector<double>> t(V);
  volatile unsigned sink = 0;
  for (int rep = 0; rep < REPS + 1; rep++) {
    for (int v = 0; v < V; v++) {
      double t0 = now();
      for (int i = 0; i < STEPS; i++) {
        unsigned *dst = (i & 1) ? h + 64 : h;
        cudaGraphExec_t x = e;
        if (v == 1 || v == 5) { cudaGraphExecMemcpyNodeSetParams1D(e1, copy, dst, p, 8, cudaMemcpyDeviceToHost); x = e1; }
        if (v == 2 || v == 3 || v == 8) x = (i & 1) ? eb : ea;
        if (v == 7 && dev) x = (i & 1) ? db : da;
        cudaGraphLaunch(x, s);
        if (v == 3 || v == 4) { cuEventRecord(dt, cs); cuEventSynchronize(dt); }
        else cuStreamSynchronize(cs);
        sink += dst[0];
      }
      if (rep > 0) t[v].push_back((now() - t0) / STEPS);
    }
  }
  for (int v = 0; v < V; v++) std::sort(t[v].begin(), t[v].end());
  double base = t[0][REPS / 2], b1 = t[1][REPS / 2];
  printf("%s K = %d, %d steps per repetition, medians of %d\n", fan ? "fan" : "chain", K, STEPS, REPS);
  printf("%-55s %10s %8s %8s\n", "variant", "us/step", "vs rc", "/ rc1");
  for (int v = 0; v < V; v++) printf("%-55s %10.2f %+8.2f %8.3f\n", names[v], t[v][REPS / 2], t[v][REPS / 2] - base, t[v][REPS / 2] / b1);
  return 0;
}
