// A builder `host` closure runs on a worker thread of the crate's: it cannot hold an `Rc`.
use std::rc::Rc;

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::GraphCache;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let rc = Rc::new(1u32);
    let mut g = cache.builder(&stream);
    g.host((), move |()| drop(rc));
    g.launch()
}
