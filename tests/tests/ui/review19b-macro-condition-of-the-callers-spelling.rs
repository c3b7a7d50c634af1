// Review 19b (HOLE at bb0a6e0): device conditions are Rust variables (`let c: Condition`) that
// `graph!` resolves by text (`check_device_conditions`: "the latest declaration of that name
// before the statement"), and the name probe does not cover them. A `macro_rules!` body
// declares its own `c` after its caller's `$c` and drives its second loop with `$c`: to
// `graph!` that statement uses the macro's `c` (each condition drives one statement, checks
// pass); to rustc it is the caller's `c`, which now drives two conditional nodes (the crate's
// rule "one condition per device statement" bypassed), and the macro's `c` drives none (rustc
// only warns it is unused). Two handles are created for slot 0 (`ladder::build`, one per
// conditional node), the first associated with no node. Must be a compile error (the probe
// should also take condition names: a declaration's name and each device statement's).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn count_down(c: Condition, counter: &mut [u32]);
    }
}

macro_rules! two_loops {
    ($cache:expr, $s:expr, $k:ident, $c:ident, $x:ident, $y:ident) => {{
        let cfg = LaunchConfig::for_num_elems(1);
        graph!($cache, $s, {
            let $c = condition(1);
            device_while($c, { $k.count_down($c, &mut $x).launch(cfg); });
            let c = condition(1);
            device_while($c, { $k.count_down($c, &mut $y).launch(cfg); });
        })
    }};
}

fn call(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    mut x: &mut CudaSlice<u32>,
    mut y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    two_loops!(cache, s, k, c, x, y)
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut x = s.alloc_zeros::<u32>(1)?;
    let mut y = s.alloc_zeros::<u32>(1)?;
    call(&mut GraphCache::new(), &k, &s, &mut x, &mut y)
}
