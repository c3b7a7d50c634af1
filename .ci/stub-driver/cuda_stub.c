// A CUDA driver that does nothing, for profiling cudagraph's host path (the generated code, the
// cache, cudarc's buffer handling) on a machine without a GPU: every call succeeds, handles are
// counters, device allocations are distinct address ranges that are never touched, kernels never
// run. Results are meaningless; only the host time of the calls means something. Built and used by
// .ci/host-profile; not part of any test.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdio.h>
static uint64_t next_handle = 0x10000;
static uint64_t next_ptr = 0x700000000000ull;
static void *fake(void) { next_handle += 0x100; return (void *)next_handle; }
// STUB_COUNT=1: at exit, how many times each of the calls below was made (stderr), to count the
// driver calls of a host path (the difference of two runs of different lengths, per call).
#define MAXC 128
static const char *cname[MAXC];
static uint64_t ccount[MAXC];
static int nc;
static void count(const char *name, int *slot) {
    if (*slot == 0) { if (nc >= MAXC - 1) return; *slot = ++nc; cname[*slot] = name; }
    ccount[*slot]++;
}
__attribute__((destructor)) static void report(void) {
    const char *e = getenv("STUB_COUNT");
    if (!e || !*e || *e == '0') return;
    for (int i = 1; i <= nc; i++) fprintf(stderr, "stub %-36s %llu\n", cname[i], (unsigned long long)ccount[i]);
}
#define OUT1(name) int name(void **out, ...) { static int slot; count(#name, &slot); if (out) *out = fake(); return 0; }
#define NOP(name) int name() { static int slot; count(#name, &slot); return 0; }
OUT1(cuStreamCreate) OUT1(cuStreamCreateWithPriority) OUT1(cuEventCreate)
OUT1(cuModuleLoadData) OUT1(cuModuleLoadDataEx) OUT1(cuModuleGetFunction) OUT1(cuGraphCreate) OUT1(cuGraphAddNode_v2) OUT1(cuGraphAddNode)
OUT1(cuGraphAddKernelNode_v2) OUT1(cuGraphAddMemcpyNode) OUT1(cuGraphAddMemsetNode) OUT1(cuGraphAddEmptyNode)
OUT1(cuGraphInstantiateWithFlags) OUT1(cuGraphInstantiateWithParams) OUT1(cuGraphInstantiate_v2)
OUT1(cuCtxCreate_v2) OUT1(cuDeviceGetMemPool) OUT1(cuDeviceGetDefaultMemPool) OUT1(cuCtxPopCurrent_v2)
OUT1(cuLibraryLoadData) OUT1(cuLibraryGetKernel) OUT1(cuKernelGetFunction)
NOP(cuInit) NOP(cuCtxPushCurrent_v2) NOP(cuStreamSynchronize) NOP(cuStreamDestroy_v2) NOP(cuStreamDestroy)
NOP(cuEventRecord) NOP(cuEventRecordWithFlags) NOP(cuEventDestroy_v2) NOP(cuEventSynchronize) NOP(cuStreamWaitEvent) NOP(cuEventQuery)
NOP(cuMemFreeAsync) NOP(cuMemFree_v2) NOP(cuMemsetD8Async) NOP(cuMemsetD32Async) NOP(cuMemsetD8_v2) NOP(cuMemcpyHtoDAsync_v2) NOP(cuMemcpyDtoHAsync_v2)
NOP(cuMemcpyDtoDAsync_v2) NOP(cuMemcpyAsync) NOP(cuMemcpy3DAsync_v2) NOP(cuMemcpyHtoD_v2) NOP(cuMemcpyDtoH_v2) NOP(cuLaunchKernel) NOP(cuLaunchKernelEx)
NOP(cuGraphLaunch) NOP(cuGraphUpload) NOP(cuGraphExecDestroy) NOP(cuGraphDestroy) NOP(cuGraphAddDependencies_v2) NOP(cuGraphAddDependencies)
NOP(cuGraphExecNodeSetParams) NOP(cuGraphExecKernelNodeSetParams_v2) NOP(cuGraphExecUpdate_v2) NOP(cuModuleUnload) NOP(cuDevicePrimaryCtxRelease_v2)
NOP(cuDevicePrimaryCtxRelease) NOP(cuCtxSynchronize) NOP(cuMemPoolSetAccess) NOP(cuFuncSetAttribute) NOP(cuCtxEnablePeerAccess) NOP(cuLibraryUnload)
NOP(cuMemHostUnregister) NOP(cuMemFreeHost) NOP(cuStreamQuery) NOP(cuCtxDestroy_v2) NOP(cuGetProcAddress_v2)
int cuDeviceGet(int *d, int o) { *d = o; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuCtxGetDevice(int *d) { *d = 0; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {
    switch (attr) { case 75: *v = 9; break; case 76: *v = 0; break; case 19: case 41: *v = 1; break; default: *v = 1024; }
    return 0;
}
int cuDeviceGetName(char *s, int len, int dev) { strncpy(s, "stub", len); return 0; }
int cuDeviceTotalMem_v2(size_t *b, int dev) { *b = (size_t)1 << 36; return 0; }
int cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)1 << 35; *t = (size_t)1 << 36; return 0; }
int cuDeviceCanAccessPeer(int *c, int a, int b) { *c = 1; return 0; }
int cuStreamIsCapturing(void *s, int *st) { static int slot; count("cuStreamIsCapturing", &slot); *st = 0; return 0; }
int cuFuncGetAttribute(int *v, int a, void *f) { *v = 0; return 0; }
int cuMemAllocAsync(uint64_t *p, size_t n, void *s) { *p = next_ptr; next_ptr += (n + 4095) & ~4095ull; next_ptr += 4096; return 0; }
int cuMemAlloc_v2(uint64_t *p, size_t n) { return cuMemAllocAsync(p, n, 0); }
int cuMemAllocHost_v2(void **p, size_t n) { *p = malloc(n ? n : 1); return 0; }
int cuMemHostAlloc(void **p, size_t n, unsigned f) { *p = malloc(n ? n : 1); return 0; }
int cuGetErrorString(int e, const char **s) { *s = "stub error"; return 0; }
int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_STUB"; return 0; }
int cuPointerGetAttribute(void *d, int a, uint64_t p) { static int slot; count("cuPointerGetAttribute", &slot); memset(d, 0, 8); return 0; }
int cuCtxGetApiVersion(void *c, unsigned *v) { *v = 13000; return 0; }
int cuStreamGetCtx(void *s, void **c) { static int slot; count("cuStreamGetCtx", &slot); *c = fake(); return 0; }
int cuDevicePrimaryCtxGetState(int d, unsigned *f, int *a) { *f = 0; *a = 1; return 0; }

