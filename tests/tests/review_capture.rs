//! Review of issue 13 (`cudagraph::capture`, `Graph`/`Exec`/`Released`, the `capture` statement,
//! `child(&mut g)`, `GraphBuilder::capture`): attempts, with safe code only (the kernels are the
//! trusted `common::Ops`; the few `launch!`es are the tests' own trusted eager launches, never
//! part of an attack), to make a graph read or write freed memory, race, or hit UB.
//!
//! Each test asserts the safe outcome (an error, or right results). Where the attack gets
//! through, the test goes on to show the consequence where that is harmless to the process
//! (memory of the stream-ordered pool reused by another live buffer, never a device fault) and
//! fails with a message saying what happened. The slow kernels run about 20 ms on an H200.
//!
//! Run by the reviewer on an H200 (driver 580.159, release build, `--test-threads=1`): 3 passed
//! (`…exec_launch_cannot_join…`: the driver refuses `cuGraphLaunch` into a capture;
//! `…reused_handle_address…`: no handle reuse in 512 captures, not observed;
//! `…embedded_twice…`), 10 failed, each with every element of the victim buffer overwritten
//! where it applies. Run them one at a time or with `--test-threads=1`: they rely on the
//! stream-ordered allocator handing a freed address out again.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host, launch, load};
use cudagraph::cudarc::driver::sys::CUgraphInstantiate_flags;
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig, PushKernelArg,
};
use cudagraph::{Capture, CaptureSliceMut, GraphCache, Mode, capture, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// `slow_iota` / `slow_affine` steps: about 20 ms on an H200, long enough for host-side frees
/// and reallocations to happen while the kernel runs.
const SPINS: u32 = 1 << 23;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The device address of `b`.
fn addr<T>(b: &CudaSlice<T>, s: &Arc<CudaStream>) -> u64 {
    b.device_ptr(s).0
}

/// A new buffer made by `make` on `stream`, at device address `at` if the stream-ordered
/// allocator hands that address out again within a few tries (the misses are kept alive until
/// then, and dropped after): `(buffer, whether it is at at)`.
fn alloc_at<T>(
    stream: &Arc<CudaStream>,
    at: u64,
    make: impl Fn() -> Result<CudaSlice<T>>,
) -> Result<(CudaSlice<T>, bool)> {
    let mut misses = Vec::new();
    for _ in 0..8 {
        let w = make()?;
        if addr(&w, stream) == at {
            return Ok((w, true));
        }
        misses.push(w);
    }
    Ok((misses.pop().expect("eight tries"), false))
}

/// [`alloc_at`] of `LEN` elements equal to `value`.
fn fill_at(stream: &Arc<CudaStream>, at: u64, value: u32) -> Result<(CudaSlice<u32>, bool)> {
    alloc_at(stream, at, || Ok(stream.clone_htod(&vec![value; LEN])?))
}

/// How many elements of `b` (read on `stream`) differ from `value`.
fn not_equal(stream: &Arc<CudaStream>, b: &CudaSlice<u32>, value: u32) -> Result<usize> {
    not_equal_n(stream, b, value)
}

/// [`not_equal`] of a buffer of any length.
fn not_equal_n(stream: &Arc<CudaStream>, b: &CudaSlice<u32>, value: u32) -> Result<usize> {
    Ok(stream.clone_dtoh(b)?.iter().filter(|&&v| v != value).count())
}

/// Takes (and prints) an error cudarc kept in the context object instead of returning it, so
/// that the next cudarc call does not return it.
fn clear(ctx: &Arc<CudaContext>, what: &str) {
    if let Err(e) = ctx.check_err() {
        println!("{what}: cudarc had recorded {e:?}");
    }
}

/// The `CUgraph` handle of a captured graph, from its `Debug` output.
fn raw_of(g: &cudagraph::Graph<'_>) -> String {
    let s = format!("{g:?}");
    let start = s.find("raw: ").expect("Graph's Debug shows its raw handle") + 5;
    s[start..].split([',', ' ']).next().unwrap_or_default().to_string()
}

/// The context, capture stream and kernels of a setup in which cudarc's event tracking (on, its
/// default) never makes a stream wait on an unlisted buffer, plus the stream its unlisted
/// buffers live on:
/// - "per-thread": one context object that made no stream, capturing on its per-thread default
///   stream (`CudaContext::per_thread_stream`, which captures and does not put cudarc in
///   multi-stream mode), buffers on that stream too;
/// - "two context objects": the capture on a stream of one `Arc<CudaContext>` of the device (in
///   multi-stream mode), the unlisted buffer of a second `Arc<CudaContext>` of the same device
///   that made no stream (its events are never waited on), on that one's default stream.
///
/// The first element is the context object whose errors cudarc records for the capture stream.
type Setup = (Arc<CudaContext>, Arc<CudaStream>, Ops, Arc<CudaStream>);

fn setup(per_thread: bool) -> Result<Setup> {
    assert!(cudagraph::driver_available(), "no CUDA driver: these tests need an NVIDIA GPU");
    if per_thread {
        let ctx = CudaContext::new(0)?;
        let s = ctx.per_thread_stream();
        assert!(!ctx.is_managing_stream_synchronization());
        let k = load(&ctx)?;
        Ok((ctx, s.clone(), k, s))
    } else {
        let (ctx_b, s, k) = gpu()?;
        assert!(ctx_b.is_managing_stream_synchronization());
        let ctx_a = CudaContext::new(0)?;
        assert!(!ctx_a.is_managing_stream_synchronization());
        Ok((ctx_b, s, k, ctx_a.default_stream()))
    }
}

const SETUPS: [(bool, &str); 2] = [(true, "per-thread"), (false, "two context objects")];

/// Attack: the closure of `cudagraph::capture` writes a buffer it did not list (borrowed from its
/// environment). SAFETY.md 8 says cudarc's event tracking makes that an invalidated capture,
/// "a capture needs a stream other than the legacy default stream, so a context that captures has
/// more than one stream". Neither holds for the per-thread default stream (it captures, and does
/// not switch cudarc to multi-stream mode), nor for a buffer of a second `Arc<CudaContext>` of
/// the device. Then the `Graph<'static>` records a memset of the buffer without borrowing it, the
/// buffer is dropped, and each launch writes freed memory. Safe outcome: the capture is refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_an_unlisted_buffer_written_by_a_standalone_capture_is_refused() -> Result {
    let _serial = common::serial();
    let mut failures: Vec<String> = Vec::new();
    for (per_thread, what) in SETUPS {
        let (ctx, s, _k, zs) = setup(per_thread)?;
        let mut y = s.alloc_zeros::<u32>(LEN)?;
        // Not listed; in a cell, so that the test can use it while the graph (which holds the
        // closure's borrow of the cell) lives.
        let z = std::cell::RefCell::new(zs.clone_htod(&vec![5u32; LEN])?);
        zs.synchronize()?;
        let z_at = addr(&z.borrow(), &zs);
        // Since issue 29 safe code cannot reach the capturing stream: the closure's memset of
        // z on z's own stream (held from the environment) runs at once and is not recorded.
        let r = capture(&s, (&mut y,), |c, (mut y,)| {
            c.zero(&mut y)?;
            zs.memset_zeros(&mut *z.borrow_mut())?;
            Ok::<(), cudagraph::Error>(())
        })
        .map(|g| g.nodes().map(|n| (n, g)));
        match r {
            Err(e) => println!("{what}: refused: {e}"),
            // The graph holds the closure's borrows (`F: 'a`): `z` cannot be dropped while the
            // graph lives (ui `review-standalone-capture-unlisted-buffer-outlives-graph`).
            Ok(Err(e)) => failures.push(format!("{what}: cuGraphGetNodes: {e}")),
            Ok(Ok((nodes, graph))) => {
                zs.synchronize()?;
                s.synchronize()?;
                if not_equal(&zs, &z.borrow(), 0)? != 0 {
                    failures.push(format!("{what}: z's memset did not run at once"));
                }
                if nodes != 1 {
                    failures.push(format!("{what}: {nodes} nodes, want 1 (y's memset only)"));
                }
                zs.memcpy_htod(&vec![5u32; LEN], &mut *z.borrow_mut())?;
                zs.synchronize()?;
                let mut exec = graph.instantiate()?;
                exec.launch(&s)?;
                s.synchronize()?;
                drop(exec);
                let touched = not_equal(&zs, &z.borrow(), 5)?;
                if touched != 0 {
                    failures.push(format!("{what}: the graph wrote {touched} elements of z"));
                }
            }
        }
        let _ = z_at;
        clear(&ctx, what);
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Ok(())
}

/// Attack: the same through `graph!`'s `capture` statement, which records again on every call:
/// the recording does not outlive the call, but the call's launch does. The unlisted buffer is
/// of a second context object (no stream of its own: never waited on) on that one's default
/// stream; it is dropped right after the call, while the graph's captured node (after a 20 ms
/// kernel) has not run yet, so it is freed under the graph. Safe outcome: the call is refused or
/// the buffer reallocated at that address is left alone.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_an_unlisted_buffer_of_a_capture_statement_is_not_freed_under_the_graph() -> Result {
    let _serial = common::serial();
    let (ctx, s, k, zs) = setup(false)?;
    let mut a = s.alloc_zeros::<u32>(LEN)?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut z = zs.clone_htod(&vec![5u32; LEN])?; // not listed
    zs.synchronize()?;
    let z_at = addr(&z, &zs);
    let mut cache = GraphCache::new();
    let zr = &mut z;
    let r = graph!(&mut cache, &s, {
        k.slow_iota(N, SPINS, 1, 0, &mut a).launch(cfg());
        capture(&a, &mut y, |c, (a, mut y)| -> std::result::Result<(), cudagraph::Error> {
            c.copy(&a, &mut y)?;
            // Safe code cannot reach the capturing stream (issue 29): this memset, on the call's
            // stream held from the environment, runs at once and is not recorded.
            s.memset_zeros(zr)?;
            Ok(())
        });
    });
    if let Err(e) = r {
        println!("refused: {e}");
        return Ok(());
    }
    s.synchronize()?;
    assert_eq!(not_equal(&zs, &z, 0)?, 0, "z's memset ran at once, during the call");
    drop(z); // compiles: the call is over
    let (w, reused) = fill_at(&zs, z_at, 7)?;
    zs.synchronize()?;
    s.synchronize()?;
    let clobbered = not_equal(&zs, &w, 7)?;
    clear(&ctx, "capture statement");
    assert_eq!(
        clobbered, 0,
        "the graph's captured node wrote a buffer the statement did not list after the call \
         returned and it was freed: {clobbered} elements of another live buffer (at the freed \
         address: {reused}) were overwritten"
    );
    Ok(())
}

