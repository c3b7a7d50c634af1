// 2-D heat diffusion on an nx x ny grid of f32, row-major (index = y * nx + x).
// Explicit Euler, 5-point stencil; the top edge is held at 1, the other edges at 0.
//
// Every kernel is declared `#[programmatic]` in heat.rs: in a graph it may start before the
// kernel it depends on finished, so every thread first waits for that kernel
// (`griddepcontrol.wait`, CUDA C's cudaGridDependencySynchronize()), before it touches memory or
// returns; launched any other way the wait does nothing. It exists from compute capability 9.0
// on: heat.rs compiles this file for the device's own architecture, so it is there whenever the
// graph's edges are programmatic (before 9.0 they are plain and the macro is empty).

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define WAIT_FOR_PREDECESSORS() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define WAIT_FOR_PREDECESSORS()
#endif

extern "C" __global__ void stencil(unsigned nx, unsigned ny, float alpha, const float *src, float *dst) {
    WAIT_FOR_PREDECESSORS();
    unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x == 0 || y == 0 || x >= nx - 1 || y >= ny - 1) return;  // interior only
    unsigned i = y * nx + x;
    float c = src[i];
    dst[i] = c + alpha * (src[i - 1] + src[i + 1] + src[i - nx] + src[i + nx] - 4.0f * c);
}

// Dirichlet boundary: every edge cell written by exactly one thread.
extern "C" __global__ void boundary(unsigned nx, unsigned ny, float *u) {
    WAIT_FOR_PREDECESSORS();
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t > 0 && t < nx - 1) {
        u[t] = 1.0f;                    // top row, without corners
        u[(ny - 1) * nx + t] = 0.0f;    // bottom row, without corners
    }
    if (t < ny) {
        u[t * nx] = 0.0f;               // left column, with corners
        u[t * nx + nx - 1] = 0.0f;      // right column, with corners
    }
}

// flags[0] |= 1 if any cell is not finite (the scheme went unstable).
extern "C" __global__ void check_finite(unsigned n, const float *u, unsigned *flags) {
    WAIT_FOR_PREDECESSORS();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !isfinite(u[i])) atomicOr(flags, 1u);
}

// r[0] = max over cells of |v - u| (the step's largest change), for r[0] zeroed before.
// Non-negative floats order like their bit patterns as ints, so atomicMax on the bits is exact.
extern "C" __global__ void residual(unsigned n, const float *u, const float *v, float *r) {
    WAIT_FOR_PREDECESSORS();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicMax((int *)r, __float_as_int(fabsf(v[i] - u[i])));
}
