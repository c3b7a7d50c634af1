// Review 11b: a kept output (`Exec::output`) used after the exec that owns it was dropped (its
// drop frees the memory) or released (a `Released` may be dropped or bound to other buffers):
// the `KeptOutput` borrows the exec, which `drop` and `release` move.
use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::{Exec, Kept};

fn after_drop(stream: &Arc<CudaStream>, exec: Exec<'_>, out: Kept<u32>) -> cudagraph::Result<()> {
    let o = exec.output(&out)?;
    drop(exec);
    let _ = stream.clone_dtoh(&o)?;
    Ok(())
}

fn after_release(stream: &Arc<CudaStream>, exec: Exec<'_>, out: Kept<u32>) -> cudagraph::Result<()> {
    let o = exec.output(&out)?;
    let released = exec.release();
    let _ = stream.clone_dtoh(&o)?;
    drop(released);
    Ok(())
}

fn main() {
    let _ = (after_drop, after_release);
}
