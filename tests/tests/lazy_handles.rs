//! Issue 31 (session 21): an array acquired in one loop (`__private::acquire_mut_each`) whose
//! elements all have no events (cudarc's event tracking off when they were allocated), live on
//! the call's stream and have the addresses and lengths of the last call's words keeps no
//! handle and no guard: the elements stay borrowed in its store (`__private::EachStore`), and a
//! handle or a guard is made from an element only when the call asks for it: a statement's node
//! (the first iteration of a run on every call, the later iterations on a changed call), the
//! aliasing check of a changed call, the stream ledger of a call with a buffer of another
//! stream. At the first element that is not such, the handles of the elements before it are
//! made and the rest acquired as before. Each test makes the call ask for what the store did
//! not keep, and compares the graph with the same launches made one by one (eager mode or the
//! host model; integers: exact). Expected on a GPU: all pass.
//!
//! The first test's host-side part (which calls count as unchanged) also runs on the CPU stub
//! driver: `REVIEW17_STUB=1 LD_LIBRARY_PATH=<dir of the libraries .ci/stub-driver builds> cargo
//! test -p cudagraph-tests --test lazy_handles -- --ignored --exact
//! lazily_kept_elements_make_the_same_nodes_as_acquired_ones` (values are not compared
//! there).

mod common;

use std::sync::Arc;

use common::review17::{assert_same, same_all};
use common::{Ops, Result, host, launch, read_all};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::{Error, GraphCache, graph};

const N: u32 = 1 << 14;
const LEN: usize = N as usize;
/// Steps of `slow_iota`: milliseconds on an H200, so that a graph that does not wait for it
/// overtakes it.
const SPINS: u32 = 1 << 17;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// `x = 3x + 1`; each `bufs[i] = 5x + 7` (the run: its later iterations are made only when
/// the node list is needed); `y = mix(bufs[2])` (a read of an element); `y = t y + 1`.
fn body(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    mut x: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    mut y: &mut CudaSlice<u32>,
    t: u32,
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        k.affine_inplace(N, 3, 1, &mut x).launch(c);
        for i in 0..6 {
            k.affine(N, 5, 7, &x, &mut bufs[i]).launch(c);
        }
        k.mix(N, &bufs[2], &mut y).launch(c);
        k.affine_inplace(N, t, 1, &mut y).launch(c);
    })
}

/// Buffers of distinct contents on `s`: `n` of them, the `j`th holding `i + 1000 j + base`.
fn distinct(s: &Arc<CudaStream>, n: u32, base: u32) -> Result<Vec<CudaSlice<u32>>> {
    (0..n).map(|j| Ok(s.clone_htod(&host::iota(N, 1, 1000 * j + base))?)).collect()
}

