// The later iterations of an indexed run are made lazily, after the statements that follow
// the run, from the element handles acquired before the body: the array itself stays
// borrowed for the whole body, so a later statement cannot replace or swap its elements.
use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut bufs = vec![stream.alloc_zeros::<u32>(1024)?, stream.alloc_zeros::<u32>(1024)?];
    let mut x = stream.alloc_zeros::<u32>(1024)?;
    graph!(&mut cache, &stream, {
        for i in 0..2 {
            k.bump(1024, 1, &mut bufs[i]).launch(cfg);
        }
        k.bump(1024, { bufs.swap(0, 1); 2 }, &mut x).launch(cfg);
    })
}
