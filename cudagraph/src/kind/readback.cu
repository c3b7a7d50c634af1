// The copy kernel of `cudagraph`'s small `copy` from device memory into pinned host memory,
// compiled at run time by NVRTC: `words` words of `word_bytes` (1, 2, 4 or 8) bytes from `src`
// (device memory) to `dst` (pinned host memory, through its device address: unified
// addressing). Grid-stride loop. A memcpy node of a few bytes into pinned memory costs a graph
// step 1.7-5.5 µs more than this kernel on the H200 (examples/probes/copy_kernel.cu).
extern "C" __global__ void cudagraph_readback(unsigned long long src, unsigned long long dst,
                                              unsigned long long words,
                                              unsigned int word_bytes) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         k < words; k += stride) {
        switch (word_bytes) {
        case 8: ((unsigned long long *)dst)[k] = ((const unsigned long long *)src)[k]; break;
        case 4: ((unsigned int *)dst)[k] = ((const unsigned int *)src)[k]; break;
        case 2: ((unsigned short *)dst)[k] = ((const unsigned short *)src)[k]; break;
        default: ((unsigned char *)dst)[k] = ((const unsigned char *)src)[k]; break;
        }
    }
}
