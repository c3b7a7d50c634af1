// Review 26: a `Mode::Eager` capture statement on the per-thread stream. Its `Capture`'s own
// stream is the call's stream, which `Capture::accepts` now checks first (before `accepted`)
// by raw handle and context: `CU_STREAM_PER_THREAD` is one handle on every thread. A view (or a
// part of one) moved into a scoped thread would pass that check there, on the thread's *own*
// per-thread stream, which is not ordered with the call's work. Views hold a `&Capture`, which
// is not `Send`: a view cannot be moved to another thread.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{Error, GraphCache, Mode, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let pt = ctx.per_thread_stream();
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let x = pt.alloc_zeros::<u32>(1024)?;
    let mut y = pt.alloc_zeros::<u32>(1024)?;
    graph!(&mut cache, &pt, {
        capture(&x, &mut y, |_c, (xv, mut yv)| {
            let part = yv.slice_mut(0..512);
            std::thread::scope(|t| {
                t.spawn(move || {
                    let theirs = ctx.per_thread_stream();
                    let mut part = part;
                    theirs.memcpy_dtod(&xv, &mut part)
                });
            });
            Ok::<(), Error>(())
        });
    })
}
