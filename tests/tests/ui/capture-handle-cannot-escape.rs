// A handle made by `Capture::read` has the lifetime of the closure's views: kept outside the
// closure, it would name an alias that no longer exists.
use std::sync::Arc;

use cudagraph::DevRead;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn keep(s: &Arc<CudaStream>, a: &CudaSlice<u32>) {
    let mut keep: Option<DevRead<'_, u32>> = None;
    let _ = cudagraph::capture(s, (a,), |s, (v,)| {
        keep = Some(s.read(&v)?);
        Ok::<(), cudagraph::Error>(())
    });
    drop(keep);
}

fn main() {}
