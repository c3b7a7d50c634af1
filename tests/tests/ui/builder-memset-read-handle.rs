use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::GraphCache;

// A memset writes: it takes the handle of `write`, not of `read`.
fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let u = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(stream);
    let ur = g.read(&u);
    g.memset(ur, 1u32);
    g.launch()
}

fn main() {}
