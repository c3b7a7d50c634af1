// Review 19b: `x` and `r#x` are one variable to rustc but two keys to `graph!` (`place_key`
// prints the raw prefix; `check_places` compares keys): one buffer as two places. Read and
// written in one statement, or written by two, it must not compile (held at bb0a6e0: each
// place is a real borrow, so the borrow checker refuses the second: E0502, E0499). Since
// session 19 place keys are unraw: one place, so `graph!` refuses the first statement itself
// (one buffer read and written), and the second function's two statements are one place,
// ordered, which compiles.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
        fn rw(n: u32, a: &[u32], x: &mut [u32]);
    }
}

fn one_statement(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    mut x: CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    graph!(cache, s, {
        k.rw(1024, &r#x, &mut x).launch(c);
    })
}

fn two_statements(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    mut x: CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    graph!(cache, s, {
        k.bump(1024, 1, &mut x).launch(c);
        k.bump(1024, 2, &mut r#x).launch(c);
    })
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    one_statement(&mut GraphCache::new(), &k, &s, s.alloc_zeros::<u32>(1024)?)?;
    two_statements(&mut GraphCache::new(), &k, &s, s.alloc_zeros::<u32>(1024)?)
}
