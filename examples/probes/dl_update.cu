// dl_update: is a kernel node of an exec instantiated for device launch safe to update while
// an earlier host launch of that exec still runs (review 27b's failing test)? No Rust: built and
// run on the GPU machine with
//
//   nvcc -O2 -o /tmp/dl_update examples/probes/dl_update.cu && /tmp/dl_update
//
// One slow kernel node `out[i] = a` (spins first). Launch with (out1, 1), update the node to
// (out2, 2) while that launch runs, launch again; then check that out1 holds 1 and out2 holds 2.
// Cases: the second launch on the same stream; on another stream; on another stream that waits
// for an event recorded after the first launch; the same three with an upload
// (cudaGraphUpload on the second launch's stream) after the update. Default-flag execs as the
// control. The first launch either runs already when the node is updated, or is queued behind a
// slow kernel. Prints the elements of out1 / out2 that are wrong, per case (0 / 0 is right).
#include <cuda_runtime.h>
#include <stdio.h>
#include <vector>
__global__ void slow_write(unsigned *out, unsigned a, unsigned spins) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  long long t0 = clock64();
  while (clock64() - t0 < (long long)spins) {}
  out[i] = a;
}
#define CK(x) do { cudaError_t r_ = (x); if (r_) { printf("error %s at %s\n", cudaGetErrorString(r_), #x); return 1; } } while (0)
int main() {
  const unsigned N = 1 << 14, B = 256;
  CK(cudaSetDevice(0));
  cudaStream_t s, s2; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  unsigned *o1, *o2; CK(cudaMalloc(&o1, 4 * N + 128)); CK(cudaMalloc(&o2, 4 * N));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::vector<unsigned> h(N);
  const char *how[] = {"same stream", "other stream", "other stream waiting on an event"};
  for (int queued = 0; queued < 2; queued++)
  for (int dl = 0; dl < 2; dl++) {
    for (int up = 0; up < 2; up++) {
      for (int c = 0; c < 3; c++) {
        long bad1 = 0, bad2 = 0;
        for (int rep = 0; rep < 5; rep++) {
          CK(cudaMemset(o1, 0, 4 * N)); CK(cudaMemset(o2, 0, 4 * N)); CK(cudaDeviceSynchronize());
          cudaGraph_t g; CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          slow_write<<<N / B, B, 0, s>>>(o1, 1, 2000000);
          CK(cudaStreamEndCapture(s, &g));
          cudaGraphNode_t node; size_t nn = 1; CK(cudaGraphGetNodes(g, &node, &nn));
          cudaGraphExec_t e;
          CK(cudaGraphInstantiateWithFlags(&e, g, dl ? cudaGraphInstantiateFlagDeviceLaunch : 0));
          CK(cudaGraphUpload(e, s)); CK(cudaStreamSynchronize(s));
          // queued: the first launch waits behind a slow kernel, so it has not started when
          // the node is updated.
          if (queued) slow_write<<<1, 32, 0, s>>>(o1 + N, 0, 20000000);
          CK(cudaGraphLaunch(e, s));
          cudaKernelNodeParams p; CK(cudaGraphKernelNodeGetParams(node, &p));
          unsigned *o = o2; unsigned a = 2, spins = 2000000;
          void *args[] = {&o, &a, &spins};
          p.kernelParams = args;
          cudaStream_t t = c == 0 ? s : s2;
          if (c == 2) { CK(cudaEventRecord(ev, s)); CK(cudaStreamWaitEvent(s2, ev, 0)); }
          CK(cudaGraphExecKernelNodeSetParams(e, node, &p));
          if (up) CK(cudaGraphUpload(e, t));
          CK(cudaGraphLaunch(e, t));
          CK(cudaDeviceSynchronize());
          CK(cudaMemcpy(h.data(), o1, 4 * N, cudaMemcpyDeviceToHost));
          for (unsigned i = 0; i < N; i++) bad1 += h[i] != 1;
          CK(cudaMemcpy(h.data(), o2, 4 * N, cudaMemcpyDeviceToHost));
          for (unsigned i = 0; i < N; i++) bad2 += h[i] != 2;
          CK(cudaGraphExecDestroy(e)); CK(cudaGraphDestroy(g));
        }
        printf("%-8s %-14s %-10s %-34s wrong out1 %7ld  out2 %7ld (of %u x 5)\n", queued ? "queued" : "running", dl ? "device-launch" : "default", up ? "upload" : "no upload", how[c], bad1, bad2, N);
      }
    }
  }
  return 0;
}
