//! Review 7 (brief 1, safe code only) of the host hand-off (`host(...)` closures run on a worker
//! thread while the stream waits on a mapped pinned flag, `kind/handoff.rs`, `kind/host.rs`).
//! Each test says what it attacks and what would show if the hole existed. Written on a
//! machine without a GPU: compiled, not run.
//!
//! Every model here applies `slow_iota`'s spins (the composed generator, [`lcg`]): the
//! `model` of `host_closures.rs` leaves them out (`host::iota` for a `slow_iota` kernel), so
//! those tests fail on a GPU for a reason of the test's own.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use common::{Ops, Result, assert_no_leak, assert_same, free_memory, gpu, host, watchdog};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice,
};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx, compile_ptx_with_opts};
use cudagraph::{Condition, Error, GraphCache, Mode, graph, kernels};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
const ROUNDS: u32 = 12;
const SPINS: u32 = 1 << 14;
/// Moved into closures: 256 MiB, so that 12 leaked ones would show.
const BIG: usize = 256 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

kernels! {
    /// The two kernels of `kernels/conditional.cu` that a `device_while` needs.
    struct Cond {
        fn set_nonzero(c: Condition, v: &[u32]);
        fn count_down(c: Condition, counter: &mut [u32]);
    }
}

fn load_cond(ctx: &Arc<CudaContext>) -> Result<Cond> {
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(include_str!("../kernels/conditional.cu"), opts)
        .expect("conditional.cu compiles");
    // SAFETY: the declarations match conditional.cu; the kernels touch one element.
    unsafe { Cond::load(ctx, ptx) }
}

/// `spins` steps of `slow_iota`'s generator as one affine map `(a, c)`: `v -> v * a + c`.
fn lcg(spins: u32) -> (u32, u32) {
    let (mut a, mut c) = (1u32, 0u32);
    for _ in 0..spins {
        a = a.wrapping_mul(1664525);
        c = c.wrapping_mul(1664525).wrapping_add(1013904223);
    }
    (a, c)
}

/// `slow_iota(n, spins, a, b)`'s output, computed fast.
fn slow_iota(n: u32, spins: u32, a: u32, b: u32) -> Vec<u32> {
    let (m, c) = lcg(spins);
    host::iota(n, a, b).into_iter().map(|v| v.wrapping_mul(m).wrapping_add(c)).collect()
}

/// The closures' transform of one round.
fn transform(v: u32, round: u32) -> u32 {
    v.wrapping_mul(7) ^ round
}

/// `z` of [`round_trip`] for `round`.
fn model(round: u32) -> Vec<u32> {
    let out: Vec<u32> =
        slow_iota(N, SPINS, 3, round).iter().map(|&v| transform(v, round)).collect();
    host::affine(&out, 2, 1)
}

struct Bufs {
    x: CudaSlice<u32>,
    inp: PinnedHostSlice<u32>,
    out: PinnedHostSlice<u32>,
    y: CudaSlice<u32>,
    z: CudaSlice<u32>,
}

impl Bufs {
    /// Device buffers on `s`, pinned ones from `pinned_ctx` (possibly another context object).
    fn new(pinned_ctx: &Arc<CudaContext>, s: &Arc<CudaStream>) -> Result<Self> {
        // SAFETY: plain u32, written by the graph's copies and closure before they are read.
        // Flags 0: not write-combined, since the closures read `inp`.
        let (inp, out) = unsafe {
            (
                pinned_ctx.alloc_pinned_with_flags::<u32>(LEN, 0)?,
                pinned_ctx.alloc_pinned_with_flags::<u32>(LEN, 0)?,
            )
        };
        Ok(Bufs {
            x: s.alloc_zeros(LEN)?,
            inp,
            out,
            y: s.alloc_zeros(LEN)?,
            z: s.alloc_zeros(LEN)?,
        })
    }
}

