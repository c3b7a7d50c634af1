// Review 18b: a `macro_rules!` body with a kernel statement on its caller's receiver (`$k`) and
// one on its own `k` (another module). `graph!` made one receiver per text, so the macro's
// statement ran the caller's module's kernel. Under hygiene they are two variables: a compile
// error on the second (`graph!`'s name probe).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

macro_rules! own_k {
    ($cache:expr, $s:expr, $k:ident, $a:ident, $b:ident) => {{
        // SAFETY: the declarations match the kernels, which stay within their buffers.
        let k = unsafe { K::load($s.context(), Ptx::from_src("")) }?;
        let c = LaunchConfig::for_num_elems(1024);
        let r = graph!($cache, $s, {
            $k.bump(1024, 1, &mut $a).launch(c);
            k.bump(1024, 1, &mut $b).launch(c);
        });
        r.map(|()| k)
    }};
}

fn own_k_call(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    mut a: &mut CudaSlice<u32>,
    mut b: &mut CudaSlice<u32>,
) -> cudagraph::Result<K> {
    own_k!(cache, s, k, a, b)
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut a = s.alloc_zeros::<u32>(1024)?;
    let mut b = s.alloc_zeros::<u32>(1024)?;
    own_k_call(&mut GraphCache::new(), &k, &s, &mut a, &mut b).map(drop)
}
