//! Review 17 (commits 6541066..cdbd14d: runs of iterations of an unrolled `for` made once
//! (`__private::Repeat`) or, for an indexed run, the later iterations made only when the node
//! list is needed (`__private::LazyChunk`), their unchanged-call words being only their array
//! elements' handles (`word_handles`)). Safe code only; every kernel is a declared one, reached
//! through a helper method of the user's that forwards the statement's own handles to it and
//! returns its `KernelCall` (allowed: SAFETY.md rule 1, `safety.rs`'s `mix_in_place`).
//!
//! The helpers here are plain functions of their arguments: they tell the run's first iteration
//! from the later ones by its element's length (element 0 of `bufs` is one longer), which the
//! handle tells them (`DevWrite::len`). So the first iteration's node, the one the words compare
//! in full, need not use every handle its statement names; the later iterations' nodes may use
//! another one, whose address no word holds.
//!
//! **Found and fixed** (the commit after this file's): a run's later iterations are now taken as
//! the same calls on other elements only when every kernel statement of its first iteration is
//! a call its `kernels!` method made (`__private::made_by`, checked every call; `Kernels` is an
//! `unsafe trait`); a helper's run evaluates and compares every iteration as written. Every test
//! below is expected to pass (on the CPU stub driver all 7 pass with the fix; 3 failed before).
//!
//! - `a_later_iteration_reading_an_operand_the_first_ignores_sees_the_new_buffer`: the later
//!   iterations read `q`, the first reads `p`. After a call, `q` is replaced by another buffer
//!   and the old one freed (its memory handed to a new buffer). The next call's words are
//!   equal (p, the elements, the scalars): unchanged, so the graph reads the freed `q`.
//!   Failed before the fix (read freed memory; the CPU stub run counted the call as
//!   unchanged).
//! - `a_later_iteration_writing_an_operand_the_first_ignores_writes_the_new_buffer`: the same
//!   with writes: the later iterations write `q`; the stale graph writes the freed `q`, i.e. the
//!   buffer allocated after it. Failed before the fix (wrote freed memory).
//! - `the_same_in_eager_mode` (control): the first test's steps in `Mode::Eager`, which makes
//!   no words. Expected to pass.
//! - `a_later_iteration_runs_the_kernel_its_statement_evaluates_to`: the helper picks the kernel
//!   and a scalar of the later iterations from a thread-local mode the caller changes between
//!   calls (nothing else changes): unchanged words, so the exec keeps the last call's kernels.
//!   Failed before the fix (another declared kernel ran than the statement's; memory safe:
//!   same buffers).
//! - `a_helper_in_an_exact_run_is_called_in_every_iteration`: `for _ in 0..4` over one
//!   statement whose helper counts its calls and passes the count as a scalar: the tokens are
//!   equal, so the run is made once and listed 4 times; written, the helper runs 4 times.
//!   Failed before the fix (the count was 1, not 4), on the CPU stub driver too.
//! - `a_panic_while_the_later_iterations_are_made_leaves_no_stale_words`: the lazy build panics
//!   (in a changed call that swapped two elements); after `catch_unwind`, calls with the same
//!   and other swaps match launch-by-launch results. Expected to pass.
//! - `an_operand_only_later_iterations_use_replaced_is_not_taken_for_unchanged`: the read
//!   test's decision alone (no value read): failed before the fix, on the stub too.
//!
//! Host-side parts also run on the CPU stub driver: `REVIEW17_STUB=1 LD_LIBRARY_PATH=<dir of
//! the libraries .ci/stub-driver builds> cargo test -p cudagraph-tests --test review_session17
//! -- --ignored` (values are not compared there).

mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::review17::{assert_same, same_all};
use common::{Ops, Result, gpu, host, launch};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::{DevRead, DevWrite, GraphCache, KernelCall, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;
/// Length of element 0 of the runs' arrays (their first iteration): one more than the others.
const FIRST: usize = LEN + 1;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

type Affine<'k, 'b> = KernelCall<'k, (u32, u32, u32, DevRead<'b, u32>, DevWrite<'b, u32>)>;
type InPlace<'k, 'b> = KernelCall<'k, (u32, u32, u32, DevWrite<'b, u32>)>;