/// slow kernel -> x, copy x -> pinned inp, closure (owns `owned`, dropped after the node) writes
/// `out = transform(inp)`, sleeping `sleep` before; copy out -> y; `z = affine(y, 2, 1)`.
#[allow(clippy::too_many_arguments)]
fn round_trip<O: Send + 'static>(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Ops,
    round: u32,
    owned: O,
    bufs: &mut Bufs,
    z: Option<&mut CudaSlice<u32>>,
    ran: &Arc<AtomicU32>,
) -> Result {
    let ran = ran.clone();
    let Bufs { x, inp, out, y, z: own_z } = bufs;
    let z = z.unwrap_or(own_z);
    graph!(cache, stream, {
        k.slow_iota(N, SPINS, 3, round, &mut *x).launch(cfg());
        copy(&*x, &mut *inp);
        host(&*inp, &mut *out, move |(inp, out)| {
            // Dropped with the closure, after the node (host closures are `FnMut`).
            let _ = &owned;
            std::thread::sleep(Duration::from_millis(1));
            for (o, i) in out.iter_mut().zip(inp) {
                *o = transform(*i, round);
            }
            ran.fetch_add(1, Ordering::SeqCst);
        });
        copy(&*out, &mut *y);
        k.affine(N, 2, 1, &*y, &mut *z).launch(cfg());
    })
}

/// Attack: a host node inside a builder's `device_while` body. `graph!` refuses `host` in a
/// device body at compile time (check.rs: "a host closure runs once per launch, not once per
/// iteration"), but `GraphBuilder::host` has no such check (builder.rs `host` / `push`): it
/// relies on the driver refusing the body. A host node here is a *child graph* (host function +
/// batch mem-op wait), not a host node, and the queue (`kind/host.rs`) pops one job per run of
/// the callback: a body run 3 times per launch would pop the next calls' closures (queued
/// already behind a slow kernel) and run them before those calls' copies filled their pinned
/// inputs, or run none.
/// Passes if every launch is refused with nothing run, or if every call's closure ran exactly
/// once on its own call's data. The hole shows as wrong outputs (a later call's output computed
/// from zeros) or a closure count other than one per call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review7_builder_host_node_inside_a_device_while_body() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "host node in a device_while body");
    let (ctx, s, k) = gpu()?;
    let kc = load_cond(&ctx)?;
    let calls = 3u32;
    let mut xs = Vec::new();
    let mut counters = Vec::new();
    let mut inps = Vec::new();
    let mut outs = Vec::new();
    for _ in 0..calls {
        xs.push(s.alloc_zeros::<u32>(LEN)?);
        counters.push(s.alloc_zeros::<u32>(1)?);
        // SAFETY: plain u32s, written by the graph before they are read; zero first.
        let (mut i, mut o) = unsafe {
            (
                ctx.alloc_pinned_with_flags::<u32>(LEN, 0)?,
                ctx.alloc_pinned_with_flags::<u32>(LEN, 0)?,
            )
        };
        i.as_mut_slice()?.fill(0);
        o.as_mut_slice()?.fill(0);
        inps.push(i);
        outs.push(o);
    }
    s.synchronize()?;
    let ran: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new(Vec::new()));
    let mut cache = GraphCache::new();
    let mut results = Vec::new();
    let bufs = xs.iter_mut().zip(counters.iter_mut()).zip(inps.iter_mut().zip(outs.iter_mut()));
    for (call, ((x, counter), (inp, out))) in (0..calls).zip(bufs) {
        let mut g = cache.builder(&s);
        let (xw, cw, iw, ow) = (g.write(x), g.write(counter), g.write(inp), g.write(out));
        let c = g.condition(1);
        // Slow, so that the later calls are queued before this launch reaches its body.
        g.kernel(k.slow_iota(N, SPINS * 4, 3, call, xw).launch(cfg()));
        g.copy(xw.read(), iw);
        g.memset(cw, 3u32);
        g.kernel(kc.set_nonzero(c, cw.read()).launch((1, 1)));
        g.device_while(c, |g| {
            let ran = ran.clone();
            g.host((iw.read(), ow), move |(i, o)| {
                for (o, i) in o.iter_mut().zip(i) {
                    *o = o.wrapping_add(transform(*i, call));
                }
                ran.lock().unwrap().push(call);
            });
            g.kernel(kc.count_down(c, cw).launch((1, 1)));
        });
        results.push(g.launch());
    }
    s.synchronize()?;
    let ran = ran.lock().unwrap().clone();
    if results.iter().all(|r| r.is_err()) {
        println!("refused: {:?}", results[0]);
        assert!(ran.is_empty(), "refused launches ran closures: {ran:?}");
    } else {
        for r in &results {
            assert!(r.is_ok(), "some calls refused, some not: {results:?}");
        }
        let mut sorted = ran.clone();
        sorted.sort();
        assert_eq!(sorted, (0..calls).collect::<Vec<_>>(), "each call's closure once: {ran:?}");
        for (call, out) in (0..calls).zip(&outs) {
            let want: Vec<u32> =
                slow_iota(N, SPINS * 4, 3, call).iter().map(|&v| transform(v, call)).collect();
            assert_same(out.as_slice()?, &want, &format!("call {call}: its own data"));
        }
    }
    ctx.check_err()?;
    Ok(())
}

