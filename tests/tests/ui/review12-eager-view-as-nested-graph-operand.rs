// Review 12: an eager `capture` statement's closure runs on the call's stream with views of
// pooled aliases whose events are no longer primed at the statement's start. A nested
// `graph!` call inside the closure must not take such a view as an operand (it is not a
// `Place`: its acquire and the ledger would order the nested call by the alias's stale events
// and its own stream, not by the outer call's borrow).
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{Error, GraphCache, Mode, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let (s, s2) = (ctx.new_stream()?, ctx.new_stream()?);
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let mut inner = GraphCache::new();
    let x = s.alloc_zeros::<u32>(1024)?;
    let mut y = s.alloc_zeros::<u32>(1024)?;
    graph!(&mut cache, &s, {
        capture(&x, &mut y, |_c, (_xv, mut yv)| {
            graph!(&mut inner, &s2, {
                zero(&mut yv);
            })?;
            Ok::<(), Error>(())
        });
    })
}
