use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let mut cache = GraphCache::new();
    let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<f32>(16, 0) }?;
    graph!(&mut cache, &stream, {
        let tmp = alloc::<f32>(16);
        zero(&mut tmp);
        copy(&tmp, &mut pinned);
        host(&tmp, move |(t,)| drop(t));
    })
}
