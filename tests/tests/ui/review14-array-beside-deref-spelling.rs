// Review 14: `&mut bufs[i]` of an unrolled `for` (one group, acquired in one loop through
// `bufs`) beside `&(*bufs)[0]`, the same element spelled through an inner deref (another key,
// so another place): the second borrow of `*bufs` is refused, not two handles of one buffer.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn mix(n: u32, x: &[u32], y: &mut [u32]);
    }
}

fn attempt(
    cache: &mut GraphCache,
    k: &K,
    s: &cudagraph::cudarc::driver::CudaStream,
    bufs: &mut [CudaSlice<u32>; 2],
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..2 {
            k.mix(4, &(*bufs)[0], &mut bufs[i]).launch(LaunchConfig::for_num_elems(4));
        }
    })
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut bufs = [s.alloc_zeros::<u32>(4)?, s.alloc_zeros::<u32>(4)?];
    attempt(&mut GraphCache::new(), &k, &s, &mut bufs)
}
