// Review 14: the array of handles `graph!` makes for an unrolled `for`'s `&mut bufs[i]`
// (`__cudagraph_a0`) and its `Guards` (`__cudagraph_guards`) are hygienic: a scalar argument in
// the body cannot name them (to read a handle, or take a guard out).
use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn iota(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut bufs = vec![s.alloc_zeros::<u32>(4)?, s.alloc_zeros::<u32>(4)?];
    let mut cache = GraphCache::new();
    graph!(&mut cache, &s, {
        for i in 0..2 {
            k.iota(4, __cudagraph_a0[0].1.len() as u32, __cudagraph_guards.all().len() as u32, &mut bufs[i])
                .launch(LaunchConfig::for_num_elems(4));
        }
    })
}
