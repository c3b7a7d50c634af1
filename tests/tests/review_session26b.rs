//! Review 26b (brief 1, safe code only) of session 26's three changes: `Capture::home` /
//! `eager_home` (eagerly a view's `DeviceSlice::stream` is this thread's per-context stream made
//! with `ctx.new_stream()`), `Alias::drop` binding the alias stream's context before its waits,
//! and `plan::plain_into_mixed_joins`.
//!
//! Every result is compared exactly with a host model of the integer kernels of `ops.cu`;
//! `slow_affine` runs a few milliseconds on an H200, and the next user of the buffer is
//! enqueued at once, so a missing wait shows as wrong data.
//!
//! Expected to pass (GPU):
//! - `review26b_home_stream_kept_across_calls_threads_and_modes_is_refused`
//!
//! Holes suspected by reading (all pass on the H200 after session 26's fix, 139e88e):
//! - `review26b_hole_eager_call_on_its_own_home_stream_lets_a_cross_context_copy_read_a_view`:
//!   the home stream is an `Arc` safe code keeps; a later eager call *on* that stream on the same
//!   thread gets it back as its views' `DeviceSlice::stream`, and there it is the capture's own
//!   stream, accepted (`Capture::accepts` checks `self.stream` first): cudarc's cross-context
//!   `memcpy_dtod` from a view passes the view check again (hole 3 of review 26 reopened) and
//!   runs on the other context's stream, unordered with the operand's next writer. A hole
//!   (failed on the CPU stub driver); fixed: `Capture::home` gives a home stream this capture
//!   does not accept, and `Capture::fork` refuses it.
//! - `review26b_hole_fork_after_the_home_stream_switches_the_context_to_multi_stream_mode`:
//!   an eager call on a context object that made no stream yet (per-thread / legacy stream;
//!   cudarc then manages no synchronization, so the aliases are made without events); the first
//!   `DeviceSlice::stream` of a view makes the home stream with `new_stream`, which switches the
//!   object to multi-stream mode in the middle of the call, so `Capture::fork` (which checks
//!   `managed()` now) is allowed; the forked slow write's view has no events, `Alias::drop`
//!   waits on none (`listed.read_event`/`write_event` are `None`): the call returns without
//!   its stream waiting for the fork. (Also with the fork's stream made by `a.new_stream()`
//!   inside the closure: the same switch without `home`.)
//! - `review26b_hole_pooled_alias_made_before_the_first_new_stream_skips_the_forks_join`: the
//!   same without anything mid-call: an eager call before the object's first `new_stream`
//!   pools event-less aliases (the pool key has `is_event_tracking()`, not
//!   `is_managing_stream_synchronization()`); after `let f = a.new_stream()` a second call
//!   takes them from the pool and forks `f` (contract kept: `f` is of the capture's own
//!   object, which manages synchronization): no wait at the drop.
//!
//! The last two are not holes: cudarc makes an alias's events whenever event tracking is on,
//! multi-stream mode or not, so the pooled aliases' drop waits for the forked work; they stay
//! as regression tests.
//!
//! Host side on the CPU stub driver: `REVIEW17_STUB=1 LD_LIBRARY_PATH=$PWD/target/stub-driver
//! cargo test -p cudagraph-tests --test review_session26b -- --ignored` (kernels do not run
//! there: data is not compared, and the fork tests return early).

