// Review 19b (HOLE at bb0a6e0): a place inside a run-time `for` may not use the loop variable
// (every place is borrowed once, before the body runs); `parse::loops::mentions` checks it by
// comparing tokens with `==`, which for proc_macro2 idents compares their text, and `r#i`
// prints otherwise than `i`. So `bufs[r#i]`, which names the loop variable to rustc, passes,
// and is borrowed once with the enclosing function's `i` (here 1): every iteration bumps
// `bufs[1]`, none `bufs[0]`. The same text comparison leaves `r#i` unreplaced in an unrolled
// `for` (`substitute`, `loop_variable_probe`), and `for r#i in 0..2` replaces no `i`
// (`review_session19b.rs`, plan tests). Must be a compile error (compare `unraw`ed names).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

fn call(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    n: usize,
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    let i = 1usize;
    graph!(cache, s, {
        for i in 0..n {
            k.bump(1024, i as u32, &mut bufs[r#i]).launch(c);
        }
    })
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut bufs = vec![s.alloc_zeros::<u32>(1024)?, s.alloc_zeros::<u32>(1024)?];
    call(&mut GraphCache::new(), &k, &s, &mut bufs, 2)
}
