//! Review (brief 1, safe code only) of host work inside captures (issue 30 item 4): pinned host
//! operands of `capture`, `Capture::copy_htod` / `copy_dtoh` / `host`.
//!
//! Every GPU test compares with a host model or an eager run, exact integers; each is written
//! so that the failure it looks for changes a checked value (or hangs, which the watchdog turns
//! into an abort). None is expected to fail on the current code unless its comment says so.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Result, assert_same, gpu, host, pinned};
use cudagraph::cudarc::driver::PinnedHostSlice;
use cudagraph::{Error, GraphCache, Mode, graph};

const N: u32 = 256;

/// Attack: an unkeyed capture re-recorded every call, each call with a *new* pinned buffer
/// (new address), the exec reached by the update ladder (child-graph parameters set in place).
/// If any rung kept the exec's old host function node (old `userData`, so the old closure with
/// the old buffer's address), a launch would write an earlier call's buffer (a use after free
/// in the second half, where the earlier buffers are freed) and leave this call's untouched.
/// Checked: each call's buffer gets exactly this call's closure's values, once, and the kept
/// earlier buffers are never written again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_rerecorded_host_function_always_writes_this_calls_buffer() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "a rerecorded host function on new buffers");
    let (ctx, s, _k) = gpu()?;
    for mode in [Mode::Graph, Mode::Instantiate, Mode::Eager] {
        let runs = Arc::new(AtomicU32::new(0));
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut kept: Vec<PinnedHostSlice<u32>> = Vec::new();
        for step in 0..12u32 {
            let mut h = pinned::<u32>(&ctx, 4)?;
            let r = runs.clone();
            graph!(&mut cache, &s, {
                capture(&mut h, |c, (mut h,)| {
                    c.host((&mut h,), move |(h,)| {
                        std::thread::sleep(Duration::from_millis(2));
                        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
                        h[0] = 100 + step;
                        h[1] = n;
                        h[3] = h[3].wrapping_add(1);
                    })
                });
            })?;
            // No synchronize: `as_slice` waits for the launch through the buffer's event.
            // `Mode::Instantiate` builds and uploads without launching: nothing runs.
            let what = format!("{mode:?} step {step}");
            let want =
                if mode == Mode::Instantiate { [0; 4] } else { [100 + step, step + 1, 0, 1] };
            assert_eq!(h.as_slice()?, &want, "{what}");
            if step < 6 {
                kept.push(h); // alive: a stale node would write it again
            } // else dropped (freed): the next buffer may take its address
        }
        s.synchronize()?;
        let launched = mode != Mode::Instantiate;
        let want_runs = if launched { 12 } else { 0 };
        assert_eq!(runs.load(Ordering::SeqCst), want_runs, "{mode:?}: one run per launch");
        for (i, h) in kept.iter().enumerate() {
            let i = i as u32;
            let want = if launched { [100 + i, i + 1, 0, 1] } else { [0; 4] };
            assert_eq!(h.as_slice()?, &want, "{mode:?}: buffer {i} later");
        }
        eprintln!("{mode:?}: {:?}", cache.stats());
    }
    Ok(())
}

/// A host function whose launches are pending while the cache is cleared, then dropped.
fn slow_call(
    cache: &mut GraphCache,
    s: &Arc<cudagraph::cudarc::driver::CudaStream>,
    h: &mut PinnedHostSlice<u32>,
    runs: &Arc<AtomicU32>,
    ms: u64,
) -> Result {
    let r = runs.clone();
    graph!(cache, s, {
        capture(&mut *h, |c, (mut h,)| {
            c.host((&mut h,), move |(h,)| {
                std::thread::sleep(Duration::from_millis(ms));
                h[0] = h[0].wrapping_add(1);
                h[1] = r.fetch_add(1, Ordering::SeqCst) + 1;
            })
        });
    })
}

