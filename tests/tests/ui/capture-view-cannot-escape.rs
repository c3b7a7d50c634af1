// The views a capture's closure gets are of aliases that live only during the capture: one
// kept outside the closure would be a dangling alias of the buffer.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DriverError};

fn keep(s: &Arc<CudaStream>, a: &CudaSlice<f32>) {
    let mut keep = None;
    let _ = cudagraph::capture(s, (a,), |_, (v,)| {
        keep = Some(v);
        Ok::<(), DriverError>(())
    });
    drop(keep);
}

fn main() {}
