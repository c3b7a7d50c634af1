//! Review 12b: the thread's call reports became a raw pointer into the cache's `Arc<Reports>`
//! (`with_call_reports` / `call_reports`, used by `Capture::host`), and `Reports::take` reads a
//! flag before locking. These tests check, exactly, that a host function recorded by
//! `Capture::host` reports its panic to the cache whose call recorded it, also after nested
//! calls (on caches made and dropped inside the capture closure, and a standalone capture),
//! and that every panic is returned once by the next call, never lost nor returned twice, also
//! with another cache's calls interleaved and the cache moved between calls.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use common::{Result, gpu, pinned};
use cudagraph::cudarc::driver::PinnedHostSlice;
use cudagraph::{Error, GraphCache, Mode, graph};

/// The outer cache's capture closure first runs a `graph!` call on an eager cache made there
/// (whose host statement panics into that cache, dropped at once), then a `graph!` call with
/// a capture on a graph-mode cache made there (refused when the outer call captures: a capture
/// inside a capture; run when the outer call is eager), then a standalone `capture` (the same),
/// and only then records its own host function, which panics on its first run. The outer
/// cache's next call returns exactly that panic (its message and line): the nested calls'
/// scopes restored the outer call's reports, which a dangling pointer would not have.
#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_host_after_nested_calls_on_dropped_caches_reports_to_the_outer_cache() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "capture_host_after_nested_calls");
    let (ctx, s, _k) = gpu()?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut out = pinned::<u32>(&ctx, 4)?;
        let mut inner_out = pinned::<u32>(&ctx, 4)?;
        let runs = Arc::new(AtomicU32::new(0));
        let nested_ok = Arc::new(AtomicU32::new(0));
        let line = line!() + 33;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let call = |cache: &mut GraphCache,
                    out: &mut PinnedHostSlice<u32>,
                    inner_out: &mut PinnedHostSlice<u32>| {
            let (runs, nested_ok, s2) = (runs.clone(), nested_ok.clone(), s.clone());
            graph!(cache, &s, {
                capture(&mut *out, |c, (mut out,)| {
                    {
                        let mut b = GraphCache::eager();
                        let r = graph!(&mut b, &s2, {
                            host(move |()| panic!("inner eager on purpose"));
                        });
                        nested_ok.fetch_add(u32::from(r.is_ok()), Ordering::SeqCst);
                        drop(b);
                    }
                    {
                        let mut b2 = GraphCache::new();
                        let r = graph!(&mut b2, &s2, {
                            capture(&mut *inner_out, |c2, (mut v,)| {
                                c2.host((&mut v,), move |(_v,)| panic!("inner graph on purpose"))
                            });
                        });
                        nested_ok.fetch_add(10 * u32::from(r.is_ok()), Ordering::SeqCst);
                        let _ = s2.synchronize();
                        drop(b2);
                    }
                    let g = cudagraph::capture(&s2, (), |c3, ()| {
                        c3.host((), move |()| panic!("inner standalone on purpose"))
                    });
                    nested_ok.fetch_add(100 * u32::from(g.is_ok()), Ordering::SeqCst);
                    drop(g);
                    c.host((&mut out,), move |(out,)| {
                        let n = runs.fetch_add(1, Ordering::SeqCst);
                        assert!(n != 0, "outer on purpose");
                        out[0] = 1000 + n;
                    })
                });
            })
        };
        call(&mut cache, &mut out, &mut inner_out)?;
        s.synchronize()?;
        match call(&mut cache, &mut out, &mut inner_out) {
            Err(Error::HostFunction { site, message }) => {
                assert!(message.contains("outer on purpose"), "{mode:?}: {message}");
                assert_eq!((site.text, site.line), ("Capture::host", line), "{mode:?}: {site:?}");
            }
            other => panic!("{mode:?}: expected the outer Error::HostFunction, got {other:?}"),
        }
        call(&mut cache, &mut out, &mut inner_out)?;
        s.synchronize()?;
        call(&mut cache, &mut out, &mut inner_out)?;
        s.synchronize()?;
        // The outer function ran 3 times (the erroring call launches nothing). The closure ran
        // in each of the 3 calls that did not fail: an unkeyed capture statement is recorded on
        // every call (Graph), or run (Eager).
        assert_eq!(runs.load(Ordering::SeqCst), 3, "{mode:?}: outer runs");
        assert_eq!(out.as_slice()?[0], 1002, "{mode:?}");
        let expected = match mode {
            // Only the eager nested call runs (once per recording); the nested captures are
            // refused while the outer statement is being recorded.
            Mode::Graph => 3,
            // All three, in each of the 3 calls that ran the closure.
            _ => 3 * 111,
        };
        assert_eq!(nested_ok.load(Ordering::SeqCst), expected, "{mode:?}: nested calls");
    }
    Ok(())
}

/// A host function of a capture that panics on every third run, 40 calls, with a second
/// cache's calls (never panicking) interleaved and the first cache moved into a `Box` half way:
/// each panic is returned by the first cache's next call exactly once (that call launches
/// nothing), never by the other cache, and no call after is an error.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_panic_is_reported_once_by_the_next_call_of_its_own_cache() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "every_panic_is_reported_once");
    let (ctx, s, _k) = gpu()?;
    let mut out = pinned::<u32>(&ctx, 4)?;
    let mut other_out = pinned::<u32>(&ctx, 4)?;
    let runs = Arc::new(AtomicU32::new(0));
    let other_runs = Arc::new(AtomicU32::new(0));
    let call = |cache: &mut GraphCache, out: &mut PinnedHostSlice<u32>, panics: bool| {
        let runs = if panics { runs.clone() } else { other_runs.clone() };
        graph!(cache, &s, {
            capture(&mut *out, |c, (mut out,)| {
                c.host((&mut out,), move |(out,)| {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    assert!(!(panics && n % 3 == 0), "run {n} on purpose");
                    out[0] = n;
                })
            });
        })
    };
    let mut a = GraphCache::new();
    let mut other = GraphCache::new();
    let mut boxed: Option<Box<GraphCache>> = None;
    let mut pending: Option<u32> = None;
    let mut reported = Vec::new();
    for i in 0..40u32 {
        if i == 20 {
            boxed = Some(Box::new(std::mem::take(&mut a)));
        }
        let cache: &mut GraphCache = boxed.as_deref_mut().unwrap_or(&mut a);
        let r = call(cache, &mut out, true);
        match (pending.take(), r) {
            (Some(n), Err(Error::HostFunction { message, .. })) => {
                assert!(message.contains(&format!("run {n} on purpose")), "call {i}: {message}");
                reported.push(n);
            }
            (Some(n), other) => panic!("call {i}: run {n}'s panic not reported: {other:?}"),
            (None, Ok(())) => {
                s.synchronize()?;
                let n = runs.load(Ordering::SeqCst) - 1;
                if n.is_multiple_of(3) {
                    pending = Some(n);
                }
            }
            (None, Err(e)) => panic!("call {i}: unexpected {e:?}"),
        }
        call(&mut other, &mut other_out, false).expect("the other cache never reports");
        s.synchronize()?;
    }
    let ran = runs.load(Ordering::SeqCst);
    let expected: Vec<u32> = (0..ran).filter(|n| n % 3 == 0).collect();
    let expected_reported: Vec<u32> =
        expected.iter().copied().filter(|&n| Some(n) != pending).collect();
    assert_eq!(reported, expected_reported, "each panic reported once, in order");
    assert_eq!(other_runs.load(Ordering::SeqCst), 40);
    Ok(())
}
