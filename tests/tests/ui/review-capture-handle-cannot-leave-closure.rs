// Review (issue 13): the `&Capture` handed to the closure cannot be kept after it (its stream
// would look "capturing" to code that has no capture).
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, DriverError};

fn keep(s: &Arc<CudaStream>) {
    let mut kept = None;
    let _ = cudagraph::capture(s, (), |c, ()| {
        kept = Some(c);
        Ok::<(), DriverError>(())
    });
    drop(kept);
}

fn main() {}
