// Kernels of the `mlp` example.

// y[r + c * rows] = max(y[r + c * rows] + bias[r], 0) for every row r < rows, column c < cols
// (y column-major, as cuBLAS writes it).
extern "C" __global__ void bias_relu(unsigned rows, unsigned cols, const float* bias, float* y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    float v = y[i] + bias[i % rows];
    y[i] = v > 0.0f ? v : 0.0f;
}
