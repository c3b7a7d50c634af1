// Review 33c: a builder host closure runs on a worker thread when the launch reaches its node,
// after `launch` returned and the borrows ended: it must own what it uses (`'static`), even a
// buffer the builder itself has registered.
use std::sync::Arc;

use cudagraph::GraphCache;
use cudagraph::cudarc::driver::{CudaStream, PinnedHostSlice};

fn attempt(cache: &mut GraphCache, s: &Arc<CudaStream>, h: &PinnedHostSlice<u32>) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let r = g.read(h);
    g.host((r,), move |(_r,)| {
        let _ = h.len();
    });
    g.launch()
}

fn main() {}
