// Review 33c: a capture's host function runs at every launch, after the capture ended. Moving
// the `&Capture` or a view into it would let a launch add nodes to a finished capture or reach
// an alias that no longer exists: the host function must be `'static` and `Send`.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};

fn capture_in_host(s: &Arc<CudaStream>, h: &mut PinnedHostSlice<u32>, d: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (h, d), |c, (mut h, mut d)| {
        c.host((&mut h,), move |(_h,)| {
            let _ = c.zero(&mut d);
        })
    });
}

fn main() {}
