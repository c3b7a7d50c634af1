// A builder `host` closure cannot keep its `&mut [T]` view past its run (it would point into a
// pinned buffer the builder's borrow no longer protects).
use std::sync::{Arc, Mutex};

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::GraphCache;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(16)? };
    let kept: Arc<Mutex<Option<&'static mut [u32]>>> = Arc::new(Mutex::new(None));
    let k = kept.clone();
    let mut g = cache.builder(&stream);
    let pw = g.write(&mut p);
    g.host((pw,), move |(v,)| {
        *k.lock().unwrap() = Some(v);
    });
    g.launch()
}
