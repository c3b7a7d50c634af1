//! Review 11: captures where cudarc does *not* manage stream synchronization (the change that
//! dropped `require_tracking` from `can_capture` and `CapturedWork::eager_with`, added
//! `Capture::current` / `on_user`, and refuses `Capture::fork` without tracking).
//!
//! What decides cudarc's ordering is not one context object but three:
//! - a view's *waits* (`device_ptr`, `device_ptr_mut`) follow the view's alias's context object,
//!   which is the capture origin's (`Ops::aliases(origin.stream(), …)`);
//! - a launch's waits and records (`LaunchArgs::arg`) and a guard's record (`SyncOnDrop`) follow
//!   the *stream's* context object, the one the work is enqueued on;
//! - the origin is the thread's stream of the `CUcontext`, made (and owned) by whichever
//!   `Arc<CudaContext>` object first captured on the thread (`origin_stream` matches by
//!   `cu_ctx()`, and every `CudaContext::new(0)` of a device has the same primary `CUcontext`).
//!
//! `Capture::managed` reads only the origin's object. So with the call's stream on a second
//! object that manages nothing (its per-thread stream, no `new_stream`: reachable in safe code,
//! and no longer refused by `can_capture`) and an origin of a first object that does, `on_user`
//! stays false: the crate's methods stay on the origin and order by the views' events, which
//! the joined stream's cudarc launches neither wait on nor record. Tests 1, 2 and 3 attack that
//! (they use the documented `unsafe { s.stream() }` / `fork` pattern, contract kept); 4 to 6
//! check that the new paths stay exact where they should (tracking off on the one object; safe
//! code only on a fresh per-thread object and across a mode change; safe code on two objects);
//! 7 attacks the views' stream check, which compares raw handles (`CU_STREAM_PER_THREAD` is one
//! handle for every context).
//!
//! Each scenario that depends on which object owns the thread's capture origin runs on a fresh
//! thread ([`fresh_thread`]): the origins are thread-local and live as long as the thread.
//! Every test compares with a host model of the integer kernels, exactly. The slow kernels run
//! a few milliseconds on an H200 (`SPINS`), so an ordering hole shows as wrong data.
//! Expected on a GPU with the change as reviewed: 1 (its first two cases), 2, 3 and 7 fail;
//! 4, 5 and 6 pass. Fixed since: the crate's methods go on the joined call stream after every
//! join (`on_user` whatever either object's mode: 1, 2); `fork`'s contract makes the caller join
//! a stream of an object that manages nothing back before the capture's other work uses what it
//! wrote (3 now keeps it and checks the order); views are accepted per (stream, context) (7).
//! All must pass.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::{Ops, Result, assert_same, fresh_thread, host, launch, load, own_origin, pinned};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudagraph::{
    Capture, CaptureHostSliceMut, CaptureSlice, CaptureSliceMut, Error, GraphCache, Mode, capture,
    graph,
};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of `slow_affine` (a slow *reader*: its output is `affine` of its input whatever the
/// count, so the host model does not depend on it): a few milliseconds on an H200, far longer
/// than a copy, a memset or a launch.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The device address of `b`.
fn addr<T>(b: &CudaSlice<T>, s: &Arc<CudaStream>) -> u64 {
    b.device_ptr(s).0
}

/// A new buffer of `LEN` elements equal to `value` on `stream`, at device address `at` if the
/// stream-ordered allocator hands it out again within a few tries: `(buffer, whether at at)`.
fn fill_at(stream: &Arc<CudaStream>, at: u64, value: u32) -> Result<(CudaSlice<u32>, bool)> {
    let mut misses = Vec::new();
    for _ in 0..8 {
        let w = stream.clone_htod(&vec![value; LEN])?;
        if addr(&w, stream) == at {
            return Ok((w, true));
        }
        misses.push(w);
    }
    Ok((misses.pop().expect("eight tries"), false))
}

/// The views of [`both_directions`]: `x` read, `t`, `u`, `v`, `w` written.
type Five<'s> = (
    CaptureSlice<'s, u32>,
    CaptureSliceMut<'s, u32>,
    CaptureSliceMut<'s, u32>,
    CaptureSliceMut<'s, u32>,
    CaptureSliceMut<'s, u32>,
);

