//! `.after` of an outer node from inside a branch, of a branch node from a nested branch, and of
//! an outer node from a graph `for` body: all in scope.
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

fn run(flag: bool) -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    graph!(&mut cache, &stream, {
        let first = k.scale(1024, 2.0, &mut x).launch(cfg);
        if flag {
            let middle = k.axpy(1024, &x, &mut y).launch(cfg).after(first);
            if !flag {
                k.scale(1024, 3.0, &mut x).launch(cfg).after(middle, first);
            } else {
                k.axpy(1024, &x, &mut y).launch(cfg).after(middle);
            }
        }
        for _ in 0..2 {
            k.scale(1024, 4.0, &mut x).launch(cfg).after(first);
        }
        k.axpy(1024, &x, &mut y).launch(cfg).after(first);
    })
}

fn main() {
    if std::env::args().count() > 100 {
        run(true).unwrap();
    }
}
