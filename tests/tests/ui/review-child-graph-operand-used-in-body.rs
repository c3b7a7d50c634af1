// Review (issue 13): a `Graph` embedded with `child(&mut g)` holds its operands' borrows, so the
// same `graph!` body cannot also name a buffer the graph writes (the borrow checker, not the
// run-time aliasing check, keeps the two from overlapping).
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let mut g = cudagraph::capture(&stream, (&mut y,), |s, (mut y,)| {
        s.zero(&mut y)?;
        Ok::<(), cudagraph::Error>(())
    })?;
    graph!(&mut cache, &stream, {
        child(&mut g);
        copy(&x, &mut y);
    })
}
