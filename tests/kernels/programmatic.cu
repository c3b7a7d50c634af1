// Kernels of the programmatic dependent launch tests (tests/tests/programmatic.rs), compiled at
// run time by NVRTC for the device's own architecture (so that `griddepcontrol` is there on
// compute capability 9.0 and later).
//
// Every kernel waits for the kernels before it (`griddepcontrol.wait`) in every thread as its
// first statement, before it touches memory or returns: the contract of `#[programmatic]`. The
// same module is loaded as plain kernels too (where the wait does nothing). Right after the wait
// each kernel signals `griddepcontrol.launch_dependents`, so that with programmatic stream
// serialization (the eager oracle) the next kernel starts as early as it can and spends its time
// in its own wait: a missing or misplaced wait then shows up as a wrong value.
//
// Grid-stride loops: any grid computes the same result, so the tests can change grids between
// calls. Every element i reads elements that other blocks of the previous kernel wrote (index
// (i * 7 + 3) % n, the mirror n-1-i), and each thread first spins `spins` dependent steps (more in
// later blocks), so a kernel that ran ahead of its predecessor would read stale values.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define WAIT_FOR_PREDECESSORS() asm volatile("griddepcontrol.wait;" ::: "memory")
#define LET_DEPENDENTS_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define WAIT_FOR_PREDECESSORS()
#define LET_DEPENDENTS_LAUNCH()
#endif

// `spins` dependent steps (more in later blocks) whose result is kept (an empty `asm volatile`
// takes it) but not used: the host model needs no generator.
static __device__ __forceinline__ void spin(unsigned v, unsigned spins) {
    unsigned steps = spins * (1u + blockIdx.x % 4u);
    for (unsigned s = 0; s < steps; ++s) v = v * 1664525u + 1013904223u;
    asm volatile("" ::"r"(v));
}

// y[i] = x[(i * 7 + 3) % n] * a + i, each thread first spinning.
extern "C" __global__ void step(unsigned n, unsigned spins, unsigned a, const unsigned *x,
                                unsigned *y) {
    WAIT_FOR_PREDECESSORS();
    LET_DEPENDENTS_LAUNCH();
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        spin(i, spins);
        unsigned j = (unsigned)(((unsigned long long)i * 7u + 3u) % n);
        y[i] = x[j] * a + i;
    }
}

// x[i] = x[i] * a + b, in place (each thread touches only its own elements).
extern "C" __global__ void scale(unsigned n, unsigned a, unsigned b, unsigned *x) {
    WAIT_FOR_PREDECESSORS();
    LET_DEPENDENTS_LAUNCH();
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        x[i] = x[i] * a + b;
    }
}

// out[i] = a[i] + 3 b[n - 1 - i]: the fan-in of two buffers.
extern "C" __global__ void combine(unsigned n, const unsigned *a, const unsigned *b,
                                   unsigned *out) {
    WAIT_FOR_PREDECESSORS();
    LET_DEPENDENTS_LAUNCH();
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = a[i] + 3u * b[n - 1 - i];
    }
}
