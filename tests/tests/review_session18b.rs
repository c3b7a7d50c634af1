//! Review 18b (at c7ded14: a run's later iterations compared through their elements' guards,
//! contexts and pinned allocation ids, `word_repeat`'s `RUN_TAG` and `word_handle` of the other
//! operands, and no node words of their own). Safe code only, except the trusted step
//! (`unsafe { Ops::load }`, truthful: the declarations of `ops.cu`).
//!
//! Every test here must PASS when the crate is safe (or keeps its promise that a graph computes
//! what its statements, run in order, compute). Not run on a GPU by this review. Results at
//! c7ded14, on the CPU stub driver: 5 fail (every hole below but the two marked GPU values
//! only, which pass there), 6 pass
//! (`REVIEW17_STUB=1 LD_LIBRARY_PATH=target/stub-driver cargo test -p cudagraph-tests --test
//! review_session18b -- --ignored`; values are not compared there, errors and `cache.stats()`
//! are real):
//!
//! **After the review (session 18):** the two `split` tests (two adjacent `for`s merged into
//! one run) pass: an unrolled `for`'s iterations are kept together (`Item::For`) and runs are
//! looked for inside one `for` only. A caller's variable spelled like the loop variable is a
//! compile error (`__private::loop_variable`, ui `review18b-loop-variable-of-another-context`).
//!
//! **Session 19:** a macro's own place or receiver spelled like its caller's is a compile error
//! too (`graph!`'s name probe, SAFETY.md 14), and so is a receiver of a generic type (the
//! blanket helper, `__private::Concrete`): the four tests of them became ui cases (see the
//! sections "Hygiene" and "A generic receiver" below).
//!
//! **Holes (fail at c7ded14).** `graph!` compares tokens by their text only, which ignores
//! `macro_rules!` hygiene: two variables of one spelling, one the caller's and one the
//! macro's, are one thing to it.
//! - `a_run_across_two_fors_with_a_macro_local_scalar_is_evaluated_each_call` and
//!   `a_memset_run_across_two_fors_with_a_macro_local_value_is_evaluated_each_call`: two
//!   adjacent unrolled `for`s (the first written with the caller's `b`, the second with the
//!   macro's `b`) print alike, so `repeat_runs` makes them one run; the later iterations,
//!   evaluated only when the node list is needed, use the macro's `b`, which is in no word.
//!   A call whose macro-local `b` changed counts as unchanged and launches the old values.
//! - `a_buffer_the_macro_declares_is_not_the_callers_buffer_of_the_same_name`: places are keyed
//!   by text, so the macro's own `x` is borrowed through the caller's `x`: the statement
//!   `copy(&big, &mut x)` is given the caller's buffer (here refused only because the lengths
//!   differ: `Error::CopyLength`; with equal lengths it silently writes the caller's `x`).
//!   `a_kernel_on_the_macros_own_buffer_writes_that_buffer` (GPU values only): the same with
//!   `k.iota(2 * N, …, &mut x)`, a correct launch on the macro's `x` of 2 N elements, which the
//!   hole turns into a write of 2 N elements into the caller's `x` of N: out of bounds.
//! - `a_callers_variable_spelled_like_the_loop_variable_is_not_substituted`: `substitute`
//!   replaces every `i` token, the caller's `i` inside `$place` included: `bufs[i]` (the
//!   caller's `i = 0`) becomes `bufs[0]`, `bufs[1]`: other places than the statement names.
//! - `a_receiver_the_macro_declares_runs_its_own_module` (GPU values only): receivers are keyed
//!   by text too, so the macro's `k` (another module) runs the caller's `k`'s kernel.
//! - `a_generic_receivers_blanket_helper_is_evaluated_each_iteration`: in a function generic
//!   over `K: __private::Kernels`, the statement's method on `&K::Struct` is a blanket trait
//!   method of the user's (`impl<T: ?Sized> Helper for T`: the generated inherent method is
//!   not visible there), which calls the real `affine_inplace` of a `'static` struct, so
//!   `made_by` holds; the later iterations' calls are then never evaluated on an unchanged
//!   call, and whatever they would return (other scalars, another kernel of the struct) is not
//!   launched. Review 17b's ui case `review17b-shadow-generic` bounds the helper on `K`, not on
//!   every type, which is why it did not compile.
//!
//! No memory error follows from these as far as this review found: every buffer any node may
//! use is still a place the call borrowed and whose range is in the words; what goes stale is
//! values (scalars, memset values, which kernel of the struct), and which of the call's own
//! borrowed buffers a statement writes. But a kernel that trusts a length scalar (every kernel
//! of `ops.cu`) then writes `n` elements into a buffer of another length than the one the
//! statement named (the place-conflation hole), which is out of bounds.
//!
//! **Refused correctly (pass).** `a_shorter_element_view_at_the_same_address_is_refused`
//! (guard bytes in the words: a view shrunk at the same start is a changed call, and its copy
//! length is checked), `a_shorter_single_operand_at_the_same_address_is_refused`
//! (`word_handle`'s length), `a_run_over_elements_of_two_context_objects_is_ordered_every_call`
//! (elements on streams of two context objects, mixed contexts on the stub: every unchanged call
//! still waits), and, GPU only, `a_pinned_single_operand_of_a_run_reallocated_is_copied_from`
//! (the first iteration's copy words hold the single pinned operand's allocation id).
//!
//! **Not applicable** (read in the code, no test): a zero-sized element type (`[u32; 0]` is
//! `DeviceRepr`) makes equal guard bytes for other lengths, but no node can touch a byte of it
//! and copies, memsets and fills of 0 bytes are refused; one array has one element type, so
//! bytes decide lengths; `fill`, `empty`, `alloc`/`free` nodes do not pack (`NodeParams::pack`),
//! so a body with one never has an unchanged call; `copy_2d`, `child`, `capture`, `host`,
//! `alloc` are not `repeatable`; an array element only read makes its group no array (no run);
//! a scalar derived from a length (`bufs[i].len()`) is a call, not `pure` (no run); receivers
//! `self` and `&dyn`/references reach the inherent method; the stream is per call (`foreign`).