/// Work joined on the call's stream and the capture's own methods, ordered both ways:
/// - joined → crate: `t = slow_affine(x, 3, 1)` by a cudarc launch on the joined stream, then
///   the crate's `copy` `u = t`, which must run after it (`Capture::copy`: "ordered after the
///   closure's earlier work on either view … on any of the capture's streams");
/// - crate → joined: the crate's `kernel` `v = slow_affine(u, 5, 2)`, then a cudarc launch
///   `w = mix(v)` on the joined stream, which must run after it.
///
/// Host model: [`both_model`].
fn both_directions(k: &Ops, s: &Capture, (x, mut t, mut u, mut v, mut w): Five<'_>) -> Result {
    // SAFETY: the two launches below read N elements of x and v and write N of t and w, listed
    // views (`&mut` where written), on the joined stream; nothing else is enqueued on it while
    // the closure runs; the module stays loaded (the test holds `k`).
    let st = unsafe { s.stream() };
    // SAFETY: used on `st`, joined above.
    let (xv, tv) = unsafe { (x.as_cuda_view(), t.as_cuda_view_mut()) };
    launch!(st, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &1u32, xv, tv)?;
    s.copy(&t, &mut u)?;
    s.kernel(k.slow_affine(N, SPINS, 5, 2, s.read(&u)?, s.write(&mut v)?).launch(cfg()))?;
    let vr = v.slice(..);
    // SAFETY: as above.
    let (vv, wv) = unsafe { (vr.as_cuda_view(), w.as_cuda_view_mut()) };
    launch!(st, k, "mix", cfg(); &N, vv, wv)?;
    Ok(())
}

/// `(t, u, v, w)` of [`both_directions`] for input `x`.
fn both_model(x: &[u32]) -> [Vec<u32>; 4] {
    let t = host::affine(x, 3, 1);
    let v = host::affine(&t, 5, 2);
    let w = host::mix(&v);
    [t.clone(), t, v, w]
}

/// The input of round `r`.
fn input(r: u32) -> Vec<u32> {
    host::iota(N, 2, 7 * r + 1)
}

/// Checks `t, u, v, w` (read on `s`) against [`both_model`]; a mismatch is pushed to `fails`.
fn check_both(
    s: &Arc<CudaStream>,
    bufs: [&CudaSlice<u32>; 4],
    x: &[u32],
    what: &str,
    fails: &mut Vec<String>,
) -> Result {
    let want = both_model(x);
    for ((b, want), name) in bufs.into_iter().zip(&want).zip(["t", "u", "v", "w"]) {
        let got = s.clone_dtoh(b)?;
        let bad = got.iter().zip(want).filter(|(g, w)| g != w).count();
        if bad > 0 {
            fails.push(format!("{what}: {name}: {bad} of {LEN} elements wrong"));
        }
    }
    Ok(())
}

/// One setup of tests 1 and 2: `(owner of the origin's stream, the call's stream)`, made on the
/// thread that runs the scenario. The owner's stream has already captured (it owns the origin).
type Streams = (Arc<CudaStream>, Arc<CudaStream>);

/// - `"per-thread"`: the origin of a first object `A` (a `new_stream`, tracking on: managed);
///   the call's stream the per-thread stream of a second object `B` of the device that made
///   no stream (nothing managed). Safe to set up; refused by `can_capture` before the change.
/// - `"tracking off"`: the origin of `A`; the call's stream a `new_stream` of a second object
///   `C` whose tracking is off.
/// - `"origin untracked"`: the other way round, a control: the origin of `C` (tracking off),
///   the call's stream a `new_stream` of `A` (managed). `on_user` is set: everything after the
///   join goes on the call's stream.
fn streams(case: &str) -> Result<Streams> {
    let tracked = || -> Result<Arc<CudaStream>> { Ok(CudaContext::new(0)?.new_stream()?) };
    let untracked = || -> Result<Arc<CudaStream>> {
        let c = CudaContext::new(0)?;
        // SAFETY: every cudarc use of this object's buffers in these tests is on the one stream
        // returned here (the call's stream, or the origin owner's, which has none).
        unsafe { c.disable_event_tracking() };
        Ok(c.new_stream()?)
    };
    let (owner, call) = match case {
        "per-thread" => {
            let a = tracked()?;
            own_origin(&a)?;
            let b = CudaContext::new(0)?;
            assert!(!b.is_managing_stream_synchronization());
            (a, b.per_thread_stream())
        }
        "tracking off" => {
            let a = tracked()?;
            own_origin(&a)?;
            (a, untracked()?)
        }
        _ => {
            let c = untracked()?;
            own_origin(&c)?;
            (c, tracked()?)
        }
    };
    assert!(owner.context().is_managing_stream_synchronization() != (case == "origin untracked"));
    Ok((owner, call))
}

