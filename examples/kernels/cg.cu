// Conjugate gradients on the 2-D Poisson problem (5-point Laplacian, zero Dirichlet boundary,
// n x n interior points), f64, every scalar (residual norms, the iteration count, the
// "converged" flag) in device memory. Used by examples/src/cg.rs.
//
// An iteration is 4 kernels: matvec_dot, update_xr_dot, update_p, finish. No kernel adds up the
// partial sums of a dot product alone: each block of the kernel that needs alpha or beta adds the
// PARTS partial sums itself, in the same fixed order in every block and every variant, so the
// results are deterministic and the same wherever they are computed.
//
// Every kernel of an iteration returns at once when `done` is set, so iterations unrolled past
// convergence change nothing: the solution and count are those of the first iteration whose
// residual fell below the tolerance.
#include <cuda_device_runtime_api.h>

// Blocks of every kernel that sums over the grid (and so the number of partial sums), and threads
// per block of every kernel here.
#define PARTS 256

// sh[0] = the block's sum of sh[0..256), a fixed tree; returned to every thread, after which sh
// may be written again.
__device__ double block_sum(double *sh) {
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    double v = sh[0];
    __syncthreads();
    return v;
}

// The sum of partial[0..PARTS) (a block of 256 threads, one value each, then the fixed tree):
// every block that calls it gets the same value, added in the same order, so a kernel of many
// blocks can use a dot product without a separate kernel that adds the partial sums up.
__device__ double sum_parts(const double *partial, double *sh) {
    sh[threadIdx.x] = partial[threadIdx.x];
    return block_sum(sh);
}

// The elements of the grid-stride loop of thread (blockIdx.x, threadIdx.x) in PARTS blocks of
// 256 threads: k = blockIdx.x * 256 + threadIdx.x, k + PARTS * 256, ...
#define FOR_EACH(k, len)                                                                  \
    for (unsigned int k = blockIdx.x * blockDim.x + threadIdx.x; k < (len);              \
         k += gridDim.x * blockDim.x)

// (A p)[k] = 4 p[k] - (neighbours), on the n x n grid
__device__ double apply_a(unsigned int n, unsigned int k, const double *p) {
    unsigned int i = k / n, j = k % n;
    double s = 4.0 * p[k];
    if (i > 0) s -= p[k - n];
    if (i + 1 < n) s -= p[k + n];
    if (j > 0) s -= p[k - 1];
    if (j + 1 < n) s -= p[k + 1];
    return s;
}

// partial[b] = block b's part of a . b (PARTS blocks): the start's r . r
extern "C" __global__ void dot_partial(unsigned int len, const unsigned int *done,
                                       const double *a, const double *b, double *partial) {
    if (*done) return;
    __shared__ double sh[PARTS];
    double s = 0.0;
    FOR_EACH(k, len) s += a[k] * b[k];
    sh[threadIdx.x] = s;
    double v = block_sum(sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// q = A p, and partial_pq[b] = block b's part of p . q (PARTS blocks)
extern "C" __global__ void matvec_dot(unsigned int n, const unsigned int *done, const double *p,
                                      double *q, double *partial_pq) {
    if (*done) return;
    __shared__ double sh[PARTS];
    double s = 0.0;
    FOR_EACH(k, n * n) {
        double v = apply_a(n, k, p);
        q[k] = v;
        s += p[k] * v;
    }
    sh[threadIdx.x] = s;
    double v = block_sum(sh);
    if (threadIdx.x == 0) partial_pq[blockIdx.x] = v;
}

// alpha = rr / (p . q), p . q summed from partial_pq by every block; x += alpha p;
// r -= alpha q; partial_rr[b] = block b's part of the new r . r (PARTS blocks)
extern "C" __global__ void update_xr_dot(unsigned int len, const unsigned int *done,
                                         const double *rr, const double *partial_pq,
                                         const double *p, const double *q, double *x, double *r,
                                         double *partial_rr) {
    if (*done) return;
    __shared__ double sh[PARTS];
    double alpha = *rr / sum_parts(partial_pq, sh);
    double s = 0.0;
    FOR_EACH(k, len) {
        x[k] += alpha * p[k];
        double v = r[k] - alpha * q[k];
        r[k] = v;
        s += v * v;
    }
    sh[threadIdx.x] = s;
    double v = block_sum(sh);
    if (threadIdx.x == 0) partial_rr[blockIdx.x] = v;
}

// beta = rr_new / rr, rr_new = r . r summed from partial_rr by every block; p = r + beta p
// (PARTS blocks)
extern "C" __global__ void update_p(unsigned int len, const unsigned int *done,
                                    const double *partial_rr, const double *rr, const double *r,
                                    double *p) {
    if (*done) return;
    __shared__ double sh[PARTS];
    double beta = sum_parts(partial_rr, sh) / *rr;
    FOR_EACH(k, len) p[k] = r[k] + beta * p[k];
}

// End of an iteration (one block of 256 threads): rr_new = r . r summed from partial_rr; count
// the iteration, rr = rr_new, converged when rr_new < thresh; the loop goes on while not
// converged and below max_it.
extern "C" __global__ void finish(cudaGraphConditionalHandle c, unsigned int max_it,
                                  const double *partial_rr, const double *thresh, double *rr,
                                  unsigned int *it, unsigned int *done) {
    __shared__ double sh[PARTS];
    if (!*done) {
        double rr_new = sum_parts(partial_rr, sh);
        if (threadIdx.x == 0) {
            *it += 1;
            *rr = rr_new;
            if (rr_new < *thresh) *done = 1;
        }
    }
    if (threadIdx.x == 0) cudaGraphSetConditional(c, !*done && *it < max_it);
}

// The same without a condition (the host-checked variants).
extern "C" __global__ void finish_host(unsigned int max_it, const double *partial_rr,
                                       const double *thresh, double *rr, unsigned int *it,
                                       unsigned int *done) {
    __shared__ double sh[PARTS];
    if (!*done) {
        double rr_new = sum_parts(partial_rr, sh);
        if (threadIdx.x == 0) {
            *it += 1;
            *rr = rr_new;
            if (rr_new < *thresh) *done = 1;
        }
    }
    if (threadIdx.x == 0 && *it >= max_it) *done = 1;
}

// Start (one block of 256 threads): rr0 = r . r summed from partial; thresh = tol2 * rr0,
// rr = rr0, it = 0, done = (rr0 <= thresh)
extern "C" __global__ void start(double tol2, const double *partial, double *rr0, double *thresh,
                                 double *rr, unsigned int *it, unsigned int *done) {
    __shared__ double sh[PARTS];
    double v = sum_parts(partial, sh);
    if (threadIdx.x == 0) {
        *rr0 = v;
        *thresh = tol2 * v;
        *rr = v;
        *it = 0;
        *done = v <= tol2 * v;
    }
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
