//! Review 15 (commit 5e5b078: each place's guard is written straight into its `Guards` slot
//! after `vacant` checked the place, `Guards::drop` skips guards of kind `Nothing`,
//! `acquire_mut_each` fills a caller-owned `MaybeUninit` array and returns a reference into it,
//! `entries` fills a caller-owned node list): safe code only, against the new paths.
//!
//! `slow_iota` and `slow_affine` run a few milliseconds each on an H200, so a read or a free
//! that does not wait for the graph (a guard left unrecorded) shows as wrong data. Every result
//! is compared exactly with the eager oracle (`GraphCache::eager()`) or a host model. What each
//! test attacks and what is expected on a GPU (all: pass):
//! - `array_groups_on_another_stream_read_and_reallocated_at_once`: a scratch place (an inert
//!   guard, now skipped by `Guards::drop`) beside two array groups (device buffers: event
//!   guards; `PinnedBuffer`s: pinned guards), the graph on a stream other than the buffers'
//!   own; right after each call the buffers are read on their own stream and the pinned ones on
//!   the host, and every other call they are freed at once and their memory reallocated and
//!   filled with a marker (a free not ordered after the slow kernels shows as the kernels'
//!   values in the new buffers). Graph and eager, memoized calls, host model.
//! - `panic_in_a_later_group_after_an_array_group_was_acquired`: a user `DerefMut` panics on a
//!   second array group after the first group's handles were written into the caller's array
//!   and its guards into `Guards`, while a slow writer of the first group's buffers runs on
//!   their own stream: nothing is enqueued, the guards dropped by the unwinding keep the
//!   buffers ordered (read and freed at once on another stream), and the cache then matches
//!   eager.
//! - `private_acquire_mut_each_out_reused_after_a_partial_call`: `acquire_mut_each` called
//!   directly with one `out` store: a call that panics part way (an index past `N`, after two
//!   elements were written and their guards put), then a full call into the same store with
//!   indices out of order, then `M = 0`. (Since session 20 the index past `N` panics before
//!   any element, and the full call takes a store of its own: a store is borrowed for its
//!   guards' lifetime, so reusing it does not compile.) each element read back has its own buffer's length
//!   (buffers of distinct lengths: a stale or unwritten slot would show), `all()` is complete,
//!   a scratch guard (inert) beside event guards, and the buffers, written beforehand by a slow
//!   kernel on another stream, read right after on a third one.
//! - `private_entries_into_a_reused_list_with_user_segments`: `entries` into one caller-owned
//!   list, with user `Segment`s that panic part way through `fill`, leave their slots unwritten
//!   or claim too many or too few statements: panics name the count, nothing else happens (no
//!   `unsafe` in `entries`), and a list filled again afterwards holds exactly the new entries.
//!   (Needs no GPU: `cargo test --test review_session15 -- --ignored private_entries`.)

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, buffers, gpu, host, read_all, same_all};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{GraphCache, PinnedBuffer, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of the slow kernels: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// What [`fan`] leaves in `bufs[i]`: `slow_affine` reads element `i` (its index never moves).
fn fan_model(b: u32, i: u32) -> Vec<u32> {
    host::affine(&host::slow_iota(N, SPINS, 3, b), i + 2, b)
}

/// A graph-owned `t = slow_iota(3, b)`; `bufs[i] = slow_affine(t, i + 2, b)` for four elements
/// (one array group, event guards); `pins[i] = bufs[i]` for two (a second group, pinned
/// guards).
fn fan(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    pins: &mut [PinnedBuffer<u32>],
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        let t = alloc::<u32>(LEN);
        k.slow_iota(N, SPINS, 3, b, &mut t).launch(cfg());
        for i in 0..4 {
            k.slow_affine(N, SPINS, i + 2, b, &t, &mut bufs[i]).launch(cfg());
        }
        for i in 0..2 {
            copy(&bufs[i], &mut pins[i]);
        }
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn array_groups_on_another_stream_read_and_reallocated_at_once() -> Result {
    let _serial = common::serial();
    let (ctx, own, k) = gpu()?;
    let other = ctx.new_stream()?;
    let marker: Vec<u32> = (0..N).map(|i| !i ^ 0x5a5a_5a5a).collect();
    let (mut cache, mut eager_cache) = (GraphCache::new(), GraphCache::eager());
    for (which, c) in [&mut cache, &mut eager_cache].into_iter().enumerate() {
        for call in 0..6u32 {
            let what = format!("{} call {call}", ["graph", "eager"][which]);
            let mut bufs = buffers(&own, 4, LEN)?;
            let mut pins: Vec<PinnedBuffer<u32>> = (0..2)
                .map(|_| PinnedBuffer::<u32>::zeros(&own, LEN))
                .collect::<cudagraph::Result<_>>()?;
            fan(c, &k, &other, &mut bufs, &mut pins, call)?;
            if call % 2 == 0 {
                // Read at once: the buffers on their own stream, the pinned ones on the host.
                let want: Vec<Vec<u32>> = (0..4).map(|i| fan_model(call, i)).collect();
                same_all(&read_all(&own, &bufs)?, &want, &what);
                for (i, p) in pins.iter().enumerate() {
                    assert_same(p.as_slice()?, &want[i], &format!("{what}: pins[{i}]"));
                }
            } else {
                // Freed at once, the memory reallocated on the buffers' own stream.
                drop(bufs);
                drop(pins);
                let fresh: Vec<CudaSlice<u32>> = (0..4)
                    .map(|_| own.clone_htod(&marker))
                    .collect::<std::result::Result<_, _>>()?;
                let pinned = PinnedBuffer::from_slice(&own, &marker)?;
                // Let the slow kernels finish: a write into freed memory lands by then.
                ctx.synchronize()?;
                let want = vec![marker.clone(); 4];
                same_all(&read_all(&own, &fresh)?, &want, &format!("{what}: reallocated"));
                assert_same(pinned.as_slice()?, &marker, &format!("{what}: pinned reallocated"));
            }
        }
    }
    Ok(())
}

/// `DerefMut` panics while armed.
struct Trap {
    v: Vec<CudaSlice<u32>>,
    armed: bool,
}

impl std::ops::Deref for Trap {
    type Target = [CudaSlice<u32>];
    fn deref(&self) -> &[CudaSlice<u32>] {
        &self.v
    }
}

impl std::ops::DerefMut for Trap {
    fn deref_mut(&mut self) -> &mut [CudaSlice<u32>] {
        assert!(!self.armed, "Trap: armed");
        &mut self.v
    }
}

/// `bufs[i] = slow_affine(x, 5, b + i)` for two elements, then `trap[i] = affine(bufs[i])`.
fn trapped(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    trap: &mut Trap,
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..2 {
            k.slow_affine(N, SPINS, 5, b + i, &x, &mut bufs[i]).launch(cfg());
        }
        for i in 0..2 {
            k.affine(N, 3, i, &bufs[i], &mut trap[i]).launch(cfg());
        }
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn panic_in_a_later_group_after_an_array_group_was_acquired() -> Result {
    let _serial = common::serial();
    let (ctx, own, k) = gpu()?;
    let other = ctx.new_stream()?;
    let x = own.clone_htod(&host::iota(N, 1, 0))?;
    let mut cache = GraphCache::new();
    let mut trap = Trap { v: buffers(&own, 2, LEN)?, armed: true };
    for round in 0..3u32 {
        let mut bufs = buffers(&own, 2, LEN)?;
        // A slow writer of both elements on their own stream.
        slow_pair(&k, &own, &x, &mut bufs, 40 + round)?;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            trapped(&mut cache, &k, &other, &x, &mut bufs, &mut trap, round)
        }));
        assert!(panic_text(&*r.expect_err("armed")).contains("Trap: armed"));
        // Read at once on the call's stream: the slow writer's values, nothing of the call.
        let want: Vec<Vec<u32>> =
            (0..2).map(|i| host::affine(&host::iota(N, 1, 0), 5, 40 + round + i)).collect();
        same_all(&read_all(&other, &bufs)?, &want, &format!("round {round}"));
        same_all(&read_all(&own, &trap.v)?, &vec![vec![0; LEN]; 2], "trap untouched");
        // Freed at once on the other stream's side, and reallocated.
        drop(bufs);
        let fresh = buffers(&other, 2, LEN)?;
        other.synchronize()?;
        own.synchronize()?;
        same_all(&read_all(&other, &fresh)?, &vec![vec![0; LEN]; 2], "reallocated");
    }
    assert_eq!(cache.stats().builds, 0, "{:?}", cache.stats());
    trap.armed = false;
    let mut etrap = Trap { v: buffers(&own, 2, LEN)?, armed: false };
    for b in [7u32, 8] {
        let mut bufs = buffers(&own, 2, LEN)?;
        let mut ebufs = buffers(&own, 2, LEN)?;
        trapped(&mut cache, &k, &other, &x, &mut bufs, &mut trap, b)?;
        trapped(&mut GraphCache::eager(), &k, &other, &x, &mut ebufs, &mut etrap, b)?;
        same_all(&read_all(&own, &bufs)?, &read_all(&own, &ebufs)?, &format!("b {b}: bufs"));
        same_all(&read_all(&own, &trap.v)?, &read_all(&own, &etrap.v)?, &format!("b {b}: trap"));
        let y = host::affine(&host::iota(N, 1, 0), 5, b + 1);
        assert_same(&own.clone_dtoh(&trap.v[1])?, &host::affine(&y, 3, 1), "model");
    }
    Ok(())
}