const CASES: [&str; 3] = ["per-thread", "tracking off", "origin untracked"];

/// Attack (hole found by reading): `Capture::stream` sets `on_user = !self.managed()`, and
/// `managed` reads the *origin's* context object (session.rs `managed`, `stream`). With the call's
/// stream on a context object that manages nothing while the origin's does (cases
/// "per-thread", "tracking off"), the crate's `copy`/`kernel` stay on the origin and wait on /
/// record the views' events, while the joined stream's cudarc launches (its `LaunchArgs` follow
/// the call stream's object) neither wait on nor record them: in the recording the copy runs
/// beside `t`'s slow launch, and the joined `mix` beside the crate's slow kernel. Standalone
/// `capture` + `Exec::launch` over two rounds (`release`, new input, `bind`).
/// Expected on a GPU as reviewed: fails for "per-thread" and "tracking off" (u, v, w wrong),
/// passes for "origin untracked". Safe outcome: exact in every case (or a refused capture).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11_joined_stream_of_an_unmanaged_second_object_is_ordered_with_capture_methods() -> Result
{
    let _serial = common::serial();
    let mut fails = Vec::new();
    for case in CASES {
        let f = fresh_thread(|| -> Result<Vec<String>> {
            let mut fails = Vec::new();
            let (_owner, s) = streams(case)?;
            let k = load(s.context())?;
            let mut x = s.clone_htod(&input(0))?;
            let [mut t, mut u, mut v, mut w] =
                std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
            let g = match capture(&s, (&x, &mut t, &mut u, &mut v, &mut w), |c, views| {
                both_directions(&k, c, views)
            }) {
                Ok(g) => g,
                Err(e) => {
                    println!("{case}: refused: {e}");
                    return Ok(fails);
                }
            };
            let mut exec = g.instantiate()?;
            for round in 0..2u32 {
                let released = exec.release();
                s.memcpy_htod(&input(round), &mut x)?;
                for b in [&mut t, &mut u, &mut v, &mut w] {
                    s.memset_zeros(b)?;
                }
                exec = released.bind((&x, &mut t, &mut u, &mut v, &mut w));
                exec.launch(&s)?;
                let released = exec.release();
                let what = format!("{case}, round {round}");
                check_both(&s, [&t, &u, &v, &w], &input(round), &what, &mut fails)?;
                exec = released.bind((&x, &mut t, &mut u, &mut v, &mut w));
            }
            drop(exec);
            s.context().check_err()?;
            Ok(fails)
        })?;
        fails.extend(f);
    }
    assert!(fails.is_empty(), "the crate's methods and the joined stream raced: {fails:#?}");
    Ok(())
}

