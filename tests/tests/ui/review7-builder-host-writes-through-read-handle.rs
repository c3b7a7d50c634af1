// A builder `host` closure gets `&[T]` for a read handle: it cannot write the pinned buffer.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::GraphCache;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    // SAFETY: plain u32s.
    let p = unsafe { ctx.alloc_pinned::<u32>(16)? };
    let mut g = cache.builder(&stream);
    let pr = g.read(&p);
    g.host((pr,), move |(v,)| {
        v[0] = 1;
    });
    g.launch()
}
