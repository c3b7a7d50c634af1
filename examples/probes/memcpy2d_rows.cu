// Which CUDA_MEMCPY3D fields the driver refuses for 2-D copies of rows (depth 1): 29-byte rows
// from device memory (pitch 64) into pinned host or device memory (pitch 37 or 64), with the
// first row given as dstY/srcY or folded into the address. Each case: cuGraphAddNode_v2 (memcpy),
// instantiate, launch, compare with the host model; then cuMemcpy3DAsync with the same fields.
//   nvcc -O2 -o memcpy2d_rows examples/probes/memcpy2d_rows.cu -lcuda && ./memcpy2d_rows
// H200, driver 580 (2026-12-05): Y + Height > the side's srcHeight/dstHeight (when not 0) is
// CUDA_ERROR_INVALID_VALUE for both calls, one row or several, host or device; Y = 0 with the
// address moved, dstHeight = 0, or a height covering Y + Height are accepted and copy right.
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s; cuGetErrorName(r_, &s); printf("  %s -> %s\n", #x, s); return r_; } } while (0)
static CUcontext ctx; static CUstream st;
static CUdeviceptr src, ddst; static unsigned char *hdst; static unsigned char host_src[64*70];
enum { LEN = 64*70 };
static int run(const char* name, int dev_dst, size_t srcY, size_t dstY, size_t srcH, size_t dstH, size_t dst_add, size_t dpitch, size_t H) {
  CUDA_MEMCPY3D p; memset(&p, 0, sizeof p);
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE; p.srcDevice = src; p.srcPitch = 64; p.srcY = srcY; p.srcHeight = srcH;
  if (dev_dst) { p.dstMemoryType = CU_MEMORYTYPE_DEVICE; p.dstDevice = ddst + dst_add; }
  else { p.dstMemoryType = CU_MEMORYTYPE_HOST; p.dstHost = hdst + dst_add; }
  p.dstPitch = dpitch; p.dstY = dstY; p.dstHeight = dstH; p.WidthInBytes = 29; p.Height = H; p.Depth = 1;
  CUgraph g; CUgraphNode n; CUgraphExec e; CK(cuGraphCreate(&g, 0));
  CUgraphNodeParams np; memset(&np, 0, sizeof np); np.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  np.memcpy.copyCtx = ctx; np.memcpy.copyParams = p;
  memset(hdst, 0x5a, LEN); cuMemsetD8(ddst, 0x5a, LEN);
  CUresult add = cuGraphAddNode_v2(&n, g, NULL, NULL, 0, &np);
  const char* s = "ok"; if (add) cuGetErrorName(add, &s);
  int good = -1;
  if (!add) {
    CK(cuGraphInstantiate(&e, g, 0)); CK(cuGraphLaunch(e, st)); CK(cuStreamSynchronize(st));
    unsigned char out[LEN]; if (dev_dst) CK(cuMemcpyDtoH(out, ddst, LEN)); else memcpy(out, hdst, LEN);
    unsigned char want[LEN]; memset(want, 0x5a, LEN);
    for (size_t r = 0; r < H; r++) memcpy(want + dst_add + (dstY + r) * dpitch, host_src + (srcY + r) * 64, 29);
    good = memcmp(out, want, LEN) == 0;
    cuGraphExecDestroy(e);
  }
  // eager, same params
  CUresult ea = cuMemcpy3DAsync(&p, st); cuStreamSynchronize(st);
  const char* es = "ok"; if (ea) cuGetErrorName(ea, &es);
  printf("%-44s add %-26s data %s  eager %s\n", name, s, good < 0 ? "-" : good ? "right" : "WRONG", es);
  cuGraphDestroy(g); return 0;
}
int main() {
  CUdevice d; CK(cuInit(0)); CK(cuDeviceGet(&d, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, d)); CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < LEN; i++) host_src[i] = (unsigned char)(i * 73 ^ (i >> 5));
  CK(cuMemAlloc(&src, LEN)); CK(cuMemcpyHtoD(src, host_src, LEN)); CK(cuMemAlloc(&ddst, LEN));
  CK(cuMemHostAlloc((void**)&hdst, LEN, 0));
  run("host p37 Y0 H5 dstH5", 0, 0, 0, 5, 5, 0, 37, 5);
  run("host p37 dstY2 dstH5 (old crate)", 0, 0, 2, 5, 5, 0, 37, 5);
  run("host p37 dstY2 dstH7", 0, 0, 2, 5, 7, 0, 37, 5);
  run("host p37 dstY2 dstH0", 0, 0, 2, 5, 0, 0, 37, 5);
  run("host p37 Y0 addr+74 (new crate)", 0, 0, 0, 5, 5, 74, 37, 5);
  run("host p64 dstY2 dstH5", 0, 0, 2, 5, 5, 0, 64, 5);
  run("host p37 srcY2 srcH5", 0, 2, 0, 5, 5, 0, 37, 5);
  run("dev p37 dstY2 dstH5", 1, 0, 2, 5, 5, 0, 37, 5);
  run("dev p37 Y0 addr+74", 1, 0, 0, 5, 5, 74, 37, 5);
  run("host p37 dstY3 H1 dstH1", 0, 0, 3, 1, 1, 0, 37, 1);
  run("host p37 Y0 addr+111 H1", 0, 0, 0, 1, 1, 111, 37, 1);
  return 0;
}
