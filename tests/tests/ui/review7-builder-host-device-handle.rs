// A builder `host` closure cannot list a device buffer's handle (the host would dereference a
// device address).
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::GraphCache;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let mut d = stream.alloc_zeros::<u32>(16)?;
    let mut g = cache.builder(&stream);
    let dw = g.write(&mut d);
    g.host((dw,), move |(v,)| {
        let _ = v;
    });
    g.launch()
}
