//! Review 33d: a keyed `capture` statement's host function (replayed by every later call that
//! takes the kept recording) cannot keep the key it was recorded with: the `fn` gets it by
//! reference for its call only, and the host function is `'static`. (What it may keep is made
//! inside the `fn` from the key's value: part of what the key, compared by `CaptureKey::same`,
//! stands for.)

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: plain u32s, written before read.
    let mut h = unsafe { ctx.alloc_pinned_with_flags::<u32>(4, 0) }?;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&mut h, key = 5u32, |s, k, (mut hv,)| {
            s.host((&mut hv,), move |(hv,)| hv[0] = *k)
        });
    })?;
    Ok(())
}
