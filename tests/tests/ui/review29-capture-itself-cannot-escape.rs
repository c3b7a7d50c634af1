// Review 29: the `&Capture` handed to the closure, kept outside it, would let later code add
// explicit nodes (`Capture::kernel`) to a graph whose capture ended (or is destroyed), or copy
// between views of aliases that no longer exist.
use std::sync::Arc;

use cudagraph::Capture;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn keep(s: &Arc<CudaStream>, a: &mut CudaSlice<f32>) {
    let mut kept: Option<&Capture> = None;
    let _ = cudagraph::capture(s, (a,), |c, (_v,)| {
        kept = Some(c);
        Ok::<(), cudagraph::Error>(())
    });
    drop(kept);
}

fn main() {}
