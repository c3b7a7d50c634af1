use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let x = stream.alloc_zeros::<u32>(16)?;
    // A host closure can only touch pinned host memory, not a device buffer.
    graph!(&mut cache, &stream, {
        host(&x, move |(x,)| {
            let _ = x.len();
        });
    })
}
