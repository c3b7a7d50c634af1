// Review (host work in captures): a pinned buffer of `u8` copied into a device view of `u32`
// (and back): the element types must agree at compile time, else the copy would reinterpret
// bytes (a `u8` host buffer of 4 bytes read as 4 `u32` would overrun it by 12 bytes).
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};

fn mismatch(s: &Arc<CudaStream>, h: &mut PinnedHostSlice<u8>, x: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (h, x), |c, (mut h, mut x)| {
        c.copy_htod(&h, &mut x)?;
        c.copy_dtoh(&x, &mut h)
    });
}

fn main() {}
