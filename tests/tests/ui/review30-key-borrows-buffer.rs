//! A keyed `capture` statement's key is kept with its recording for later calls: a key that
//! borrows (here a buffer, which the closure could then read outside the listed operands) is
//! refused (`CaptureKey: 'static`); the buffer must be listed as an operand instead.

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let x = stream.alloc_zeros::<u32>(1024)?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&mut y, key = &x, |s, _x, (mut y,)| s.zero(&mut y));
    })?;
    Ok(())
}
