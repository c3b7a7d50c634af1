// Review (issue 13): an exec's graph (`Exec::graph`, a shared reference) cannot be embedded:
// `child` needs `&mut`, so a graph is never embedded while an exec of it may be launched.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let exec = cudagraph::capture(&stream, (&mut y,), |s, (mut y,)| {
        s.zero(&mut y)?;
        Ok::<(), cudagraph::Error>(())
    })?
    .instantiate()?;
    let g = exec.graph();
    graph!(&mut cache, &stream, {
        child(&mut *g);
    })
}
