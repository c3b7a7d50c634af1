// Review of session 30: the builder's readback node (`GraphBuilder::copy` into pinned memory, a
// kernel node of the crate's readback kernel) writes the `PinnedBuffer` when the graph runs. The
// host cannot read it between `copy` and `launch`, when nothing would wait for the write yet:
// the builder borrows it exclusively until `launch`.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    y: &CudaSlice<u32>,
) -> cudagraph::Result<u32> {
    let mut out = PinnedBuffer::<u32>::zeros(s, 16)?;
    let mut g = cache.builder(s);
    let (r, w) = (g.read(y), g.write(&mut out));
    g.copy(r, w);
    let early = out.as_slice()?[0];
    g.launch()?;
    Ok(early)
}

fn main() {}