/// What is done to the buffers before a call.
#[derive(Clone, Copy, Debug)]
enum Change {
    None,
    /// The last statement's scalar (a changed call whose array is kept lazily: its nodes and
    /// guards are made from the elements).
    T(u32),
    /// Two elements swapped: the words differ at the first (the store keeps handles).
    Swap(usize, usize),
    /// Element `i` replaced by a buffer of the same contents on another stream.
    Other(usize),
    /// Element `i` replaced by a buffer of the same contents on the call's stream.
    Back(usize),
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn lazily_kept_elements_make_the_same_nodes_as_acquired_ones() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = common::gpu_untracked()?;
    let s2 = ctx.new_stream()?;
    let mut g =
        (distinct(&s, 1, 7)?.remove(0), distinct(&s, 6, 50)?, distinct(&s, 1, 9)?.remove(0));
    let mut e =
        (distinct(&s, 1, 7)?.remove(0), distinct(&s, 6, 50)?, distinct(&s, 1, 9)?.remove(0));
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    let steps = [
        (Change::None, false),
        (Change::None, true),
        (Change::T(9), false),
        (Change::None, true),
        (Change::T(3), false),
        (Change::Swap(1, 4), false),
        (Change::None, true),
        (Change::T(5), false),
        (Change::Other(3), false),
        // Element 3 lives on another stream: never kept lazily (the first loop stops there),
        // the call still unchanged.
        (Change::None, true),
        (Change::T(11), false),
        (Change::Back(3), false),
        (Change::None, true),
        (Change::Swap(0, 5), false),
        (Change::None, true),
    ];
    let mut t = 2;
    for (step, &(change, unchanged)) in steps.iter().enumerate() {
        for bufs in [&mut g.1, &mut e.1] {
            match change {
                Change::None | Change::T(_) => {}
                Change::Swap(a, b) => bufs.swap(a, b),
                Change::Other(i) => {
                    let v = s.clone_dtoh(&bufs[i])?;
                    bufs[i] = s2.clone_htod(&v)?;
                    s2.synchronize()?;
                }
                Change::Back(i) => {
                    let v = s2.clone_dtoh(&bufs[i])?;
                    bufs[i] = s.clone_htod(&v)?;
                }
            }
        }
        if let Change::T(v) = change {
            t = v;
        }
        let before = cache.stats().unchanged_calls;
        body(&mut cache, &k, &s, &mut g.0, &mut g.1, &mut g.2, t)?;
        body(&mut eager, &k, &s, &mut e.0, &mut e.1, &mut e.2, t)?;
        s.synchronize()?;
        let counted = cache.stats().unchanged_calls - before == 1;
        assert_eq!(counted, unchanged, "step {step} ({change:?}): {:?}", cache.stats());
        let what = format!("step {step} ({change:?})");
        same_all(&read_all(&s, &g.1)?, &read_all(&s, &e.1)?, &format!("{what}, bufs"));
        assert_same(&s.clone_dtoh(&g.0)?, &s.clone_dtoh(&e.0)?, &format!("{what}, x"));
        assert_same(&s.clone_dtoh(&g.2)?, &s.clone_dtoh(&e.2)?, &format!("{what}, y"));
    }
    Ok(())
}

/// Each `bufs[i] = 3 z + 1` (an indexed run): `z` is written before each
/// call by a slow kernel on another stream (another context object, tracking off): every call
/// after the first is unchanged, its array kept lazily, and the stream ledger (which wants
/// every place's guard, the array's made from its elements) must order the graph after the
/// slow kernel, and the next slow kernel after the graph.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lazily_kept_array_beside_a_buffer_of_another_stream_is_ordered() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = common::gpu_untracked()?;
    let other = CudaContext::new(0)?;
    // SAFETY: every cudarc use of `z` is on `own`; the graph's are ordered with `own` by the
    // cache's ledger, which is what is tested.
    unsafe { other.disable_event_tracking() };
    let own = other.new_stream()?;
    let mut z = own.alloc_zeros::<u32>(LEN)?;
    let mut bufs = distinct(&s, 6, 3)?;
    own.synchronize()?;
    s.synchronize()?;
    let mut cache = GraphCache::new();
    for call in 0..5u32 {
        launch!(own, k, "slow_iota", cfg(); &N, &SPINS, &(call + 2), &5u32, &mut z)?;
        {
            let c = cfg();
            let zr = &z;
            graph!(&mut cache, &s, {
                for i in 0..6 {
                    k.affine(N, 3, 1, &zr, &mut bufs[i]).launch(c);
                }
            })?;
        }
        s.synchronize()?;
        let want = host::affine(&host::slow_iota(N, SPINS, call + 2, 5), 3, 1);
        for (i, b) in bufs.iter().enumerate() {
            common::assert_same(&s.clone_dtoh(b)?, &want, &format!("call {call}, bufs[{i}]"));
        }
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 4, "{st:?}");
    assert!(st.stream_waits >= 8, "the ledger waited before and after each call: {st:?}");
    Ok(())
}

