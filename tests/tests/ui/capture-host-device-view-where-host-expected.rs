// A capture's host copies and host functions take host views of listed pinned operands, not
// device views (issue 30, item 4): a device view as the source of `copy_htod`, as the
// destination of `copy_dtoh`, or given to a host function, is refused at compile time.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn device(s: &Arc<CudaStream>, a: &CudaSlice<u32>, b: &mut CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (a, b), |c, (a, mut b)| {
        c.copy_htod(&a, &mut b)?;
        c.copy_dtoh(&a, &mut b)?;
        c.host((&a,), |(_a,)| {})
    });
}

fn main() {}
