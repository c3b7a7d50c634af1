// The closure runs on a worker thread; it cannot hand its view to a thread that outlives it
// (`std::thread::spawn` needs `'static`), in graph! or a builder.
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
            std::thread::spawn(move || v[0] = 1);
        });
    })?;
    let mut g = cache.builder(&stream);
    let pw = g.write(&mut p);
    g.host((pw,), move |(v,)| {
        std::thread::spawn(move || v[0] = 2);
    });
    g.launch()
}
