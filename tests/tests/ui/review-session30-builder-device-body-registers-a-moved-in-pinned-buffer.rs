// Review of session 30: a device body cannot register pinned memory moved into it (the closure
// owns it and drops it when the builder drops the closure, before the graph runs) as a
// readback destination either: registration borrows for the builder's whole lifetime, longer
// than the closure lives.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    y: &CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let mut out = PinnedBuffer::<u32>::zeros(s, 16)?;
    let mut g = cache.builder(s);
    let r = g.read(y);
    let c = g.condition(1);
    g.device_if(c, move |g| {
        let w = g.write(&mut out);
        g.copy(r, w);
    });
    g.launch()
}

fn main() {}
