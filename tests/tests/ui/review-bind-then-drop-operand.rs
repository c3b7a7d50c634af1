// Review (issue 13): `Released::bind` borrows the buffers again for the returned `Exec`: one of
// them cannot be freed while that exec may launch.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn rebind(s: &Arc<CudaStream>, mut y: CudaSlice<f32>) -> cudagraph::Result<()> {
    let g = cudagraph::capture(s, (&mut y,), |c, (mut v,)| {
        c.zero(&mut v)?;
        Ok::<(), cudagraph::Error>(())
    })?;
    let released = g.instantiate()?.release();
    let mut other = s.alloc_zeros::<f32>(1024)?;
    let mut exec = released.bind((&mut other,));
    drop(other);
    exec.launch(s)
}

fn main() {}
