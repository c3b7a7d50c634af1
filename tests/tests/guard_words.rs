//! Issue 31 (session 18): a `graph!` call's words hold every place's guard, its address range,
//! put in as the place is acquired (`__private::Guards::with_words`), and an array acquired in
//! one loop adds its elements' contexts. An unchanged call then skips the aliasing check (its
//! words equal those of a call that passed it with the same ranges), the stream ledger when
//! every buffer lives on the call's stream, and the guards' drops when none records anything;
//! and a run's later iterations compare no handle of their own. Each test changes only what
//! one of these skips relies on, on an otherwise unchanged call, and compares the graph with
//! the same launches made one by one with cudarc or with the host model (integers: exact).
//! Session 28 adds a changed call whose words up to its first node equal a checked call's
//! (the check skipped; passed on the H200 in session 28, before its setup moved into helpers
//! shared with the first test). Expected on a GPU: all pass.

mod common;

use std::sync::Arc;

use common::run8::{LEN, N, cfg, distinct, run8, run8_eager};
use common::{Result, assert_same, gpu, host, launch, read_all, same_all};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, PushKernelArg};
use cudagraph::{Error, GraphCache};

/// Steps of `slow_iota`: a few milliseconds on an H200, so that a graph that does not wait for
/// it overtakes it.
const SPINS: u32 = 1 << 17;

/// `run8` over `bufs` with an overlapping view among them: refused as `Error::Aliasing` naming
/// both statements, with nothing launched or enqueued (`what` prefixes the messages).
fn refused_as_aliasing(
    cache: &mut GraphCache,
    (k, s): (&common::Ops, &Arc<CudaStream>),
    bufs: &mut [CudaSlice<u32>],
    what: &str,
) -> Result {
    let before = read_all(s, bufs)?;
    let launches = cache.stats().launches;
    match run8(cache, k, s, bufs) {
        Err(Error::Aliasing { first, second }) => {
            assert!(first.text.contains("affine_inplace"), "{first}");
            assert!(second.text.contains("affine_inplace"), "{second}");
        }
        r => panic!("{what}expected Aliasing, got {r:?}"),
    }
    s.synchronize()?;
    assert_eq!(cache.stats().launches, launches, "{what}nothing launched");
    same_all(&read_all(s, bufs)?, &before, &format!("{what}nothing enqueued"));
    Ok(())
}

/// An element replaced, on an otherwise unchanged call, by a view that overlaps its neighbour
/// (as two views of one allocation would): its words differ (its guard's range), so the
/// aliasing check runs and refuses the call, naming both statements, with nothing enqueued.
/// Without the element's range in the words, the call counted as unchanged, skipped the check
/// and launched two unordered kernels on the same memory.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_element_swapped_for_an_overlapping_view_is_refused_on_an_unchanged_call() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut bufs, mut eager) = (distinct(&s)?, distinct(&s)?);
    let mut cache = GraphCache::new();
    for call in 0..3 {
        run8(&mut cache, &k, &s, &mut bufs)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("call {call}"));
    }
    assert!(cache.stats().unchanged_calls >= 2, "{:?}", cache.stats());
    let view = common::overlapping_view(&s, &bufs[6]);
    let own = std::mem::replace(&mut bufs[5], view);
    refused_as_aliasing(&mut cache, (&k, &s), &mut bufs, "")?;
    std::mem::replace(&mut bufs[5], own).leak();
    // The element back: the call's words equal the earlier calls' again, and it runs.
    run8(&mut cache, &k, &s, &mut bufs)?;
    run8_eager(&k, &s, &mut eager)?;
    same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, "the element back");
    Ok(())
}

