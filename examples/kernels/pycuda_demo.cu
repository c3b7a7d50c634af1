// Kernels of the `pycuda_demo` example (the two kernels of PyCUDA's graph demo, 1-D).

// a[i] += num.
extern "C" __global__ void plus(unsigned n, float* a, int num) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += num;
}

// a[i] *= b[i].
extern "C" __global__ void times(unsigned n, float* a, const float* b) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= b[i];
}
