//! Review of `InstantiateFlags::device_launch` (session 27b, brief 1: safe code only). First run
//! on the H200 in session 28: tests 1–3, 5 and 6 passed (test 1: the driver refuses event record
//! and wait nodes in a device graph); test 4 failed because its three caches' buffers started
//! with different contents (fixed; not run again: no device time left). Each test
//! compares with the same work in `GraphCache::eager()` (or a host model / host-driven loop),
//! exactly (integers), and on every refusal checks that the call is an `Err` (not a panic or an
//! abort), that nothing of the refused call was enqueued or run (its buffers keep their old
//! contents, its host closures never ran), and that the cache and the buffers work after.
//!
//! 1. Every statement kind a device graph cannot hold (host, `alloc`, `event_record`,
//!    `event_wait`), and `device_launch` with `auto_free_on_launch` on a kernel-only body.
//! 2. The flag switched on and off on one cache whose body has graph-owned memory: updates of a
//!    variant instantiated without it, a change that needs a re-instantiation (refused), a new
//!    variant (refused), `clear`, and the same work after.
//! 3. A `capture` statement whose library allocates (its recording, with memory nodes, moved
//!    into the refused graph), recorded again after each refusal; and a capture that only
//!    launches a kernel (a child graph), which a device graph may hold.
//! 4. Per-node updates (scalars and pointers) of device-launch execs still in flight, from two
//!    streams, with one exec per variant and with memoized execs, read only at the end.
//! 5. `device_while` under the flag: exact counts if the driver accepts it, else an `Err`.
//! 6. `GraphBuilder` and `Mode::Instantiate` / `upload` under the flag, with a host node refused.
//!
//! Expected on a GPU: all pass.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use common::{
    Ops, Result, assert_same, buffers, gpu, gpu_untracked, host, launch, read_all, same_all,
};
use cudagraph::cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, CudaView, DriverError, LaunchConfig,
    PushKernelArg,
};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use cudagraph::{Condition, GraphCache, InstantiateFlags, Mode, PinnedBuffer, graph, kernels};

const N: u32 = 1 << 14;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn dl() -> InstantiateFlags {
    InstantiateFlags { device_launch: true, ..Default::default() }
}

fn flagged() -> GraphCache {
    let mut c = GraphCache::new();
    c.set_instantiate_flags(dl());
    c
}

// ---------------------------------------------------------------------------------------------
// 1. Statements a device graph cannot hold.
// ---------------------------------------------------------------------------------------------

