//! A keyed `capture` statement's closure gets the key by reference for the closure's call only:
//! it cannot keep it (nor a view) past the call, here by returning a reference to it through
//! the error type, which would outlive the kept key.

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&mut y, key = String::from("k"), |_s, k, (_y,)| Err::<(), &'static str>(k.as_str()));
    })?;
    Ok(())
}
