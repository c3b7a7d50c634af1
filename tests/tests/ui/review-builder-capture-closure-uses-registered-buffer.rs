// Review (issue 13): a builder's captured closure cannot reach a buffer registered with the
// builder directly (it is borrowed until `launch`): only through the operands' views.
use std::sync::Arc;

use cudagraph::GraphCache;
use cudagraph::cudarc::driver::{CudaStream, DriverError};

fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let u = stream.alloc_zeros::<u32>(16)?;
    let mut v = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(stream);
    let (ur, vw) = (g.read(&u), g.write(&mut v));
    let _ = vw;
    g.capture(stream, (ur,), |s, (u,)| -> Result<(), DriverError> {
        // SAFETY: (not reached: the borrow is refused) the work touches the listed buffers only.
        unsafe { s.stream() }.memcpy_dtod(&u, &mut v)
    });
    g.launch()
}

fn main() {}
