//! Review 11b: kept outputs (`Capture::keep`, `Exec::output`; issue 30 item 3), attacked with
//! safe code only. The one `unsafe` besides `K::load` is the documented `unsafe { s.stream() }`
//! join (and `as_cuda_view` of a listed view on it), whose contract every closure here keeps:
//! the joined work reads or writes listed views and otherwise only buffers it allocates on the
//! stream while captured, freed or kept.
//!
//! Most tests use one graph ([`kept_graph`]): a kernel node `x ← 3x + 1 + i` on the listed `x`
//! (so each launch computes something new without a host write), then on the joined stream
//! `out = a·x + b` by `slow_affine` (a slow *writer*: its stores come after `spins` steps) into
//! a buffer allocated while captured and kept. Readers of the output are `slow_affine(out, 1,
//! 0)` (a slow *reader*: its loads come after [`READ_SPINS`] steps, eight times the writer's)
//! and plain copies (fast), so a missing wait shows as wrong data. Every test compares with a
//! host model of the integer kernels, exactly.
//!
//! Expected on a GPU with the code as reviewed (commit 138dc37):
//! 1. `review11b_output_read_while_the_launch_runs_then_an_immediate_relaunch`: passes.
//! 2. `review11b_two_plain_readers_on_two_streams_then_an_immediate_relaunch`: FAILS (cudarc
//!    keeps one read event per buffer: the second reader's record replaces the first's, so the
//!    relaunch waits only for the second; the docs of `Exec::output` promise "a copy … on any
//!    stream is ordered before that launch").
//! 3. `review11b_dropping_the_exec_waits_for_a_pending_reader_then_the_memory_is_reused`:
//!    passes.
//! 4. `review11b_dropping_the_exec_after_readers_on_two_streams_frees_under_the_first`: FAILS
//!    (the same one read event: the drop's `cuMemFreeAsync` waits only for the second reader; a
//!    use after free of memory the crate frees). May end in an illegal-address error that
//!    poisons the context for the tests after it: run it on its own (`--exact`).
//! 5. `review11b_an_exec_of_an_unmanaged_second_object_frees_after_a_reader_on_a_managed_stream`:
//!    FAILS (`ExecHandle::drop` relies on cudarc's `leak`, which waits on the view's events only
//!    when the *view's* context object manages synchronization; here it does not, while the
//!    reader's object recorded the read event). Run it on its own too.
//! 6. `review11b_the_exec_sent_to_another_thread_uploads_and_relaunches_while_a_reader_runs`:
//!    passes (`Exec::upload` acquires nothing; the driver keeps a live allocation mapped).
//! 7. `review11b_keep_misuse_is_refused_and_a_keep_at_a_reused_address_is_exact`: passes.
//! 8. `review11b_graphs_with_kept_outputs_are_never_updated_embedded_or_read_before_a_launch`:
//!    passes.
//!
//! Fixed since (review 11b): `Exec::output` no longer hands out a `&CudaSlice` whose cudarc
//! events decide the order, but a `KeptOutput` (cudarc's `DevicePtr`/`DeviceSlice`) whose every
//! use makes its stream wait for the last launch and marks the output read; the next launch and
//! the exec's drop then wait for the whole context (`cuCtxSynchronize`), whatever streams the
//! readers used or how many, and the drop frees with `cuMemFree` on no stream (H3: never into a
//! user's capture). A reader is a cudarc copy, so the slow reader here is a slow kernel on its
//! destination followed by the copy of the output ([`slow_read`]). All eight must pass.

mod common;

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;

