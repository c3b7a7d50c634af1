// Conjugate gradients on the 2-D Poisson problem (5-point Laplacian, zero Dirichlet boundary,
// n x n interior points), f64, every scalar (alpha's and beta's parts, residual norms, the
// iteration count, the "converged" flag) in device memory. Used by examples/src/cg.rs.
//
// Every kernel of an iteration returns at once when `done` is set, so iterations unrolled past
// convergence change nothing: the solution and count are those of the first iteration whose
// residual fell below the tolerance.
#include <cuda_device_runtime_api.h>

#define PARTS 256

// q = A p, A = 4 I - (neighbours), on the n x n grid
extern "C" __global__ void matvec(unsigned int n, const unsigned int *done, const double *p,
                                  double *q) {
    if (*done) return;
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n * n) return;
    unsigned int i = k / n, j = k % n;
    double s = 4.0 * p[k];
    if (i > 0) s -= p[k - n];
    if (i + 1 < n) s -= p[k + n];
    if (j > 0) s -= p[k - 1];
    if (j + 1 < n) s -= p[k + 1];
    q[k] = s;
}

// partial[b] = sum over a grid-stride slice of a[k] * b[k] (PARTS blocks of 256 threads);
// deterministic: a fixed tree in each block, a fixed order in dot_final
extern "C" __global__ void dot_partial(unsigned int len, const unsigned int *done,
                                       const double *a, const double *b, double *partial) {
    if (*done) return;
    __shared__ double sh[256];
    double s = 0.0;
    for (unsigned int k = blockIdx.x * blockDim.x + threadIdx.x; k < len;
         k += gridDim.x * blockDim.x)
        s += a[k] * b[k];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

// out = sum of partial[0..PARTS] (one block of 256 threads)
extern "C" __global__ void dot_final(const unsigned int *done, const double *partial,
                                     double *out) {
    if (*done) return;
    __shared__ double sh[256];
    sh[threadIdx.x] = partial[threadIdx.x];
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}

// alpha = rr / pq; x += alpha p; r -= alpha q
extern "C" __global__ void update_xr(unsigned int len, const unsigned int *done,
                                     const double *rr, const double *pq, const double *p,
                                     const double *q, double *x, double *r) {
    if (*done) return;
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= len) return;
    double alpha = *rr / *pq;
    x[k] += alpha * p[k];
    r[k] -= alpha * q[k];
}

// beta = rr_new / rr; p = r + beta p
extern "C" __global__ void update_p(unsigned int len, const unsigned int *done,
                                    const double *rr_new, const double *rr, const double *r,
                                    double *p) {
    if (*done) return;
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= len) return;
    p[k] = r[k] + (*rr_new / *rr) * p[k];
}

// End of an iteration (one thread): count it, rr = rr_new, converged when rr_new < thresh;
// the loop goes on while not converged and below max_it.
extern "C" __global__ void finish(cudaGraphConditionalHandle c, unsigned int max_it,
                                  const double *rr_new, const double *thresh, double *rr,
                                  unsigned int *it, unsigned int *done) {
    if (!*done) {
        *it += 1;
        *rr = *rr_new;
        if (*rr_new < *thresh) *done = 1;
    }
    cudaGraphSetConditional(c, !*done && *it < max_it);
}

// The same without a condition (the host-checked variants).
extern "C" __global__ void finish_host(unsigned int max_it, const double *rr_new,
                                       const double *thresh, double *rr, unsigned int *it,
                                       unsigned int *done) {
    if (!*done) {
        *it += 1;
        *rr = *rr_new;
        if (*rr_new < *thresh) *done = 1;
    }
    if (*it >= max_it) *done = 1;
}

// Start (one thread): thresh = tol2 * rr0, rr = rr0, it = 0, done = (rr0 <= thresh)
extern "C" __global__ void start(double tol2, const double *rr0, double *thresh, double *rr,
                                 unsigned int *it, unsigned int *done) {
    *thresh = tol2 * *rr0;
    *rr = *rr0;
    *it = 0;
    *done = *rr0 <= *thresh;
}

// c = !done
extern "C" __global__ void set_running(cudaGraphConditionalHandle c, const unsigned int *done) {
    cudaGraphSetConditional(c, !*done);
}

// The overhead benchmark: one tiny kernel; `last` counts down and sets the loop's condition.
extern "C" __global__ void tick(double *v) {
    if (threadIdx.x == 0) v[0] += 1.0;
}
extern "C" __global__ void tick_last(cudaGraphConditionalHandle c, unsigned int *left) {
    if (threadIdx.x == 0) {
        unsigned int l = *left - 1;
        *left = l;
        cudaGraphSetConditional(c, l != 0);
    }
}
