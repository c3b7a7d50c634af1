// Kernels of the `alloc_capture` example's small library (one thread per element or row).

// y[i] = a * x[i] + bias[i % cols] for i < n.
extern "C" __global__ void affine(unsigned n, unsigned cols, float a, const float* bias,
                                  const float* x, float* y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + bias[i % cols];
}

// y[i] = max(x[i], 0) for i < n.
extern "C" __global__ void relu(unsigned n, const float* x, float* y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// mean[r] = the mean of row r of x (rows × cols, row-major), summed in order (deterministic).
extern "C" __global__ void row_mean(unsigned rows, unsigned cols, const float* x, float* mean) {
    unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (unsigned c = 0; c < cols; ++c) s += x[r * cols + c];
    mean[r] = s / (float)cols;
}

// y[r * cols + c] = x[r * cols + c] - mean[r] + skip[r * cols + c].
extern "C" __global__ void center_add(unsigned rows, unsigned cols, const float* x,
                                      const float* mean, const float* skip, float* y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) y[i] = x[i] - mean[i / cols] + skip[i];
}
