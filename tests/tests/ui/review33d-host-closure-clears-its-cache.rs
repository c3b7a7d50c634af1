//! Review 33d: a `host` closure (run later, on a worker, while the stream waits) cannot own or
//! borrow the cache whose call made it: moving the cache in is a move out of a borrowed value.

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        host(move |()| cache.clear());
    })?;
    Ok(())
}
