use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::GraphCache;

// A buffer registered with a builder stays borrowed until `launch`: it cannot be freed before.
fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let mut u = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(stream);
    let uw = g.write(&mut u);
    g.zero(uw);
    drop(u);
    g.launch()
}

fn main() {}
