//! Review of session 26 (brief 1, commits 656d303 and 65e1218): `Mode::Eager` capture
//! statements. (1) `Capture::accepted` no longer holds the capture's own stream, which
//! `Capture::accepts` checks first (stream handle and context): the streams a closure's views may
//! be used on, on which `forked()` and `joined_user()` depend. (2) The thread's pool of eager
//! aliases (`Alias::pooled`, at most 64) takes an entry out with `swap_remove`, so eviction
//! beyond the bound drops one of the older entries rather than the oldest.
//!
//! Safe code only, besides the documented `unsafe { c.fork(..) }` / `as_cuda_view` (and, in
//! one test, cudarc's `disable_event_tracking`/`enable_event_tracking`) with their contracts
//! kept. Every result is compared exactly with a host model of the integer kernels;
//! `slow_affine` (a slow reader *and* writer whose output does not depend on its spins) runs a
//! few milliseconds on an H200, and the next user of a buffer is enqueued at once on another
//! stream (or the buffer freed and allocated again at once), so a missing wait shows as wrong
//! data.
//!
//! Single GPU, expected to pass:
//! - `review26_views_on_streams_outside_the_call_panic_in_eager_and_graph_mode`
//! - `review26_eager_views_on_other_handles_of_the_calls_stream_are_accepted_and_in_order`
//! - `review26_eager_fork_on_per_thread_and_legacy_call_streams_is_waited_for`
//! - `review26_pool_beyond_64_with_permuted_reuse_forks_and_reallocation_stays_exact`
//! - `review26_pool_panic_after_a_forked_slow_write_is_still_waited_for`
//! - `review26_pool_threads_exit_with_forked_slow_work_in_flight`
//! - `review26_pool_keyed_by_event_tracking_across_toggles`
//! - `review26_nested_calls_on_a_forked_stream_and_in_a_nested_capture`
//!
//! Holes found (by reading the code, and host side on the CPU stub driver), fixed in session 26
//! (85fa215; the tests now pass on the H200, and 4 of them failed on the session-start code:
//! these three and `review26_eager_view_s_own_stream_is_refused_as_in_graph_mode`), one GPU:
//! a second `CUcontext` of the same GPU is one safe call away (`CudaContext::new_non_primary`,
//! cudarc with `cuda-13000`, the crate's default); on two GPUs the same with device 1
//! (`--features multi-gpu`, `review26_multi_gpu_*`).
//! - `review26_hole_eager_fork_with_a_non_primary_context_current_at_the_closures_end` and
//!   `review26_hole_eager_fork_after_evicting_a_non_primary_contexts_pooled_alias`: when the
//!   closure forked (`EAGER_JOIN`), a pooled alias's drop (`Alias::drop`, session.rs) makes the
//!   call's stream wait on the alias's events with a raw `cuStreamWaitEvent(s.cu_stream(), e)`
//!   without making the call's context current. For a call on the legacy default stream (null)
//!   or the per-thread stream (`0x2`) the handle means "the *current* context's" stream: if
//!   another context is current there (the closure's last cudarc call was on it; or the drop of
//!   the alias before evicted a pooled alias of that context, whose `leak` binds it), the wait
//!   lands on that context's stream and the call's stream is not ordered after the forked work.
//!   Traced on the stub (a copy that logs the current context at each wait): the four waits of
//!   the pooled aliases go to `0x2` with the other context current. Fixed: `Alias::drop` makes
//!   the stream's context current first.
//! - `review26_hole_eager_view_read_by_cudarcs_cross_context_copy_is_unordered`: eagerly,
//!   `s2.memcpy_dtod(&view, &mut e2)` with `s2`/`e2` of another context takes cudarc's
//!   cross-context branch, which takes the source's pointer for `src.stream()` (a view's
//!   `DeviceSlice::stream`: the call's stream, eagerly the capture's own, accepted) and enqueues
//!   the copy on `s2`, ordered before nothing that follows: the listed operand is read on an
//!   unaccepted stream, racing its next writer (or its free). Failed host side on the stub too.
//!   Fixed: eagerly a view's `DeviceSlice::stream` is a stream the capture does not accept, and
//!   the copy panics at the view check (also
//!   `review26_eager_view_s_own_stream_is_refused_as_in_graph_mode`).
//!
//! Host-side parts also run on the CPU stub driver (values are not compared there):
//! `REVIEW17_STUB=1 LD_LIBRARY_PATH=$PWD/target/stub-driver cargo test -p cudagraph-tests --test
//! review_session26 -- --ignored` (the stub gives each `CudaContext::new` a context of its own,
//! so its other-object cases are left out there; it cannot capture, so graph mode is too).

// `&*x`: the operand syntax of `graph!` wants a place.
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
use cudagraph::{CaptureSlice, CaptureSliceMut, Error, GraphCache, Mode, Refusal, graph};

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

