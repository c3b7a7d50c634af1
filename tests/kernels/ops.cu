// Kernels of the GPU integration tests (tests/tests/gpu.rs), compiled at run time by NVRTC.
//
// Every kernel is 1-D: thread i = blockIdx.x * blockDim.x + threadIdx.x handles element i < n,
// and writes element i of its one output buffer and nothing else, so no two threads write the
// same element. A kernel reads only its input buffers (never its output) except the in-place
// kernels, where each thread reads and writes only its own element. Several kernels read
// elements written by threads of *other* blocks of the previous kernel (mirror index n-1-i,
// neighbours i±1), so a missing graph edge shows up as a wrong value rather than passing by luck.
// Unsigned arithmetic wraps (defined in C); the int kernel keeps its values far from overflow.

static __device__ __forceinline__ unsigned gid() {
    return blockIdx.x * blockDim.x + threadIdx.x;
}

// x[i] = i * a + b.
extern "C" __global__ void iota(unsigned n, unsigned a, unsigned b, unsigned *x) {
    unsigned i = gid();
    if (i < n) x[i] = i * a + b;
}

// y[i] = x[i] * a + b.
extern "C" __global__ void affine(unsigned n, unsigned a, unsigned b, const unsigned *x, unsigned *y) {
    unsigned i = gid();
    if (i < n) y[i] = x[i] * a + b;
}

// x[i] = x[i] * a + b + i, in place (each thread touches only its own element).
extern "C" __global__ void affine_inplace(unsigned n, unsigned a, unsigned b, unsigned *x) {
    unsigned i = gid();
    if (i < n) x[i] = x[i] * a + b + i;
}

// y[i] = 3 x[i] + (x[n-1-i] ^ (x[(i+1) % n] << 1)): reads elements of other blocks.
extern "C" __global__ void mix(unsigned n, const unsigned *x, unsigned *y) {
    unsigned i = gid();
    if (i >= n) return;
    unsigned next = (i + 1 == n) ? 0u : i + 1;
    y[i] = 3u * x[i] + (x[n - 1 - i] ^ (x[next] << 1));
}

// out[i] = a[i] + 2 b[n-1-i] + (c[i] ^ 0x9e3779b9): the fan-in of three buffers.
extern "C" __global__ void combine3(unsigned n, const unsigned *a, const unsigned *b,
                                    const unsigned *c, unsigned *out) {
    unsigned i = gid();
    if (i < n) out[i] = a[i] + 2u * b[n - 1 - i] + (c[i] ^ 0x9e3779b9u);
}

// x[i] = `spins` steps of a linear congruential generator started at i * a + b. Deliberately
// slow (`spins` dependent multiply-adds per thread) for the cross-stream ordering test.
extern "C" __global__ void slow_iota(unsigned n, unsigned spins, unsigned a, unsigned b, unsigned *x) {
    unsigned i = gid();
    if (i >= n) return;
    unsigned v = i * a + b;
    for (unsigned s = 0; s < spins; ++s) v = v * 1664525u + 1013904223u;
    x[i] = v;
}

// y[i] = x[i] * a + b, read only after `spins` dependent steps: a slow *reader* of x, for the
// cross-stream ordering tests (a later writer of x that does not wait shows up in y). The index
// it reads is always i, through a value the compiler cannot fold, so the load waits for the loop.
extern "C" __global__ void slow_affine(unsigned n, unsigned spins, unsigned a, unsigned b,
                                       const unsigned *x, unsigned *y) {
    unsigned i = gid();
    if (i >= n) return;
    unsigned v = i;
    for (unsigned s = 0; s < spins; ++s) v = v * 1664525u + 1013904223u;
    unsigned j = i + (v >> 31) * n;
    if (j >= n) j -= n;
    y[i] = x[j] * a + b;
}

// y[i] = x[i] * 0x01010101 ^ i: reads bytes (for 1-byte memsets).
extern "C" __global__ void widen_u8(unsigned n, const unsigned char *x, unsigned *y) {
    unsigned i = gid();
    if (i < n) y[i] = ((unsigned)x[i] * 0x01010101u) ^ i;
}

// y[i] = x[i] * 0x00010001 ^ i: reads 16-bit elements (for 2-byte memsets).
extern "C" __global__ void widen_u16(unsigned n, const unsigned short *x, unsigned *y) {
    unsigned i = gid();
    if (i < n) y[i] = ((unsigned)x[i] * 0x00010001u) ^ i;
}

// y[i] = x[n-1-i] * s - (i % 1024). The tests keep |x| < 2^20 and |s| < 2^8: no overflow.
extern "C" __global__ void scale_sub_i32(unsigned n, int s, const int *x, int *y) {
    unsigned i = gid();
    if (i < n) y[i] = x[n - 1 - i] * s - (int)(i % 1024u);
}

// x[i] = a * i + b.
extern "C" __global__ void fill_f32(unsigned n, float a, float b, float *x) {
    unsigned i = gid();
    if (i < n) x[i] = a * (float)i + b;
}

// y[i] = a * x[i] + y[i], in place on y.
extern "C" __global__ void axpy_f32(unsigned n, float a, const float *x, float *y) {
    unsigned i = gid();
    if (i < n) y[i] = a * x[i] + y[i];
}

// y[i] = x[i-1] / 4 + x[i] / 2 + x[i+1] / 4, periodic: reads neighbours in other blocks.
extern "C" __global__ void smooth_f32(unsigned n, const float *x, float *y) {
    unsigned i = gid();
    if (i >= n) return;
    unsigned prev = (i == 0) ? n - 1 : i - 1;
    unsigned next = (i + 1 == n) ? 0u : i + 1;
    y[i] = 0.25f * x[prev] + 0.5f * x[i] + 0.25f * x[next];
}

// The GPU's global timer (ns) into t[0] after `spins` dependent steps of one thread: when a slow
// node finished (ordering tests).
extern "C" __global__ void slow_stamp(unsigned spins, unsigned long long *t) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned v = 1;
    for (unsigned s = 0; s < spins; ++s) v = v * 1664525u + 1013904223u;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    t[0] = now + (v == 0x7fffffffu ? 1ull : 0ull);
}

// The GPU's global timer (ns) into t[0] when the node started (ordering tests).
extern "C" __global__ void stamp(unsigned long long *t) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    t[0] = now;
}
