// Review 15b: the words a call was lent stay valid only if nothing else runs on its cache
// between `words` and `run_words`: a body cannot use its own cache (another call, `clear`,
// `words`, a mode switch) while `graph!` holds it.
use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, Mode, graph, kernels};

kernels! {
    struct K {
        fn scale(n: u32, a: f32, x: &mut [f32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    graph!(&mut cache, &stream, {
        k.scale(1024, 2.0, &mut x).launch(cfg);
        k.scale(
            1024,
            {
                cache.clear();
                cache.set_mode(Mode::Eager);
                1.0
            },
            &mut y,
        )
        .launch(cfg);
    })
}