/// Attack: the same hole through `graph!`'s `capture` statement, unkeyed (recorded every call)
/// and keyed (recorded once, replayed), and `GraphBuilder::capture`, on the per-thread stream
/// of a second context object that made no stream, the origin being a first object's: exactly
/// what the change newly accepts without `unsafe` setup. Two calls each, new inputs.
/// Expected on a GPU as reviewed: fails (u, v, w wrong). Safe outcome: exact, or refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11_capture_statement_and_builder_on_a_second_objects_per_thread_stream_are_ordered()
-> Result {
    let _serial = common::serial();
    let fails = fresh_thread(|| -> Result<Vec<String>> {
        let mut fails = Vec::new();
        let (_owner, s) = streams("per-thread")?;
        let ks = Arc::new(load(s.context())?);
        let mut x = s.alloc_zeros::<u32>(LEN)?;
        let [mut t, mut u, mut v, mut w] =
            std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
        let mut cache = GraphCache::new();
        for variant in ["unkeyed", "keyed", "builder"] {
            for call in 0..2u32 {
                s.memcpy_htod(&input(call), &mut x)?;
                for b in [&mut t, &mut u, &mut v, &mut w] {
                    s.memset_zeros(b)?;
                }
                let r = match variant {
                    "unkeyed" => graph!(&mut cache, &s, {
                        capture(&x, &mut t, &mut u, &mut v, &mut w, |c, views| {
                            both_directions(&ks, c, views)
                        });
                    }),
                    "keyed" => graph!(&mut cache, &s, {
                        capture(
                            &x,
                            &mut t,
                            &mut u,
                            &mut v,
                            &mut w,
                            key = ks.clone(),
                            |c, k, views| both_directions(k, c, views),
                        );
                    }),
                    _ => {
                        let mut g = cache.builder(&s);
                        let xr = g.read(&x);
                        let (tw, uw, vw, ww) =
                            (g.write(&mut t), g.write(&mut u), g.write(&mut v), g.write(&mut w));
                        let kr = &ks;
                        g.capture(&s, (xr, tw, uw, vw, ww), move |c, views| {
                            both_directions(kr, c, views)
                        });
                        g.launch()
                    }
                };
                if let Err(e) = r {
                    println!("{variant}: refused: {e}");
                    continue;
                }
                let what = format!("{variant}, call {call}");
                check_both(&s, [&t, &u, &v, &w], &input(call), &what, &mut fails)?;
            }
        }
        s.context().check_err()?;
        Ok(fails)
    })?;
    assert!(fails.is_empty(), "the crate's methods and the joined stream raced: {fails:#?}");
    Ok(())
}

/// Attack (hole found by reading, review 11): `Capture::fork` is refused only when the
/// *origin's* object manages nothing; a stream of another object that manages nothing is forked
/// in, and its cudarc work records none of the views' events, so the crate's `copy` right after
/// it, before `join`, was not ordered after it. Fixed by `fork`'s contract (the caller joins such
/// a stream back before the capture's other work uses what it wrote, as candle's example does):
/// here the closure keeps it, and the copy after the join must see the slow launch's output. Two
/// forked streams: the per-thread stream of a second object that made no stream, and a stream of
/// a second object with tracking off (candle's setup in `examples/src/candle_mlp.rs`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11_a_forked_stream_of_an_unmanaged_object_joined_back_is_ordered() -> Result {
    let _serial = common::serial();
    let mut fails = Vec::new();
    for case in ["per-thread of a second object", "second object, tracking off"] {
        let f = fresh_thread(|| -> Result<Vec<String>> {
            let a = CudaContext::new(0)?;
            let s = a.new_stream()?;
            let k = load(&a)?;
            let other = if case.starts_with("per-thread") {
                CudaContext::new(0)?.per_thread_stream()
            } else {
                let c = CudaContext::new(0)?;
                // SAFETY: this object has no buffer; its stream only runs the forked launch on
                // `a`'s buffers' views, which the fork and the join order.
                unsafe { c.disable_event_tracking() };
                c.new_stream()?
            };
            assert!(!other.context().is_managing_stream_synchronization());
            let x = s.clone_htod(&input(1))?;
            let [mut t, mut u] = std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
            let refused = std::cell::Cell::new(false);
            let g = capture(&s, (&x, &mut t, &mut u), |c, (x, mut t, mut u)| {
                // SAFETY: until the join below, `other` runs one launch that reads N elements of
                // x and writes N of t (listed views) and nothing else uses it; it is joined back
                // before the capture's copy reads t (fork's contract for an object that manages
                // no synchronization).
                if unsafe { c.fork(&other) }.is_err() {
                    refused.set(true);
                    return Ok(());
                }
                // SAFETY: used on `other`, forked in above.
                let (xv, tv) = unsafe { (x.as_cuda_view(), t.as_cuda_view_mut()) };
                launch!(&other, &k, "slow_affine", cfg(); &N, &SPINS, &3u32, &1u32, xv, tv)?;
                c.join(&other)?;
                c.copy(&t, &mut u)?;
                Ok::<(), Error>(())
            })?;
            if refused.get() {
                println!("{case}: fork refused");
                return Ok(Vec::new());
            }
            let mut exec = g.instantiate()?;
            exec.launch(&s)?;
            drop(exec);
            let got = s.clone_dtoh(&u)?;
            let want = host::affine(&input(1), 3, 1);
            let bad = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            a.check_err()?;
            Ok(if bad > 0 {
                vec![format!("{case}: u: {bad} of {LEN} elements wrong")]
            } else {
                vec![]
            })
        })?;
        fails.extend(f);
    }
    assert!(fails.is_empty(), "a joined-back fork unordered with Capture::copy: {fails:#?}");
    Ok(())
}

