//! GPU tests of issue 29, kind 7: a `host` closure runs on a worker thread of the crate's, not on
//! the driver's callback thread, and what it owns (device buffers, pinned buffers, caches) is
//! dropped on that worker after the node completed, so those drops are ordinary frees; CUDA
//! calls inside the body (allocating, copying and synchronizing another stream) are ordinary
//! calls too. Each test runs graph and eager mode against a host model, checks free device
//! memory over 12 rounds (within 64 MiB), that no error is parked in the context, and that the
//! stream, a cache and later host closures still work. A watchdog aborts the binary if a drop or
//! a CUDA call deadlocks with the stream that waits for the closure (measured on the H200 before
//! drops were deferred: a free in the closure waited for a driver lock held by the test's
//! `clone_dtoh` on the stream, which waited for the closure).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{Ops, Result, assert_no_leak, assert_same, free_memory, gpu, host, watchdog};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{GraphCache, Mode, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
const ROUNDS: u32 = 12;
/// The buffer moved into the closures: 256 MiB, so that 12 leaked ones would show.
const BIG: usize = 256 << 20;
/// Spins of the slow kernel per element (its host model does them too).
const SPINS: u32 = 1 << 8;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// A line on stderr when `CUDAGRAPH_TRACE_HOST` is set (where a hang is).
fn trace(what: &str) {
    if std::env::var_os("CUDAGRAPH_TRACE_HOST").is_some() {
        eprintln!("[{:?}] {what}", std::thread::current().name());
    }
}

/// `x` on the host: `clone_dtoh` right after the call, as a user writes it (a pageable copy,
/// which holds a driver lock while it waits for the stream), or after `stream.synchronize()`.
fn read(stream: &Arc<CudaStream>, x: &CudaSlice<u32>, sync_first: bool) -> Result<Vec<u32>> {
    if sync_first {
        trace("main: synchronize");
        stream.synchronize()?;
    }
    trace("main: clone_dtoh");
    let v = stream.clone_dtoh(x)?;
    trace("main: clone_dtoh done");
    Ok(v)
}

