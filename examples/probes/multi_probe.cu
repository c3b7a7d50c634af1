// Probe for issue 19: the floor of a 2-GPU heat step at small sizes (2-GPU machine). Raw driver
// graphs, no Rust: what one launch of heat_multi's step graph costs at 512x512 when nothing is
// updated between launches, against the same kernels on one GPU, so that the goal "the 2-GPU step
// at most 1.3x the 1-GPU step" can be compared with what any graph gets.
//
// Kernels: `step` (y = 0.25 * x + 1 over rows x n cells, 16x16 blocks, as heat's stencil grid)
// and `edge` (one row), on buffers from cuMemAlloc or from the devices' memory pools (as cudarc
// allocates; pool access granted both ways). Graphs, launched 200 times back to back on a stream
// of device 0, then one synchronize; microseconds per launch, median of 7:
//   one:   device 0 only, step then edge on the whole field (heat's 1-GPU step);
//   two-k: step then edge on each device's half, no copy (two independent chains);
//   two-c: two-k, then a peer copy of one row each way, one after the other (heat_multi's graph:
//          both copies touch both slabs' fields, so graph! orders them);
//   two-p: two-k, then the two row copies side by side (each after both chains);
//   two-r: two-k, then each device's kernel reads its halo row from the other device's memory
//          (peer access) instead of a copy node.
// Also the same graphs with device 1's nodes placed on device 0 (`one-2`: four kernels and two
// copies on one device), to separate the cost of the second device from the node count.
//
//   nvcc -ptx -arch=sm_90 -o multi_probe.ptx examples/probes/multi_probe_kernels.cu
//   nvcc -O2 -o multi_probe examples/probes/multi_probe.cu -lcuda && ./multi_probe [n] [ptx]
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <chrono>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        CUresult r_ = (x);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                               \
            const char *s_ = 0;                                                                 \
            cuGetErrorName(r_, &s_);                                                            \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?");          \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

struct Dev {
    CUcontext ctx;
    CUfunction step, edge, pull;
};

static Dev load(CUcontext ctx, const char *ptx) {
    Dev d;
    d.ctx = ctx;
    CK(cuCtxSetCurrent(ctx));
    CUmodule m;
    CK(cuModuleLoadData(&m, ptx));
    CK(cuModuleGetFunction(&d.step, m, "step"));
    CK(cuModuleGetFunction(&d.edge, m, "edge"));
    CK(cuModuleGetFunction(&d.pull, m, "pull"));
    return d;
}

static CUgraphNode kernel(CUgraph g, const Dev &d, CUfunction f, unsigned gx, unsigned gy,
                          unsigned bx, unsigned by, void **args, std::vector<CUgraphNode> deps) {
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    p.kernel.func = f;
    p.kernel.gridDimX = gx;
    p.kernel.gridDimY = gy;
    p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = bx;
    p.kernel.blockDimY = by;
    p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = args;
    p.kernel.ctx = d.ctx;
    CUgraphNode node;
    CK(cuGraphAddNode(&node, g, deps.data(), 0, deps.size(), &p));
    return node;
}

static CUgraphNode copy(CUgraph g, CUcontext ctx, CUdeviceptr src, CUdeviceptr dst, size_t bytes,
                        std::vector<CUgraphNode> deps) {
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    p.memcpy.copyCtx = ctx;
    CUDA_MEMCPY3D &c = p.memcpy.copyParams;
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src;
    c.srcPitch = bytes;
    c.srcHeight = 1;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dst;
    c.dstPitch = bytes;
    c.dstHeight = 1;
    c.WidthInBytes = bytes;
    c.Height = 1;
    c.Depth = 1;
    CUgraphNode node;
    CK(cuGraphAddNode(&node, g, deps.data(), 0, deps.size(), &p));
    return node;
}

// Argument blocks that outlive the node adds (the driver copies them at add time anyway).
struct Args {
    unsigned n, rows;
    CUdeviceptr x, y, peer;
    void *step[4], *edge[2], *pull[3];
    void set() {
        step[0] = &n, step[1] = &rows, step[2] = &x, step[3] = &y;
        edge[0] = &n, edge[1] = &y;
        pull[0] = &n, pull[1] = &peer, pull[2] = &y;
    }
};

// One slab's chain: step over `rows` rows, then edge on its first row. Returns the last node.
static CUgraphNode chain(CUgraph g, const Dev &d, Args &a) {
    a.set();
    CUgraphNode s = kernel(g, d, d.step, (a.n + 15) / 16, (a.rows + 15) / 16, 16, 16, a.step, {});
    return kernel(g, d, d.edge, (a.n + 255) / 256, 1, 256, 1, a.edge, {s});
}

static double time_graph(CUgraph g, CUstream s, CUcontext c0) {
    CK(cuCtxSetCurrent(c0));
    CUgraphExec e;
    CK(cuGraphInstantiate(&e, g, 0));
    CK(cuGraphUpload(e, s));
    for (int i = 0; i < 20; i++) CK(cuGraphLaunch(e, s));
    CK(cuStreamSynchronize(s));
    std::vector<double> t;
    for (int r = 0; r < 7; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 200; i++) CK(cuGraphLaunch(e, s));
        CK(cuStreamSynchronize(s));
        auto t1 = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 200);
    }
    std::sort(t.begin(), t.end());
    CK(cuGraphExecDestroy(e));
    CK(cuGraphDestroy(g));
    return t[3];
}

