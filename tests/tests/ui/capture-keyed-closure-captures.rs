//! A keyed `capture` statement's closure captures nothing: what its recording depends on is its
//! key and its operands, which the cache compares; a captured local would be a dependence it
//! cannot see. Capturing one is a compile error (the closure must coerce to a `fn`).

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let x = stream.alloc_zeros::<u32>(1024)?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let offset = 3usize;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&x, &mut y, key = (), |s, (), (x, mut y)| {
            s.copy(&x.slice(offset..), &mut y.slice_mut(offset..))
        });
    })?;
    Ok(())
}
