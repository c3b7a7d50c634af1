// Probe for issue 31 (`heat` at least 1.6x faster than eager): what heat's step costs written
// against the raw runtime, so the example's ratio can be set against the floor of the same work.
// The step is heat.rs's: a 4-byte memset of the flag, stencil u -> v, boundary of v,
// check_finite of v; every 100th step also a 4-byte memset of r, residual, and r copied to
// pinned host memory; then u and v swap. 512 x 512, heat.rs's launch shapes, its kernels
// (examples/kernels/heat.cu). Modes, 1000 steps enqueued back to back then one synchronize,
// median of 9 (µs per step), and the host time of the enqueue loop alone per step:
//   eager   cudaMemsetAsync / kernel launches / cudaMemcpyAsync on the stream (the eager floor)
//   set     one exec per residual choice, the three kernels' pointers set before each launch
//           (cudaGraphExecKernelNodeSetParams, the raw way to swap)
//   execs   one exec per pointer set and residual choice (4), launched in turn (what graph!'s
//           memoized execs do)
//   kexecs  as execs, each memset a kernel node (a fill kernel) instead of a memset node
//   gset    as set, through the generic cuGraphExecNodeSetParams (what graph! calls)
//
//   nvcc -O2 -arch=sm_90 -o heat_floor examples/probes/heat_floor.cu -lcuda && ./heat_floor
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <chrono>
#include <vector>

#include "../kernels/heat.cu"

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));           \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void fill_u32(unsigned *p, unsigned v) { *p = v; }

static double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static const unsigned NX = 512, B = 16, EVERY = 100;
static unsigned nx = NX, ny = NX, cells = NX * NX;
static float alpha = 0.2f;
static unsigned zero_u = 0;
static float *fields[2];
static unsigned *flags;
static float *r;
static float *host_r;
static const dim3 grid2d((NX + B - 1) / B, (NX + B - 1) / B), block2d(B, B);
static const unsigned T = 1024;  // LaunchConfig::for_num_elems: 1024 threads a block
static const dim3 edge_grid((NX + T - 1) / T), cell_grid((NX * NX + T - 1) / T), block1(T);

// The step's work on `s`, u = fields[w], v = fields[1 - w].
static void eager(cudaStream_t s, int w, bool res) {
    float *u = fields[w], *v = fields[1 - w];
    CK(cudaMemsetAsync(flags, 0, 4, s));
    stencil<<<grid2d, block2d, 0, s>>>(nx, ny, alpha, u, v);
    boundary<<<edge_grid, block1, 0, s>>>(nx, ny, v);
    check_finite<<<cell_grid, block1, 0, s>>>(cells, v, flags);
    if (res) {
        CK(cudaMemsetAsync(r, 0, 4, s));
        residual<<<cell_grid, block1, 0, s>>>(cells, u, v, r);
        CK(cudaMemcpyAsync(host_r, r, 4, cudaMemcpyDeviceToHost, s));
    }
}

struct Built {
    cudaGraphExec_t exec;
    cudaGraphNode_t st, bd, cf, rn;
};

static cudaKernelNodeParams kp(void *f, dim3 g, dim3 b, void **args) {
    cudaKernelNodeParams p = {};
    p.func = f;
    p.gridDim = g;
    p.blockDim = b;
    p.kernelParams = args;
    return p;
}

// cuGraphExecNodeSetParams of a kernel node (CUgraphNodeParams, the driver's generic call).
static void gset(cudaGraphExec_t e, cudaGraphNode_t n, const void *f, dim3 g, dim3 b, void **args) {
    CUfunction fn;
    CK(cudaGetFuncBySymbol(&fn, f));
    CUgraphNodeParams p = {};
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    p.kernel.func = fn;
    p.kernel.gridDimX = g.x;
    p.kernel.gridDimY = g.y;
    p.kernel.gridDimZ = g.z;
    p.kernel.blockDimX = b.x;
    p.kernel.blockDimY = b.y;
    p.kernel.blockDimZ = b.z;
    p.kernel.kernelParams = args;
    CUresult r = cuGraphExecNodeSetParams((CUgraphExec)e, (CUgraphNode)n, &p);
    if (r != CUDA_SUCCESS) {
        printf("cuGraphExecNodeSetParams: %d\n", (int)r);
        exit(1);
    }
}

