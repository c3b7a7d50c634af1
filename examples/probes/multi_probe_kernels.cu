// The kernels of multi_probe.cu, compiled to PTX with `nvcc -ptx -arch=sm_90` and loaded in
// each device's context.

// y = 0.25 x + 1 over rows x n cells (16 x 16 blocks, as heat's stencil grid).
extern "C" __global__ void step(unsigned n, unsigned rows, const float *x, float *y) {
    unsigned i = blockIdx.x * 16 + threadIdx.x, j = blockIdx.y * 16 + threadIdx.y;
    if (i < n && j < rows) y[j * n + i] = 0.25f * x[j * n + i] + 1.0f;
}

// One row set to 1 (heat's boundary).
extern "C" __global__ void edge(unsigned n, float *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1.0f;
}

// One row read from another device's memory (peer access) instead of a copy node.
extern "C" __global__ void pull(unsigned n, const float *peer, float *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = peer[i];
}
