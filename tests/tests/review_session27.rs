//! Review of session 27 (brief 1, safe code only): `BufferArray<T>` and its `ArrayMemo`, with
//! which an unchanged `graph!` call skips acquiring the elements of an unrolled `for` when the
//! memo (index list address, call stream address, each element's `[address, guard word]`)
//! equals the graph's words (`acquire_mut_each`, `hit`/`remember`).
//!
//! The claim attacked: the memo is valid exactly while no element was reachable mutably
//! (outside the one-loop acquisition) since it was filled. Every test here runs the same steps
//! on plain `Vec`s in `GraphCache::eager()` (or a host model) and compares exactly (integer
//! kernels); where an address could be stale, the old memory is freed and taken at once by a
//! zeroed canary behind a slow kernel (`slow_affine` writing element 0), so a stale address
//! shows as written canary data (`AddressesSeen` asserts that some address came back).
//!
//! Safe code only, besides cudarc's `disable_event_tracking`/`enable_event_tracking` (their
//! contracts kept: every untracked buffer is used on its own stream, or by graph calls whose
//! ordering the crate's stream ledger makes) and the tests' eager cudarc launches (`launch!`,
//! truthful arguments).
//!
//! Expected on a GPU if the code is sound: all pass. What a hole would show is said at each
//! test. None was found by reading the code (see the report of session 27's review).

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::buffer_array::{address, remembers};
use common::{AddressesSeen, Ops, Result, buffers, gpu, gpu_untracked, launch, read_all, same_all};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::{BufferArray, GraphCache, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;
/// Steps of the slow kernels: long enough that a launch not ordered after (or before) another
/// stream's use of a buffer, or writing a stale address, is still running when the test reads.
const SPINS: u32 = 1 << 12;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The graph sites, for an array type: `BufferArray` (the graph) or a slice (the eager oracle).
macro_rules! sites {
    ($step:ident, $other:ident, $rev:ident, $read:ident, $boom:ident, $bufs:ty) => {
        /// 12 elements updated in place, then element 0 slowly rewritten from element 11.
        fn $step(
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

        /// Another site over the same indices in the same order (an identical `const` index
        /// list, which the compiler may merge with `$step`'s): other parameters.
        fn $other(
            cache: &mut GraphCache,
            k: &Ops,
            s: &Arc<CudaStream>,
            bufs: &mut $bufs,
            b: u32,
        ) -> cudagraph::Result<()> {
            graph!(cache, s, {
                for i in 0..12 {
                    k.affine_inplace(N, 5, 3 * i + b, &mut bufs[i]).launch(cfg());
                }
                k.slow_affine(N, SPINS, 7, 1, &bufs[11], &mut bufs[0]).launch(cfg());
            })
        }

        /// The same 12 elements in the reverse order (element `k` of the loop is `bufs[11 - k]`).
        fn $rev(
            cache: &mut GraphCache,
            k: &Ops,
            s: &Arc<CudaStream>,
            bufs: &mut $bufs,
            b: u32,
        ) -> cudagraph::Result<()> {
            graph!(cache, s, {
                for i in 0..12 {
                    k.affine_inplace(N, 2 * i + 3, b ^ i, &mut bufs[11 - i]).launch(cfg());
                }
                k.slow_affine(N, SPINS, 9, 2, &bufs[0], &mut bufs[11]).launch(cfg());
            })
        }

        /// Every element read slowly (plain shared borrows of the array), into `outs`.
        fn $read(
            cache: &mut GraphCache,
            k: &Ops,
            s: &Arc<CudaStream>,
            bufs: &$bufs,
            outs: &mut [CudaSlice<u32>],
            b: u32,
        ) -> cudagraph::Result<()> {
            graph!(cache, s, {
                for i in 0..12 {
                    k.slow_affine(N, SPINS, 3, b + i, &bufs[i], &mut outs[i]).launch(cfg());
                }
            })
        }

        /// As `$step`, a scalar argument panicking when `b == 999` (after the array's
        /// acquisition: arguments are evaluated with the body).
        fn $boom(
            cache: &mut GraphCache,
            k: &Ops,
            s: &Arc<CudaStream>,
            bufs: &mut $bufs,
            b: u32,
        ) -> cudagraph::Result<()> {
            graph!(cache, s, {
                for i in 0..12 {
                    k.affine_inplace(N, 2 * i + 1, boom(b, i), &mut bufs[i]).launch(cfg());
                }
                k.slow_affine(N, SPINS, 3, 5, &bufs[11], &mut bufs[0]).launch(cfg());
            })
        }
    };
}
sites!(step, other, rev, read, step_boom, BufferArray<u32>);
sites!(step_vec, other_vec, rev_vec, read_vec, step_boom_vec, [CudaSlice<u32>]);

fn boom(b: u32, i: u32) -> u32 {
    assert!(!(b == 999 && i == 7), "review27: a panic part way through the body");
    b.wrapping_add(i)
}

/// `n` zeroed buffers as a `BufferArray`.
fn array(s: &Arc<CudaStream>, n: usize) -> Result<BufferArray<u32>> {
    common::buffer_array::array(s, n, LEN)
}

/// A zeroed canary allocated right after `old` was freed (noted in `seen`, with `old`).
fn canary(s: &Arc<CudaStream>, old: usize, seen: &mut AddressesSeen) -> Result<CudaSlice<u32>> {
    let c = s.alloc_zeros::<u32>(LEN)?;
    seen.note(address(s, &c));
    seen.note(old);
    Ok(c)
}

fn assert_zero(s: &Arc<CudaStream>, c: &CudaSlice<u32>, what: &str) -> Result {
    let v = s.clone_dtoh(c)?;
    assert!(v.iter().all(|&x| x == 0), "{what}: a canary at freed memory was written");
    Ok(())
}

/// Moves of whole arrays: `mem::swap` of two remembered arrays (each memo travels with its
/// elements, and each one's words are another graph's), `mem::replace` by a fresh array (its
/// old elements freed, their memory taken by canaries), an array rebuilt from its own elements
/// (`into_inner`/`From`, in order and reversed). A memo kept apart from its elements (or a
/// rebuilt array inheriting one) would launch the cache's graph with the old addresses: the
/// canary written, or results differing from the eager oracle. Sound: all equal, canaries 0.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review27_whole_arrays_swapped_replaced_and_rebuilt_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let (mut a, mut b) = (array(&s, 12)?, array(&s, 12)?);
    let (mut oa, mut ob) = (buffers(&s, 12, LEN)?, buffers(&s, 12, LEN)?);
    let (mut ca, mut cb, mut eager) = (GraphCache::new(), GraphCache::new(), GraphCache::eager());
    let mut seen = AddressesSeen::default();
    for round in 0..12u32 {
        for _ in 0..2 {
            step(&mut ca, &k, &s, &mut a, round)?;
            step_vec(&mut eager, &k, &s, &mut oa, round)?;
            step(&mut cb, &k, &s, &mut b, round + 1)?;
            step_vec(&mut eager, &k, &s, &mut ob, round + 1)?;
        }
        assert!(remembers(&a) && remembers(&b), "round {round}: both remembered");
        let mut canaries = Vec::new();
        match round % 4 {
            0 => {
                std::mem::swap(&mut a, &mut b);
                std::mem::swap(&mut oa, &mut ob);
                assert!(remembers(&a) && remembers(&b), "round {round}: memos move with arrays");
            }
            1 => {
                s.synchronize()?;
                let old = std::mem::replace(&mut a, array(&s, 12)?);
                let olds: Vec<usize> = old.iter().map(|e| address(&s, e)).collect();
                drop(old);
                oa = buffers(&s, 12, LEN)?;
                for o in olds {
                    canaries.push(canary(&s, o, &mut seen)?);
                }
                assert!(!remembers(&a), "round {round}: a fresh array remembers nothing");
            }
            2 => {
                let v = std::mem::replace(&mut a, BufferArray::new(Vec::new())).into_inner();
                a = v.into();
                assert!(!remembers(&a), "round {round}: rebuilt, nothing remembered");
            }
            _ => {
                let mut v = std::mem::replace(&mut b, BufferArray::new(Vec::new())).into_inner();
                v.reverse();
                b = v.into_iter().collect();
                ob.reverse();
            }
        }
        for _ in 0..2 {
            step(&mut ca, &k, &s, &mut a, round)?;
            step_vec(&mut eager, &k, &s, &mut oa, round)?;
            step(&mut cb, &k, &s, &mut b, round + 1)?;
            step_vec(&mut eager, &k, &s, &mut ob, round + 1)?;
        }
        for c in &canaries {
            assert_zero(&s, c, &format!("round {round}"))?;
        }
        same_all(&read_all(&s, &a)?, &read_all(&s, &oa)?, &format!("round {round}: a"));
        same_all(&read_all(&s, &b)?, &read_all(&s, &ob)?, &format!("round {round}: b"));
    }
    seen.assert_some_came_back("replaced arrays: ");
    let st = ca.stats();
    assert!(st.unchanged_calls > 0, "some calls unchanged (memo hits possible): {st:?}");
    Ok(())
}

/// Three sites over one array, each with its own cache, in a scrambled order: two with the
/// same index list (whose `const`s may be one static: the memo's `idx` compares equal across
/// sites) and one with the same elements in reverse order (another index list). A memo hit
/// keyed on the wrong thing would launch a graph whose elements are in another order or stale
/// (results differ from eager). Elements are swapped and one replaced (canary) now and then.
/// Sound: all equal, canaries 0.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review27_sites_with_equal_and_reversed_index_lists_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut arr = array(&s, 12)?;
    let mut oracle = buffers(&s, 12, LEN)?;
    let (mut c1, mut c2, mut c3, mut shared, mut eager) = (
        GraphCache::new(),
        GraphCache::new(),
        GraphCache::new(),
        GraphCache::new(),
        GraphCache::eager(),
    );
    let mut seen = AddressesSeen::default();
    let mut x = 0x9e37_79b9u32;
    for call in 0..60u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let b = x % 7;
        match x % 5 {
            0 | 1 => {
                step(&mut c1, &k, &s, &mut arr, b)?;
                step_vec(&mut eager, &k, &s, &mut oracle, b)?;
            }
            2 => {
                other(&mut c2, &k, &s, &mut arr, b)?;
                other_vec(&mut eager, &k, &s, &mut oracle, b)?;
            }
            3 => {
                rev(&mut c3, &k, &s, &mut arr, b)?;
                rev_vec(&mut eager, &k, &s, &mut oracle, b)?;
            }
            _ => {
                // One cache for two sites in turn (each call changed for it).
                if call % 2 == 0 {
                    step(&mut shared, &k, &s, &mut arr, b)?;
                    step_vec(&mut eager, &k, &s, &mut oracle, b)?;
                } else {
                    rev(&mut shared, &k, &s, &mut arr, b)?;
                    rev_vec(&mut eager, &k, &s, &mut oracle, b)?;
                }
            }
        }
        if call % 11 == 10 {
            arr.swap(3, 8);
            oracle.swap(3, 8);
        }
        let mut canaries = Vec::new();
        if call % 13 == 12 {
            // Element 0 (written slowly by `step`/`other`, read by `rev`) replaced.
            s.synchronize()?;
            let old = address(&s, &arr[0]);
            let fresh = s.clone_htod(&vec![call; LEN])?;
            drop(std::mem::replace(&mut arr[0], fresh));
            oracle[0] = s.clone_htod(&vec![call; LEN])?;
            canaries.push(canary(&s, old, &mut seen)?);
            // Element 11 (written slowly by `rev`) too.
            let old = address(&s, &arr[11]);
            drop(std::mem::replace(&mut arr[11], s.clone_htod(&vec![call ^ 1; LEN])?));
            oracle[11] = s.clone_htod(&vec![call ^ 1; LEN])?;
            canaries.push(canary(&s, old, &mut seen)?);
            for _ in 0..2 {
                step(&mut c1, &k, &s, &mut arr, 1)?;
                step_vec(&mut eager, &k, &s, &mut oracle, 1)?;
                rev(&mut c3, &k, &s, &mut arr, 2)?;
                rev_vec(&mut eager, &k, &s, &mut oracle, 2)?;
            }
        }
        for c in &canaries {
            assert_zero(&s, c, &format!("call {call}"))?;
        }
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("call {call}"));
    }
    seen.assert_some_came_back("replaced elements: ");
    Ok(())
}