#![allow(clippy::type_complexity, clippy::borrow_deref_ref)]

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::review17::{assert_same, stub};
use common::review26::{REFUSED, non_primary, panic_text};
use common::{Result, fresh_thread, host, launch, load, serial};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DeviceSlice, DriverError, LaunchConfig, PushKernelArg,
};
use cudagraph::{CaptureSlice, CaptureSliceMut, Error, GraphCache, Mode, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of `slow_affine`: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn input(r: u32) -> Vec<u32> {
    host::iota(N, 2_654_435_761, r.wrapping_mul(977).wrapping_add(26))
}

/// One eager call on `s` over `x` whose closure hands out its view's `DeviceSlice::stream`.
fn home_of(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
) -> Result<Arc<CudaStream>> {
    let mut home = None;
    let slot = &mut home;
    graph!(cache, s, {
        capture(&*x, |_c, (xv,)| {
            *slot = Some(DeviceSlice::stream(&xv).clone());
            Ok::<(), Error>(())
        });
    })?;
    let home = home.expect("the closure ran");
    assert!(home.cu_stream() != s.cu_stream(), "eagerly the view's stream is not the call's");
    Ok(home)
}

#[derive(Clone, Copy, Debug)]
enum Use {
    DtodFromView,
    Zero,
    Dtoh,
    HtodIntoPart,
}

const USES: [Use; 4] = [Use::DtodFromView, Use::Zero, Use::Dtoh, Use::HtodIntoPart];

fn stray_use(
    st: &Arc<CudaStream>,
    u: Use,
    x: &CaptureSlice<'_, u32>,
    t: &mut CaptureSliceMut<'_, u32>,
    e: &mut CudaSlice<u32>,
) -> std::result::Result<(), DriverError> {
    match u {
        Use::DtodFromView => st.memcpy_dtod(x, e),
        Use::Zero => st.memset_zeros(t),
        Use::Dtoh => {
            let mut h = vec![0u32; x.len()];
            st.memcpy_dtoh(x, &mut h[..])
        }
        Use::HtodIntoPart => st.memcpy_htod(&[7u32; 64][..], &mut t.slice_mut(0..64)),
    }
}

/// One statement (`t = slow_affine(x, 3, r)` then the stray use of the views on `h`) that must
/// panic at the view check with nothing enqueued by the stray use.
#[allow(clippy::too_many_arguments)]
fn refused_on(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    other: &Arc<CudaStream>,
    k: &common::Ops,
    h: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
    t: &mut CudaSlice<u32>,
    e: &mut CudaSlice<u32>,
    r: u32,
    what: &str,
) -> Result {
    let eager = cache.mode() == Mode::Eager;
    for u in USES {
        s.memset_zeros(t)?;
        let (tt, ee) = (&mut *t, &mut *e);
        let p = catch_unwind(AssertUnwindSafe(|| {
            graph!(&mut *cache, s, {
                capture(&*x, &mut *tt, |c, (xv, mut tv)| {
                    let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                    c.kernel(k.slow_affine(N, SPINS, 3, r, xr, tw).launch(cfg()))?;
                    stray_use(h, u, &xv, &mut tv, &mut *ee)?;
                    Ok::<(), Error>(())
                });
            })
        }));
        let text = match p {
            Ok(res) => panic!("{what}, {u:?}: not refused ({res:?})"),
            Err(p) => panic_text(p),
        };
        assert!(text.contains(REFUSED), "{what}, {u:?}: panicked with {text}");
        let want_t = if eager { host::affine(&input(1), 3, r) } else { vec![0; LEN] };
        assert_same(&other.clone_dtoh(&*t)?, &want_t, &format!("{what}, {u:?}: t"));
        assert_same(&other.clone_dtoh(&*e)?, &vec![5; LEN], &format!("{what}, {u:?}: e"));
    }
    Ok(())
}

/// Attack 1a: the home stream handed out of an eager closure and kept: used with the views of
/// later calls (another eager cache on the same thread and stream; a graph-mode call, where the
/// views' own stream is the call's; another thread's eager call, whose home is its own; after
/// every other stream of the context object was dropped) it is refused before anything is
/// enqueued; outside calls it is a plain stream of the context (a round trip on it is exact).
/// Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26b_home_stream_kept_across_calls_threads_and_modes_is_refused() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, other) = (a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let x = s.clone_htod(&input(1))?;
        let mut t = s.alloc_zeros::<u32>(LEN)?;
        let mut e = s.clone_htod(&vec![5u32; LEN])?;
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        let h = home_of(&mut cache, &s, &x)?;
        // The same `Arc` again for the same thread and context (made once).
        assert!(Arc::ptr_eq(&h, &home_of(&mut cache, &s, &x)?), "one home per thread and context");
        let mut later = GraphCache::new();
        later.set_mode(Mode::Eager);
        refused_on(&mut later, &s, &other, &k, &h, &x, &mut t, &mut e, 1, "later eager call")?;
        if !stub() {
            let mut g = GraphCache::new();
            g.set_mode(Mode::Graph);
            refused_on(&mut g, &s, &other, &k, &h, &x, &mut t, &mut e, 2, "graph-mode call")?;
        }
        // Another thread: its eager call's own home is another stream; the kept one is refused.
        std::thread::scope(|sc| {
            sc.spawn(|| -> Result {
                let mut c2 = GraphCache::new();
                c2.set_mode(Mode::Eager);
                let h2 = home_of(&mut c2, &s, &x)?;
                assert!(!Arc::ptr_eq(&h, &h2) && h.cu_stream() != h2.cu_stream());
                let (mut t, mut e) = (s.alloc_zeros::<u32>(LEN)?, s.clone_htod(&vec![5u32; LEN])?);
                refused_on(&mut c2, &s, &other, &k, &h, &x, &mut t, &mut e, 3, "another thread")?;
                Ok(())
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })?;
        // Every other stream of the object dropped; the home stream still works as a stream.
        drop(other);
        let round = h.clone_htod(&input(7))?;
        assert_same(&h.clone_dtoh(&round)?, &input(7), "a round trip on the kept home stream");
        let other = a.new_stream()?;
        refused_on(&mut later, &s, &other, &k, &h, &x, &mut t, &mut e, 4, "after the drops")?;
        a.check_err()?;
        Ok(())
    })
}

