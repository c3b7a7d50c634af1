// Review 33c: a builder's device body is a closure; a device buffer it makes and registers would
// be freed when the body returns, before the graph's kernels (launched later) use it. The
// registration borrows for the builder's lifetime `'a`, which a body-local cannot meet.
use std::sync::Arc;

use cudagraph::GraphCache;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn attempt(cache: &mut GraphCache, s: &Arc<CudaStream>, y: &CudaSlice<u32>) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let r = g.read(y);
    let c = g.condition(1);
    g.device_while(c, |g| {
        let mut tmp = s.alloc_zeros::<u32>(16).unwrap();
        let w = g.write(&mut tmp);
        g.copy(r, w);
    });
    g.launch()
}

fn main() {}