/// One use of a closure's views with safe cudarc on `st`.
#[derive(Clone, Copy, Debug)]
enum Use {
    /// `memcpy_dtod` from the `&` view into a buffer of the environment (`DevicePtr`).
    DtodFromView,
    /// `memset_zeros` of the `&mut` view (`DevicePtrMut`).
    Zero,
    /// `memcpy_dtoh` of the `&` view into a host `Vec`.
    Dtoh,
    /// `memcpy_htod` into a part of the `&mut` view.
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

/// Attack 1 (`Capture::accepts`, own stream checked first): a closure's views used with safe
/// cudarc on a stream that is not ordered with the call: another stream of the same context
/// object, a stream of another `Arc<CudaContext>` of the device, the per-thread stream and the
/// legacy default stream of either object (one handle for every context object), and in graph
/// mode the call's own stream not joined (its `Arc` from the environment and the view's
/// `DeviceSlice::stream`). Each use (`DevicePtr`, `DevicePtrMut`, to and from the host) must
/// panic before enqueuing anything: the environment buffer keeps its contents, and `t` holds
/// what the statement's own kernel wrote (eagerly) or nothing (captured: no launch). The cache
/// stays usable after every panic. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_views_on_streams_outside_the_call_panic_in_eager_and_graph_mode() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let b = CudaContext::new(0)?;
        let np = non_primary()?;
        let (s, other, sb, snp) =
            (a.new_stream()?, a.new_stream()?, b.new_stream()?, np.new_stream()?);
        let k = load(&a)?;
        let x = s.clone_htod(&input(1))?;
        let mut t = s.alloc_zeros::<u32>(LEN)?;
        let mut e = s.clone_htod(&vec![5u32; LEN])?;
        // The CPU stub driver gives every `CudaContext::new` a context of its own and cannot
        // capture: there the other primary object's streams and graph mode are left out.
        let same_primary = a.cu_ctx() == b.cu_ctx();
        let modes: &[Mode] = if stub() { &[Mode::Eager] } else { &[Mode::Eager, Mode::Graph] };
        for &mode in modes {
            let mut cache = GraphCache::new();
            cache.set_mode(mode);
            // `None`: the view's own `DeviceSlice::stream` (the call's stream). The flag: the
            // stream is of another `CUcontext` than the call's.
            let mut strays: Vec<(&str, Option<Arc<CudaStream>>, bool)> = vec![
                ("another stream of the context object", Some(other.clone()), false),
                ("the per-thread stream", Some(a.per_thread_stream()), false),
                ("the legacy default stream", Some(a.default_stream()), false),
                ("a stream of a non-primary context", Some(snp.clone()), true),
                ("a non-primary context's per-thread stream", Some(np.per_thread_stream()), true),
                ("a non-primary context's legacy default stream", Some(np.default_stream()), true),
            ];
            if same_primary {
                strays.push(("a stream of another context object", Some(sb.clone()), false));
                strays.push((
                    "another object's per-thread stream",
                    Some(b.per_thread_stream()),
                    false,
                ));
                strays.push((
                    "another object's legacy default stream",
                    Some(b.default_stream()),
                    false,
                ));
            }
            if mode == Mode::Graph {
                strays.push(("the call's stream, not joined", Some(s.clone()), false));
                strays.push(("the view's DeviceSlice::stream, not joined", None, false));
            }
            for (round, (what, st, foreign)) in strays.iter().enumerate() {
                for u in USES {
                    // Eagerly, cudarc's cross-context `memcpy_dtod` takes the source's pointer
                    // for its `DeviceSlice::stream` (the call's stream, accepted): the hole of
                    // `review26_hole_eager_view_read_by_cudarcs_cross_context_copy_is_unordered`.
                    if mode == Mode::Eager && *foreign && matches!(u, Use::DtodFromView) {
                        continue;
                    }
                    s.memset_zeros(&mut t)?;
                    let r = round as u32 * 4 + u as u32;
                    let (k, x, t, e) = (&k, &x, &mut t, &mut e);
                    let p = catch_unwind(AssertUnwindSafe(|| {
                        graph!(&mut cache, &s, {
                            capture(&*x, &mut *t, |c, (xv, mut tv)| {
                                let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                                c.kernel(k.slow_affine(N, SPINS, 3, r, xr, tw).launch(cfg()))?;
                                let st = match st {
                                    Some(st) => st.clone(),
                                    None => DeviceSlice::stream(&xv).clone(),
                                };
                                stray_use(&st, u, &xv, &mut tv, &mut *e)?;
                                Ok::<(), Error>(())
                            });
                        })
                    }));
                    let text = match p {
                        Ok(res) => panic!("{mode:?}, {what}, {u:?}: not refused ({res:?})"),
                        Err(p) => panic_text(p),
                    };
                    assert!(
                        text.contains(REFUSED),
                        "{mode:?}, {what}, {u:?}: panicked with {text}"
                    );
                    let want_t = if mode == Mode::Eager {
                        host::affine(&input(1), 3, r)
                    } else {
                        vec![0; LEN]
                    };
                    let at = format!("{mode:?}, {what}, {u:?}");
                    assert_same(&other.clone_dtoh(&*t)?, &want_t, &format!("{at}: t"));
                    assert_same(&other.clone_dtoh(&*e)?, &vec![5; LEN], &format!("{at}: e"));
                }
            }
            // The cache after the panics: a statement using its views only through the capture.
            graph!(&mut cache, &s, {
                capture(&x, &mut t, |c, (xv, mut tv)| {
                    let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                    c.kernel(k.slow_affine(N, SPINS, 5, 9, xr, tw).launch(cfg()))?;
                    c.copy(&xv.slice(0..16), &mut tv.slice_mut(0..16))?;
                    Ok::<(), Error>(())
                });
            })?;
            let mut want = host::affine(&input(1), 5, 9);
            want[..16].copy_from_slice(&input(1)[..16]);
            assert_same(&other.clone_dtoh(&t)?, &want, &format!("{mode:?}: after the panics"));
        }
        a.check_err()?;
        b.check_err()?;
        np.check_err()?;
        Ok(())
    })
}

