//! Review session 23b (brief 1, safe code only) of commit cf66716: `Guards` keeps the range of
//! slots holding guards that record something (`live: (usize, usize)`) and its drop walks only
//! that range. A guard that records and lies outside the range is never dropped (slots are
//! `MaybeUninit`): its event is not recorded, so a `PinnedBuffer`'s `as_slice`/`as_mut_slice`/
//! drop, or a cudarc read on another stream, does not wait for the graph. Each test makes the
//! call's only recording guards sit where the range must reach them, puts a slow kernel before
//! the graph's use of the buffer, and reads, writes or frees the buffer right after the call:
//! a guard left undropped shows as stale data (the previous call's values: every call's values
//! differ, with the same scalars, so unchanged calls are covered too) or a clobbered sentinel,
//! checked against a host model.
//!
//! - `a_pinned_array_holds_the_only_recording_guards`: an array of `PinnedBuffer`s written by
//!   `copy` in one loop (`acquire_mut_each`, the `flags & 1` widening to every slot) after an
//!   array of device buffers without events kept lazily (`REMADE`); every other place inert.
//! - `a_lone_pinned_destination_in_the_last_slot`: the one recording place is the call's last
//!   place (range `(N - 1, N)`), after a lazily kept array.
//! - `a_lone_pinned_source_in_the_first_slot`: the one recording place is place 0 (a copy's
//!   pinned source), before a lazily kept array; the host writes or frees it right after.
//! - `an_event_buffer_between_two_lazily_kept_arrays`: a device buffer with cudarc events
//!   (the `Event` guard) between two arrays kept lazily, read on a second stream right after.
//! - `an_array_stopped_at_its_last_element_with_events`: the first loop of `acquire_mut_each`
//!   stops at the last element (the only one with events: the `stopped` element), inert places
//!   after it; that element read on a second stream right after.
//!
//! Run: `cargo test -p cudagraph-tests --test review_session23b -- --ignored --test-threads=1`.

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, host, launch};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::{GraphCache, PinnedBuffer, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of the slow kernels: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// `n` buffers on `s`, the `j`th holding `iota(1, 1000 j + base)`.
fn distinct(s: &Arc<CudaStream>, n: u32, base: u32) -> Result<Vec<CudaSlice<u32>>> {
    (0..n).map(|j| Ok(s.clone_htod(&host::iota(N, 1, 1000 * j + base))?)).collect()
}

fn pinned_zeros(s: &Arc<CudaStream>, n: usize) -> Result<Vec<PinnedBuffer<u32>>> {
    (0..n).map(|_| PinnedBuffer::zeros(s, LEN)).collect()
}

/// Values no kernel of these tests makes.
fn sentinel(j: u32) -> Vec<u32> {
    host::iota(N, 13, 17 + 977 * j)
}

/// The models of `w` (updated in place every call) and of `y = slow_affine(w, 1, b)`.
struct Model {
    w: Vec<u32>,
}

impl Model {
    fn call(&mut self, b: u32) -> Vec<u32> {
        host::affine_inplace(&mut self.w, 3, 1);
        host::affine(&self.w, 1, b)
    }
}

// ---------------------------------------------------------------------------------------------
// PinnedBuffer guards (`GuardKind::Pinned`).
// ---------------------------------------------------------------------------------------------

/// `w = 3w + 1 + i`; `y = slow_affine(w, 1, b)`; each `bufs[i] = 5y + 1` (an array of buffers
/// without events, on `s`: kept lazily on an unchanged call); each `pins[i] = bufs[i]` (an
/// array of `PinnedBuffer`s, acquired in one loop: the call's only recording guards).
#[allow(clippy::too_many_arguments)]
fn fan_out(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    w: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    pins: &mut [PinnedBuffer<u32>],
    b: u32,
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        k.affine_inplace(N, 3, 1, &mut *w).launch(c);
        k.slow_affine(N, SPINS, 1, b, &*w, &mut *y).launch(c);
        for i in 0..4 {
            k.affine(N, 5, 1, &*y, &mut bufs[i]).launch(c);
        }
        for i in 0..3 {
            copy(&bufs[i], &mut pins[i]);
        }
    })
}

