//! Review 21 (commit c283c1c: `__private::EachStore` / `EachHandles`, an array acquired in one
//! loop whose elements all have no events, live on the call's stream and equal the last call's
//! words keeps the elements instead of their handles; `AcquireMut::inert_write`,
//! `EachMut::get`, the `Remade` entry pointing at the store). The lazy path is reachable from
//! safe code (`CudaStream::null` makes buffers without events whatever the context's tracking;
//! here a context with tracking off makes them, `common::gpu_untracked`), and is driven
//! by hand through the hidden API (`GraphCache::words` of a registered plan, `Guards::with_words`,
//! `acquire_mut_each`), as any user can.
//!
//! Every test here must PASS when the crate is safe. All are host-side and run on the CPU stub
//! driver: `REVIEW17_STUB=1 LD_LIBRARY_PATH=/work/main/target/stub-driver cargo test -p
//! cudagraph-tests --test review_session21 -- --ignored`.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::plans::plan_with;
use common::{Ops, Result};
use cudagraph::__private::{
    DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each,
    begin_call,
};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig};
use cudagraph::{GraphCache, KernelArg, graph};

/// The scalar that marks this file's first body (found again by its text among the plans).
const N21: u32 = 0;
/// The marker of the body of five arrays.
const N21B: u32 = 0;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(1)
}

/// `n` one-element buffers on `s`: no events, so an array of them is kept lazily by an
/// unchanged call.
fn nulls(s: &Arc<CudaStream>, n: usize) -> Result<Vec<CudaSlice<u32>>> {
    (0..n).map(|_| Ok(s.alloc_zeros::<u32>(1)?)).collect()
}

/// Three elements written in place, an indexed run (one array acquired in one loop).
fn three(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    a: u32,
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..3 {
            k.affine_inplace(N21, a, 1, &mut bufs[i]).launch(c);
        }
    })
}

/// Whether `f` panics (its message is not checked).
fn panics<R>(f: impl FnOnce() -> R) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(f)).is_err();
    std::panic::set_hook(hook);
    r
}

/// The place bits of a handle's tag (its call's id is above them).
fn place_bits(tag: u64) -> u64 {
    tag & ((1 << 24) - 1)
}

/// Safe code reaches the lazy store (elements without events, the words of a registered
/// plan): `Guards::all` then refuses (REMADE slots, no guard kept), `EachHandles::at` of an
/// index past the array panics (`M`, `M + 1`, `usize::MAX`: no read past the kept indices), and
/// the handles made on demand equal, field for field, those a store that writes them holds
/// (address range, context, place); `made` then gives every guard.
#[test]
#[ignore = "needs a CUDA driver (runs on the CPU stub)"]
fn a_lazy_store_reached_by_safe_code_checks_its_index_and_makes_the_acquired_handles() -> Result {
    let _serial = common::serial();
    // A context whose buffers have no events (tracking off before any is allocated): every
    // buffer is used on the stream it was allocated on, by calls that launch nothing.
    let (_ctx, s, k) = common::gpu_untracked()?;
    let mut bufs = nulls(&s, 3)?;
    let mut cache = GraphCache::new();
    for _ in 0..3 {
        three(&mut cache, &k, &s, &mut bufs, 3)?;
    }
    assert!(cache.stats().unchanged_calls >= 1, "{:?}", cache.stats());
    // The same acquisition by hand, with the words of the call site's last call.
    let plan = plan_with("review_session21.rs", "N21,");
    let call = begin_call();
    let words = cache.words(plan, &call);
    let mut store = EachStore::new();
    let mut g = Guards::<3>::with_words(&s, words);
    let e = bufs.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1, 2]) });
    let h =
        acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1, 2]) }, &mut g);
    assert!(panics(|| g.all().len()), "the lazy path was taken: guards not made yet");
    assert_eq!((h.len(), h.is_empty()), (3, false));
    for k in [3, 4, usize::MAX] {
        assert!(panics(|| h.at(k)), "at({k}) of a 3-element lazy store");
    }
    let fields = |w: cudagraph::DevWrite<'_, u32>| (w.range(), w.context(), w.access());
    let lazy: Vec<_> = (0..3).map(|k| fields(h.at(k))).collect();
    assert_eq!(g.made().len(), 3);
    assert_eq!(g.all().len(), 3);
    drop(g.take_words());
    drop(g);
    for (k, &(range, ctx, access)) in lazy.iter().enumerate() {
        let ptr = bufs_ptr(&bufs[k], &s);
        assert_eq!(range, Some((ptr, 4)), "element {k}'s range");
        assert_eq!(ctx, Some(s.context().cu_ctx()), "element {k}'s context");
        let (tag, write) = access.unwrap();
        assert!(write && place_bits(tag) == k as u64 + 1, "element {k}'s place: {tag:#x}");
    }
    // The written store of the same buffers (no words: nothing compared, handles stored).
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = Guards::<3>::new();
    let e = bufs.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1, 2]) });
    let h =
        acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1, 2]) }, &mut g);
    assert_eq!(g.all().len(), 3, "a store that writes its handles puts every guard");
    for k in [3, usize::MAX] {
        assert!(panics(|| h.at(k)), "at({k}) of a 3-element written store");
    }
    for (k, &(range, ctx, access)) in lazy.iter().enumerate() {
        let (r, c, a) = fields(h.at(k));
        assert_eq!((r, c), (range, ctx), "element {k}");
        assert_eq!(place_bits(a.unwrap().0), place_bits(access.unwrap().0), "element {k}");
    }
    drop(g);
    // The call site still runs (its variant lost its words to the hand-made call: compared
    // node by node once, then unchanged again).
    three(&mut cache, &k, &s, &mut bufs, 3)?;
    let before = cache.stats().unchanged_calls;
    three(&mut cache, &k, &s, &mut bufs, 3)?;
    assert_eq!(cache.stats().unchanged_calls, before + 1, "{:?}", cache.stats());
    Ok(())
}

