// Kernels for the update-engine tests (tests/tests/update.rs). Integer arithmetic only, so graph
// and eager results compare exactly. Every output element is written by exactly one thread.

// y[i] = a * x[i] + b
extern "C" __global__ void affine(unsigned n, int a, int b, const int *x, int *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

// y[i] = y[i] * 10 + a: a sequence of launches leaves its scalars as decimal digits.
extern "C" __global__ void append_digit(unsigned n, int a, int *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * 10 + a;
}

// Linear thread id over a 3-D grid of 3-D blocks; y[tid] = base + tid for tid < n.
extern "C" __global__ void fill_index(unsigned n, int base, int *y) {
    unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned tid = block * threads + t;
    if (tid < n) y[tid] = base + (int)tid;
}

// Uses blockDim.x ints of dynamic shared memory: y[b*B + t] = base + (B - 1 - t).
extern "C" __global__ void reverse_shared(unsigned n, int base, int *y) {
    extern __shared__ int s[];
    s[threadIdx.x] = base + (int)threadIdx.x;
    __syncthreads();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s[blockDim.x - 1 - threadIdx.x];
}

// The same signature in two variants, for swapping the function of one statement.
extern "C" __global__ void step_add(unsigned n, int *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] + 3;
}
extern "C" __global__ void step_mul(unsigned n, int *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * 2;
}
