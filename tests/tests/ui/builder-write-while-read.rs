use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::GraphCache;

// One builder cannot register a buffer for reading and for writing: the two handles would alias.
// A buffer read and written by the graph is registered once with `write`, and read with `.read()`.
fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let mut u = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(stream);
    let ur = g.read(&u);
    let uw = g.write(&mut u);
    let _ = (ur, uw);
    g.launch()
}

fn main() {}