/// A value owned by a closure that counts its own drop (after dropping what it holds).
struct Owned<T> {
    value: Option<T>,
    dropped: Arc<AtomicU32>,
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        drop(self.value.take());
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits (at most 20 s) until `n` [`Owned`] values were dropped: the closures' values are dropped
/// by the workers after their nodes completed, maybe after the stream is idle.
fn wait_dropped(dropped: &AtomicU32, n: u32, what: &str) {
    let start = std::time::Instant::now();
    while dropped.load(Ordering::SeqCst) < n {
        assert!(start.elapsed() < Duration::from_secs(20), "{what}: closures' values not dropped");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The stream, a fresh cache and a host closure still work: `y = affine(x, 3, 1)`, then a
/// closure that sums `y` through a pinned buffer.
#[track_caller]
fn assert_usable(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, k: &Ops, what: &str) {
    let run = || -> Result<(Vec<u32>, u64)> {
        let x = stream.clone_htod(&host::iota(N, 1, 2))?;
        let mut y = stream.alloc_zeros::<u32>(LEN)?;
        // SAFETY: plain u32, written by the copy before the closure reads it.
        let mut p = unsafe { ctx.alloc_pinned::<u32>(LEN) }?;
        let sum = Arc::new(std::sync::Mutex::new(0u64));
        let out = sum.clone();
        let mut cache = GraphCache::new();
        graph!(&mut cache, stream, {
            k.affine(N, 3, 1, &x, &mut y).launch(cfg());
            copy(&y, &mut p);
            host(&p, move |(p,)| *out.lock().unwrap() = p.iter().map(|&v| u64::from(v)).sum());
        })?;
        stream.synchronize()?;
        let got = *sum.lock().unwrap();
        Ok((stream.clone_dtoh(&y)?, got))
    };
    let (y, sum) = run().unwrap_or_else(|e| panic!("{what}: the stream or cache failed: {e}"));
    let want = host::affine(&host::iota(N, 1, 2), 3, 1);
    assert_same(&y, &want, &format!("{what}: usable after"));
    assert_eq!(sum, want.iter().map(|&v| u64::from(v)).sum::<u64>(), "{what}: a later closure");
}

/// One round's graph: a slow kernel writes `x`, a copy sends it to pinned `inp`, the closure
/// (which owns `owned`, dropped with it after the node) writes `out = inp * 7 ^ round`, a copy sends `out`
/// to `y`, and a kernel computes `z = affine(y, 2, 1)`.
#[allow(clippy::too_many_arguments)]
fn round_trip<O: Send + 'static>(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Ops,
    round: u32,
    owned: O,
    bufs: &mut Bufs,
    ran: &Arc<AtomicU32>,
) -> Result {
    let ran = ran.clone();
    let Bufs { x, inp, out, y, z } = bufs;
    graph!(cache, stream, {
        k.slow_iota(N, SPINS, 3, round, &mut *x).launch(cfg());
        copy(&*x, &mut *inp);
        host(&*inp, &mut *out, move |(inp, out)| {
            trace("closure: runs");
            let _ = &owned;
            for (o, i) in out.iter_mut().zip(inp) {
                *o = i.wrapping_mul(7) ^ round;
            }
            ran.fetch_add(1, Ordering::SeqCst);
        });
        copy(&*out, &mut *y);
        k.affine(N, 2, 1, &*y, &mut *z).launch(cfg());
    })
}

struct Bufs {
    x: CudaSlice<u32>,
    inp: cudagraph::cudarc::driver::PinnedHostSlice<u32>,
    out: cudagraph::cudarc::driver::PinnedHostSlice<u32>,
    y: CudaSlice<u32>,
    z: CudaSlice<u32>,
}

impl Bufs {
    fn new(ctx: &Arc<CudaContext>, s: &Arc<CudaStream>) -> Result<Self> {
        // SAFETY: plain u32, written by the graph's copies and closure before they are read.
        let (inp, out) = unsafe { (ctx.alloc_pinned::<u32>(LEN)?, ctx.alloc_pinned::<u32>(LEN)?) };
        Ok(Bufs {
            x: s.alloc_zeros(LEN)?,
            inp,
            out,
            y: s.alloc_zeros(LEN)?,
            z: s.alloc_zeros(LEN)?,
        })
    }
}

/// The host model of [`round_trip`]'s `z`.
fn model(round: u32) -> Vec<u32> {
    let out: Vec<u32> =
        host::slow_iota(N, SPINS, 3, round).iter().map(|i| i.wrapping_mul(7) ^ round).collect();
    host::affine(&out, 2, 1)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_closure_owning_a_device_buffer_drops_it_off_the_callback_thread() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "device buffer dropped in a host closure");
    let (ctx, stream, k) = gpu()?;
    let mut results = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut bufs = Bufs::new(&ctx, &stream)?;
        let ran = Arc::new(AtomicU32::new(0));
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let before = free_memory(&ctx)?;
        let dropped = Arc::new(AtomicU32::new(0));
        let mut zs = Vec::new();
        for round in 0..ROUNDS {
            // Allocated on the very stream that runs the graph: cudarc's drop frees it there
            // (`cuStreamWaitEvent` + `cuMemFreeAsync`).
            let big =
                Owned { value: Some(stream.alloc_zeros::<u8>(BIG)?), dropped: dropped.clone() };
            round_trip(&mut cache, &stream, &k, round, big, &mut bufs, &ran)?;
            let z = read(&stream, &bufs.z, false)?;
            assert_same(&z, &model(round), &format!("{mode:?} round {round}: vs host"));
            zs.push(z);
        }
        assert_eq!(ran.load(Ordering::SeqCst), ROUNDS, "{mode:?}: every closure ran once");
        if mode == Mode::Graph {
            assert_eq!(cache.stats().builds, 1, "one graph for every round");
        }
        wait_dropped(&dropped, ROUNDS, &format!("{mode:?}"));
        assert_no_leak(&ctx, before, &format!("{mode:?}"));
        results.push(zs);
    }
    assert_eq!(results[0], results[1], "graph vs eager, every round");
    assert_usable(&ctx, &stream, &k, "after the rounds");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_closure_owning_a_pinned_buffer_and_a_cache_drops_them_off_the_callback_thread() -> Result
{
    let _serial = common::serial();
    let _dog = watchdog(300, "pinned buffer and cache dropped in a host closure");
    let (ctx, stream, k) = gpu()?;
    let mut results = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut bufs = Bufs::new(&ctx, &stream)?;
        let ran = Arc::new(AtomicU32::new(0));
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let before = free_memory(&ctx)?;
        let dropped = Arc::new(AtomicU32::new(0));
        let mut zs = Vec::new();
        for round in 0..ROUNDS {
            // A pinned buffer (cudarc's drop: `cuEventSynchronize` + `cuMemFreeHost`) and a
            // cache holding a graph and an exec (`cuGraphExecDestroy`, `cuGraphDestroy`).
            // SAFETY: never read.
            let pinned = unsafe { ctx.alloc_pinned::<u8>(16 << 20) }?;
            let mut inner = GraphCache::new();
            let mut w = stream.alloc_zeros::<u32>(LEN)?;
            graph!(&mut inner, &stream, {
                k.iota(N, 1, round, &mut w).launch(cfg());
            })?;
            let owned = Owned { value: Some((pinned, inner)), dropped: dropped.clone() };
            round_trip(&mut cache, &stream, &k, round, owned, &mut bufs, &ran)?;
            let z = read(&stream, &bufs.z, false)?;
            assert_same(&z, &model(round), &format!("{mode:?} round {round}: vs host"));
            assert_same(&stream.clone_dtoh(&w)?, &host::iota(N, 1, round), "the inner graph");
            zs.push(z);
        }
        assert_eq!(ran.load(Ordering::SeqCst), ROUNDS, "{mode:?}: every closure ran once");
        wait_dropped(&dropped, ROUNDS, &format!("{mode:?}"));
        assert_no_leak(&ctx, before, &format!("{mode:?}"));
        results.push(zs);
    }
    assert_eq!(results[0], results[1], "graph vs eager, every round");
    assert_usable(&ctx, &stream, &k, "after the rounds");
    Ok(())
}

