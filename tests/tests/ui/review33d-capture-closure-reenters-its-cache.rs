//! Review 33d: a `capture` statement's closure cannot re-enter the cache whose call runs it:
//! the call holds `&mut cache` while the closure runs, so a nested `graph!` (or `clear`,
//! `set_mode`, …) on it is a borrow error. (Another cache is allowed: it shares nothing with
//! this call but thread-local state, which each call saves and restores.)

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let x = stream.alloc_zeros::<u32>(1024)?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let mut z = stream.alloc_zeros::<u32>(1024)?;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&x, &mut y, |s, (xv, mut yv)| {
            let _ = graph!(&mut cache, &stream, {
                copy(&x, &mut z);
            });
            s.copy(&xv, &mut yv)
        });
    })?;
    Ok(())
}
