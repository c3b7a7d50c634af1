use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, DriverError, PinnedHostSlice};
use cudagraph::GraphCache;

// A builder's captured region takes device handles only: a pinned host handle is refused.
fn step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    host: &PinnedHostSlice<u32>,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(stream);
    let h = g.read(host);
    g.capture(stream, (h,), |_, _| Ok::<(), DriverError>(()));
    g.launch()
}

fn main() {}
