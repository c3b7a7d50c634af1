// read_costs: what a per-step read of a graph's result costs on top of the raw driver's
// cuGraphLaunch + cuStreamSynchronize + read of 8 pinned bytes (bench rows rc and rd, issue 31),
// one driver call added at a time. No Rust: built and run on the GPU machine with
//
//   nvcc -O2 -o /tmp/read_costs examples/cuda/read_costs.cu -lcuda && /tmp/read_costs [K]
//
// K (default 1): the graph's kernels, a chain of K launches of `add` before the copy (bench's
// chain shape).
//
// Prints the median µs per step of 200 repetitions of 50 steps for each variant (variants
// interleaved within each repetition) and the difference to the base loop. "bs" is an event made
// as cudarc makes a pinned buffer's (CU_EVENT_BLOCKING_SYNC, timing enabled), "dt" one with
// CU_EVENT_DISABLE_TIMING, "bsdt" both flags. The "rd model" rows make the driver calls a
// graph! call, `stream.synchronize()` and `PinnedHostSlice::as_slice()` make around the launch.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <vector>
__global__ void add(unsigned *x, unsigned n) { unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1; }
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("error %d at %s\n", r_, #x); return 1; } } while (0)
int main(int argc, char **argv) {
  int K = argc > 1 ? atoi(argv[1]) : 1;
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  CUcontext ctx; cuCtxGetCurrent(&ctx);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUstream cs = (CUstream)s;
  unsigned *d; CK(cudaMalloc(&d, 4096)); CK(cudaMemset(d, 0, 4096));
  unsigned *h; CK(cuMemHostAlloc((void **)&h, 4096, 0));
  cudaGraph_t g; CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < K; k++) add<<<4, 256, 0, s>>>(d, 1024);
  CK(cudaMemcpyAsync(h, d, 8, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e; CK(cudaGraphInstantiate(&e, g, 0));
  // A second exec of the graph, its copy node's destination set before every launch (bench's
  // rc1), alternating between h and h + 64 or always h.
  cudaGraphExec_t e1; CK(cudaGraphInstantiate(&e1, g, 0));
  size_t nn = 0; CK(cudaGraphGetNodes(g, nullptr, &nn));
  std::vector<cudaGraphNode_t> nodes(nn); CK(cudaGraphGetNodes(g, nodes.data(), &nn));
  cudaGraphNode_t copy = nullptr;
  for (auto n : nodes) { cudaGraphNodeType ty; CK(cudaGraphNodeGetType(n, &ty)); if (ty == cudaGraphNodeTypeMemcpy) copy = n; }
  if (!copy) { printf("no copy node\n"); return 1; }
  CK(cudaGraphUpload(e, s)); CK(cudaGraphUpload(e1, s)); CK(cudaStreamSynchronize(s));
  CUevent bs, dt, bsdt;
  CK(cuEventCreate(&bs, CU_EVENT_BLOCKING_SYNC));
  CK(cuEventCreate(&dt, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&bsdt, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
  const char *names[] = {
    "base: launch+sync+read", "+record(bs)", "+record(bs)+evsync(bs)", "record(bs)+evsync(bs), no stream sync",
    "+record(dt)", "+record(dt)+evsync(dt)", "+record(bsdt)+evsync(bsdt)", "+wait(bs) before launch",
    "+cuPointerGetAttribute(BUFFER_ID)", "+cuCtxGetCurrent x2", "+cuCtxSetCurrent(same)",
    "rd model: ctx x3, attr, wait(bs), record(bs), evsync(bs)", "rd model with dt event",
    "+record(bs)+cuEventQuery(bs)", "+record(dt)+cuEventQuery(dt)", "rd model, query instead of evsync",
    "+cuStreamQuery after sync", "record(dt)+evsync(dt), no stream sync",
    "+a second cuStreamSynchronize",
    "rc1: copy set-params (same dst) + launch + sync, other exec", "rc1: copy set-params (dst alternating) + launch + sync",
    "other exec, launch + sync (no set-params)" };
  const int V = sizeof(names) / sizeof(names[0]);
  const int REPS = 200, STEPS = 50;
  std::vector<std::vector<double>> t(V);
  volatile unsigned sink = 0;
  for (int rep = 0; rep < REPS + 1; rep++) {
    for (int v = 0; v < V; v++) {
      double t0 = now();
      for (int i = 0; i < STEPS; i++) {
        CUcontext c; unsigned long long id;
        bool model = v == 11 || v == 12 || v == 15;
        if (v == 9 || model) { cuCtxGetCurrent(&c); cuCtxGetCurrent(&c); }
        if (v == 10 || model) cuCtxSetCurrent(ctx);
        if (v == 8 || model) cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)h);
        if (v == 7 || v == 11 || v == 15) cuStreamWaitEvent(cs, bs, 0);
        if (v == 12) cuStreamWaitEvent(cs, dt, 0);
        if (v == 19 || v == 20) {
          unsigned *dst = (v == 20 && (i & 1)) ? h + 64 : h;
          cudaGraphExecMemcpyNodeSetParams1D(e1, copy, dst, d, 8, cudaMemcpyDeviceToHost);
        }
        cudaGraphLaunch(v >= 19 ? e1 : e, s);
        CUevent ev = (v == 4 || v == 5 || v == 12 || v == 14 || v == 17) ? dt : v == 6 ? bsdt : bs;
        bool rec = (v >= 1 && v <= 6) || (v >= 11 && v <= 15) || v == 17;
        if (rec) cuEventRecord(ev, cs);
        if (model) cuCtxGetCurrent(&c);
        if (v != 3 && v != 17) cuStreamSynchronize(cs);
        if (v == 18) cuStreamSynchronize(cs);
        if (v == 2 || v == 3 || v == 5 || v == 6 || v == 11 || v == 12 || v == 17) cuEventSynchronize(ev);
        if (v >= 13 && v <= 15) { if (cuEventQuery(ev) != CUDA_SUCCESS) cuEventSynchronize(ev); }
        if (v == 16) cuStreamQuery(cs);
        sink += h[0];
      }
      if (rep > 0) t[v].push_back((now() - t0) / STEPS);
    }
  }
  for (int v = 0; v < V; v++) { std::sort(t[v].begin(), t[v].end()); }
  double base = t[0][REPS / 2];
  printf("K = %d (a chain of %d kernels, then the 8-byte copy)\n", K, K);
  printf("%-60s %10s %8s\n", "variant", "us/step", "vs base");
  for (int v = 0; v < V; v++) printf("%-60s %10.2f %+8.2f\n", names[v], t[v][REPS / 2], t[v][REPS / 2] - base);
  return 0;
}
