// Does cuModuleUnload wait for a kernel of the module that is still running? (SAFETY.md item 7:
// a kernels! struct dropped, or a variant evicted, while a launch of its function may run.)
//
//   nvcc -O2 -o unload_probe unload_probe.cu -lcuda -lnvrtc && ./unload_probe
//
// The module is the PTX that NVRTC makes of SRC below, loaded afresh for every launch, as a
// `kernels!` struct loads its module. Each case launches `slow` (one block,
// spinning about SPIN_MS on clock64, then writing 42 + tag to out[0]), unloads the module at
// once, and measures how long cuModuleUnload took; then it synchronizes and checks out[0] and
// the context's error. Cases:
//   plain:   cuLaunchKernel, cuModuleUnload;
//   reuse:   as plain, then 8 fresh modules loaded and their `junk` kernel (which writes 7 to
//            out[1]) launched on a second stream while `slow` may still run (to hand its code
//            memory to another module);
//   graph:   a graph with the kernel node, instantiated and launched, the exec and graph
//            destroyed, then the module unloaded;
//   queued:  module B's `slow` launched first on the same stream, then A's behind it, then A
//            unloaded (A's kernel has not started);
//   other:   module B's `slow` running on the second stream, A loaded and unloaded idle (does
//            the unload wait for the whole device?).
#include <cuda.h>
#include <nvrtc.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; cuGetErrorName(r_, &s_); \
  printf("%s:%d %s -> %s\n", __FILE__, __LINE__, #x, s_); } } while (0)

static const char *SRC = R"(
extern "C" __global__ void slow(unsigned long long spins, unsigned tag, unsigned *out) {
    unsigned long long t0 = clock64();
    while (clock64() - t0 < spins) { }
    out[0] = 42 + tag;
}
extern "C" __global__ void junk(unsigned *out) { out[1] = 7; }
)";

static std::string ptx_of(int major, int minor) {
    nvrtcProgram p;
    nvrtcCreateProgram(&p, SRC, "probe.cu", 0, nullptr, nullptr);
    std::string arch = "--gpu-architecture=compute_" + std::to_string(major) + std::to_string(minor);
    const char *opts[] = {arch.c_str()};
    if (nvrtcCompileProgram(p, 1, opts) != NVRTC_SUCCESS) { printf("nvrtc failed\n"); exit(1); }
    size_t n; nvrtcGetPTXSize(p, &n);
    std::string s(n, '\0'); nvrtcGetPTX(p, &s[0]);
    nvrtcDestroyProgram(&p);
    return s;
}

static double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int main() {
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    int major, minor, khz;
    cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
    std::string ptx = ptx_of(major, minor);
    const double spin_ms = 300;
    unsigned long long spins = (unsigned long long)(spin_ms * khz);
    CUstream s, s2; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUdeviceptr out; CK(cuMemAlloc(&out, 64));
    const char *cases[] = {"plain", "reuse", "graph", "queued", "other"};
    for (int c = 0; c < 5; c++) {
        for (unsigned round = 0; round < 3; round++) {
            CK(cuMemsetD32(out, 0, 16));
            CUmodule m; CK(cuModuleLoadData(&m, ptx.c_str()));
            CUfunction f; CK(cuModuleGetFunction(&f, m, "slow"));
            unsigned tag = round + 1;
            void *args[] = {&spins, &tag, &out};
            CUgraph g = nullptr; CUgraphExec e = nullptr;
            std::vector<CUmodule> extra;
            auto t0 = std::chrono::steady_clock::now();
            if (c == 2) {
                CK(cuGraphCreate(&g, 0));
                CUDA_KERNEL_NODE_PARAMS p = {};
                p.func = f; p.gridDimX = p.gridDimY = p.gridDimZ = 1;
                p.blockDimX = 32; p.blockDimY = p.blockDimZ = 1; p.kernelParams = args;
                CUgraphNode n; CK(cuGraphAddKernelNode(&n, g, nullptr, 0, &p));
                CK(cuGraphInstantiate(&e, g, 0));
                t0 = std::chrono::steady_clock::now();
                CK(cuGraphLaunch(e, s));
                CK(cuGraphExecDestroy(e));
                CK(cuGraphDestroy(g));
            } else if (c >= 3) {
                // Module B's `slow` first on the same stream (queued: A's launch waits behind
                // it) or on the second stream (other: A's module idle when unloaded).
                CUmodule mb; CK(cuModuleLoadData(&mb, ptx.c_str()));
                CUfunction fb; CK(cuModuleGetFunction(&fb, mb, "slow"));
                unsigned tb = 100;
                CUdeviceptr out2 = out + 32;
                void *ab[] = {&spins, &tb, &out2};
                t0 = std::chrono::steady_clock::now();
                CK(cuLaunchKernel(fb, 1, 1, 1, 32, 1, 1, 0, c == 3 ? s : s2, ab, nullptr));
                if (c == 3) {
                    CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr));
                }
                extra.push_back(mb);
            } else {
                CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr));
            }
            double launched = ms_since(t0);
            auto t1 = std::chrono::steady_clock::now();
            CK(cuModuleUnload(m));
            double unload = ms_since(t1);
            double reuse = 0;
            if (c == 1) {
                auto t2 = std::chrono::steady_clock::now();
                for (int i = 0; i < 8; i++) {
                    CUmodule m2; CK(cuModuleLoadData(&m2, ptx.c_str()));
                    CUfunction j; CK(cuModuleGetFunction(&j, m2, "junk"));
                    void *a2[] = {&out};
                    CK(cuLaunchKernel(j, 1, 1, 1, 1, 1, 1, 0, s2, a2, nullptr));
                    CK(cuStreamSynchronize(s2));
                    CK(cuModuleUnload(m2));
                }
                reuse = ms_since(t2);
            }
            double before_sync = ms_since(t0);
            CUresult q = cuStreamQuery(s);
            CK(cuStreamSynchronize(s));
            CK(cuStreamSynchronize(s2));
            for (CUmodule x : extra) CK(cuModuleUnload(x));
            if (c == 4) tag = 0xffffffffu - 41; // A never ran: out[0] stays 0
            double total = ms_since(t0);
            unsigned h[2] = {0, 0};
            CK(cuMemcpyDtoH(h, out, 8));
            printf("%-6s round %u: launch %.3f ms, cuModuleUnload %.3f ms, reuse %.3f ms, kernel %s at unload+, "
                   "done after %.1f ms (spin %.0f ms); out[0] = %u (want %u), out[1] = %u -> %s\n",
                   cases[c], round, launched, unload, reuse,
                   q == CUDA_ERROR_NOT_READY ? "still running" : "finished", total, spin_ms, h[0], 42 + tag, h[1],
                   h[0] == 42 + tag ? "ok" : "WRONG");
            (void)before_sync;
        }
    }
    printf("context error after all: ");
    CUresult r = cuCtxSynchronize();
    const char *nm; cuGetErrorName(r, &nm); printf("%s\n", nm);
    return 0;
}