// The step as a graph with plain edges (graph!'s dependencies: the memset beside the stencil,
// check_finite after both), memsets as memset nodes or as fill kernels.
static Built build(int w, bool res, bool kernel_memset) {
    float *u = fields[w], *v = fields[1 - w];
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    auto memset_node = [&](unsigned *p) {
        cudaGraphNode_t n;
        if (kernel_memset) {
            void *a[] = {&p, &zero_u};
            cudaKernelNodeParams q = kp((void *)fill_u32, dim3(1), dim3(1), a);
            CK(cudaGraphAddKernelNode(&n, g, nullptr, 0, &q));
        } else {
            cudaMemsetParams m = {};
            m.dst = p;
            m.value = 0;
            m.elementSize = 4;
            m.width = 1;
            m.height = 1;
            CK(cudaGraphAddMemsetNode(&n, g, nullptr, 0, &m));
        }
        return n;
    };
    Built b;
    cudaGraphNode_t ms = memset_node(flags);
    void *sa[] = {&nx, &ny, &alpha, &u, &v};
    cudaKernelNodeParams p = kp((void *)stencil, grid2d, block2d, sa);
    CK(cudaGraphAddKernelNode(&b.st, g, nullptr, 0, &p));
    void *ba[] = {&nx, &ny, &v};
    p = kp((void *)boundary, edge_grid, block1, ba);
    CK(cudaGraphAddKernelNode(&b.bd, g, &b.st, 1, &p));
    void *ca[] = {&cells, &v, &flags};
    p = kp((void *)check_finite, cell_grid, block1, ca);
    cudaGraphNode_t deps[] = {ms, b.bd};
    CK(cudaGraphAddKernelNode(&b.cf, g, deps, 2, &p));
    if (res) {
        cudaGraphNode_t z = memset_node((unsigned *)r);
        void *ra[] = {&cells, &u, &v, &r};
        p = kp((void *)residual, cell_grid, block1, ra);
        cudaGraphNode_t cn;
        // residual reads v after boundary, writes r after its zeroing.
        cudaGraphNode_t rdeps[] = {z, b.bd};
        CK(cudaGraphAddKernelNode(&b.rn, g, rdeps, 2, &p));
        CK(cudaGraphAddMemcpyNode1D(&cn, g, &b.rn, 1, host_r, r, 4, cudaMemcpyDeviceToHost));
    }
    CK(cudaGraphInstantiate(&b.exec, g, 0));
    CK(cudaGraphUpload(b.exec, 0));
    return b;
}

