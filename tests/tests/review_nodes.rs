//! Review of the host / empty / event / fill / run-time `for` / `eager!` additions: attempts,
//! with safe code only (the kernels are the trusted `common::Ops`), to make a host closure see
//! memory it must not, race, alias a `&mut`, or hit UB. Each test asserts the safe outcome;
//! where an attack gets through, the test fails saying what happened (harmlessly: the victim
//! buffers are kept alive, so what is shown is a closure writing memory the user owns again,
//! which could as well have been freed).
//!
//! Run by the reviewer on an H200 (release, one test at a time, 9 s each): HOLE in
//! `review_a_failed_launch_with_a_panicking_job_drop_leaves_no_stale_host_job` (call 2's launch
//! ran the failed call 1's closure, which wrote 0xdead into p1 after call 1 had returned);
//! `review_host_panics_with_odd_payloads` fails (the child process aborts: "failed to initiate
//! panic, error 5" when the payload's drop panics in the driver's callback; no UB, but a
//! process abort instead of `Error::HostFunction`); passed: the builder's `(w.read(), w)`,
//! two streams on one pinned buffer, run-time loops, `fill` edge cases. The evicted-variant,
//! dropped-right-after and event tests first compared against the full CPU model of
//! `slow_iota` (minutes of CPU: 9 s timeouts, and a wrong model in the evicted one, whose
//! observed values were each call's own); they now check a few elements, not rerun since.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use common::{Result, gpu};
use cudagraph::cudarc::driver::sys::CUstreamCaptureMode;
use cudagraph::cudarc::driver::{CudaStream, LaunchConfig, PinnedHostSlice};
use cudagraph::{Error, GraphCache, Mode, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// About 10 ms of `slow_iota` on an H200.
const SPINS: u32 = 1 << 22;

/// `common::host::slow_iota` at index `i` only (the whole host model takes minutes).
fn slow_iota_at(i: u32, spins: u32, a: u32, b: u32) -> u32 {
    (0..spins).fold(i.wrapping_mul(a).wrapping_add(b), |v, _| {
        v.wrapping_mul(1664525).wrapping_add(1013904223)
    })
}

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// Panics when dropped (unless already panicking).
struct PanicOnDrop;
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("PanicOnDrop dropped");
        }
    }
}

/// A launch that the driver refuses (the stream is capturing) takes back the jobs of the
/// call's host nodes. If dropping the first job panics (a value its closure captured), the
/// jobs after it must not stay queued: the next launch would run the *failed* call's closure,
/// on the failed call's pinned buffer (which the user owns again, and could have freed).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_a_failed_launch_with_a_panicking_job_drop_leaves_no_stale_host_job() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    // SAFETY: plain u32s, written before read.
    let mut p1 = unsafe { ctx.alloc_pinned::<u32>(16)? };
    let mut p2 = unsafe { ctx.alloc_pinned::<u32>(16)? };
    p1.as_mut_slice()?.fill(0);
    p2.as_mut_slice()?.fill(0);
    let mut cache = GraphCache::new();
    let ran = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let mut call = |mut p: &mut PinnedHostSlice<u32>,
                    stream: &Arc<CudaStream>,
                    name: &'static str,
                    bomb: Option<PanicOnDrop>| {
        let ran = ran.clone();
        graph!(&mut cache, stream, {
            host(move |()| {
                let _ = &bomb;
            });
            host(&mut p, move |(p,)| {
                p.fill(0xdead);
                ran.lock().unwrap().push(name);
            });
        })
    };
    // Call 1 on a capturing stream: cuGraphLaunch is refused, the jobs are taken back, and
    // dropping the first one panics.
    let cs = ctx.new_stream()?;
    cs.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let r =
        catch_unwind(AssertUnwindSafe(|| call(&mut p1, &cs, "failed call 1", Some(PanicOnDrop))));
    let _ = cs.end_capture(cudagraph::cudarc::driver::sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    eprintln!(
        "call 1: {}",
        match &r {
            Ok(Ok(())) => "Ok".into(),
            Ok(Err(e)) => format!("error {e}"),
            Err(_) => "panicked".into(),
        }
    );
    assert!(!matches!(r, Ok(Ok(()))), "a launch into a capturing stream was not refused");
    // The user owns p1 again.
    p1.as_mut_slice()?.fill(7);
    // Call 2 on a plain stream.
    let r2 = call(&mut p2, &s, "call 2", None);
    s.synchronize()?;
    eprintln!("call 2: {r2:?}; closures that ran: {:?}", ran.lock().unwrap());
    let p1_now = p1.as_slice()?.to_vec();
    assert!(
        p1_now.iter().all(|&v| v == 7),
        "HOLE: the failed call 1's host closure ran in call 2's launch and wrote p1 (which the \
         user owned again after call 1 returned): p1[0] = {:#x}",
        p1_now[0]
    );
    assert_eq!(*ran.lock().unwrap(), vec!["call 2"], "closures that ran");
    Ok(())
}

