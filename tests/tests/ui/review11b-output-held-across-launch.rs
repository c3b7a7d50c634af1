// Review 11b: a kept output (`Exec::output`) held across the exec's next launch, which frees
// that memory and allocates it again (`AUTO_FREE_ON_LAUNCH`), then rewrites it: the slice
// borrows the exec, which `launch` takes `&mut`.
use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::{Exec, Kept};

fn read_across(stream: &Arc<CudaStream>, exec: &mut Exec<'_>, out: Kept<u32>) -> cudagraph::Result<()> {
    exec.launch(stream)?;
    let o = exec.output(&out)?;
    exec.launch(stream)?;
    let _ = stream.clone_dtoh(&o)?;
    Ok(())
}

fn main() {
    let _ = read_across;
}
