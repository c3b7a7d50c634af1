// Kernels of the stress program. Integer arithmetic: results compare exactly.

// x[i] = x[i] * 3 + a (mod 2^32)
extern "C" __global__ void mix(unsigned n, unsigned a, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 3u + a;
}

// y[i] = x[i] + a
extern "C" __global__ void add(unsigned n, unsigned a, const unsigned *x, unsigned *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + a;
}

// Busy-waits about `cycles` clock cycles, then x[i] += 1: a launch that is still running when
// the host moves on.
extern "C" __global__ void spin(unsigned n, unsigned long long cycles, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    if (i < n) x[i] += 1u;
}
