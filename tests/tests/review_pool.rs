//! Review 11c: the per-thread pool of eager aliases (`Alias::pooled` in `session.rs`, commit
//! 55c4a18). Eager capture statements now reuse an alias (its `CudaSlice`, events and cached
//! `Listed`) per (stream, context, address, length, element type, tracking), and a pooled alias
//! waits on its events at its drop only when the closure forked (`Capture::forked`).
//!
//! Safe code only, besides the documented `unsafe { c.fork(..) }` / `as_cuda_view` with their
//! contracts kept (a stream of the capture's own, managed, context object). Every result is
//! compared exactly with a host model; the slow kernel (`slow_affine`, a slow reader *and*
//! writer whose output does not depend on the spins) runs a few milliseconds on an H200, so a
//! missing wait shows as wrong data. Expected on a GPU: all pass (pass = safe).

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::{Ops, Result, assert_same, fresh_thread, host, launch, load};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudagraph::{Error, GraphCache, Mode, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of `slow_affine`: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn input(r: u32) -> Vec<u32> {
    host::iota(N, 2_654_435_761, r.wrapping_mul(977))
}

/// The device address of `b`.
fn addr<T>(b: &CudaSlice<T>, s: &Arc<CudaStream>) -> u64 {
    b.device_ptr(s).0
}

/// One eager (or graph) call: statement 1 forks `f` and runs `t = slow_affine(x, 3, r)` there
/// (joined back when `join`), statement 2 copies `t` into `u` on the call's stream.
/// `&*x`: the operand syntax of `graph!` wants a place.
#[allow(clippy::too_many_arguments, clippy::borrow_deref_ref)]
fn forked_call(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    f: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
    t: &mut CudaSlice<u32>,
    u: &mut CudaSlice<u32>,
    r: u32,
    join: bool,
) -> Result {
    graph!(cache, s, {
        capture(&*x, &mut *t, |c, (x, mut t)| {
            // SAFETY: `f` is a stream of the capture's own context object (which manages
            // synchronization); until the join (or the closure's end, eagerly) it runs one
            // launch reading N elements of the listed view x and writing N of the listed `&mut`
            // view t, and nothing else; the module stays loaded (the test holds `k`).
            unsafe { c.fork(f) }?;
            // SAFETY: used on `f`, forked in above.
            let (xv, tv) = unsafe { (x.as_cuda_view(), t.as_cuda_view_mut()) };
            launch!(f, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &r, xv, tv)?;
            if join || c.is_capturing() {
                c.join(f)?;
            }
            Ok::<(), Error>(())
        });
        capture(&*t, &mut *u, |c, (t, mut u)| {
            c.copy(&t, &mut u)?;
            Ok::<(), Error>(())
        });
    })?;
    Ok(())
}

/// Attack 1: a forked slow reader of `x` / writer of `t` in an eager statement whose pooled
/// alias is reused call after call (its `Listed` cached, no `leak`), joined back or not (eagerly
/// the fork only orders `f` after the call's stream). The next statement on the call's stream
/// must read `t` after the slow write, and another stream must neither write `x` under the slow
/// reader nor read `t` before the write: only the pooled alias's drop-time wait orders them.
/// Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_pool_forked_slow_work_is_waited_for_by_the_next_statement_and_other_streams() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, f, other) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let mut x = s.clone_htod(&input(0))?;
        let [mut t, mut u] = std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        for call in 0..8u32 {
            let join = call % 4 >= 2;
            forked_call(&mut cache, &k, &s, &f, &x, &mut t, &mut u, call, join)?;
            // Safe cudarc on another stream right after the call: must wait for the slow
            // reader of x (x's read event) and the slow writer of t (t's write event).
            other.memcpy_htod(&input(call + 1), &mut x)?;
            let got_t = other.clone_dtoh(&t)?;
            let got_u = other.clone_dtoh(&u)?;
            let want = host::affine(&input(call), 3, call);
            assert_same(
                &got_t,
                &want,
                &format!("call {call} (join {join}): t read on another stream"),
            );
            assert_same(
                &got_u,
                &want,
                &format!("call {call} (join {join}): u, the next statement's copy"),
            );
        }
        a.check_err()?;
        Ok(())
    })
}

