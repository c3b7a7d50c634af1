// Kernels of the device control-flow tests (tests/tests/conditional.rs). Those taking a
// `cudaGraphConditionalHandle` set a graph's condition and run only inside a graph; the others
// are also launched eagerly by the host-driven oracle. One thread of `flag`/`counter` kernels
// does the work (launched as (1, 1)).
#include <cuda_device_runtime_api.h>

// c = (v[0] != 0)
extern "C" __global__ void set_nonzero(cudaGraphConditionalHandle c, const unsigned int *v) {
    cudaGraphSetConditional(c, v[0] != 0);
}

// c = v[0] (a switch's case)
extern "C" __global__ void set_value(cudaGraphConditionalHandle c, const unsigned int *v) {
    cudaGraphSetConditional(c, v[0]);
}

// counter[0] -= 1; c = (counter[0] != 0)
extern "C" __global__ void count_down(cudaGraphConditionalHandle c, unsigned int *counter) {
    unsigned int left = counter[0] - 1;
    counter[0] = left;
    cudaGraphSetConditional(c, left != 0);
}

// counter[0] -= 1 (the oracle's count_down)
extern "C" __global__ void count_down_plain(unsigned int *counter) {
    counter[0] -= 1;
}

// c = counter[0] odd
extern "C" __global__ void set_odd(cudaGraphConditionalHandle c, const unsigned int *counter) {
    cudaGraphSetConditional(c, counter[0] & 1u);
}

// x[i] = x[i] * 3 + a + counter[0] + i: depends on the order of iterations
extern "C" __global__ void step(unsigned int n, unsigned int a, const unsigned int *counter,
                                unsigned int *x) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 3u + a + counter[0] + i;
}

// x[i] = x[i] * 5 + a + i
extern "C" __global__ void add(unsigned int n, unsigned int a, unsigned int *x) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 5u + a + i;
}

// Device scalars (`&u32` / `&mut u32` in kernels!): b = a * a + 1
extern "C" __global__ void square_into(const unsigned int *a, unsigned int *b) {
    *b = *a * *a + 1u;
}

// x[i] = x[i] * s + i, s a device scalar
extern "C" __global__ void scale_by(unsigned int n, const unsigned int *s, unsigned int *x) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * *s + i;
}
