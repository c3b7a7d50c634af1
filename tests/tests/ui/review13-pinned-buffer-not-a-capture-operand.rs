// Review 13: a `PinnedBuffer` is not a capture operand (its event and last-use note are kept by
// `graph!`'s guards only; a capture's or an `Exec`'s replays would not record them, so a read
// right after a replay would race it). Listing one in `capture` is refused.
use std::sync::Arc;

use cudagraph::PinnedBuffer;
use cudagraph::cudarc::driver::{CudaStream, DriverError};

fn attempt(s: &Arc<CudaStream>, h: &mut PinnedBuffer<u32>) {
    let _ = cudagraph::capture(s, (&mut *h,), |_, (_v,)| Ok::<(), DriverError>(()));
}

fn main() {}
