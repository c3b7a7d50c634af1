// A captured graph holds its operands' borrows: a buffer it writes cannot be freed (or used)
// while the graph exists.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn freed(s: &Arc<CudaStream>, mut y: CudaSlice<f32>) -> cudagraph::Result<()> {
    let graph = cudagraph::capture(s, (&mut y,), |s, (mut y,)| {
        s.zero(&mut y)?;
        Ok::<(), cudagraph::Error>(())
    })?;
    drop(y);
    graph.instantiate()?.launch(s)
}

fn main() {}
