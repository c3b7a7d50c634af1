//! `BufferArray`: the elements of an unrolled `for` whose acquisition an unchanged call skips
//! while the array's memo holds (issue 31 item 2). Each test compares the graph with the same
//! steps on plain `Vec`s in `Mode::Eager` (exact, integers), and the memo with what may change
//! it: an element replaced (its old memory allocated again at once, behind a slow kernel, so a
//! stale address shows as a written canary), elements swapped, arrays alternated, one array in
//! two graphs, elements with cudarc events or on another stream (never remembered), and a call
//! on another stream; a buffer outside the array swapped every call, with an element replaced
//! now and then (session 28: on the H200 its data matched eager, the canary allocated first;
//! review 28 found that its `.launch(cfg())` made no run, so its launch configuration is now a
//! name, not yet run again). Expected on a GPU: all pass.

mod common;

use std::sync::Arc;

use common::buffer_array::{address, remembers};
use common::{AddressesSeen, Ops, Result, buffers, gpu, gpu_untracked, read_all, same_all};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{BufferArray, GraphCache, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;
/// The slow kernel's steps per element: long enough that a launch with a stale address would
/// still be writing when the test reads.
const SPINS: u32 = 1 << 12;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// One step of 12 elements, each updated in place (`affine_inplace`, so every call's result
/// depends on every earlier one), then element 0 slowly rewritten from element 11, for an
/// array type: `BufferArray` (the graph) or a slice (the eager oracle).
macro_rules! steps {
    ($name:ident, $short:ident, $bufs:ty) => {
        fn $name(
            cache: &mut GraphCache,
            k: &Ops,
            s: &Arc<CudaStream>,
            bufs: &mut $bufs,
            b: u32,
        ) -> cudagraph::Result<()> {
            graph!(cache, s, {
                for i in 0..12 {
                    k.affine_inplace(N, 2 * i + 1, b + i, &mut bufs[i]).launch(cfg());
                }
                k.slow_affine(N, SPINS, 3, 5, &bufs[11], &mut bufs[0]).launch(cfg());
            })
        }

        /// The first 6 elements only (another graph, other indices, over the same array).
        fn $short(
            cache: &mut GraphCache,
            k: &Ops,
            s: &Arc<CudaStream>,
            bufs: &mut $bufs,
        ) -> cudagraph::Result<()> {
            graph!(cache, s, {
                for i in 0..6 {
                    k.affine_inplace(N, 7, i, &mut bufs[i]).launch(cfg());
                }
            })
        }
    };
}
steps!(step, short, BufferArray<u32>);
steps!(step_vec, short_vec, [CudaSlice<u32>]);

/// `n` zeroed buffers as a `BufferArray`.
fn array(s: &Arc<CudaStream>, n: usize) -> Result<BufferArray<u32>> {
    common::buffer_array::array(s, n, LEN)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_unchanged_array_is_remembered_and_matches_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut arr = array(&s, 12)?;
    let mut oracle = buffers(&s, 12, LEN)?;
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    for call in 0..20u32 {
        step(&mut cache, &k, &s, &mut arr, 1)?;
        step_vec(&mut eager, &k, &s, &mut oracle, 1)?;
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("call {call}"));
        // (The first call has no earlier words to compare with: nothing to remember yet.)
        assert_eq!(remembers(&arr), call > 0, "call {call}: the array's elements remembered");
        // Call 1 remembers what it acquired; every later call skips the acquisition.
        assert_eq!(arr.memo_hits(), u64::from(call.saturating_sub(1)), "call {call}: memo hits");
    }
    let st = cache.stats();
    assert_eq!((st.builds, st.node_updates), (1, 0), "unchanged calls: {st:?}");
    assert_eq!(st.unchanged_calls, 19, "{st:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_replaced_element_is_used_and_its_old_memory_is_not() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut arr = array(&s, 12)?;
    let mut oracle = buffers(&s, 12, LEN)?;
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    let mut seen = AddressesSeen::default();
    for round in 0..6u32 {
        // Two calls: the second finds the memo of the first.
        for _ in 0..2 {
            step(&mut cache, &k, &s, &mut arr, round)?;
            step_vec(&mut eager, &k, &s, &mut oracle, round)?;
        }
        assert!(remembers(&arr), "round {round}: remembered before the replacement");
        // Element 0 (written slowly) replaced, its old memory freed and taken at once by a
        // zeroed canary: a call that used the old address would write the canary.
        s.synchronize()?;
        let old = address(&s, &arr[0]);
        let fresh = s.clone_htod(&vec![round; LEN])?;
        drop(std::mem::replace(&mut arr[0], fresh));
        oracle[0] = s.clone_htod(&vec![round; LEN])?;
        assert!(!remembers(&arr), "round {round}: an element reached mutably forgets the memo");
        let canary = s.alloc_zeros::<u32>(LEN)?;
        seen.note(address(&s, &canary));
        seen.note(old);
        let hits = arr.memo_hits();
        step(&mut cache, &k, &s, &mut arr, round)?;
        step_vec(&mut eager, &k, &s, &mut oracle, round)?;
        assert_eq!(arr.memo_hits(), hits, "round {round}: the replaced array is acquired anew");
        let c = s.clone_dtoh(&canary)?;
        assert!(c.iter().all(|&v| v == 0), "round {round}: the old element's memory was written");
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("round {round}"));
    }
    seen.assert_some_came_back("replaced elements: ");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn swapped_elements_alternating_arrays_and_two_graphs_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let (mut a, mut b) = (array(&s, 12)?, array(&s, 13)?);
    let (mut oa, mut ob) = (buffers(&s, 12, LEN)?, buffers(&s, 13, LEN)?);
    let (mut cache, mut short_cache, mut eager) =
        (GraphCache::new(), GraphCache::new(), GraphCache::eager());
    for call in 0..24u32 {
        // Alternate the arrays (two execs memoized), run the short graph on the same array
        // (other indices: the memo is the other graph's, then this one's), and now and then
        // swap two elements (the memo forgotten, the words changed).
        let (arr, oracle) = if call % 2 == 0 { (&mut a, &mut oa) } else { (&mut b, &mut ob) };
        step(&mut cache, &k, &s, arr, 2)?;
        step_vec(&mut eager, &k, &s, oracle, 2)?;
        if call % 3 == 0 {
            short(&mut short_cache, &k, &s, arr)?;
            short_vec(&mut eager, &k, &s, oracle)?;
        }
        if call % 5 == 4 {
            arr.swap(1, 10);
            oracle.swap(1, 10);
            assert!(!remembers(arr), "call {call}: a swap forgets the memo");
        }
        if call == 7 {
            // Appended: not used by the graphs (they index 0..12), but reached mutably.
            b.push(s.alloc_zeros::<u32>(LEN)?);
            ob.push(s.alloc_zeros::<u32>(LEN)?);
        }
        same_all(&read_all(&s, &a)?, &read_all(&s, &oa)?, &format!("call {call}: a"));
        same_all(&read_all(&s, &b)?, &read_all(&s, &ob)?, &format!("call {call}: b"));
    }
    let st = cache.stats();
    assert!(st.memo_hits > 0, "the two arrays' execs memoized: {st:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn elements_with_events_or_on_another_stream_are_never_remembered() -> Result {
    let _serial = common::serial();
    // Event tracking on: every element has cudarc events, acquired every call.
    {
        let (_ctx, s, k) = gpu()?;
        let mut arr = array(&s, 12)?;
        let mut oracle = buffers(&s, 12, LEN)?;
        let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
        for call in 0..6u32 {
            step(&mut cache, &k, &s, &mut arr, 4)?;
            step_vec(&mut eager, &k, &s, &mut oracle, 4)?;
            same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("tracked {call}"));
            assert!(!remembers(&arr), "tracked call {call}: elements with events");
        }
    }
    // Event tracking off, the elements on another stream than the calls'; then calls on the
    // elements' stream (remembered), then on the other again (not a hit: another stream).
    let (ctx, s, k) = gpu_untracked()?;
    let own = ctx.new_stream()?;
    let mut arr = array(&own, 12)?;
    let mut oracle = buffers(&own, 12, LEN)?;
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    for call in 0..9u32 {
        let on = if (3..6).contains(&call) { &own } else { &s };
        step(&mut cache, &k, on, &mut arr, 5)?;
        step_vec(&mut eager, &k, on, &mut oracle, 5)?;
        ctx.synchronize()?;
        same_all(&read_all(&own, &arr)?, &read_all(&own, &oracle)?, &format!("other {call}"));
        if call < 3 {
            assert!(!remembers(&arr), "call {call}: elements on another stream");
        } else if call == 5 {
            // (Call 3 is the first on this stream: its words may be compared with no earlier
            // call's; call 4's are.)
            assert!(remembers(&arr), "call {call}: elements on the call's stream");
        }
    }
    Ok(())
}