int main(int argc, char **argv) {
    unsigned n = argc > 1 ? atoi(argv[1]) : 512;
    CK(cuInit(0));
    CUdevice d0, d1;
    CK(cuDeviceGet(&d0, 0));
    CK(cuDeviceGet(&d1, 1));
    CUcontext c0, c1;
    CK(cuDevicePrimaryCtxRetain(&c0, d0));
    CK(cuDevicePrimaryCtxRetain(&c1, d1));
    const char *path = argc > 2 ? argv[2] : "multi_probe.ptx";
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s missing: nvcc -ptx -arch=sm_90 -o %s multi_probe_kernels.cu\n", path, path);
        return 2;
    }
    std::vector<char> ptx(1 << 20);
    ptx.resize(fread(ptx.data(), 1, ptx.size() - 1, f) + 1);
    ptx.back() = 0;
    fclose(f);
    Dev g0 = load(c0, ptx.data()), g1 = load(c1, ptx.data());
    CK(cuCtxSetCurrent(c0));
    CK(cuCtxEnablePeerAccess(c1, 0));
    CK(cuCtxSetCurrent(c1));
    CK(cuCtxEnablePeerAccess(c0, 0));
    for (int i = 0; i < 2; i++) {
        CUmemoryPool pool;
        CK(cuDeviceGetDefaultMemPool(&pool, i == 0 ? d0 : d1));
        CUmemAccessDesc a;
        memset(&a, 0, sizeof a);
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.location.id = i == 0 ? 1 : 0;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CK(cuMemPoolSetAccess(pool, &a, 1));
    }
    CUstream s0, s1;
    CK(cuCtxSetCurrent(c1));
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuCtxSetCurrent(c0));
    CK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    size_t row = n * sizeof(float);
    unsigned half = (n - 2) / 2 + 2;
    printf("n = %u: slab rows %u, row copy %zu bytes; µs per launch, median of 7 x 200\n", n, half, row);
    printf("| memory | one | one-2 | two-k | two-c | two-p | two-r |\n|---|---|---|---|---|---|---|\n");
    for (int pool = 0; pool < 2; pool++) {
        CUdeviceptr x0, y0, x1, y1, xf, yf;
        auto alloc = [&](CUcontext c, CUstream s, size_t bytes) {
            CUdeviceptr p;
            CK(cuCtxSetCurrent(c));
            if (pool) {
                CK(cuMemAllocAsync(&p, bytes, s));
                CK(cuStreamSynchronize(s));
            } else {
                CK(cuMemAlloc(&p, bytes));
            }
            CK(cuMemsetD8(p, 0, bytes));
            return p;
        };
        xf = alloc(c0, s0, row * n), yf = alloc(c0, s0, row * n);
        x0 = alloc(c0, s0, row * half), y0 = alloc(c0, s0, row * half);
        x1 = alloc(c1, s1, row * half), y1 = alloc(c1, s1, row * half);
        double t[6];
        CK(cuCtxSetCurrent(c0));
        // one: the whole field on device 0.
        {
            CUgraph g;
            CK(cuGraphCreate(&g, 0));
            Args a{n, n, xf, yf, 0};
            chain(g, g0, a);
            t[0] = time_graph(g, s0, c0);
        }
        // one-2 and two-*: two slabs, on device 0 and device `second`.
        for (int v = 1; v < 6; v++) {
            bool same = v == 1;
            const Dev &gb = same ? g0 : g1;
            CUdeviceptr xb = x1, yb = y1;
            if (same) {
                // device 0 only: the second slab on device 0's memory.
                xb = alloc(c0, s0, row * half), yb = alloc(c0, s0, row * half);
            }
            CUgraph g;
            CK(cuCtxSetCurrent(c0));
            CK(cuGraphCreate(&g, 0));
            Args a{n, half, x0, y0, 0}, b{n, half, xb, yb, 0};
            Args ra{n, half, 0, y0 + row * (half - 1), yb + row}, rb{n, half, 0, yb, y0 + row * (half - 2)};
            CUgraphNode ea = chain(g, g0, a), eb = chain(g, gb, b);
            int kind = same ? 3 : v; // one-2 is laid out as two-c
            if (kind == 3) {
                CUgraphNode k1 = copy(g, c0, y0 + row * (half - 2), yb, row, {ea, eb});
                copy(g, c0, yb + row, y0 + row * (half - 1), row, {k1});
            } else if (kind == 4) {
                copy(g, c0, y0 + row * (half - 2), yb, row, {ea, eb});
                copy(g, c0, yb + row, y0 + row * (half - 1), row, {ea, eb});
            } else if (kind == 5) {
                ra.set();
                rb.set();
                kernel(g, g0, g0.pull, (n + 255) / 256, 1, 256, 1, ra.pull, {ea, eb});
                kernel(g, gb, gb.pull, (n + 255) / 256, 1, 256, 1, rb.pull, {ea, eb});
            }
            t[v] = time_graph(g, s0, c0);
        }
        printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", pool ? "pool" : "cuMemAlloc",
               t[0], t[1], t[2], t[3], t[4], t[5]);
    }
    return 0;
}
