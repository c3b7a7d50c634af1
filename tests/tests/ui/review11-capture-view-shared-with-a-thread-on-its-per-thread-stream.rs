// Review 11: `CU_STREAM_PER_THREAD` is one handle on every thread, and a capture's views accept a
// stream by its raw handle (`Capture::accepts`). Once the call's per-thread stream is joined
// (the `unsafe` `Capture::stream`), a view shared with a scoped thread would pass that check
// there on the thread's *own* per-thread stream, which is not part of the capture, and run at
// once, unordered with the buffer's earlier users. A view holds a `&Capture`, which is not
// `Sync`: `&view` cannot reach another thread.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaContext, CudaSlice};

fn share(ctx: &Arc<CudaContext>, a: &mut CudaSlice<u32>) {
    let pt = ctx.per_thread_stream();
    let _ = cudagraph::capture(&pt, (a,), |s, (v,)| {
        // SAFETY: nothing is enqueued on the joined stream on this thread.
        let _ = unsafe { s.stream() };
        let other = ctx.per_thread_stream();
        std::thread::scope(|t| {
            t.spawn(|| other.clone_dtoh(&v));
        });
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