use common::{Ops, Result, assert_same, fresh_thread, gpu, host, launch, load, own_origin};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudagraph::{Capture, Error, Graph, GraphCache, Kept, KeptOutput, Mode, capture, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of the graph's slow writer: a few milliseconds on an H200.
const WRITE_SPINS: u32 = 1 << 20;
/// Steps of a slow reader: eight times the writer's, so a writer that does not wait for it
/// has long written when it loads.
const READ_SPINS: u32 = 1 << 23;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The graph of most tests, captured on `stream`: `x ← 3x + 1 + i` (a kernel node), then on the
/// joined stream `out = a·x + b` by `slow_affine` with `spins` steps into a buffer allocated
/// while captured and kept. Model: [`step`].
fn kept_graph<'a>(
    stream: &Arc<CudaStream>,
    k: &'a Ops,
    x: &'a mut CudaSlice<u32>,
    (a, b, spins): (u32, u32, u32),
) -> Result<(Graph<'a>, Kept<u32>)> {
    let kept = Rc::new(Cell::new(None));
    let to = kept.clone();
    let graph = capture(stream, (x,), move |s, (mut x,)| {
        s.kernel(k.affine_inplace(N, 3, 1, s.write(&mut x)?).launch(cfg()))?;
        // SAFETY: the work joined on the stream reads `x` (a listed view) and writes only
        // `out`, which it allocates on the stream while captured and keeps; the module stays
        // loaded (the caller holds `k` for as long as the graph).
        let st = unsafe { s.stream() };
        let mut out = st.alloc_zeros::<u32>(LEN)?;
        let xr = x.slice(..);
        // SAFETY: used on the joined stream only.
        let xv = unsafe { xr.as_cuda_view() };
        launch!(st, k, "slow_affine", cfg(); &N, &spins, &a, &b, xv, &mut out)?;
        to.set(Some(s.keep(out)?));
        Ok::<(), Error>(())
    })?;
    let kept = kept.get().expect("the closure kept its output");
    Ok((graph, kept))
}

/// One launch of [`kept_graph`] on the host: advances `x`, returns `out`.
fn step(x: &mut [u32], (a, b): (u32, u32)) -> Vec<u32> {
    host::affine_inplace(x, 3, 1);
    host::affine(x, a, b)
}

/// A slow reader of `src` on `s`: `dst = slow_affine(src, 1, 0)` (= src), loading after
/// [`READ_SPINS`] steps.
fn slow_read(
    s: &Arc<CudaStream>,
    k: &Ops,
    src: &KeptOutput<'_, u32>,
    dst: &mut CudaSlice<u32>,
) -> Result {
    // The kept output is not a kernel argument (it is read through cudarc's copies): a slow
    // kernel on `dst` first, then the copy, which reads `src` only after it.
    launch!(s, k, "slow_iota", cfg(); &N, &READ_SPINS, &0u32, &0u32, &mut *dst)?;
    s.memcpy_dtod(src, dst)?;
    Ok(())
}

/// The two sides of a refusal by `Exec::output`: an error naming the call, with `text` in it.
#[track_caller]
fn refused(r: std::result::Result<KeptOutput<'_, u32>, Error>, text: &str, what: &str) {
    match r {
        Err(Error::Node { source, .. }) => {
            assert!(source.call.contains(text), "{what}: {source}");
        }
        Err(other) => panic!("{what}: expected Error::Node, got {other}"),
        Ok(_) => panic!("{what}: expected a refusal, got the output"),
    }
}

/// Attack: the output read on a second stream while the launch that writes it still runs (a
/// fast copy, which must wait for the slow writer), then a slow reader on that stream, then at
/// once a relaunch on the first stream, which frees the output, allocates it again at the same
/// address and rewrites it: it must wait for the slow reader (the view's cudarc events; the
/// ledger). Three rounds, each a new capture. Expected: pass.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_output_read_while_the_launch_runs_then_an_immediate_relaunch() -> Result {
    let _serial = common::serial();
    let (ctx, s1, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    let x0 = host::iota(N, 7, 3);
    let mut x = s1.clone_htod(&x0)?;
    let (mut fast, mut slow) = (s2.alloc_zeros::<u32>(LEN)?, s2.alloc_zeros::<u32>(LEN)?);
    for round in 0..3u32 {
        s1.memcpy_htod(&x0, &mut x)?;
        ctx.synchronize()?;
        let mut model = x0.clone();
        let want1 = step(&mut model, (5, round));
        let want2 = step(&mut model, (5, round));
        let (graph, out) = kept_graph(&s1, &k, &mut x, (5, round, WRITE_SPINS))?;
        let mut exec = graph.instantiate()?;
        exec.launch(&s1)?; // the slow writer runs for milliseconds
        {
            let o = exec.output(&out)?;
            s2.memcpy_dtod(&o, &mut fast)?; // must wait for the writer
            slow_read(&s2, &k, &o, &mut slow)?; // the relaunch must wait for it
        }
        exec.launch(&s1)?; // at once
        let what = |w: &str| format!("round {round}: {w}");
        assert_same(&s2.clone_dtoh(&fast)?, &want1, &what("fast copy of launch 1's output"));
        assert_same(&s2.clone_dtoh(&slow)?, &want1, &what("slow reader of launch 1's output"));
        assert_same(&s1.clone_dtoh(&exec.output(&out)?)?, &want2, &what("launch 2's output"));
        drop(exec);
    }
    ctx.synchronize()?;
    ctx.check_err()?;
    Ok(())
}

