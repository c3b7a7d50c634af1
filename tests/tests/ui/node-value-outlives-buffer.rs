use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::{CopyTo, GraphCache, MemcpyParams};

// A node value borrows the buffers its handles point into: it cannot be kept after a buffer is
// dropped (to be slipped into a later graph and copy into freed memory).
fn stale(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<MemcpyParams<'static>> {
    let src = stream.alloc_zeros::<u32>(16)?;
    let mut dst = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(stream);
    let p = g.read(&src).memcpy(g.write(&mut dst));
    drop(g);
    drop(dst);
    Ok(p)
}

fn main() {}
