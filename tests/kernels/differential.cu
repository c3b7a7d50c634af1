// Three definitions of the same signature, renamed to `op` one at a time when loaded
// (tests/tests/differential.rs). Unsigned arithmetic wraps: results compare exactly.
extern "C" __global__ void op_add(unsigned n, unsigned a, const unsigned *x, unsigned *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + a;
}
extern "C" __global__ void op_mul(unsigned n, unsigned a, const unsigned *x, unsigned *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (x[i] * 3u) ^ a;
}
extern "C" __global__ void op_acc(unsigned n, unsigned a, const unsigned *x, unsigned *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] + x[i] * (a | 1u);
}