/// A graph on another stream `t` reads every element slowly (the elements' own stream is `s`:
/// foreign to it, so the stream ledger makes `s` wait for that launch), then at once a graph on
/// `s` writes every element, its memo hit (nothing acquired). If a memo hit skipped an ordering
/// the device needs, the slow reader would see the later write: `outs` differ from the eager
/// oracle (all on one stream). The next read on `t` must also wait for the write. Sound: equal.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review27_a_memo_hit_write_is_ordered_after_a_graph_read_on_another_stream() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu_untracked()?;
    let t = ctx.new_stream()?;
    let mut arr = array(&s, 12)?;
    let mut outs = buffers(&t, 12, LEN)?;
    let mut oracle = buffers(&s, 12, LEN)?;
    let mut oouts = buffers(&s, 12, LEN)?;
    let (mut cw, mut cr, mut eager) = (GraphCache::new(), GraphCache::new(), GraphCache::eager());
    for round in 0..16u32 {
        // Two writes on `s`: the second one (and every later one) may hit the memo.
        for _ in 0..2 {
            step(&mut cw, &k, &s, &mut arr, round)?;
            step_vec(&mut eager, &k, &s, &mut oracle, round)?;
        }
        if round > 0 {
            assert!(remembers(&arr), "round {round}: remembered");
        }
        // The slow read on `t`, then at once a memo-hit write on `s`, then a read on `t` again.
        read(&mut cr, &k, &t, &arr, &mut outs, round)?;
        step(&mut cw, &k, &s, &mut arr, round + 100)?;
        read_vec(&mut eager, &k, &s, &oracle, &mut oouts, round)?;
        step_vec(&mut eager, &k, &s, &mut oracle, round + 100)?;
        ctx.synchronize()?;
        same_all(&read_all(&t, &outs)?, &read_all(&s, &oouts)?, &format!("round {round}: outs"));
        read(&mut cr, &k, &t, &arr, &mut outs, round + 1)?;
        step(&mut cw, &k, &s, &mut arr, round + 200)?;
        read_vec(&mut eager, &k, &s, &oracle, &mut oouts, round + 1)?;
        step_vec(&mut eager, &k, &s, &mut oracle, round + 200)?;
        ctx.synchronize()?;
        same_all(&read_all(&t, &outs)?, &read_all(&s, &oouts)?, &format!("round {round}: outs 2"));
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("round {round}: arr"));
    }
    let st = cw.stats();
    assert!(st.unchanged_calls > 0, "memo hits possible: {st:?}");
    Ok(())
}

