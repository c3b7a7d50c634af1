use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::GraphCache;

// Pageable host memory cannot be a builder buffer: nothing would keep it alive until the copy.
fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let host = vec![0u32; 16];
    let mut u = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(stream);
    let h = g.read(&host);
    let uw = g.write(&mut u);
    g.copy(h, uw);
    g.launch()
}

fn main() {}