/// Attack 2 (the own stream accepted by handle and context, not by object): eagerly, views used
/// with safe cudarc on other `Arc`s naming the call's stream: the same `Arc`, the view's
/// another `Arc` of the per-thread stream, the per-thread stream and the legacy default stream
/// of another `Arc<CudaContext>` of the device (each one physical stream with the call's on this
/// thread). (The view's own `DeviceSlice::stream` was one of them until the fix of hole 3: see
/// `review26_eager_view_s_own_stream_is_refused_as_in_graph_mode`.) They must be accepted and
/// run in stream order between the
/// statement's kernels: `w` is copied from `t` after the slow write of `t`, and scaled after
/// the copy; `t`'s head is zeroed after the copy. Read on another stream after the call.
/// Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_eager_views_on_other_handles_of_the_calls_stream_are_accepted_and_in_order() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let b = CudaContext::new(0)?;
        let (home, other, own) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let _b_manages = b.new_stream()?;
        let k = load(&a)?;
        let x = home.clone_htod(&input(3))?;
        let mut t = home.alloc_zeros::<u32>(LEN)?;
        let mut w = home.alloc_zeros::<u32>(LEN)?;
        home.synchronize()?;
        // (what, the call's stream, the stream the views are used on; `None`: the view's own
        // `DeviceSlice::stream`).
        let mut cases: Vec<(&str, Arc<CudaStream>, Option<Arc<CudaStream>>)> = vec![
            ("a new stream, the same Arc", own.clone(), Some(own.clone())),
            (
                "per-thread, another Arc of the object",
                a.per_thread_stream(),
                Some(a.per_thread_stream()),
            ),
        ];
        // The CPU stub driver gives every `CudaContext::new` a context of its own.
        if a.cu_ctx() == b.cu_ctx() {
            cases.push((
                "per-thread, of another context object",
                a.per_thread_stream(),
                Some(b.per_thread_stream()),
            ));
            cases.push((
                "legacy default, of another context object",
                a.default_stream(),
                Some(b.default_stream()),
            ));
        }
        for (case, (what, s, alt)) in cases.iter().enumerate() {
            let mut cache = GraphCache::new();
            cache.set_mode(Mode::Eager);
            for call in 0..3u32 {
                let r = case as u32 * 10 + call;
                graph!(&mut cache, s, {
                    capture(&x, &mut t, &mut w, |c, (xv, mut tv, mut wv)| {
                        let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                        c.kernel(k.slow_affine(N, SPINS, 3, r, xr, tw).launch(cfg()))?;
                        let st = match alt {
                            Some(st) => st.clone(),
                            None => DeviceSlice::stream(&tv).clone(),
                        };
                        st.memcpy_dtod(&tv, &mut wv)?;
                        c.kernel(k.affine_inplace(N, 5, 1, c.write(&mut wv)?).launch(cfg()))?;
                        st.memset_zeros(&mut tv.slice_mut(0..16))?;
                        Ok::<(), Error>(())
                    });
                })?;
                let mut want_t = host::affine(&input(3), 3, r);
                let mut want_w = want_t.clone();
                host::affine_inplace(&mut want_w, 5, 1);
                want_t[..16].fill(0);
                assert_same(&other.clone_dtoh(&t)?, &want_t, &format!("{what}, call {call}: t"));
                assert_same(&other.clone_dtoh(&w)?, &want_w, &format!("{what}, call {call}: w"));
            }
        }
        a.check_err()?;
        b.check_err()?;
        Ok(())
    })
}

/// One eager call on `s` whose statement forks `f` and runs `t = slow_affine(x, 3, r)` there,
/// not joined back (eagerly the pooled aliases' drop makes `s` wait for it). `then` runs last in
/// the closure. The operands are `(&mut d, &mut t, &x)` when `dummy` is given (`d`'s alias,
/// never used, is dropped first), else `(&x, &mut t)`.
#[allow(clippy::too_many_arguments)]
fn forked_slow_write(
    cache: &mut GraphCache,
    k: &common::Ops,
    s: &Arc<CudaStream>,
    f: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
    t: &mut CudaSlice<u32>,
    dummy: Option<&mut CudaSlice<u32>>,
    r: u32,
    then: &dyn Fn() -> Result,
) -> Result {
    let body = |c: &cudagraph::Capture,
                xv: &CaptureSlice<'_, u32>,
                tv: &mut CaptureSliceMut<'_, u32>|
     -> Result {
        // SAFETY: `f` is a stream of the capture's own context object (which manages
        // synchronization); it runs one launch reading N elements of the listed view `xv` and
        // writing N of the listed `&mut` view `tv`, and nothing else; the module stays loaded
        // (the test holds `k`).
        unsafe { c.fork(f) }?;
        // SAFETY: used on `f`, forked in above.
        let (xa, ta) = unsafe { (xv.as_cuda_view(), tv.as_cuda_view_mut()) };
        launch!(f, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &r, xa, ta)?;
        then()
    };
    match dummy {
        Some(d) => graph!(cache, s, {
            capture(&mut *d, &mut *t, &*x, |c, (_dv, mut tv, xv)| body(c, &xv, &mut tv));
        })?,
        None => graph!(cache, s, {
            capture(&*x, &mut *t, |c, (xv, mut tv)| body(c, &xv, &mut tv));
        })?,
    }
    Ok(())
}

/// A second eager call on `s`: `u = t[..LEN - 1]`, through a view of another length than the
/// forked statement's operand (another pool key: an alias with no event of the forked launch),
/// so only the call's stream's order puts it after the slow write.
fn copy_head(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    t: &CudaSlice<u32>,
    u: &mut CudaSlice<u32>,
) -> Result {
    let head = t.slice(0..LEN - 1);
    graph!(cache, s, {
        capture(&head, &mut *u, |c, (hv, mut uv)| {
            c.copy(&hv, &mut uv)?;
            Ok::<(), Error>(())
        });
    })?;
    Ok(())
}

/// Checks `t` and `u` of [`forked_slow_write`] + [`copy_head`] (read on `other`), then writes
/// `x` at once on `other` with the next call's input (the slow reader must be waited for).
fn check_forked(
    other: &Arc<CudaStream>,
    x: &mut CudaSlice<u32>,
    t: &CudaSlice<u32>,
    u: &CudaSlice<u32>,
    r: u32,
    next: u32,
    what: &str,
) -> Result {
    let want = host::affine(&input(r), 3, r);
    assert_same(
        &other.clone_dtoh(u)?,
        &want[..LEN - 1],
        &format!("{what}: u, the next call's copy"),
    );
    assert_same(&other.clone_dtoh(t)?, &want, &format!("{what}: t read on another stream"));
    other.memcpy_htod(&input(next), x)?;
    Ok(())
}