/// Attack 2: the pool's key versus memory freed and reallocated. An alias of `LEN` `u32` at an
/// address is pooled; then the buffer is freed and the address handed out again to a longer
/// buffer listed through views of other lengths, and to bytes (`u8`) of the same size: each
/// statement must zero exactly its operand (an alias of the old length or type would zero the
/// wrong range or count) and read exactly the new contents. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_pool_reallocated_address_with_other_length_or_type_stays_in_bounds() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let s = a.new_stream()?;
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        let mut w = s.clone_htod(&vec![5u32; LEN])?;
        let at = addr(&w, &s);
        let mut z = s.alloc_zeros::<u32>(LEN)?;
        graph!(&mut cache, &s, {
            capture(&mut w, |c, (mut w,)| {
                c.zero(&mut w)?;
                Ok::<(), Error>(())
            });
        })?;
        drop(w);
        let mut reused = 0;
        for round in 0..6u32 {
            // A longer buffer at (if the allocator hands it out again) the freed address.
            let mut big = s.clone_htod(&vec![7u32 + round; 2 * LEN])?;
            reused += usize::from(addr(&big, &s) == at);
            let half = LEN / 2 + round as usize;
            {
                let mut head = big.slice_mut(0..half);
                graph!(&mut cache, &s, {
                    capture(&mut head, |c, (mut h,)| {
                        c.zero(&mut h)?;
                        Ok::<(), Error>(())
                    });
                })?;
            }
            // The same address and length as the pooled alias: reused, reads the new data.
            let head = big.slice(0..LEN);
            graph!(&mut cache, &s, {
                capture(&head, &mut z, |c, (h, mut z)| {
                    c.copy(&h, &mut z)?;
                    Ok::<(), Error>(())
                });
            })?;
            let got = s.clone_dtoh(&big)?;
            let mut want = vec![7u32 + round; 2 * LEN];
            want[..half].fill(0);
            assert_same(&got, &want, &format!("round {round}: big after zeroing {half}"));
            assert_same(&s.clone_dtoh(&z)?, &want[..LEN], &format!("round {round}: z"));
            drop(big);
            // Bytes at the address: 4 * LEN u8, zero its first `half` bytes only.
            let mut bytes = s.clone_htod(&vec![9u8; 4 * LEN])?;
            reused += usize::from(addr(&bytes, &s) == at);
            {
                let mut head = bytes.slice_mut(0..half);
                graph!(&mut cache, &s, {
                    capture(&mut head, |c, (mut h,)| {
                        c.zero(&mut h)?;
                        Ok::<(), Error>(())
                    });
                })?;
            }
            let mut want = vec![9u8; 4 * LEN];
            want[..half].fill(0);
            assert_same(&s.clone_dtoh(&bytes)?, &want, &format!("round {round}: bytes"));
        }
        println!("address handed out again {reused} times of 12");
        a.check_err()?;
        Ok(())
    })
}

/// Attack 3: one buffer listed twice in a statement, an eager statement nested in another's
/// closure on the same thread and stream over the same buffer (the inner call takes its own
/// alias while the outer's is out of the pool), and a closure that panics after enqueuing work:
/// each result must equal the host model and the pool must stay usable. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
#[allow(clippy::borrow_deref_ref)] // `&*xr`: the operand syntax of `graph!` wants a place
fn review_pool_duplicate_nested_and_panicking_statements_stay_exact() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let s = a.new_stream()?;
        let k = load(&a)?;
        let x = s.clone_htod(&input(3))?;
        let [mut y, mut z, mut v] = std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        let mut inner = GraphCache::new();
        inner.set_mode(Mode::Eager);
        for call in 0..4u32 {
            let (inner, z, k2, xr) = (&mut inner, &mut z, &k, &x);
            graph!(&mut cache, &s, {
                capture(&x, &x, &mut y, |c, (x1, x2, mut y)| {
                    let (a1, b1, c1) = (c.read(&x1)?, c.read(&x2)?, c.read(&x1)?);
                    c.kernel(k.combine3(N, a1, b1, c1, c.write(&mut y)?).launch(cfg()))?;
                    graph!(inner, &s, {
                        capture(&*xr, &mut *z, |c, (x, mut z)| {
                            let (xa, zw) = (c.read(&x)?, c.write(&mut z)?);
                            c.kernel(k2.slow_affine(N, SPINS, 5, call, xa, zw).launch(cfg()))?;
                            Ok::<(), Error>(())
                        });
                    })
                    .map_err(|e| Error::Capture {
                        file: file!(),
                        line: line!(),
                        source: e.into(),
                    })?;
                    c.copy(&x2.slice(0..16), &mut y.slice_mut(0..16))?;
                    Ok::<(), Error>(())
                });
            })?;
            let mut want = host::combine3(&input(3), &input(3), &input(3));
            want[..16].copy_from_slice(&input(3)[..16]);
            assert_same(&s.clone_dtoh(&y)?, &want, &format!("call {call}: y"));
            assert_same(&s.clone_dtoh(&*z)?, &host::affine(&input(3), 5, call), "z (nested)");
            // A panicking closure after enqueuing a slow write of v.
            let p = catch_unwind(AssertUnwindSafe(|| {
                graph!(&mut cache, &s, {
                    capture(&x, &mut v, |c, (x, mut v)| {
                        let (xa, vw) = (c.read(&x)?, c.write(&mut v)?);
                        c.kernel(k.slow_affine(N, SPINS, 7, call, xa, vw).launch(cfg()))?;
                        if call < 3 {
                            panic!("boom");
                        }
                        Ok::<(), Error>(())
                    });
                })
            }));
            assert_eq!(p.is_err(), call < 3, "call {call}: the closure's panic propagates");
            assert_same(&s.clone_dtoh(&v)?, &host::affine(&input(3), 7, call), "v");
        }
        a.check_err()?;
        Ok(())
    })
}