/// Two `Arc<CudaContext>` objects of device 0 (one `CUcontext`, two event-tracking flags, two
/// sets of streams): an array on a stream of the first, another on a stream of the second,
/// called on either stream in a scrambled order, and streams of the second object made and
/// dropped between calls (a new call stream may take a dropped one's address; the elements'
/// streams, held by them, cannot be dropped). A memo hit is right only on the elements' own
/// stream object; anywhere else the elements are foreign (ordered by the ledger). A hit on the
/// wrong stream or context object would skip that ordering: results differ from the eager
/// oracle (one stream, in call order). Sound: all equal.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review27_two_context_objects_of_one_device_and_streams_made_again() -> Result {
    let _serial = common::serial();
    let (ctx_a, sa, k) = gpu_untracked()?;
    let ctx_b = CudaContext::new(0)?;
    // SAFETY: as `gpu_untracked`: every buffer below is used on its own stream or by graph
    // calls, which the crate orders with their own streams.
    unsafe { ctx_b.disable_event_tracking() };
    let sb = ctx_b.new_stream()?;
    let kb = common::load(&ctx_b)?;
    let mut a = array(&sa, 12)?;
    let mut b = array(&sb, 12)?;
    let (mut oa, mut ob) = (buffers(&sa, 12, LEN)?, buffers(&sa, 12, LEN)?);
    let (mut ca, mut cb, mut eager) = (GraphCache::new(), GraphCache::new(), GraphCache::eager());
    let mut x = 0x2545_f491u32;
    for call in 0..48u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        // A short-lived stream of the second object, sometimes the call's.
        let fresh = ctx_b.new_stream()?;
        let (on_a, on_b): (&Arc<CudaStream>, &Arc<CudaStream>) = match x % 6 {
            0 | 1 => (&sa, &sb),
            2 => (&sb, &sa),
            3 => (&fresh, &sb),
            4 => (&sa, &fresh),
            _ => (&sa, &sa),
        };
        let ka = if Arc::ptr_eq(on_a.context(), &ctx_a) { &k } else { &kb };
        let kbb = if Arc::ptr_eq(on_b.context(), &ctx_a) { &k } else { &kb };
        step(&mut ca, ka, on_a, &mut a, call % 5)?;
        step_vec(&mut eager, &k, &sa, &mut oa, call % 5)?;
        step(&mut cb, kbb, on_b, &mut b, call % 3)?;
        step_vec(&mut eager, &k, &sa, &mut ob, call % 3)?;
        drop(fresh);
        ctx_a.synchronize()?;
        same_all(&read_all(&sa, &a)?, &read_all(&sa, &oa)?, &format!("call {call}: a"));
        same_all(&read_all(&sb, &b)?, &read_all(&sa, &ob)?, &format!("call {call}: b"));
    }
    Ok(())
}

