//! A crate that denies `unsafe_code` can use `kernels!`, `graph!` and `GraphBuilder`: the only
//! `unsafe` it writes is loading the module (its declarations are the caller's promise); the
//! macros' own `unsafe` blocks (around the hidden `GraphCache::run`, `KernelCall::new` and
//! `__private::condition`) are not the user's and do not trip the lint.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.
#![deny(unsafe_code)]

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};

kernels! {
    struct K {
        fn scale(n: u32, a: f32, x: &mut [f32]);
        fn set(c: Condition, v: &[u32]);
    }
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declaration matches the kernel, which stays within its buffer.
    #[allow(unsafe_code)]
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let v = stream.alloc_zeros::<u32>(1)?;
    graph!(&mut cache, &stream, {
        k.scale(1024, 2.0, &mut x).launch(cfg);
        copy(&x, &mut y);
        memset(&mut x, 0.0f32);
        let c = condition(1);
        device_while(c, {
            k.scale(1024, 0.5, &mut y).launch(cfg);
            k.set(c, &v).launch((1, 1));
        });
    })?;
    let mut g = cache.builder(&stream);
    let xw = g.write(&mut x);
    g.kernel(k.scale(1024, 3.0, xw).launch(cfg));
    g.launch()
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