/// Attack (hole found by reading): two plain cudarc readers of the output on two streams, a
/// slow one on `s2` and a fast copy on `s3`, then at once a relaunch on `s1`. cudarc 0.19 keeps
/// one read event per buffer and each reader's guard records it again, so the relaunch's
/// acquire (`KeptSlice::acquire` → `device_ptr_mut`) waits for the fast copy only; the ledger
/// adds nothing (the output's own stream is the launch stream). The relaunch frees the output,
/// allocates it at the same address and rewrites it under the slow reader. The docs of
/// `Exec::output` promise "work enqueued on it in the meantime (a copy to the host on any
/// stream) is ordered before that launch". Launch 1 has finished before the readers start
/// (`s1.synchronize()`), so only the readers race with the relaunch.
/// Expected on a GPU as reviewed: FAILS (the slow reader sees launch 2's values). Safe outcome:
/// the slow reader reads launch 1's output.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_two_plain_readers_on_two_streams_then_an_immediate_relaunch() -> Result {
    let _serial = common::serial();
    let (ctx, s1, k) = gpu()?;
    let (s2, s3) = (ctx.new_stream()?, ctx.new_stream()?);
    let mut model = host::iota(N, 7, 3);
    let mut x = s1.clone_htod(&model)?;
    let (mut slow, mut fast) = (s2.alloc_zeros::<u32>(LEN)?, s3.alloc_zeros::<u32>(LEN)?);
    ctx.synchronize()?;
    let want1 = step(&mut model, (5, 2));
    let want2 = step(&mut model, (5, 2));
    let (graph, out) = kept_graph(&s1, &k, &mut x, (5, 2, WRITE_SPINS))?;
    let mut exec = graph.instantiate()?;
    exec.launch(&s1)?;
    s1.synchronize()?; // launch 1 is over
    {
        let o = exec.output(&out)?;
        slow_read(&s2, &k, &o, &mut slow)?; // records the output's read event on s2 …
        s3.memcpy_dtod(&o, &mut fast)?; // … which this copy records again, on s3
    }
    exec.launch(&s1)?; // at once: waits for the copy on s3, and for the reader on s2?
    ctx.synchronize()?;
    assert_same(&s3.clone_dtoh(&fast)?, &want1, "fast copy on s3 of launch 1's output");
    assert_same(&s1.clone_dtoh(&exec.output(&out)?)?, &want2, "launch 2's output");
    assert_same(&s2.clone_dtoh(&slow)?, &want1, "slow reader on s2 of launch 1's output");
    drop(exec);
    ctx.check_err()?;
    Ok(())
}

/// One round of tests 3 and 4: launch an exec of [`kept_graph`] on `s1` (fast writer), read its
/// output with a slow reader on `s2` (and, with `s3`, copy it on `s3` after), drop the exec at
/// once, then at once capture, instantiate and launch on `s1` (the stream that frees the output,
/// whose graph memory the pool then likely hands out again) another exec whose kept output of
/// the same size is written with other values. Returns `(slow reader, the other output)` next
/// to their models.
fn drop_round(
    ctx: &Arc<CudaContext>,
    (s1, s2, s3): (&Arc<CudaStream>, &Arc<CudaStream>, Option<&Arc<CudaStream>>),
    k: &Ops,
) -> Result<[(Vec<u32>, Vec<u32>); 2]> {
    let mut model = host::iota(N, 7, 3);
    let mut model2 = host::iota(N, 2, 9);
    let (mut x, mut x2) = (s1.clone_htod(&model)?, s1.clone_htod(&model2)?);
    let mut slow = s2.alloc_zeros::<u32>(LEN)?;
    let mut fast = match s3 {
        Some(s3) => Some(s3.alloc_zeros::<u32>(LEN)?),
        None => None,
    };
    ctx.synchronize()?;
    let want = step(&mut model, (5, 2));
    let want2 = step(&mut model2, (9, 4));
    {
        let (graph, out) = kept_graph(s1, k, &mut x, (5, 2, 1))?;
        let mut exec = graph.instantiate()?;
        exec.launch(s1)?;
        let o = exec.output(&out)?;
        slow_read(s2, k, &o, &mut slow)?;
        if let (Some(s3), Some(fast)) = (s3, fast.as_mut()) {
            s3.memcpy_dtod(&o, fast)?;
        }
        drop(exec); // frees the output: after its readers?
    }
    let (graph2, out2) = kept_graph(s1, k, &mut x2, (9, 4, 1))?;
    let mut exec2 = graph2.instantiate()?;
    exec2.launch(s1)?;
    let got2 = s1.clone_dtoh(&exec2.output(&out2)?)?;
    drop(exec2);
    ctx.synchronize()?;
    if let (Some(s3), Some(fast)) = (s3, fast.as_ref()) {
        assert_same(&s3.clone_dtoh(fast)?, &want, "the fast copy on s3");
    }
    Ok([(s2.clone_dtoh(&slow)?, want), (got2, want2)])
}