thread_local! {
    /// The mode of `pick` (see `a_later_iteration_runs_the_kernel_its_statement_evaluates_to`).
    static MODE: Cell<u32> = const { Cell::new(0) };
    /// Calls of `counted` so far.
    static COUNT: Cell<u32> = const { Cell::new(0) };
    /// Whether `panicky` panics for a later iteration.
    static PANIC: Cell<bool> = const { Cell::new(false) };
}

/// Helpers of the user's: each forwards its statement's own handles to a declared kernel.
trait Helpers {
    /// `e = p` (`affine` 1, 0) for the run's first element, `e = q` for the others.
    fn load_p_or_q<'k, 'b>(
        &'k self,
        n: u32,
        p: DevRead<'b, u32>,
        q: DevRead<'b, u32>,
        e: DevWrite<'b, u32>,
    ) -> Affine<'k, 'b>;
    /// `p = e` for the run's first element, `q = e` for the others.
    fn store_p_or_q<'k, 'b>(
        &'k self,
        n: u32,
        e: DevWrite<'b, u32>,
        p: DevWrite<'b, u32>,
        q: DevWrite<'b, u32>,
    ) -> Affine<'k, 'b>;
    /// `iota(n, 1, 0)` for the first element; for the others `iota(n, 2, m)` when the mode `m`
    /// is even, `affine_inplace(n, 2, m)` when it is odd.
    fn pick<'k, 'b>(&'k self, n: u32, e: DevWrite<'b, u32>) -> InPlace<'k, 'b>;
    /// `affine_inplace(n, 1, c)`, `c` the number of its calls on this thread so far.
    fn counted<'k, 'b>(&'k self, n: u32, x: DevWrite<'b, u32>) -> InPlace<'k, 'b>;
    /// `affine_inplace(n, 3, 1)`; panics for a later element while `PANIC` is set.
    fn panicky<'k, 'b>(&'k self, n: u32, e: DevWrite<'b, u32>) -> InPlace<'k, 'b>;
}

impl Helpers for Ops {
    fn load_p_or_q<'k, 'b>(
        &'k self,
        n: u32,
        p: DevRead<'b, u32>,
        q: DevRead<'b, u32>,
        e: DevWrite<'b, u32>,
    ) -> Affine<'k, 'b> {
        let src = if e.len() == FIRST { p } else { q };
        self.affine(n, 1, 0, src, e)
    }
    fn store_p_or_q<'k, 'b>(
        &'k self,
        n: u32,
        e: DevWrite<'b, u32>,
        p: DevWrite<'b, u32>,
        q: DevWrite<'b, u32>,
    ) -> Affine<'k, 'b> {
        let dst = if e.len() == FIRST { p } else { q };
        self.affine(n, 1, 0, e.read(), dst)
    }
    fn pick<'k, 'b>(&'k self, n: u32, e: DevWrite<'b, u32>) -> InPlace<'k, 'b> {
        let m = MODE.with(Cell::get);
        if e.len() == FIRST {
            self.iota(n, 1, 0, e)
        } else if m.is_multiple_of(2) {
            self.iota(n, 2, m, e)
        } else {
            self.affine_inplace(n, 2, m, e)
        }
    }
    fn counted<'k, 'b>(&'k self, n: u32, x: DevWrite<'b, u32>) -> InPlace<'k, 'b> {
        let c = COUNT.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        self.affine_inplace(n, 1, c, x)
    }
    fn panicky<'k, 'b>(&'k self, n: u32, e: DevWrite<'b, u32>) -> InPlace<'k, 'b> {
        if e.len() != FIRST && PANIC.with(Cell::get) {
            panic!("panicky: a later iteration made while PANIC is set");
        }
        self.affine_inplace(n, 3, 1, e)
    }
}

/// Four elements, element 0 `FIRST` long, the others `LEN`; element `e` holds `i * 7 + 1000 e`.
fn elements(s: &Arc<CudaStream>) -> Result<Vec<CudaSlice<u32>>> {
    (0..4u32)
        .map(|e| {
            let len = if e == 0 { FIRST } else { LEN };
            let v: Vec<u32> = (0..len as u32).map(|i| i * 7 + 1000 * e).collect();
            Ok(s.clone_htod(&v)?)
        })
        .collect()
}

