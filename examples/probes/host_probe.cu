// Probe for issue 29, kind 7 (host closures that call CUDA): which hand-off from the driver's
// host-function callback to a worker thread of our own lets the worker make CUDA calls.
//
//   A "blocked": the callback hands the job to a worker and waits until the worker finished
//     (the design tried in session 7, which hung in the Rust tests). The worker frees a buffer
//     with cudaFreeAsync on another stream and allocates one with cudaMallocAsync. Reported:
//     whether the worker finished within 5 s (else: deadlock while the callback is blocked).
//   B "wait-value": the callback hands the job over and returns at once; the stream then waits
//     for a flag in mapped pinned host memory (cuStreamWaitValue32, EQ 1) and resets it
//     (cuStreamWriteValue32, 0) before the next kernel. The worker does the same CUDA calls,
//     writes the job's result into pinned memory and sets the flag. Eagerly on a stream, then
//     captured into a graph (the mem ops become a batch mem-op node) and launched 5 times.
//     A kernel after the wait copies the job's result to device memory; checked on the host.
//
// Measured on the H200 (CUDA 13.0, driver 580), 2026-12-01:
//   A and A2 finished: cudaMallocAsync / cudaFreeAsync from the worker, on another stream or on
//   the launching stream itself, while the callback is blocked. But in the Rust version of A
//   (session 7's worker, a closure dropping a cudarc buffer, traced with eprintln), the worker
//   blocked for good in cudarc's `stream.record_event(None)` (cuEventCreate + cuEventRecord on
//   the launching stream) right after `bind_to_thread` returned: cudarc's buffer drop waits on
//   the buffer's events (cuStreamWaitEvent), so design A deadlocks on an ordinary drop.
//   B (the callback returns at once) worked eagerly and as a graph (5 of 5 launches saw the
//   worker's result; 5 nodes: kernel, host, batch mem-op wait, batch mem-op write, kernel).
//
//   nvcc -O2 -arch=sm_90 -o host_probe examples/probes/host_probe.cu -lcuda -lpthread && ./host_probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));           \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
#define CD(x)                                                                                   \
    do {                                                                                        \
        CUresult r_ = (x);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                               \
            const char *s_ = "?";                                                               \
            cuGetErrorName(r_, &s_);                                                            \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);                               \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void copy_in(const volatile unsigned *src, unsigned *dst) { *dst = *src; }
__global__ void spin(unsigned long long cycles) {
    unsigned long long t = clock64();
    while (clock64() - t < cycles) {}
}

struct Job {
    pthread_mutex_t m;
    pthread_cond_t c;
    int pending, done;
    unsigned value;            // written by the worker into *result
    volatile unsigned *result; // pinned
    volatile unsigned *flag;   // mapped pinned (wait-value design), or null
    cudaStream_t other;
    int failures;
};

static void *worker(void *p) {
    Job *j = (Job *)p;
    for (;;) {
        pthread_mutex_lock(&j->m);
        while (!j->pending) pthread_cond_wait(&j->c, &j->m);
        j->pending = 0;
        pthread_mutex_unlock(&j->m);
        // The job: CUDA calls a dropped buffer makes (a stream-ordered free), and one more.
        void *b = nullptr;
        if (cudaMallocAsync(&b, 1 << 20, j->other) != cudaSuccess) j->failures++;
        if (b && cudaFreeAsync(b, j->other) != cudaSuccess) j->failures++;
        *j->result = j->value;
        __sync_synchronize();
        if (j->flag) *j->flag = 1;
        pthread_mutex_lock(&j->m);
        j->done = 1;
        pthread_cond_broadcast(&j->c);
        pthread_mutex_unlock(&j->m);
    }
    return nullptr;
}

static void post(Job *j) {
    pthread_mutex_lock(&j->m);
    j->done = 0;
    j->pending = 1;
    pthread_cond_broadcast(&j->c);
    pthread_mutex_unlock(&j->m);
}

// Design A: hand over and wait (at most 5 s).
static int timed_out = 0;
static void CUDART_CB blocked(void *p) {
    Job *j = (Job *)p;
    post(j);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 5;
    pthread_mutex_lock(&j->m);
    while (!j->done)
        if (pthread_cond_timedwait(&j->c, &j->m, &t) != 0) {
            timed_out = 1;
            break;
        }
    pthread_mutex_unlock(&j->m);
}