/// Attack: the cache's execs and recordings (which hold the host function's user objects) are
/// dropped (`clear`, then the cache itself) while launches that must still run the host
/// function are pending. The driver must keep the user objects until those launches are done;
/// if not, the callback finds no entry and the launch skips the function (its wait node sees a
/// flag already set, or one given to another host function: then it hangs).
/// Checked: every pending launch ran its function exactly once, in order.
#[test]
#[ignore = "needs a CUDA GPU"]
fn clearing_or_dropping_the_cache_keeps_pending_host_functions() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "cache cleared with pending host functions");
    let (ctx, s, _k) = gpu()?;
    for mode in [Mode::Graph, Mode::Instantiate] {
        let runs = Arc::new(AtomicU32::new(0));
        let mut h = pinned::<u32>(&ctx, 2)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        for _ in 0..3 {
            slow_call(&mut cache, &s, &mut h, &runs, 80)?;
        }
        cache.clear(); // three launches pending (about 240 ms of host functions)
        slow_call(&mut cache, &s, &mut h, &runs, 80)?;
        drop(cache); // one more pending
        // `Mode::Instantiate` uploads without launching: no host function runs.
        let n = if mode == Mode::Instantiate { 0 } else { 4 };
        assert_eq!(h.as_slice()?, &[n, n], "{mode:?}: four runs, in order");
        assert_eq!(runs.load(Ordering::SeqCst), n, "{mode:?}");
    }
    Ok(())
}

/// Attack: the cache bounded to one variant, alternating two variants (a host `if`) whose
/// captures have host functions, without synchronizing: each call evicts the other variant's
/// exec (and its recordings) while its launch is pending.
#[test]
#[ignore = "needs a CUDA GPU"]
fn evicting_variants_with_pending_host_functions() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "evicted variants with pending host functions");
    let (ctx, s, _k) = gpu()?;
    let mut h = pinned::<u32>(&ctx, 2)?;
    let mut cache = GraphCache::with_max_variants(1);
    let log = Arc::new(Mutex::new(Vec::new()));
    for step in 0..10u32 {
        let (l1, l2) = (log.clone(), log.clone());
        graph!(&mut cache, &s, {
            if step % 2 == 0 {
                capture(&mut h, |c, (mut h,)| {
                    c.host((&mut h,), move |(h,)| {
                        std::thread::sleep(Duration::from_millis(20));
                        h[0] = h[0].wrapping_mul(3).wrapping_add(step);
                        l1.lock().unwrap().push(step);
                    })
                });
            } else {
                capture(&mut h, |c, (mut h,)| {
                    c.host((&mut h,), move |(h,)| {
                        std::thread::sleep(Duration::from_millis(20));
                        h[0] = h[0].wrapping_mul(5) ^ step;
                        l2.lock().unwrap().push(step);
                    })
                });
            }
        })?;
    }
    let mut want = 0u32;
    for step in 0..10u32 {
        want = if step % 2 == 0 {
            want.wrapping_mul(3).wrapping_add(step)
        } else {
            want.wrapping_mul(5) ^ step
        };
    }
    assert_eq!(h.as_slice()?[0], want, "every launch ran its own host function, in order");
    assert_eq!(*log.lock().unwrap(), (0..10).collect::<Vec<_>>());
    eprintln!("{:?}", cache.stats());
    Ok(())
}

/// Attack: standalone exec: launches pending while the exec is released, updated to a capture
/// on *other* pinned buffers (twice: the second update drops the intermediate graph, and with
/// it the only crate-side holder of its host function, while a launch of it is pending), then
/// dropped. Each launch must run the host function of the graph it was launched with, on that
/// graph's buffer.
#[test]
#[ignore = "needs a CUDA GPU"]
fn updating_a_standalone_exec_with_pending_host_functions() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "updated standalone exec with pending host functions");
    let (ctx, s, _k) = gpu()?;
    let mut h1 = pinned::<u32>(&ctx, 2)?;
    let mut h2 = pinned::<u32>(&ctx, 2)?;
    let mut h3 = pinned::<u32>(&ctx, 2)?;
    let runs = Arc::new(AtomicU32::new(0));
    macro_rules! cap {
        ($h:expr, $v:expr) => {{
            let r = runs.clone();
            cudagraph::capture(&s, (&mut $h,), move |c, (mut h,)| {
                c.host((&mut h,), move |(h,)| {
                    std::thread::sleep(Duration::from_millis(60));
                    h[0] = h[0].wrapping_add($v);
                    h[1] = r.fetch_add(1, Ordering::SeqCst) + 1;
                })
            })?
        }};
    }
    let mut exec = cap!(h1, 10).instantiate()?;
    exec.launch(&s)?;
    exec.launch(&s)?;
    let released = exec.release();
    let mut exec = released.update(cap!(h2, 20))?;
    exec.launch(&s)?;
    let released = exec.release();
    let mut exec = released.update(cap!(h3, 30))?;
    exec.launch(&s)?;
    drop(exec);
    assert_eq!(h1.as_slice()?, &[20, 2], "two launches of the first graph");
    assert_eq!(h2.as_slice()?, &[20, 3], "one launch of the second");
    assert_eq!(h3.as_slice()?, &[30, 4], "one launch of the third");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    Ok(())
}

