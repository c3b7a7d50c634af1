use std::sync::Arc;

use cudagraph::__private::{CopyNode, CudaStream, acquire, acquire_mut, begin_call, copy_on};
use cudagraph::PinnedBuffer;

// A readback node borrows the buffers its handles point into: it cannot be kept after they are
// dropped (to be slipped into a later call and store into freed pinned memory).
fn stale(stream: &Arc<CudaStream>) -> cudagraph::Result<CopyNode<'static>> {
    let src = stream.alloc_zeros::<u8>(16)?;
    let mut out = PinnedBuffer::<u8>::zeros(stream, 16)?;
    let call = begin_call();
    let (r, _g1) = acquire(&src, stream, &call, 0);
    let (_, w, _g2) = acquire_mut(&mut out, stream, &call, 1);
    Ok(copy_on(stream, r, w))
}

fn main() {}
