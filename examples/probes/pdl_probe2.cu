// Second probe for issue 16: why bench's raw chain (cudarc, driver API) costs 0.92 us per node
// with plain edges where pdl_probe.cu's costs 0.73. A chain built with the driver API as bench's
// raw rows build it, and three things varied: the kernel's body (bench.cu's `add_wait`, with
// and without `launch_dependents`, and pdl_probe.cu's rmw), where the kernel comes from (nvcc's
// sm_90 SASS, or NVRTC's compute_90 PTX loaded with cuModuleLoadData, as bench does) and where
// the buffer comes from (cudaMalloc, or the stream-ordered pool, cudaMallocAsync, as cudarc
// allocates). Run on the GPU machine:
//
//   nvcc -O3 -arch=sm_90 -o pdl_probe2 examples/probes/pdl_probe2.cu -lcuda -lnvrtc && ./pdl_probe2
#include <cuda.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e = (x);                                                               \
        if (e != cudaSuccess) {                                                            \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define CU(x)                                                                              \
    do {                                                                                   \
        CUresult e = (x);                                                                  \
        if (e != CUDA_SUCCESS) {                                                           \
            printf("%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)e);                      \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define ADD_WAIT_BODY                                                                      \
    asm volatile("griddepcontrol.wait;" ::: "memory");                                     \
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;                                    \
    if (i < n) x[i] += v;
extern "C" __global__ void add_wait(unsigned n, unsigned v, unsigned *x) { ADD_WAIT_BODY }

// Kernel bodies compiled by NVRTC (all with add_wait's parameters): bench's add_wait; the same
// with `griddepcontrol.launch_dependents` after the write (bench's add_wait_trigger); and
// pdl_probe.cu's rmw body (x[threadIdx.x] += 1, no bounds check), with and without that signal.
static const char *SRC =
    "#define WAIT asm volatile(\"griddepcontrol.wait;\" ::: \"memory\")\n"
    "#define SIGNAL asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\")\n"
    "extern \"C\" __global__ void add_wait(unsigned n, unsigned v, unsigned *x) {\n"
    "    WAIT; unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += v; }\n"
    "extern \"C\" __global__ void add_wait_trigger(unsigned n, unsigned v, unsigned *x) {\n"
    "    WAIT; unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += v; SIGNAL; }\n"
    "extern \"C\" __global__ void rmw(unsigned n, unsigned v, unsigned *x) {\n"
    "    WAIT; x[threadIdx.x] += 1; }\n"
    "extern \"C\" __global__ void rmw_trigger(unsigned n, unsigned v, unsigned *x) {\n"
    "    WAIT; x[threadIdx.x] += 1; SIGNAL; }\n";

static CUmodule nvrtc_module(const char *arch) {
    nvrtcProgram prog;
    nvrtcCreateProgram(&prog, SRC, "add_wait.cu", 0, nullptr, nullptr);
    const char *opts[] = {arch};
    if (nvrtcCompileProgram(prog, 1, opts) != NVRTC_SUCCESS) {
        printf("nvrtc failed\n");
        exit(1);
    }
    size_t n;
    nvrtcGetPTXSize(prog, &n);
    std::vector<char> ptx(n);
    nvrtcGetPTX(prog, ptx.data());
    CUmodule m;
    CU(cuModuleLoadData(&m, ptx.data()));
    return m;
}

// us per node of K launches of the chain, median of 5 runs of REPS graph launches.
static double time_chain(CUfunction f, unsigned *x, int K, bool prog, cudaStream_t s) {
    const int REPS = 200;
    CUgraph g;
    CU(cuGraphCreate(&g, 0));
    std::vector<CUgraphNode> nodes(K);
    unsigned n = 32, one = 1;
    void *args[3] = {&n, &one, &x};
    for (int i = 0; i < K; i++) {
        CUDA_KERNEL_NODE_PARAMS p = {};
        p.func = f;
        p.gridDimX = p.gridDimY = p.gridDimZ = 1;
        p.blockDimX = 32;
        p.blockDimY = p.blockDimZ = 1;
        p.kernelParams = args;
        CU(cuGraphAddKernelNode(&nodes[i], g, nullptr, 0, &p));
        if (i > 0) {
            CUgraphEdgeData ed = {};
            if (prog) {
                ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
                ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER;
            }
#if CUDA_VERSION >= 13000
            CU(cuGraphAddDependencies(g, &nodes[i - 1], &nodes[i], &ed, 1));
#else
            CU(cuGraphAddDependencies_v2(g, &nodes[i - 1], &nodes[i], &ed, 1));
#endif
        }
    }
    CUgraphExec ex;
    CU(cuGraphInstantiate(&ex, g, 0));
    CK(cudaMemsetAsync(x, 0, 32 * sizeof(unsigned), s));
    for (int w = 0; w < 10; w++) CU(cuGraphLaunch(ex, (CUstream)s));
    CK(cudaStreamSynchronize(s));
    std::vector<double> t;
    for (int run = 0; run < 5; run++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < REPS; r++) CU(cuGraphLaunch(ex, (CUstream)s));
        CK(cudaStreamSynchronize(s));
        auto t1 = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / REPS / K);
    }
    unsigned h[32];
    CK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 32; i++)
        if (h[i] != (unsigned)(K * (10 + 5 * REPS))) {
            printf("WRONG x[%d]=%u\n", i, h[i]);
            exit(1);
        }
    CU(cuGraphExecDestroy(ex));
    CU(cuGraphDestroy(g));
    std::sort(t.begin(), t.end());
    return t[2];
}

int main() {
    CK(cudaFree(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaFunction_t rf;
    CK(cudaGetFuncBySymbol(&rf, (const void *)add_wait));
    CUmodule m = nvrtc_module("--gpu-architecture=compute_90");
    struct {
        const char *name;
        CUfunction f;
    } fs[5] = {{"nvcc sm_90 add_wait", (CUfunction)rf}, {"add_wait", nullptr},
               {"add_wait_trigger", nullptr}, {"rmw", nullptr}, {"rmw_trigger", nullptr}};
    for (int i = 1; i < 5; i++) CU(cuModuleGetFunction(&fs[i].f, m, fs[i].name));
    unsigned *xm, *xa;
    CK(cudaMalloc(&xm, 4096));
    CK(cudaMallocAsync(&xa, 4096, s));
    CK(cudaStreamSynchronize(s));
    printf("| kernel from | buffer from | K | plain us/node | programmatic (LAUNCH_ORDER) us/node | ratio |\n|---|---|---|---|---|---|\n");
    for (auto &fn : fs) {
        for (int mem = 0; mem < 2; mem++) {
            for (int K : {100, 1000}) {
                unsigned *x = mem ? xa : xm;
                double pl = time_chain(fn.f, x, K, false, s);
                double pr = time_chain(fn.f, x, K, true, s);
                printf("| %s | %s | %d | %.3f | %.3f | %.3f |\n", fn.name,
                       mem ? "cudaMallocAsync (pool)" : "cudaMalloc", K, pl, pr, pr / pl);
            }
        }
    }
    return 0;
}
