// An operand listed `&` is read-only inside the capture: its view is a `CaptureSlice`, which
// cudarc's writes do not take.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn write(s: &Arc<CudaStream>, x: &CudaSlice<f32>) {
    let _ = cudagraph::capture(s, (x,), |s, (mut x,)| {
        s.zero(&mut x)?;
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