mod common;

use std::sync::Arc;

use common::review17::{assert_same, same_all, stub};
use common::{Ops, Result, gpu, host, launch, read_all};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
use cudagraph::{Error, GraphCache, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// `n` buffers on `s`, each with other values.
fn distinct(s: &Arc<CudaStream>, n: u32) -> Result<Vec<CudaSlice<u32>>> {
    (0..n).map(|j| Ok(s.clone_htod(&host::iota(N, j + 2, 5 * j))?)).collect()
}

// ---------------------------------------------------------------------------------------------
// Hygiene: a run made of two `for`s whose tokens print alike but name other variables.

/// Two `for`s in one body: the first written with the caller's `$b`, the second with the
/// macro's own `b` (`$later`). Their statements print alike (`k.affine_inplace(N, 3, b, …)`).
macro_rules! split_run {
    ($cache:expr, $s:expr, $k:ident, $bufs:ident, $b:ident, $later:expr) => {{
        let b: u32 = $later;
        let c = cfg();
        graph!($cache, $s, {
            for i in 0..1 {
                $k.affine_inplace(N, 3, $b, &mut $bufs[i]).launch(c);
            }
            for i in 1..4 {
                $k.affine_inplace(N, 3, b, &mut $bufs[i]).launch(c);
            }
        })
    }};
}

/// [`split_run!`] with the caller's `b = 1`: element 0 gets `x * 3 + 1 + i`, the others
/// `x * 3 + later + i`.
fn split_run_call(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    later: u32,
) -> cudagraph::Result<()> {
    let b = 1u32;
    split_run!(cache, s, k, bufs, b, later)
}

/// [`split_run_call`]'s work, launch by launch.
fn split_run_eager(
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    later: u32,
) -> Result {
    for (j, x) in bufs.iter_mut().enumerate() {
        let b = if j == 0 { 1u32 } else { later };
        launch!(s, k, "affine_inplace", cfg(); &N, &3u32, &b, x)?;
    }
    Ok(())
}

/// Calls with the macro's `b` = 5, 5, 5, then 9, 9, then 13: each call must compute what its
/// statements compute (the eager launches), and a call whose macro-local `b` changed must not
/// count as unchanged. With the hole the two `for`s are one run, whose later iterations are
/// compared by their elements only: the call with `b = 9` is unchanged and launches `b = 5`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_run_across_two_fors_with_a_macro_local_scalar_is_evaluated_each_call() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut bufs, mut eager) = (distinct(&s, 4)?, distinct(&s, 4)?);
    let mut cache = GraphCache::new();
    let mut last = None;
    for (call, later) in [5u32, 5, 5, 9, 9, 13].into_iter().enumerate() {
        let before = cache.stats().unchanged_calls;
        split_run_call(&mut cache, &k, &s, &mut bufs, later)?;
        split_run_eager(&k, &s, &mut eager, later)?;
        s.synchronize()?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("call {call}, b {later}"));
        if last.is_some_and(|l| l != later) {
            assert_eq!(
                cache.stats().unchanged_calls,
                before,
                "call {call}: the macro's `b` changed to {later}, yet the call counted unchanged \
                 (its later iterations were not evaluated): {:?}",
                cache.stats()
            );
        }
        last = Some(later);
    }
    // The repeated calls were unchanged: the mechanism under test was in play.
    assert!(cache.stats().unchanged_calls >= 2, "{:?}", cache.stats());
    Ok(())
}

