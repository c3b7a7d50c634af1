use std::rc::Rc;

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let count = Rc::new(0u32);
    // The closure runs on the driver's thread: an `Rc` cannot go there.
    graph!(&mut cache, &stream, {
        host(move |()| {
            let _ = *count;
        });
    })
}
