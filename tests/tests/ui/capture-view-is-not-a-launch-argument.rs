// Issue 29: a capture's view is not a cudarc kernel argument: a raw `launch_builder` argument
// is only had through the `unsafe` `CaptureSlice::as_cuda_view` (cudarc does not check which
// stream it is used on), so safe code cannot launch on a stream outside the capture with it.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaFunction, CudaSlice, CudaStream, PushKernelArg};

fn record(s: &Arc<CudaStream>, other: &Arc<CudaStream>, f: &CudaFunction, y: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (y,), |_, (mut y,)| {
        other.launch_builder(f).arg(&mut y);
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
