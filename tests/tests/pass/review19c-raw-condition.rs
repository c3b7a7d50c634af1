// Review 19c: a condition bound `r#c`, set and driven as `c` (names compared unraw, 2f4a346).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
        fn set_nonzero(c: Condition, v: &[u32]);
    }
}

fn condition_raw(k: &K, s: &Arc<CudaStream>, v: &CudaSlice<u32>, y: &mut CudaSlice<u32>)
-> cudagraph::Result<()> {
    let one = LaunchConfig::for_num_elems(1);
    graph!(&mut GraphCache::new(), s, {
        let r#c = condition(0);
        k.set_nonzero(c, &*v).launch(one);
        device_if(c, {
            k.bump(1, 3, &mut *y).launch(one);
        });
    })
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let v = s.alloc_zeros::<u32>(1)?;
    let mut y = s.alloc_zeros::<u32>(1)?;
    condition_raw(&k, &s, &v, &mut y)
}

fn main() {
    // Compiled, not run (no GPU needed).
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
