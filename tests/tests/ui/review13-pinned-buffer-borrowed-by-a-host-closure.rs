// Review 13: a `host` closure runs on a worker thread while the stream waits; it cannot borrow a
// `PinnedBuffer` of the caller (not `'static`, and the buffer is not `Sync`), so it cannot read
// or write one behind the listed operands' backs. (Moving one in is allowed: see paragraph 12;
// waiting for its stream there deadlocks, which Rust's safety does not cover.)
use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::{GraphCache, PinnedBuffer, graph};

fn attempt(cache: &mut GraphCache, s: &Arc<CudaStream>, h: &PinnedBuffer<u32>) {
    let _ = graph!(cache, s, {
        host(move |()| {
            let _ = h.as_slice();
        });
    });
}

fn main() {}
