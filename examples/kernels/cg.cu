// Conjugate gradients on the 2-D Poisson problem (5-point Laplacian, zero Dirichlet boundary,
// n x n interior points), f64, every scalar (residual norms, alpha, beta, the iteration count,
// the "converged" flag) in device memory. Used by examples/src/cg.rs.
//
// The iteration is the single-reduction form of Chronopoulos and Gear (1989): with w = A r and
// z = A p kept as vectors, both dot products of an iteration, gamma = r . r and delta = w . r,
// are summed in one pass, so an iteration needs one grid-wide sum instead of two, and is ONE
// kernel, `step`:
//
//   beta  = gamma_i / gamma_{i-1}            alpha = gamma_i / (delta_i - beta gamma_i / alpha_{i-1})
//   z     = w + beta z                       p     = r + beta p
//   x    += alpha p                          r     = r - alpha z
//   w     = A r                              gamma_{i+1}, delta_{i+1} = r . r, w . r
//
// The matvec reads r at the four neighbours, which other blocks update in the same kernel, so
// each thread computes the new r of its neighbours itself from the old r, w and z (one fma each,
// so every thread gets the bits the owner writes), and r, w and z are double-buffered:
// a step reads one set (`v_in`) and writes the other (`v_out`); the graph alternates them. So
// are the per-block partial sums and the scalars (gamma, alpha, iterations done) that every block
// reads: a step reads `s_in`, and its blocks (block 0 for the scalars) write `s_out`.
//
// No kernel of an iteration only adds up partial sums (`start_scalars` does, once per solve):
// every block of a step adds the PARTS partial sums of the last step itself, in the same fixed
// order in every block and every variant, so the results are deterministic and the same
// wherever they are computed.
//
// A step first checks the residual of the iterate it starts from: not above the threshold (as
// the host loop's `while rr >= thresh`: a NaN stops too) or the iteration cap reached, block 0
// sets `done` and records the residual and count, and no block changes anything; every later
// kernel returns at once. So the reported solution and count are those of the first iterate
// whose residual fell below the tolerance, however many steps are unrolled past it. Every block
// takes that decision alike, from the same sums; `done` itself is read once per block (thread 0,
// into shared memory, before a barrier), so a block that sees it already set by block 0 of the
// same step returns whole, as it would have anyway, and never only some of its warps.
#include <cuda_device_runtime_api.h>

// Blocks of `start` and `step` (and so the number of partial sums of each dot product); every
// kernel here has PARTS = 256 threads per block (8 warps): the blocks that add up partial sums
// read one per thread, so the number of blocks and of threads per block must both be PARTS.
#define PARTS 256

// (a, b) summed over the block's 256 threads in a fixed order (each warp by shuffles, then the 8
// warp sums in order): returned to every thread. Deterministic.
__device__ double2 block_sum2(double a, double b) {
    __shared__ double2 warp[8];
    for (int o = 16; o > 0; o /= 2) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    if ((threadIdx.x & 31) == 0) warp[threadIdx.x / 32] = make_double2(a, b);
    __syncthreads();
    double2 s = warp[0];
    for (int i = 1; i < 8; i++) {
        s.x += warp[i].x;
        s.y += warp[i].y;
    }
    __syncthreads();  // warp[] may be written again
    return s;
}

// The two sums of parts[0..PARTS) and parts[PARTS..2 PARTS) (one value per thread, then the
// fixed order of block_sum2): every block that calls it gets the same values.
__device__ double2 sum_parts2(const double *parts) {
    return block_sum2(parts[threadIdx.x], parts[PARTS + threadIdx.x]);
}

// The elements of the grid-stride loop of thread (blockIdx.x, threadIdx.x).
#define FOR_EACH(k, len)                                                                  \
    for (unsigned int k = blockIdx.x * blockDim.x + threadIdx.x; k < (len);              \
         k += gridDim.x * blockDim.x)

// What a step reads of element k: r, w and z at k and at its four neighbours (centre, then
// k - n, k + n, k - 1, k + 1; 0 where the neighbour is outside the grid), p[k] and x[k].
struct Elem {
    double r[5], w[5], z[5], p, x;
};