/// `n` copies of `v`, on the device.
fn filled(s: &Arc<CudaStream>, v: u32) -> Result<CudaSlice<u32>> {
    Ok(s.clone_htod(&vec![v; LEN])?)
}

fn load_run(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    p: &CudaSlice<u32>,
    q: &CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..4 {
            k.load_p_or_q(N, &p, &q, &mut bufs[i]).launch(c);
        }
    })
}

/// The read test's steps on `cache` (graph or eager mode).
fn read_after_replace(mut cache: GraphCache) -> Result {
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let p = filled(&s, 0x1111)?;
    let mut q = filled(&s, 0x2222)?;
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    let got = common::read_all(&s, &bufs)?;
    assert_same(&got[0][..LEN], &vec![0x1111; LEN], "call 1, element 0 (from p)");
    for (e, g) in got.iter().enumerate().skip(1) {
        assert_same(g, &vec![0x2222; LEN], &format!("call 1, element {e} (from q)"));
    }
    // `q` replaced by a new buffer (another address: the old one is alive when it is made),
    // then the old one freed and its memory handed to `victim`.
    let q2 = filled(&s, 0x3333)?;
    drop(std::mem::replace(&mut q, q2));
    let victim = filled(&s, 0xdead)?;
    s.synchronize()?;
    let before = cache.stats().unchanged_calls;
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    let unchanged = cache.stats().unchanged_calls - before;
    let got = common::read_all(&s, &bufs)?;
    for (e, g) in got.iter().enumerate().skip(1) {
        assert_same(
            g,
            &vec![0x3333; LEN],
            &format!("call 2 (counted unchanged: {unchanged}), element {e}: from the new q"),
        );
    }
    drop(victim);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_later_iteration_reading_an_operand_the_first_ignores_sees_the_new_buffer() -> Result {
    let _serial = common::serial();
    read_after_replace(GraphCache::new())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_same_in_eager_mode() -> Result {
    let _serial = common::serial();
    read_after_replace(GraphCache::eager())
}

/// The read test's decision alone, host side: after `q` is replaced by a buffer at another
/// address, the call must not be counted unchanged (its graph would read the old `q`). Fails
/// on the CPU stub driver too (`.ci/stub-driver`: `LD_LIBRARY_PATH=… cargo test … --ignored`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_operand_only_later_iterations_use_replaced_is_not_taken_for_unchanged() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let p = filled(&s, 1)?;
    let mut q = filled(&s, 2)?;
    let mut cache = GraphCache::new();
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    assert_eq!(cache.stats().unchanged_calls, 1, "the same call again is unchanged");
    let q2 = filled(&s, 3)?;
    drop(std::mem::replace(&mut q, q2));
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    assert_eq!(
        cache.stats().unchanged_calls,
        1,
        "a call whose later iterations read another q was taken for unchanged: {:?}",
        cache.stats()
    );
    Ok(())
}

fn store_run(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    p: &mut CudaSlice<u32>,
    q: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..4 {
            k.store_p_or_q(N, &mut bufs[i], &mut *p, &mut *q).launch(c);
        }
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_later_iteration_writing_an_operand_the_first_ignores_writes_the_new_buffer() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let want_q: Vec<u32> = (0..N).map(|i| i * 7 + 3000).collect(); // element 3, last writer
    let mut p = filled(&s, 0)?;
    let mut q = filled(&s, 0)?;
    let mut cache = GraphCache::new();
    store_run(&mut cache, &k, &s, &mut p, &mut q, &mut bufs)?;
    assert_same(&s.clone_dtoh(&q)?, &want_q, "call 1: q");
    let q2 = filled(&s, 0)?;
    drop(std::mem::replace(&mut q, q2));
    // Likely at the freed q's address: must keep its contents (no call borrows it).
    let victim = filled(&s, 0xdead)?;
    s.synchronize()?;
    let before = cache.stats().unchanged_calls;
    store_run(&mut cache, &k, &s, &mut p, &mut q, &mut bufs)?;
    let unchanged = cache.stats().unchanged_calls - before;
    let what = format!("call 2 (counted unchanged: {unchanged})");
    assert_same(&s.clone_dtoh(&victim)?, &vec![0xdead; LEN], &format!("{what}: victim untouched"));
    assert_same(&s.clone_dtoh(&q)?, &want_q, &format!("{what}: the new q written"));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_later_iteration_runs_the_kernel_its_statement_evaluates_to() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let mut want: Vec<Vec<u32>> = common::read_all(&s, &bufs)?;
    let mut cache = GraphCache::new();
    let c = cfg();
    for (call, mode) in [0u32, 1, 1, 2, 3].into_iter().enumerate() {
        MODE.with(|m| m.set(mode));
        let before = cache.stats().unchanged_calls;
        graph!(&mut cache, &s, {
            for i in 0..4 {
                k.pick(N, &mut bufs[i]).launch(c);
            }
        })?;
        if call == 1 || call == 3 {
            // Host side: the mode changed the later statements' kernels or scalars.
            let unchanged = cache.stats().unchanged_calls - before;
            assert_eq!(unchanged, 0, "call {call}, mode {mode}: taken for unchanged");
        }
        // The host model: what each statement evaluates to.
        want[0][..LEN].copy_from_slice(&host::iota(N, 1, 0));
        for w in want.iter_mut().skip(1) {
            if mode.is_multiple_of(2) {
                *w = host::iota(N, 2, mode);
            } else {
                host::affine_inplace(w, 2, mode);
            }
        }
        let got = common::read_all(&s, &bufs)?;
        same_all(&got, &want, &format!("call {call}, mode {mode}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_helper_in_an_exact_run_is_called_in_every_iteration() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut x = filled(&s, 5)?;
    let mut e = filled(&s, 5)?;
    let mut cache = GraphCache::new();
    let c = cfg();
    for call in 0..2u32 {
        COUNT.with(|n| n.set(0));
        graph!(&mut cache, &s, {
            for _ in 0..4 {
                k.counted(N, &mut x).launch(c);
            }
        })?;
        let count = COUNT.with(Cell::get);
        for j in 1..=4u32 {
            launch!(s, k, "affine_inplace", cfg(); &N, &1u32, &j, &mut e)?;
        }
        assert_eq!(count, 4, "call {call}: the helper of 4 statements ran {count} times");
        assert_same(&s.clone_dtoh(&x)?, &s.clone_dtoh(&e)?, &format!("call {call}"));
    }
    Ok(())
}

fn panicky_run(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..4 {
            k.panicky(N, &mut bufs[i]).launch(c);
        }
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panic_while_the_later_iterations_are_made_leaves_no_stale_words() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let mut want = common::read_all(&s, &bufs)?;
    let model = |want: &mut Vec<Vec<u32>>| {
        for w in want.iter_mut() {
            host::affine_inplace(&mut w[..LEN], 3, 1);
        }
    };
    let mut cache = GraphCache::new();
    panicky_run(&mut cache, &k, &s, &mut bufs)?;
    model(&mut want);
    same_all(&common::read_all(&s, &bufs)?, &want, "call 1");
    // Changed (two later elements swapped): the lazy build runs, and panics.
    bufs.swap(1, 3);
    want.swap(1, 3);
    PANIC.with(|p| p.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        panicky_run(&mut cache, &k, &s, &mut bufs)
    }));
    PANIC.with(|p| p.set(false));
    assert!(r.is_err(), "the lazy build was expected to panic: {r:?}");
    s.synchronize()?;
    // The panicking call enqueued nothing.
    same_all(&common::read_all(&s, &bufs)?, &want, "after the panic");
    // The same swapped set again: must not be taken for the exec's (call 1's) set.
    for (call, swap) in [(3, None), (4, Some((2, 3))), (5, None)] {
        if let Some((a, b)) = swap {
            bufs.swap(a, b);
            want.swap(a, b);
        }
        let before = cache.stats().unchanged_calls;
        panicky_run(&mut cache, &k, &s, &mut bufs)?;
        if call == 3 {
            // Host side (holds on the CPU stub driver too): the exec still has call 1's set.
            assert_eq!(cache.stats().unchanged_calls, before, "call 3 taken for unchanged");
        }
        model(&mut want);
        same_all(&common::read_all(&s, &bufs)?, &want, &format!("call {call}"));
    }
    Ok(())
}
