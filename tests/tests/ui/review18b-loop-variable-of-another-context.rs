// Review 18b: a `macro_rules!` body with its own `for i` and a place of its caller's that uses
// the caller's `i` (`bufs[i]`): `graph!` replaces every `i` token of the `for` body by the
// iteration's value, so the caller's `i` was replaced too (the places became `bufs[0]`,
// `bufs[1]`, not the caller's `bufs[i]`). Under hygiene that `i` is not the loop's: a compile
// error on it (`__private::loop_variable`).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

macro_rules! twice {
    ($cache:expr, $s:expr, $k:ident, $($x:tt)+) => {{
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            for i in 0..2 {
                $k.bump(1024, 1, &mut $($x)+).launch(c);
            }
        })
    }};
}

fn twice_call(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    i: usize,
) -> cudagraph::Result<()> {
    twice!(cache, s, k, bufs[i])
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut bufs = vec![s.alloc_zeros::<u32>(1024)?];
    twice_call(&mut GraphCache::new(), &k, &s, &mut bufs, 0)
}
