use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn max_diff(n: u32, a: &[f32], out: &mut f32);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let a = stream.alloc_zeros::<f32>(1024)?;
    let mut change = stream.alloc_zeros::<f32>(1)?;
    graph!(&mut cache, &stream, {
        k.max_diff(1024, &a, change).launch(cfg);
    })
}
