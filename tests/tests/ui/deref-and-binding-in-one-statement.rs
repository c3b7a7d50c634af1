// `x` and `*x` of a reference binding are one place: read and written by one statement, the
// macro reports the race (not rustc's E0502 on generated code).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

fn step(
    cache: &mut GraphCache,
    s: &CudaStream,
    k: &K,
    cfg: LaunchConfig,
    x: &mut CudaSlice<f32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        k.axpy(1024, &x, &mut *x).launch(cfg);
    })
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let stream = ctx.default_stream();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    step(&mut GraphCache::new(), &stream, &k, LaunchConfig::for_num_elems(1024), &mut x)
}
