// Issue 29: the closure of a capture cannot reach the capturing stream in safe code. The
// call's stream joins the capture only through `Capture::stream`, which is `unsafe`: work
// enqueued on it is recorded and replayed at every launch, so the caller promises what it
// touches.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn record(s: &Arc<CudaStream>, y: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (y,), |c, (mut y,)| c.stream().memset_zeros(&mut y));
}

fn main() {}
