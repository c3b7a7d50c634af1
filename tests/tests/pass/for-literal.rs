//! Literal `for` loops, unrolled at compile time: `0..N` and `0..=N`, indexed places `bufs[i]`.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn scale(n: u32, a: f32, x: &mut [f32]);
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut bufs = vec![
        stream.alloc_zeros::<f32>(1024)?,
        stream.alloc_zeros::<f32>(1024)?,
        stream.alloc_zeros::<f32>(1024)?,
    ];
    graph!(&mut cache, &stream, {
        for i in 0..3 {
            k.axpy(1024, &x, &mut bufs[i]).launch(cfg);
        }
        for _ in 0..=1 {
            k.scale(1024, 0.5, &mut x).launch(cfg);
        }
        for i in 1..3 {
            k.axpy(1024, &bufs[0], &mut bufs[i]).launch(cfg);
        }
    })
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