int main() {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (auto &f : fields) {
        CK(cudaMalloc(&f, cells * sizeof(float)));
        CK(cudaMemset(f, 0, cells * sizeof(float)));
    }
    CK(cudaMalloc(&flags, 4));
    CK(cudaMalloc(&r, 4));
    CK(cudaMallocHost(&host_r, 4));
    // [kernel_memset][w][residual]
    Built execs[2][2][2];
    for (int km = 0; km < 2; km++)
        for (int w = 0; w < 2; w++)
            for (int res = 0; res < 2; res++) execs[km][w][res] = build(w, res, km);
    // Mode set's own execs (its updates must not change the other modes').
    Built sets[2] = {build(0, false, false), build(0, true, false)};
    Built gsets[2] = {build(0, false, false), build(0, true, false)};
    const int steps = 1000;
    const char *names[] = {"eager", "set", "execs", "kexecs", "gset"};
    auto step = [&](int mode, int i) {
        int w = i % 2;
        bool res = i % EVERY == 0;
        switch (mode) {
        case 0:
            eager(s, w, res);
            break;
        case 1: {
            // One exec per residual choice, pointers set for w.
            Built &b = sets[res];
            float *u = fields[w], *v = fields[1 - w];
            void *sa[] = {&nx, &ny, &alpha, &u, &v};
            void *ba[] = {&nx, &ny, &v};
            void *ca[] = {&cells, &v, &flags};
            cudaKernelNodeParams p = kp((void *)stencil, grid2d, block2d, sa);
            CK(cudaGraphExecKernelNodeSetParams(b.exec, b.st, &p));
            p = kp((void *)boundary, edge_grid, block1, ba);
            CK(cudaGraphExecKernelNodeSetParams(b.exec, b.bd, &p));
            p = kp((void *)check_finite, cell_grid, block1, ca);
            CK(cudaGraphExecKernelNodeSetParams(b.exec, b.cf, &p));
            if (res) {
                // The residual node reads u and v too.
                void *ra[] = {&cells, &u, &v, &r};
                p = kp((void *)residual, cell_grid, block1, ra);
                CK(cudaGraphExecKernelNodeSetParams(b.exec, b.rn, &p));
            }
            CK(cudaGraphLaunch(b.exec, s));
            break;
        }
        case 2:
            CK(cudaGraphLaunch(execs[0][w][res].exec, s));
            break;
        case 3:
            CK(cudaGraphLaunch(execs[1][w][res].exec, s));
            break;
        case 4: {
            Built &b = gsets[res];
            float *u = fields[w], *v = fields[1 - w];
            void *sa[] = {&nx, &ny, &alpha, &u, &v};
            void *ba[] = {&nx, &ny, &v};
            void *ca[] = {&cells, &v, &flags};
            gset(b.exec, b.st, (void *)stencil, grid2d, block2d, sa);
            gset(b.exec, b.bd, (void *)boundary, edge_grid, block1, ba);
            gset(b.exec, b.cf, (void *)check_finite, cell_grid, block1, ca);
            if (res) {
                void *ra[] = {&cells, &u, &v, &r};
                gset(b.exec, b.rn, (void *)residual, cell_grid, block1, ra);
            }
            CK(cudaGraphLaunch(b.exec, s));
            break;
        }
        }
    };
    printf("heat 512^2, %d steps a run, median of 9 runs; rounds of the four modes in turn\n", steps);
    printf("round |    eager      set    execs   kexecs     gset | host: eager   set  execs kexecs  gset | eager/execs execs/set gset/set\n");
    for (int round = 0; round < 3; round++) {
        double per[5], host[5];
        for (int mode = 0; mode < 5; mode++) {
            std::vector<double> t, h;
            for (int rep = 0; rep < 9; rep++) {
                CK(cudaStreamSynchronize(s));
                double t0 = now_us();
                for (int i = 0; i < steps; i++) step(mode, i);
                double t1 = now_us();
                CK(cudaStreamSynchronize(s));
                double t2 = now_us();
                t.push_back((t2 - t0) / steps);
                h.push_back((t1 - t0) / steps);
            }
            per[mode] = median(t);
            host[mode] = median(h);
        }
        printf("%5d | %8.2f %8.2f %8.2f %8.2f %8.2f | %11.2f %5.2f %6.2f %6.2f %5.2f | %11.3f %9.3f %8.3f\n",
               round, per[0], per[1], per[2], per[3], per[4], host[0], host[1], host[2], host[3],
               host[4], per[0] / per[2], per[2] / per[1], per[4] / per[1]);
    }
    (void)names;
    // The modes compute the same fields: run 10 steps eagerly and as execs from zero, compare.
    std::vector<float> a(cells), b(cells);
    for (int mode : {0, 1, 2, 3, 4}) {
        for (auto &f : fields) CK(cudaMemsetAsync(f, 0, cells * sizeof(float), s));
        for (int i = 0; i < 10; i++) step(mode, i);
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(mode == 0 ? a.data() : b.data(), fields[0], cells * sizeof(float), cudaMemcpyDeviceToHost));
        if (mode != 0) {
            for (unsigned i = 0; i < cells; i++)
                if (a[i] != b[i]) {
                    printf("MISMATCH mode %s at %u: %g vs %g\n", names[mode], i, b[i], a[i]);
                    return 1;
                }
            printf("mode %s: 10 steps equal eager's, bit for bit\n", names[mode]);
        }
    }
    return 0;
}