/// Attack: a host closure that takes the cache whose launch is running it out of a shared
/// `Mutex` and drops it (`clear`, `cuGraphExecDestroy` of the exec in flight, the host node's
/// template destroyed, its queue orphaned) and drops a 256 MiB device buffer of the same stream,
/// while a second stream's fresh caches keep taking flags (a flag given back before the
/// running launch's wait ended would be reused by a node of the other stream: that node's
/// reset would hold, or its set release, the wrong wait). Graph and eager mode; rounds are not
/// waited for in between.
/// The hole shows as a wrong `z` of some round (a copy ran before its closure wrote `out`), a
/// closure count other than one per call, a leak over the rounds, an error parked in the
/// context, or the watchdog.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review7_a_host_closure_drops_the_cache_whose_launch_runs_it() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "a host closure dropping its own cache");
    let (ctx, s, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    for mode in [Mode::Graph, Mode::Eager] {
        let shared: Arc<Mutex<Option<GraphCache>>> = Arc::new(Mutex::new(None));
        let mut bufs = Bufs::new(&ctx, &s)?;
        let mut bufs2 = Bufs::new(&ctx, &s2)?;
        let mut zs: Vec<CudaSlice<u32>> = (0..ROUNDS)
            .map(|_| s.alloc_zeros::<u32>(LEN))
            .collect::<std::result::Result<_, _>>()?;
        let mut zs2: Vec<CudaSlice<u32>> = (0..ROUNDS)
            .map(|_| s2.alloc_zeros::<u32>(LEN))
            .collect::<std::result::Result<_, _>>()?;
        let ran = Arc::new(AtomicU32::new(0));
        let before = free_memory(&ctx)?;
        for (round, (z, z2)) in (0..ROUNDS).zip(zs.iter_mut().zip(zs2.iter_mut())) {
            let big = s.alloc_zeros::<u8>(BIG)?;
            {
                let mut guard = shared.lock().unwrap();
                let cache = guard.get_or_insert_with(|| {
                    let mut c = GraphCache::new();
                    c.set_mode(mode);
                    c
                });
                let sh = shared.clone();
                let owned = move || {
                    // Blocks until the main thread released the lock after its call.
                    let taken = sh.lock().unwrap().take();
                    if let Some(mut c) = taken {
                        c.clear();
                        drop(c);
                    }
                    drop(big);
                };
                round_trip(
                    cache,
                    &s,
                    &k,
                    round,
                    Owned(Some(Box::new(owned))),
                    &mut bufs,
                    Some(z),
                    &ran,
                )?;
            }
            // Another stream: a fresh cache each round, so new host nodes take flags while the
            // first stream's launches still wait on theirs.
            let mut c2 = GraphCache::new();
            c2.set_mode(mode);
            round_trip(&mut c2, &s2, &k, round + 100, (), &mut bufs2, Some(z2), &ran)?;
        }
        for (round, (z, z2)) in (0..ROUNDS).zip(zs.iter().zip(&zs2)) {
            assert_same(&s.clone_dtoh(z)?, &model(round), &format!("{mode:?} round {round}"));
            let what = format!("{mode:?} other stream, round {round}");
            assert_same(&s2.clone_dtoh(z2)?, &model(round + 100), &what);
        }
        assert_eq!(ran.load(Ordering::SeqCst), 2 * ROUNDS, "{mode:?}: every closure ran once");
        assert_no_leak(&ctx, before, &format!("{mode:?}"));
    }
    Ok(())
}