/// `(t, u, y, h)` of [`host_roundtrip`] for input `x`.
fn roundtrip_model(x: &[u32]) -> [Vec<u32>; 4] {
    let u = host::affine(x, 3, 1);
    let h: Vec<u32> = u.iter().map(|v| v.wrapping_mul(7) ^ 0x55).collect();
    let y = host::mix(&h);
    [h.clone(), u, y, h]
}

/// Views of [`host_roundtrip`].
type Roundtrip<'s> = (
    CaptureSlice<'s, u32>,
    CaptureSliceMut<'s, u32>,
    CaptureSliceMut<'s, u32>,
    CaptureSliceMut<'s, u32>,
    CaptureHostSliceMut<'s, u32>,
);

/// The crate's methods on both sides of the join, with host work: `t = x` (crate `copy`,
/// before the join: on the capture's own stream), join, `u = slow_affine(t, 3, 1)` (cudarc,
/// joined), `h = u` (`copy_dtoh`), `h = 7h ^ 0x55` (`host`), `t = h` (`copy_htod`, overwriting
/// what the slow launch reads), `y = mix(t)` (`kernel`). Model: [`roundtrip_model`].
fn host_roundtrip(
    s: &Capture,
    k: &Arc<Ops>,
    (x, mut t, mut u, mut y, mut h): Roundtrip<'_>,
) -> std::result::Result<(), Error> {
    s.copy(&x, &mut t)?;
    // SAFETY: the launch reads N elements of t and writes N of u (listed `&mut` views) on the
    // joined stream; nothing else is enqueued there while the closure runs; the key holds `k`.
    let st = unsafe { s.stream() };
    let tr = t.slice(..);
    // SAFETY: used on `st`, joined above.
    let (tv, uv) = unsafe { (tr.as_cuda_view(), u.as_cuda_view_mut()) };
    launch!(st, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &1u32, tv, uv)?;
    s.copy_dtoh(&u, &mut h)?;
    s.host((&mut h,), |(h,)| h.iter_mut().for_each(|v| *v = v.wrapping_mul(7) ^ 0x55))?;
    s.copy_htod(&h, &mut t)?;
    s.kernel(k.mix(N, s.read(&t)?, s.write(&mut y)?).launch(cfg()))?;
    Ok(())
}

