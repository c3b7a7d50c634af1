use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn scale(n: u32, a: f32, x: &mut [f32]);
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    graph!(&mut cache, &stream, {
        let tmp = alloc::<f32>(1024);
        k.scale(1024, 2.0, &mut tmp).launch(cfg);
        free(&mut tmp);
        k.axpy(1024, &tmp, &mut y).launch(cfg);
    })
}