/// Attack 3, control of the two-GPU tests on one GPU: the forked slow write in an eager
/// statement whose call's stream is the per-thread stream or the legacy default stream (the
/// raw handles `0x2` and null, which mean the *current* context's stream), followed at once by
/// a copy on the call's stream through an alias of another key, and by reads and a write of `x`
/// on another stream; with and without a dummy first operand. On one GPU the current context is
/// always the call's. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_eager_fork_on_per_thread_and_legacy_call_streams_is_waited_for() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (f, other) = (a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let mut d = other.alloc_zeros::<u32>(LEN)?;
        for (name, s) in [("per-thread", a.per_thread_stream()), ("legacy", a.default_stream())] {
            let mut cache = GraphCache::new();
            cache.set_mode(Mode::Eager);
            let mut x = other.clone_htod(&input(0))?;
            let mut t = other.alloc_zeros::<u32>(LEN)?;
            let mut u = other.alloc_zeros::<u32>(LEN - 1)?;
            for call in 0..6u32 {
                let dummy = (call % 2 == 1).then_some(&mut d);
                forked_slow_write(&mut cache, &k, &s, &f, &x, &mut t, dummy, call, &|| Ok(()))?;
                copy_head(&mut cache, &s, &t, &mut u)?;
                check_forked(
                    &other,
                    &mut x,
                    &t,
                    &u,
                    call,
                    call + 1,
                    &format!("{name} call {call}"),
                )?;
            }
        }
        a.check_err()?;
        Ok(())
    })
}

/// Attack 4 (`swap_remove` and eviction beyond 64): 96 parts, each an eager call of two
/// statements (a slow write of `y[i]` from a part of `x`, forked to `f` for two parts in three,
/// else a `Capture::kernel`; then a copy of `y[i]`'s head into `z[i]` on the call's stream,
/// which reuses the alias just pooled by the first statement), three distinct pool keys per
/// part: 288 keys through a pool of 64, visited each round in another order (forward, reverse,
/// stride 37, a shuffle), so that reuse moves entries around and eviction takes entries used
/// recently and long ago. Between rounds every `y` is freed without a synchronization and
/// allocated again at once in reverse order (addresses handed to other parts, whose pool keys
/// then name memory of another part). Every part is read on another stream after each round.
/// Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_pool_beyond_64_with_permuted_reuse_forks_and_reallocation_stays_exact() -> Result {
    let _serial = serial();
    const PARTS: usize = 96;
    const K: usize = 512;
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, f, other) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let model_x = input(26);
        let x = s.clone_htod(&model_x)?;
        let mut ys = common::buffers(&s, PARTS, K)?;
        let mut zs = common::buffers(&s, PARTS, K)?;
        let mut want_z = vec![vec![0u32; K]; PARTS];
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        let n = K as u32;
        let cfg_k = LaunchConfig::for_num_elems(n);
        let mut seed = 26u64;
        for round in 0..4u32 {
            let order: Vec<usize> = match round {
                0 => (0..PARTS).collect(),
                1 => (0..PARTS).rev().collect(),
                2 => (0..PARTS).map(|i| (i * 37) % PARTS).collect(),
                _ => {
                    let mut o: Vec<usize> = (0..PARTS).collect();
                    for i in (1..PARTS).rev() {
                        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        o.swap(i, (seed >> 33) as usize % (i + 1));
                    }
                    o
                }
            };
            let mut want_y = vec![vec![0u32; K]; PARTS];
            for &i in &order {
                let b = round * 1000 + i as u32;
                let fork = !(i + round as usize).is_multiple_of(3);
                let xs = x.slice(i * K..(i + 1) * K);
                let (y, z) = (&mut ys[i], &mut zs[i]);
                let (k, f) = (&k, &f);
                graph!(&mut cache, &s, {
                    capture(&xs, &mut *y, |c, (xv, mut yv)| {
                        if fork {
                            // SAFETY: as in `forked_slow_write`, for K elements.
                            unsafe { c.fork(f) }?;
                            // SAFETY: used on `f`, forked in above.
                            let (xa, ya) = unsafe { (xv.as_cuda_view(), yv.as_cuda_view_mut()) };
                            launch!(f, k, "slow_affine", cfg_k; &n, &(SPINS / 8), &3u32, &b, xa, ya)?;
                        } else {
                            let (xr, yw) = (c.read(&xv)?, c.write(&mut yv)?);
                            c.kernel(k.slow_affine(n, SPINS / 8, 3, b, xr, yw).launch(cfg_k))?;
                        }
                        Ok::<(), Error>(())
                    });
                    capture(&*y, &mut *z, |c, (yv, mut zv)| {
                        c.copy(&yv.slice(0..K - 1), &mut zv.slice_mut(0..K - 1))?;
                        Ok::<(), Error>(())
                    });
                })?;
                want_y[i] = host::affine(&model_x[i * K..(i + 1) * K], 3, b);
                want_z[i][..K - 1].copy_from_slice(&want_y[i][..K - 1]);
            }
            for i in 0..PARTS {
                let at = format!("round {round} part {i}");
                assert_same(&other.clone_dtoh(&ys[i])?, &want_y[i], &format!("{at}: y"));
                assert_same(&other.clone_dtoh(&zs[i])?, &want_z[i], &format!("{at}: z"));
            }
            // Freed without a synchronization, allocated again at once in reverse order.
            drop(std::mem::take(&mut ys));
            ys = common::buffers(&s, PARTS, K)?;
            ys.reverse();
        }
        a.check_err()?;
        Ok(())
    })
}