/// Attack: the exec dropped while a slow reader of its output runs on another stream, then at
/// once another exec allocating graph memory of the same size on the stream that frees it. The
/// drop must wait for the launch (`cuEventSynchronize`) and free after the reader (cudarc's
/// `leak` of the view waits on its read event before `cuMemFreeAsync`). Then the same with
/// cudarc's event tracking off on a fresh context object whose every cudarc use is on one
/// stream (the capture's, the launches', the reader's and the free's). Expected: pass.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_dropping_the_exec_waits_for_a_pending_reader_then_the_memory_is_reused() -> Result {
    let _serial = common::serial();
    let (ctx, s1, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    for round in 0..3 {
        let [(slow, want), (got2, want2)] = drop_round(&ctx, (&s1, &s2, None), &k)?;
        assert_same(&got2, &want2, &format!("tracking on, round {round}: the other exec"));
        assert_same(&slow, &want, &format!("tracking on, round {round}: the slow reader"));
    }
    ctx.check_err()?;
    fresh_thread(|| -> Result {
        let ctx = CudaContext::new(0)?;
        // SAFETY: every cudarc use of this object's buffers below is on the one stream `s`
        // (the captures' joined work, the launches, the readers and the exec's free included).
        unsafe { ctx.disable_event_tracking() };
        let s = ctx.new_stream()?;
        let k = load(&ctx)?;
        for round in 0..3 {
            let [(slow, want), (got2, want2)] = drop_round(&ctx, (&s, &s, None), &k)?;
            assert_same(&got2, &want2, &format!("tracking off, round {round}: the other exec"));
            assert_same(&slow, &want, &format!("tracking off, round {round}: the slow reader"));
        }
        ctx.check_err()?;
        Ok(())
    })
}

/// Attack (hole found by reading): as test 3, with a second reader, a fast copy on `s3`, after
/// the slow one on `s2`. The copy records the output's one read event again, so the drop's
/// `leak` makes the free wait for the copy only (`ExecHandle::drop`, capture.rs:1043): the
/// memory is freed, and the other exec's graph memory allocated and written, under the slow
/// reader. A use after free of memory the crate frees, with safe code.
/// Expected on a GPU as reviewed: FAILS (wrong values, or an illegal-address error that poisons
/// the context: run it on its own). Safe outcome: the slow reader reads the dropped exec's
/// output.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_dropping_the_exec_after_readers_on_two_streams_frees_under_the_first() -> Result {
    let _serial = common::serial();
    let (ctx, s1, k) = gpu()?;
    let (s2, s3) = (ctx.new_stream()?, ctx.new_stream()?);
    for round in 0..3 {
        let [(slow, want), (got2, want2)] = drop_round(&ctx, (&s1, &s2, Some(&s3)), &k)?;
        assert_same(&got2, &want2, &format!("round {round}: the other exec"));
        assert_same(&slow, &want, &format!("round {round}: the slow reader on s2"));
    }
    ctx.check_err()?;
    Ok(())
}