/// A buffer's device address, read through cudarc (no events on these buffers).
fn bufs_ptr(b: &CudaSlice<u32>, s: &CudaStream) -> u64 {
    b.device_ptr(s).0
}

/// An empty array (`M = 0`) kept lazily (its words trivially equal): `at(0)` must panic before
/// any element pointer is made.
#[test]
#[ignore = "needs a CUDA driver (runs on the CPU stub)"]
fn an_empty_lazy_array_refuses_every_index() -> Result {
    let _serial = common::serial();
    // A context whose buffers have no events (tracking off before any is allocated): every
    // buffer is used on the stream it was allocated on, by calls that launch nothing.
    let (_ctx, s, k) = common::gpu_untracked()?;
    let mut bufs = nulls(&s, 3)?;
    let mut cache = GraphCache::new();
    for _ in 0..2 {
        three(&mut cache, &k, &s, &mut bufs, 3)?;
    }
    let plan = plan_with("review_session21.rs", "N21,");
    let call = begin_call();
    let mut none: Vec<CudaSlice<u32>> = Vec::new();
    let mut store = EachStore::new();
    let mut store2 = EachStore::new();
    let mut g = Guards::<3>::with_words(&s, cache.words(plan, &call));
    let e = none.__cudagraph_each_mut(&const { DistinctIndices::<0>::new([]) });
    let h = acquire_mut_each(
        &mut store,
        e,
        &s,
        &call,
        &const { PlaceIndices::<0, 3>::new([]) },
        &mut g,
    );
    assert_eq!((h.len(), h.is_empty()), (0, true));
    for k in [0, 1, usize::MAX] {
        assert!(panics(|| h.at(k)), "at({k}) of an empty array");
    }
    // Then the real elements, in the same guards.
    let e = bufs.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1, 2]) });
    let h2 = acquire_mut_each(
        &mut store2,
        e,
        &s,
        &call,
        &const { PlaceIndices::new([0, 1, 2]) },
        &mut g,
    );
    assert!(panics(|| h2.at(3)));
    // (The empty array's two context words already differ from the words there: this one is
    // acquired as before, its handles written.)
    assert_eq!(g.all().len(), 3);
    assert_eq!(g.made().len(), 3);
    drop(g);
    Ok(())
}

