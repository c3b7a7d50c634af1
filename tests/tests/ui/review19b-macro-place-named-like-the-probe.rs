// Review 19b: a place named like the probe's own check function (`__cudagraph_one_name0`, an
// item of the probe block, which item hygiene leaves visible to both macro contexts), the
// macro's own variable beside its caller's of that spelling: the macro's occurrence must not
// resolve to anything of the probe's type. Must be a compile error (held at bb0a6e0).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudagraph::{GraphCache, graph};
use std::sync::Arc;

macro_rules! own {
    ($cache:expr, $s:expr, $small:ident, $name:ident, $big:ident) => {{
        #[allow(non_snake_case)]
        let mut __cudagraph_one_name0 = $s.alloc_zeros::<u32>(2048)?;
        graph!($cache, $s, {
            copy(&$small, &mut $name);
            copy(&$big, &mut __cudagraph_one_name0);
        })
    }};
}

fn call(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    small: &CudaSlice<u32>,
    mut __cudagraph_one_name0: &mut CudaSlice<u32>,
    big: &CudaSlice<u32>,
) -> cudagraph::Result<()> {
    own!(cache, s, small, __cudagraph_one_name0, big)
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let small = s.alloc_zeros::<u32>(1024)?;
    let big = s.alloc_zeros::<u32>(2048)?;
    let mut x = s.alloc_zeros::<u32>(1024)?;
    call(&mut GraphCache::new(), &s, &small, &mut x, &big)
}
