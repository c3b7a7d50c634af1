//! Review 19b (at bb0a6e0, the hygiene probe): names `graph!` still resolves by text beside the
//! probe. Safe code only, except the trusted step (`unsafe { K::load }`, truthful: the
//! declarations of `kernels/conditional.cu`). Every test here must PASS when the crate keeps
//! its promise; the ones of open holes are built only with `--features open-holes`, as in
//! `review_session18b.rs`.
//!
//! - `a_kernel_passing_its_condition_in_parentheses_is_ordered_before_its_device_statement`
//!   (CPU, the plan): `check::setter_edges` orders a kernel before the device statement whose
//!   condition it sets only when the argument is the condition's bare name, compared as text
//!   (`Path::is_ident`). `(c)`, `{ c }` and `r#c` pass the same condition to the kernel (the
//!   run time sees it: `for_each_condition`) but give no edge, so the kernel setting the
//!   condition and the conditional node reading it are unordered when they share no buffer: a
//!   race on the condition's value (the device statement may run on the default). Fails at
//!   bb0a6e0 (no edge `(0, 1)`). **Fixed (session 19):** a kernel whose scalar's tokens use the
//!   condition's name (raw or not) is ordered before the device statement.
//! - `a_raw_loop_variable_is_the_loop_variable` (CPU, the plan): `substitute` and
//!   `loop_variable_probe` compare tokens with `==` (text), so `for r#i in 0..2 { … bufs[i] }`
//!   replaces nothing and `for i in 0..2 { … bufs[r#i] }` leaves `r#i`; both use the enclosing
//!   function's `i` in every iteration (places `bufs[i]`, `bufs[r#i]` instead of `bufs[0]`,
//!   `bufs[1]`), a statement acting on another buffer than the one it names. Fails at bb0a6e0.
//!   **Fixed (session 19):** names are compared unraw (`hygiene::same_name`).
//! - `a_condition_of_a_finished_scope_does_not_drive_a_later_statement` (GPU, not run by this
//!   review): ui `review19b-condition-of-a-finished-scope`, with values: the later
//!   `device_if(c, …)` must skip its body (outer `c`, default 0); at bb0a6e0 rustc gives it the
//!   `for` iteration's `c` (default 1) and it runs (or the driver refuses the graph).
//!   **Fixed (session 19):** a compile error (see the end of this file).

// `unused_parens`: `(c)` is the point of a test; `dead_code`: the plan tests only link the calls.
#![allow(dead_code, unused_parens, clippy::borrow_deref_ref)]

mod common;

use std::sync::Arc;

use common::plans::plan_with;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{Condition, GraphCache, graph, kernels};

kernels! {
    /// Kernels of `kernels/conditional.cu`.
    struct K {
        fn set_nonzero(c: Condition, v: &[u32]);
        fn count_down(c: Condition, counter: &mut [u32]);
        fn add(n: u32, a: u32, x: &mut [u32]);
    }
}

fn one() -> LaunchConfig {
    LaunchConfig::for_num_elems(1)
}

// ---- Setter edges keyed by text ----

/// The setter kernel reads `v` only; the device body writes `y` only: no hazard orders them,
/// only the setter edge.
fn setter_in_parens(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    v: &CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        let c = condition(1);
        k.set_nonzero((c), &*v).launch(one());
        device_if(c, {
            k.add(1, 19_001, &mut *y).launch(one());
        });
    })
}

fn setter_in_a_block(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    v: &CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        let c = condition(1);
        k.set_nonzero({ c }, &*v).launch(one());
        device_if(c, {
            k.add(1, 19_002, &mut *y).launch(one());
        });
    })
}

fn setter_raw(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    v: &CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        let c = condition(1);
        k.set_nonzero(r#c, &*v).launch(one());
        device_if(c, {
            k.add(1, 19_003, &mut *y).launch(one());
        });
    })
}

#[test]
fn a_kernel_passing_its_condition_in_parentheses_is_ordered_before_its_device_statement() {
    // Nodes: 0 the setter kernel, 1 the device_if, 2 its body's kernel.
    for marker in ["19_001", "19_002", "19_003"] {
        let plan = plan_with("review_session19b.rs", marker);
        assert_eq!(plan.nodes.len(), 3, "{marker}");
        let edges = plan.edges();
        assert!(
            edges.contains(&(0, 1)),
            "{marker}: the kernel setting the condition is ordered before the device statement \
             reading it (edges {edges:?})"
        );
    }
}

// ---- Raw loop variables ----

fn raw_pattern(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let i = 1usize;
    let _ = i;
    graph!(cache, s, {
        for r#i in 0..2 {
            k.add(1, 19_004, &mut bufs[i]).launch(one());
        }
    })
}

fn raw_use(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let i = 1usize;
    let _ = i;
    graph!(cache, s, {
        for i in 0..2 {
            k.add(1, 19_005, &mut bufs[r#i]).launch(one());
        }
    })
}

#[test]
fn a_raw_loop_variable_is_the_loop_variable() {
    for marker in ["19_004", "19_005"] {
        let plan = plan_with("review_session19b.rs", marker);
        assert_eq!(
            plan.places,
            ["bufs[0]", "bufs[1]"],
            "{marker}: each iteration names its own element, as rustc reads the loop"
        );
    }
}

// ---- A condition of a finished scope ----

// (The review's GPU test `a_condition_of_a_finished_scope_does_not_drive_a_later_statement` is
// now the compile-fail case `ui/review19b-condition-of-a-finished-scope.rs`: each device
// statement's condition must be, as rustc resolves it, the declaration `graph!` resolved, checked
// through a marker of the declaration's own type, session 19.)
