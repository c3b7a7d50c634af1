// `graph!` bodies written in `macro_rules!` whose places and receivers each come from one macro
// context: all from the caller (`$x`), all from the macro (its own `x`, `k`, `j`), or the two
// mixed with other spellings. `graph!`'s name probe accepts them; a caller's and a macro's
// variable of one spelling is a compile error (ui `review18b-macro-place-of-the-callers-spelling`).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

static UNUSED: u32 = 0;

macro_rules! callers {
    ($cache:expr, $s:expr, $k:ident, $x:ident, $bufs:ident, $j:ident) => {{
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            $k.bump(1024, 1, &mut $x).launch(c);
            $k.bump(1024, 2, &mut $bufs[$j]).launch(c);
            $k.bump(1024, 3, &mut $x).launch(c);
        })
    }};
}

macro_rules! own_beside_callers {
    ($cache:expr, $s:expr, $k:ident, $x:ident) => {{
        // SAFETY: the declarations match the kernels, which stay within their buffers.
        let mine = unsafe { K::load($s.context(), Ptx::from_src("")) }?;
        let mut y = $s.alloc_zeros::<u32>(1024)?;
        let mut v = vec![$s.alloc_zeros::<u32>(1024)?];
        let j = 0usize;
        let c = LaunchConfig::for_num_elems(1024);
        let _ = UNUSED;
        graph!($cache, $s, {
            $k.bump(1024, 1, &mut $x).launch(c);
            mine.bump(1024, 2, &mut y).launch(c);
            mine.bump(1024, 3, &mut v[j]).launch(c);
            $k.bump(1024, 4, &mut y).launch(c);
            let t = alloc::<u32>(1024);
            copy(&y, &mut t);
            copy(&t, &mut $x);
            free(&mut t);
        })
    }};
}

fn calls(
    k: &K,
    s: &Arc<CudaStream>,
    mut x: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let j = 0;
    callers!(&mut GraphCache::new(), s, k, x, bufs, j)?;
    own_beside_callers!(&mut GraphCache::new(), s, k, x)
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut x = s.alloc_zeros::<u32>(1024)?;
    let mut bufs = vec![s.alloc_zeros::<u32>(1024)?, s.alloc_zeros::<u32>(1024)?];
    calls(&k, &s, &mut x, &mut bufs)
}

fn main() {
    // Compiled, not run (no GPU needed).
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
