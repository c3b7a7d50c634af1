// Issue 29: `Capture::fork` joins another stream into the capture: everything enqueued on it
// until it is joined back is recorded, by any code that holds it. So it is `unsafe`, as
// `Capture::stream` is (the safe `Capture::join` only makes the capture wait for it).
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn record(s: &Arc<CudaStream>, other: &Arc<CudaStream>, y: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (y,), |c, (mut y,)| {
        c.fork(other)?;
        other.memset_zeros(&mut y)?;
        c.join(other)
    });
}

fn main() {}
