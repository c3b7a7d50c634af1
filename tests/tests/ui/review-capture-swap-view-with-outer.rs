// Review (issue 13): `std::mem::swap` of a closure's view with a view made outside the closure
// would hand the capture a buffer it did not list (and leave the alias's view outside): the
// views are `CaptureSliceMut`s (issue 29), which only the capture makes, for the closure's own
// lifetime (`for<'s>`): no view made outside has their type.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DriverError};

fn swap(s: &Arc<CudaStream>, y: &mut CudaSlice<f32>, z: &mut CudaSlice<f32>) {
    let mut outer = z.as_view_mut();
    let _ = cudagraph::capture(s, (y,), |c, (mut v,)| {
        std::mem::swap(&mut v, &mut outer);
        // SAFETY: (not reached: the borrow is refused) the work touches the listed buffers only.
        unsafe { c.stream() }.memset_zeros(&mut v)?;
        Ok::<(), DriverError>(())
    });
    drop(outer);
}

fn main() {}