/// [`split_run!`] with `memset`s (no kernel: `made_by` is not even asked).
macro_rules! split_memset {
    ($cache:expr, $s:expr, $bufs:ident, $v:ident, $later:expr) => {{
        let v: u32 = $later;
        graph!($cache, $s, {
            for i in 0..1 {
                memset(&mut $bufs[i], $v);
            }
            for i in 1..4 {
                memset(&mut $bufs[i], v);
            }
        })
    }};
}

fn split_memset_call(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    later: u32,
) -> cudagraph::Result<()> {
    let v = 7u32;
    split_memset!(cache, s, bufs, v, later)
}

/// As [`a_run_across_two_fors_with_a_macro_local_scalar_is_evaluated_each_call`], with
/// memsets: element 0 is set to the caller's `v = 7`, the others to the macro's `v`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_memset_run_across_two_fors_with_a_macro_local_value_is_evaluated_each_call() -> Result {
    let _serial = common::serial();
    let (_ctx, s, _k) = gpu()?;
    let mut bufs = distinct(&s, 4)?;
    let mut cache = GraphCache::new();
    let mut last = None;
    for (call, later) in [5u32, 5, 5, 9, 9].into_iter().enumerate() {
        let before = cache.stats().unchanged_calls;
        split_memset_call(&mut cache, &s, &mut bufs, later)?;
        s.synchronize()?;
        let got = read_all(&s, &bufs)?;
        let want: Vec<Vec<u32>> =
            (0..4).map(|j| vec![if j == 0 { 7 } else { later }; LEN]).collect();
        same_all(&got, &want, &format!("call {call}, v {later}"));
        if last.is_some_and(|l| l != later) {
            assert_eq!(
                cache.stats().unchanged_calls,
                before,
                "call {call}: the macro's memset value changed to {later}, yet the call counted \
                 unchanged: {:?}",
                cache.stats()
            );
        }
        last = Some(later);
    }
    assert!(cache.stats().unchanged_calls >= 2, "{:?}", cache.stats());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Hygiene: places and receivers keyed by their text.

// The review's three tests of places and receivers keyed by their text (a macro's own `x` beside
// its caller's `x`: `copy` and `iota` into the caller's buffer; a macro's own `k` running the
// caller's module) are now compile-fail cases: every variable name of a place or a path
// receiver must name one binding in the whole body, checked by rustc (`graph!`'s name probe,
// `cudagraph-macros-core/src/hygiene.rs`), ui cases
// - `review18b-macro-place-of-the-callers-spelling`,
// - `review18b-macro-receiver-of-the-callers-spelling`,
// - `review19-macro-index-variable-of-the-callers-spelling`,
// - `review19-macro-scratch-of-the-callers-spelling`;
// pass case `names-from-a-macro`.

// ---------------------------------------------------------------------------------------------
// A generic receiver and a blanket helper trait.

