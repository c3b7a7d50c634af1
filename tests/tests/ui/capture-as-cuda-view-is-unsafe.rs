// Issue 29: the cudarc view under a capture's view is only had through an `unsafe` call: cudarc
// does not check the stream it is used on, so the caller promises it is one of the capture's.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn record(s: &Arc<CudaStream>, other: &Arc<CudaStream>, y: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (y,), |_, (mut y,)| other.memset_zeros(y.as_cuda_view_mut()));
}

fn main() {}