// Host functions (review 33): run at once on the calling thread, as if the stream were idle; the
// device-side wait on a flag (`cuStreamWaitValue32_v2`) does nothing; mapped pinned memory's
// device address is its host address (unified addressing).
int cuLaunchHostFunc(void *s, void (*f)(void *), void *u) { static int slot; count("cuLaunchHostFunc", &slot); f(u); return 0; }
// With `STUB_FAIL_WAIT_VALUE` set (review 33c), the wait is refused (801, CUDA_ERROR_NOT_SUPPORTED:
// a device without stream memory operations), after the host function before it was enqueued.
int cuStreamWaitValue32_v2(void *s, uint64_t a, unsigned v, unsigned fl) { static int slot; count("cuStreamWaitValue32_v2", &slot); return getenv("STUB_FAIL_WAIT_VALUE") ? 801 : 0; }
int cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned f) { *d = (uint64_t)(uintptr_t)p; return 0; }
// Contexts (review 33). Each `cuDevicePrimaryCtxRetain` gives another handle, so two
// `CudaContext` objects of device 0 are two contexts (what two GPUs give). With
// `STUB_FRESH_RETAINS=n` set, retains after the first n give the context last made current
// instead, and `cuCtxGetCurrent` gives that context: the crate's `keep_primary_context` (host
// functions' flags) then finds the current context primary.
static void *current_ctx;
// Read once: `cuCtxGetCurrent` asks on every call, and a `getenv` per call (about 300
// instructions) would count as the host path's in `.ci/host-profile` and callgrind.
static long fresh_retains(void) {
    static long n = -2;
    if (n == -2) { const char *e = getenv("STUB_FRESH_RETAINS"); n = e ? atol(e) : -1; }
    return n;
}
static long retains;
int cuDevicePrimaryCtxRetain(void **out, int dev) {
    static int slot; count("cuDevicePrimaryCtxRetain", &slot);
    long n = fresh_retains();
    *out = (n >= 0 && retains >= n && current_ctx) ? current_ctx : fake();
    retains++;
    return 0;
}
int cuCtxSetCurrent(void *c) { static int slot; count("cuCtxSetCurrent", &slot); current_ctx = c; return 0; }
int cuCtxGetCurrent(void **out) {
    static int slot; count("cuCtxGetCurrent", &slot);
    *out = (fresh_retains() >= 0 && current_ctx) ? current_ctx : fake();
    return 0;
}