/// Event tracking toggled while an array is remembered (its elements keep no events: the memo
/// still applies), then an element with cudarc events swapped in (`mem::swap` through
/// `DerefMut`: forgotten), read slowly by cudarc on another stream (its read event recorded
/// there), and at once written by a `graph!` call on the array's stream: that call must wait
/// for the read (cudarc's `device_ptr_mut`, which a memo hit would skip). A hole shows as the
/// slow read seeing the graph's write (`out` differs from the host model). Then the untracked
/// element swapped back. Sound: all equal.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review27_event_tracking_toggled_and_a_tracked_element_swapped_in_is_waited_for() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let t = ctx.new_stream()?;
    // SAFETY: the buffers allocated while tracking is off (the array's) are used on `s` only.
    unsafe { ctx.disable_event_tracking() };
    let mut arr = array(&s, 12)?;
    let mut oracle = buffers(&s, 12, LEN)?;
    // SAFETY: turning it back on; the array's buffers stay untracked and used on `s` only.
    unsafe { ctx.enable_event_tracking() };
    let mut tracked = s.alloc_zeros::<u32>(LEN)?;
    let mut out = t.alloc_zeros::<u32>(LEN)?;
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    for call in 0..4u32 {
        step(&mut cache, &k, &s, &mut arr, call)?;
        step_vec(&mut eager, &k, &s, &mut oracle, call)?;
    }
    assert!(remembers(&arr), "untracked elements remembered with tracking on again");
    for round in 0..6u32 {
        // Element 5 swapped with the tracked buffer (same contents on both sides).
        s.synchronize()?;
        s.memcpy_dtod(&arr[5], &mut tracked)?;
        std::mem::swap(&mut arr[5], &mut tracked);
        assert!(!remembers(&arr), "round {round}: a swap forgets");
        // cudarc's slow read of element 5 on `t` (its read event recorded on `t`), then at once
        // the graph on `s`, which writes element 5.
        launch!(t, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &round, &arr[5], &mut out)?;
        step(&mut cache, &k, &s, &mut arr, round + 10)?;
        let x5 = s.clone_dtoh(&oracle[5])?;
        let want: Vec<u32> = x5.iter().map(|v| v.wrapping_mul(3).wrapping_add(round)).collect();
        step_vec(&mut eager, &k, &s, &mut oracle, round + 10)?;
        let got = t.clone_dtoh(&out)?;
        common::assert_same(&got, &want, &format!("round {round}: cudarc's slow read"));
        step(&mut cache, &k, &s, &mut arr, round + 20)?;
        step_vec(&mut eager, &k, &s, &mut oracle, round + 20)?;
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("round {round}"));
        // The untracked element back (same contents), remembered again after two calls.
        s.synchronize()?;
        s.memcpy_dtod(&arr[5], &mut tracked)?;
        std::mem::swap(&mut arr[5], &mut tracked);
        for _ in 0..2 {
            step(&mut cache, &k, &s, &mut arr, round + 30)?;
            step_vec(&mut eager, &k, &s, &mut oracle, round + 30)?;
        }
        assert!(remembers(&arr), "round {round}: untracked again, remembered");
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("round {round}: back"));
    }
    Ok(())
}

