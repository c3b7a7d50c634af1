// Review 19c (false refusal, not a hole): a graph-owned buffer bound `let r#t = alloc…` is keyed
// `r#t` (`lower_alloc`, `name.to_string()`), its uses `&mut t` are keyed `t`: `free(&mut t)` is
// "`free` takes a graph-owned buffer made earlier". Rustc reads `r#t` as `t`: must compile.
// (The use `k.bump(…, &mut t)` is worse: keyed `t`, it is not the graph-owned buffer but a
// variable `t` of the caller's; see `review_session19c.rs`,
// `a_raw_name_of_a_graph_owned_buffer_is_that_buffer`.)
use cudagraph::cudarc::driver::{CudaContext, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

fn free_raw(k: &K, s: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    graph!(&mut GraphCache::new(), s, {
        let r#t = alloc::<u32>(1024);
        k.bump(1024, 1, &mut r#t).launch(c);
        free(&mut t);
    })
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    free_raw(&k, &s)
}

fn main() {
    // Compiled, not run (no GPU needed).
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
