//! Keyed `capture` statements: the closure captures nothing (it coerces to a `fn`) and gets the
//! key as its second argument; a module and a library-style handle enter the key in an `Arc`.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{CaptureKey, GraphCache, graph, kernels};

kernels! {
    struct K {
        fn affine(n: u32, a: u32, b: u32, x: &[u32], y: &mut [u32]);
    }
}

/// A key type of the user's own.
#[derive(Clone)]
struct Shape {
    n: u32,
    scale: f32,
}

impl CaptureKey for Shape {
    fn same(&self, other: &Self) -> bool {
        self.n == other.n && self.scale.same(&other.scale)
    }
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = Arc::new(unsafe { K::load(&ctx, Ptx::from_src("")) }?);
    let x = stream.alloc_zeros::<u32>(1024)?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let mut z = stream.alloc_zeros::<u32>(1024)?;
    let mut cache = GraphCache::new();
    for a in 0..3u32 {
        let shape = Shape { n: 1024, scale: 0.5 };
        graph!(&mut cache, &stream, {
            capture(&x, &mut y, key = (a, k.clone()), |s, (a, k), (x, mut y)| {
                let cfg = LaunchConfig::for_num_elems(x.len() as u32);
                s.kernel(k.affine(1024, *a, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg))
                    .map(drop)
            });
            capture(&y, &mut z, key = shape, |s, shape, (y, mut z)| {
                let _ = (shape.n, shape.scale);
                s.copy(&y, &mut z)
            });
            capture(&z, key = (), |_, (), (_z,)| Ok::<(), cudagraph::Error>(()));
        })?;
    }
    let s = cache.stats();
    let _ = (s.captures, s.capture_reuses, cache.recordings_kept());
    Ok(())
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