/// `x = iota(1, seed)` with, per `case`, a statement a device graph cannot hold (0 host,
/// 1 `alloc`, 2 `event_record`, 3 `event_wait`; 4 and above: none).
fn with_forbidden(
    cache: &mut GraphCache,
    (s, k): (&Arc<CudaStream>, &Ops),
    case: u32,
    seed: u32,
    x: &mut CudaSlice<u32>,
    (ev, ran): (&Arc<CudaEvent>, &Arc<AtomicU32>),
) -> cudagraph::Result<()> {
    let ran = ran.clone();
    match case {
        0 => graph!(cache, s, {
            k.iota(N, 1, seed, &mut *x).launch(cfg());
            host(move |()| {
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }),
        1 => graph!(cache, s, {
            let tmp = alloc::<u32>(LEN);
            k.iota(N, 1, seed, &mut tmp).launch(cfg());
            k.affine(N, 1, 0, &tmp, &mut *x).launch(cfg());
        }),
        2 => graph!(cache, s, {
            let w = k.iota(N, 1, seed, &mut *x).launch(cfg());
            event_record(ev).after(w);
        }),
        3 => graph!(cache, s, {
            let w = event_wait(ev);
            k.iota(N, 1, seed, &mut *x).launch(cfg()).after(w);
        }),
        _ => graph!(cache, s, {
            k.iota(N, 1, seed, &mut *x).launch(cfg());
        }),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn each_node_kind_a_device_graph_cannot_hold_is_an_err_with_nothing_enqueued() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let ev = Arc::new(ctx.new_event(None)?);
    ev.record(&s)?;
    let ran = Arc::new(AtomicU32::new(0));
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = flagged();
    let names = ["host", "alloc", "event_record", "event_wait", "auto_free_on_launch"];
    for case in 0..5u32 {
        let what = names[case as usize];
        if case == 4 {
            // The kernel-only variant of the last round would be updated, not instantiated.
            cache.clear();
            cache.set_instantiate_flags(InstantiateFlags {
                device_launch: true,
                auto_free_on_launch: true,
                ..Default::default()
            });
        }
        // Known contents before the refused call.
        with_forbidden(&mut GraphCache::eager(), (&s, &k), 9, 100 + case, &mut x, (&ev, &ran))?;
        let r = with_forbidden(&mut cache, (&s, &k), case, 7, &mut x, (&ev, &ran));
        let e = r.expect_err(what);
        println!("{what}: {e}");
        s.synchronize()?;
        assert_same(&s.clone_dtoh(&x)?, &host::iota(N, 1, 100 + case), &format!("{what}: x"));
        assert_eq!(ran.load(Ordering::SeqCst), 0, "{what}: a refused call's host closure ran");
        // The same cache, flag kept (only `auto_free_on_launch` dropped), a body it can hold.
        cache.set_instantiate_flags(dl());
        with_forbidden(&mut cache, (&s, &k), 9, 20 + case, &mut x, (&ev, &ran))?;
        assert_same(&s.clone_dtoh(&x)?, &host::iota(N, 1, 20 + case), &format!("{what}: after"));
    }
    // The host body, flag off: the closure runs once per launch, the result is the model's.
    cache.set_instantiate_flags(InstantiateFlags::default());
    with_forbidden(&mut cache, (&s, &k), 0, 3, &mut x, (&ev, &ran))?;
    s.synchronize()?;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_same(&s.clone_dtoh(&x)?, &host::iota(N, 1, 3), "host body, flag off");
    assert_eq!(cache.stats().launches, 6, "{:?}", cache.stats());
    ctx.check_err()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. The flag switched on one cache with graph-owned memory.
// ---------------------------------------------------------------------------------------------

/// `out[..n] = mix(iota(a, 3))` through a graph-owned buffer of `n` elements.
fn scratch(
    cache: &mut GraphCache,
    (s, k): (&Arc<CudaStream>, &Ops),
    n: u32,
    a: u32,
    out: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(n);
    graph!(cache, s, {
        let tmp = alloc::<u32>(n as usize);
        k.iota(n, a, 3, &mut tmp).launch(c);
        k.mix(n, &tmp, &mut *out).launch(c);
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn switching_the_flag_on_a_cache_with_graph_memory_refuses_only_new_instantiations() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu_untracked()?;
    let mut outs = buffers(&s, 2, LEN)?;
    let mut want = buffers(&s, 2, LEN)?;
    let mut cache = GraphCache::new();
    cache.set_execs_per_variant(1);
    let mut eager = GraphCache::eager();
    let half = N / 2;
    // Flag off: built and instantiated; then flag on: the variant keeps its flags, so scalar
    // and pointer changes are per-node updates of it and compute what eager computes.
    for call in 0..12u32 {
        if call == 4 {
            cache.set_instantiate_flags(dl());
        }
        let w = (call % 2) as usize;
        scratch(&mut cache, (&s, &k), half, 1 + call, &mut outs[w])?;
        scratch(&mut eager, (&s, &k), half, 1 + call, &mut want[w])?;
        same_all(&read_all(&s, &outs)?, &read_all(&s, &want)?, &format!("call {call}"));
    }
    let st = cache.stats();
    assert_eq!((st.builds, st.instantiations), (1, 1), "one variant, flag off: {st:?}");
    // A new size: a re-instantiation (or a new variant), with the flag: refused, nothing run.
    for (what, n) in [("resize", N), ("resize again", N), ("back", half)] {
        let before = read_all(&s, &outs)?;
        let r = scratch(&mut cache, (&s, &k), n, 77, &mut outs[0]);
        let e = r.expect_err(what);
        println!("{what}: {e}");
        same_all(&read_all(&s, &outs)?, &before, &format!("{what}: nothing ran"));
    }
    // `clear`, then the flag off: the same cache computes what eager computes at both sizes.
    cache.clear();
    assert!(scratch(&mut cache, (&s, &k), N, 5, &mut outs[1]).is_err(), "cleared, flag on");
    cache.set_instantiate_flags(InstantiateFlags::default());
    for (call, n) in [(20u32, N), (21, N), (22, half), (23, N)] {
        let w = (call % 2) as usize;
        scratch(&mut cache, (&s, &k), n, call, &mut outs[w])?;
        scratch(&mut eager, (&s, &k), n, call, &mut want[w])?;
        same_all(&read_all(&s, &outs)?, &read_all(&s, &want)?, &format!("call {call}"));
    }
    // Another site on the same cache, flag on, kernels only: accepted.
    cache.set_instantiate_flags(dl());
    let (mut p0, mut p1) = (s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?);
    for a in [4u32, 5, 5] {
        graph!(&mut cache, &s, {
            k.iota(N, a, 1, &mut p0).launch(cfg());
            k.mix(N, &p0, &mut p1).launch(cfg());
        })?;
        let x = host::iota(N, a, 1);
        assert_same(&s.clone_dtoh(&p1)?, &host::mix(&x), &format!("kernels only, a {a}"));
    }
    ctx.check_err()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. Captures: a library that allocates (memory nodes, moved recordings), and one that does not.
// ---------------------------------------------------------------------------------------------

/// A library that allocates its outputs and a scratch buffer, as in `capture_alloc.rs`.
struct Lib {
    k: Ops,
}

impl Lib {
    fn affine(
        &self,
        s: &Arc<CudaStream>,
        x: &CudaView<'_, u32>,
        (a, b): (u32, u32),
    ) -> std::result::Result<CudaSlice<u32>, DriverError> {
        let mut scratch = s.alloc_zeros::<u32>(LEN)?;
        launch!(s, self.k, "affine", cfg(); &N, &a, &0u32, x, &mut scratch)?;
        let mut out = s.alloc_zeros::<u32>(LEN)?;
        launch!(s, self.k, "affine", cfg(); &N, &1u32, &b, &scratch, &mut out)?;
        drop(scratch);
        Ok(out)
    }
}

/// `x = iota(3, seed)`; keyed capture `y = a·x + 1` through the allocating library (or, with
/// `plain`, one kernel straight into `y`); `out = 3·y + seed`.
fn cap_step(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    lib: &Arc<Lib>,
    (seed, a, plain): (u32, u32, bool),
    (x, y, out): (&mut CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> cudagraph::Result<()> {
    let k: &Ops = &lib.k;
    graph!(cache, s, {
        k.iota(N, 3, seed, &mut *x).launch(cfg());
        capture(&*x, &mut *y, key = (lib.clone(), a, plain), |c, key, (x, mut y)| {
            let (lib, a, plain) = (&key.0, key.1, key.2);
            // SAFETY: the work on the joined stream reads the listed `x`, writes the listed
            // `y`, and otherwise only buffers it allocates there and frees before returning.
            let (st, xv, yv) = unsafe { (c.stream(), x.as_cuda_view(), y.as_cuda_view_mut()) };
            if plain {
                launch!(st, lib.k, "affine", cfg(); &N, &a, &1u32, xv, yv)
            } else {
                let t = lib.affine(st, xv, (a, 1))?;
                st.memcpy_dtod(&t, yv)?;
                drop(t);
                Ok::<(), DriverError>(())
            }
        });
        k.affine(N, 3, seed, &*y, &mut *out).launch(cfg());
    })
}

fn cap_model(seed: u32, a: u32) -> (Vec<u32>, Vec<u32>) {
    let y = host::affine(&host::iota(N, 3, seed), a, 1);
    let out = host::affine(&y, 3, seed);
    (y, out)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_refused_graph_with_a_moved_recording_is_recorded_again_and_computes_after() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let z = || s.alloc_zeros::<u32>(LEN);
    let (mut x, mut y, mut out) = (z()?, z()?, z()?);
    let check = |y: &CudaSlice<u32>, out: &CudaSlice<u32>, (seed, a): (u32, u32), what: &str| {
        let (wy, wout) = cap_model(seed, a);
        assert_same(&s.clone_dtoh(y).expect("y"), &wy, &format!("{what}: y"));
        assert_same(&s.clone_dtoh(out).expect("out"), &wout, &format!("{what}: out"));
    };
    let mut cache = GraphCache::new();
    cap_step(&mut cache, &s, &lib, (1, 5, false), (&mut x, &mut y, &mut out))?;
    check(&y, &out, (1, 5), "flag off");
    cache.set_instantiate_flags(dl());
    // Unchanged: the flag-off exec is launched as it is.
    cap_step(&mut cache, &s, &lib, (1, 5, false), (&mut x, &mut y, &mut out))?;
    check(&y, &out, (1, 5), "unchanged, flag on");
    // A new key: recorded again (memory nodes), re-instantiated with the flag: refused. Then
    // the same key again, then the first key (its recording was moved into the destroyed
    // graph), each refused, nothing run.
    for (seed, a) in [(2u32, 9u32), (3, 9), (4, 5)] {
        let r = cap_step(&mut cache, &s, &lib, (seed, a, false), (&mut x, &mut y, &mut out));
        let e = r.expect_err("a recording with memory nodes under device_launch");
        println!("seed {seed}, a {a}: {e}");
        s.synchronize()?;
        check(&y, &out, (1, 5), &format!("refused seed {seed}, a {a}"));
    }
    cache.set_instantiate_flags(InstantiateFlags::default());
    for (seed, a) in [(5u32, 9u32), (6, 5), (7, 9), (7, 9)] {
        cap_step(&mut cache, &s, &lib, (seed, a, false), (&mut x, &mut y, &mut out))?;
        check(&y, &out, (seed, a), &format!("flag off again, seed {seed}, a {a}"));
    }
    // A fresh flagged cache: refused at once, then the plain capture (a child graph of one
    // kernel node): accepted or refused by the driver, but never wrong.
    let mut fresh = flagged();
    assert!(cap_step(&mut fresh, &s, &lib, (8, 5, false), (&mut x, &mut y, &mut out)).is_err());
    s.synchronize()?;
    check(&y, &out, (7, 9), "fresh flagged cache, refused");
    for (seed, a) in [(9u32, 5u32), (10, 5), (11, 13)] {
        match cap_step(&mut fresh, &s, &lib, (seed, a, true), (&mut x, &mut y, &mut out)) {
            Ok(()) => check(&y, &out, (seed, a), &format!("plain capture, seed {seed}, a {a}")),
            Err(e) => {
                println!("plain capture refused: {e}");
                s.synchronize()?;
                assert_eq!(fresh.stats().launches, 0, "refused after a launch: {e}");
            }
        }
    }
    ctx.check_err()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 4. Updates of device-launch execs still in flight.
// ---------------------------------------------------------------------------------------------

const SPINS: u32 = 1 << 12;

/// `v = slow_affine(u, a, i)`, then `u = v·3 + a` in place: each call reads what the last wrote.
fn chained(
    cache: &mut GraphCache,
    (s, k): (&Arc<CudaStream>, &Ops),
    (a, i): (u32, u32),
    (u, v): (&mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        k.slow_affine(N, SPINS, a, i, &*u, &mut *v).launch(cfg());
        k.affine_inplace(N, 3, a, &mut *v).launch(cfg());
        k.affine(N, 1, i, &*v, &mut *u).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn in_flight_device_launch_execs_updated_from_two_streams_compute_what_eager_computes() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    // Three runs of the same 200 calls: one exec per variant (updated in place every call),
    // memoized execs (two pointer sets alternating), and the eager oracle.
    // The same contents in each cache's buffers (session 28: they were `^ r`, a different
    // start per cache, so the first comparison failed on the H200 whatever the crate did).
    let mut sets: Vec<Vec<CudaSlice<u32>>> = Vec::new();
    for _ in 0..3u32 {
        let v: Vec<u32> = (0..N).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        let mut set = Vec::new();
        for _ in 0..4 {
            set.push(s.clone_htod(&v)?);
        }
        sets.push(set);
    }
    let mut one = flagged();
    one.set_execs_per_variant(1);
    let mut memo = flagged();
    let mut eager = GraphCache::eager();
    s.synchronize()?;
    for call in 0..200u32 {
        let stream = if call % 3 == 0 { &s2 } else { &s };
        // Pointers: pair (0, 1) or (2, 3), swapped every other call; the scalar every call.
        let (p, q) = match call % 4 {
            0 => (0, 1),
            1 => (1, 0),
            2 => (2, 3),
            _ => (3, 2),
        };
        let a = 1 + 2 * (call % 7);
        for (r, cache) in [&mut one, &mut memo, &mut eager].into_iter().enumerate() {
            let set = &mut sets[r];
            let (lo, hi) = set.split_at_mut(p.max(q));
            let (u, v) = if p < q { (&mut lo[p], &mut hi[0]) } else { (&mut hi[0], &mut lo[q]) };
            chained(cache, (stream, &k), (a, call), (u, v))?;
        }
    }
    s.synchronize()?;
    s2.synchronize()?;
    let want = read_all(&s, &sets[2])?;
    same_all(&read_all(&s, &sets[0])?, &want, "one exec per variant");
    same_all(&read_all(&s, &sets[1])?, &want, "memoized execs");
    let (a, b) = (one.stats(), memo.stats());
    println!("one: {a:?}\nmemo: {b:?}");
    assert_eq!(a.instantiations, 1, "{a:?}");
    assert!(a.node_updates > 0, "{a:?}");
    assert_eq!(a.reinstantiations + b.reinstantiations, 0, "{a:?} {b:?}");
    ctx.check_err()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 5. Device control flow under the flag.
// ---------------------------------------------------------------------------------------------

kernels! {
    /// Kernels of `kernels/conditional.cu`.
    struct Cond {
        fn set_nonzero(c: Condition, v: &[u32]);
        fn count_down(c: Condition, counter: &mut [u32]);
        fn count_down_plain(counter: &mut [u32]);
        fn step(n: u32, a: u32, counter: &[u32], x: &mut [u32]);
    }
}

fn load_cond(ctx: &Arc<CudaContext>) -> Result<Cond> {
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(include_str!("../kernels/conditional.cu"), opts)?;
    // SAFETY: the declarations match conditional.cu; the kernels stay within their buffers
    // (`n` elements, one element for the counters).
    unsafe { Cond::load(ctx, ptx) }
}

fn counted(
    cache: &mut GraphCache,
    (s, k): (&Arc<CudaStream>, &Cond),
    n: u32,
    (x, counter): (&mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        let c = condition(1);
        memset(&mut *counter, n);
        k.set_nonzero(c, &*counter).launch((1, 1));
        device_while(c, {
            k.step(N, 11, &*counter, &mut *x).launch(cfg());
            k.count_down(c, &mut *counter).launch((1, 1));
        });
    })
}

/// The loop driven from the host, with cudarc's launches.
fn counted_by_host(
    s: &Arc<CudaStream>,
    k: &Cond,
    n: u32,
    (x, counter): (&mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> Result {
    s.memcpy_htod(&[n], counter)?;
    let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
    for _ in 0..n {
        let f = k.function("step").expect("declared");
        // SAFETY: `step`'s signature; x has N elements, counter one.
        unsafe {
            s.launch_builder(f).arg(&N).arg(&11u32).arg(&*counter).arg(&mut *x).launch(cfg())
        }?;
        let f = k.function("count_down_plain").expect("declared");
        // SAFETY: `count_down_plain`'s signature; counter has one element.
        unsafe { s.launch_builder(f).arg(&mut *counter).launch(one) }?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_while_under_device_launch_runs_exact_counts_or_is_refused() -> Result {
    let _serial = common::serial();
    let (ctx, s, _) = gpu_untracked()?;
    let k = load_cond(&ctx)?;
    let init: Vec<u32> = (0..N).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let (mut x, mut counter) = (s.clone_htod(&init)?, s.alloc_zeros::<u32>(1)?);
    let (mut y, mut ycount) = (s.clone_htod(&init)?, s.alloc_zeros::<u32>(1)?);
    let mut cache = flagged();
    let mut refused = 0;
    for n in [0u32, 1, 7, 100, 7, 0, 3] {
        s.memcpy_htod(&init, &mut x)?;
        s.memcpy_htod(&[0xdead_u32], &mut counter)?;
        match counted(&mut cache, (&s, &k), n, (&mut x, &mut counter)) {
            Ok(()) => {}
            Err(e) => {
                println!("n = {n}: refused: {e}");
                refused += 1;
                s.synchronize()?;
                assert_eq!(s.clone_dtoh(&x)?, init, "n = {n}: a refused call ran");
                assert_eq!(s.clone_dtoh(&counter)?, [0xdead], "n = {n}: a refused call ran");
                // The same cache, flag off: the loop as `conditional.rs` checks it.
                cache.set_instantiate_flags(InstantiateFlags::default());
                counted(&mut cache, (&s, &k), n, (&mut x, &mut counter))?;
                cache.set_instantiate_flags(dl());
                cache.clear();
            }
        }
        s.memcpy_htod(&init, &mut y)?;
        counted_by_host(&s, &k, n, (&mut y, &mut ycount))?;
        assert_eq!(s.clone_dtoh(&x)?, s.clone_dtoh(&y)?, "n = {n}");
        assert_eq!(s.clone_dtoh(&counter)?, s.clone_dtoh(&ycount)?, "n = {n}: counter");
    }
    println!("device_while under device_launch: {refused} of 7 calls refused; {:?}", cache.stats());
    assert!(refused == 0 || refused == 7, "accepted sometimes only: {refused}");
    ctx.check_err()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 6. GraphBuilder, Mode::Instantiate and upload under the flag.
// ---------------------------------------------------------------------------------------------

/// `x = iota(a, 3)`, `x = 5x + a`, `p = x`, and with `with_host` a host node reading `p`.
fn built(
    cache: &mut GraphCache,
    (s, k): (&Arc<CudaStream>, &Ops),
    a: u32,
    (x, p): (&mut CudaSlice<u32>, &mut PinnedBuffer<u32>),
    ran: Option<&Arc<AtomicU32>>,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let xw = g.write(x);
    let pw = g.write(p);
    g.kernel(k.iota(N, a, 3, xw).launch(cfg()));
    g.kernel(k.affine_inplace(N, 5, a, xw).launch(cfg()));
    g.copy(xw.read(), pw);
    if let Some(ran) = ran {
        let ran = ran.clone();
        g.host((pw.read(),), move |(_p,)| {
            ran.fetch_add(1, Ordering::SeqCst);
        });
    }
    g.launch()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_and_instantiate_mode_under_device_launch_compute_what_eager_computes() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut p = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut ex = s.alloc_zeros::<u32>(LEN)?;
    let mut ep = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let ran = Arc::new(AtomicU32::new(0));
    let mut cache = flagged();
    let mut eager = GraphCache::eager();
    // Instantiated and uploaded, not run: the pinned copy stays zero.
    cache.set_mode(Mode::Instantiate);
    built(&mut cache, (&s, &k), 2, (&mut x, &mut p), None)?;
    s.synchronize()?;
    assert!(p.as_slice()?.iter().all(|&v| v == 0), "Mode::Instantiate ran the graph");
    cache.set_mode(Mode::Graph);
    for (call, a) in [2u32, 2, 7, 7, 9, 2].into_iter().enumerate() {
        if call == 3 {
            cache.upload(&s)?;
        }
        built(&mut cache, (&s, &k), a, (&mut x, &mut p), None)?;
        built(&mut eager, (&s, &k), a, (&mut ex, &mut ep), None)?;
        assert_eq!(p.as_slice()?, ep.as_slice()?, "call {call}, a {a}");
        let mut want = host::iota(N, a, 3);
        host::affine_inplace(&mut want, 5, a);
        assert_same(p.as_slice()?, &want, &format!("call {call}, a {a}: model"));
    }
    let st = cache.stats();
    // `a = 2` came back after 7 and 9: a memoized exec of its own, as for `graph!` (a builder's
    // kernels pack their parameters as words since 2026-12-05).
    let counts = (st.builds, st.instantiations, st.memo_builds, st.unchanged_calls);
    assert_eq!(counts, (2, 2, 1, 3), "{st:?}");
    // A host node in the builder's graph: refused, the closure never runs, nothing copied.
    let before = p.as_slice()?.to_vec();
    let r = built(&mut cache, (&s, &k), 11, (&mut x, &mut p), Some(&ran));
    println!("builder host node: {:?}", r.as_ref().err().map(ToString::to_string));
    assert!(r.is_err(), "a host node in a device-launch builder graph");
    s.synchronize()?;
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(p.as_slice()?, &before[..], "a refused builder call ran");
    // The builder's kernel-only graph again: a hit (or a rebuild), same results.
    built(&mut cache, (&s, &k), 13, (&mut x, &mut p), None)?;
    built(&mut eager, (&s, &k), 13, (&mut ex, &mut ep), None)?;
    assert_eq!(p.as_slice()?, ep.as_slice()?, "after the refusal");
    ctx.check_err()?;
    Ok(())
}
