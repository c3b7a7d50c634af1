//! An empty body: an empty graph, still cached and launched.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {})
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
