// A builder `host` closure runs after `launch` returned, on a worker thread: it cannot borrow
// a local (`'static`).
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::GraphCache;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let mut local = vec![0u32; 4];
    let mut g = cache.builder(&stream);
    g.host((), |()| local[0] = 1);
    g.launch()
}