/// Hole A: the kept home stream as the call's stream of a later eager call on the same thread:
/// its views' `DeviceSlice::stream` is the same stream, the capture's own, so cudarc's
/// cross-context `memcpy_dtod` (source pointer taken with `src.device_ptr(src.stream())`)
/// passes the view check and enqueues the copy on `s2`, which is kept busy by a slow kernel
/// first; right after the call another stream of device 0 overwrites `x`, and the copy reads
/// the new data. Must panic at the view check, as with any other call stream (review 26's
/// `review26_hole_eager_view_read_by_cudarcs_cross_context_copy_is_unordered`).
fn cross_context_copy_on_the_home_stream(second: Arc<CudaContext>) -> Result {
    let a = CudaContext::new(0)?;
    let (s, other) = (a.new_stream()?, a.new_stream()?);
    let s2 = second.new_stream()?;
    let k2 = load(&second)?;
    let mut busy = s2.alloc_zeros::<u32>(LEN)?;
    let mut e2 = s2.alloc_zeros::<u32>(LEN)?;
    let mut x = s.clone_htod(&input(100))?;
    s.synchronize()?;
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let h = home_of(&mut cache, &s, &x)?;
    for call in 0..4u32 {
        let before = s2.clone_dtoh(&e2)?;
        let during = other.clone_dtoh(&x)?;
        launch!(&s2, &k2, "slow_iota", cfg(); &N, &SPINS, &1u32, &call, &mut busy)?;
        let (s2r, e2r, xr) = (&s2, &mut e2, &x);
        let run = catch_unwind(AssertUnwindSafe(|| {
            graph!(&mut cache, &h, {
                capture(&*xr, |_c, (xv,)| {
                    s2r.memcpy_dtod(&xv, &mut *e2r)?;
                    Ok::<(), Error>(())
                });
            })
        }));
        other.memcpy_htod(&input(call + 101), &mut x)?;
        match run {
            Ok(r) => {
                r?;
                let got = s2.clone_dtoh(&e2)?;
                let raced = !stub() && got != during;
                panic!(
                    "HOLE: call {call} on the home stream: the view was read by a copy on another \
                     context's stream (the copy {})",
                    if raced { "read x's next contents: a race" } else { "happened to win" }
                );
            }
            Err(p) => {
                let text = panic_text(p);
                assert!(
                    text.contains(REFUSED),
                    "HOLE: call {call}: past the view check (stub: no cuMemcpyPeerAsync): {text}"
                );
            }
        }
        assert_same(&s2.clone_dtoh(&e2)?, &before, &format!("call {call}: e2 untouched"));
    }
    a.check_err()?;
    second.check_err()?;
    Ok(())
}

/// Hole A on one GPU (a non-primary context of device 0 as the other context). Found on the
/// CPU stub driver (the copy got past the view check to `cuMemcpyPeerAsync`); fixed in session
/// 26 (`Capture::home` gives a home stream the capture does not accept, and `fork` refuses it):
/// passes on the H200.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26b_hole_eager_call_on_its_own_home_stream_lets_a_cross_context_copy_read_a_view() -> Result
{
    let _serial = serial();
    fresh_thread(|| cross_context_copy_on_the_home_stream(non_primary()?))
}

/// How the fork's stream comes to be allowed in [`fork_on_a_fresh_object`].
#[derive(Clone, Copy, Debug)]
enum Switch {
    /// `DeviceSlice::stream` of a view (the home stream's `new_stream`), then a fork onto a
    /// stream of another object of the device made before the call (that object manages
    /// synchronization).
    Home,
    /// `a.new_stream()` inside the closure (the same switch without the home stream).
    NewStream,
}