/// Attack (hole found by reading): two `Arc<CudaContext>` objects of the device, both made in
/// safe code. `A` made a stream (it manages synchronization) and owns this thread's capture
/// origin; `B` made none (its per-thread stream only: it manages nothing). The graph is
/// captured and launched on `B`'s per-thread stream, so the exec's view of the output is `B`'s
/// and has events (tracking is on) that cudarc waits on only where `B` manages. The program
/// orders a slow reader on `A`'s stream `s2` after the launch itself (an event: safe cudarc),
/// and that reader records the view's read event (`s2`'s object manages). Then the exec is
/// dropped: `ExecHandle::drop` (capture.rs:1043) frees after `KeptSlice::release`
/// (session.rs:142), whose cudarc `leak` waits on the events only if the *view's* object
/// manages (cudarc core.rs `leak`), so the free runs at once on the idle per-thread stream, and
/// the next exec on it reuses the memory under the reader. (The crate's guards record events
/// "whatever cudarc's mode" because of exactly this two-object case; the free does not wait the
/// same way.)
/// Expected on a GPU as reviewed: FAILS (wrong values or an illegal-address error: run it on
/// its own). Safe outcome: the reader reads the dropped exec's output.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_an_exec_of_an_unmanaged_second_object_frees_after_a_reader_on_a_managed_stream()
-> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let (a, sa, ka) = gpu()?;
        own_origin(&sa)?;
        let s2 = a.new_stream()?;
        let b = CudaContext::new(0)?;
        let p = b.per_thread_stream();
        assert!(!b.is_managing_stream_synchronization());
        let kb = load(&b)?;
        for round in 0..3 {
            let mut model = host::iota(N, 7, 3 + round);
            let mut model2 = host::iota(N, 2, 9 + round);
            let (mut x, mut x2) = (p.clone_htod(&model)?, p.clone_htod(&model2)?);
            let mut slow = s2.alloc_zeros::<u32>(LEN)?;
            a.synchronize()?;
            let want = step(&mut model, (5, 2));
            let want2 = step(&mut model2, (9, 4));
            {
                let (graph, out) = kept_graph(&p, &kb, &mut x, (5, 2, 1))?;
                let mut exec = graph.instantiate()?;
                assert!(!b.is_managing_stream_synchronization(), "B made no stream");
                exec.launch(&p)?;
                // The reader after the launch, ordered by the program (cudarc does not wait on
                // the events of a view of `B`, which manages nothing).
                let launched = p.record_event(None)?;
                s2.wait(&launched)?;
                slow_read(&s2, &ka, &exec.output(&out)?, &mut slow)?;
                drop(exec);
            }
            let (graph2, out2) = kept_graph(&p, &kb, &mut x2, (9, 4, 1))?;
            let mut exec2 = graph2.instantiate()?;
            exec2.launch(&p)?;
            let got2 = p.clone_dtoh(&exec2.output(&out2)?)?;
            drop(exec2);
            a.synchronize()?;
            assert_same(&got2, &want2, &format!("round {round}: the other exec"));
            assert_same(&s2.clone_dtoh(&slow)?, &want, &format!("round {round}: the reader"));
        }
        a.check_err()?;
        b.check_err()?;
        Ok(())
    })
}

