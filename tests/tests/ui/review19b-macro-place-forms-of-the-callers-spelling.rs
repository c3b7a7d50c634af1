// Review 19b: the name probe against every place and receiver form `graph!` keys by text (a
// field, a deref, an index with arithmetic, an unrolled `for`, a run-time `for`, a receiver in
// parentheses and a raw receiver, `child(&mut g)`), each in a `macro_rules!` body with a name of
// its caller's (`$x`) and one of its own of the same spelling: two variables to rustc, one key
// to `graph!`. Each must be a compile error on the second occurrence (held at bb0a6e0: 7 errors).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Graph, GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

struct Pair {
    a: CudaSlice<u32>,
}

// A field: `$p.a` and the macro's own `p.a`.
macro_rules! field {
    ($cache:expr, $s:expr, $k:ident, $p:ident) => {{
        let mut p = Pair { a: $s.alloc_zeros::<u32>(2048)? };
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            $k.bump(1024, 1, &mut $p.a).launch(c);
            $k.bump(2048, 2, &mut p.a).launch(c);
        })
    }};
}

// A deref: `*$x` and the macro's own `*x`.
macro_rules! deref {
    ($cache:expr, $s:expr, $k:ident, $x:ident) => {{
        let mut own = $s.alloc_zeros::<u32>(2048)?;
        let x = &mut own;
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            $k.bump(1024, 1, &mut *$x).launch(c);
            $k.bump(2048, 2, &mut *x).launch(c);
        })
    }};
}

// An index expression with arithmetic: `$bufs[$j + 1]` and `$bufs[j + 1]`.
macro_rules! arithmetic {
    ($cache:expr, $s:expr, $k:ident, $bufs:ident, $j:ident) => {{
        let j: usize = $j + 1;
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            $k.bump(1024, 1, &mut $bufs[$j + 1]).launch(c);
            $k.bump(1024, 2, &mut $bufs[j + 1]).launch(c);
        })
    }};
}

// An unrolled `for` whose iterations name the caller's `$bufs[i]` and the macro's `bufs[i]`
// (after substitution both print `bufs[0]`, `bufs[1]`).
macro_rules! unrolled {
    ($cache:expr, $s:expr, $k:ident, $bufs:ident) => {{
        let mut bufs = vec![$s.alloc_zeros::<u32>(2048)?, $s.alloc_zeros::<u32>(2048)?];
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            for i in 0..2 {
                $k.bump(1024, 1, &mut $bufs[i]).launch(c);
                $k.bump(2048, 2, &mut bufs[i]).launch(c);
            }
        })
    }};
}

// A run-time `for` (body lowered once) naming `$x` and the macro's `x`.
macro_rules! runtime_for {
    ($cache:expr, $s:expr, $k:ident, $x:ident, $n:ident) => {{
        let mut x = $s.alloc_zeros::<u32>(2048)?;
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            for _ in 0..$n {
                $k.bump(1024, 1, &mut $x).launch(c);
                $k.bump(2048, 2, &mut x).launch(c);
            }
        })
    }};
}

// A receiver in parentheses and a raw receiver: `($k)` and the macro's own `r#k`.
macro_rules! receivers {
    ($cache:expr, $s:expr, $k:ident, $x:ident) => {{
        // SAFETY: the declarations match the kernels, which stay within their buffers.
        let k = unsafe { K::load($s.context(), Ptx::from_src("")) }?;
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            ($k).bump(1024, 1, &mut $x).launch(c);
            r#k.bump(1024, 2, &mut $x).launch(c);
        })
    }};
}

// `child(&mut $g)` and `copy(&g, …)`-free: the macro's own graph `g`.
macro_rules! child_graph {
    ($cache:expr, $s:expr, $g:ident, $own:expr) => {{
        let mut g: Graph<'_> = $own;
        graph!($cache, $s, {
            child(&mut $g);
            child(&mut g);
        })
    }};
}

fn calls(
    k: &K,
    s: &Arc<CudaStream>,
    mut x: &mut CudaSlice<u32>,
    p: &mut Pair,
    bufs: &mut [CudaSlice<u32>],
    n: usize,
) -> cudagraph::Result<()> {
    let j = 0usize;
    field!(&mut GraphCache::new(), s, k, p)?;
    deref!(&mut GraphCache::new(), s, k, x)?;
    arithmetic!(&mut GraphCache::new(), s, k, bufs, j)?;
    unrolled!(&mut GraphCache::new(), s, k, bufs)?;
    runtime_for!(&mut GraphCache::new(), s, k, x, n)?;
    receivers!(&mut GraphCache::new(), s, k, x)
}

fn graphs<'a>(s: &Arc<CudaStream>, mut g: Graph<'a>, own: Graph<'a>) -> cudagraph::Result<()> {
    child_graph!(&mut GraphCache::new(), s, g, own)
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut x = s.alloc_zeros::<u32>(1024)?;
    let mut p = Pair { a: s.alloc_zeros::<u32>(1024)? };
    let mut bufs = vec![s.alloc_zeros::<u32>(1024)?, s.alloc_zeros::<u32>(1024)?, s.alloc_zeros::<u32>(1024)?];
    let _ = graphs;
    calls(&k, &s, &mut x, &mut p, &mut bufs, 1)
}
