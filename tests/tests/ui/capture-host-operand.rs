// Capture operands are device memory only: a host `Vec` is refused.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, DriverError};

fn host(s: &Arc<CudaStream>, v: &Vec<f32>) {
    let _ = cudagraph::capture(s, (v,), |_, _| Ok::<(), DriverError>(()));
}

fn main() {}