/// Every device place inert; the three `PinnedBuffer`s of one array hold the only guards that
/// record (`acquire_mut_each` must widen the range to them). Right after each call either every
/// pinned buffer is read (it must wait for the slow kernel and the copies), or they are all
/// dropped and page-locked memory allocated again (usually at their addresses) with a sentinel
/// that a pending copy would overwrite. Scalars change every third call: unchanged and changed
/// calls both.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pinned_array_holds_the_only_recording_guards() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = common::gpu_untracked()?;
    let mut w = s.clone_htod(&host::iota(N, 1, 5))?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut bufs = distinct(&s, 4, 3)?;
    let mut pins = pinned_zeros(&s, 3)?;
    let mut model = Model { w: host::iota(N, 1, 5) };
    let mut cache = GraphCache::new();
    for step in 0..12u32 {
        let b = step / 3;
        fan_out(&mut cache, &k, &s, &mut w, &mut y, &mut bufs, &mut pins, b)?;
        let want = host::affine(&model.call(b), 5, 1);
        if step % 4 == 3 {
            // At once: the slow kernel still runs, the copies into `pins` are pending.
            drop(std::mem::take(&mut pins));
            let next: Vec<PinnedBuffer<u32>> = (0..3)
                .map(|j| PinnedBuffer::from_slice(&s, &sentinel(j)))
                .collect::<cudagraph::Result<_>>()?;
            s.synchronize()?;
            for (j, p) in next.iter().enumerate() {
                let what = format!("step {step}: memory allocated after pins[{j}] was dropped");
                assert_same(p.as_slice()?, &sentinel(j as u32), &what);
            }
            drop(next);
            pins = pinned_zeros(&s, 3)?;
        } else {
            for (j, p) in pins.iter().enumerate() {
                assert_same(p.as_slice()?, &want, &format!("step {step}: pins[{j}] read at once"));
            }
        }
    }
    s.synchronize()?;
    assert_same(
        &s.clone_dtoh(&bufs[3])?,
        &host::affine(&host::affine(&model.w, 1, 3), 5, 1),
        "bufs[3]",
    );
    let st = cache.stats();
    assert!(st.unchanged_calls >= 3, "{st:?}");
    Ok(())
}

/// As [`fan_out`], one `PinnedBuffer` written by the last statement: the call's last place.
#[allow(clippy::too_many_arguments)]
fn last_slot(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    w: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    out: &mut PinnedBuffer<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        k.affine_inplace(N, 3, 1, &mut *w).launch(c);
        k.slow_affine(N, SPINS, 1, b, &*w, &mut *y).launch(c);
        for i in 0..4 {
            k.affine(N, 5, 1, &*y, &mut bufs[i]).launch(c);
        }
        copy(&bufs[3], &mut *out);
    })
}

/// Places `w`, `y`, `bufs[0..4]` (inert, the array kept lazily on unchanged calls), then `out`,
/// the only recording guard, in the last slot: the range is `(6, 7)`, its end the guards'
/// length. `out` read at once, or dropped at once and memory allocated again with a sentinel.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lone_pinned_destination_in_the_last_slot() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = common::gpu_untracked()?;
    let mut w = s.clone_htod(&host::iota(N, 1, 9))?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut bufs = distinct(&s, 4, 21)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut model = Model { w: host::iota(N, 1, 9) };
    let mut cache = GraphCache::new();
    for step in 0..12u32 {
        let b = step / 3 + 40;
        last_slot(&mut cache, &k, &s, &mut w, &mut y, &mut bufs, &mut out, b)?;
        let want = host::affine(&model.call(b), 5, 1);
        if step % 4 == 3 {
            drop(out);
            let next = PinnedBuffer::from_slice(&s, &sentinel(step))?;
            s.synchronize()?;
            assert_same(next.as_slice()?, &sentinel(step), &format!("step {step}: after the drop"));
            drop(next);
            out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        } else {
            assert_same(out.as_slice()?, &want, &format!("step {step}: out read at once"));
        }
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 3, "{st:?}");
    Ok(())
}

/// `x = src` (the pinned source: place 0); each `bufs[i] = 5x + 1` (inert, kept lazily).
fn first_slot(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    src: &PinnedBuffer<u32>,
    x: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        copy(&src, &mut *x);
        for i in 0..4 {
            k.affine(N, 5, 1, &*x, &mut bufs[i]).launch(c);
        }
    })
}