/// Attack 5 (panics): a closure that forks, enqueues the slow write of `t` on the forked stream
/// and then panics (every other call). The panic propagates, and still `t` read on another
/// stream and `x` written there at once must wait for the slow launch; the same pooled aliases
/// are then taken again by a statement without a fork (a copy of `t` on the call's stream).
/// Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_pool_panic_after_a_forked_slow_write_is_still_waited_for() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, f, other) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let mut x = s.clone_htod(&input(0))?;
        let mut t = s.alloc_zeros::<u32>(LEN)?;
        let mut u = s.alloc_zeros::<u32>(LEN)?;
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        for call in 0..6u32 {
            let panics = call % 2 == 0;
            let then = || -> Result {
                assert!(!panics, "review26: a panic after the forked launch");
                Ok(())
            };
            let p = catch_unwind(AssertUnwindSafe(|| {
                forked_slow_write(&mut cache, &k, &s, &f, &x, &mut t, None, call, &then)
            }));
            match p {
                Ok(r) => r?,
                Err(p) => {
                    assert!(panics, "call {call}: an unexpected panic");
                    assert!(panic_text(p).contains("review26"), "call {call}: another panic");
                }
            }
            let want = host::affine(&input(call), 3, call);
            other.memcpy_htod(&input(call + 1), &mut x)?;
            assert_same(&other.clone_dtoh(&t)?, &want, &format!("call {call}: t"));
            graph!(&mut cache, &s, {
                capture(&t, &mut u, |c, (tv, mut uv)| {
                    c.copy(&tv, &mut uv)?;
                    Ok::<(), Error>(())
                });
            })?;
            assert_same(&other.clone_dtoh(&u)?, &want, &format!("call {call}: u"));
        }
        a.check_err()?;
        Ok(())
    })
}

/// Attack 6 (the pool is per thread): four threads at once, each with its own streams, cache
/// and buffers, make one eager call whose statement forks a slow write (or, for one thread of
/// two, launches it with `Capture::kernel`) and exit at once: their pools (with the aliases'
/// events) and streams are dropped while the slow work runs. The main thread then writes each
/// `x` and reads each `t` on another stream at once. Three waves. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_pool_threads_exit_with_forked_slow_work_in_flight() -> Result {
    let _serial = serial();
    let a = CudaContext::new(0)?;
    let other = a.new_stream()?;
    let k = load(&a)?;
    let mut xs: Vec<CudaSlice<u32>> =
        (0..4).map(|i| other.clone_htod(&input(i))).collect::<std::result::Result<_, _>>()?;
    let mut ts = common::buffers(&other, 4, LEN)?;
    other.synchronize()?;
    let mut inputs: Vec<u32> = (0..4).collect();
    for wave in 0..3u32 {
        std::thread::scope(|sc| -> Result {
            let mut handles = Vec::new();
            for (i, (x, t)) in xs.iter().zip(ts.iter_mut()).enumerate() {
                let (a, k) = (&a, &k);
                handles.push(sc.spawn(move || -> Result {
                    let (s, f) = (a.new_stream()?, a.new_stream()?);
                    let mut cache = GraphCache::new();
                    cache.set_mode(Mode::Eager);
                    let r = wave * 10 + i as u32;
                    if i % 2 == 0 {
                        forked_slow_write(&mut cache, k, &s, &f, x, t, None, r, &|| Ok(()))?;
                    } else {
                        graph!(&mut cache, &s, {
                            capture(&*x, &mut *t, |c, (xv, mut tv)| {
                                let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                                c.kernel(k.slow_affine(N, SPINS, 3, r, xr, tw).launch(cfg()))?;
                                Ok::<(), Error>(())
                            });
                        })?;
                    }
                    Ok(())
                }));
            }
            for h in handles {
                h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
            }
            Ok(())
        })?;
        for i in 0..4 {
            let r = wave * 10 + i as u32;
            let want = host::affine(&input(inputs[i]), 3, r);
            inputs[i] = 100 + wave * 4 + i as u32;
            other.memcpy_htod(&input(inputs[i]), &mut xs[i])?;
            assert_same(&other.clone_dtoh(&ts[i])?, &want, &format!("wave {wave} thread {i}: t"));
        }
    }
    a.check_err()?;
    Ok(())
}

/// Attack 7 (the pool key's event tracking): aliases pooled while cudarc's event tracking is on
/// (with events, recorded by a forked launch) and while it is off (no events); tracking toggled
/// between calls with the documented contract kept (the context synchronized before each
/// toggle; while off, the buffers are used on one stream only). While off the fork is refused
/// and a statement's kernel and copy run on the call's stream; once on again, the forked call
/// must be waited for by another stream, which an alias without events (made while off) could
/// not do. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_pool_keyed_by_event_tracking_across_toggles() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, f, other) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let mut x = s.clone_htod(&input(0))?;
        let mut t = s.alloc_zeros::<u32>(LEN)?;
        let mut u = s.alloc_zeros::<u32>(LEN - 1)?;
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        for round in 0..3u32 {
            let r = round * 2;
            forked_slow_write(&mut cache, &k, &s, &f, &x, &mut t, None, r, &|| Ok(()))?;
            copy_head(&mut cache, &s, &t, &mut u)?;
            check_forked(&other, &mut x, &t, &u, r, r + 1, &format!("round {round}, on"))?;
            a.synchronize()?;
            // SAFETY: nothing is in flight (synchronized); while tracking is off the buffers are
            // used on `s` only, and the context is synchronized again before it is turned on.
            unsafe { a.disable_event_tracking() };
            let refused =
                forked_slow_write(&mut cache, &k, &s, &f, &x, &mut t, None, 99, &|| Ok(()));
            assert!(refused.is_err(), "round {round}: the fork is refused with tracking off");
            let r1 = r + 1;
            graph!(&mut cache, &s, {
                capture(&x, &mut t, |c, (xv, mut tv)| {
                    let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                    c.kernel(k.slow_affine(N, SPINS, 3, r1, xr, tw).launch(cfg()))?;
                    Ok::<(), Error>(())
                });
            })?;
            copy_head(&mut cache, &s, &t, &mut u)?;
            let want = host::affine(&input(r1), 3, r1);
            assert_same(&s.clone_dtoh(&u)?, &want[..LEN - 1], &format!("round {round}, off: u"));
            assert_same(&s.clone_dtoh(&t)?, &want, &format!("round {round}, off: t"));
            s.memcpy_htod(&input(r1 + 1), &mut x)?;
            a.synchronize()?;
            // SAFETY: synchronized; the buffers made while off are the pool's aliases only,
            // which the pool keeps apart (their key says tracking off).
            unsafe { a.enable_event_tracking() };
        }
        a.check_err()?;
        Ok(())
    })
}