// The review's test of it (`a_generic_receivers_blanket_helper_is_evaluated_each_iteration`: in a
// function generic over `K: __private::Kernels`, a blanket trait method named like the kernel,
// which calls the real kernel method with a `b` of its own choosing per call, so a run's later
// iterations, evaluated once, launched stale values) is now the compile-fail case
// `ui/review18b-generic-receiver-blanket-helper.rs` (session 19): every receiver must have a
// concrete `kernels!` type, checked by its inherent `__cudagraph_concrete`
// (`__private::Concrete`), which a trait method cannot stand in for.

// ---------------------------------------------------------------------------------------------
// Controls: what a later iteration's copy depends on is in the words.

/// A run of 4 copies from `src`, each into its own element of `parts`.
fn copy_into_parts(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    src: &CudaView<'_, u32>,
    parts: &mut [CudaViewMut<'_, u32>],
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..4 {
            copy(&src, &mut parts[i]);
        }
    })
}

/// [`copy_into_parts`] from the first `src_len` elements of `src`, into 4 views of `big` at
/// `k * LEN`, of `lens[k]` elements each (a shorter view starts at the same address).
fn parts_call(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    src: &CudaSlice<u32>,
    big: &mut CudaSlice<u32>,
    src_len: usize,
    lens: [usize; 4],
) -> cudagraph::Result<()> {
    let src = src.slice(..src_len);
    let (mut v0, mut r0) = big.split_at_mut(LEN);
    let (mut v1, mut r1) = r0.split_at_mut(LEN);
    let (mut v2, mut v3) = r1.split_at_mut(LEN);
    let mut parts = [
        v0.slice_mut(..lens[0]),
        v1.slice_mut(..lens[1]),
        v2.slice_mut(..lens[2]),
        v3.slice_mut(..lens[3]),
    ];
    copy_into_parts(cache, s, &src, &mut parts)
}

/// Element 2 (a later iteration's) shrunk by one element at the same address: its copy of LEN
/// elements would write past it (into element 3). The guard's bytes are in the words, so the
/// call is changed and validated: `Error::CopyLength`, nothing launched.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_shorter_element_view_at_the_same_address_is_refused() -> Result {
    let _serial = common::serial();
    let (_ctx, s, _k) = gpu()?;
    let src = s.clone_htod(&host::iota(N, 3, 1))?;
    let mut big = s.alloc_zeros::<u32>(4 * LEN)?;
    let mut cache = GraphCache::new();
    let full = [LEN; 4];
    for _ in 0..3 {
        parts_call(&mut cache, &s, &src, &mut big, LEN, full)?;
    }
    assert!(cache.stats().unchanged_calls >= 2, "{:?}", cache.stats());
    let launches = cache.stats().launches;
    match parts_call(&mut cache, &s, &src, &mut big, LEN, [LEN, LEN, LEN - 1, LEN]) {
        Err(Error::CopyLength { .. }) => {}
        r => panic!("element 2 shortened at the same address: {r:?} ({:?})", cache.stats()),
    }
    assert_eq!(cache.stats().launches, launches, "nothing launched");
    parts_call(&mut cache, &s, &src, &mut big, LEN, full)?;
    s.synchronize()?;
    let got = s.clone_dtoh(&big)?;
    for k in 0..4 {
        assert_same(&got[k * LEN..(k + 1) * LEN], &host::iota(N, 3, 1), &format!("part {k}"));
    }
    Ok(())
}

/// The run's single operand (`src`, in every iteration) shortened at the same address: its
/// handle's length is in the words (`word_handle`), so the call is validated and refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_shorter_single_operand_at_the_same_address_is_refused() -> Result {
    let _serial = common::serial();
    let (_ctx, s, _k) = gpu()?;
    let src = s.clone_htod(&host::iota(N, 3, 1))?;
    let mut big = s.alloc_zeros::<u32>(4 * LEN)?;
    let mut cache = GraphCache::new();
    let full = [LEN; 4];
    for _ in 0..3 {
        parts_call(&mut cache, &s, &src, &mut big, LEN, full)?;
    }
    let launches = cache.stats().launches;
    match parts_call(&mut cache, &s, &src, &mut big, LEN - 1, full) {
        Err(Error::CopyLength { .. }) => {}
        r => panic!("the source shortened at the same address: {r:?} ({:?})", cache.stats()),
    }
    assert_eq!(cache.stats().launches, launches, "nothing launched");
    parts_call(&mut cache, &s, &src, &mut big, LEN, full)?;
    Ok(())
}

