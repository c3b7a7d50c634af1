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
//   chain   as execs, the flag's memset first in the chain (memset -> stencil -> boundary ->
//           check_finite) instead of beside the stencil
//   mtail   as execs, the memset between boundary and check_finite
//   pexecs  as execs, the kernel-to-kernel edges programmatic (port LAUNCH_ORDER, graph!'s)
//   pchain  as chain, the kernel-to-kernel edges programmatic
//   pjoin   as pexecs, but the edge into check_finite (which joins the memset's branch) plain
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

// An edge from -> to, programmatic (port LAUNCH_ORDER, as graph! adds them) or plain.
static void dep(cudaGraph_t g, cudaGraphNode_t from, cudaGraphNode_t to, bool prog) {
    cudaGraphEdgeData ed = {};
    if (prog) {
        ed.type = cudaGraphDependencyTypeProgrammatic;
        ed.from_port = cudaGraphKernelNodePortLaunchCompletion;
    }
#if CUDART_VERSION >= 13000
    CK(cudaGraphAddDependencies(g, &from, &to, &ed, 1));
#else
    CK(cudaGraphAddDependencies_v2(g, &from, &to, &ed, 1));
#endif
}

// Where the flag's memset sits: beside the stencil (graph!'s dependencies: check_finite after
// both), first in the chain, or between boundary and check_finite.
enum Topo { FORK, CHAIN, MTAIL, FORK_PLAIN_JOIN };

// The step as a graph, memsets as memset nodes or as fill kernels, kernel-to-kernel edges plain
// or programmatic.
static Built build(int w, bool res, bool kernel_memset, Topo topo = FORK, bool prog = false) {
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
    CK(cudaGraphAddKernelNode(&b.bd, g, nullptr, 0, &p));
    void *ca[] = {&cells, &v, &flags};
    p = kp((void *)check_finite, cell_grid, block1, ca);
    CK(cudaGraphAddKernelNode(&b.cf, g, nullptr, 0, &p));
    dep(g, b.st, b.bd, prog);
    switch (topo) {
    case FORK:
        dep(g, ms, b.cf, false);
        dep(g, b.bd, b.cf, prog);
        break;
    case FORK_PLAIN_JOIN:
        dep(g, ms, b.cf, false);
        dep(g, b.bd, b.cf, false);
        break;
    case CHAIN:
        dep(g, ms, b.st, false);
        dep(g, b.bd, b.cf, prog);
        break;
    case MTAIL:
        dep(g, b.bd, ms, false);
        dep(g, ms, b.cf, false);
        break;
    }
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
    // [variant][w][residual]: execs, kexecs, chain, mtail, pexecs, pchain, pjoin
    const int VARIANTS = 7;
    Built execs[VARIANTS][2][2];
    for (int w = 0; w < 2; w++)
        for (int res = 0; res < 2; res++) {
            execs[0][w][res] = build(w, res, false);
            execs[1][w][res] = build(w, res, true);
            execs[2][w][res] = build(w, res, false, CHAIN);
            execs[3][w][res] = build(w, res, false, MTAIL);
            execs[4][w][res] = build(w, res, false, FORK, true);
            execs[5][w][res] = build(w, res, false, CHAIN, true);
            execs[6][w][res] = build(w, res, false, FORK_PLAIN_JOIN, true);
        }
    // Mode set's own execs (its updates must not change the other modes').
    Built sets[2] = {build(0, false, false), build(0, true, false)};
    Built gsets[2] = {build(0, false, false), build(0, true, false)};
    const int steps = 1000;
    const int MODES = 10;
    const char *names[] = {"eager", "set", "execs", "kexecs", "gset", "chain", "mtail", "pexecs", "pchain", "pjoin"};
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
        case 5:
        case 6:
        case 7:
        case 8:
        case 9:
            CK(cudaGraphLaunch(execs[mode - 3][w][res].exec, s));
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
    printf("heat 512^2, %d steps a run, median of 9 runs; rounds of the modes in turn (us per step, host us per step)\n", steps);
    for (int round = 0; round < 3; round++) {
        double per[MODES], host[MODES];
        for (int mode = 0; mode < MODES; mode++) {
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
        printf("round %d:", round);
        for (int mode = 0; mode < MODES; mode++) printf(" %s %.2f (%.2f)", names[mode], per[mode], host[mode]);
        printf(" | eager/execs %.3f eager/chain %.3f chain/execs %.3f pchain/chain %.3f\n", per[0] / per[2],
               per[0] / per[5], per[5] / per[2], per[8] / per[5]);
    }
    (void)names;
    // The modes compute the same fields: run 10 steps eagerly and as execs from zero, compare.
    std::vector<float> a(cells), b(cells);
    for (int mode = 0; mode < MODES; mode++) {
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
