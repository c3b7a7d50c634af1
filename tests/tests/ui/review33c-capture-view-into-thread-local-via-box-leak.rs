// Review 33c: `Box::leak` gives a `&'s mut` of a view, never a `'static` one (the view carries
// `'s`), so it cannot be parked in a thread-local or a static and used after the capture ended.
use std::cell::RefCell;
use std::sync::Arc;

use cudagraph::CaptureSliceMut;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

thread_local! {
    static PARKED: RefCell<Option<&'static mut CaptureSliceMut<'static, f32>>> =
        const { RefCell::new(None) };
}

fn escape(s: &Arc<CudaStream>, a: &mut CudaSlice<f32>) {
    let _ = cudagraph::capture(s, (a,), |_, (v,)| {
        let leaked = Box::leak(Box::new(v));
        PARKED.with(|p| *p.borrow_mut() = Some(leaked));
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
