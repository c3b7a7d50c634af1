use std::sync::Arc;

use cudagraph::__private::{Copy2dNode, CudaStream, acquire, acquire_mut, begin_call, copy_2d_on};
use cudagraph::{PinnedBuffer, Rows};

// Review 33: a `copy_2d` of contiguous rows into pinned memory is a readback node too
// (`Copy2dNode::Readback`); like the 1-D one it borrows both buffers, so it cannot be kept after
// they are dropped.
fn stale(stream: &Arc<CudaStream>) -> cudagraph::Result<Copy2dNode<'static>> {
    let src = stream.alloc_zeros::<u32>(16)?;
    let mut out = PinnedBuffer::<u32>::zeros(stream, 16)?;
    let call = begin_call();
    let (r, _g1) = acquire(&src, stream, &call, 0);
    let (_, w, _g2) = acquire_mut(&mut out, stream, &call, 1);
    Ok(copy_2d_on(stream, r, Rows::dense(4, 4), w, Rows::dense(4, 4)))
}

fn main() {}
