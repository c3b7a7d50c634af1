// Review of session 30: the builder's readback node writes its destination, so the destination
// must be a handle of `write`: pinned memory registered with `read` (shared, and perhaps read by
// the host meanwhile) is not a copy destination.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    y: &CudaSlice<u32>,
    out: &PinnedBuffer<u32>,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let (r, o) = (g.read(y), g.read(out));
    g.copy(r, o);
    g.launch()
}

fn main() {}
