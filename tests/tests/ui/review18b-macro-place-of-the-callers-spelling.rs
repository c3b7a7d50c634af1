// Review 18b: a `macro_rules!` body with a place of its caller's (`$x`) and one of its own
// spelled alike (`x`). `graph!` keys places by their text, so both were one place, borrowed
// through the caller's: the macro's `copy(&big, &mut x)` wrote the caller's `x` (or, with a
// kernel trusting a length, wrote past its end). Under hygiene they are two variables: a compile
// error on the second (`graph!`'s name probe).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudagraph::{GraphCache, graph};
use std::sync::Arc;

macro_rules! own_x {
    ($cache:expr, $s:expr, $small:ident, $x:ident, $big:ident) => {{
        let mut x = $s.alloc_zeros::<u32>(2048)?;
        let r = graph!($cache, $s, {
            copy(&$small, &mut $x);
            copy(&$big, &mut x);
        });
        r.map(|()| x)
    }};
}

fn own_x_call(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    small: &CudaSlice<u32>,
    mut x: &mut CudaSlice<u32>,
    big: &CudaSlice<u32>,
) -> cudagraph::Result<CudaSlice<u32>> {
    own_x!(cache, s, small, x, big)
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let small = s.alloc_zeros::<u32>(1024)?;
    let big = s.alloc_zeros::<u32>(2048)?;
    let mut x = s.alloc_zeros::<u32>(1024)?;
    own_x_call(&mut GraphCache::new(), &s, &small, &mut x, &big).map(drop)
}
