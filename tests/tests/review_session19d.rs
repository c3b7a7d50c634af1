//! Review 19d (at c19d37f: `setter_edges` orders every device statement with every kernel,
//! capture, child graph and device statement of its body). Safe code only, except the trusted
//! step (`unsafe { K::load }`, truthful: the declarations of `kernels/conditional.cu`). Every
//! test here must PASS when the crate keeps its promise.
//!
//! - `a_setter_in_a_run_time_loop_is_ordered_before_the_device_statement_after_it` (GPU): the
//!   plan has the edge (see the CPU test `..._in_the_plan`), but `Looped::new` maps an edge
//!   from a node outside a run-time loop to a node inside it to `u32::MAX`
//!   (`outside[a]`, never set for loop nodes) and `infer_edges_by` drops it (`a < j` fails): the
//!   kernel setting `c` in the loop and the conditional node reading `c` after the loop are
//!   unordered (no shared buffer). The same drop loses `capture_edges`' edge from a capture
//!   after the loop to one inside it (`..._capture_...`).
//! - `a_builder_setter_after_its_device_statement_is_ordered_after_it` and
//!   `a_builder_setter_in_a_sibling_body_is_ordered_before_the_statement` (CPU: `edges()` needs
//!   no driver call; they need a driver to load `K`: the stub driver is enough):
//!   `Recording::conditional_node` orders only *earlier* kernels *of the same body* that take
//!   `c`: review 19c's two holes, fixed in `graph!` by `setter_edges`, are open in
//!   `GraphBuilder`.
//!
//! **After the review (session 19):** `Looped::new` maps an edge to a node of another loop (or
//! of none) to every copy of that node, and chains a loop's captures across iterations (unit
//! test `an_edge_into_a_run_time_loop_orders_after_every_iteration_and_captures_chain`, which
//! fails on c19d37f's `looped.rs`); `Recording` orders each kernel taking a condition with that
//! condition's conditional node, in any scope and either order (`condition_edge`: the two
//! nodes' ancestors in their innermost common scope). The builder tests pass on the stub
//! driver; the two GPU tests run on the H200.
#![allow(dead_code, clippy::borrow_deref_ref)]

mod common;

use std::sync::Arc;

use common::plans::{plan_with, reaches};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use cudagraph::{Condition, GraphCache, graph, kernels};

const SRC: &str = include_str!("../kernels/conditional.cu");

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

kernels! {
    /// Kernels of `kernels/conditional.cu`.
    struct K {
        fn set_nonzero(c: Condition, v: &[u32]);
        fn add(n: u32, a: u32, x: &mut [u32]);
    }
}

fn one() -> LaunchConfig {
    LaunchConfig::for_num_elems(1)
}

fn gpu() -> Result<(Arc<CudaContext>, Arc<CudaStream>, K)> {
    assert!(cudagraph::driver_available(), "no CUDA driver");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    // SAFETY: the declarations match conditional.cu; the kernels stay within their buffers.
    let k = unsafe { K::load(&ctx, compile_ptx_with_opts(SRC, opts)?) }?;
    Ok((ctx, stream, k))
}

// ---------------------------------------------------------------------------------------------
// A setter in a run-time loop.

/// Plan nodes: 0 the setter (in the loop), 1 `device_if(c)`, 2 its body.
fn setter_in_a_run_time_loop(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    n: usize,
    v: &CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        let c = condition(0);
        for _ in 0..n {
            k.set_nonzero(c, &*v).launch(one());
        }
        device_if(c, {
            k.add(1, 19_401, &mut *y).launch(one());
        });
    })
}

#[test]
fn a_setter_in_a_run_time_loop_is_ordered_before_the_device_statement_in_the_plan() {
    let plan = plan_with("review_session19d.rs", "19_401");
    assert_eq!(plan.nodes.len(), 3);
    assert!(reaches(&plan.edges(), 0, 1), "plan edges {:?}", plan.edges());
}