/// A run of copies into elements that live on streams of two context objects of device 0
/// (on the stub driver their contexts differ too: each `CudaContext::new` retains another
/// handle there, so the array's contexts are mixed). Every call, unchanged ones included, must
/// order the graph with the elements' own streams (the ledger: `stream_waits` grows), and copy.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_run_over_elements_of_two_context_objects_is_ordered_every_call() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    let other = CudaContext::new(0)?;
    let (sa, sb) = (ctx.new_stream()?, other.new_stream()?);
    let src = s.clone_htod(&host::iota(N, 3, 1))?;
    let mut d = Vec::new();
    for j in 0..4 {
        d.push(if j % 2 == 0 { sa.alloc_zeros::<u32>(LEN)? } else { sb.alloc_zeros::<u32>(LEN)? });
    }
    sa.synchronize()?;
    sb.synchronize()?;
    let mut cache = GraphCache::new();
    for call in 0..4 {
        let waits = cache.stats().stream_waits;
        let src = src.slice(..);
        graph!(&mut cache, &s, {
            for i in 0..4 {
                copy(&src, &mut d[i]);
            }
        })
        .unwrap_or_else(|e| panic!("call {call}: {e:?}"));
        assert!(
            cache.stats().stream_waits > waits,
            "call {call}: elements on other streams, no stream wait: {:?}",
            cache.stats()
        );
    }
    // The unchanged path was taken (the ledger is per call, not per words).
    assert!(cache.stats().unchanged_calls >= 2, "{:?}", cache.stats());
    s.synchronize()?;
    sa.synchronize()?;
    sb.synchronize()?;
    for (j, b) in d.iter().enumerate() {
        let own = if j % 2 == 0 { &sa } else { &sb };
        assert_same(&own.clone_dtoh(b)?, &host::iota(N, 3, 1), &format!("element {j}"));
    }
    Ok(())
}

/// A run of 4 copies from one pinned buffer (a single operand, in every iteration).
fn copy_from_pinned(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    p: &PinnedHostSlice<u32>,
    d: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..4 {
            copy(&p, &mut d[i]);
        }
    })
}

/// The single pinned operand of a run freed and another allocated at the same address: its
/// allocation id is in the first iteration's copy words (`word_handle` has none), so the call
/// is changed and every copy reads the new buffer. GPU only in effect (the stub reports no
/// allocation ids, so those copies never pack, and never reuses an address).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pinned_single_operand_of_a_run_reallocated_is_copied_from() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "review 18b: a pinned single operand reallocated");
    let (ctx, s, _k) = gpu()?;
    let mut d = common::buffers(&s, 4, LEN)?;
    let make = |a: u32, b: u32| -> Result<PinnedHostSlice<u32>> {
        let mut p = common::pinned::<u32>(&ctx, LEN)?;
        p.as_mut_slice()?.copy_from_slice(&host::iota(N, a, b));
        Ok(p)
    };
    let p = make(3, 1)?;
    let mut cache = GraphCache::new();
    for call in 0..3 {
        copy_from_pinned(&mut cache, &s, &p, &mut d)?;
        s.synchronize()?;
        same_all(&read_all(&s, &d)?, &vec![host::iota(N, 3, 1); 4], &format!("call {call}"));
    }
    let at = p.as_ptr()? as usize;
    drop(p);
    let mut aside = Vec::new();
    let mut fresh = make(9, 4)?;
    while fresh.as_ptr()? as usize != at && aside.len() < 8 {
        aside.push(fresh);
        fresh = make(9, 4)?;
    }
    eprintln!("the new allocation is at the freed address: {}", fresh.as_ptr()? as usize == at);
    drop(aside);
    let unchanged = cache.stats().unchanged_calls;
    copy_from_pinned(&mut cache, &s, &fresh, &mut d)?;
    s.synchronize()?;
    same_all(&read_all(&s, &d)?, &vec![host::iota(N, 9, 4); 4], "after the reallocation");
    if !stub() {
        assert_eq!(cache.stats().unchanged_calls, unchanged, "{:?}", cache.stats());
    }
    Ok(())
}