/// Device work only, for a `device_if` body: `w = 0` (crate `zero`, before the join), join,
/// `z = slow_affine(y, 5, 2)` (cudarc, joined), `w = mix(z)` (crate `kernel`, after the join).
fn device_only(
    k: &Ops,
    s: &Capture,
    (y, mut z, mut w): (CaptureSlice<'_, u32>, CaptureSliceMut<'_, u32>, CaptureSliceMut<'_, u32>),
) -> std::result::Result<(), Error> {
    s.zero(&mut w)?;
    // SAFETY: the launch reads N elements of y and writes N of z (listed views) on the joined
    // stream, nothing else; the module stays loaded (the test holds `k`).
    let st = unsafe { s.stream() };
    // SAFETY: used on `st`, joined above.
    let (yv, zv) = unsafe { (y.as_cuda_view(), z.as_cuda_view_mut()) };
    launch!(st, k, "slow_affine", cfg(); &N, &SPINS, &5u32, &2u32, yv, zv)?;
    s.kernel(k.mix(N, s.read(&z)?, s.write(&mut w)?).launch(cfg()))?;
    Ok(())
}

/// Control of `on_user` with tracking off on the one context object (its own origin): the
/// crate's work before the join (origin), the joined slow launch, then `copy_dtoh` into a
/// pinned operand, a host function on it, `copy_htod` back and a kernel node, all after the
/// join (on the joined stream); in a keyed statement (recorded once, replayed) beside a
/// `device_if` body holding an unkeyed statement, three calls with new inputs; then the same
/// in `Mode::Eager` (now accepted without tracking). Expected on a GPU: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11_tracking_off_host_and_pinned_work_after_the_join_stays_in_order() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(300, "review11 tracking off, host work after the join");
    fresh_thread(|| -> Result {
        let ctx = CudaContext::new(0)?;
        // SAFETY: every buffer of this test (device and pinned) is used by cudarc on `s` only.
        unsafe { ctx.disable_event_tracking() };
        let s = ctx.new_stream()?;
        let ks = Arc::new(load(&ctx)?);
        let mut x = s.alloc_zeros::<u32>(LEN)?;
        let [mut t, mut u, mut y, mut z, mut w] =
            std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
        let mut h = pinned::<u32>(&ctx, LEN)?;
        for mode in [Mode::Graph, Mode::Eager] {
            let mut cache = GraphCache::new();
            cache.set_mode(mode);
            for call in 0..3u32 {
                let inp = input(call + 3 * (mode == Mode::Eager) as u32);
                s.memcpy_htod(&inp, &mut x)?;
                for b in [&mut t, &mut u, &mut y, &mut z, &mut w] {
                    s.memset_zeros(b)?;
                }
                let k: &Ops = &ks;
                if mode == Mode::Graph {
                    graph!(&mut cache, &s, {
                        capture(&x, &mut t, &mut u, &mut y, &mut h, key = ks.clone(), |c, k, v| {
                            host_roundtrip(c, k, v)
                        });
                        let cnd = condition(1);
                        device_if(cnd, {
                            capture(&y, &mut z, &mut w, |c, v| device_only(k, c, v));
                        });
                    })?;
                } else {
                    graph!(&mut cache, &s, {
                        capture(&x, &mut t, &mut u, &mut y, &mut h, key = ks.clone(), |c, k, v| {
                            host_roundtrip(c, k, v)
                        });
                        capture(&y, &mut z, &mut w, |c, v| device_only(k, c, v));
                    })?;
                }
                s.synchronize()?;
                let what = format!("{mode:?}, call {call}");
                let want = roundtrip_model(&inp);
                for (b, (want, name)) in
                    [&t, &u, &y].into_iter().zip(want.iter().zip(["t", "u", "y"]))
                {
                    assert_same(&s.clone_dtoh(b)?, want, &format!("{what}: {name}"));
                }
                assert_same(h.as_slice()?, &want[3], &format!("{what}: h"));
                let zm = host::affine(&want[2], 5, 2);
                assert_same(&s.clone_dtoh(&z)?, &zm, &format!("{what}: z"));
                assert_same(&s.clone_dtoh(&w)?, &host::mix(&zm), &format!("{what}: w"));
            }
        }
        ctx.check_err()?;
        Ok(())
    })
}

