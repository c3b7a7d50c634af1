//! Memsets with values of 1, 2 and 4 bytes.
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
    let mut bytes = stream.alloc_zeros::<u8>(1024)?;
    let mut halves = stream.alloc_zeros::<i16>(1024)?;
    let mut flags = stream.alloc_zeros::<u32>(1)?;
    let one = 1u32;
    graph!(&mut cache, &stream, {
        memset(&mut x, 1.5f32);
        memset(&mut bytes, 0xffu8);
        memset(&mut halves, -1i16);
        memset(&mut flags, one);
        k.scale(1024, 2.0, &mut x).launch(cfg);
    })
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