/// Runs its closure when dropped (inside the host closure: `drop(owned)`).
struct Owned(Option<Box<dyn FnOnce() + Send>>);
impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// What the re-entrant test shares with its closures.
struct Shared {
    cache: Mutex<GraphCache>,
    k: Ops,
    stream: Arc<CudaStream>,
    done: Mutex<mpsc::Sender<(u32, Bufs, bool)>>,
}

/// One call of the one call site (so that nested calls hit the same variant and exec). At depth
/// 0 the closure, on the worker, launches the *same exec* again with `nested`'s buffers (its job
/// pushed onto the same node queue while this launch's callback already took its own), and
/// sends those buffers back.
fn reentrant_step(
    sh: &Arc<Shared>,
    bufs: &mut Bufs,
    round: u32,
    mut nested: Option<Bufs>,
) -> Result {
    let mut cache = sh.cache.lock().unwrap();
    let sh2 = sh.clone();
    let k = &sh.k;
    let Bufs { x, inp, out, y, z } = bufs;
    graph!(&mut *cache, &sh.stream, {
        k.slow_iota(N, SPINS, 3, round, &mut *x).launch(cfg());
        copy(&*x, &mut *inp);
        host(&*inp, &mut *out, move |(inp, out)| {
            for (o, i) in out.iter_mut().zip(inp) {
                *o = transform(*i, round);
            }
            if let Some(mut nb) = nested.take() {
                let r = reentrant_step(&sh2, &mut nb, round + 1000, None);
                let _ = sh2.done.lock().unwrap().send((round + 1000, nb, r.is_ok()));
            }
        });
        copy(&*out, &mut *y);
        k.affine(N, 2, 1, &*y, &mut *z).launch(cfg());
    })
}

/// Attack: a host closure, on the worker thread, launches the exec that is running it again
/// (a `graph!` call of the same call site on the same cache, behind a `Mutex`), while the main
/// thread keeps calling it too: jobs are pushed onto one node queue from two threads, and the
/// callback of each launch must take its own call's closure (kind/host.rs relies on "the
/// driver runs the launches of one exec in order"). Every call has its own buffers.
/// The hole shows as a call whose `z` is another call's (a closure run by the wrong launch
/// reads buffers its copies did not fill), a lost nested call, or the watchdog.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review7_a_host_closure_relaunches_its_own_exec_from_the_worker() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "re-entrant host closure");
    let (ctx, s, k) = gpu()?;
    let (tx, rx) = mpsc::channel();
    let sh = Arc::new(Shared {
        cache: Mutex::new(GraphCache::new()),
        k,
        stream: s.clone(),
        done: Mutex::new(tx),
    });
    let mut mine = Vec::new();
    for round in 0..ROUNDS {
        let mut b = Bufs::new(&ctx, &s)?;
        let nested = Bufs::new(&ctx, &s)?;
        reentrant_step(&sh, &mut b, round, Some(nested))?;
        mine.push((round, b));
    }
    let mut nested = Vec::new();
    for _ in 0..ROUNDS {
        nested.push(rx.recv_timeout(Duration::from_secs(120)).expect("every nested call reported"));
    }
    s.synchronize()?;
    for (round, b) in &mine {
        assert_same(&s.clone_dtoh(&b.z)?, &model(*round), &format!("main call {round}"));
    }
    for (round, b, ok) in &nested {
        assert!(ok, "nested call {round} failed");
        assert_same(&s.clone_dtoh(&b.z)?, &model(*round), &format!("nested call {round}"));
    }
    let st = sh.cache.lock().unwrap().stats();
    assert_eq!(st.builds, 1, "one variant for main and nested calls: {st:?}");
    ctx.check_err()?;
    Ok(())
}