/// Attack: `Exec` is `Send`. Launched on `s1`, its output read by a slow reader on `s2`, the exec
/// is moved to another thread, which at once uploads it on that thread's per-thread stream
/// (`Exec::upload` acquires nothing: it does not wait for the output's readers, and "uses memory
/// cached by stream to back the allocations owned by graphExec"), relaunches it there (which
/// must wait for the reader), reads the new output and drops the exec there. Expected: pass
/// (the driver must not remap the live allocation under the reader).
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_the_exec_sent_to_another_thread_uploads_and_relaunches_while_a_reader_runs() -> Result
{
    let _serial = common::serial();
    let (ctx, s1, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    for round in 0..3u32 {
        let mut model = host::iota(N, 7, 3 + round);
        let mut x = s1.clone_htod(&model)?;
        let mut slow = s2.alloc_zeros::<u32>(LEN)?;
        ctx.synchronize()?;
        let want1 = step(&mut model, (5, 2));
        let want2 = step(&mut model, (5, 2));
        let (graph, out) = kept_graph(&s1, &k, &mut x, (5, 2, 1))?;
        let mut exec = graph.instantiate()?;
        exec.launch(&s1)?;
        slow_read(&s2, &k, &exec.output(&out)?, &mut slow)?;
        let there = ctx.clone();
        let got2 = fresh_thread(move || -> Result<Vec<u32>> {
            let pts = there.per_thread_stream(); // this thread's per-thread stream
            exec.upload(&pts)?; // while the reader on s2 runs
            exec.launch(&pts)?; // must wait for it
            let got = pts.clone_dtoh(&exec.output(&out)?)?;
            drop(exec); // on this thread
            Ok(got)
        })?;
        ctx.synchronize()?;
        assert_same(&got2, &want2, &format!("round {round}: the relaunch on the other thread"));
        assert_same(&s2.clone_dtoh(&slow)?, &want1, &format!("round {round}: the slow reader"));
    }
    ctx.check_err()?;
    Ok(())
}

/// The closure of the refused keeps below: allocates a buffer on the joined stream and keeps it.
fn keep_one(c: &Capture) -> std::result::Result<Kept<u32>, Error> {
    // SAFETY: the joined work only allocates a buffer of its own, which is kept (or, refused,
    // dropped in the closure).
    let st = unsafe { c.stream() };
    let t = st.alloc_zeros::<u32>(LEN)?;
    c.keep(t)
}

/// Attack: `Kept` and `keep` misused, each of which must be refused without harm, then a keep
/// that must work:
/// - a `Kept` of one capture given to the exec of another (both keep one `u32` output, index
///   0): refused both ways;
/// - a `Kept` from a closure that fails after keeping, from a capture invalidated after keeping
///   (a `synchronize` of the joined stream), and from a closure that panics after keeping:
///   capture errors (the panic comes back), and the `Kept`s are refused by an existing exec;
/// - `keep` after the capture was invalidated: refused;
/// - `keep` of a buffer of another context (a non-primary context of the device): refused;
/// - `keep` in a `capture` statement in `Mode::Graph` and `Mode::Eager`, and in
///   `GraphBuilder::capture`: refused, nothing launched;
/// - `keep` of a buffer allocated while captured after another was freed there, likely at the
///   freed one's address (the recording hands it out again): accepted, and its output exact
///   over three launches (`check_recording` counts per address).
///
/// Expected: pass.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_keep_misuse_is_refused_and_a_keep_at_a_reused_address_is_exact() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let (mut ma, mut mb) = (host::iota(N, 3, 1), host::iota(N, 5, 2));
    let (mut xa, mut xb) = (s.clone_htod(&ma)?, s.clone_htod(&mb)?);
    let probe = s.alloc_zeros::<u32>(1)?;
    let (ga, ka) = kept_graph(&s, &k, &mut xa, (5, 2, 1))?;
    let (gb, kb) = kept_graph(&s, &k, &mut xb, (7, 3, 1))?;
    let (mut ea, mut eb) = (ga.instantiate()?, gb.instantiate()?);
    ea.launch(&s)?;
    eb.launch(&s)?;
    let other = "another capture";
    refused(ea.output(&kb), other, "exec a, the Kept of capture b");
    refused(eb.output(&ka), other, "exec b, the Kept of capture a");
    assert_same(&s.clone_dtoh(&ea.output(&ka)?)?, &step(&mut ma, (5, 2)), "exec a's output");
    assert_same(&s.clone_dtoh(&eb.output(&kb)?)?, &step(&mut mb, (7, 3)), "exec b's output");

    // A closure that fails after keeping.
    let orphan = Cell::new(None);
    let r = capture(
        &s,
        (&probe,),
        |c, (_p,)| -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
            orphan.set(Some(keep_one(c)?));
            Err("the closure fails after keeping".into())
        },
    );
    assert!(matches!(r, Err(Error::Capture { .. })), "a failing closure: {r:?}");
    refused(ea.output(&orphan.get().expect("kept")), other, "the Kept of a failed closure");

    // A capture invalidated after keeping.
    let orphan = Cell::new(None);
    let r = capture(&s, (&probe,), |c, (_p,)| {
        orphan.set(Some(keep_one(c)?));
        // SAFETY: the synchronize enqueues nothing; it invalidates the capture.
        let st = unsafe { c.stream() };
        st.synchronize()?;
        Ok::<(), Error>(())
    });
    assert!(r.is_err(), "a capture invalidated after a keep: {r:?}");
    refused(ea.output(&orphan.get().expect("kept")), other, "the Kept of an invalidated capture");
    ctx.synchronize()?;
    let _ = ctx.check_err();

    // A keep after the capture was invalidated.
    let said = std::cell::RefCell::new(String::new());
    let r = capture(&s, (&probe,), |c, (_p,)| {
        // SAFETY: the joined work only allocates a buffer of its own, dropped or kept; the
        // synchronize enqueues nothing (it invalidates the capture).
        let st = unsafe { c.stream() };
        let t = st.alloc_zeros::<u32>(LEN)?;
        let _ = st.synchronize();
        *said.borrow_mut() = match c.keep(t) {
            Ok(kept) => format!("kept {kept:?}"),
            Err(e) => format!("refused: {e}"),
        };
        Ok::<(), Error>(())
    });
    assert!(r.is_err(), "an invalidated capture: {r:?}");
    assert!(said.borrow().starts_with("refused"), "keep after the invalidation: {}", said.borrow());
    ctx.synchronize()?;
    let _ = ctx.check_err();

    // A closure that panics after keeping.
    let r = catch_unwind(AssertUnwindSafe(|| {
        capture(&s, (&probe,), |c, (_p,)| -> std::result::Result<(), Error> {
            let kept = keep_one(c)?;
            panic!("a panic after keeping {kept:?}")
        })
        .map(drop)
    }));
    assert!(r.is_err(), "the closure's panic comes back");
    ctx.synchronize()?;
    let _ = ctx.check_err();

    // A buffer of another context.
    fresh_thread(|| -> Result {
        let (ctx, s, _k) = gpu()?;
        let nonprimary = CudaContext::new_non_primary(0, 0)?;
        let ns = nonprimary.new_stream()?;
        let foreign = ns.alloc_zeros::<u32>(LEN)?;
        ns.synchronize()?;
        let probe = s.alloc_zeros::<u32>(1)?;
        let r = capture(&s, (&probe,), move |c, (_p,)| c.keep(foreign).map(drop));
        match r {
            Err(Error::Capture { source, .. }) => {
                assert!(format!("{source}").contains("another context"), "{source}")
            }
            other => panic!("expected the keep of another context's buffer refused: {other:?}"),
        }
        ctx.synchronize()?;
        ctx.check_err()?;
        Ok(())
    })?;

    // In a capture statement (both modes) and in a builder's capture.
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let r = graph!(&mut cache, &s, {
            capture(&probe, &mut y, |c, (_p, _y)| keep_one(c).map(drop));
        });
        let e = r.expect_err("keep in a capture statement");
        assert!(format!("{e}").contains("Capture::keep"), "{mode:?}: {e}");
        let st = cache.stats();
        assert_eq!((st.launches, st.eager_calls), (0, 0), "{mode:?}: {st:?}");
    }
    let mut cache = GraphCache::new();
    let mut b = cache.builder(&s);
    let (pr, yw) = (b.read(&probe), b.write(&mut y));
    b.capture(&s, (pr, yw), |c, (_p, _y)| keep_one(c).map(drop));
    let e = b.launch().expect_err("keep in a builder's capture");
    assert!(format!("{e}").contains("Capture::keep"), "{e}");
    assert_eq!(cache.stats().launches, 0);
    ctx.synchronize()?;
    let _ = ctx.check_err();

    // A keep at an address the recording freed and gave out again.
    let mut mf = host::iota(N, 11, 4);
    let mut xf = s.clone_htod(&mf)?;
    let (reused, kept) = (Cell::new(false), Cell::new(None));
    let graph = capture(&s, (&mut xf,), |c, (mut x,)| {
        c.kernel(k.affine_inplace(N, 3, 1, c.write(&mut x)?).launch(cfg()))?;
        // SAFETY: the joined work reads `x` (a listed view) and writes only buffers it
        // allocates on the stream while captured: `first`, freed here, and `again`, kept.
        let st = unsafe { c.stream() };
        let first = st.alloc_zeros::<u32>(LEN)?;
        let at = first.device_ptr(st).0;
        drop(first); // a free node: the recording may give the address out again
        let mut again = st.alloc_zeros::<u32>(LEN)?;
        reused.set(again.device_ptr(st).0 == at);
        let xr = x.slice(..);
        // SAFETY: used on the joined stream only.
        let xv = unsafe { xr.as_cuda_view() };
        launch!(st, k, "slow_affine", cfg(); &N, &1u32, &6u32, &5u32, xv, &mut again)?;
        kept.set(Some(c.keep(again)?));
        Ok::<(), Error>(())
    })?;
    println!("the kept buffer is at the freed one's address: {}", reused.get());
    let kf = kept.get().expect("kept");
    let mut ef = graph.instantiate()?;
    refused(ef.output(&ka), other, "exec f, the Kept of capture a");
    for launch in 0..3 {
        ef.launch(&s)?;
        let want = step(&mut mf, (6, 5));
        assert_same(&s.clone_dtoh(&ef.output(&kf)?)?, &want, &format!("launch {launch}"));
    }
    drop((ea, eb, ef));
    ctx.synchronize()?;
    ctx.check_err()?;
    Ok(())
}

