// An operand listed `&` is read-only inside the capture: its view is a `CudaView`, which
// cudarc's writes do not take.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DriverError};

fn write(s: &Arc<CudaStream>, x: &CudaSlice<f32>) {
    let _ = cudagraph::capture(s, (x,), |s, (mut x,)| {
        s.stream().memset_zeros(&mut x)?;
        Ok::<(), DriverError>(())
    });
}

fn main() {}
