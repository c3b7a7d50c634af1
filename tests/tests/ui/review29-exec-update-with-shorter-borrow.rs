// Review 29: `Exec::update` hands the exec a graph of other buffers; if that graph's borrows
// could be shorter than the exec's, the exec would launch on buffers already dropped. `update`
// takes a `Graph<'a>` of the exec's own lifetime.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn swap_in(s: &Arc<CudaStream>, a: &mut CudaSlice<f32>) -> cudagraph::Result<()> {
    let n = a.len();
    let g = cudagraph::capture(s, (&mut *a,), |c, (mut v,)| c.zero(&mut v))?;
    let mut exec = g.instantiate()?;
    {
        let mut b = s.alloc_zeros::<f32>(n)?;
        let g2 = cudagraph::capture(s, (&mut b,), |c, (mut v,)| c.zero(&mut v))?;
        exec.update(g2)?;
    }
    exec.launch(s)?;
    Ok(())
}

fn main() {}
