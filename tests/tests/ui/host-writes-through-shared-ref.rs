use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    // SAFETY: plain u32s.
    let p = unsafe { ctx.alloc_pinned::<u32>(16)? };
    // `&p` gives the closure a `&[u32]`: it cannot write it.
    graph!(&mut cache, &stream, {
        host(&p, move |(p,)| {
            p[0] = 1;
        });
    })
}
