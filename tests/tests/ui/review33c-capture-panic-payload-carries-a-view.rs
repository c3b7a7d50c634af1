// Review 33c: a panic payload leaves the capture (`resume_unwind` re-raises it to the caller,
// who may `catch_unwind` it). One holding a view would be an alias of the operand past the
// capture: `panic_any` needs `Any + Send` (`'static`), which a view is not.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn escape(s: &Arc<CudaStream>, a: &mut CudaSlice<f32>) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = cudagraph::capture(s, (a,), |_, (v,)| {
            std::panic::panic_any(v);
            #[allow(unreachable_code)]
            Ok::<(), cudagraph::Error>(())
        });
    }));
    drop(r);
}

fn main() {}
