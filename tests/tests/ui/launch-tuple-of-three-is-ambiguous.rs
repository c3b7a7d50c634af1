//! Kernel launches with a `(grid, block)` tuple and a 1-D `(grid, block, shared_bytes)` tuple.
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
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let blocks = 4u32;
    graph!(&mut cache, &stream, {
        k.scale(1024, 2.0, &mut x).launch((4, 256));
        k.axpy(1024, &x, &mut y).launch((blocks, 256, 0));
        k.scale(1024, 0.5, &mut y).launch(cfg);
    })
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
