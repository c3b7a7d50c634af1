// A `host` closure cannot take ownership of the pinned buffer its statement lists (it would
// drop it on the worker while the view points into it), in graph! or a builder.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(16)? };
    graph!(&mut cache, &stream, {
        host(&mut p, move |(v,)| {
            v[0] = 1;
            drop(p);
        });
    })?;
    // SAFETY: plain u32s.
    let mut q = unsafe { ctx.alloc_pinned::<u32>(16)? };
    let mut g = cache.builder(&stream);
    let qw = g.write(&mut q);
    g.host((qw,), move |(v,)| {
        v[0] = 1;
        drop(q);
    });
    g.launch()
}
