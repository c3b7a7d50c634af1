// Review (issue 13): `Exec::update` takes a graph of the exec's own lifetime, so after updating
// to a graph of a shorter-lived buffer the exec cannot be launched once that buffer is gone.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn shorter(s: &Arc<CudaStream>, mut y: CudaSlice<f32>) -> cudagraph::Result<()> {
    let zero = |c: &cudagraph::Capture, (mut v,): (cudagraph::CaptureSliceMut<'_, f32>,)| {
        c.zero(&mut v)?;
        Ok::<(), cudagraph::Error>(())
    };
    let mut exec = cudagraph::capture(s, (&mut y,), zero)?.instantiate()?;
    {
        let mut short = s.alloc_zeros::<f32>(1024)?;
        let g = cudagraph::capture(s, (&mut short,), zero)?;
        exec.update(g)?;
    }
    exec.launch(s)
}

fn main() {}
