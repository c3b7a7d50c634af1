// A write handle for an explicit kernel node is made of a `CaptureSliceMut` only: the view of an
// operand listed `&` is a `CaptureSlice`, which `Capture::write` does not take.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn write(s: &Arc<CudaStream>, x: &CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (x,), |s, (mut x,)| {
        let _w = s.write(&mut x)?;
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