__device__ __forceinline__ Elem load_elem(unsigned int n, unsigned int k,
                                          const double *__restrict__ r,
                                          const double *__restrict__ w,
                                          const double *__restrict__ z,
                                          const double *__restrict__ p,
                                          const double *__restrict__ x) {
    unsigned int i = k / n, j = k % n;
    unsigned int m[5] = {k, k - n, k + n, k - 1, k + 1};
    bool in[5] = {true, i > 0, i + 1 < n, j > 0, j + 1 < n};
    Elem e;
#pragma unroll
    for (int q = 0; q < 5; q++) {
        e.r[q] = in[q] ? r[m[q]] : 0.0;
        e.w[q] = in[q] ? w[m[q]] : 0.0;
        e.z[q] = in[q] ? z[m[q]] : 0.0;
    }
    e.p = p[k];
    e.x = x[k];
    return e;
}

// The buffers of a step. `v` (3 len doubles): r, then w = A r, then z = A p. `s` (3 + 2 PARTS
// doubles): gamma = r . r, alpha and the iterations done (exact in an f64) of the last step,
// then the PARTS per-block parts of the new r . r, then those of w . r.
#define S_PARTS 3

// Start (PARTS blocks): r = b, w = A b, z = 0 (in v), and the parts of r . r and w . r (in s).
extern "C" __global__ void start(unsigned int n, const double *b, double *v, double *s) {
    unsigned int len = n * n;
    double s_rr = 0.0, s_wr = 0.0;
    FOR_EACH(k, len) {
        unsigned int i = k / n, j = k % n;
        double wk = 4.0 * b[k];
        if (i > 0) wk -= b[k - n];
        if (i + 1 < n) wk -= b[k + n];
        if (j > 0) wk -= b[k - 1];
        if (j + 1 < n) wk -= b[k + 1];
        v[k] = b[k];
        v[len + k] = wk;
        v[2 * len + k] = 0.0;
        s_rr += b[k] * b[k];
        s_wr += wk * b[k];
    }
    double2 t = block_sum2(s_rr, s_wr);
    if (threadIdx.x == 0) {
        s[S_PARTS + blockIdx.x] = t.x;
        s[S_PARTS + PARTS + blockIdx.x] = t.y;
    }
}

// Start's scalars (one block): rr0 = r . r summed from s's parts; thresh = tol2 rr0; rr = rr0;
// (gamma, alpha, iterations) = (1, 1, 0) (the first step does not use the first two: its
// beta is 0); done = !(rr0 >= thresh), the step's test.
extern "C" __global__ void start_scalars(double tol2, double *s, double *rr0, double *thresh,
                                         double *rr, unsigned int *it, unsigned int *done) {
    double v = sum_parts2(s + S_PARTS).x;
    if (threadIdx.x == 0) {
        *rr0 = v;
        *thresh = tol2 * v;
        *rr = v;
        s[0] = 1.0;
        s[1] = 1.0;
        s[2] = 0.0;
        *it = 0;
        *done = !(v >= tol2 * v);
    }
}

