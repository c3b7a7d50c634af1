use std::num::NonZeroU32;
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, graph};

// `zero` writes all-zero bytes, so the element type must allow them (cudarc's `ValidAsZeroBits`):
// a buffer of `NonZeroU32` cannot be zeroed, in `graph!` or with a builder.
fn step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    d: &mut CudaSlice<NonZeroU32>,
) -> cudagraph::Result<()> {
    graph!(cache, stream, {
        zero(&mut *d);
    })?;
    let mut g = cache.builder(stream);
    let w = g.write(d);
    g.zero(w);
    g.launch()
}

fn main() {}