/// Suspected hole B (not one: cudarc makes an alias's events whenever event tracking is on,
/// multi-stream mode or not, so the pooled alias's drop waits for the forked work; passes on
/// the H200, 2026-12-04): a fresh context object `a` (no `new_stream` yet: cudarc manages no
/// synchronization), an eager call on its per-thread stream whose closure
/// switches `a` to multi-stream mode, forks onto `f` and writes `t` there slowly, not joined
/// back (eagerly the aliases' drop makes the call's stream wait for it). Right after the call,
/// `u = t` on the call's stream must see the slow write.
fn fork_on_a_fresh_object(switch: Switch) -> Result {
    let a = CudaContext::new(0)?;
    assert!(!a.is_in_multi_stream_mode(), "a fresh object made no stream");
    let b = CudaContext::new(0)?;
    let fb = b.new_stream()?;
    if a.cu_ctx() != b.cu_ctx() {
        return Ok(()); // the stub: one context per object
    }
    let k = load(&a)?;
    let s = a.per_thread_stream();
    let x = s.clone_htod(&input(5))?;
    let mut t = s.alloc_zeros::<u32>(LEN)?;
    let mut u = s.alloc_zeros::<u32>(LEN)?;
    s.synchronize()?;
    assert!(!a.is_in_multi_stream_mode(), "still no stream of `a`");
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let r = 9u32;
    let kr = &k;
    graph!(&mut cache, &s, {
        capture(&x, &mut t, |c, (xv, mut tv)| {
            let f = match switch {
                Switch::Home => {
                    let _ = DeviceSlice::stream(&xv);
                    fb.clone()
                }
                Switch::NewStream => xv_context(&xv).new_stream()?,
            };
            // SAFETY: `f` is a stream of a context object that manages synchronization (it
            // made a stream); it runs one launch reading N elements of the listed view `xv`
            // and writing N of the listed `&mut` view `tv`, and nothing else; the module stays
            // loaded (the test holds `k`).
            unsafe { c.fork(&f) }?;
            // SAFETY: used on `f`, forked in above.
            let (xa, ta) = unsafe { (xv.as_cuda_view(), tv.as_cuda_view_mut()) };
            launch!(&f, kr, "slow_affine", cfg(); &N, &SPINS, &3u32, &r, xa, ta)?;
            Ok::<(), Error>(())
        });
    })?;
    s.memcpy_dtod(&t, &mut u)?;
    let want = host::affine(&input(5), 3, r);
    assert_same(&s.clone_dtoh(&u)?, &want, &format!("{switch:?}: u, copied on the call's stream"));
    a.check_err()?;
    Ok(())
}

/// The context object of a view (its `DeviceSlice::stream`'s).
fn xv_context(xv: &CaptureSlice<'_, u32>) -> Arc<CudaContext> {
    DeviceSlice::stream(xv).context().clone()
}

/// Suspected hole B: a regression test (u must hold the forked slow write).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26b_hole_fork_after_the_home_stream_switches_the_context_to_multi_stream_mode() -> Result {
    let _serial = serial();
    if stub() {
        return Ok(()); // kernels do not run on the stub
    }
    for switch in [Switch::Home, Switch::NewStream] {
        fresh_thread(|| fork_on_a_fresh_object(switch))?;
    }
    Ok(())
}

/// Suspected hole C (not one, as B; passes on the H200): an eager call on a fresh object's
/// per-thread stream pools aliases of `x`
/// and `t`; then `f = a.new_stream()` (the object now manages synchronization) and a second
/// call on the same stream `Arc` takes them back from the pool, forks `f` (contract kept) and
/// writes `t` there slowly; right after, `u = t` on the call's stream must see it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26b_hole_pooled_alias_made_before_the_first_new_stream_skips_the_forks_join() -> Result {
    let _serial = serial();
    if stub() {
        return Ok(());
    }
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let k = load(&a)?;
        let s = a.per_thread_stream();
        let x = s.clone_htod(&input(6))?;
        let mut t = s.alloc_zeros::<u32>(LEN)?;
        let mut u = s.alloc_zeros::<u32>(LEN)?;
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        assert!(!a.is_in_multi_stream_mode());
        graph!(&mut cache, &s, {
            capture(&x, &mut t, |c, (xv, mut tv)| {
                let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                c.kernel(k.slow_affine(N, SPINS, 3, 1, xr, tw).launch(cfg()))?;
                Ok::<(), Error>(())
            });
        })?;
        assert!(!a.is_in_multi_stream_mode(), "the first call made no stream");
        let f = a.new_stream()?;
        for r in 2..6u32 {
            s.memset_zeros(&mut t)?;
            graph!(&mut cache, &s, {
                capture(&x, &mut t, |c, (xv, mut tv)| {
                    // SAFETY: `f` is a stream of the capture's own context object, which
                    // manages synchronization; one launch reading N elements of `xv` and
                    // writing N of `tv`, nothing else; the module stays loaded.
                    unsafe { c.fork(&f) }?;
                    // SAFETY: used on `f`, forked in above.
                    let (xa, ta) = unsafe { (xv.as_cuda_view(), tv.as_cuda_view_mut()) };
                    launch!(&f, &k, "slow_affine", cfg(); &N, &SPINS, &3u32, &r, xa, ta)?;
                    Ok::<(), Error>(())
                });
            })?;
            s.memcpy_dtod(&t, &mut u)?;
            let want = host::affine(&input(6), 3, r);
            assert_same(&s.clone_dtoh(&u)?, &want, &format!("call {r}: u after a pooled fork"));
        }
        a.check_err()?;
        Ok(())
    })
}
