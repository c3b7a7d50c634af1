// Review of session 30: a device body (a closure the builder runs) cannot register pinned memory
// it owns as a readback destination: the buffer would be freed when the body returns, long
// before the graph's readback kernel stores into it. Registration borrows for the builder's
// whole lifetime.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    y: &CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let r = g.read(y);
    let c = g.condition(1);
    g.device_if(c, |g| {
        let mut out = PinnedBuffer::<u32>::zeros(s, 16).unwrap();
        let w = g.write(&mut out);
        g.copy(r, w);
    });
    g.launch()
}

fn main() {}
