// Review (host work in captures): a read-only part of a `&mut` host view (`slice`) given to a
// host function as `&mut`: only a `CaptureHostSliceMut` gives `&mut [T]`.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, PinnedHostSlice};

fn promote(s: &Arc<CudaStream>, h: &mut PinnedHostSlice<u32>) {
    let _ = cudagraph::capture(s, (h,), |c, (h,)| {
        let mut part = h.slice(..2);
        c.host((&mut part,), |(p,)| p[0] = 1)
    });
}

fn main() {}
