// A `Capture` adds explicit nodes to the graph being captured, a CUDA graph object that is not
// internally synchronized: it cannot be shared with another thread.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn share(s: &Arc<CudaStream>, a: &CudaSlice<u32>) {
    let _ = cudagraph::capture(s, (a,), |s, (_v,)| {
        std::thread::scope(|t| {
            t.spawn(|| s.is_capturing());
        });
        Ok::<(), cudagraph::Error>(())
    });
}

fn main() {}
