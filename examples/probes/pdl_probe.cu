// Probe for issue 16: what a chain of K tiny kernels costs per node in a raw CUDA graph with
// plain edges and with programmatic edges, for several kernel bodies, so that BENCHMARKS.md can
// say which kernel DESIGN.md's 0.73 -> 0.41 us per node came from. Plain CUDA C (runtime API),
// built and run on the GPU machine, where nvcc is:
//
//   nvcc -O3 -arch=sm_90 -o pdl_probe examples/probes/pdl_probe.cu && ./pdl_probe
//
// Kernel bodies (1 block x 32 threads, `griddepcontrol.wait` first, `launch_dependents` last):
//   rmw    x[t] += 1 on one buffer shared by the chain (bench's `add_wait`: data flows through it)
//   write  x[t] = node index (each kernel writes, none reads)
//   none   no memory access at all
// Edges: plain; programmatic from port PROGRAMMATIC; programmatic from port LAUNCH_ORDER.
// Time: wall time of REPS graph launches back to back and one synchronize, per node, median of
// 5 such runs. Each graph's result is checked after the timing.
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

__device__ __forceinline__ void wait_() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void signal_() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__global__ void k_rmw(unsigned *x, unsigned v) { wait_(); x[threadIdx.x] += 1; signal_(); }
__global__ void k_write(unsigned *x, unsigned v) { wait_(); x[threadIdx.x] = v; signal_(); }
__global__ void k_none(unsigned *x, unsigned v) { wait_(); signal_(); }

int main() {
    const int REPS = 200;
    unsigned *x;
    CK(cudaMalloc(&x, 32 * sizeof(unsigned)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const char *kn[3] = {"rmw", "write", "none"};
    void *kf[3] = {(void *)k_rmw, (void *)k_write, (void *)k_none};
    const char *en[3] = {"plain", "prog/PROGRAMMATIC", "prog/LAUNCH_ORDER"};
    printf("| kernel | K | plain us/node | prog port PROGRAMMATIC | prog port LAUNCH_ORDER | ratio PROG | ratio LO |\n|---|---|---|---|---|---|---|\n");
    for (int kk = 0; kk < 3; kk++) {
        for (int K : {10, 100, 1000}) {
            double per[3];
            for (int e = 0; e < 3; e++) {
                cudaGraph_t g;
                CK(cudaGraphCreate(&g, 0));
                std::vector<cudaGraphNode_t> nodes(K);
                std::vector<unsigned> vals(K);
                for (int i = 0; i < K; i++) {
                    vals[i] = i + 1;
                    void *args[2] = {&x, &vals[i]};
                    cudaKernelNodeParams p = {};
                    p.func = kf[kk];
                    p.gridDim = dim3(1);
                    p.blockDim = dim3(32);
                    p.kernelParams = args;
                    CK(cudaGraphAddKernelNode(&nodes[i], g, nullptr, 0, &p));
                    if (i > 0) {
                        cudaGraphEdgeData ed = {};
                        if (e == 1) {
                            ed.type = cudaGraphDependencyTypeProgrammatic;
                            ed.from_port = cudaGraphKernelNodePortProgrammatic;
                        } else if (e == 2) {
                            ed.type = cudaGraphDependencyTypeProgrammatic;
                            ed.from_port = cudaGraphKernelNodePortLaunchCompletion;
                        }
                        #if CUDART_VERSION >= 13000
                        CK(cudaGraphAddDependencies(g, &nodes[i - 1], &nodes[i], &ed, 1));
#else
                        CK(cudaGraphAddDependencies_v2(g, &nodes[i - 1], &nodes[i], &ed, 1));
#endif
                    }
                }
                cudaGraphExec_t ex;
                CK(cudaGraphInstantiate(&ex, g, 0));
                CK(cudaMemsetAsync(x, 0, 32 * sizeof(unsigned), s));
                CK(cudaGraphUpload(ex, s));
                for (int w = 0; w < 10; w++) CK(cudaGraphLaunch(ex, s));
                CK(cudaStreamSynchronize(s));
                std::vector<double> t;
                for (int run = 0; run < 5; run++) {
                    auto t0 = std::chrono::steady_clock::now();
                    for (int r = 0; r < REPS; r++) CK(cudaGraphLaunch(ex, s));
                    CK(cudaStreamSynchronize(s));
                    auto t1 = std::chrono::steady_clock::now();
                    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / REPS / K);
                }
                std::sort(t.begin(), t.end());
                per[e] = t[2];
                unsigned h[32];
                CK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
                unsigned want = kk == 0 ? (unsigned)(K * (10 + 5 * REPS)) : kk == 1 ? (unsigned)K : 0;
                for (int i = 0; i < 32; i++)
                    if (h[i] != want) {
                        printf("WRONG: %s K=%d %s x[%d]=%u want %u\n", kn[kk], K, en[e], i, h[i], want);
                        return 1;
                    }
                CK(cudaGraphExecDestroy(ex));
                CK(cudaGraphDestroy(g));
            }
            printf("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", kn[kk], K, per[0], per[1], per[2],
                   per[1] / per[0], per[2] / per[0]);
        }
    }
    return 0;
}
