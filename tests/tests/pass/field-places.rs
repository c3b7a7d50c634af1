//! Field places: `s.u`, `self.u` and nested fields, each a distinct place.
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

struct Pair {
    u: CudaSlice<f32>,
    v: CudaSlice<f32>,
}

struct State {
    fields: Pair,
    scratch: CudaSlice<f32>,
    cache: GraphCache,
}

impl State {
    fn step(&mut self, k: &K, stream: &CudaStream, cfg: LaunchConfig) -> cudagraph::Result<()> {
        graph!(&mut self.cache, stream, {
            k.axpy(1024, &self.fields.u, &mut self.fields.v).launch(cfg);
            k.axpy(1024, &self.fields.v, &mut self.scratch).launch(cfg);
            copy(&self.scratch, &mut self.fields.u);
        })
    }
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut s = Pair { u: stream.alloc_zeros(1024)?, v: stream.alloc_zeros(1024)? };
    graph!(&mut cache, &stream, {
        k.scale(1024, 2.0, &mut s.u).launch(cfg);
        k.axpy(1024, &s.u, &mut s.v).launch(cfg);
    })?;
    let mut state = State { fields: s, scratch: stream.alloc_zeros(1024)?, cache };
    state.step(&k, &stream, cfg)
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