/// Attack 8 (nested calls): an eager statement forks `f` and writes `t` there slowly; inside
/// it, an eager `graph!` call *on `f`* (the inner call's own stream) copies the outer view `t`
/// into its own view `w` with cudarc on `f` (accepted by both captures) and scales `w`; the
/// outer statement is not joined, and the next statement copies `t` into `u` on the call's
/// stream. Then, with an inner call in graph mode (its capture's stream is this thread's
/// private origin): the outer view given to the inner `Capture::copy` is refused
/// (`NotAnOperand`), and the outer view with the inner view on the call's stream (accepted by
/// the outer capture, not by the inner one) panics. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_nested_calls_on_a_forked_stream_and_in_a_nested_capture() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, f, other) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let x = s.clone_htod(&input(8))?;
        let [mut t, mut u, mut w] = std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
        let mut outer = GraphCache::new();
        outer.set_mode(Mode::Eager);
        let mut inner = GraphCache::new();
        inner.set_mode(Mode::Eager);
        for call in 0..4u32 {
            let (k, f, w, inner) = (&k, &f, &mut w, &mut inner);
            graph!(&mut outer, &s, {
                capture(&x, &mut t, |c, (xv, mut tv)| {
                    // SAFETY: as in `forked_slow_write`; besides, the nested call below runs on
                    // `f` over `w`, a buffer of its own, and reads the listed view `tv` there.
                    unsafe { c.fork(f) }?;
                    {
                        // SAFETY: used on `f`, forked in above.
                        let (xa, ta) = unsafe { (xv.as_cuda_view(), tv.as_cuda_view_mut()) };
                        launch!(f, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &call, xa, ta)?;
                    }
                    let tv = &tv;
                    graph!(inner, f, {
                        capture(&mut *w, |c2, (mut wv,)| {
                            f.memcpy_dtod(tv, &mut wv)?;
                            c2.kernel(k.affine_inplace(N, 5, 1, c2.write(&mut wv)?).launch(cfg()))?;
                            Ok::<(), Error>(())
                        });
                    })?;
                    Ok::<(), Error>(())
                });
                capture(&t, &mut u, |c, (tv, mut uv)| {
                    c.copy(&tv, &mut uv)?;
                    Ok::<(), Error>(())
                });
            })?;
            let want_t = host::affine(&input(8), 3, call);
            let mut want_w = want_t.clone();
            host::affine_inplace(&mut want_w, 5, 1);
            assert_same(&other.clone_dtoh(&t)?, &want_t, &format!("call {call}: t"));
            assert_same(&other.clone_dtoh(&u)?, &want_t, &format!("call {call}: u"));
            assert_same(&other.clone_dtoh(&*w)?, &want_w, &format!("call {call}: w"));
        }
        // The inner call in graph mode (the CPU stub driver cannot capture).
        let mut inner_graph = GraphCache::new();
        inner_graph.set_mode(Mode::Graph);
        let graph_parts: &[bool] = if stub() { &[] } else { &[false, true] };
        for &on_stream in graph_parts {
            let (k, w, ig, s2) = (&k, &mut w, &mut inner_graph, &s);
            let p = catch_unwind(AssertUnwindSafe(|| {
                graph!(&mut outer, &s, {
                    capture(&x, &mut t, |c, (xv, mut tv)| {
                        let (xr, tw) = (c.read(&xv)?, c.write(&mut tv)?);
                        c.kernel(k.slow_affine(N, SPINS, 7, 1, xr, tw).launch(cfg()))?;
                        let tv = &tv;
                        graph!(ig, s2, {
                            capture(&mut *w, |c2, (mut wv,)| {
                                if on_stream {
                                    s2.memcpy_dtod(tv, &mut wv)?;
                                } else {
                                    let r = c2.copy(tv, &mut wv);
                                    assert!(
                                        matches!(
                                            r,
                                            Err(Error::NodeRefused {
                                                why: Refusal::NotAnOperand { .. },
                                                ..
                                            })
                                        ),
                                        "the outer view in the inner capture's copy: {r:?}"
                                    );
                                }
                                Ok::<(), Error>(())
                            });
                        })?;
                        Ok::<(), Error>(())
                    });
                })
            }));
            match (on_stream, p) {
                (false, Ok(r)) => r?,
                (true, Err(p)) => {
                    let text = panic_text(p);
                    assert!(text.contains(REFUSED), "on the call's stream: panicked with {text}");
                }
                (false, Err(p)) => panic!("refused copy: a panic {}", panic_text(p)),
                (true, Ok(r)) => panic!("the inner view on the call's stream: not refused ({r:?})"),
            }
            // The outer statement's kernel ran (eagerly) before the inner call either way.
            let want_t = host::affine(&input(8), 7, 1);
            assert_same(&other.clone_dtoh(&t)?, &want_t, &format!("graph inner ({on_stream}): t"));
        }
        a.check_err()?;
        Ok(())
    })
}

/// Devices 0 and 1 (a panic saying how many GPUs there are otherwise).
#[cfg(feature = "multi-gpu")]
fn device_1() -> Result<Arc<CudaContext>> {
    let found = CudaContext::device_count()?;
    assert!(found >= 2, "needs two GPUs, found {found}");
    Ok(CudaContext::new(1)?)
}