/// Attack: one keyed recording (no operand but a device buffer read on both streams) taken by
/// two execs of one variant (memo twins, alternated by disjoint buffer sets), launched back to
/// back on two streams: two launches of one host function node (one `Entry`, one flag) may be
/// pending at once. The runs must not overlap (the closure is `FnMut`), each launch must run it
/// once, and neither launch may hang (the flag set only when no run is pending).
#[test]
#[ignore = "needs a CUDA GPU"]
#[allow(clippy::borrow_deref_ref)] // `graph!` takes `&place`
fn one_recording_in_two_execs_on_two_streams() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "one recording in two execs on two streams");
    let (ctx, s1, _k) = gpu()?;
    let s2 = ctx.new_stream()?;
    #[derive(Default)]
    struct Probe {
        inside: AtomicU32,
        max_inside: AtomicU32,
        runs: AtomicU32,
        overlap: AtomicBool,
    }
    let probe = Arc::new(Probe::default());
    let z = s1.alloc_zeros::<u32>(4)?;
    let (a1, mut b1) = (s1.alloc_zeros::<u32>(16)?, s1.alloc_zeros::<u32>(16)?);
    let (a2, mut b2) = (s1.alloc_zeros::<u32>(16)?, s1.alloc_zeros::<u32>(16)?);
    s1.synchronize()?;
    let mut cache = GraphCache::new();
    cache.set_execs_per_variant(2);
    let call = |cache: &mut GraphCache,
                s: &Arc<cudagraph::cudarc::driver::CudaStream>,
                a: &cudagraph::cudarc::driver::CudaSlice<u32>,
                b: &mut cudagraph::cudarc::driver::CudaSlice<u32>|
     -> Result {
        graph!(cache, s, {
            capture(&z, key = probe.clone(), |c, p, (_z,)| {
                let p = p.clone();
                c.host((), move |()| {
                    let now = p.inside.fetch_add(1, Ordering::SeqCst) + 1;
                    p.max_inside.fetch_max(now, Ordering::SeqCst);
                    if now > 1 {
                        p.overlap.store(true, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(40));
                    p.inside.fetch_sub(1, Ordering::SeqCst);
                    p.runs.fetch_add(1, Ordering::SeqCst);
                })
            });
            copy(&*a, &mut *b);
        })
    };
    let mut launches = 0;
    for _ in 0..6 {
        call(&mut cache, &s1, &a1, &mut b1)?;
        call(&mut cache, &s2, &a2, &mut b2)?;
        launches += 2;
    }
    s1.synchronize()?;
    s2.synchronize()?;
    let st = cache.stats();
    eprintln!(
        "two streams: {st:?}, max concurrent runs {}",
        probe.max_inside.load(Ordering::SeqCst)
    );
    assert_eq!(probe.runs.load(Ordering::SeqCst), launches, "one run per launch");
    assert!(!probe.overlap.load(Ordering::SeqCst), "two runs of one FnMut overlapped");
    Ok(())
}

