//! Review 33d: a `Capture::host` function (kept with the recording, dropped on a worker once no
//! exec can launch it) cannot take ownership of a buffer its statement lists: the statement
//! borrows it for the call, so moving it into the function (to drop it there, a
//! `cuMemFreeAsync` while the stream waits for the host node) is a move out of a borrowed value.

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let d = stream.alloc_zeros::<u32>(4)?;
    // SAFETY: plain u32s, written before read.
    let mut h = unsafe { ctx.alloc_pinned_with_flags::<u32>(4, 0) }?;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&d, &mut h, |s, (_dv, mut hv)| {
            s.host((&mut hv,), move |(hv,)| {
                hv[0] = 1;
                drop(d);
            })
        });
    })?;
    Ok(())
}