/// A `graph!` body panicking part way (a scalar argument, after the array was acquired and its
/// memo remembered, or after a memo hit), caught, then more calls, an element replaced
/// (canary), more calls. The panic leaves the memo as it was (true of unchanged elements) and
/// the variant without words; nothing stale may be launched. Sound: all equal, canary 0.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review27_a_panic_part_way_through_a_call_keeps_later_calls_exact() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut arr = array(&s, 12)?;
    let mut oracle = buffers(&s, 12, LEN)?;
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    let mut seen = AddressesSeen::default();
    for round in 0..8u32 {
        for _ in 0..(1 + round % 3) {
            step_boom(&mut cache, &k, &s, &mut arr, round)?;
            step_boom_vec(&mut eager, &k, &s, &mut oracle, round)?;
        }
        let r = catch_unwind(AssertUnwindSafe(|| step_boom(&mut cache, &k, &s, &mut arr, 999)));
        assert!(r.is_err(), "round {round}: the body panicked");
        // (Nothing of the panicking call was enqueued: the oracle does nothing.)
        s.synchronize()?;
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("round {round}: panic"));
        for _ in 0..2 {
            step_boom(&mut cache, &k, &s, &mut arr, round + 1)?;
            step_boom_vec(&mut eager, &k, &s, &mut oracle, round + 1)?;
        }
        if round % 2 == 1 {
            s.synchronize()?;
            let old = address(&s, &arr[0]);
            drop(std::mem::replace(&mut arr[0], s.clone_htod(&vec![round; LEN])?));
            oracle[0] = s.clone_htod(&vec![round; LEN])?;
            let c = canary(&s, old, &mut seen)?;
            let r = catch_unwind(AssertUnwindSafe(|| step_boom(&mut cache, &k, &s, &mut arr, 999)));
            assert!(r.is_err(), "round {round}: the body panicked");
            step_boom(&mut cache, &k, &s, &mut arr, round + 2)?;
            step_boom_vec(&mut eager, &k, &s, &mut oracle, round + 2)?;
            assert_zero(&s, &c, &format!("round {round}"))?;
        }
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("round {round}"));
    }
    seen.assert_some_came_back("replaced after panics: ");
    Ok(())
}

