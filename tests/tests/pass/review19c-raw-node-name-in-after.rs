// Review 19c (false refusal, not a hole): names are compared unraw since 2f4a346, but node names
// still by text (`check.rs`, `names.get(&a.to_string())`): `.after(r#a)` of a node `let a = …`
// is "unknown node `r#a`". Rustc reads `r#a` as `a`: must compile.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

fn after_raw(k: &K, s: &Arc<CudaStream>, x: &mut CudaSlice<u32>, y: &mut CudaSlice<u32>)
-> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    graph!(&mut GraphCache::new(), s, {
        let a = k.bump(1024, 1, &mut *x).launch(c);
        k.bump(1024, 2, &mut *y).launch(c).after(r#a);
    })
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let (mut x, mut y) = (s.alloc_zeros::<u32>(1024)?, s.alloc_zeros::<u32>(1024)?);
    after_raw(&k, &s, &mut x, &mut y)
}

fn main() {
    // Compiled, not run (no GPU needed).
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
