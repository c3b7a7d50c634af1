//! Runs of identical iterations of an unrolled `for` (`__private::Repeat`, issue 31 item 2):
//! `graph!` makes the first iteration's nodes once per call and lists them for every iteration
//! when the iterations have the same tokens and evaluate only literals, names and casts. Each
//! test compares the graph, after every call, with the same launches made one by one with
//! cudarc (integers: exact), while the run's scalar, its buffers (swapped between calls) and the
//! surrounding statements change; and an argument that is a call is still evaluated in every
//! iteration. Expected on a GPU: all pass.

mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, launch};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::{GraphCache, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// A ping-pong of `2 × SWEEPS` kernels on `a` and `b` (made once: one run), after a kernel
/// whose scalar `s` changes, and before one that reads the result.
const SWEEPS: usize = 50;

fn pingpong(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    seed: u32,
    (a, b, out): (&mut CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        k.iota(N, seed, 7, &mut *a).launch(c);
        for _ in 0..50 {
            k.affine(N, 3, 1, &*a, &mut *b).launch(c);
            k.affine_inplace(N, 5, seed, &mut *b).launch(c);
            k.mix(N, &*b, &mut *a).launch(c);
        }
        k.mix(N, &*a, &mut *out).launch(c);
    })
}

/// The same work, launch by launch with cudarc.
fn pingpong_eager(
    k: &Ops,
    s: &Arc<CudaStream>,
    seed: u32,
    (a, b, out): (&mut CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> Result {
    launch!(s, k, "iota", cfg(); &N, &seed, &7u32, &mut *a)?;
    for _ in 0..SWEEPS {
        launch!(s, k, "affine", cfg(); &N, &3u32, &1u32, &*a, &mut *b)?;
        launch!(s, k, "affine_inplace", cfg(); &N, &5u32, &seed, &mut *b)?;
        launch!(s, k, "mix", cfg(); &N, &*b, &mut *a)?;
    }
    launch!(s, k, "mix", cfg(); &N, &*a, &mut *out)?;
    Ok(())
}

fn zeros(s: &Arc<CudaStream>) -> Result<CudaSlice<u32>> {
    Ok(s.alloc_zeros::<u32>(LEN)?)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_run_of_identical_iterations_matches_launch_by_launch_across_changes() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut a, mut b, mut out) = (zeros(&s)?, zeros(&s)?, zeros(&s)?);
    let (mut a2, mut b2) = (zeros(&s)?, zeros(&s)?);
    let (mut ea, mut eb, mut eout) = (zeros(&s)?, zeros(&s)?, zeros(&s)?);
    let mut cache = GraphCache::new();
    for call in 0..12u32 {
        // The seed (a scalar of the run's statements) changes every third call, the run's
        // buffers are swapped with another pair every fourth: both reach every copy.
        let seed = 1 + call / 3;
        pingpong(&mut cache, &k, &s, seed, (&mut a, &mut b, &mut out))?;
        pingpong_eager(&k, &s, seed, (&mut ea, &mut eb, &mut eout))?;
        let what = format!("call {call}, seed {seed}");
        assert_same(&s.clone_dtoh(&out)?, &s.clone_dtoh(&eout)?, &format!("{what}: out"));
        assert_same(&s.clone_dtoh(&a)?, &s.clone_dtoh(&ea)?, &format!("{what}: a"));
        assert_same(&s.clone_dtoh(&b)?, &s.clone_dtoh(&eb)?, &format!("{what}: b"));
        if call % 4 == 3 {
            std::mem::swap(&mut a, &mut a2);
            std::mem::swap(&mut b, &mut b2);
        }
    }
    let st = cache.stats();
    assert_eq!(st.builds, 1, "one variant: {st:?}");
    // Unchanged calls: those whose seed and buffers were both the last call's.
    assert!(st.unchanged_calls >= 4, "{st:?}");
    // Every node of each unchanged call counted, copies included.
    let nodes = (2 + 3 * SWEEPS) as u64;
    assert_eq!(st.nodes_unchanged, st.unchanged_calls * nodes, "{st:?}");
    Ok(())
}

/// The same body in `Mode::Eager` (the node list run statement by statement, copies included)
/// against the launches one by one.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_run_in_eager_mode_launches_every_iteration() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut a, mut b, mut out) = (zeros(&s)?, zeros(&s)?, zeros(&s)?);
    let (mut ea, mut eb, mut eout) = (zeros(&s)?, zeros(&s)?, zeros(&s)?);
    let mut cache = GraphCache::eager();
    for seed in [3u32, 3, 4] {
        pingpong(&mut cache, &k, &s, seed, (&mut a, &mut b, &mut out))?;
        pingpong_eager(&k, &s, seed, (&mut ea, &mut eb, &mut eout))?;
        assert_same(&s.clone_dtoh(&out)?, &s.clone_dtoh(&eout)?, &format!("seed {seed}"));
    }
    Ok(())
}

/// A scalar that is a call: evaluated in each iteration, as written (no run), so each kernel
/// gets its own value.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_argument_that_is_a_call_is_evaluated_in_every_iteration() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut x, mut e) = (zeros(&s)?, zeros(&s)?);
    let counter = Cell::new(0u32);
    let next = || {
        counter.set(counter.get() + 1);
        counter.get()
    };
    let mut cache = GraphCache::new();
    for call in 0..3u32 {
        let c = cfg();
        graph!(&mut cache, &s, {
            for _ in 0..4 {
                k.affine_inplace(N, 2, next(), &mut x).launch(c);
            }
        })?;
        assert_eq!(counter.get(), 4 * (call + 1), "call {call}: one evaluation per iteration");
        for j in 1..=4 {
            launch!(s, k, "affine_inplace", cfg(); &N, &2u32, &(4 * call + j), &mut e)?;
        }
        assert_same(&s.clone_dtoh(&x)?, &s.clone_dtoh(&e)?, &format!("call {call}"));
    }
    Ok(())
}
