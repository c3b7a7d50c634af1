// The fill kernel of `cudagraph`'s `fill(&mut dst, value)` statement, compiled at run time by
// NVRTC. `dst` holds `words` words of `word_bytes` (1, 2, 4 or 8) bytes; word `k` gets word
// `k % period` of `pattern` (one element of `period` words, at most 64 bytes). Grid-stride loop.
struct Pattern { unsigned long long w[8]; };

extern "C" __global__ void cudagraph_fill(unsigned long long dst, unsigned long long words,
                                          unsigned int word_bytes, unsigned int period,
                                          Pattern pattern) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         k < words; k += stride) {
        unsigned int j = (unsigned int)(k % period);
        switch (word_bytes) {
        case 8: ((unsigned long long *)dst)[k] = pattern.w[j]; break;
        case 4: ((unsigned int *)dst)[k] = ((const unsigned int *)pattern.w)[j]; break;
        case 2: ((unsigned short *)dst)[k] = ((const unsigned short *)pattern.w)[j]; break;
        default: ((unsigned char *)dst)[k] = ((const unsigned char *)pattern.w)[j]; break;
        }
    }
}
