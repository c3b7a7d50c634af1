// A `macro_rules!` body indexing one array with its caller's `j` (`$j`) and with its own `j`:
// `graph!` keys `bufs[j]` by its text, so both statements would name the element of the first
// `j`. Under hygiene they are two variables: a compile error on the second (`graph!`'s name
// probe).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

macro_rules! two_indices {
    ($cache:expr, $s:expr, $k:ident, $bufs:ident, $j:ident) => {{
        let j: usize = $j + 1;
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            $k.bump(1024, 1, &mut $bufs[$j]).launch(c);
            $k.bump(1024, 2, &mut $bufs[j]).launch(c);
        })
    }};
}

fn call(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    j: usize,
) -> cudagraph::Result<()> {
    two_indices!(cache, s, k, bufs, j)
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut bufs = vec![s.alloc_zeros::<u32>(1024)?, s.alloc_zeros::<u32>(1024)?];
    call(&mut GraphCache::new(), &k, &s, &mut bufs, 0)
}