/// Attack: a buffer *moved* into the closure of `cudagraph::capture`, written there and dropped
/// at the end of the closure, while the capture is still going on. `F: 'a` cannot help: the
/// graph borrows nothing of it. Two buffers: one of the capture stream's own (tracked) context
/// object on the capture stream (its drop frees it in the capture: a free node of memory the
/// graph did not allocate), and one of a second context object that made no stream (its drop
/// frees it at once on that one's default stream, which is not capturing). Since issue 29 the
/// capture runs on a private stream, so the closure's memset of z (on z's own stream, the only
/// one safe code holds) and the drop run at once, unrecorded. Safe outcome: the capture is
/// refused, or the graph (y's memset only) leaves a buffer reallocated at the freed address
/// alone.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_a_buffer_moved_into_a_standalone_capture_closure_and_dropped_there() -> Result {
    let _serial = common::serial();
    let mut failures: Vec<String> = Vec::new();
    for (own, what) in [(true, "the capture stream's context"), (false, "a second context")] {
        let (ctx, s, _k, zs) = setup(false)?;
        let zs = if own { s.clone() } else { zs };
        let mut y = s.alloc_zeros::<u32>(LEN)?;
        let z = zs.clone_htod(&vec![5u32; LEN])?;
        zs.synchronize()?;
        let z_at = addr(&z, &zs);
        let own_stream = zs.clone();
        let r = capture(&s, (&mut y,), move |c, (mut y,)| {
            let mut z = z;
            c.zero(&mut y)?;
            own_stream.memset_zeros(&mut z)?;
            drop(z);
            Ok::<(), cudagraph::Error>(())
        });
        clear(&ctx, what);
        match r {
            Err(e) => println!("{what}: refused: {e}"),
            Ok(graph) => {
                let nodes = graph.nodes()?;
                s.synchronize()?;
                zs.synchronize()?;
                let (w, reused) = fill_at(&zs, z_at, 7)?;
                zs.synchronize()?;
                let mut exec = graph.instantiate()?;
                exec.launch(&s)?;
                s.synchronize()?;
                let clobbered = not_equal(&zs, &w, 7)?;
                clear(&ctx, what);
                if clobbered > 0 || nodes != 1 {
                    failures.push(format!(
                        "{what}: a capture whose closure dropped a buffer it had written was \
                         accepted ({nodes} nodes, want 1); its launch overwrote {clobbered} \
                         elements of another live buffer (at the freed address: {reused})"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Ok(())
}

/// Attack: `graph!` (both modes) and `GraphBuilder::launch` called inside a capture closure, on
/// the capturing stream, with a buffer the outer capture did not list. `Exec::launch` refuses a
/// capturing stream ("a captured launch would record this exec's buffers into another graph,
/// which would not borrow them"); `GraphCache::run_call` checks nothing of the kind, so the
/// call's launch (or, in `Mode::Eager`, its kernels) is recorded into the outer `Graph`, which
/// borrows nothing: the buffer is freed and the outer graph still writes it. (Per-thread
/// setup: cudarc makes no wait that could invalidate the capture.) Safe outcome: the inner call
/// or the capture is refused. The last case, a `capture` statement inside, is refused today
/// (`CapturedWork::record` checks) and is here as a control.
///
/// Since issue 29 safe code cannot reach the capturing stream: with the call's stream as safe
/// code holds it (`joined` false), the inner call runs on its own, unrecorded (the outer graph
/// has no node); the capturing stream itself is only had through the `unsafe`
/// `Capture::stream` (`joined` true: its contract is broken on purpose, to check the refusals
/// behind it). (Was the per-thread setup, in which the outer capture itself is refused, for want
/// of cudarc's stream synchronization, so the closure never ran: now a tracked stream.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_graph_calls_inside_a_capture_closure_are_refused() -> Result {
    let _serial = common::serial();
    let mut failures = Vec::new();
    for (case, joined) in
        ["graph! (Mode::Graph)", "graph! (Mode::Eager)", "GraphBuilder", "capture statement"]
            .into_iter()
            .flat_map(|case| [(case, false), (case, true)])
    {
        let (ctx, s, k) = gpu()?;
        let mut z = s.clone_htod(&vec![5u32; LEN])?;
        let mut y = s.alloc_zeros::<u32>(LEN)?;
        let z_at = addr(&z, &s);
        let mut cache = GraphCache::new();
        if case.contains("Eager") {
            cache.set_mode(Mode::Eager);
        }
        let inner = std::cell::OnceCell::new();
        let outer = capture(&s, (), |c, ()| {
            let st = if joined {
                // SAFETY: NOT kept, on purpose: the inner call's work on z, which the outer
                // capture does not list, would be recorded (what the refusals must prevent).
                unsafe { c.stream() }
            } else {
                &s
            };
            let _ = inner.set(match case {
                "GraphBuilder" => {
                    let mut b = cache.builder(st);
                    let zw = b.write(&mut z);
                    b.kernel(k.iota(N, 1, 9, zw).launch(cfg()));
                    b.launch()
                }
                "capture statement" => graph!(&mut cache, st, {
                    capture(&z, &mut y, |c, (z, mut y)| c.copy(&z, &mut y));
                }),
                _ => graph!(&mut cache, st, {
                    k.iota(N, 1, 9, &mut z).launch(cfg());
                }),
            });
            Ok::<(), DriverError>(())
        });
        // Since the fix the outer graph holds the closure's borrows (of z, y and the cache), so
        // the inner call's buffers outlive it; what must not happen is an accepted inner call
        // recorded into the outer graph.
        let outer = outer.map(|g| g.nodes());
        match (inner.into_inner(), outer) {
            (Some(Ok(())), Ok(Ok(nodes))) if nodes > 0 => failures.push(format!(
                "{case} (joined {joined}): the outer graph ({nodes} nodes) recorded the call's \
                 work"
            )),
            (inner, outer) => {
                println!("{case} (joined {joined}): inner {inner:?}, outer {outer:?}")
            }
        }
        let _ = z_at;
        clear(&ctx, case);
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Ok(())
}

/// Attack: `Exec::launch` inside a capture closure on a stream that is *not* capturing, of an
/// exec whose operand lives on the capturing stream. `check_stream` passes, then the ledger
/// records an event on the operand's own stream (the capturing one) and makes the launch stream
/// wait on it: the launch stream joins the capture, and the launch is recorded into the outer
/// graph, which does not borrow the operand. Safe outcome: the launch or the capture is refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_an_exec_launch_cannot_join_a_capture_through_an_operands_own_stream() -> Result {
    let _serial = common::serial();
    let (ctx, s1, _k) = gpu()?;
    let s2 = ctx.new_stream()?;
    let mut y = s1.clone_htod(&vec![5u32; LEN])?; // own stream: s1
    let y_at = addr(&y, &s1);
    let g = capture(&s2, (&mut y,), |c, (mut y,)| c.zero(&mut y))?;
    let mut exec = g.instantiate()?;
    let launched = std::cell::OnceCell::new();
    let outer = capture(&s1, (), |_, ()| {
        let _ = launched.set(exec.launch(&s2));
        Ok::<(), DriverError>(())
    })
    .map(|g| g.nodes());
    let launched = launched.into_inner().expect("the closure ran");
    // Since the fix the outer graph would hold the closure's borrow of the exec (and so of y);
    // what must not happen is the launch recorded into the outer graph.
    match (launched, outer) {
        (Ok(()), Ok(Ok(nodes))) if nodes > 0 => panic!(
            "Exec::launch on a stream that joined the capture through the ledger was recorded \
             into the outer graph ({nodes} nodes)"
        ),
        (launched, outer) => println!("refused: launch {launched:?}, capture {outer:?}"),
    }
    drop(exec);
    let _ = y_at;
    clear(&ctx, "exec launch");
    drop(y);
    Ok(())
}

/// Attack on `child(&mut g)`: the cache remembers the embedded graph by its `CUgraph` handle and
/// sends nothing when a call embeds "the same graph again" (`Child::record` compares handles). A
/// graph dropped and a new one captured get the same handle when the driver reuses the address
/// (an ABA): the exec then replays the first graph (copied into the node when built), writing
/// the first graph's buffer, which nothing borrows any more (here alive and reset by the test; it
/// could as well be freed), and not the second's. Safe outcome: the second graph's buffer is
/// written, the first one is untouched.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_an_embedded_graph_at_a_reused_handle_address_is_sent_to_the_exec() -> Result {
    let _serial = common::serial();
    const TRIES: usize = 256;
    const SMALL: usize = 256;
    let (ctx, s, _k) = gpu()?;
    let zero = |c: &Capture, (mut v,): (CaptureSliceMut<'_, u32>,)| c.zero(&mut v);
    let mut y1 = s.clone_htod(&vec![5u32; SMALL])?;
    let mut ys: Vec<CudaSlice<u32>> = (0..TRIES)
        .map(|_| s.clone_htod(&vec![5u32; SMALL]))
        .collect::<std::result::Result<_, _>>()?;
    let mut cache = GraphCache::new();
    let mut g1 = capture(&s, (&mut y1,), zero)?;
    let raw1 = raw_of(&g1);
    graph!(&mut cache, &s, {
        child(&mut g1);
    })?;
    s.synchronize()?;
    drop(g1); // nothing borrows y1 any more
    // New graphs, all kept, until one gets g1's handle: first empty ones (no operand, so no
    // alias events are made between g1's destruction and the new graph's creation), then ones of
    // g1's topology on new buffers. An empty graph has another topology, but the cache does not
    // get as far as noticing: the handle is "the same graph".
    let (i, before, after) = {
        let mut others = Vec::new();
        let mut found = None;
        for _ in 0..TRIES {
            let g = capture(&s, (), |_, ()| Ok::<(), DriverError>(()))?;
            if raw_of(&g) == raw1 {
                found = Some((None, g));
                break;
            }
            others.push(g);
        }
        if found.is_none() {
            for (i, y) in ys.iter_mut().enumerate() {
                let g = capture(&s, (y,), zero)?;
                if raw_of(&g) == raw1 {
                    found = Some((Some(i), g));
                    break;
                }
                others.push(g);
            }
        }
        let Some((i, mut g2)) = found else {
            println!("no new graph of {} got the handle {raw1}: not observed", 2 * TRIES);
            return Ok(());
        };
        println!("new graph {i:?} has the dropped graph's handle {raw1}");
        s.memcpy_htod(&vec![5u32; SMALL], &mut y1)?; // y1 is the test's again
        s.synchronize()?;
        let before = cache.stats();
        graph!(&mut cache, &s, {
            child(&mut g2);
        })?;
        s.synchronize()?;
        (i, before, cache.stats())
    };
    let rewritten = not_equal_n(&s, &y1, 5)?;
    let unwritten = match i {
        Some(i) => not_equal_n(&s, &ys[i], 0)?,
        None => 0,
    };
    clear(&ctx, "child");
    assert!(
        rewritten == 0 && unwritten == 0,
        "a call embedding a new graph at the dropped graph's handle address replayed the dropped \
         one: {unwritten} of {SMALL} elements of the new graph's buffer not written, {rewritten} \
         of the old graph's buffer (borrowed by nothing) written; stats before {before:?}, \
         after {after:?}"
    );
    Ok(())
}

/// Attack on `Released::bind`: it checks address, size in bytes, context and `&mut`, not the
/// element type. A graph copying bytes (value 2) into a `CudaSlice<u8>`, released; the `u8`
/// buffer dropped and a `CudaSlice<bool>` of the same size allocated at the same address (the
/// stream-ordered allocator hands it out again) and bound: the launch would write byte 2 into
/// `bool`s, which `clone_dtoh` then reads back as invalid `bool`s (UB in safe code). Safe
/// outcome: the launch is refused. (The test never reads the `bool`s.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_bind_refuses_memory_of_another_element_type() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    let src = s.clone_htod(&vec![2u8; LEN])?;
    let mut dst = s.alloc_zeros::<u8>(LEN)?;
    let g = capture(&s, (&src, &mut dst), |c, (src, mut dst)| c.copy(&src, &mut dst))?;
    let released = g.instantiate()?.release();
    let at = addr(&dst, &s);
    drop(dst);
    let (mut flags, reused) = alloc_at(&s, at, || Ok(s.alloc_zeros::<bool>(LEN)?))?;
    assert!(reused, "precondition: the bool buffer did not get the u8 buffer's address");
    let mut exec = released.bind((&src, &mut flags));
    let r = exec.launch(&s);
    s.synchronize()?;
    drop(exec);
    clear(&ctx, "bind");
    assert!(
        r.is_err(),
        "bind accepted a CudaSlice<bool> where the graph was captured with a CudaSlice<u8> at the \
         same address: the launch wrote bytes 2 into bools (reading them back would be UB)"
    );
    Ok(())
}

/// Attack: the closure uses its view of a written operand on *another* stream (any cudarc call
/// takes a view). The view's alias has fresh events, so that stream does not wait for the
/// buffer's earlier users: a slow reader of y enqueued before (a graph on the capture stream) is
/// overtaken by the write. Safe outcome: the reader reads y's value before the write (or the
/// write never happens). Since issue 29 the view refuses a stream that is not part of the
/// capture: the call panics before cudarc enqueues anything (asserted), in every mode.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_a_view_used_on_another_stream_does_not_overtake_earlier_readers() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let y0 = host::iota(N, 3, 1);
    let want = host::affine(&y0, 5, 1);
    let mut failures = Vec::new();
    for case in ["cudagraph::capture", "capture statement", "capture statement, Mode::Eager"] {
        let mut y = s.clone_htod(&y0)?;
        let mut out = s.alloc_zeros::<u32>(LEN)?;
        let mut reader = GraphCache::new();
        graph!(&mut reader, &s, {
            k.slow_affine(N, SPINS, 5, 1, &y, &mut out).launch(cfg());
        })?;
        let zero_elsewhere =
            |_: &Capture, (mut y,): (CaptureSliceMut<'_, u32>,)| other.memset_zeros(&mut y);
        let r = catch_unwind(AssertUnwindSafe(|| match case {
            "cudagraph::capture" => capture(&s, (&mut y,), zero_elsewhere).map(drop),
            _ => {
                let mut cache = GraphCache::new();
                if case.contains("Eager") {
                    cache.set_mode(Mode::Eager);
                }
                graph!(&mut cache, &s, {
                    capture(&mut y, |_, (mut y,)| other.memset_zeros(&mut y));
                })
            }
        }));
        println!("{case}: {:?}", r.as_ref().map_err(|_| "panicked"));
        if r.is_ok() {
            failures.push(format!("{case}: the view was accepted on a stream outside the capture"));
        }
        s.synchronize()?;
        other.synchronize()?;
        clear(&ctx, case);
        let got = s.clone_dtoh(&out)?;
        let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        if bad > 0 {
            failures.push(format!(
                "{case}: the closure's write of y on another stream overtook the slow reader \
                 enqueued before: {bad} of {LEN} elements read the new value"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Ok(())
}

/// Attack: the same view on another stream, which is busy (a 20 ms kernel), so the closure's
/// write is still queued when the call returns. The standalone `capture` synchronizes the context
/// after an invalidated capture; the `capture` statement and `GraphBuilder::capture`
/// (`CapturedWork::record`) do not, and the aliases' joins failed inside the capture (the
/// isolation error), so nothing orders that write before the buffer's next user: dropping the
/// buffer right after the call frees it under the queued write. Safe outcome: the buffer
/// reallocated at that address is left alone. Since issue 29 the view refuses the other stream
/// (the call panics, asserted) and nothing is queued.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_an_invalidated_capture_waits_for_work_its_closure_left_on_another_stream() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut failures = Vec::new();
    for case in ["capture statement", "GraphBuilder::capture", "cudagraph::capture (control)"] {
        let mut scratch = other.alloc_zeros::<u32>(LEN)?;
        let mut busy = GraphCache::new();
        graph!(&mut busy, &other, {
            k.slow_iota(N, SPINS, 1, 0, &mut scratch).launch(cfg());
        })?;
        let mut y = s.clone_htod(&vec![5u32; LEN])?;
        let y_at = addr(&y, &s);
        let zero_elsewhere =
            |_: &Capture, (mut y,): (CaptureSliceMut<'_, u32>,)| other.memset_zeros(&mut y);
        let mut cache = GraphCache::new();
        let r = catch_unwind(AssertUnwindSafe(|| match case {
            "capture statement" => graph!(&mut cache, &s, {
                capture(&mut y, |_, (mut y,)| other.memset_zeros(&mut y));
            }),
            "GraphBuilder::capture" => {
                let mut b = cache.builder(&s);
                let yw = b.write(&mut y);
                b.capture(&s, (yw,), zero_elsewhere);
                b.launch()
            }
            _ => capture(&s, (&mut y,), zero_elsewhere).map(drop),
        }));
        println!("{case}: {:?}", r.as_ref().map_err(|_| "panicked"));
        if r.is_ok() {
            failures.push(format!("{case}: the view was accepted on a stream outside the capture"));
        }
        clear(&ctx, case);
        drop(y); // the call is over
        let (w, reused) = fill_at(&s, y_at, 7)?;
        s.synchronize()?;
        other.synchronize()?;
        let clobbered = not_equal(&s, &w, 7)?;
        clear(&ctx, case);
        if clobbered > 0 {
            failures.push(format!(
                "{case}: returned ({}) while the closure's write on another stream was still \
                 queued; it wrote {clobbered} of {LEN} elements of another live buffer after the \
                 operand was freed (at the freed address: {reused})",
                if r.is_ok() { "Ok" } else { "panicked" }
            ));
        }
        drop(scratch);
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Ok(())
}

/// What the closures of the panic test do: panic, or return an error.
fn panic_or_fail(panics: bool) -> std::result::Result<(), DriverError> {
    if panics {
        panic!("review: a panic in the closure, after the slow kernel");
    }
    Err(DriverError(cudagraph::cudarc::driver::sys::CUresult::CUDA_ERROR_UNKNOWN))
}

/// Attack: a panic in a `capture` statement's closure in `Mode::Eager`, after an earlier
/// statement's kernel (20 ms) was enqueued on the stream. `run_call` runs `order_after` (each
/// buffer's own stream waits for the call's work) only when `run_eager` returns; the panic skips
/// it. With the buffer of a second context object (not managing synchronization: its drop waits
/// on no event) on that one's default stream, dropping it after the caught panic frees it while
/// the kernel still writes it. Control: the same closure returning an error (then `order_after`
/// runs). Safe outcome: the buffer reallocated at that address is left alone in both cases.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_a_panic_in_an_eager_capture_statement_still_orders_the_buffers_own_streams() -> Result {
    let _serial = common::serial();
    let (ctx, s, k, ys) = setup(false)?;
    let mut failures = Vec::new();
    for (builder, panics) in [(false, false), (false, true), (true, true)] {
        let mut y = ys.alloc_zeros::<u32>(LEN)?; // own stream: the second object's default one
        ys.synchronize()?;
        let y_at = addr(&y, &ys);
        let mut eager = GraphCache::new();
        eager.set_mode(Mode::Eager);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            if builder {
                let mut b = eager.builder(&s);
                let yw = b.write(&mut y);
                b.kernel(k.slow_iota(N, SPINS, 1, 0, yw).launch(cfg()));
                b.capture(&s, (yw.read(),), |_, _| panic_or_fail(panics));
                b.launch()
            } else {
                graph!(&mut eager, &s, {
                    k.slow_iota(N, SPINS, 1, 0, &mut y).launch(cfg());
                    capture(&y, |_, _| panic_or_fail(panics));
                })
            }
        }));
        assert_eq!(caught.is_err(), panics);
        drop(y);
        let (w, reused) = fill_at(&ys, y_at, 7)?;
        ys.synchronize()?;
        s.synchronize()?;
        let clobbered = not_equal(&ys, &w, 7)?;
        clear(&ctx, "eager");
        if clobbered > 0 {
            failures.push(format!(
                "{} closure {}: the eager kernel wrote {clobbered} of {LEN} elements of another \
                 live buffer after its own buffer was freed (at the freed address: {reused})",
                if builder { "GraphBuilder::capture" } else { "capture statement" },
                if panics { "panicked" } else { "returned an error" }
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Ok(())
}

/// Attack: in `Mode::Eager` the closure runs directly; its view used on a busy stream of another
/// context object leaves a write queued there. In the per-thread setup (the stream's context
/// object does not manage synchronization) the alias's drop waits for nothing, the call's guards
/// and ledger know nothing of that stream, and the buffer (its own stream is the call's) is freed
/// as soon as it is dropped after the call: the queued write lands in freed memory. Safe outcome:
/// the buffer reallocated at that address is left alone.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_an_eager_capture_statement_waits_for_work_its_closure_left_on_another_stream() -> Result {
    let _serial = common::serial();
    let (ctx, s, k, _) = setup(true)?;
    let ctx2 = CudaContext::new(0)?;
    let other = ctx2.new_stream()?;
    let k2 = load(&ctx2)?;
    let mut scratch = other.alloc_zeros::<u32>(LEN)?;
    let mut busy = GraphCache::new();
    graph!(&mut busy, &other, {
        k2.slow_iota(N, SPINS, 1, 0, &mut scratch).launch(cfg());
    })?;
    let mut y = s.clone_htod(&vec![5u32; LEN])?;
    let y_at = addr(&y, &s);
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    // Since issue 29 the view refuses `other` (not part of the call), eagerly too: a panic.
    let r = catch_unwind(AssertUnwindSafe(|| {
        graph!(&mut eager, &s, {
            k.iota(N, 1, 2, &mut y).launch(cfg());
            capture(&mut y, |_, (mut y,)| other.memset_zeros(&mut y));
        })
    }));
    println!("eager call: {:?}", r.as_ref().map_err(|_| "panicked"));
    // A panic (the view refused `other`), or an error before the view was used (cudarc's
    // `bind_to_thread` of `other`'s context object returned first): never a call that went
    // through with the write queued on `other`.
    assert!(matches!(r, Err(_) | Ok(Err(_))), "the view was accepted on a stream outside the call");
    drop(y); // the call is over
    let (w, reused) = fill_at(&s, y_at, 7)?;
    s.synchronize()?;
    other.synchronize()?;
    let clobbered = not_equal(&s, &w, 7)?;
    clear(&ctx, "eager");
    clear(&ctx2, "other");
    assert_eq!(
        clobbered, 0,
        "an eager capture statement returned while its closure's write on another stream was \
         queued; it wrote {clobbered} of {LEN} elements of another live buffer after the operand \
         was freed (at the freed address: {reused})"
    );
    Ok(())
}

/// Attack: the closure ends the capture itself with cudarc's safe `CudaStream::end_capture` and
/// keeps the `CudaGraph` it returns: a graph of the closure's work on the views, which owns no
/// borrow. (With plain cudarc in multi-stream mode the same capture of the buffer itself is
/// invalidated by its events; the aliases' fresh events let it through.) Safe outcome: no graph
/// of the views leaves the closure.
///
/// Since issue 29 safe code holds only the call's stream, which is not capturing (`joined`
/// false): `end_capture` there ends nothing. Through the `unsafe` `Capture::stream` (`joined`
/// true) it is the joined stream, not the capture's origin: the driver refuses it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_cudarc_end_capture_inside_the_closure_hands_out_no_graph_of_the_views() -> Result {
    let _serial = common::serial();
    for joined in [false, true] {
        end_capture_inside_the_closure(joined)?;
    }
    Ok(())
}

fn end_capture_inside_the_closure(joined: bool) -> Result {
    let (ctx, s, _k) = gpu()?;
    let mut y = s.clone_htod(&vec![5u32; LEN])?;
    let y_at = addr(&y, &s);
    let mut escaped = None;
    let r = capture(&s, (&mut y,), |c, (mut y,)| {
        c.zero(&mut y)?;
        let st = if joined {
            // SAFETY: `end_capture` enqueues no work (and the driver refuses it on a stream
            // that is not the capture's origin).
            unsafe { c.stream() }
        } else {
            &s
        };
        escaped = Some(st.end_capture(CUgraphInstantiate_flags(0)));
        Ok::<(), cudagraph::Error>(())
    });
    println!("joined {joined}: capture: {:?}", r.map(drop));
    clear(&ctx, "capture");
    let cuda_graph = match escaped {
        Some(Ok(Some(g))) => g,
        Some(Ok(None)) => return Ok(()),
        Some(Err(e)) => {
            println!("joined {joined}: end_capture refused: {e:?}");
            return Ok(());
        }
        None => unreachable!("the closure ran"),
    };
    drop(y); // the capture returned: nothing borrows y
    clear(&ctx, "drop");
    let (w, reused) = fill_at(&s, y_at, 7)?;
    s.synchronize()?;
    cuda_graph.launch()?;
    s.synchronize()?;
    let clobbered = not_equal(&s, &w, 7)?;
    clear(&ctx, "escaped graph");
    panic!(
        "joined {joined}: a CudaGraph of the closure's work on a view escaped the closure; \
         launched after the buffer was dropped, it wrote {clobbered} of {LEN} elements of another live buffer (at the \
         freed address: {reused})"
    );
}

/// Attack: a buffer allocated inside the closure (on the capturing stream) is kept outside it.
/// Its memory is a graph allocation: it exists only once the graph ran, and the exec cannot run
/// again while the buffer lives. Any use of the buffer before the first launch (not done here:
/// it would fault the device) touches memory that is not mapped. Safe outcome: the capture is
/// refused (a captured allocation not freed inside the capture). Each later step is reported,
/// not `?`-ed.
///
/// Since issue 29 safe code reaches the capturing stream only through the `unsafe`
/// `Capture::stream`; since issue 30 an allocation there is graph memory of the recording,
/// accepted only when the closure frees it (`joined` true: kept past the closure, the
/// recording's check must refuse it). With the call's stream as safe code holds it
/// (`joined` false) the allocation is an ordinary one, at once: the capture is accepted with no
/// node and the buffer is a valid, zeroed one after the graph is gone.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_a_buffer_allocated_inside_the_closure_does_not_escape_it() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    for joined in [false, true] {
        let mut kept: Option<CudaSlice<u32>> = None;
        // The graph (if any) is dropped at once: it holds the closure's borrow of `kept`.
        let r = capture(&s, (), |c, ()| {
            let st = if joined {
                // SAFETY: NOT kept, on purpose: the closure allocates on the capturing stream
                // (what the recording's check must refuse).
                unsafe { c.stream() }
            } else {
                &s
            };
            kept = Some(st.alloc_zeros::<u32>(LEN)?);
            Ok::<(), DriverError>(())
        })
        .map(|g| g.nodes());
        clear(&ctx, "after the capture");
        match (joined, r) {
            (true, Err(e)) => {
                println!("joined: refused: {e}");
                drop(kept);
                clear(&ctx, "refused");
            }
            (true, Ok(nodes)) => panic!(
                "a capture whose closure allocated a CudaSlice on the capturing stream (which \
                 left the closure; its memory is a graph allocation) was accepted: {nodes:?} \
                 nodes"
            ),
            (false, r) => {
                assert_eq!(r??, 0, "an allocation on the call's stream is not recorded");
                let mut kept = kept.expect("the closure ran");
                assert_eq!(not_equal(&s, &kept, 0)?, 0, "the escaped buffer is zeroed");
                s.memcpy_htod(&vec![9u32; LEN], &mut kept)?;
                assert_eq!(not_equal(&s, &kept, 9)?, 0, "the escaped buffer is usable");
                ctx.check_err()?;
            }
        }
    }
    Ok(())
}

/// Positive check: one `Graph` embedded twice in one body runs twice, in order (a write-write
/// hazard on the graph's place), in both modes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review_the_same_graph_embedded_twice_runs_twice_in_order() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let y0 = host::iota(N, 3, 1);
    let mut want = y0.clone();
    for _ in 0..2 {
        host::affine_inplace(&mut want, 5, 7);
    }
    for mode in [Mode::Graph, Mode::Eager] {
        let mut y = s.clone_htod(&y0)?;
        let mut g = capture(&s, (&mut y,), |c, (mut y,)| {
            // SAFETY: `affine_inplace` reads and writes N elements of the listed `&mut` y, on
            // the joined stream.
            let (st, yv) = unsafe { (c.stream(), y.as_cuda_view_mut()) };
            launch!(st, k, "affine_inplace", cfg(); &N, &5u32, &7u32, yv)
        })?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        graph!(&mut cache, &s, {
            child(&mut g);
            child(&mut g);
        })?;
        drop(g);
        assert_same(&s.clone_dtoh(&y)?, &want, &format!("{mode:?}: y after two embeddings"));
    }
    ctx.check_err()?;
    Ok(())
}
