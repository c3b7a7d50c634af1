// The tiny kernel of the enable/disable benchmark (examples/src/toggle.rs): one block of 32
// threads on n <= 32 unsigned ints, as bench.cu's kernels, so the benchmark measures launching
// and switching, not computing. An affine map rather than an addition, so that the order of the
// branches taken shows in the result (the host model checks it). Unsigned arithmetic wraps, as
// the model's does.

// x[i] = x[i] * a + b for every i < n.
extern "C" __global__ void affine(unsigned n, unsigned a, unsigned b, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + b;
}