/// Everything safe code can do with a remembered array through `Deref` (shared access):
/// `len`, `iter`, cudarc reads of elements on the array's stream (`memcpy_dtod` from one,
/// `clone` of one, which allocates a copy), a `graph!` that only reads elements (plain shared
/// borrows): each keeps the memo (the doc's claim), and the next calls are still exact. Then
/// the copy put in through `as_mut_slice` (forgets). A shared access that changed an element
/// without forgetting would show as results differing from eager. Sound: all equal.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review27_shared_access_keeps_the_memo_and_calls_stay_exact() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut arr = array(&s, 12)?;
    let mut oracle = buffers(&s, 12, LEN)?;
    let mut outs = buffers(&s, 12, LEN)?;
    let mut oouts = buffers(&s, 12, LEN)?;
    let (mut cache, mut cr, mut eager) =
        (GraphCache::new(), GraphCache::new(), GraphCache::eager());
    let mut scratch = s.alloc_zeros::<u32>(LEN)?;
    for round in 0..8u32 {
        for _ in 0..2 {
            step(&mut cache, &k, &s, &mut arr, round)?;
            step_vec(&mut eager, &k, &s, &mut oracle, round)?;
        }
        assert!(remembers(&arr), "round {round}");
        assert_eq!(arr.len(), 12);
        assert_eq!(arr.iter().count(), 12);
        s.memcpy_dtod(&arr[3], &mut scratch)?;
        let copy = arr[7].clone();
        common::assert_same(&s.clone_dtoh(&scratch)?, &s.clone_dtoh(&oracle[3])?, "dtod");
        common::assert_same(&s.clone_dtoh(&copy)?, &s.clone_dtoh(&oracle[7])?, "clone");
        read(&mut cr, &k, &s, &arr, &mut outs, round)?;
        read_vec(&mut eager, &k, &s, &oracle, &mut oouts, round)?;
        assert!(remembers(&arr), "round {round}: shared access keeps the memo");
        step(&mut cache, &k, &s, &mut arr, round + 1)?;
        step_vec(&mut eager, &k, &s, &mut oracle, round + 1)?;
        if round % 3 == 2 {
            // The clone (element 7's value before the last step) put in through `as_mut_slice`.
            let ocopy = s.clone_htod(&s.clone_dtoh(&copy)?)?;
            drop(std::mem::replace(&mut arr.as_mut_slice()[7], copy));
            oracle[7] = ocopy;
            assert!(!remembers(&arr), "round {round}: as_mut_slice forgets");
            step(&mut cache, &k, &s, &mut arr, round + 2)?;
            step_vec(&mut eager, &k, &s, &mut oracle, round + 2)?;
        }
        same_all(&read_all(&s, &outs)?, &read_all(&s, &oouts)?, &format!("round {round}: outs"));
        same_all(&read_all(&s, &arr)?, &read_all(&s, &oracle)?, &format!("round {round}"));
    }
    Ok(())
}