/// Attack: SAFETY.md 7 leaves open a module unloaded while a launch may still use it. A host
/// closure makes that asynchronous: it owns a second cache and a freshly loaded `kernels!`
/// struct whose graph (slow kernel, then a second kernel of the same module) was just launched
/// on another stream, and drops both (cache first: `cuGraphExecDestroy`, the kernel states'
/// `CudaFunction`s, then the module's last `Arc`: `cuModuleUnload`) from the worker while that
/// launch is still in its slow kernel.
/// The hole shows as a wrong `w` (the second kernel never ran or ran garbage), an error parked
/// in the context, or a fault; a deadlock of `cuModuleUnload` against the waiting stream as the
/// watchdog.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review7_a_host_closure_drops_a_module_whose_graph_is_in_flight_elsewhere() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "module dropped in a host closure");
    let (ctx, s, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    let ptx = compile_ptx(common::SOURCE).expect("ops.cu compiles");
    let small = 1024u32;
    let slow = 1u32 << 20;
    let mut bufs = Bufs::new(&ctx, &s)?;
    let ran = Arc::new(AtomicU32::new(0));
    let mut cache = GraphCache::new();
    let mut ws = Vec::new();
    let before = free_memory(&ctx)?;
    for round in 0..ROUNDS {
        // SAFETY: the declarations match ops.cu, as in `common::gpu`.
        let k2 = unsafe { Ops::load(&ctx, ptx.clone()) }?;
        let mut c2 = GraphCache::new();
        let mut w = s2.alloc_zeros::<u32>(small as usize)?;
        graph!(&mut c2, &s2, {
            k2.slow_iota(small, slow, 1, round, &mut w).launch((4, 256));
            k2.affine_inplace(small, 3, 1, &mut w).launch((4, 256));
        })?;
        round_trip(&mut cache, &s, &k, round, (c2, k2), &mut bufs, None, &ran)?;
        ws.push(w);
        assert_same(&s.clone_dtoh(&bufs.z)?, &model(round), &format!("round {round}"));
    }
    s2.synchronize()?;
    for (round, w) in (0..ROUNDS).zip(&ws) {
        let mut want = slow_iota(small, slow, 1, round);
        host::affine_inplace(&mut want, 3, 1);
        assert_same(&s2.clone_dtoh(w)?, &want, &format!("the dropped module's graph, {round}"));
    }
    assert_eq!(ran.load(Ordering::SeqCst), ROUNDS);
    drop(ws);
    assert_no_leak(&ctx, before, "module dropped in a closure");
    Ok(())
}

/// Attack: host statements on two `Arc<CudaContext>` objects of one device (one primary
/// context: flags are pooled by `CUcontext`, so both objects' nodes share one pool), each
/// stream's cache of one variant alternating two host `if` branches (eviction every call,
/// flags returned and taken all the time), one stream in graph mode and one eager, with the
/// pinned buffers allocated by the *other* context object (their events are that object's).
/// Calls are not waited for in between; each closure sleeps.
/// The hole shows as stale data in a call's own output (a wait ended by another node's flag,
/// or a pinned buffer reused before the closure finished), a lost closure, or the watchdog.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review7_host_statements_on_two_context_objects_of_one_device() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "two context objects");
    let (ca, sa, k) = gpu()?;
    let cb = CudaContext::new(0)?;
    let sb = cb.new_stream()?;
    let streams = [sa.clone(), sb.clone()];
    let mut bufs = [Bufs::new(&cb, &streams[0])?, Bufs::new(&ca, &streams[1])?];
    let mut caches = [GraphCache::with_max_variants(1), GraphCache::with_max_variants(1)];
    caches[1].set_mode(Mode::Eager);
    let calls = 40u32;
    let mut outs: Vec<CudaSlice<u32>> =
        (0..calls).map(|_| sa.alloc_zeros::<u32>(LEN)).collect::<std::result::Result<_, _>>()?;
    sa.synchronize()?;
    let ran = Arc::new(AtomicU32::new(0));
    for (round, result) in (0..calls).zip(outs.iter_mut()) {
        let (i, odd) = ((round % 2) as usize, (round / 2) % 2 == 1);
        let ran = ran.clone();
        let Bufs { x, inp, out, y, .. } = &mut bufs[i];
        graph!(&mut caches[i], &streams[i], {
            k.slow_iota(N, SPINS / 4, 3, round, &mut *x).launch(cfg());
            copy(&*x, &mut *inp);
            if odd {
                host(&*inp, &mut *out, move |(inp, out)| {
                    std::thread::sleep(Duration::from_millis(2));
                    for (o, i) in out.iter_mut().zip(inp) {
                        *o = transform(*i, round);
                    }
                    ran.fetch_add(1, Ordering::SeqCst);
                });
            } else {
                host(&*inp, &mut *out, move |(inp, out)| {
                    std::thread::sleep(Duration::from_millis(1));
                    for (o, i) in out.iter_mut().zip(inp) {
                        *o = transform(*i, round);
                    }
                    ran.fetch_add(1, Ordering::SeqCst);
                });
            }
            copy(&*out, &mut *y);
            k.affine(N, 2, 1, &*y, &mut *result).launch(cfg());
        })?;
    }
    for (round, z) in outs.iter().enumerate() {
        let round = round as u32;
        let out: Vec<u32> =
            slow_iota(N, SPINS / 4, 3, round).iter().map(|&v| transform(v, round)).collect();
        assert_same(&sa.clone_dtoh(z)?, &host::affine(&out, 2, 1), &format!("call {round}"));
    }
    assert_eq!(ran.load(Ordering::SeqCst), calls, "every closure ran once");
    ca.check_err()?;
    cb.check_err()?;
    Ok(())
}

