// Review 12: the closure of an eager `capture` statement may itself borrow a buffer the statement
// lists `&` (a shared borrow), but a nested `graph!` call must not write it: the outer call
// holds it borrowed until its work is ordered before any later user, and the closure's views of
// it (pooled aliases, no longer primed) would read it unordered with the nested writer.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{Error, GraphCache, Mode, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let (s, s2) = (ctx.new_stream()?, ctx.new_stream()?);
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let mut inner = GraphCache::new();
    let mut x = s.alloc_zeros::<u32>(1024)?;
    let mut y = s.alloc_zeros::<u32>(1024)?;
    graph!(&mut cache, &s, {
        capture(&x, &mut y, |c, (xv, mut yv)| {
            graph!(&mut inner, &s2, {
                zero(&mut x);
            })?;
            c.copy(&xv, &mut yv)?;
            Ok::<(), Error>(())
        });
    })
}
