// Tiny kernels for the launch-overhead benchmark (examples/src/bench.rs). Each is launched as one
// block of 32 threads on n <= 32 unsigned ints, so its GPU time is as small as a kernel's can be
// and the benchmark measures launching, not computing. Unsigned arithmetic wraps, as the host's
// model of the results does.

// x[i] += v for every i < n.
extern "C" __global__ void add(unsigned n, unsigned v, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}

// dst[i] += src[i] for every i < n.
extern "C" __global__ void acc(unsigned n, const unsigned *src, unsigned *dst) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

// x[i] += v, after waiting for the kernels before it (griddepcontrol.wait, first, in every
// thread): the kernel of the programmatic rows, declared `#[programmatic]` in bench.rs and
// compiled for the device's own architecture (the instruction exists from compute capability
// 9.0 on; the programmatic rows run only there).
extern "C" __global__ void add_wait(unsigned n, unsigned v, unsigned *x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}

// add_wait, then griddepcontrol.launch_dependents (cudaTriggerProgrammaticLaunchCompletion())
// last: the kernel of row pt, which checks whether signalling changes a chain with programmatic
// edges from port LAUNCH_ORDER (DESIGN.md's measurement used both instructions).
extern "C" __global__ void add_wait_trigger(unsigned n, unsigned v, unsigned *x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// DESIGN.md's kernel for the programmatic-edge measurement, on memory from cuMemAlloc (rows qc,
// qp, qd, qn): wait for the kernels before (griddepcontrol.wait), x[threadIdx.x] += 1, then
// signal griddepcontrol.launch_dependents. Launched as one block of 32 threads on n = 32
// unsigned ints; the check against n keeps every launch within the buffer (the contract of
// `kernels!`' load), and a block other than the first adds to the same elements.
extern "C" __global__ void inc_wait(unsigned n, unsigned *x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    if (threadIdx.x < n) x[threadIdx.x] += 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
