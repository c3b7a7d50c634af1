// Review (issue 13): the closure of `cudagraph::capture` cannot reach a listed `&mut` buffer
// directly (bypassing its alias view): the operand tuple holds the exclusive borrow.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DriverError};

fn direct(s: &Arc<CudaStream>, mut y: CudaSlice<f32>) -> cudagraph::Result<()> {
    let g = cudagraph::capture(s, (&mut y,), |c, (_v,)| {
        // SAFETY: (not reached: the borrow is refused) the work touches the listed buffers only.
        unsafe { c.stream() }.memset_zeros(&mut y)?;
        Ok::<(), DriverError>(())
    })?;
    drop(g);
    Ok(())
}

fn main() {}
