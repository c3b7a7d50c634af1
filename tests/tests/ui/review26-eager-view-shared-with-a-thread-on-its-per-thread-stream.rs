// Review 26: as `review26-eager-view-moved-to-a-thread-on-its-per-thread-stream`, with the
// views shared (`&view`) rather than moved: the thread would read them on its own per-thread
// stream (same handle and context as the call's, another stream). A view holds a `&Capture`,
// which is not `Sync`: `&view` cannot reach another thread either.
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
        capture(&x, &mut y, |_c, (xv, _yv)| {
            let xv = &xv;
            std::thread::scope(|t| {
                t.spawn(|| ctx.per_thread_stream().clone_dtoh(xv));
            });
            Ok::<(), Error>(())
        });
    })
}
