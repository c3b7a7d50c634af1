// An `Exec<'a>` that borrows its operands cannot be moved into a `host` closure (`'static`),
// where it would be launched after the buffers were dropped.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, capture, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let mut a = stream.alloc_zeros::<u32>(16)?;
    let g = capture(&stream, (&mut a,), |s, (mut a,)| s.zero(&mut a))?;
    let mut exec = g.instantiate()?;
    let s2 = stream.clone();
    graph!(&mut cache, &stream, {
        host(move |()| {
            let _ = exec.launch(&s2);
        });
    })?;
    drop(a);
    Ok(())
}