/// Safe code only, on a context object that never made a stream: `graph!` calls with a `capture`
/// statement on its per-thread stream, first in `Mode::Eager` (no origin is made: cudarc
/// manages nothing), then in `Mode::Graph` (the first recording makes the origin with
/// `new_stream` on that object, which switches cudarc to multi-stream mode mid-program), with
/// buffers allocated before and after the switch. Each call's captured output `z` lives on the
/// object's legacy default stream and is dropped right after the call, while the call's slow
/// kernel still runs before the copy into it; a buffer refilled at the freed address must stay
/// intact. Expected on a GPU: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11_eager_then_graph_on_a_fresh_per_thread_object_stays_exact_and_frees_wait() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let b = CudaContext::new(0)?;
        let s = b.per_thread_stream();
        let legacy = b.default_stream();
        assert!(!b.is_managing_stream_synchronization());
        let k = load(&b)?;
        let seed = s.clone_htod(&host::iota(N, 1, 0))?; // before the switch
        let mut x = s.alloc_zeros::<u32>(LEN)?;
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        let mut clobbered = Vec::new();
        for call in 0..6u32 {
            if call == 3 {
                cache.set_mode(Mode::Graph);
            }
            let mut w = s.alloc_zeros::<u32>(LEN)?; // before the switch, then after
            let mut z = legacy.alloc_zeros::<u32>(LEN)?;
            let z_at = addr(&z, &legacy);
            graph!(&mut cache, &s, {
                k.slow_affine(N, SPINS, 3, call, &seed, &mut x).launch(cfg());
                capture(&x, &mut w, &mut z, |c, (x, mut w, mut z)| {
                    c.kernel(k.mix(N, c.read(&x)?, c.write(&mut w)?).launch(cfg()))?;
                    c.copy(&w, &mut z)?;
                    Ok::<(), Error>(())
                });
            })?;
            drop(z); // freed on the legacy stream, which must wait for the call
            let (victim, reused) = fill_at(&legacy, z_at, 7)?;
            legacy.synchronize()?;
            s.synchronize()?;
            let want = host::mix(&host::iota(N, 3, call));
            assert_same(&s.clone_dtoh(&w)?, &want, &format!("call {call}: w"));
            let bad = legacy.clone_dtoh(&victim)?.iter().filter(|&&v| v != 7).count();
            if bad > 0 {
                clobbered.push(format!("call {call}: {bad} elements (reused address: {reused})"));
            }
            if call == 3 {
                println!(
                    "managed after the first recording: {}",
                    b.is_managing_stream_synchronization()
                );
            }
        }
        b.check_err()?;
        assert!(
            clobbered.is_empty(),
            "a buffer at a freed address was overwritten: {clobbered:#?}"
        );
        Ok(())
    })
}

/// The standalone graph of test 6: `y = slow_affine(x, 1, 0)` (= x), `y2 = y`, then `x =
/// iota(9, 9)`, written last, a few milliseconds after the launch began.
fn read_then_write(
    k: &Ops,
    c: &Capture,
    (mut x, mut y, mut y2): (
        CaptureSliceMut<'_, u32>,
        CaptureSliceMut<'_, u32>,
        CaptureSliceMut<'_, u32>,
    ),
) -> std::result::Result<(), Error> {
    c.kernel(k.slow_affine(N, SPINS, 1, 0, c.read(&x)?, c.write(&mut y)?).launch(cfg()))?;
    c.copy(&y, &mut y2)?;
    c.kernel(k.iota(N, 9, 9, c.write(&mut x)?).launch(cfg()))?;
    Ok(())
}