/// `bufs[i] = slow_affine(x, 5, b + i)` for two elements, on `s`.
fn slow_pair(
    k: &Ops,
    s: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    b: u32,
) -> cudagraph::Result<()> {
    graph!(&mut GraphCache::new(), s, {
        for i in 0..2 {
            k.slow_affine(N, SPINS, 5, b + i, &x, &mut bufs[i]).launch(cfg());
        }
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn private_acquire_mut_each_out_reused_after_a_partial_call() -> Result {
    use cudagraph::__private::{Guards, acquire_mut_each, begin_call, scratch};
    let _serial = common::serial();
    let (ctx, own, k) = gpu()?;
    let (s2, s3) = (ctx.new_stream()?, ctx.new_stream()?);
    // Distinct lengths: a handle read from a stale or unwritten slot has another length.
    let lens: Vec<usize> = (0..6).map(|i| LEN + 16 * i).collect();
    let mut bufs: Vec<CudaSlice<u32>> =
        lens.iter().map(|&n| own.alloc_zeros::<u32>(n)).collect::<std::result::Result<_, _>>()?;
    // Slow writers of the first `LEN` elements of each buffer on their own stream.
    for (i, b) in bufs.iter_mut().enumerate() {
        graph!(&mut GraphCache::new(), &own, {
            k.slow_iota(N, SPINS, 3, i as u32, &mut *b).launch(cfg());
        })?;
    }
    {
        // (Elements borrowed through `EachMut`, as `graph!` does since session 18.)
        let (abc, def) = bufs.split_at_mut(3);
        fn each<const M: usize>(
            s: &mut [CudaSlice<u32>],
            idx: [usize; M],
        ) -> cudagraph::__private::EachMut<'_, CudaSlice<u32>, M> {
            use cudagraph::__private::{DisjointMut as _, DistinctIndices};
            // (Indices made at run time: leaked for the `'static` borrow `graph!`'s consts
            // get.)
            s.__cudagraph_each_mut(Box::leak(Box::new(DistinctIndices::new(idx))))
        }
        // Place numbers made at run time (checked then, not at compile time as `graph!`'s).
        fn places<const M: usize, const N: usize>(
            idx: [u32; M],
        ) -> &'static cudagraph::__private::PlaceIndices<M, N> {
            Box::leak(Box::new(cudagraph::__private::PlaceIndices::new(idx)))
        }
        let (abc, def) = (each(abc, [0, 1, 2]), each(def, [0, 1, 2]));
        let call = begin_call();
        let mut store = cudagraph::__private::EachStore::new();
        // 1. Panics: index 7 of a `Guards<3>` (since session 20 when its `PlaceIndices` is
        //    made, before any element is acquired; before, at the third element, after two
        //    were written into `store` and their guards put). `g1` shares the handles'
        //    lifetime, so it is declared beside `store`.
        let mut g1 = Guards::<3>::new();
        let (out, guards, stream, id) = (&mut store, &mut g1, &*s2, &call);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            // Moved in (the closure is then `FnOnce`), not reborrowed through its environment.
            let (out, guards) = (out, guards);
            let _ = acquire_mut_each(out, abc, stream, id, places([0, 1, 7]), guards);
        }));
        assert!(r.is_err(), "index 7 of a Guards<3>");
        drop(g1);
        // 2. Every element written, indices out of order, beside a scratch place (an inert
        //    guard). (Since session 20 a store is borrowed for its guards' lifetime, `'a`, the
        //    guards making an element's guard from its handle when needed: the first store
        //    cannot be given to a second call, so this one is another.)
        let mut store2 = cudagraph::__private::EachStore::new();
        let mut g = Guards::<4>::new();
        let _t = scratch::<u32, 4>(&s2, &call, 1, 16, &mut g);
        let hs = acquire_mut_each(&mut store2, def, &s2, &call, places([3, 0, 2]), &mut g);
        let got: Vec<usize> = (0..hs.len()).map(|k| hs.at(k).len()).collect();
        assert_eq!(got, lens[3..], "handles of the second call");
        assert_eq!((0..3).map(|k| hs.at(k).read().len()).collect::<Vec<_>>(), lens[3..]);
        assert_eq!(g.all().len(), 4);
        // 3. No element.
        let mut none = cudagraph::__private::EachStore::new();
        let mut g0 = Guards::<1>::new();
        let _t0 = scratch::<u32, 1>(&s2, &call, 0, 16, &mut g0);
        let no_element = each(&mut [], []);
        let empty = acquire_mut_each::<CudaSlice<u32>, 0, 1>(
            &mut none,
            no_element,
            &s2,
            &call,
            places([]),
            &mut g0,
        );
        assert!(empty.is_empty());
        assert_eq!(g0.all().len(), 1);
    }
    // Read at once on a third stream: the slow writers' values, the zeroed tails.
    for (i, b) in bufs.iter().enumerate() {
        let mut want = host::slow_iota(N, SPINS, 3, i as u32);
        want.resize(lens[i], 0);
        assert_same(&s3.clone_dtoh(b)?, &want, &format!("bufs[{i}]"));
    }
    // Freed at once, reallocated, written and read on the acquiring stream.
    drop(bufs);
    let fresh = buffers(&s2, 6, LEN)?;
    ctx.synchronize()?;
    same_all(&read_all(&s2, &fresh)?, &vec![vec![0; LEN]; 6], "reallocated");
    Ok(())
}

