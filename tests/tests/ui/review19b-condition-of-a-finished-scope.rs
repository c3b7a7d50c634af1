// Review 19b (HOLE at bb0a6e0, no macro needed): `graph!` scopes a device condition declared in
// an unrolled `for`'s iteration or in a device body to that iteration or body
// (`check_device_conditions`, `in_scope`), but the expansion flattens both (`unscope`; a
// device statement's bodies are emitted after it in the same Rust block), so the condition's
// `let c: Condition` outlives them. A later `device_if(c, …)` that `graph!` resolves to the
// outer `c` (default 0: body skipped) is given the inner `c` by rustc (default 1: body run;
// rustc warns the outer `c` is unused). Two conditional nodes share one slot, one of them
// inside another's body graph; the statement runs a kernel its source says is skipped (GPU:
// `review_session19b.rs`, `a_condition_of_a_finished_scope_does_not_drive_a_later_statement`).
// Must be a compile error (or compile to the outer `c`: then move this to tests/pass).
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn count_down(c: Condition, counter: &mut [u32]);
        fn add(n: u32, a: u32, x: &mut [u32]);
    }
}

fn after_a_for(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let cfg = LaunchConfig::for_num_elems(1);
    graph!(cache, s, {
        let c = condition(0);
        for _ in 0..1 {
            let c = condition(1);
            device_if(c, { k.add(1, 1, &mut *x).launch(cfg); });
        }
        device_if(c, { k.add(1, 2, &mut *y).launch(cfg); });
    })
}

fn after_a_device_body(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let cfg = LaunchConfig::for_num_elems(1);
    graph!(cache, s, {
        let d = condition(1);
        let c = condition(0);
        device_if(d, {
            let c = condition(1);
            device_if(c, { k.add(1, 1, &mut *x).launch(cfg); });
        });
        device_if(c, { k.add(1, 2, &mut *y).launch(cfg); });
    })
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut x = s.alloc_zeros::<u32>(1)?;
    let mut y = s.alloc_zeros::<u32>(1)?;
    after_a_for(&mut GraphCache::new(), &k, &s, &mut x, &mut y)?;
    after_a_device_body(&mut GraphCache::new(), &k, &s, &mut x, &mut y)
}