/// Hole 1: the forked slow write of `forked_slow_write` on a call whose stream is device 0's
/// per-thread or legacy default stream, with a closure whose last cudarc call reads a buffer of
/// `second` (another `CUcontext`: cudarc makes it current). Nothing of the crate's makes the
/// call's context current again before the pooled aliases' drop, whose raw
/// `cuStreamWaitEvent(0x2 or null, e)` then makes *`second`'s* per-thread / legacy stream wait,
/// not the call's: the next call's copy (`u`) and another stream's read of `t` run before the
/// slow write ends, and `x` is overwritten under the slow reader.
fn fork_with_another_context_current(second: Arc<CudaContext>) -> Result {
    let a = CudaContext::new(0)?;
    let s2 = second.new_stream()?;
    let b2 = s2.clone_htod(&[1u32; 16][..])?;
    let (f, other) = (a.new_stream()?, a.new_stream()?);
    let k = load(&a)?;
    for (name, s) in [("per-thread", a.per_thread_stream()), ("legacy", a.default_stream())] {
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        let mut x = other.clone_htod(&input(0))?;
        let mut t = other.alloc_zeros::<u32>(LEN)?;
        let mut u = other.alloc_zeros::<u32>(LEN - 1)?;
        for call in 0..4u32 {
            let there = || -> Result {
                let _ = s2.clone_dtoh(&b2)?; // safe cudarc on `second`: binds its context
                Ok(())
            };
            forked_slow_write(&mut cache, &k, &s, &f, &x, &mut t, None, call, &there)?;
            copy_head(&mut cache, &s, &t, &mut u)?;
            check_forked(&other, &mut x, &t, &u, call, call + 1, &format!("{name} call {call}"))?;
        }
    }
    a.check_err()?;
    second.check_err()?;
    Ok(())
}

/// Hole 2, without any call on `second` in the closure: this thread's pool is first filled with
/// 64 eager aliases of `second` (64 eager calls on a stream of `second` over 64 new slices each
/// round, which flush the pool), then the forked statement on device 0's per-thread / legacy
/// stream lists a dummy operand first: its alias's drop pushes it into the full pool, which
/// evicts an alias of `second`, whose `leak` (cudarc's `CudaStream::wait`) makes `second`
/// current; `t`'s and `x`'s pooled aliases then wait on `second`'s stream.
fn fork_after_evicting_another_contexts_alias(second: Arc<CudaContext>) -> Result {
    const FILL: usize = 64;
    const PART: usize = 16;
    let rounds = 4u32;
    let a = CudaContext::new(0)?;
    let s2 = second.new_stream()?;
    let (f, other) = (a.new_stream()?, a.new_stream()?);
    let k = load(&a)?;
    let mut p2 = s2.alloc_zeros::<u32>(2 * FILL * PART * rounds as usize)?;
    let mut d = other.alloc_zeros::<u32>(LEN)?;
    let mut fill = GraphCache::new();
    fill.set_mode(Mode::Eager);
    let mut next = 0usize;
    for (name, s) in [("per-thread", a.per_thread_stream()), ("legacy", a.default_stream())] {
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        let mut x = other.clone_htod(&input(0))?;
        let mut t = other.alloc_zeros::<u32>(LEN)?;
        let mut u = other.alloc_zeros::<u32>(LEN - 1)?;
        for call in 0..rounds {
            for _ in 0..FILL {
                let mut part = p2.slice_mut(next * PART..(next + 1) * PART);
                next += 1;
                graph!(&mut fill, &s2, {
                    capture(&mut part, |c, (mut pv,)| {
                        c.zero(&mut pv)?;
                        Ok::<(), Error>(())
                    });
                })?;
            }
            let dummy = Some(&mut d);
            forked_slow_write(&mut cache, &k, &s, &f, &x, &mut t, dummy, call, &|| Ok(()))?;
            copy_head(&mut cache, &s, &t, &mut u)?;
            check_forked(&other, &mut x, &t, &u, call, call + 1, &format!("{name} call {call}"))?;
        }
    }
    a.check_err()?;
    second.check_err()?;
    Ok(())
}

/// Hole 3 (the view check bypassed by cudarc): eagerly, `s2.memcpy_dtod(&xv, &mut e2)` with `s2`
/// a stream of another `CUcontext` and `e2` a buffer of it (no `unsafe` anywhere). cudarc sees
/// two contexts and takes its cross-context branch: it takes the source's pointer with
/// `src.device_ptr(src.stream())`, and a view's `DeviceSlice::stream` is the call's stream,
/// which eagerly is the capture's own stream, accepted; then it enqueues the copy on `s2`
/// (after an event of the call's stream), which neither the crate nor the listed buffer's
/// events order before `x`'s later users. `s2` is kept busy by a slow kernel first, and right
/// after the call another stream of device 0 overwrites `x` as its events allow: the copy then
/// reads the new data (or, freed, another buffer's). `e2` must hold `x` as it was during the
/// call. (The same copy of a plain `CudaSlice` is cudarc's own race: measured and printed
/// first, not asserted.)
fn view_read_by_cudarcs_cross_context_copy(second: Arc<CudaContext>) -> Result {
    let a = CudaContext::new(0)?;
    let (s, other) = (a.new_stream()?, a.new_stream()?);
    let s2 = second.new_stream()?;
    let k2 = load(&second)?;
    let mut busy = s2.alloc_zeros::<u32>(LEN)?;
    let mut e2 = s2.alloc_zeros::<u32>(LEN)?;
    let mut x = s.clone_htod(&input(0))?;
    s.synchronize()?;
    // cudarc alone, for comparison (not on the CPU stub driver: no `cuMemcpyPeerAsync`).
    let mut plain_races = 0;
    for call in 0..if stub() { 0 } else { 4u32 } {
        other.memcpy_htod(&input(call), &mut x)?;
        launch!(&s2, &k2, "slow_iota", cfg(); &N, &SPINS, &1u32, &call, &mut busy)?;
        s2.memcpy_dtod(&x, &mut e2)?;
        other.memcpy_htod(&input(call + 50), &mut x)?;
        plain_races += usize::from(s2.clone_dtoh(&e2)? != input(call));
    }
    eprintln!("cudarc alone (a CudaSlice of device 0 copied on s2): {plain_races} of 4 raced");
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    other.memcpy_htod(&input(100), &mut x)?;
    for call in 0..4u32 {
        launch!(&s2, &k2, "slow_iota", cfg(); &N, &SPINS, &1u32, &call, &mut busy)?;
        let before = s2.clone_dtoh(&e2)?;
        let (s2r, e2r, xr) = (&s2, &mut e2, &x);
        let run = catch_unwind(AssertUnwindSafe(|| {
            graph!(&mut cache, &s, {
                capture(&*xr, |_c, (xv,)| {
                    s2r.memcpy_dtod(&xv, &mut *e2r)?;
                    Ok::<(), Error>(())
                });
            })
        }));
        // Since the fix: the view's `DeviceSlice::stream` is a stream no capture accepts, so
        // cudarc's cross-context branch panics at the view check before enqueuing anything.
        match run {
            Ok(r) => {
                r?;
                panic!(
                    "HOLE: call {call}: the view was read by a copy on another context's stream"
                );
            }
            Err(p) => {
                let text = panic_text(p);
                assert!(text.contains(REFUSED), "call {call}: another panic: {text}");
            }
        }
        other.memcpy_htod(&input(call + 101), &mut x)?;
        assert_same(&s2.clone_dtoh(&e2)?, &before, &format!("call {call}: e2 untouched"));
    }
    a.check_err()?;
    second.check_err()?;
    Ok(())
}

