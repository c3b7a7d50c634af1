// Review 13: a `PinnedBuffer`'s elements are plain device values: no references (a device copy
// would write an address into one) and, for `zeros`, only types valid as zero bits.
use std::sync::Arc;

use cudagraph::PinnedBuffer;
use cudagraph::cudarc::driver::CudaStream;

fn attempt(s: &Arc<CudaStream>, r: &'static u32) {
    let _ = PinnedBuffer::<&'static u32>::from_slice(s, &[r]);
    let _ = PinnedBuffer::<core::num::NonZeroU32>::zeros(s, 4);
}

fn main() {}
