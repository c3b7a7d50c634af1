// Kernels of the sticky-error test (tests/sticky.rs): one that computes, one that faults.

// x[i] = a * i + b for i < n.
extern "C" __global__ void iota(unsigned int n, unsigned int a, unsigned int b, unsigned int *x) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * i + b;
}

// Stores `v` at device address `addr`: with an unmapped address (16), an illegal-address fault,
// which leaves the context unusable (a sticky error).
extern "C" __global__ void poke(unsigned long long addr, unsigned int v) {
    *(volatile unsigned int *)addr = v;
}