/// Safe code only, two context objects of the device: the origin of `A` (which made a stream),
/// the capture on the per-thread stream of `B` (which made none). The standalone graph reads
/// `x`, a buffer of `A` written right before each launch by a slow `graph!` call on `A`'s
/// stream, and writes it last; `y`, `y2` are `B`'s. `Exec` lifecycle: `launch`, `release`,
/// `bind` over rounds, then `update` with a graph of a fresh `x2` of `A`, launched, the exec
/// and `x2` dropped right away, a buffer refilled at `x2`'s address on `A`'s stream.
/// Expected on a GPU: passes (every launch after the slow writer; the free after the launch).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11_safe_capture_on_a_second_objects_per_thread_stream_orders_both_objects_buffers()
-> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let sa = a.new_stream()?;
        own_origin(&sa)?;
        let b = CudaContext::new(0)?;
        let sb = b.per_thread_stream();
        assert!(!b.is_managing_stream_synchronization());
        let k = load(&a)?;
        let seed = sa.clone_htod(&host::iota(N, 1, 0))?;
        let mut x = sa.alloc_zeros::<u32>(LEN)?;
        let [mut y, mut y2] = std::array::from_fn(|_| sb.alloc_zeros::<u32>(LEN).unwrap());
        let mut ca = GraphCache::new();
        let mut exec = capture(&sb, (&mut x, &mut y, &mut y2), |c, v| read_then_write(&k, c, v))?
            .instantiate()?;
        for round in 0..3u32 {
            let released = exec.release();
            graph!(&mut ca, &sa, {
                k.slow_affine(N, SPINS, 3, round, &seed, &mut x).launch(cfg());
            })?;
            exec = released.bind((&mut x, &mut y, &mut y2));
            exec.launch(&sb)?;
            let released = exec.release();
            let want = host::iota(N, 3, round);
            assert_same(&sb.clone_dtoh(&y2)?, &want, &format!("round {round}: y2"));
            assert_same(&sa.clone_dtoh(&x)?, &host::iota(N, 9, 9), &format!("round {round}: x"));
            exec = released.bind((&mut x, &mut y, &mut y2));
        }
        let mut x2 = sa.clone_htod(&host::iota(N, 4, 4))?;
        let x2_at = addr(&x2, &sa);
        let released = exec.release();
        let g2 = capture(&sb, (&mut x2, &mut y, &mut y2), |c, v| read_then_write(&k, c, v))?;
        let mut exec = match released.update(g2) {
            Ok(e) => e,
            Err(refused) => panic!("update refused: {refused:?}"),
        };
        exec.launch(&sb)?;
        drop(exec);
        drop(x2); // freed on `sa`, which must wait for the launch
        let (victim, reused) = fill_at(&sa, x2_at, 7)?;
        sa.synchronize()?;
        sb.synchronize()?;
        assert_same(&sb.clone_dtoh(&y2)?, &host::iota(N, 4, 4), "after update: y2");
        let bad = sa.clone_dtoh(&victim)?.iter().filter(|&&v| v != 7).count();
        assert_eq!(
            bad, 0,
            "the updated exec wrote {bad} elements of a buffer at x2's freed address (reused: {reused})"
        );
        a.check_err()?;
        b.check_err()?;
        Ok(())
    })
}

/// Attack (hole found by reading): `Capture::accepts` compares raw stream handles
/// (session.rs `accepts`, `check_view_stream`), and `CU_STREAM_PER_THREAD` (0x2) is one handle
/// for every context. Once the call's per-thread stream of context `A` is joined (the
/// documented `unsafe { s.stream() }`), a view passes the check on the per-thread stream of any
/// other context, here a non-primary context `N` of the same device (safe to make), where it is
/// not part of the capture: safe code then runs cudarc on the view on a stream the views must
/// refuse ("panics unless the stream is one of the capture's"). Expected on a GPU as reviewed:
/// fails (no panic). Safe outcome: the use panics.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11_a_view_on_another_contexts_per_thread_stream_panics_after_the_join() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let _sa = a.new_stream()?;
        let n = CudaContext::new_non_primary(0, 0)?;
        assert_ne!(n.cu_ctx(), a.cu_ctx());
        let other = n.per_thread_stream();
        let user = a.per_thread_stream();
        a.bind_to_thread()?;
        let mut y = user.clone_htod(&vec![5u32; LEN])?;
        let panicked = std::cell::Cell::new(None);
        let r = capture(&user, (&mut y,), |c, (mut y,)| {
            // SAFETY: nothing is enqueued on the joined stream (the attack is safe code on
            // another stream below).
            let _ = unsafe { c.stream() };
            let p = catch_unwind(AssertUnwindSafe(|| other.memset_zeros(&mut y)));
            panicked.set(Some(p.is_err()));
            Ok::<(), Error>(())
        });
        println!("capture: {:?}", r.as_ref().map(|_| ()));
        drop(r);
        let _ = n.synchronize();
        let _ = n.check_err();
        a.bind_to_thread()?;
        let _ = a.check_err();
        assert_eq!(
            panicked.get(),
            Some(true),
            "a view was accepted on another context's per-thread stream, not part of the capture"
        );
        Ok(())
    })
}