/// A panic payload whose own drop panics.
struct Bomb;
impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the panic payload's drop panicked");
    }
}

/// A value captured by a closure whose drop panics (after the closure returned normally).
struct Mine(u32);
/// Set by a panicking [`Mine`]'s drop, right before it panics.
static MINE_DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
impl Drop for Mine {
    fn drop(&mut self) {
        if self.0 == 1 {
            MINE_DROPPED.store(true, Ordering::SeqCst);
            panic!("a captured value's drop panicked");
        }
    }
}

/// Attack: panics that are not plain `String`s, on the worker: a closure panicking with a
/// payload whose `Drop` panics (`panic_any(Bomb)`), and a closure that returns normally but
/// owns a value whose `Drop` panics. Neither may unwind out of the worker before it sets the
/// flag (the stream would wait forever), nor kill the worker pool; each is the next call's
/// `Error::HostFunction`. Graph and eager.
/// The hole shows as the watchdog (a flag never set), an abort, or later calls that fail or
/// compute wrong data.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review7_panics_whose_drop_panics_in_host_closures() -> Result {
    let _serial = common::serial();
    let _dog = watchdog(300, "panicking drops in host closures");
    let (ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut results = Vec::new();
        for step in 0..6u32 {
            // Step 1 panics with a `Bomb`; step 3 returns but drops a panicking `Mine`. Steps 2
            // and 4 get those errors and run nothing (their closures are dropped unrun here).
            let mine = Mine(u32::from(step == 3));
            let r = graph!(&mut cache, &s, {
                k.iota(N, 1, step, &mut x).launch(cfg());
                host(move |()| {
                    let _keep = &mine;
                    if step == 1 {
                        std::panic::panic_any(Bomb);
                    }
                });
            });
            s.synchronize()?;
            if step == 3 {
                // The closure's values are dropped by the worker after its node completed, so
                // maybe after the synchronize: wait for the drop, and for its report.
                let start = std::time::Instant::now();
                while !MINE_DROPPED.swap(false, Ordering::SeqCst) {
                    assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "{mode:?}: Mine not dropped"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            results.push(r);
        }
        let oks: Vec<bool> = results.iter().map(|r| r.is_ok()).collect();
        assert_eq!(oks, [true, true, false, true, false, true], "{mode:?}: {results:?}");
        match (&results[2], &results[4]) {
            (Err(Error::HostFunction { .. }), Err(Error::HostFunction { message, .. })) => {
                assert!(message.contains("captured value's drop"), "{mode:?}: {message}");
            }
            other => panic!("{mode:?}: expected two Error::HostFunction, got {other:?}"),
        }
        // The stream and the cache still work.
        graph!(&mut cache, &s, {
            k.iota(N, 1, 77, &mut x).launch(cfg());
            host(move |()| {});
        })?;
        s.synchronize()?;
        assert_same(&s.clone_dtoh(&x)?, &host::iota(N, 1, 77), &format!("{mode:?} after"));
    }
    ctx.check_err()?;
    Ok(())
}

/// Attack: cudarc's *safe* `CudaStream::begin_capture` / `end_capture` / `CudaGraph::launch`
/// around a `graph!` call in graph mode. The cache refuses a capturing stream in eager mode and
/// `Exec::launch` refuses one, but graph mode relies on "a graph launch there is refused by the
/// driver itself" (cache/mod.rs `run_call`). If the driver records the `cuGraphLaunch` as a
/// child graph node instead, cudarc's graph replays the call's nodes after its borrows ended
/// (here: after the device buffer and the pinned buffer were dropped and their memory reused),
/// and the call's host job stays in the node's queue, to be taken by the *next* real launch's
/// callback (a closure over the dropped pinned buffer).
/// Passes if the call on the capturing stream is an error; else the damage is checked too:
/// reused device memory overwritten by the replay, reused pinned memory overwritten by the
/// stale job, or the next call's closure not run.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review7_a_graph_call_on_a_stream_capturing_through_cudarcs_safe_api_is_refused() -> Result {
    use cudagraph::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let _serial = common::serial();
    let _dog = watchdog(300, "graph! on a stream cudarc is capturing");
    let (ctx, s, k) = gpu()?;
    let mut cache = GraphCache::new();
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    // SAFETY (cudarc's contract): zero-filled before any read.
    let mut p = unsafe { ctx.alloc_pinned_with_flags::<u32>(LEN, 0) }?;
    p.as_mut_slice()?.fill(0);
    // A first call outside any capture builds the variant.
    graph!(&mut cache, &s, {
        k.iota(N, 1, 1, &mut x).launch(cfg());
        host(&mut p, move |(v,)| v.fill(1));
    })?;
    s.synchronize()?;
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let r = graph!(&mut cache, &s, {
        k.iota(N, 1, 2, &mut x).launch(cfg());
        host(&mut p, move |(v,)| v.fill(0xdead_beef));
    });
    let captured =
        s.end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    let _ = ctx.check_err();
    println!(
        "the call on a capturing stream: {r:?}; end_capture: {:?}",
        captured.as_ref().map(|g| g.is_some())
    );
    if r.is_err() {
        return Ok(());
    }
    // The call was accepted: show what it left behind.
    drop(x);
    drop(p);
    let mut x2 = s.alloc_zeros::<u32>(LEN)?;
    s.memcpy_htod(&vec![7u32; LEN], &mut x2)?;
    // SAFETY (cudarc's contract): filled before any read.
    let mut q = unsafe { ctx.alloc_pinned_with_flags::<u32>(LEN, 0) }?;
    q.as_mut_slice()?.fill(7);
    if let Ok(Some(g)) = &captured {
        let _ = g.launch();
    }
    s.synchronize()?;
    // The next real call: its callback takes the job queued by the captured call first.
    let ran = Arc::new(AtomicU32::new(0));
    let ran2 = ran.clone();
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    // SAFETY (cudarc's contract): zero-filled before any read.
    let mut p2 = unsafe { ctx.alloc_pinned_with_flags::<u32>(LEN, 0) }?;
    p2.as_mut_slice()?.fill(0);
    graph!(&mut cache, &s, {
        k.iota(N, 1, 3, &mut y).launch(cfg());
        host(&mut p2, move |(v,)| {
            v.fill(3);
            ran2.fetch_add(1, Ordering::SeqCst);
        });
    })?;
    s.synchronize()?;
    let bad_x = s.clone_dtoh(&x2)?.iter().filter(|&&v| v != 7).count();
    let bad_q = q.as_slice()?.iter().filter(|&&v| v != 7).count();
    panic!(
        "a graph! call on a capturing stream was accepted: {bad_x} words of reused device memory \
         and {bad_q} of reused pinned memory overwritten, the next call's closure ran {} times",
        ran.load(Ordering::SeqCst)
    );
}
