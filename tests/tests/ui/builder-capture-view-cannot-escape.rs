use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, DriverError};
use cudagraph::GraphCache;

// The views a builder's captured closure gets are of aliases that live only while it runs: one
// kept outside the closure would be a dangling alias of the buffer.
fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let u = stream.alloc_zeros::<u32>(16)?;
    let mut keep = None;
    let mut g = cache.builder(stream);
    let ur = g.read(&u);
    g.capture(stream, (ur,), |_, (v,)| {
        keep = Some(v);
        Ok::<(), DriverError>(())
    });
    g.launch()?;
    drop(keep);
    Ok(())
}

fn main() {}
