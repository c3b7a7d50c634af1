// Review 29: a capture's view moved to another thread while the closure runs (a scoped
// thread, which may outlive nothing) could be used there on that thread's streams and with
// the capture's `&Capture` from two threads at once (explicit nodes are added to a graph that
// is not internally synchronized). Views hold a `&Capture`, which is not `Send`.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn send(s: &Arc<CudaStream>, a: &mut CudaSlice<f32>) {
    let _ = cudagraph::capture(s, (a,), |_, (v,)| {
        std::thread::scope(|t| {
            t.spawn(move || drop(v));
        });
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
