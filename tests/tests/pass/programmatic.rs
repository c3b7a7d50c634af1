//! Kernels declared `#[programmatic]` (with docs and other kernels around them) are used in
//! `graph!` and with a `GraphBuilder` like any kernel; their names are listed in
//! `K::PROGRAMMATIC`, and a plan's edge kinds follow from it without a GPU.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{EdgeKind, GraphCache, graph, kernels};

kernels! {
    /// Some kernels wait for the kernels before them (`griddepcontrol.wait`).
    pub struct K {
        /// Not programmatic.
        fn fill(n: u32, x: &mut [f32]);
        /// Waits first.
        #[programmatic]
        fn scale(n: u32, a: f32, x: &mut [f32]);
        #[programmatic]
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

const _: () = assert!(K::PROGRAMMATIC.len() == 2);

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers, and `scale`
    // and `axpy` wait (`griddepcontrol.wait`) in every thread before touching memory or
    // returning.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    graph!(&mut cache, &stream, {
        let f = k.fill(1024, &mut x).launch(cfg);
        k.scale(1024, 2.0, &mut x).launch(cfg);
        k.axpy(1024, &x, &mut y).launch(cfg).after(f);
        zero(&mut x);
    })?;
    let plan = cache.plan().expect("ran a graph!");
    let kinds = plan.edge_kinds(|name| K::PROGRAMMATIC.contains(&name));
    assert!(kinds.iter().any(|e| e.2 == EdgeKind::Programmatic));
    print!("{}", plan.to_dot_with(&cache.edges()));
    let mut g = cache.builder(&stream);
    let xw = g.write(&mut x);
    g.kernel(k.fill(1024, xw).launch(cfg));
    let launch = k.scale(1024, 2.0, xw).launch(cfg);
    assert!(launch.programmatic());
    g.kernel(launch);
    assert_eq!(g.edge_kinds(), [(0, 1, EdgeKind::Programmatic)]);
    g.launch()?;
    cache.set_programmatic(false);
    let _ = (cache.programmatic(), cache.stats().programmatic_edges);
    Ok(())
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