/// The only recording guard is place 0's, a copy's pinned source, before an inert array. A
/// slow kernel enqueued on the stream just before the call holds the graph back; right after
/// the call the host overwrites the source (`as_mut_slice`, which must wait for the copy), or
/// frees it and allocates page-locked memory again (usually at its address) with other values.
/// The graph's results must be made from the values the source held at the call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lone_pinned_source_in_the_first_slot() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = common::gpu_untracked()?;
    let mut z = s.alloc_zeros::<u32>(LEN)?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut bufs = distinct(&s, 4, 31)?;
    let mut src = PinnedBuffer::from_slice(&s, &host::iota(N, 3, 1))?;
    let mut cache = GraphCache::new();
    for step in 0..12u32 {
        let sent = src.as_slice()?.to_vec();
        // The graph's copy waits behind this on the stream.
        launch!(s, k, "slow_iota", cfg(); &N, &SPINS, &1u32, &step, &mut z)?;
        first_slot(&mut cache, &k, &s, &src, &mut x, &mut bufs)?;
        // At once: the slow kernel still runs, the copy has not read `src` yet.
        let next = host::iota(N, 11, step + 100);
        if step % 3 == 2 {
            drop(src);
            src = PinnedBuffer::from_slice(&s, &next)?;
        } else {
            src.as_mut_slice()?.copy_from_slice(&next);
        }
        s.synchronize()?;
        let want = host::affine(&sent, 5, 1);
        for (i, b) in bufs.iter().enumerate() {
            assert_same(&s.clone_dtoh(b)?, &want, &format!("step {step}: bufs[{i}]"));
        }
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 3, "{st:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// cudarc's events (`GuardKind::Event`).
// ---------------------------------------------------------------------------------------------

/// Each `a[i] = 3 a[i] + 1 + i` (inert, kept lazily); `w = 3w + 1 + i` (inert);
/// `z = slow_affine(w, 1, 0)` (`z` has events: its guard records its write event); each
/// `c[i] = 5w + 1` (inert, kept lazily). `z` is place 5 of 10.
fn between(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    a: &mut [CudaSlice<u32>],
    w: &mut CudaSlice<u32>,
    z: &mut CudaSlice<u32>,
    c: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let lc = cfg();
    graph!(cache, s, {
        for i in 0..4 {
            k.affine_inplace(N, 3, 1, &mut a[i]).launch(lc);
        }
        k.affine_inplace(N, 3, 1, &mut *w).launch(lc);
        k.slow_affine(N, SPINS, 1, 0, &*w, &mut *z).launch(lc);
        for i in 0..4 {
            k.affine(N, 5, 1, &*w, &mut c[i]).launch(lc);
        }
    })
}

/// `z`, allocated on the call's stream with cudarc's event tracking on (two streams: cudarc
/// orders by events), is the only place whose guard records, between two arrays of buffers
/// without events kept lazily. Right after each call `z` is read on the second stream: cudarc
/// waits for its write event, which only the guard's drop records after the launch (the stream
/// ledger has nothing to order: every buffer lives on the call's stream). Same scalars every
/// call, `z`'s values new every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_event_buffer_between_two_lazily_kept_arrays() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = common::gpu_untracked()?;
    let s2 = ctx.new_stream()?;
    let mut a = distinct(&s, 4, 5)?;
    let mut c = distinct(&s, 4, 7)?;
    let mut w = s.clone_htod(&host::iota(N, 1, 2))?;
    // SAFETY: from here on cudarc orders the buffers allocated with events (`z`); the others
    // are used on `s` only.
    unsafe { ctx.enable_event_tracking() };
    let mut z = s.alloc_zeros::<u32>(LEN)?;
    s.synchronize()?;
    let mut want_a = common::read_all(&s, &a)?;
    let mut model = Model { w: host::iota(N, 1, 2) };
    let mut cache = GraphCache::new();
    for call in 0..8u32 {
        between(&mut cache, &k, &s, &mut a, &mut w, &mut z, &mut c)?;
        let want_z = model.call(0);
        let got = s2.clone_dtoh(&z)?;
        assert_same(&got, &want_z, &format!("call {call}: z read on the second stream"));
        s.synchronize()?;
        for wa in want_a.iter_mut() {
            host::affine_inplace(wa, 3, 1);
        }
        common::same_all(&common::read_all(&s, &a)?, &want_a, &format!("call {call}: a"));
        let want_c = host::affine(&model.w, 5, 1);
        for (i, ci) in c.iter().enumerate() {
            assert_same(&s.clone_dtoh(ci)?, &want_c, &format!("call {call}: c[{i}]"));
        }
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 6, "{st:?}");
    Ok(())
}

/// `w = 3w + 1 + i`; each `bufs[i] = slow_affine(w, 5, 1)`; `y = 2w + 1` (inert, after the
/// array).
fn tail(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    w: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        k.affine_inplace(N, 3, 1, &mut *w).launch(c);
        for i in 0..5 {
            k.slow_affine(N, SPINS, 5, 1, &*w, &mut bufs[i]).launch(c);
        }
        k.affine(N, 2, 1, &*w, &mut *y).launch(c);
    })
}

/// An array whose last element alone has events (allocated with tracking on): on unchanged
/// calls the first loop of `acquire_mut_each` runs through elements 0 to 3 (inert, storing
/// nothing) and stops at element 4, which the second loop then takes as its only element
/// (`stopped`); an inert place follows the array. Element 4 read on the second stream right
/// after each call must hold that call's values.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_array_stopped_at_its_last_element_with_events() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = common::gpu_untracked()?;
    let s2 = ctx.new_stream()?;
    let mut w = s.clone_htod(&host::iota(N, 1, 4))?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut bufs = distinct(&s, 5, 61)?;
    // SAFETY: as in `an_event_buffer_between_two_lazily_kept_arrays`.
    unsafe { ctx.enable_event_tracking() };
    bufs[4] = s.alloc_zeros::<u32>(LEN)?;
    s.synchronize()?;
    let mut model = Model { w: host::iota(N, 1, 4) };
    let mut cache = GraphCache::new();
    for call in 0..8u32 {
        tail(&mut cache, &k, &s, &mut w, &mut bufs, &mut y)?;
        model.call(0);
        let want = host::affine(&model.w, 5, 1);
        let got = s2.clone_dtoh(&bufs[4])?;
        assert_same(&got, &want, &format!("call {call}: bufs[4] read on the second stream"));
        s.synchronize()?;
        for (i, b) in bufs.iter().enumerate() {
            assert_same(&s.clone_dtoh(b)?, &want, &format!("call {call}: bufs[{i}]"));
        }
        assert_same(&s.clone_dtoh(&y)?, &host::affine(&model.w, 2, 1), &format!("call {call}: y"));
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 6, "{st:?}");
    Ok(())
}