/// A user segment: `n` statements claimed, `writes` of them written (empty nodes), and a panic
/// after them when `panics`.
struct UserSegment {
    n: usize,
    writes: usize,
    panics: bool,
}

impl<'a> cudagraph::__private::Segment<'a> for UserSegment {
    fn statements(&self) -> usize {
        self.n
    }
    fn fill(&self, out: &mut [Option<cudagraph::__private::NodeParams<'a>>]) {
        for slot in out.iter_mut().take(self.writes) {
            *slot = Some(cudagraph::__private::NodeParams::Empty(cudagraph::__private::empty()));
        }
        assert!(!self.panics, "UserSegment: panics");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn private_entries_into_a_reused_list_with_user_segments() {
    use cudagraph::__private::{NodeParams, Segment, entries, entry};
    let present = |l: &[Option<NodeParams<'_>>]| l.iter().map(Option::is_some).collect::<Vec<_>>();
    let seg = |n, writes, panics| UserSegment { n, writes, panics };
    let e = cudagraph::__private::empty();
    let one = entry(&e);
    let mut list = [const { None }; 4];
    // 1. A segment that panics part way: the earlier segment's entry and its own first write
    //    are in the list, nothing else.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let s = seg(3, 1, true);
        let segs: [&dyn Segment<'_>; 2] = [&one, &s];
        entries(&mut list, &segs);
    }));
    assert!(panic_text(&*r.expect_err("panics")).contains("UserSegment"));
    assert_eq!(present(&list), [true, true, false, false]);
    // 2. Too many and too few statements: the count check panics.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let s = seg(4, 4, false);
        entries(&mut list, &[&one, &s]);
    }));
    assert!(panic_text(&*r.expect_err("five")).contains("more than 4 statements"));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let s = seg(2, 2, false);
        entries(&mut list, &[&one, &s]);
    }));
    assert!(panic_text(&*r.expect_err("three")).contains("fewer than 4 statements"));
    // 3. The reused list keeps what a segment does not write (the caller's list is the
    //    caller's: `graph!` makes a fresh one per call), and holds what it writes.
    let s = seg(3, 0, false);
    entries(&mut list, &[&s, &one]);
    assert_eq!(present(&list), [true, true, true, true]);
    let mut fresh = [const { None }; 4];
    entries(&mut fresh, &[&s, &one]);
    assert_eq!(present(&fresh), [false, false, false, true]);
}
