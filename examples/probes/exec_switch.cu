// Probe for issue 31 (bench row f against cA): what a step that alternates between two pointer
// sets costs with the raw runtime, three ways: one exec relaunched with nothing changed (c),
// one exec with every kernel node's pointer set before each launch (cA,
// cudaGraphExecKernelNodeSetParams), and two execs, one per pointer set, launched in turn (what
// `graph!`'s memoized execs do, row f). A chain of K kernels `x[i] += s` on one buffer.
// Printed: µs per step, N steps enqueued back to back then one synchronize (median of 9), and
// the host time of the enqueue loop alone per step; then the host time of one call with the GPU
// idle (median of 201).
//
//   nvcc -O2 -arch=sm_90 -o exec_switch examples/probes/exec_switch.cu && ./exec_switch
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <chrono>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));           \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void add(unsigned n, unsigned s, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += s;
}

static double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Chain {
    cudaGraph_t g;
    std::vector<cudaGraphNode_t> nodes;
};

static const unsigned N = 256;
static unsigned n_arg = N, s_arg = 1;

static void params(cudaKernelNodeParams *p, void **args) {
    p->func = (void *)add;
    p->gridDim = dim3(1);
    p->blockDim = dim3(N);
    p->sharedMemBytes = 0;
    p->kernelParams = args;
    p->extra = nullptr;
}

static Chain chain(int k, unsigned *x) {
    Chain c;
    CK(cudaGraphCreate(&c.g, 0));
    void *args[] = {&n_arg, &s_arg, &x};
    cudaKernelNodeParams p;
    params(&p, args);
    for (int i = 0; i < k; i++) {
        cudaGraphNode_t n;
        CK(cudaGraphAddKernelNode(&n, c.g, i ? &c.nodes.back() : nullptr, i ? 1 : 0, &p));
        c.nodes.push_back(n);
    }
    return c;
}

int main() {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned *buf[2];
    for (auto &b : buf) CK(cudaMalloc(&b, N * sizeof(unsigned)));
    printf("K      steps | same (c)  set (cA)  two execs | host: same   set  two | idle call: same   set   two\n");
    for (int k : {1, 10, 100}) {
        Chain a = chain(k, buf[0]), b = chain(k, buf[1]);
        cudaGraphExec_t ea, eb;
        CK(cudaGraphInstantiate(&ea, a.g, 0));
        CK(cudaGraphInstantiate(&eb, b.g, 0));
        int steps = k == 100 ? 500 : 2000;
        void *args0[] = {&n_arg, &s_arg, &buf[0]};
        void *args1[] = {&n_arg, &s_arg, &buf[1]};
        cudaKernelNodeParams p0, p1;
        params(&p0, args0);
        params(&p1, args1);
        auto step = [&](int mode, int i) {
            if (mode == 0) {
                CK(cudaGraphLaunch(ea, s));
            } else if (mode == 1) {
                cudaKernelNodeParams *p = i % 2 ? &p1 : &p0;
                for (auto n : a.nodes) CK(cudaGraphExecKernelNodeSetParams(ea, n, p));
                CK(cudaGraphLaunch(ea, s));
            } else {
                CK(cudaGraphLaunch(i % 2 ? eb : ea, s));
            }
        };
        double per[3], host[3], idle[3];
        for (int mode = 0; mode < 3; mode++) {
            std::vector<double> t, h;
            for (int r = 0; r < 9; r++) {
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
            std::vector<double> one;
            for (int i = 0; i < 201; i++) {
                CK(cudaStreamSynchronize(s));
                double t0 = now_us();
                step(mode, i);
                one.push_back(now_us() - t0);
            }
            idle[mode] = median(one);
        }
        printf("%-4d %7d | %8.2f %8.2f %9.2f | %10.2f %5.2f %4.2f | %15.2f %5.2f %5.2f\n", k, steps,
               per[0], per[1], per[2], host[0], host[1], host[2], idle[0], idle[1], idle[2]);
    }
    return 0;
}
