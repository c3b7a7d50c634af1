//! `x` and `*x` of a `&mut CudaSlice` binding are one place (issue 32): used in two host `if`
//! branches (or two statements) of one `graph!`, they are borrowed once, through `*x`, so the
//! binding needs no `mut`, and the statements are ordered as users of one buffer. The same for
//! a field holding a reference, for `&` bindings, and for `(*x)`.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn scale(n: u32, a: f32, x: &mut [f32]);
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

struct Bufs<'a> {
    x: &'a mut CudaSlice<f32>,
}

fn step(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &K,
    x: &mut CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    r: &CudaSlice<f32>,
    bufs: &mut Bufs<'_>,
    check: bool,
) -> cudagraph::Result<()> {
    let cfg = LaunchConfig::for_num_elems(1024);
    graph!(cache, stream, {
        if check {
            k.scale(1024, 2.0, &mut *x).launch(cfg);
            copy(&x, &mut (*bufs.x));
        } else {
            k.axpy(1024, &x, &mut *y).launch(cfg);
            k.axpy(1024, &*r, &mut *bufs.x).launch(cfg);
        }
        k.axpy(1024, &r, &mut y).launch(cfg);
        k.axpy(1024, &(*r), &mut x).launch(cfg);
    })
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let mut z = stream.alloc_zeros::<f32>(1024)?;
    let r = stream.alloc_zeros::<f32>(1024)?;
    step(&mut cache, &stream, &k, &mut x, &mut y, &r, &mut Bufs { x: &mut z }, true)
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