/// Attack: a graph with kept outputs where the crate says it never goes: embedded with
/// `child(&mut g)` in `graph!` (`Mode::Graph`, and `Mode::Eager`, where `child` instantiates
/// the graph without `AUTO_FREE_ON_LAUNCH` and destroys the exec under its launch), and in a
/// builder; given to a plain exec's `Exec::update`; a plain graph given to its exec's
/// `Exec::update` and `Released::update`; a kept graph given to a released plain exec's
/// `Released::update`; `Exec::upload` before the first launch, then `Exec::output`. Each must
/// be refused with nothing launched, and the exec must still launch exactly after.
/// Expected: pass.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review11b_graphs_with_kept_outputs_are_never_updated_embedded_or_read_before_a_launch() -> Result
{
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut model = host::iota(N, 3, 5);
    let mut x = s.clone_htod(&model)?;
    let (mut x3, mut x4) = (s.clone_htod(&model)?, s.clone_htod(&model)?);
    let x2 = s.clone_htod(&host::iota(N, 2, 2))?;
    let z = || s.alloc_zeros::<u32>(LEN);
    let (mut y1, mut y2, mut y3) = (z()?, z()?, z()?);
    let copy = |c: &Capture,
                (x2, mut y): (
        cudagraph::CaptureSlice<'_, u32>,
        cudagraph::CaptureSliceMut<'_, u32>,
    )| { c.copy(&x2, &mut y) };
    let says = |e: &Error, text: &str, what: &str| {
        assert!(format!("{e}").contains(text), "{what}: {e}");
    };
    let (mut g, out) = kept_graph(&s, &k, &mut x, (5, 2, 1))?;

    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let r = graph!(&mut cache, &s, {
            child(&mut g);
        });
        let e = r.expect_err("a graph with kept outputs as a child");
        assert!(matches!(e, Error::InvalidNode { .. }), "{mode:?}: {e}");
        says(&e, "keeps outputs", &format!("{mode:?}"));
        let st = cache.stats();
        assert_eq!((st.launches, st.eager_calls), (0, 0), "{mode:?}: {st:?}");
    }
    let mut cache = GraphCache::new();
    let mut b = cache.builder(&s);
    b.child(&mut g);
    let e = b.launch().expect_err("a graph with kept outputs as a builder's child");
    says(&e, "keeps outputs", "builder");
    assert_eq!(cache.stats().launches, 0);

    // A plain exec refuses a kept graph, and a released plain exec too.
    let mut plain = capture(&s, (&x2, &mut y1), copy)?.instantiate()?;
    let (g3, _) = kept_graph(&s, &k, &mut x3, (5, 2, 1))?;
    match plain.update(g3) {
        Err(refused) => says(&refused.error, "kept outputs", "Exec::update(kept graph)"),
        Ok(()) => panic!("a plain exec took a graph with kept outputs"),
    }
    plain.launch(&s)?;
    let released = plain.release();
    assert_same(&s.clone_dtoh(&y1)?, &host::iota(N, 2, 2), "the plain exec after the refusal");
    let (g4, _) = kept_graph(&s, &k, &mut x4, (5, 2, 1))?;
    match released.update(g4) {
        Err(refused) => says(&refused.error, "kept outputs", "Released::update(kept graph)"),
        Ok(_) => panic!("a released plain exec took a graph with kept outputs"),
    }

    // The kept exec: uploaded before its first launch, still no output; refuses plain graphs.
    let mut exec = g.instantiate()?;
    exec.upload(&s)?;
    refused(exec.output(&out), "not launched yet", "after an upload, before the first launch");
    let g2 = capture(&s, (&x2, &mut y2), copy)?;
    match exec.update(g2) {
        Err(refused) => says(&refused.error, "kept outputs", "Exec::update(plain graph)"),
        Ok(()) => panic!("an exec with kept outputs took an update"),
    }
    let g2 = capture(&s, (&x2, &mut y3), copy)?;
    let released = match exec.release().update(g2) {
        Err(refused) => {
            says(&refused.error, "kept outputs", "Released::update(plain graph)");
            refused.released
        }
        Ok(_) => panic!("a released exec with kept outputs took an update"),
    };
    let mut exec = released.bind((&mut x,));
    refused(exec.output(&out), "not launched yet", "after the refusals, before the first launch");
    for launch in 0..3 {
        exec.launch(&s)?;
        let want = step(&mut model, (5, 2));
        assert_same(&s.clone_dtoh(&exec.output(&out)?)?, &want, &format!("launch {launch}"));
    }
    assert_same(&s.clone_dtoh(&y2)?, &vec![0; LEN], "the refused graphs never ran (y2)");
    assert_same(&s.clone_dtoh(&y3)?, &vec![0; LEN], "the refused graphs never ran (y3)");
    drop(exec);
    ctx.synchronize()?;
    ctx.check_err()?;
    Ok(())
}
