// One pinned buffer as `&[T]` and `&mut [T]` to one host closure (graph! and eager!).
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, eager, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(16)? };
    graph!(&mut cache, &stream, {
        host(&p, &mut p, move |(a, b)| b[0] = a[0]);
    })?;
    eager!(&stream, host(&p, &mut p, move |(a, b)| b[0] = a[0]))
}