/// A fan over 12 elements (one run: the same call on each element), then a slow kernel from a
/// buffer outside the array (`x`, swapped by the caller) into another (`out`), for an array
/// type (see [`steps!`]).
macro_rules! outside {
    ($name:ident, $bufs:ty) => {
        fn $name(
            cache: &mut GraphCache,
            (k, s): (&Ops, &Arc<CudaStream>),
            bufs: &mut $bufs,
            (x, out): (&CudaSlice<u32>, &mut CudaSlice<u32>),
            b: u32,
        ) -> cudagraph::Result<()> {
            // A name, not `cfg()`: a call in an argument ends the run (review 28).
            let c = cfg();
            graph!(cache, s, {
                for i in 0..12 {
                    k.affine_inplace(N, 3, b, &mut bufs[i]).launch(c);
                }
                k.slow_affine(N, SPINS, 5, b, &*x, &mut *out).launch(c);
            })
        }
    };
}
outside!(outside_step, BufferArray<u32>);
outside!(outside_vec, [CudaSlice<u32>]);

/// Session 28: a changed call whose only changed place is outside the array (`x` swapped
/// every call) leaves the run's later nodes as the exec has them (their elements' words are
/// compared alone, `clean_by_items`); a replaced element (its old memory allocated again at
/// once, behind the slow kernel, as a canary) changes them, also in the same call as a swap.
/// One exec per variant (every call updates the exec in place) and memoized execs, each
/// against eager, exactly.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_buffer_outside_the_array_swapped_and_a_replaced_element_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    for execs in [1usize, 2] {
        let mut arr = array(&s, 12)?;
        let mut oracle = buffers(&s, 12, LEN)?;
        let xs = [s.clone_htod(&vec![7u32; LEN])?, s.clone_htod(&vec![9u32; LEN])?];
        let (mut out, mut eout) = (s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?);
        let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
        cache.set_execs_per_variant(execs);
        let mut seen = AddressesSeen::default();
        for call in 0..30u32 {
            let what = format!("execs {execs}, call {call}");
            let mut canary = None;
            if call % 7 == 5 {
                // Element `call % 12` replaced: its old memory taken at once by a zeroed canary.
                s.synchronize()?;
                let e = (call % 12) as usize;
                let old = address(&s, &arr[e]);
                let fresh = s.clone_htod(&vec![call; LEN])?;
                drop(std::mem::replace(&mut arr[e], fresh));
                // The canary first, before the oracle's allocation can take the memory (the
                // first GPU run, allocating it after, saw no address come back).
                let c = s.alloc_zeros::<u32>(LEN)?;
                seen.note(address(&s, &c));
                seen.note(old);
                canary = Some(c);
                oracle[e] = s.clone_htod(&vec![call; LEN])?;
            }
            // `x` alternates every call; the scalar `b` changes every fourth call.
            let x = &xs[call as usize % 2];
            let b = call / 4;
            outside_step(&mut cache, (&k, &s), &mut arr, (x, &mut out), b)?;
            outside_vec(&mut eager, (&k, &s), &mut oracle, (x, &mut eout), b)?;
            if let Some(c) = canary {
                let c = s.clone_dtoh(&c)?;
                assert!(c.iter().all(|&v| v == 0), "{what}: the old element's memory was written");
            }
            same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &what);
            assert_eq!(s.clone_dtoh(&out)?, s.clone_dtoh(&eout)?, "{what}: out");
        }
        let st = cache.stats();
        assert_eq!(st.launches, 30, "{st:?}");
        if execs == 1 {
            assert_eq!((st.builds, st.memo_hits), (1, 0), "one exec, updated in place: {st:?}");
        }
        seen.assert_some_came_back(&format!("execs {execs}: replaced elements: "));
    }
    Ok(())
}
