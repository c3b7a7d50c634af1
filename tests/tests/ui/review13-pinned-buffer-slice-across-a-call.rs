// Review 13: a slice of a `PinnedBuffer` (made after the device's uses finished) cannot be held
// across a call that writes the buffer: the copy would race the reads through the slice.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer, graph};

fn attempt(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    y: &CudaSlice<u32>,
    h: &mut PinnedBuffer<u32>,
) -> cudagraph::Result<u32> {
    let seen = h.as_slice()?;
    graph!(cache, s, {
        copy(&*y, &mut *h);
    })?;
    Ok(seen[0])
}

fn main() {}
