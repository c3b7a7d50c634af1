// Review 33c: a builder's capture closure runs at `launch`, not where it is written. One that
// borrows a buffer dropped before `launch` would use freed memory (through cudarc, eagerly, or
// as a listed operand): `F: 'a` keeps its borrows alive until the builder is launched.
use std::sync::Arc;

use cudagraph::GraphCache;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DriverError};

fn attempt(cache: &mut GraphCache, s: &Arc<CudaStream>, y: &mut CudaSlice<u32>) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let w = g.write(y);
    {
        let side = s.alloc_zeros::<u32>(16).unwrap();
        g.capture(s, (w,), |_, (_w,)| {
            let _ = s.clone_dtoh(&side)?;
            Ok::<(), DriverError>(())
        });
    }
    g.launch()
}

fn main() {}