/// The first loop stops part way (element 1 has events: allocated with tracking on): the
/// handles of element 0 are made from it (`inert_write`), element 0's guard at once
/// (`remake_now`), so `Guards::all` needs no `made`; every handle equals the buffer's.
#[test]
#[ignore = "needs a CUDA driver (runs on the CPU stub)"]
fn a_first_loop_stopped_by_an_element_with_events_writes_every_handle() -> Result {
    let _serial = common::serial();
    // A context whose buffers have no events (tracking off before any is allocated): every
    // buffer is used on the stream it was allocated on, by calls that launch nothing.
    let (_ctx, s, k) = common::gpu_untracked()?;
    let mut bufs = nulls(&s, 3)?;
    // SAFETY: element 1 gets events; tracking is off again before anything uses it.
    unsafe { _ctx.enable_event_tracking() };
    bufs[1] = s.alloc_zeros::<u32>(1)?;
    // SAFETY: every buffer is used on the stream it was allocated on, by calls that launch
    // nothing.
    unsafe { _ctx.disable_event_tracking() };
    let mut cache = GraphCache::new();
    for _ in 0..3 {
        three(&mut cache, &k, &s, &mut bufs, 3)?;
    }
    let plan = plan_with("review_session21.rs", "N21,");
    let call = begin_call();
    let words = cache.words(plan, &call);
    let mut store = EachStore::new();
    let mut g = Guards::<3>::with_words(&s, words);
    let e = bufs.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1, 2]) });
    let h =
        acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1, 2]) }, &mut g);
    assert_eq!(g.all().len(), 3, "every guard put (element 0's made when the loop stopped)");
    assert!(panics(|| h.at(3)));
    let got: Vec<_> = (0..3).map(|k| (h.at(k).range(), h.at(k).len())).collect();
    drop(g);
    for (k, b) in bufs.iter().enumerate() {
        let ptr = bufs_ptr(b, &s);
        assert_eq!(got[k], (Some((ptr, 4 * b.len() as u64)), b.len()), "element {k}");
    }
    Ok(())
}

/// Five arrays of event-less elements in one body: four kept lazily (the `Remade` entries),
/// the fifth acquired as before. Unchanged calls, a changed call (a scalar: every guard made,
/// the aliasing check run), swapped and replaced elements, an element on another stream: every
/// call runs, none refused, the unchanged ones counted.
#[test]
#[ignore = "needs a CUDA driver (runs on the CPU stub)"]
fn five_lazy_arrays_in_one_body_run_changed_and_unchanged() -> Result {
    let _serial = common::serial();
    // As above.
    let (ctx, s, k) = common::gpu_untracked()?;
    let s2 = ctx.new_stream()?;
    let mut a = [nulls(&s, 2)?, nulls(&s, 2)?, nulls(&s, 2)?, nulls(&s, 2)?, nulls(&s, 2)?];
    fn body(
        cache: &mut GraphCache,
        k: &Ops,
        s: &Arc<CudaStream>,
        a: &mut [Vec<CudaSlice<u32>>; 5],
        t: u32,
    ) -> cudagraph::Result<()> {
        let c = cfg();
        let [p, q, r, u, v] = a;
        graph!(cache, s, {
            for i in 0..2 {
                k.iota(N21B, t, 1, &mut p[i]).launch(c);
                k.iota(N21B, t, 2, &mut q[i]).launch(c);
                k.iota(N21B, t, 3, &mut r[i]).launch(c);
                k.iota(N21B, t, 4, &mut u[i]).launch(c);
                k.iota(N21B, t, 5, &mut v[i]).launch(c);
            }
        })
    }
    let mut cache = GraphCache::new();
    let mut expect_unchanged = Vec::new();
    let mut t = 1;
    for step in 0..12 {
        let unchanged = match step {
            0 => false,
            3 | 7 => {
                t += 1;
                false
            }
            4 => {
                a[2].swap(0, 1);
                false
            }
            5 => {
                a[4][1] = s2.alloc_zeros::<u32>(1)?;
                false
            }
            8 => {
                a[0][0] = s.alloc_zeros::<u32>(1)?;
                false
            }
            _ => true,
        };
        let before = cache.stats().unchanged_calls;
        body(&mut cache, &k, &s, &mut a, t)?;
        s.synchronize()?;
        s2.synchronize()?;
        expect_unchanged.push((step, unchanged, cache.stats().unchanged_calls - before == 1));
    }
    for (step, want, got) in expect_unchanged {
        // A changed call is never counted unchanged; an unchanged one (after the first call
        // after a change) is.
        if !want {
            assert!(!got, "step {step}: counted unchanged after a change");
        }
    }
    assert!(cache.stats().unchanged_calls >= 5, "{:?}", cache.stats());
    Ok(())
}
