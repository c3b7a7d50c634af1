//! Runs of iterations of an unrolled `for` (issue 31 item 2): iterations with the same tokens,
//! but for which element of an array each argument names (`&mut bufs[i]`), that evaluate only
//! literals, names and casts. The first iteration is made and compared as written, the later
//! ones only when the call changed (`__private::LazyChunk`); an unchanged call compares their
//! elements' handles (`__private::word_handles`). Each test compares the graph, after every
//! call, with the same launches made one by one with cudarc (integers: exact), while the runs'
//! scalars, their buffers (swapped between calls, elements swapped within their array, the
//! array replaced) and the surrounding statements change; and an argument that is a call is
//! still evaluated in every iteration. Expected on a GPU: all pass.

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
    // (Changed calls count their unchanged nodes too: at least these.)
    assert!(st.nodes_unchanged >= st.unchanged_calls * nodes, "{st:?}");
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

/// 8 kernels, each on its own element of `bufs` in place (an indexed run), then 3 pairs that
/// read elements of `bufs` into elements of `out` (an indexed run with two arrays).
fn fan(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    b: u32,
    bufs: &mut [CudaSlice<u32>],
    out: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..8 {
            k.affine_inplace(N, 3, b, &mut bufs[i]).launch(c);
        }
        for i in 0..3 {
            k.mix(N, &bufs[i + 4], &mut out[i]).launch(c);
            k.affine_inplace(N, 7, b, &mut out[i]).launch(c);
        }
    })
}

fn fan_eager(
    k: &Ops,
    s: &Arc<CudaStream>,
    b: u32,
    bufs: &mut [CudaSlice<u32>],
    out: &mut [CudaSlice<u32>],
) -> Result {
    for buf in bufs.iter_mut() {
        launch!(s, k, "affine_inplace", cfg(); &N, &3u32, &b, buf)?;
    }
    for i in 0..3 {
        launch!(s, k, "mix", cfg(); &N, &bufs[i + 4], &mut out[i])?;
        launch!(s, k, "affine_inplace", cfg(); &N, &7u32, &b, &mut out[i])?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_indexed_run_matches_launch_by_launch_across_swaps() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    // Every element different, so that a node left on another element shows.
    let distinct = |n: usize, seed: u32| -> Result<Vec<CudaSlice<u32>>> {
        (0..n as u32)
            .map(|e| Ok(s.clone_htod(&(0..N).map(|i| i ^ ((e + 1) * seed)).collect::<Vec<_>>())?))
            .collect()
    };
    let (mut bufs, mut out) = (distinct(8, 0x9e37)?, distinct(3, 0x51)?);
    let (mut bufs2, mut out2) = (distinct(8, 0x7f4a)?, distinct(3, 0x33)?);
    let (mut ebufs, mut eout) = (distinct(8, 0x9e37)?, distinct(3, 0x51)?);
    let (mut ebufs2, mut eout2) = (distinct(8, 0x7f4a)?, distinct(3, 0x33)?);
    let mut cache = GraphCache::new();
    let mut unchanged_expected = 0;
    for call in 0..16u32 {
        let b = 1 + call / 4;
        let before = cache.stats().unchanged_calls;
        fan(&mut cache, &k, &s, b, &mut bufs, &mut out)?;
        fan_eager(&k, &s, b, &mut ebufs, &mut eout)?;
        let what = format!("call {call}, b {b}");
        common::same_all(&common::read_all(&s, &bufs)?, &common::read_all(&s, &ebufs)?, &what);
        common::same_all(&common::read_all(&s, &out)?, &common::read_all(&s, &eout)?, &what);
        // Only a call after one that changed nothing is unchanged: calls 3, 7, 11 and 15
        // (after call % 4 == 2, which changes nothing, with the same scalar).
        let unchanged = cache.stats().unchanged_calls - before;
        assert_eq!(unchanged, u64::from(call % 4 == 3), "{what}: unchanged calls");
        unchanged_expected += unchanged;
        // What the next call changes: two elements swapped within an array (two later
        // iterations' handles), both arrays replaced by the other set (every handle), nothing,
        // or (every fourth call) the scalar of every node.
        match call % 4 {
            0 => {
                bufs.swap(2, 6);
                ebufs.swap(2, 6);
            }
            1 => {
                std::mem::swap(&mut bufs, &mut bufs2);
                std::mem::swap(&mut out, &mut out2);
                std::mem::swap(&mut ebufs, &mut ebufs2);
                std::mem::swap(&mut eout, &mut eout2);
            }
            _ => {}
        }
    }
    let st = cache.stats();
    assert_eq!(st.unchanged_calls, unchanged_expected, "{st:?}");
    // (Changed calls count their unchanged nodes too: at least these.)
    assert!(st.nodes_unchanged >= st.unchanged_calls * 14, "{st:?}");
    Ok(())
}
