// An unrolled `for` written in a `macro_rules!` whose variable and uses all come from the
// macro (or all from its caller, passed as `$i`): one hygiene context, so `graph!`'s loop
// variable check (`__private::loop_variable`) accepts it.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

macro_rules! own_loop {
    ($cache:expr, $s:expr, $k:ident, $bufs:ident) => {{
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            for i in 0..2 {
                $k.bump(1024, i as u32, &mut $bufs[i]).launch(c);
            }
        })
    }};
}

macro_rules! callers_loop {
    ($cache:expr, $s:expr, $k:ident, $i:ident, $($x:tt)+) => {{
        let c = LaunchConfig::for_num_elems(1024);
        graph!($cache, $s, {
            for $i in 0..2 {
                $k.bump(1024, 1, &mut $($x)+).launch(c);
            }
        })
    }};
}

fn calls(k: &K, s: &Arc<CudaStream>, bufs: &mut [CudaSlice<u32>]) -> cudagraph::Result<()> {
    own_loop!(&mut GraphCache::new(), s, k, bufs)?;
    callers_loop!(&mut GraphCache::new(), s, k, j, bufs[j])
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut bufs = vec![s.alloc_zeros::<u32>(1024)?, s.alloc_zeros::<u32>(1024)?];
    calls(&k, &s, &mut bufs)
}

fn main() {
    // Compiled, not run (no GPU needed).
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
