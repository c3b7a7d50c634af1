// Review 23: a handle of a `PinnedBuffer` (its address and allocation id) cannot be kept past
// the builder that made it and used after the buffer was dropped and another allocated (at
// the same address, often): the handle borrows the buffer for the builder's lifetime.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    other: &mut GraphCache,
    s: &Arc<CudaStream>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let mut a = PinnedBuffer::<u32>::zeros(s, 4)?;
    let kept = {
        let mut g = cache.builder(s);
        let aw = g.write(&mut a);
        g.launch()?;
        aw
    };
    drop(a);
    let _successor = PinnedBuffer::<u32>::zeros(s, 4)?;
    let mut g = other.builder(s);
    let yw = g.write(y);
    g.copy(yw.read(), kept);
    g.launch()
}

fn main() {}