/// Attack 4: streams dropped while aliases of them are pooled and new streams made (possibly
/// at the same `Arc` address), and more than 64 distinct aliases (the oldest are evicted and
/// leaked: their `leak` waits on their events), with a forked slow writer in each statement,
/// then the thread exits (its pool is dropped). Every part must be exact, no error parked.
/// Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_pool_dropped_streams_and_more_than_64_aliases_stay_exact() -> Result {
    let _serial = common::serial();
    const PARTS: usize = 80;
    const K: usize = LEN / PARTS;
    let a = CudaContext::new(0)?;
    let x = a.default_stream().clone_htod(&input(4))?;
    let mut y = a.default_stream().alloc_zeros::<u32>(LEN)?;
    a.default_stream().synchronize()?;
    fresh_thread(|| -> Result {
        let k = load(&a)?;
        let mut cache = GraphCache::new();
        cache.set_mode(Mode::Eager);
        for round in 0..3u32 {
            let (s, f) = (a.new_stream()?, a.new_stream()?);
            for i in 0..PARTS {
                let xs = x.slice(i * K..(i + 1) * K);
                let mut ys = y.slice_mut(i * K..(i + 1) * K);
                let b = round * 1000 + i as u32;
                graph!(&mut cache, &s, {
                    capture(&xs, &mut ys, |c, (xv, mut yv)| {
                        // SAFETY: as in `forked_call`: one launch on `f` (of the capture's
                        // managed context object) reading K elements of the listed xv and
                        // writing K of the listed `&mut` yv.
                        unsafe { c.fork(&f) }?;
                        // SAFETY: used on `f`, forked in above.
                        let (xa, ya) = unsafe { (xv.as_cuda_view(), yv.as_cuda_view_mut()) };
                        let n = K as u32;
                        launch!(&f, &k, "slow_affine", LaunchConfig::for_num_elems(n); &n, &(SPINS / 8), &3u32, &b, xa, ya)?;
                        Ok::<(), Error>(())
                    });
                })?;
            }
            let got = f.clone_dtoh(&y)?; // another stream: waits on y's events
            let model = input(4);
            for i in 0..PARTS {
                let b = round * 1000 + i as u32;
                let want = host::affine(&model[i * K..(i + 1) * K], 3, b);
                assert_same(&got[i * K..(i + 1) * K], &want, &format!("round {round} part {i}"));
            }
            drop((s, f)); // pooled aliases still hold them
        }
        Ok(())
    })?;
    a.synchronize()?;
    a.check_err()?;
    Ok(())
}

/// Attack 5: `Mode::Eager` then `Mode::Graph` then eager again on one cache and the same
/// buffers, the forked statement each time (joined back when captured): a pooled alias's
/// events recorded eagerly must not leak into a capture (the pool is eager only), and the
/// eager calls after the captures must still be exact and ordered with cudarc on another
/// stream. Expected: passes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_pool_eager_graph_eager_on_one_cache_stays_exact() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, f, other) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let mut x = s.clone_htod(&input(0))?;
        let [mut t, mut u] = std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
        let mut cache = GraphCache::new();
        for call in 0..8u32 {
            let mode = if call % 4 < 2 { Mode::Eager } else { Mode::Graph };
            cache.set_mode(mode);
            forked_call(&mut cache, &k, &s, &f, &x, &mut t, &mut u, call, false)?;
            other.memcpy_htod(&input(call + 1), &mut x)?;
            let want = host::affine(&input(call), 3, call);
            assert_same(&other.clone_dtoh(&t)?, &want, &format!("call {call} ({mode:?}): t"));
            assert_same(&other.clone_dtoh(&u)?, &want, &format!("call {call} ({mode:?}): u"));
        }
        a.check_err()?;
        Ok(())
    })
}