#[test]
#[ignore = "needs a CUDA GPU (the stub driver has no cuGraphConditionalHandleCreate)"]
fn a_setter_in_a_run_time_loop_is_ordered_before_the_device_statement_after_it() -> Result {
    let (_ctx, s, k) = gpu()?;
    let v = s.clone_htod(&[1u32])?;
    let mut y = s.alloc_zeros::<u32>(1)?;
    let mut cache = GraphCache::new();
    // One iteration: call nodes are plan nodes.
    setter_in_a_run_time_loop(&mut cache, &k, &s, 1, &v, &mut y)?;
    s.synchronize()?;
    let edges: Vec<(u32, u32)> = cache.edges().iter().map(|e| (e.0, e.1)).collect();
    assert!(
        reaches(&edges, 0, 1),
        "the setter (node 0, in the run-time loop) is ordered before the conditional node \
         (node 1): built edges {edges:?}"
    );
    assert_eq!(s.clone_dtoh(&y)?, [19_401]);
    Ok(())
}

/// Plan nodes: 0 a capture in the loop, 1 a capture after it (no shared buffer).
fn captures_around_a_run_time_loop(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    n: usize,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for _ in 0..n {
            capture(&mut *x, |s, (mut x,)| s.zero(&mut x));
        }
        capture(&mut *y, |s, (mut y,)| {
            let _marker = 19_402;
            s.zero(&mut y)
        });
    })
}

#[test]
fn a_capture_after_a_run_time_loop_is_ordered_after_the_loops_capture_in_the_plan() {
    let plan = plan_with("review_session19d.rs", "19_402");
    assert_eq!(plan.nodes.len(), 2);
    assert!(reaches(&plan.edges(), 0, 1), "plan edges {:?}", plan.edges());
}

#[test]
#[ignore = "needs a CUDA GPU (the stub driver has no stream capture)"]
fn a_capture_after_a_run_time_loop_is_ordered_after_the_loops_capture() -> Result {
    let (_ctx, s, _k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(1)?;
    let mut y = s.alloc_zeros::<u32>(1)?;
    let mut cache = GraphCache::new();
    captures_around_a_run_time_loop(&mut cache, &s, 1, &mut x, &mut y)?;
    s.synchronize()?;
    let edges: Vec<(u32, u32)> = cache.edges().iter().map(|e| (e.0, e.1)).collect();
    assert!(
        reaches(&edges, 0, 1),
        "capture 0 (in the loop) before capture 1: built edges {edges:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// GraphBuilder setters.

#[test]
#[ignore = "needs a CUDA driver to load K (the stub driver is enough: REVIEW17_STUB=1)"]
fn a_builder_setter_after_its_device_statement_is_ordered_after_it() -> Result {
    let (_ctx, s, k) = gpu()?;
    let v = s.clone_htod(&[1u32])?;
    let mut y = s.alloc_zeros::<u32>(1)?;
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&s);
    let (vr, yw) = (g.read(&v), g.write(&mut y));
    let c = g.condition(0);
    // Node 0 the statement, node 1 its body, node 2 a setter after it.
    g.device_if(c, |g| {
        g.kernel(k.add(1, 19_403, yw).launch(one()));
    });
    g.kernel(k.set_nonzero(c, vr).launch(one()));
    let edges = g.edges();
    assert!(
        reaches(&edges, 0, 2),
        "the setter after the device statement (node 2) is ordered after it (node 0): {edges:?}"
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA driver to load K (the stub driver is enough: REVIEW17_STUB=1)"]
fn a_builder_setter_in_a_sibling_body_is_ordered_before_the_statement() -> Result {
    let (_ctx, s, k) = gpu()?;
    let v = s.clone_htod(&[1u32])?;
    let mut y = s.alloc_zeros::<u32>(1)?;
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&s);
    let (vr, yw) = (g.read(&v), g.write(&mut y));
    let c = g.condition(0);
    let d = g.condition(1);
    // Node 0 `device_if(d)` whose body (node 1) sets `c`; node 2 `device_if(c)`, body node 3.
    g.device_if(d, |g| {
        g.kernel(k.set_nonzero(c, vr).launch(one()));
    });
    g.device_if(c, |g| {
        g.kernel(k.add(1, 19_404, yw).launch(one()));
    });
    let edges = g.edges();
    assert!(
        reaches(&edges, 0, 2),
        "the device statement whose body sets `c` (node 0) is ordered before `c`'s (node 2): \
         {edges:?}"
    );
    Ok(())
}