/// `host(&p, &mut p, …)`: one pinned buffer as `&[T]` and `&mut [T]` to one closure. Refused
/// (the views would alias), graph and eager alike, nothing run.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_one_pinned_buffer_read_and_written_by_one_host_statement_is_refused() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(16)? };
    p.as_mut_slice()?.fill(1);
    let ran = Arc::new(AtomicU32::new(0));
    // (`host(&p, &mut p, …)` in `graph!`/`eager!` is a compile error: ui review-host-same-pinned-read-and-write.)
    // The builder: a write handle and its read.
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&s);
    let w = g.write(&mut p);
    let r2 = ran.clone();
    g.host((w.read(), w), move |(a, b)| {
        b[0] = a[0] + 1;
        r2.fetch_add(1, Ordering::SeqCst);
    });
    let r = g.launch();
    s.synchronize()?;
    assert!(r.is_err(), "builder: {r:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "an aliasing closure ran");
    Ok(())
}

/// A host node after a slow kernel and a copy to pinned memory; the cache (graph) and the
/// pinned buffer are dropped right after the call: the closure still runs, after the copy,
/// and sees the kernel's values (the pinned buffer's drop waits for it).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_cache_and_pinned_buffer_dropped_right_after_the_call() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut x = s.alloc_zeros::<u32>(LEN)?;
        // SAFETY: plain u32s, written by the copy before the closure reads them.
        let mut p = unsafe { ctx.alloc_pinned::<u32>(LEN)? };
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut cache = GraphCache::with_max_variants(1);
        cache.set_mode(mode);
        let g = got.clone();
        graph!(&mut cache, &s, {
            k.slow_iota(N, SPINS, 3, 5, &mut x).launch(cfg());
            copy(&x, &mut p);
            host(&p, move |(p,)| *g.lock().unwrap() = p.to_vec());
        })?;
        drop(cache);
        drop(p);
        drop(x);
        s.synchronize()?;
        let got = got.lock().unwrap().clone();
        assert_eq!(got.len(), LEN, "{mode:?}: the closure did not run");
        for i in [0u32, 1, 777, N - 1] {
            assert_eq!(got[i as usize], slow_iota_at(i, SPINS, 3, 5), "{mode:?}: element {i}");
        }
    }
    Ok(())
}

/// A variant evicted while its launch (with a host node behind a slow kernel) is pending: its
/// closure still runs, once, with its own call's values.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_a_host_node_of_an_evicted_variant_still_runs_its_calls_closure() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(LEN)? };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut cache = GraphCache::with_max_variants(1);
    for step in 0..6u32 {
        let sn = seen.clone();
        let odd = step % 2 == 1;
        graph!(&mut cache, &s, {
            k.slow_iota(N, SPINS / 4, 1, step, &mut x).launch(cfg());
            copy(&x, &mut p);
            if odd {
                host(&p, move |(p,)| sn.lock().unwrap().push((step, p[7])));
            } else {
                host(&p, move |(p,)| sn.lock().unwrap().push((step, p[7])));
            }
        })?;
    }
    s.synchronize()?;
    let want: Vec<_> = (0..6u32).map(|st| (st, slow_iota_at(7, SPINS / 4, 1, st))).collect();
    assert_eq!(*seen.lock().unwrap(), want);
    assert!(cache.stats().evictions >= 5, "{:?}", cache.stats());
    Ok(())
}

fn bump(p: &mut [u32]) {
    let v = p[0];
    std::thread::sleep(std::time::Duration::from_millis(2));
    p[0] = v + 1;
}

/// Two caches on two streams, each call's host node read-modify-writes one pinned buffer (with
/// a pause in between): the calls are ordered through the buffer, no update is lost.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_host_nodes_of_two_streams_on_one_pinned_buffer_do_not_race() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    let s2 = ctx.new_stream()?;
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(4)? };
    p.as_mut_slice()?.fill(0);
    let (mut c1, mut c2) = (GraphCache::new(), GraphCache::new());
    let mut e = GraphCache::new();
    e.set_mode(Mode::Eager);
    for i in 0..12 {
        match i % 3 {
            0 => graph!(&mut c1, &s, {
                host(&mut p, move |(p,)| bump(p));
            })?,
            1 => graph!(&mut c2, &s2, {
                host(&mut p, move |(p,)| bump(p));
            })?,
            _ => graph!(&mut e, &s2, {
                host(&mut p, move |(p,)| bump(p));
            })?,
        }
    }
    // No synchronize: as_slice must wait.
    assert_eq!(p.as_slice()?[0], 12, "lost updates: the host nodes raced");
    Ok(())
}

