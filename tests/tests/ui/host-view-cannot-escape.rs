use std::sync::{Arc, Mutex};

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(16)? };
    let kept: Arc<Mutex<Option<&'static mut [u32]>>> = Arc::new(Mutex::new(None));
    let k = kept.clone();
    // The slice is valid only while the closure runs.
    graph!(&mut cache, &stream, {
        host(&mut p, move |(p,)| {
            *k.lock().unwrap() = Some(p);
        });
    })
}
