// The host views a capture's closure gets live only during the capture (issue 30, item 4): one
// kept outside the closure is refused, as a device view is.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, DriverError, PinnedHostSlice};

fn keep(s: &Arc<CudaStream>, h: &PinnedHostSlice<u32>) {
    let mut keep = None;
    let _ = cudagraph::capture(s, (h,), |_, (v,)| {
        keep = Some(v);
        Ok::<(), DriverError>(())
    });
    drop(keep);
}

fn main() {}