/// Attack (deadlock): the flag pool's lock is held across `cuMemHostAlloc` (a new page of
/// flags), and the driver's callback thread takes the same lock to give a flag back (the eager
/// host function's second callback, or a user object's destructor). With an eager host
/// function pending (its give-back callback queued behind it), take more than a page of flags
/// (keep 1100 recordings with a host function each). If `cuMemHostAlloc` waited for the device
/// (or for the callback thread), this would hang: the watchdog aborts.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_new_flag_page_while_a_flag_is_being_given_back() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "a new flag page while a flag is given back");
    let (ctx, s, _k) = gpu()?;
    let mut h = pinned::<u32>(&ctx, 2)?;
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    graph!(&mut cache, &s, {
        capture(&mut h, |c, (mut h,)| {
            c.host((&mut h,), |(h,)| {
                std::thread::sleep(Duration::from_millis(1500));
                h[0] = 7;
            })
        });
    })?;
    let mut g = pinned::<u32>(&ctx, 1)?;
    let mut graphs = Vec::new();
    let started = Instant::now();
    for _ in 0..1100 {
        graphs.push(cudagraph::capture(&s, (&g,), |c, (g,)| c.host((&g,), |(_g,)| {}))?);
    }
    eprintln!("1100 host functions recorded in {:?}", started.elapsed());
    drop(graphs);
    assert_eq!(h.as_slice()?[0], 7);
    g.as_mut_slice()?[0] = 1;
    Ok(())
}

/// Attack: a builder capture given one pinned handle twice, written (`(p, p)`) or read and
/// written (`(p.read(), p)`): the closure would get two views of one buffer and the host
/// function two `&mut [u32]` (or `&` and `&mut`) of the same memory. The builder must refuse
/// before the closure runs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_capture_refuses_one_pinned_handle_twice() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    let mut h = pinned::<u32>(&ctx, 4)?;
    let ran = Arc::new(AtomicBool::new(false));
    for twice_written in [true, false] {
        let mut cache = GraphCache::new();
        let mut g = cache.builder(&s);
        let p = g.write(&mut h);
        let r = ran.clone();
        if twice_written {
            g.capture(&s, (p, p), move |c, (mut a, mut b)| {
                r.store(true, Ordering::SeqCst);
                c.host((&mut a, &mut b), |(a, b)| {
                    a[0] = 1;
                    b[0] = 2;
                })
            });
        } else {
            g.capture(&s, (p.read(), p), move |c, (a, mut b)| {
                r.store(true, Ordering::SeqCst);
                c.host((&a, &mut b), |(a, b)| b[0] = a[0] + 1)
            });
        }
        let res = g.launch();
        s.synchronize()?;
        assert!(res.is_err(), "twice_written {twice_written}: accepted: {res:?}");
        assert!(!ran.load(Ordering::SeqCst), "the closure ran");
    }
    assert_eq!(h.as_slice()?, &[0, 0, 0, 0]);
    Ok(())
}

/// Attack: CUDA calls inside a host function of a capture (allowed on the crate's worker,
/// forbidden on the driver's callback thread): through a captured `Arc<CudaStream>` of another
/// stream, copy this launch's input to device memory the closure owns and back into the
/// `&mut` view, synchronize that other stream, and drop (free) the owned device buffer in the
/// last run. Checked: the thread is the crate's worker, the results equal the host model.
#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_calls_inside_a_host_function_run_on_a_worker() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "CUDA calls inside a host function");
    let (ctx, s, _k) = gpu()?;
    let other = ctx.new_stream()?;
    let len = N as usize;
    let mut x = s.alloc_zeros::<u32>(len)?;
    let mut inp = pinned::<u32>(&ctx, len)?;
    let mut out = pinned::<u32>(&ctx, len)?;
    let threads = Arc::new(Mutex::new(Vec::new()));
    let mut owned = Some(other.alloc_zeros::<u32>(len)?);
    other.synchronize()?;
    let t = threads.clone();
    let o = other.clone();
    let calls = Arc::new(AtomicU32::new(0));
    let cl = calls.clone();
    let graph =
        cudagraph::capture(&s, (&inp, &mut x, &mut out), move |c, (inp, mut x, mut out)| {
            c.copy_htod(&inp, &mut x)?;
            c.copy_dtoh(&x, &mut out)?;
            c.host((&mut out,), move |(out,)| {
                t.lock().unwrap().push(std::thread::current().name().map(str::to_owned));
                let n = cl.fetch_add(1, Ordering::SeqCst);
                if let Some(d) = owned.as_mut() {
                    let doubled: Vec<u32> = out.iter().map(|v| v.wrapping_mul(2)).collect();
                    o.memcpy_htod(doubled.as_slice(), d).unwrap();
                    o.memcpy_dtoh(d, out).unwrap();
                    o.synchronize().unwrap();
                }
                if n == 2 {
                    drop(owned.take()); // a free on the worker
                }
            })?;
            Ok::<(), Error>(())
        })?;
    let mut exec = graph.instantiate()?;
    for round in 0..4u32 {
        // This launch's input: zeros first, then what the last round wrote.
        let input = if round == 0 { vec![0; len] } else { host::iota(N, 3 + round, round) };
        exec.launch(&s)?;
        let released = exec.release();
        // Doubled by the CUDA calls of runs 0..=2; run 2 drops the device buffer after them.
        let want: Vec<u32> =
            if round < 3 { input.iter().map(|v| v.wrapping_mul(2)).collect() } else { input };
        assert_same(out.as_slice()?, &want, &format!("round {round}"));
        inp.as_mut_slice()?.copy_from_slice(&host::iota(N, 4 + round, round + 1));
        exec = released.bind((&inp, &mut x, &mut out));
    }
    drop(exec);
    s.synchronize()?;
    let names = threads.lock().unwrap().clone();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.iter().all(|n| n.as_deref() == Some("cudagraph-host")), "{names:?}");
    Ok(())
}

