// A buffer of another element type than the kernel parameter's: the first line says which
// element type the buffer must hold (a new user's trial, session 25: the first line named only
// `&buffer`, which they had passed).
use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
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
    let x = stream.alloc_zeros::<f64>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    graph!(&mut cache, &stream, {
        k.axpy(1024, &x, &mut y).launch(cfg);
    })
}