// Design B: hand over and return.
static void CUDART_CB handoff(void *p) { post((Job *)p); }

int main() {
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    cudaStream_t s, other;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    unsigned *result, *flag, *dev;
    CK(cudaHostAlloc((void **)&result, 4, cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&flag, 4, cudaHostAllocMapped));
    CK(cudaMalloc((void **)&dev, 4));
    CUdeviceptr dflag;
    CD(cuMemHostGetDevicePointer(&dflag, flag, 0));
    *flag = 0;
    Job j = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, result, nullptr, other, 0};
    pthread_t w;
    pthread_create(&w, nullptr, worker, &j);

    // A: blocked callback.
    j.value = 11;
    spin<<<1, 1, 0, s>>>(1000000);
    CK(cudaLaunchHostFunc(s, blocked, &j));
    copy_in<<<1, 1, 0, s>>>(result, dev);
    cudaError_t e = cudaStreamSynchronize(s);
    unsigned got = 0;
    CK(cudaMemcpy(&got, dev, 4, cudaMemcpyDeviceToHost));
    printf("A blocked callback: %s, worker CUDA failures %d, sync %s, result %u (want 11)\n",
           timed_out ? "TIMED OUT (the worker's CUDA calls waited for the blocked callback)" : "finished",
           j.failures, cudaGetErrorString(e), got);

    // A2: blocked callback, the worker's free on the launching stream itself (as a buffer
    // allocated on the graph's stream and dropped in the closure: cudarc frees it there).
    timed_out = 0;
    j.failures = 0;
    j.value = 12;
    j.other = s;
    spin<<<1, 1, 0, s>>>(1000000);
    CK(cudaLaunchHostFunc(s, blocked, &j));
    copy_in<<<1, 1, 0, s>>>(result, dev);
    e = cudaStreamSynchronize(s);
    CK(cudaMemcpy(&got, dev, 4, cudaMemcpyDeviceToHost));
    printf("A2 blocked callback, worker frees on the launching stream: %s, worker CUDA failures "
           "%d, sync %s, result %u (want 12)\n",
           timed_out ? "TIMED OUT" : "finished", j.failures, cudaGetErrorString(e), got);
    j.other = other;

    // B: wait-value, eagerly.
    j.flag = flag;
    j.failures = 0;
    j.value = 22;
    spin<<<1, 1, 0, s>>>(1000000);
    CK(cudaLaunchHostFunc(s, handoff, &j));
    CD(cuStreamWaitValue32((CUstream)s, dflag, 1, CU_STREAM_WAIT_VALUE_EQ));
    CD(cuStreamWriteValue32((CUstream)s, dflag, 0, 0));
    copy_in<<<1, 1, 0, s>>>(result, dev);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(&got, dev, 4, cudaMemcpyDeviceToHost));
    printf("B eager: result %u (want 22), worker CUDA failures %d, flag after %u (want 0)\n", got,
           j.failures, *flag);

    // B captured into a graph, launched 5 times.
    cudaGraph_t g;
    cudaGraphExec_t x;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    spin<<<1, 1, 0, s>>>(1000000);
    CK(cudaLaunchHostFunc(s, handoff, &j));
    CD(cuStreamWaitValue32((CUstream)s, dflag, 1, CU_STREAM_WAIT_VALUE_EQ));
    CD(cuStreamWriteValue32((CUstream)s, dflag, 0, 0));
    copy_in<<<1, 1, 0, s>>>(result, dev);
    CK(cudaStreamEndCapture(s, &g));
    size_t n = 0;
    CK(cudaGraphGetNodes(g, nullptr, &n));
    CK(cudaGraphInstantiate(&x, g, 0));
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        j.value = 100 + i;
        CK(cudaGraphLaunch(x, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(&got, dev, 4, cudaMemcpyDeviceToHost));
        ok += got == 100u + i;
    }
    printf("B graph (%zu nodes): %d of 5 launches saw the worker's result, worker CUDA failures %d, "
           "flag after %u\n", n, ok, j.failures, *flag);
    // Timing: 200 launches of the graph back to back, then one synchronize.
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < 200; i++) CK(cudaGraphLaunch(x, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    printf("B graph: %.1f us per launch (spin kernel ~1M cycles included)\n", ms * 1000 / 200);
    printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