/// Attack: empty pinned buffers (if the driver gives one): listed `&` and `&mut`, copied to and
/// from empty device views, given to a host function (an empty slice, whatever the address).
#[test]
#[ignore = "needs a CUDA GPU"]
fn empty_pinned_buffers() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    // SAFETY: no element to initialize.
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        ctx.alloc_pinned_with_flags::<u32>(0, 0)
    }));
    let (Ok(Ok(e1)), Ok(Ok(mut e2))) = (
        made,
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            ctx.alloc_pinned_with_flags::<u32>(0, 0)
        })),
    ) else {
        eprintln!("no empty pinned buffer from this driver/cudarc: nothing to attack");
        return Ok(());
    };
    let mut x = s.alloc_zeros::<u32>(4)?;
    let lens = Arc::new(Mutex::new(Vec::new()));
    let l = lens.clone();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let l = l.clone();
        graph!(&mut cache, &s, {
            capture(&e1, &mut e2, &mut x, |c, (e1, mut e2, mut x)| {
                c.copy_htod(&e1, &mut x.slice_mut(0..0))?;
                c.copy_dtoh(&x.slice(0..0), &mut e2)?;
                c.host((&e1, &mut e2), move |(a, b)| l.lock().unwrap().push((a.len(), b.len())))?;
                Ok::<(), Error>(())
            });
        })?;
        s.synchronize()?;
    }
    assert_eq!(*lens.lock().unwrap(), [(0, 0), (0, 0)]);
    Ok(())
}

/// Attack: a keyed capture whose host function captured the *first* call's scalar (through
/// the key, an `Arc<Mutex<u32>>` compared by identity) is replayed by later calls: the docs
/// say the closure lives with the recording, so later calls run the first closure. Not memory
/// unsafety; documents that a keyed host function sees state through shared memory only, and
/// that a new key (a new `Arc`) records again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_keyed_host_function_is_the_first_calls_closure() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    let mut h = pinned::<u32>(&ctx, 1)?;
    let mut cache = GraphCache::new();
    let shared = Arc::new(Mutex::new(0u32));
    for step in 0..4u32 {
        *shared.lock().unwrap() = step * 10;
        let key = if step < 3 { shared.clone() } else { Arc::new(Mutex::new(77)) };
        graph!(&mut cache, &s, {
            capture(&mut h, key = key, |c, k, (mut h,)| {
                let k = k.clone();
                let seen = *k.lock().unwrap();
                c.host((&mut h,), move |(h,)| h[0] = *k.lock().unwrap() + 1000 * seen)
            });
        })?;
        let want = if step < 3 { step * 10 } else { 77 + 77_000 };
        assert_eq!(h.as_slice()?[0], want, "step {step}");
    }
    let st = cache.stats();
    assert_eq!((st.captures, st.capture_reuses), (2, 2), "{st:?}");
    Ok(())
}
