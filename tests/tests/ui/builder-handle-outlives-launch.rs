use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::GraphCache;

// A handle cannot be carried past its builder's `launch` into the cache's next builder.
fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let mut u = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(stream);
    let uw = g.write(&mut u);
    g.launch()?;
    let mut g2 = cache.builder(stream);
    g2.zero(uw);
    g2.launch()
}

fn main() {}
