// Review 19b (a false positive at bb0a6e0, kept as a documented refusal): a `macro_rules!`
// defined inside a function, after `x`, whose own `x` names that same `x` (`macro_rules!`
// hygiene resolves a local at the macro's definition site). The caller's `x` (`$y`) and the
// macro's `x` are one variable here, but `graph!`'s name probe cannot tell this case from a
// macro's own variable: it refuses it (SAFETY.md 14), and since session 19 says so ("of another
// macro context"), no longer that it "names another variable". Pass the variable to the macro.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

fn call(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    mut x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    macro_rules! twice {
        ($y:ident) => {
            graph!(cache, s, {
                k.bump(1024, 1, &mut $y).launch(c);
                k.bump(1024, 2, &mut x).launch(c);
            })
        };
    }
    twice!(x)
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut x = s.alloc_zeros::<u32>(1024)?;
    call(&mut GraphCache::new(), &k, &s, &mut x)
}

fn main() {
    // Compiled, not run (no GPU needed).
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
