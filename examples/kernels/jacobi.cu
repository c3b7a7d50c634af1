// Jacobi iteration on the 2-D Poisson problem (5-point Laplacian A = 4 I - neighbours, zero
// Dirichlet boundary, n x n interior points), f64; the residual norm, the iteration count and
// the "converged" flag in device memory. Used by examples/src/jacobi.rs.
//
// Iteration j: `sweep` reads the iterate u_j, writes u_{j+1} = u_j + (b - A u_j) / 4 to the other
// buffer and the per-block sums of the squared residual of u_j; `finish` adds those up in a fixed
// order: u_j is the solution when its residual is below the threshold, or when j reached the
// cap (done = 1, it = j), else it = j + 1. Every kernel returns at once when `done` is set, so
// sweeps unrolled past the end change nothing: the solution (in buffer it % 2) and count are
// those of the first iterate below the tolerance. Deterministic: the same sums in the same order
// in every variant.
#include <cuda_device_runtime_api.h>

// Threads per block of both kernels (the shared arrays' size).
#define THREADS 256

// sh[0] = the block's sum of sh[0..THREADS), a fixed tree.
__device__ void block_sum(double *sh) {
    __syncthreads();
    for (unsigned int w = THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
}

// dst = src + (b - A src) / 4 over a grid-stride loop; partial[blockIdx.x] = the block's sum of
// (b - A src)^2.
extern "C" __global__ void sweep(unsigned int n, const unsigned int *done, const double *b,
                                 const double *src, double *dst, double *partial) {
    if (*done) return;
    __shared__ double sh[THREADS];
    unsigned int len = n * n;
    double s = 0.0;
    for (unsigned int k = blockIdx.x * blockDim.x + threadIdx.x; k < len;
         k += gridDim.x * blockDim.x) {
        unsigned int i = k / n, j = k % n;
        double nb = 0.0;
        if (i > 0) nb += src[k - n];
        if (i + 1 < n) nb += src[k + n];
        if (j > 0) nb += src[k - 1];
        if (j + 1 < n) nb += src[k + 1];
        double u = src[k];
        double r = b[k] + nb - 4.0 * u;
        dst[k] = u + 0.25 * r;
        s += r * r;
    }
    sh[threadIdx.x] = s;
    block_sum(sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

// rr = sum of partial[0..parts) (one block of THREADS threads: thread t adds partial[t],
// partial[t + THREADS], … in order, then a fixed tree); returns rr in thread 0.
__device__ double residual(unsigned int parts, const double *partial, double *sh) {
    double s = 0.0;
    for (unsigned int p = threadIdx.x; p < parts; p += THREADS) s += partial[p];
    sh[threadIdx.x] = s;
    block_sum(sh);
    return sh[0];
}

// The end of iteration `*it` (see the top): one block of THREADS threads; sets the loop's
// condition to "not done".
extern "C" __global__ void finish(cudaGraphConditionalHandle c, unsigned int parts,
                                  unsigned int max_it, double thresh, const double *partial,
                                  double *rr, unsigned int *it, unsigned int *done) {
    __shared__ double sh[THREADS];
    unsigned int was_done = *done;
    if (!was_done) {
        double s = residual(parts, partial, sh);
        if (threadIdx.x == 0) {
            *rr = s;
            if (s < thresh || *it >= max_it) {
                *done = 1;
                was_done = 1;
            } else {
                *it += 1;
            }
        }
    }
    if (threadIdx.x == 0) cudaGraphSetConditional(c, !was_done);
}

// The same without a condition (the host-checked variants).
extern "C" __global__ void finish_host(unsigned int parts, unsigned int max_it, double thresh,
                                       const double *partial, double *rr, unsigned int *it,
                                       unsigned int *done) {
    __shared__ double sh[THREADS];
    if (*done) return;
    double s = residual(parts, partial, sh);
    if (threadIdx.x == 0) {
        *rr = s;
        if (s < thresh || *it >= max_it)
            *done = 1;
        else
            *it += 1;
    }
}
