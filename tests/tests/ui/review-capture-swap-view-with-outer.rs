// Review (issue 13): `std::mem::swap` of a closure's view with a view made outside the closure
// would hand the capture a buffer it did not list (and leave the alias's view outside): the
// views' lifetime is the closure's own (`for<'s>`), so the two types differ.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn swap(s: &Arc<CudaStream>, y: &mut CudaSlice<f32>, z: &mut CudaSlice<f32>) {
    let mut outer = z.as_view_mut();
    let _ = cudagraph::capture(s, (y,), |c, (mut v,)| {
        std::mem::swap(&mut v, &mut outer);
        // SAFETY: (not reached: the borrow is refused) the work touches the buffer only.
        unsafe { c.stream() }.memset_zeros(&mut v)?;
        Ok::<(), cudagraph::cudarc::driver::DriverError>(())
    });
    drop(outer);
}

fn main() {}