/// Host closures inside a run-time `for`, counts changing between calls (0 included): each
/// call runs its own iterations' closures, in order, and nothing of another call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_host_closures_in_a_run_time_loop_with_changing_counts() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    // SAFETY: plain u32s.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(1)? };
    p.as_mut_slice()?.fill(0);
    static SEEN: Mutex<Vec<(usize, usize, u32)>> = Mutex::new(Vec::new());
    let seen = &SEEN;
    let mut want = Vec::new();
    let mut cache = GraphCache::with_max_variants(2);
    for (call, count) in [3usize, 0, 5, 1, 3, 0, 5].into_iter().enumerate() {
        graph!(&mut cache, &s, {
            for i in 0..count {
                host(&mut p, move |(p,)| {
                    p[0] += 1;
                    SEEN.lock().unwrap().push((call, i, p[0]));
                });
            }
        })?;
        for i in 0..count {
            want.push((call, i, want.len() as u32 + 1));
        }
    }
    s.synchronize()?;
    assert_eq!(*seen.lock().unwrap(), want);
    assert_eq!(p.as_slice()?[0] as usize, want.len());
    Ok(())
}

/// A closure that panics with a payload that is not a string, then one whose payload's drop
/// panics too: each is an error of the next call, the process goes on. The second runs in a
/// child process (an unwind out of the driver's callback would abort it).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_host_panics_with_odd_payloads() -> Result {
    let _serial = common::serial();
    let (_ctx, s, _k) = gpu()?;
    if std::env::var_os("REVIEW_CHILD").is_some() {
        let mut cache = GraphCache::new();
        for _ in 0..2 {
            let r = graph!(&mut cache, &s, {
                host(move |()| std::panic::panic_any(PanicOnDrop));
            });
            s.synchronize()?;
            eprintln!("child call: {r:?}");
        }
        return Ok(());
    }
    let mut cache = GraphCache::new();
    graph!(&mut cache, &s, {
        host(move |()| std::panic::panic_any(42i32));
    })?;
    s.synchronize()?;
    let r = graph!(&mut cache, &s, {
        host(move |()| ());
    });
    assert!(matches!(r, Err(Error::HostFunction { .. })), "{r:?}");
    graph!(&mut cache, &s, {
        host(move |()| ());
    })?;
    s.synchronize()?;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "review_host_panics_with_odd_payloads", "--nocapture"])
        .env("REVIEW_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "child: {:?}\n{}",
        out.status,
        err.lines().rev().take(8).collect::<Vec<_>>().join("\n")
    );
    assert!(
        out.status.success(),
        "a host closure whose panic payload panics on drop killed the process: {:?}",
        out.status
    );
    Ok(())
}

/// `fill`: a zero-length buffer is an error; a 3-byte element on an odd address and `bool`s
/// give the right bytes, graph and eager alike.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_fill_edge_cases() -> Result {
    let _serial = common::serial();
    let (_ctx, s, _k) = gpu()?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut empty = s.alloc_zeros::<u64>(0)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let r = graph!(&mut cache, &s, {
            fill(&mut empty, 7u64);
        });
        assert!(matches!(r, Err(Error::Empty { .. })), "{mode:?}: {r:?}");
        let mut bytes = s.alloc_zeros::<[u8; 3]>(101)?;
        let mut flags = s.alloc_zeros::<bool>(37)?;
        let mut big = s.alloc_zeros::<[u64; 8]>(5)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        {
            let mut tail = bytes.slice_mut(1..100);
            graph!(&mut cache, &s, {
                fill(&mut tail, [1u8, 2, 3]);
                fill(&mut flags, true);
                fill(&mut big, [u64::MAX - 1; 8]);
            })?;
        }
        let b = s.clone_dtoh(&bytes)?;
        assert_eq!(b[0], [0; 3]);
        assert_eq!(b[100], [0; 3]);
        assert!(b[1..100].iter().all(|&e| e == [1, 2, 3]), "{mode:?}");
        assert!(s.clone_dtoh(&flags)?.iter().all(|&f| f));
        assert!(s.clone_dtoh(&big)?.iter().all(|e| *e == [u64::MAX - 1; 8]));
    }
    Ok(())
}

/// An event recorded by a graph behind a slow kernel, dropped right after the call, then calls
/// with new events (per-node updates): no error, the exec keeps the events alive.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_events_dropped_while_pending() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        for step in 0..4u32 {
            let e = Arc::new(ctx.new_event(None)?);
            graph!(&mut cache, &s, {
                let a = k.slow_iota(N, SPINS / 4, 1, step, &mut x).launch(cfg());
                let r = event_record(&e).after(a);
                let w = event_wait(&e).after(r);
                empty().after(w);
            })?;
            drop(e);
        }
        s.synchronize()?;
        let got = s.clone_dtoh(&x)?;
        for i in [0u32, 5, N - 1] {
            assert_eq!(got[i as usize], slow_iota_at(i, SPINS / 4, 1, 3), "{mode:?}: element {i}");
        }
    }
    Ok(())
}
