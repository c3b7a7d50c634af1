// Probe for issue 19: which peer memcpy nodes the driver accepts (2-GPU machine). A copy of 4 KiB
// from device 0 to device 1, buffers from cuMemAlloc or from each device's default memory pool
// (cuMemAllocAsync, as cudarc allocates), with peer access enabled (cuCtxEnablePeerAccess) and,
// for pool memory, also granted on the pools (cuMemPoolSetAccess), added with cuGraphAddNode
// (CUDA_MEMCPY_NODE_PARAMS, copyCtx c0, c1 or null) or cuGraphAddMemcpyNode (ctx c0 or c1); each
// accepted graph is instantiated, launched on a stream of device 0 and its result checked.
//
//   nvcc -o peer_probe examples/probes/peer_probe.cu -lcuda && ./peer_probe
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static const char *name(CUresult r) {
    const char *s = 0;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

static void run(const char *what, CUcontext c0, CUcontext c1, CUdeviceptr src, CUdeviceptr dst,
                CUstream s) {
    for (int api = 0; api < 2; api++) {
        for (int k = 0; k < (api == 0 ? 3 : 2); k++) {
            CUcontext ctx = k == 0 ? c0 : k == 1 ? c1 : 0;
            cuCtxSetCurrent(c0);
            CUgraph g;
            cuGraphCreate(&g, 0);
            CUDA_MEMCPY3D p;
            memset(&p, 0, sizeof p);
            p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            p.srcDevice = src;
            p.srcPitch = 4096;
            p.srcHeight = 1;
            p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            p.dstDevice = dst;
            p.dstPitch = 4096;
            p.dstHeight = 1;
            p.WidthInBytes = 4096;
            p.Height = 1;
            p.Depth = 1;
            CUgraphNode n;
            CUresult r;
            if (api == 0) {
                CUgraphNodeParams np;
                memset(&np, 0, sizeof np);
                np.type = CU_GRAPH_NODE_TYPE_MEMCPY;
                np.memcpy.copyCtx = ctx;
                np.memcpy.copyParams = p;
                r = cuGraphAddNode(&n, g, 0, 0, 0, &np);
            } else {
                r = cuGraphAddMemcpyNode(&n, g, 0, 0, &p, ctx);
            }
            const char *res = "-";
            if (r == CUDA_SUCCESS) {
                CUgraphExec e;
                CUresult ri = cuGraphInstantiate(&e, g, 0);
                if (ri != CUDA_SUCCESS) {
                    res = name(ri);
                } else {
                    cuCtxSetCurrent(c1);
                    cuMemsetD8(dst, 0, 4096);
                    cuCtxSetCurrent(c0);
                    cuMemsetD8(src, 7, 4096);
                    CUresult rl = cuGraphLaunch(e, s);
                    CUresult rs = cuStreamSynchronize(s);
                    unsigned char h[4096];
                    cuCtxSetCurrent(c1);
                    cuMemcpyDtoH(h, dst, 4096);
                    int ok = 1;
                    for (int i = 0; i < 4096; i++) ok &= h[i] == 7;
                    res = rl != CUDA_SUCCESS ? name(rl) : rs != CUDA_SUCCESS ? name(rs) : ok ? "copied, right" : "WRONG";
                    cuCtxSetCurrent(c0);
                    cuGraphExecDestroy(e);
                }
            }
            printf("| %s | %s | copyCtx %s | %s | %s |\n", what,
                   api == 0 ? "cuGraphAddNode" : "cuGraphAddMemcpyNode",
                   k == 0 ? "c0 (src, launch)" : k == 1 ? "c1 (dst)" : "null", name(r), res);
            cuGraphDestroy(g);
        }
    }
}

int main() {
    cuInit(0);
    CUdevice d0, d1;
    cuDeviceGet(&d0, 0);
    cuDeviceGet(&d1, 1);
    CUcontext c0, c1;
    cuDevicePrimaryCtxRetain(&c0, d0);
    cuDevicePrimaryCtxRetain(&c1, d1);
    CUstream s0, s1;
    cuCtxSetCurrent(c1);
    cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING);
    CUdeviceptr m1, p1;
    cuMemAlloc(&m1, 4096);
    cuMemAllocAsync(&p1, 4096, s1);
    cuStreamSynchronize(s1);
    cuCtxSetCurrent(c0);
    cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING);
    CUdeviceptr m0, p0;
    cuMemAlloc(&m0, 4096);
    cuMemAllocAsync(&p0, 4096, s0);
    cuStreamSynchronize(s0);
    printf("| buffers | API | copyCtx | add | launch |\n|---|---|---|---|---|\n");
    run("cuMemAlloc, no peer access", c0, c1, m0, m1, s0);
    run("pool, no peer access", c0, c1, p0, p1, s0);
    cuCtxSetCurrent(c0);
    printf("enable c0->c1: %s\n", name(cuCtxEnablePeerAccess(c1, 0)));
    cuCtxSetCurrent(c1);
    printf("enable c1->c0: %s\n", name(cuCtxEnablePeerAccess(c0, 0)));
    run("cuMemAlloc, peer access", c0, c1, m0, m1, s0);
    run("pool, peer access", c0, c1, p0, p1, s0);
    // Grant each device access to the other's default pool.
    for (int i = 0; i < 2; i++) {
        CUmemoryPool pool;
        cuDeviceGetDefaultMemPool(&pool, i == 0 ? d0 : d1);
        CUmemAccessDesc a;
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.location.id = i == 0 ? 1 : 0;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        printf("pool access %d: %s\n", i, name(cuMemPoolSetAccess(pool, &a, 1)));
    }
    run("pool, peer and pool access", c0, c1, p0, p1, s0);
    return 0;
}
