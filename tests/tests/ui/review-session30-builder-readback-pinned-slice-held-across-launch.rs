// Review of session 30: a slice of a `PinnedBuffer` taken before the builder registers the
// buffer for its readback node cannot be held across the launch (read after the readback kernel
// stored into the memory under it): `write` borrows the buffer exclusively.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    y: &CudaSlice<u32>,
) -> cudagraph::Result<u32> {
    let mut out = PinnedBuffer::<u32>::zeros(s, 16)?;
    let held = out.as_slice()?;
    let mut g = cache.builder(s);
    let (r, w) = (g.read(y), g.write(&mut out));
    g.copy(r, w);
    g.launch()?;
    Ok(held[0])
}

fn main() {}
