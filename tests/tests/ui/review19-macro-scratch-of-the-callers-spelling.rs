// A `macro_rules!` body that declares its own graph-owned buffer `x` (`let x = alloc…`) beside a
// statement on its caller's `x` (`$x`): `graph!` keys places by their text, so the caller's
// statement would have used the graph-owned buffer. Under hygiene they are two variables: a
// compile error on the second (`graph!`'s name probe).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudagraph::{GraphCache, graph};
use std::sync::Arc;

macro_rules! own_scratch {
    ($cache:expr, $s:expr, $src:ident, $x:ident) => {{
        graph!($cache, $s, {
            let x = alloc::<u32>(1024);
            copy(&$src, &mut x);
            copy(&$src, &mut $x);
            free(&mut x);
        })
    }};
}

fn call(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    src: &CudaSlice<u32>,
    mut x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    own_scratch!(cache, s, src, x)
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let src = s.alloc_zeros::<u32>(1024)?;
    let mut x = s.alloc_zeros::<u32>(1024)?;
    call(&mut GraphCache::new(), &s, &src, &mut x)
}
