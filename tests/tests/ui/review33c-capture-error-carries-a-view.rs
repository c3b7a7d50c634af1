// Review 33c: the closure's error leaves the capture (kept in `Error::Capture`). An error type
// that holds a view would carry an alias of the operand out of the closure, past the capture
// and the borrow. `E: Into<Box<dyn Error + Send + Sync>>` makes it `'static` (and `Send`).
use std::sync::Arc;

use cudagraph::CaptureSliceMut;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

#[derive(Debug)]
struct Carry<'s>(CaptureSliceMut<'s, f32>);
impl std::fmt::Display for Carry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("carry")
    }
}
impl std::error::Error for Carry<'_> {}

fn escape(s: &Arc<CudaStream>, a: &mut CudaSlice<f32>) {
    let r = cudagraph::capture(s, (a,), |_, (v,)| Err(Carry(v)));
    drop(r);
}

fn main() {}