/// One element of the run allocated on another stream (tracking off, so that cudarc orders
/// nothing): before each call, a slow kernel on that stream writes it. Every call after the
/// first is unchanged, and must still wait for the slow kernel (the stream ledger: its guard's
/// buffer lives on another stream than the call's), else the graph's kernel reads the element
/// before it is written. Against the host model.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_element_of_another_stream_is_ordered_on_every_unchanged_call() -> Result {
    let _serial = common::serial();
    let (_, s, k) = gpu()?;
    let other = CudaContext::new(0)?;
    // SAFETY: every cudarc use of `other`'s buffer in this test is on `own`; the graph's
    // launches are ordered with `own` by the cache's ledger, which is what is tested.
    unsafe { other.disable_event_tracking() };
    let own = other.new_stream()?;
    let mut bufs = distinct(&s)?;
    bufs[3] = own.alloc_zeros::<u32>(LEN)?;
    s.synchronize()?;
    own.synchronize()?;
    let mut cache = GraphCache::new();
    let mut want = read_all(&s, &bufs)?;
    for call in 0..4u32 {
        launch!(own, k, "slow_iota", cfg(); &N, &SPINS, &(call + 1), &7u32, &mut bufs[3])?;
        run8(&mut cache, &k, &s, &mut bufs)?;
        want[3] = host::slow_iota(N, SPINS, call + 1, 7);
        for w in want.iter_mut() {
            host::affine_inplace(w, 3, 1);
        }
        s.synchronize()?;
        own.synchronize()?;
        same_all(&read_all(&s, &bufs)?, &want, &format!("call {call}"));
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 3, "{st:?}");
    assert!(st.stream_waits >= 8, "the ledger waited before and after each call: {st:?}");
    Ok(())
}

/// The same run with every element on the call's stream: no stream wait in any call (the
/// ledger has nothing to order), and the graph matches launch by launch after each call,
/// with the run's elements swapped within the array between calls.
#[test]
#[ignore = "needs a CUDA GPU"]
fn elements_on_the_calls_stream_make_no_stream_wait() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut bufs, mut eager) = (distinct(&s)?, distinct(&s)?);
    let mut cache = GraphCache::new();
    for call in 0..6 {
        run8(&mut cache, &k, &s, &mut bufs)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("call {call}"));
        if call % 2 == 1 {
            bufs.swap(1, 6);
            eager.swap(1, 6);
        }
    }
    let st = cache.stats();
    assert_eq!(st.stream_waits, 0, "{st:?}");
    assert!(st.unchanged_calls >= 2, "{st:?}");
    let mut model = host::iota(N, 2, 0);
    for _ in 0..6 {
        host::affine_inplace(&mut model, 3, 1);
    }
    assert_same(&s.clone_dtoh(&bufs[0])?, &model, "element 0 against the host model");
    Ok(())
}

/// Session 28: a changed call's aliasing check is skipped when its words up to its first node
/// (every place's guard) equal those of one of the last two calls that passed it. With one
/// exec per variant, element 5 alternates between two buffers of its own (every call changed,
/// two checks in all, then skipped); an overlapping view put there instead is refused every
/// time (a refusal is never kept as passed), with nothing enqueued, and the two buffers still
/// run after. Against the launches made one by one (exact).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_changed_call_with_the_ranges_of_a_checked_call_skips_the_check_and_overlaps_are_refused()
-> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut bufs, mut eager) = (distinct(&s)?, distinct(&s)?);
    let mut spare = s.clone_htod(&host::iota(N, 9, 7))?;
    let mut espare = s.clone_htod(&host::iota(N, 9, 7))?;
    let mut cache = GraphCache::new();
    cache.set_execs_per_variant(1);
    let mut swap = |bufs: &mut Vec<_>, eager: &mut Vec<_>| {
        std::mem::swap(&mut bufs[5], &mut spare);
        std::mem::swap(&mut eager[5], &mut espare);
    };
    for call in 0..8 {
        swap(&mut bufs, &mut eager);
        run8(&mut cache, &k, &s, &mut bufs)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("call {call}"));
    }
    let st = cache.stats();
    assert_eq!(st.alias_checks, 2, "two sets of ranges, each checked once: {st:?}");
    assert_eq!((st.builds, st.unchanged_calls), (1, 0), "every call changed: {st:?}");
    let view = common::overlapping_view(&s, &bufs[6]);
    let own = std::mem::replace(&mut bufs[5], view);
    for attempt in 0..2 {
        refused_as_aliasing(&mut cache, (&k, &s), &mut bufs, &format!("attempt {attempt}: "))?;
    }
    std::mem::replace(&mut bufs[5], own).leak();
    for call in 0..4 {
        swap(&mut bufs, &mut eager);
        run8(&mut cache, &k, &s, &mut bufs)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("after, call {call}"));
    }
    Ok(())
}