// One iteration (PARTS blocks), described at the top: reads s_in and v_in, writes s_out, v_out,
// p and x. On stopping: rr = gamma, it = iterations done, done = 1, and (with a condition) the
// loop's condition 0.
__device__ void step_body(bool with_condition, cudaGraphConditionalHandle c, unsigned int n,
                          unsigned int max_it, const double *__restrict__ thresh,
                          const double *__restrict__ s_in, const double *__restrict__ v_in,
                          double *__restrict__ s_out, double *__restrict__ v_out,
                          double *__restrict__ p, double *__restrict__ x,
                          double *__restrict__ rr, unsigned int *__restrict__ it,
                          unsigned int *__restrict__ done) {
    // `step` and `step_host` are declared #[programmatic]: every thread waits for the kernel
    // before it (griddepcontrol.wait, compute capability 9.0 and later) before it reads any
    // buffer or returns, so that a programmatic edge into it orders its accesses.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    unsigned int len = n * n, stride = gridDim.x * blockDim.x;
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    const double *r_in = v_in, *w_in = v_in + len, *z_in = v_in + 2 * len;
    // Everything the step starts from, loaded at once before anything waits on a load: the
    // flag, the last step's scalars and partial sums, and this thread's first element.
    // The flag once per block (see the top): every thread of a block decides alike.
    __shared__ unsigned int stop;
    if (threadIdx.x == 0) stop = *(volatile unsigned int *)done;
    double th = *thresh, gamma_prev = s_in[0], alpha_prev = s_in[1], its = s_in[2];
    double part_rr = s_in[S_PARTS + threadIdx.x], part_wr = s_in[S_PARTS + PARTS + threadIdx.x];
    Elem e;
    if (k < len) e = load_elem(n, k, r_in, w_in, z_in, p, x);
    __syncthreads();
    if (stop) return;
    double2 gd = block_sum2(part_rr, part_wr);
    double gamma = gd.x, delta = gd.y;
    if (!(gamma >= th) || its >= (double)max_it) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            *rr = gamma;
            *it = (unsigned int)its;
            *(volatile unsigned int *)done = 1;
            if (with_condition) cudaGraphSetConditional(c, 0);
        }
        return;
    }
    // The first step (z and p are 0): beta 0, alpha = gamma / delta.
    double beta = its == 0.0 ? 0.0 : gamma / gamma_prev;
    double alpha = its == 0.0 ? gamma / delta : gamma / (delta - beta * gamma / alpha_prev);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        s_out[0] = gamma;
        s_out[1] = alpha;
        s_out[2] = its + 1.0;
    }
    double s_rr = 0.0, s_wr = 0.0;
    for (; k < len; k += stride) {
        Elem cur = e;
        // The next element's loads go out before this one's stores (software pipelining).
        if (k + stride < len) e = load_elem(n, k + stride, r_in, w_in, z_in, p, x);
        // New z = w + beta z and r = r - alpha z at k and its neighbours, each rounded once
        // (fma): every thread gets the bits the neighbour's owner writes. Outside the grid
        // they are 0 and subtract nothing.
        double zn[5], rn[5];
#pragma unroll
        for (int q = 0; q < 5; q++) {
            zn[q] = __fma_rn(beta, cur.z[q], cur.w[q]);
            rn[q] = __fma_rn(-alpha, zn[q], cur.r[q]);
        }
        double wk = 4.0 * rn[0] - rn[1] - rn[2] - rn[3] - rn[4];
        double pk = __fma_rn(beta, cur.p, cur.r[0]);
        p[k] = pk;
        x[k] = __fma_rn(alpha, pk, cur.x);
        v_out[k] = rn[0];
        v_out[len + k] = wk;
        v_out[2 * len + k] = zn[0];
        s_rr += rn[0] * rn[0];
        s_wr += wk * rn[0];
    }
    double2 t = block_sum2(s_rr, s_wr);
    if (threadIdx.x == 0) {
        s_out[S_PARTS + blockIdx.x] = t.x;
        s_out[S_PARTS + PARTS + blockIdx.x] = t.y;
    }
}

// `step` in a device while: on stopping it also sets the loop's condition to 0.
extern "C" __global__ void step(cudaGraphConditionalHandle c, unsigned int n, unsigned int max_it,
                                const double *thresh, const double *s_in, const double *v_in,
                                double *s_out, double *v_out, double *p, double *x, double *rr,
                                unsigned int *it, unsigned int *done) {
    step_body(true, c, n, max_it, thresh, s_in, v_in, s_out, v_out, p, x, rr, it, done);
}

// The same without a condition (the host-checked variants).
extern "C" __global__ void step_host(unsigned int n, unsigned int max_it, const double *thresh,
                                     const double *s_in, const double *v_in, double *s_out,
                                     double *v_out, double *p, double *x, double *rr,
                                     unsigned int *it, unsigned int *done) {
    step_body(false, 0, n, max_it, thresh, s_in, v_in, s_out, v_out, p, x, rr, it, done);
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