/// Inside the closure: a buffer allocated on another stream, copied to and from the device and
/// synchronized there (`clone_htod`, `clone_dtoh`), its values written to the pinned output.
/// The test synchronizes the graph's stream before its own `clone_dtoh`: CUDA calls in the
/// body run while the stream waits for the closure, and the H200 showed that a thread blocked
/// in a pageable copy on that stream holds a driver lock they wait for (the documented rule).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_closure_may_allocate_copy_and_synchronize_another_stream() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "CUDA calls on another stream in a host closure");
    let (ctx, stream, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut results = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut bufs = Bufs::new(&ctx, &stream)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let before = free_memory(&ctx)?;
        let failures = Arc::new(AtomicU32::new(0));
        let mut zs = Vec::new();
        for round in 0..ROUNDS {
            let (other, failed) = (other.clone(), failures.clone());
            let Bufs { x, inp, out, y, z } = &mut bufs;
            graph!(&mut cache, &stream, {
                k.slow_iota(N, SPINS, 3, round, &mut *x).launch(cfg());
                copy(&*x, &mut *inp);
                host(&*inp, &mut *out, move |(inp, out)| {
                    let r = (|| -> Result<Vec<u32>> {
                        let scaled: Vec<u32> = inp.iter().map(|i| i.wrapping_mul(7)).collect();
                        trace("closure: clone_htod");
                        let d = other.clone_htod(&scaled)?;
                        trace("closure: alloc_zeros");
                        let big = other.alloc_zeros::<u8>(BIG)?;
                        trace("closure: clone_dtoh");
                        let back = other.clone_dtoh(&d)?;
                        trace("closure: drop");
                        drop(big);
                        drop(d);
                        trace("closure: done");
                        Ok(back)
                    })();
                    match r {
                        Ok(back) => {
                            for (o, b) in out.iter_mut().zip(back) {
                                *o = b ^ round;
                            }
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
                copy(&*out, &mut *y);
                k.affine(N, 2, 1, &*y, &mut *z).launch(cfg());
            })?;
            let z = read(&stream, &bufs.z, true)?;
            assert_eq!(failures.load(Ordering::SeqCst), 0, "{mode:?}: the closure's CUDA calls");
            assert_same(&z, &model(round), &format!("{mode:?} round {round}: vs host"));
            zs.push(z);
        }
        assert_no_leak(&ctx, before, &format!("{mode:?}"));
        results.push(zs);
    }
    assert_eq!(results[0], results[1], "graph vs eager, every round");
    assert_usable(&ctx, &stream, &k, "after the rounds");
    Ok(())
}

/// A closure's body in [`evicted_host_nodes_flags_are_reused_only_after_their_launches`]:
/// sleeps `ms`, then writes `out = inp * 7 ^ round` and counts itself in `ran`.
fn slow_transform(inp: &[u32], out: &mut [u32], round: u32, ms: u64, ran: &AtomicU32) {
    std::thread::sleep(Duration::from_millis(ms));
    for (o, i) in out.iter_mut().zip(inp) {
        *o = i.wrapping_mul(7) ^ round;
    }
    ran.fetch_add(1, Ordering::SeqCst);
}

/// Two streams, each with a cache of one variant alternating between two host `if` branches
/// with a host node each, 40 calls without waiting: every call evicts its cache's other variant
/// while that launch may still run, so host nodes' wait flags are returned and taken all the
/// time, by nodes running at the same time on the two streams. Each closure sleeps before
/// writing its output: a wait that ended early (a flag reused while a launch still used it)
/// shows as stale data in that call's own output buffer, a flag never set as the watchdog.
#[test]
#[ignore = "needs a CUDA GPU"]
fn evicted_host_nodes_flags_are_reused_only_after_their_launches() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "evicted host nodes");
    let (ctx, s0, k) = gpu()?;
    let streams = [s0.clone(), ctx.new_stream()?];
    let mut bufs = [Bufs::new(&ctx, &streams[0])?, Bufs::new(&ctx, &streams[1])?];
    let mut caches = [GraphCache::with_max_variants(1), GraphCache::with_max_variants(1)];
    let calls = 40u32;
    let mut outs: Vec<CudaSlice<u32>> =
        (0..calls).map(|_| s0.alloc_zeros::<u32>(LEN)).collect::<std::result::Result<_, _>>()?;
    s0.synchronize()?;
    let ran = Arc::new(AtomicU32::new(0));
    for (round, result) in (0..calls).zip(outs.iter_mut()) {
        let (i, odd) = ((round % 2) as usize, (round / 2) % 2 == 1);
        let ran = ran.clone();
        let Bufs { x, inp, out, y, .. } = &mut bufs[i];
        graph!(&mut caches[i], &streams[i], {
            k.slow_iota(N, SPINS, 3, round, &mut *x).launch(cfg());
            copy(&*x, &mut *inp);
            if odd {
                host(&*inp, &mut *out, move |(inp, out)| slow_transform(inp, out, round, 2, &ran));
            } else {
                host(&*inp, &mut *out, move |(inp, out)| slow_transform(inp, out, round, 1, &ran));
            }
            copy(&*out, &mut *y);
            k.affine(N, 2, 1, &*y, &mut *result).launch(cfg());
        })?;
    }
    for (round, z) in outs.iter().enumerate() {
        let z = s0.clone_dtoh(z)?;
        assert_same(&z, &model(round as u32), &format!("call {round}: vs host"));
    }
    assert_eq!(ran.load(Ordering::SeqCst), calls, "every closure ran once");
    for c in &caches {
        assert!(c.stats().evictions >= u64::from(calls / 2) - 1, "{:?}", c.stats());
    }
    assert_usable(&ctx, &s0, &k, "after the calls");
    Ok(())
}

/// A host node's wait flag is held (not back in the pool) for as long as its exec may launch
/// it, and given back once the cache is dropped and the launches completed: the user object
/// that returns it is owned by the node's template, which is destroyed right after the add, so
/// the graph's copy of the template and the exec must hold references of their own. An eager
/// statement holds its flag until its wait passed. A flag given back early would be taken by
/// another node while this exec can still reset and wait on it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_nodes_flag_is_held_while_its_exec_lives() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(120, "host flag lifetime");
    let (_ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(LEN)?;
    let held = cudagraph::__private::host_flags_in_use;
    let settle = |want: usize, what: &str| {
        let start = std::time::Instant::now();
        while held() != want {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}: {} flags held", held());
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    stream.synchronize()?;
    let base = held();
    let ran = Arc::new(AtomicU32::new(0));
    let mut cache = GraphCache::new();
    for step in 0..5u32 {
        let ran = ran.clone();
        graph!(&mut cache, &stream, {
            k.slow_iota(N, SPINS, 1, step, &mut x).launch(cfg());
            host(move |()| {
                ran.fetch_add(1, Ordering::SeqCst);
            });
            host(move |()| {});
        })?;
        stream.synchronize()?;
        // Give a wrongly released flag time to come back.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(held(), base + 2, "call {step}: the exec's two host nodes hold their flags");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 5);
    drop(cache);
    stream.synchronize()?;
    settle(base, "after the cache was dropped");
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    graph!(&mut eager, &stream, {
        k.slow_iota(N, SPINS, 1, 9, &mut x).launch(cfg());
        host(move |()| std::thread::sleep(Duration::from_millis(20)));
    })?;
    assert_eq!(held(), base + 1, "a pending eager host statement holds its flag");
    stream.synchronize()?;
    settle(base, "after the eager statement's wait");
    assert_same(&stream.clone_dtoh(&x)?, &host::slow_iota(N, SPINS, 1, 9), "x");
    Ok(())
}