/// An array kept lazily, then a place after it replaced by a view overlapping one of its
/// elements: the call is changed (the place's words differ), its aliasing check gets the
/// array's guards made from the elements, and must refuse the call, naming both statements,
/// with nothing launched. With the place back, the call runs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_place_overlapping_a_lazily_kept_element_is_refused() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = common::gpu_untracked()?;
    let mut bufs = distinct(&s, 4, 1)?;
    let mut z = s.alloc_zeros::<u32>(LEN)?;
    let mut eager = (distinct(&s, 4, 1)?, s.alloc_zeros::<u32>(LEN)?);
    let mut cache = GraphCache::new();
    fn step(
        cache: &mut GraphCache,
        k: &Ops,
        s: &Arc<CudaStream>,
        bufs: &mut [CudaSlice<u32>],
        mut z: &mut CudaSlice<u32>,
    ) -> cudagraph::Result<()> {
        let c = cfg();
        graph!(cache, s, {
            for i in 0..4 {
                k.affine_inplace(N, 3, 1, &mut bufs[i]).launch(c);
            }
            k.iota(N, 2, 9, &mut z).launch(c);
        })
    }
    let mut eager_cache = GraphCache::eager();
    for call in 0..3 {
        step(&mut cache, &k, &s, &mut bufs, &mut z)?;
        step(&mut eager_cache, &k, &s, &mut eager.0, &mut eager.1)?;
        common::same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager.0)?, &format!("call {call}"));
    }
    assert!(cache.stats().unchanged_calls >= 2, "{:?}", cache.stats());
    let view = common::overlapping_view(&s, &bufs[2]);
    let mut own = std::mem::replace(&mut z, view);
    let before = read_all(&s, &bufs)?;
    let launches = cache.stats().launches;
    match step(&mut cache, &k, &s, &mut bufs, &mut z) {
        Err(Error::Aliasing { first, second }) => {
            let both = format!("{} / {}", first.text, second.text);
            assert!(both.contains("affine_inplace") && both.contains("iota"), "{both}");
        }
        r => panic!("expected Aliasing, got {r:?}"),
    }
    s.synchronize()?;
    assert_eq!(cache.stats().launches, launches, "nothing launched");
    common::same_all(&read_all(&s, &bufs)?, &before, "nothing enqueued");
    std::mem::swap(&mut z, &mut own);
    own.leak();
    step(&mut cache, &k, &s, &mut bufs, &mut z)?;
    step(&mut eager_cache, &k, &s, &mut eager.0, &mut eager.1)?;
    common::same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager.0)?, "the place back");
    common::assert_same(&s.clone_dtoh(&z)?, &s.clone_dtoh(&eager.1)?, "z");
    Ok(())
}

/// An array of buffers without events but for element 3, allocated with cudarc's event
/// tracking on (then left on: the context has two streams, so cudarc orders by events). Before
/// each call a slow kernel on the second stream writes element 3 (cudarc records its write
/// event); after it, element 3 is read on the second stream. The first loop stops at element 3
/// on every call (its guard records), makes the handles and guards of elements 0 to 2, and the
/// call must wait for the slow kernel (its element's events) and the read for the graph.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_element_with_events_after_elements_without_is_ordered_by_its_events() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = common::gpu_untracked()?;
    let s2 = ctx.new_stream()?;
    let mut bufs = distinct(&s, 6, 11)?;
    // SAFETY: from here on cudarc orders the buffers allocated with events; the others are used
    // on `s` only.
    unsafe { ctx.enable_event_tracking() };
    bufs[3] = s.alloc_zeros::<u32>(LEN)?;
    s.synchronize()?;
    let mut want = read_all(&s, &bufs)?;
    let mut cache = GraphCache::new();
    for call in 0..5u32 {
        launch!(s2, k, "slow_iota", cfg(); &N, &SPINS, &(call + 1), &3u32, &mut bufs[3])?;
        {
            let c = cfg();
            graph!(&mut cache, &s, {
                for i in 0..6 {
                    k.affine_inplace(N, 3, 1, &mut bufs[i]).launch(c);
                }
            })?;
        }
        // Read on the second stream: cudarc waits for the graph's write (the event its
        // guard recorded).
        let got3 = s2.clone_dtoh(&bufs[3])?;
        want[3] = host::slow_iota(N, SPINS, call + 1, 3);
        for w in want.iter_mut() {
            host::affine_inplace(w, 3, 1);
        }
        common::assert_same(&got3, &want[3], &format!("call {call}, bufs[3] read on s2"));
        s.synchronize()?;
        common::same_all(&read_all(&s, &bufs)?, &want, &format!("call {call}"));
    }
    assert!(cache.stats().unchanged_calls >= 4, "{:?}", cache.stats());
    Ok(())
}