/// Hole 1 on one GPU (the second context: a non-primary context of device 0). Fixed in session
/// 26: `Alias::drop` makes the call's context current for its wait.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_hole_eager_fork_with_a_non_primary_context_current_at_the_closures_end() -> Result {
    let _serial = serial();
    fresh_thread(|| fork_with_another_context_current(non_primary()?))
}

/// Hole 2 on one GPU (non-primary context). Fixed in session 26, as hole 1.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_hole_eager_fork_after_evicting_a_non_primary_contexts_pooled_alias() -> Result {
    let _serial = serial();
    fresh_thread(|| fork_after_evicting_another_contexts_alias(non_primary()?))
}

/// Hole 3 on one GPU (non-primary context): a view's `DeviceSlice::stream` let cudarc's
/// cross-context copy read a listed operand on an unaccepted stream. Fixed in session 26 (the
/// view's stream is one no capture accepts): the copy is refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_hole_eager_view_read_by_cudarcs_cross_context_copy_is_unordered() -> Result {
    let _serial = serial();
    fresh_thread(|| view_read_by_cudarcs_cross_context_copy(non_primary()?))
}

/// Hole 1 with device 1 as the second context (fixed as on one GPU).
#[cfg(feature = "multi-gpu")]
#[test]
#[ignore = "needs two CUDA GPUs"]
fn review26_multi_gpu_eager_fork_with_device_1_current_at_the_closures_end() -> Result {
    let _serial = serial();
    fresh_thread(|| fork_with_another_context_current(device_1()?))
}

/// Hole 2 with device 1 (fixed as on one GPU).
#[cfg(feature = "multi-gpu")]
#[test]
#[ignore = "needs two CUDA GPUs"]
fn review26_multi_gpu_eager_fork_after_evicting_a_device_1_pooled_alias() -> Result {
    let _serial = serial();
    fresh_thread(|| fork_after_evicting_another_contexts_alias(device_1()?))
}

/// Hole 3 with device 1 (a peer copy; refused as on one GPU).
#[cfg(feature = "multi-gpu")]
#[test]
#[ignore = "needs two CUDA GPUs"]
fn review26_multi_gpu_eager_view_read_by_a_peer_copy_on_device_1_is_unordered() -> Result {
    let _serial = serial();
    fresh_thread(|| view_read_by_cudarcs_cross_context_copy(device_1()?))
}

/// Hole 3's fix, from the other side: a closure's view used on its own `DeviceSlice::stream`
/// is refused eagerly, as it always was while capturing (there the call's stream, not part of
/// the capture unless joined): a same-context `memcpy_dtod` of the `&mut` view into the other
/// panics at the view check, after the statement's own kernel, and enqueues nothing; the cache
/// stays usable. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review26_eager_view_s_own_stream_is_refused_as_in_graph_mode() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, other) = (a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let x = s.clone_htod(&input(4))?;
        let mut t = s.alloc_zeros::<u32>(LEN)?;
        let mut w = s.clone_htod(&input(9))?;
        s.synchronize()?;
        for mode in [Mode::Eager, Mode::Graph] {
            if mode == Mode::Graph && stub() {
                continue; // the CPU stub driver cannot capture
            }
            let mut cache = GraphCache::new();
            cache.set_mode(mode);
            for call in 0..2u32 {
                let (xr, tr, wr) = (&x, &mut t, &mut w);
                let run = catch_unwind(AssertUnwindSafe(|| {
                    graph!(&mut cache, &s, {
                        capture(&*xr, &mut *tr, &mut *wr, |c, (xv, mut tv, mut wv)| {
                            let (xh, th) = (c.read(&xv)?, c.write(&mut tv)?);
                            c.kernel(k.slow_affine(N, SPINS, 3, call, xh, th).launch(cfg()))?;
                            let st = DeviceSlice::stream(&tv).clone();
                            st.memcpy_dtod(&tv, &mut wv)?;
                            Ok::<(), Error>(())
                        });
                    })
                }));
                let what = format!("{mode:?} call {call}");
                match run {
                    Ok(r) => {
                        r?;
                        panic!("{what}: the view was used on its DeviceSlice::stream");
                    }
                    Err(p) => {
                        let text = panic_text(p);
                        assert!(text.contains(REFUSED), "{what}: another panic: {text}");
                    }
                }
                assert_same(&other.clone_dtoh(&w)?, &input(9), &format!("{what}: w untouched"));
            }
            // Usable after the panics: the same statement without the stray copy.
            graph!(&mut cache, &s, {
                capture(&x, &mut t, |c, (xv, mut tv)| {
                    let (xh, th) = (c.read(&xv)?, c.write(&mut tv)?);
                    c.kernel(k.slow_affine(N, SPINS, 3, 7, xh, th).launch(cfg()))?;
                    Ok::<(), Error>(())
                });
            })?;
            let want = host::affine(&input(4), 3, 7);
            assert_same(&other.clone_dtoh(&t)?, &want, &format!("{mode:?}: after the panics"));
        }
        a.check_err()?;
        Ok(())
    })
}
