// Issue 29: `Capture::read` takes only the closure's own views (`CaptureSlice`,
// `CaptureSliceMut`), never a cudarc view of a buffer the capture does not list.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn record(s: &Arc<CudaStream>, unlisted: &CudaSlice<u32>, y: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (y,), |c, (_y,)| {
        c.read(&unlisted.as_view())?;
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
