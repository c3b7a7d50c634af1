// Tiny kernels for the launch-overhead benchmark (examples/src/bench.rs). Each is launched as one
// block of 32 threads on n <= 32 unsigned ints, so its GPU time is as small as a kernel's can be
// and the benchmark measures launching, not computing. Unsigned arithmetic wraps, as the host's
// model of the results does.

// x[i] += v for every i < n.
extern "C" __global__ void add(unsigned n, unsigned v, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}

// dst[i] += src[i] for every i < n.
extern "C" __global__ void acc(unsigned n, const unsigned *src, unsigned *dst) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
