//! GPU tests of stream capture (`cudagraph::capture`, issue 13 item 2): cudarc work captured in
//! multi-stream mode with event tracking on, a panic, an invalidated capture and an error inside
//! the closure (the stream usable afterwards), `Exec::update` (pointer swap; refused topology
//! change), `Released::bind`, and the graph's nodes, edges and DOT; explicit kernel nodes
//! (`Capture::kernel`, issue 13 item 3, the scenarios of PyCUDA's CUDA-graph pull request: a
//! node whose scalar is set on the exec between launches, two nodes feeding captured work with
//! one re-pointed at another buffer, and the refusals). Every test compares the graph's results
//! with the same work run eagerly on one stream, exactly (integer data), and with a host model.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host, launch};
use cudagraph::cudarc::driver::sys::{CUgraphExecUpdateResult, CUresult, CUstreamCaptureStatus};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg};
use cudagraph::{
    Capture, CaptureSlice, CaptureSliceMut, CapturedKernel, Error, GraphCache, Mode, Refusal,
    UpdateRefused, capture, graph,
};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The stream is out of capture mode and runs ordinary cudarc work on `x` and `y`: `y =
/// affine(x, 3, 1)`, checked against the host model.
fn assert_usable(stream: &Arc<CudaStream>, k: &Ops, x: &CudaSlice<u32>, y: &mut CudaSlice<u32>) {
    let status = stream.capture_status().expect("cuStreamIsCapturing");
    assert_eq!(status, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, x, &mut *y).expect("an eager launch");
    let want = host::affine(&stream.clone_dtoh(x).expect("copy back"), 3, 1);
    assert_same(&stream.clone_dtoh(y).expect("copy back"), &want, "eager use after the capture");
}

/// The work of test 1, eagerly on buffers: `y = affine(x, 3, 1)`, `z = y` (memcpy), `w = 0`
/// (memset), `w = affine_inplace(w, 5, 2)`, `out = combine3(z, w, x)`. Inside a capture:
/// [`five_steps_captured`].
macro_rules! five_steps {
    ($st:expr, $k:expr, $x:expr, $y:expr, $z:expr, $w:expr, $out:expr) => {{
        let (st, k) = ($st, $k);
        launch!(st, k, "affine", cfg(); &N, &3u32, &1u32, $x, $y)?;
        st.memcpy_dtod($y, $z)?;
        st.memset_zeros($w)?;
        launch!(st, k, "affine_inplace", cfg(); &N, &5u32, &2u32, $w)?;
        launch!(st, k, "combine3", cfg(); &N, $z, $w, $x, $out)?;
    }};
}

/// [`five_steps!`] inside a capture: the kernels are cudarc launches on the call's stream, joined
/// by the `unsafe` [`Capture::stream`]; the copy and the memset are the capture's own
/// (`Capture::copy`, `Capture::zero`, on its private stream), ordered with the launches by the
/// views' events.
fn five_steps_captured(
    k: &Ops,
    s: &Capture,
    x: CaptureSlice<'_, u32>,
    [mut y, mut z, mut w, mut out]: [CaptureSliceMut<'_, u32>; 4],
) -> std::result::Result<(), Error> {
    // SAFETY: the kernels read x, z, w and write y, w, out (listed views, `&mut` where written),
    // N elements each; nothing else is enqueued on the stream while it captures.
    let st = unsafe { s.stream() };
    // SAFETY (each `as_cuda_view`): used on `st`, joined into the capture above.
    let (xv, yv) = unsafe { (x.as_cuda_view(), y.as_cuda_view_mut()) };
    launch!(st, k, "affine", cfg(); &N, &3u32, &1u32, xv, yv)?;
    s.copy(&y, &mut z)?;
    s.zero(&mut w)?;
    launch!(st, k, "affine_inplace", cfg(); &N, &5u32, &2u32, unsafe { w.as_cuda_view_mut() })?;
    let (zv, wv) = (z.slice(..), w.slice(..));
    // SAFETY: as above.
    let (xv, zv, wv, ov) =
        unsafe { (x.as_cuda_view(), zv.as_cuda_view(), wv.as_cuda_view(), out.as_cuda_view_mut()) };
    launch!(st, k, "combine3", cfg(); &N, zv, wv, xv, ov)?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_cudarc_work_in_multi_stream_mode_matches_eager_over_three_launches() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    // A second stream: cudarc's multi-stream mode, with event tracking on (its default), so
    // every cudarc call waits on and records the buffers' events.
    let other = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    // The buffers live on `other` and were written there: their events were recorded outside
    // the capture, which a cudarc call inside the capture would wait on without the aliases.
    let mut x = other.clone_htod(&host::iota(N, 1, 0))?;
    let mut y = other.alloc_zeros::<u32>(LEN)?;
    let mut z = other.alloc_zeros::<u32>(LEN)?;
    let mut w = other.clone_htod(&host::iota(N, 5, 5))?;
    let mut out = other.alloc_zeros::<u32>(LEN)?;
    let graph =
        capture(&stream, (&x, &mut y, &mut z, &mut w, &mut out), |s, (x, y, z, w, out)| {
            five_steps_captured(&k, s, x, [y, z, w, out])
        })?;
    assert_eq!(graph.nodes()?, 5);
    let mut exec = graph.instantiate()?;
    exec.upload(&stream)?;

    let eager = ctx.new_stream()?;
    let mut ex = eager.alloc_zeros::<u32>(LEN)?;
    let mut ey = eager.alloc_zeros::<u32>(LEN)?;
    let mut ez = eager.alloc_zeros::<u32>(LEN)?;
    let mut ew = eager.alloc_zeros::<u32>(LEN)?;
    let mut eout = eager.alloc_zeros::<u32>(LEN)?;
    let mut run_eager = |input: &[u32]| -> Result<[std::result::Result<Vec<u32>, DriverError>; 4]> {
        eager.memcpy_htod(input, &mut ex)?;
        five_steps!(&eager, &k, &ex, &mut ey, &mut ez, &mut ew, &mut eout);
        Ok([&ey, &ez, &ew, &eout].map(|b| eager.clone_dtoh(b)))
    };
    for round in 0..3u32 {
        // A new input from the host between launches, on another stream, into the original
        // buffer: the exec's borrows are released meanwhile.
        let input = host::iota(N, 7 + round, 3 * round + 1);
        let released = exec.release();
        other.memcpy_htod(&input, &mut x)?;
        exec = released.bind((&x, &mut y, &mut z, &mut w, &mut out));
        exec.launch(&stream)?;
        let released = exec.release();
        // Read back on a third stream: it waits for the launch through the buffers' events.
        let got = [&y, &z, &w, &out].map(|b| other.clone_dtoh(b));
        let want = run_eager(&input)?;
        for (name, (g, e)) in ["y", "z", "w", "out"].iter().zip(got.into_iter().zip(want)) {
            assert_same(&g?, &e?, &format!("round {round}: {name}"));
        }
        exec = released.bind((&x, &mut y, &mut z, &mut w, &mut out));
    }
    drop(exec);
    ctx.check_err()?; // nothing cudarc could not report went wrong (a wait inside the capture)
    assert_usable(&stream, &k, &x, &mut y);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panic_inside_the_closure_ends_the_capture_and_leaves_stream_and_buffers_usable() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        capture(&stream, (&x, &mut y), |s, (x, mut y)| {
            // SAFETY: `affine` reads N elements of x and writes N of y, both listed views, on
            // the joined stream.
            let (st, xv, yv) = unsafe { (s.stream(), x.as_cuda_view(), y.as_cuda_view_mut()) };
            launch!(st, k, "affine", cfg(); &N, &3u32, &1u32, xv, yv)?;
            if N > 0 {
                panic!("a panic inside the capture");
            }
            Ok::<(), DriverError>(())
        })
        .map(drop)
    }));
    let payload = caught.expect_err("the panic goes on after the capture ended");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"a panic inside the capture"));
    ctx.check_err()?;
    assert_usable(&stream, &k, &x, &mut y);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_synchronize_inside_the_closure_is_a_capture_invalidated_error_naming_the_call() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let line = line!() + 1;
    let r = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        // SAFETY: `affine` reads N elements of x and writes N of y, both listed views, on the
        // joined stream; the synchronize enqueues nothing (the driver refuses it while the
        // stream captures, invalidating the capture).
        let (st, xv, yv) = unsafe { (s.stream(), x.as_cuda_view(), y.as_cuda_view_mut()) };
        launch!(st, k, "affine", cfg(); &N, &3u32, &1u32, xv, yv)?;
        st.synchronize()?;
        Ok::<(), DriverError>(())
    })
    .map(drop);
    match r {
        Err(Error::CaptureInvalidated { file, line: l, source }) => {
            println!("invalidated: {source}");
            assert!(file.ends_with("capture.rs"), "{file}");
            assert_eq!(l, line);
        }
        other => panic!("expected Error::CaptureInvalidated, got {other:?}"),
    }
    ctx.check_err()?;
    assert_usable(&stream, &k, &x, &mut y);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_unlisted_buffer_used_on_the_joined_stream_invalidates_the_capture_with_the_isolation_error()
-> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let other = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    // Written on `other`: its write event was recorded outside the capture.
    let unlisted = other.clone_htod(&host::iota(N, 3, 1))?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    // Safe code cannot reach the capturing stream (tests/ui/capture-stream-is-unsafe.rs), nor
    // make a `Capture` handle of `unlisted` (tests/ui/capture-read-unlisted-buffer.rs): only
    // work on the stream joined by the `unsafe` `Capture::stream` can touch it. This test breaks
    // that contract on purpose, to check the driver's refusal behind it: cudarc's wait on
    // `unlisted`'s event, recorded outside the capture, invalidates the capture. cudarc's launch
    // builder returns the failed wait; its copies record it in the context.
    for copy in [false, true] {
        let line = line!() + 1;
        let r = capture(&stream, (&mut y,), |s, (mut y,)| {
            // SAFETY: NOT kept, on purpose (see above): the work reads `unlisted`, which the
            // capture does not list. It writes N elements of the listed y.
            let (st, yv) = unsafe { (s.stream(), y.as_cuda_view_mut()) };
            if copy {
                st.memcpy_dtod(&unlisted, yv)
            } else {
                launch!(st, k, "affine", cfg(); &N, &3u32, &1u32, &unlisted, yv)
            }
        })
        .map(drop);
        match r {
            Err(Error::CaptureInvalidated { file, line: l, source }) => {
                println!("copy {copy}: invalidated: {source}");
                assert!(file.ends_with("capture.rs"), "{file}");
                assert_eq!(l, line);
                assert_eq!(source.error.0, CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
            }
            other => panic!("copy {copy}: expected Error::CaptureInvalidated, got {other:?}"),
        }
        ctx.check_err()?; // no error of the capture left behind for cudarc's next call
        assert_usable(&stream, &k, &x, &mut y);
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_error_returned_by_the_closure_is_a_capture_error_and_the_stream_stays_usable() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let line = line!() + 1;
    let r = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        // SAFETY: `affine` reads N elements of x and writes N of y, both listed views, on the
        // joined stream.
        let (st, xv, yv) = unsafe { (s.stream(), x.as_cuda_view(), y.as_cuda_view_mut()) };
        launch!(st, k, "affine", cfg(); &N, &3u32, &1u32, xv, yv)?;
        Err::<(), Box<dyn std::error::Error + Send + Sync>>("refused by the closure".into())
    })
    .map(drop);
    match r {
        Err(Error::Capture { file, line: l, source }) => {
            assert!(file.ends_with("capture.rs"), "{file}");
            assert_eq!(l, line);
            assert_eq!(source.to_string(), "refused by the closure");
        }
        other => panic!("expected Error::Capture, got {other:?}"),
    }
    ctx.check_err()?;
    assert_usable(&stream, &k, &x, &mut y);
    Ok(())
}

/// `t = affine(x, 3, 1)`, `y = mix(t)`: two dependent kernels.
fn two_kernels(
    k: &Ops,
    s: &Capture,
    (x, mut t, mut y): (CaptureSlice<'_, u32>, CaptureSliceMut<'_, u32>, CaptureSliceMut<'_, u32>),
) -> std::result::Result<(), DriverError> {
    // SAFETY: `affine` reads N elements of x and writes N of t, `mix` reads t and writes y, all
    // listed views (`&mut` where written), on the joined stream.
    let (st, xv, tv) = unsafe { (s.stream(), x.as_cuda_view(), t.as_cuda_view_mut()) };
    launch!(st, k, "affine", cfg(); &N, &3u32, &1u32, xv, tv)?;
    let t = t.slice(..);
    // SAFETY: as above.
    let (tv, yv) = unsafe { (t.as_cuda_view(), y.as_cuda_view_mut()) };
    launch!(st, k, "mix", cfg(); &N, tv, yv)
}

/// [`two_kernels`] and then `y = affine_inplace(y, 5, 2)`: another topology.
fn three_kernels(
    k: &Ops,
    s: &Capture,
    (x, t, mut y): (CaptureSlice<'_, u32>, CaptureSliceMut<'_, u32>, CaptureSliceMut<'_, u32>),
) -> std::result::Result<(), DriverError> {
    two_kernels(k, s, (x, t, y.slice_mut(..)))?;
    // SAFETY: `affine_inplace` reads and writes N elements of the listed `&mut` y, on the
    // stream `two_kernels` joined.
    let (st, yv) = unsafe { (s.stream(), y.as_cuda_view_mut()) };
    launch!(st, k, "affine_inplace", cfg(); &N, &5u32, &2u32, yv)
}

/// Host models of [`two_kernels`] and [`three_kernels`].
fn two_kernels_host(x: &[u32]) -> Vec<u32> {
    host::mix(&host::affine(x, 3, 1))
}
fn three_kernels_host(x: &[u32]) -> Vec<u32> {
    let mut y = two_kernels_host(x);
    host::affine_inplace(&mut y, 5, 2);
    y
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn exec_update_swaps_pointers_and_refuses_another_topology_giving_the_graph_back() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let (ia, ib, ic) = (host::iota(N, 3, 1), host::iota(N, 7, 5), host::iota(N, 11, 2));
    let xa = stream.clone_htod(&ia)?;
    let xb = stream.clone_htod(&ib)?;
    let xc = stream.clone_htod(&ic)?;
    let [mut ta, mut ya, mut tb, mut yb, mut tc, mut yc] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));

    let ga = capture(&stream, (&xa, &mut ta, &mut ya), |s, v| two_kernels(&k, s, v))?;
    let mut exec = ga.instantiate()?;
    exec.launch(&stream)?;
    // The same work on other buffers: a pointer swap.
    let gb = capture(&stream, (&xb, &mut tb, &mut yb), |s, v| two_kernels(&k, s, v))?;
    exec.update(gb)?;
    exec.launch(&stream)?;
    // Another topology: refused, the graph given back, the exec unchanged.
    let gc = capture(&stream, (&xc, &mut tc, &mut yc), |s, v| three_kernels(&k, s, v))?;
    let line = line!() + 1;
    let gc = match exec.update(gc) {
        Err(UpdateRefused {
            error: Error::GraphUpdateRefused { file, line: l, result, .. },
            graph,
        }) => {
            assert!(file.ends_with("capture.rs"), "{file}");
            assert_eq!(l, line);
            assert_eq!(
                result,
                CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
            );
            graph
        }
        other => panic!("expected a refused update, got {other:?}"),
    };
    // The given-back graph runs c's work on c's buffers.
    let mut ec = gc.instantiate()?;
    ec.launch(&stream)?;
    drop(ec);
    // The exec still runs b's work on b's buffers (and not c's): yb cleared, then recomputed.
    let released = exec.release();
    stream.memset_zeros(&mut yb)?;
    let mut exec = released.bind((&xb, &mut tb, &mut yb));
    exec.launch(&stream)?;
    drop(exec);

    assert_same(&stream.clone_dtoh(&ya)?, &two_kernels_host(&ia), "graph a");
    assert_same(&stream.clone_dtoh(&yb)?, &two_kernels_host(&ib), "graph b, after the refusal");
    assert_same(&stream.clone_dtoh(&yc)?, &three_kernels_host(&ic), "graph c, given back");
    // Eagerly, the same work on one stream.
    let mut ey = stream.alloc_zeros::<u32>(LEN)?;
    let mut et = stream.alloc_zeros::<u32>(LEN)?;
    for (x, host) in [(&xa, two_kernels_host(&ia)), (&xb, two_kernels_host(&ib))] {
        launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, x, &mut et)?;
        launch!(stream, k, "mix", cfg(); &N, &et, &mut ey)?;
        assert_same(&stream.clone_dtoh(&ey)?, &host, "eager");
    }
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_updated_exec_launches_on_the_new_buffers() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let (ia, ib) = (host::iota(N, 3, 1), host::iota(N, 7, 5));
    let xa = stream.clone_htod(&ia)?;
    let xb = stream.clone_htod(&ib)?;
    let [mut ta, mut ya, mut tb, mut yb] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let ga = capture(&stream, (&xa, &mut ta, &mut ya), |s, v| two_kernels(&k, s, v))?;
    let mut exec = ga.instantiate()?;
    let gb = capture(&stream, (&xb, &mut tb, &mut yb), |s, v| two_kernels(&k, s, v))?;
    exec.update(gb)?; // before any launch: only b's buffers are written
    exec.launch(&stream)?;
    exec.launch(&stream)?;
    drop(exec);
    assert_same(&stream.clone_dtoh(&ya)?, &vec![0; LEN], "a untouched");
    assert_same(&stream.clone_dtoh(&yb)?, &two_kernels_host(&ib), "b");
    let mut ey = stream.alloc_zeros::<u32>(LEN)?;
    let mut et = stream.alloc_zeros::<u32>(LEN)?;
    launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, &xb, &mut et)?;
    launch!(stream, k, "mix", cfg(); &N, &et, &mut ey)?;
    assert_same(&stream.clone_dtoh(&yb)?, &stream.clone_dtoh(&ey)?, "graph b vs eager");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_released_exec_bound_to_other_memory_refuses_to_launch() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let x2 = stream.clone_htod(&host::iota(N, 5, 1))?;
    let [mut t, mut y] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let g = capture(&stream, (&x, &mut t, &mut y), |s, v| two_kernels(&k, s, v))?;
    let released = g.instantiate()?.release();
    // Other memory for x: refused at launch, nothing enqueued.
    let mut exec = released.bind((&x2, &mut t, &mut y));
    match exec.launch(&stream) {
        Err(Error::Graph { source, .. }) => {
            assert!(source.call.contains("not the memory"), "{source}")
        }
        other => panic!("expected a refused launch, got {other:?}"),
    }
    // A read-only borrow where the graph writes: refused too.
    let released = exec.release();
    let mut exec = released.bind((&x, &mut t, &y));
    exec.launch(&stream).expect_err("y is written by the graph");
    // The captured buffers again: runs.
    let mut exec = exec.release().bind((&x, &mut t, &mut y));
    exec.launch(&stream)?;
    drop(exec);
    let mut ey = stream.alloc_zeros::<u32>(LEN)?;
    let mut et = stream.alloc_zeros::<u32>(LEN)?;
    launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut et)?;
    launch!(stream, k, "mix", cfg(); &N, &et, &mut ey)?;
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "graph vs eager");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nodes_edges_and_dot_of_a_captured_three_kernel_chain() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let [mut a, mut b, mut c] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let g = capture(&stream, (&mut a, &mut b, &mut c), |s, (mut a, mut b, mut c)| {
        // SAFETY: the kernels write N elements of a, b, c and read a and b, all listed `&mut`
        // views, on the joined stream.
        let st = unsafe { s.stream() };
        launch!(st, k, "iota", cfg(); &N, &3u32, &1u32, unsafe { a.as_cuda_view_mut() })?;
        let a = a.slice(..);
        // SAFETY: as above.
        let (av, bv) = unsafe { (a.as_cuda_view(), b.as_cuda_view_mut()) };
        launch!(st, k, "affine", cfg(); &N, &5u32, &7u32, av, bv)?;
        let b = b.slice(..);
        // SAFETY: as above.
        let (bv, cv) = unsafe { (b.as_cuda_view(), c.as_cuda_view_mut()) };
        launch!(st, k, "mix", cfg(); &N, bv, cv)
    })?;
    assert_eq!(g.nodes()?, 3);
    let edges = g.edges()?;
    assert_eq!(edges.len(), 2, "{edges:?}");
    // A chain: one first node, each followed by exactly one other, covering all three.
    let first = (0..3).find(|n| edges.iter().all(|&(_, to)| to != *n)).expect("a first node");
    let mut order = vec![first];
    while let Some(&(_, to)) = edges.iter().find(|&&(from, _)| from == *order.last().unwrap()) {
        order.push(to);
    }
    assert_eq!(order.len(), 3, "{edges:?}");
    let path = std::env::temp_dir().join(format!("cudagraph-capture-{}.dot", std::process::id()));
    g.debug_dot_print(&path)?;
    let dot = std::fs::read_to_string(&path).expect("cuGraphDebugDotPrint wrote the file");
    let _ = std::fs::remove_file(&path);
    assert!(dot.contains("digraph"), "{dot}");

    let mut exec = g.instantiate()?;
    assert_eq!(exec.graph().nodes()?, 3);
    exec.launch(&stream)?;
    drop(exec);
    let [mut ea, mut eb, mut ec] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    launch!(stream, k, "iota", cfg(); &N, &3u32, &1u32, &mut ea)?;
    launch!(stream, k, "affine", cfg(); &N, &5u32, &7u32, &ea, &mut eb)?;
    launch!(stream, k, "mix", cfg(); &N, &eb, &mut ec)?;
    for (name, (g, e)) in ["a", "b", "c"].iter().zip([(&a, &ea), (&b, &eb), (&c, &ec)]) {
        assert_same(&stream.clone_dtoh(g)?, &stream.clone_dtoh(e)?, name);
    }
    assert_same(
        &stream.clone_dtoh(&c)?,
        &host::mix(&host::affine(&host::iota(N, 3, 1), 5, 7)),
        "c",
    );
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_refuses_a_stream_that_is_already_capturing_and_an_exec_launch_into_one() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let [mut t, mut y] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let g = capture(&stream, (&x, &mut t, &mut y), |s, v| two_kernels(&k, s, v))?;
    let mut exec = g.instantiate()?;
    let nested = std::cell::OnceCell::new();
    let launched = std::cell::OnceCell::new();
    let exec_cell = std::cell::RefCell::new(&mut exec);
    let outer = capture(&stream, (), |s, ()| {
        // SAFETY: nothing is enqueued on the joined stream: the nested capture and the launch
        // are refused before any work (what this test checks).
        let st = unsafe { s.stream() };
        let _ = nested.set(capture(st, (), |_, ()| Ok::<(), DriverError>(())).map(drop));
        let _ = launched.set(exec_cell.borrow_mut().launch(st));
        Ok::<(), DriverError>(())
    })?;
    assert_eq!(outer.nodes()?, 0);
    drop(outer); // ends the closure's borrows (a graph's closure borrows for its lifetime)
    let (nested, launched) = (nested.into_inner(), launched.into_inner());
    match nested {
        Some(Err(Error::Graph { source, .. })) => {
            assert!(source.call.contains("already"), "{source}")
        }
        other => panic!("expected a refused nested capture, got {other:?}"),
    }
    match launched {
        Some(Err(Error::Graph { source, .. })) => {
            assert!(source.call.contains("capturing"), "{source}")
        }
        other => panic!("expected a refused launch, got {other:?}"),
    }
    exec.launch(&stream)?;
    drop(exec);
    let mut ey = stream.alloc_zeros::<u32>(LEN)?;
    let mut et = stream.alloc_zeros::<u32>(LEN)?;
    launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut et)?;
    launch!(stream, k, "mix", cfg(); &N, &et, &mut ey)?;
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "graph vs eager");
    ctx.check_err()?;
    Ok(())
}

/// The closure of [`tracking_off_work`]: `t = slow_affine(x)` by a cudarc launch on the `unsafe`
/// joined stream, then the crate's own `copy` (`u = t`) and `kernel` (`y = mix(u)`). Without
/// cudarc's events nothing but the stream orders the copy after the slow launch.
fn tracking_off_work(
    k: &Ops,
    s: &Capture,
    (x, mut t, mut u, mut y): (
        CaptureSlice<'_, u32>,
        CaptureSliceMut<'_, u32>,
        CaptureSliceMut<'_, u32>,
        CaptureSliceMut<'_, u32>,
    ),
) -> std::result::Result<(), Error> {
    // SAFETY: `slow_affine` reads N elements of x and writes N of t, listed views (`&mut`
    // where written), on the joined stream.
    let (st, xv, tv) = unsafe { (s.stream(), x.as_cuda_view(), t.as_cuda_view_mut()) };
    launch!(st, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &1u32, xv, tv)?;
    s.copy(&t, &mut u)?;
    s.kernel(k.mix(N, s.read(&u)?, s.write(&mut y)?).launch(cfg()))?;
    Ok(())
}

/// Spins of the slow kernels of the event-tracking test: long enough that work not ordered
/// after the slow launch reads its output before it is written.
const SPINS: u32 = 20_000;

/// With cudarc's event tracking off, a capture records what it records with it on (safe code
/// records only through the `Capture`'s methods, on listed operands: nothing unlisted can be
/// recorded either way), and the crate's own methods after the `unsafe` joined stream go on that
/// stream, so they run after its slow launch although no cudarc event orders them: the
/// standalone graph and a `graph!` capture statement are exact against eager. `fork`, whose
/// second stream only cudarc's events would order, is refused naming the call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_with_event_tracking_off_records_in_order_and_refuses_fork() -> Result {
    let _serial = common::serial();
    assert!(cudagraph::driver_available(), "no CUDA driver");
    let ctx = cudagraph::cudarc::driver::CudaContext::new(0)?;
    // SAFETY: every buffer of this test is used on `stream` only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    let other = ctx.new_stream()?;
    assert!(!ctx.is_managing_stream_synchronization());
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { Ops::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx(common::SOURCE)?) }?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    // Eager: the same work as plain cudarc launches on one stream.
    let [mut et, mut eu, mut ey] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    launch!(stream, k, "slow_affine", cfg(); &N, &SPINS, &3u32, &1u32, &x, &mut et)?;
    stream.memcpy_dtod(&et, &mut eu)?;
    launch!(stream, k, "mix", cfg(); &N, &eu, &mut ey)?;
    let want = (stream.clone_dtoh(&eu)?, stream.clone_dtoh(&ey)?);

    let [mut t, mut u, mut y] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let g = capture(&stream, (&x, &mut t, &mut u, &mut y), |s, v| tracking_off_work(&k, s, v))?;
    let mut exec = g.instantiate()?;
    exec.launch(&stream)?;
    drop(exec);
    assert_same(&stream.clone_dtoh(&u)?, &want.0, "standalone: u vs eager");
    assert_same(&stream.clone_dtoh(&y)?, &want.1, "standalone: y vs eager");

    let mut cache = GraphCache::new();
    for call in 0..3 {
        for b in [&mut t, &mut u, &mut y] {
            stream.memset_zeros(b)?;
        }
        graph!(&mut cache, &stream, {
            capture(&x, &mut t, &mut u, &mut y, |s, v| tracking_off_work(&k, s, v));
        })?;
        assert_same(&stream.clone_dtoh(&u)?, &want.0, &format!("graph! call {call}: u vs eager"));
        assert_same(&stream.clone_dtoh(&y)?, &want.1, &format!("graph! call {call}: y vs eager"));
    }
    assert_eq!(cache.stats().captures, 3, "an unkeyed statement records every call");

    let forked = std::cell::RefCell::new(None);
    let r = capture(&stream, (&mut t,), |s, (mut t,)| {
        // SAFETY: nothing is enqueued on `other` (the fork is refused).
        *forked.borrow_mut() = Some(unsafe { s.fork(&other) });
        s.zero(&mut t)
    });
    let nodes = r?.nodes()?; // the graph holds the closure's borrow of `forked`
    match forked.into_inner() {
        Some(Err(Error::Node { site, source })) => {
            assert!(site.label == "fork" && source.call.contains("Capture::fork"), "{source}");
            assert!(source.call.contains("event tracking"), "{source}");
        }
        other => panic!("expected a refused fork, got {other:?}"),
    }
    assert_eq!(nodes, 1, "the capture goes on after the refused fork");
    assert_eq!(stream.capture_status()?, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_view_used_on_a_stream_outside_the_capture_panics_and_leaves_everything_usable() -> Result {
    // Before issue 29, cudarc made `other` wait on the view's events and so joined it into the
    // capture. Safe code holding `other` could then record into the graph: now the view refuses
    // a stream that is not part of the capture (its `device_ptr` panics), before cudarc
    // enqueues anything, and the capture ends with the panic.
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let other = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.clone_htod(&host::iota(N, 5, 1))?;
    let mut cache = GraphCache::new();
    for statement in [false, true] {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            if statement {
                graph!(&mut cache, &stream, {
                    capture(&mut y, |_s, (mut y,)| other.memset_zeros(&mut y));
                })
            } else {
                capture(&stream, (&mut y,), |_, (mut y,)| other.memset_zeros(&mut y)).map(drop)
            }
        }));
        let payload = caught.expect_err("a view used on a stream outside the capture panics");
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        assert!(message.contains("not part of the capture"), "statement {statement}: {message}");
        // Nothing ran, nothing is left capturing, no error parked for cudarc's next call.
        for st in [&stream, &other] {
            assert_eq!(st.capture_status()?, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
        }
        other.synchronize()?;
        ctx.check_err()?;
        assert_same(&stream.clone_dtoh(&y)?, &host::iota(N, 5, 1), "y untouched");
    }
    // The stream, the buffers and the cache still work: the same memset as the capture's own.
    let graph = capture(&stream, (&mut y,), |s, (mut y,)| s.zero(&mut y))?;
    assert_eq!(graph.nodes()?, 1);
    let mut exec = graph.instantiate()?;
    exec.launch(&stream)?;
    drop(exec);
    let mut ey = stream.clone_htod(&host::iota(N, 5, 1))?;
    stream.memset_zeros(&mut ey)?;
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "y after the launch vs eager");
    assert_same(&stream.clone_dtoh(&y)?, &vec![0; LEN], "y after the launch");
    stream.memcpy_htod(&host::iota(N, 7, 2), &mut y)?;
    graph!(&mut cache, &stream, {
        capture(&mut y, |s, (mut y,)| s.zero(&mut y));
    })?;
    assert_same(&stream.clone_dtoh(&y)?, &vec![0; LEN], "y after the graph! capture statement");
    ctx.check_err()?;
    assert_usable(&stream, &k, &x, &mut y);
    Ok(())
}

/// The refusal of an explicit node or handle, or a panic naming what came instead.
#[track_caller]
fn refusal<T: std::fmt::Debug>(r: Result<T>) -> Refusal {
    match r {
        Err(Error::NodeRefused { why, .. }) => why,
        other => panic!("expected Error::NodeRefused, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_explicit_kernel_node_whose_scalar_is_set_between_launches_matches_eager() -> Result {
    let _serial = common::serial();
    // PyCUDA's scenario: a kernel node added into a capture, a captured copy after it, the
    // node's scalar set on the exec between launches. The copy is device to device into a listed
    // buffer, read back after each launch: a pinned host buffer cannot be a listed operand.
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?; // cudarc's multi-stream mode: its events are in play
    assert!(ctx.is_managing_stream_synchronization());
    let input = host::iota(N, 7, 3);
    let x = stream.clone_htod(&input)?;
    let [mut y, mut out] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let node: std::cell::OnceCell<CapturedKernel> = std::cell::OnceCell::new();
    let graph = capture(&stream, (&x, &mut y, &mut out), |s, (x, mut y, mut out)| {
        let launch = k.affine(N, 2, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg());
        let _ = node.set(s.kernel(launch)?);
        s.copy(&y, &mut out)?; // recorded after the node
        Ok::<(), Error>(())
    })?;
    let node = node.get().expect("the closure ran");
    assert!(node.is_recorded());
    assert_eq!(node.name(), "affine");
    assert_eq!(graph.nodes()?, 2);
    assert_eq!(graph.edges()?.len(), 1, "the copy runs after the kernel node");
    let mut exec = graph.instantiate()?;
    let [mut ey, mut eout] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    // The captured scalar first, then three set on the exec (one of them twice in a row).
    for (round, a) in [2u32, 5, 9, 9, 0x9e37_79b9].into_iter().enumerate() {
        if round > 0 {
            let launch = k.affine(N, a, 1, exec.read(0)?, exec.write(1)?).launch(cfg());
            exec.set_kernel(node, launch)?;
        }
        exec.launch(&stream)?;
        let released = exec.release();
        launch!(stream, k, "affine", cfg(); &N, &a, &1u32, &x, &mut ey)?;
        stream.memcpy_dtod(&ey, &mut eout)?;
        let want = host::affine(&input, a, 1);
        let got = stream.clone_dtoh(&out)?;
        assert_same(&got, &stream.clone_dtoh(&eout)?, &format!("round {round}: out vs eager"));
        assert_same(&got, &want, &format!("round {round}: out vs host"));
        assert_same(&stream.clone_dtoh(&y)?, &want, &format!("round {round}: y vs host"));
        exec = released.bind((&x, &mut y, &mut out));
    }
    drop(exec);
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_explicit_nodes_feed_captured_work_and_one_is_repointed_at_a_third_buffer() -> Result {
    let _serial = common::serial();
    // PyCUDA's scenario: two nodes of one kernel on two buffers, a captured kernel reading both,
    // then one node's input re-pointed (set on the exec) at a third listed buffer.
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let (i1, i2, i3) = (host::iota(N, 3, 1), host::iota(N, 7, 5), host::iota(N, 11, 2));
    let x1 = stream.clone_htod(&i1)?;
    let x2 = stream.clone_htod(&i2)?;
    let x3 = stream.clone_htod(&i3)?;
    let [mut a, mut b, mut out] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let nodes = std::cell::OnceCell::new();
    let graph = capture(
        &stream,
        (&x1, &x2, &x3, &mut a, &mut b, &mut out),
        |s, (x1, x2, _x3, mut a, mut b, mut out)| {
            let na = s.kernel(k.affine(N, 3, 1, s.read(&x1)?, s.write(&mut a)?).launch(cfg()))?;
            let nb = s.kernel(k.affine(N, 5, 2, s.read(&x2)?, s.write(&mut b)?).launch(cfg()))?;
            let _ = nodes.set((na, nb));
            // Captured by cudarc: reads both nodes' outputs.
            let (a, b) = (a.slice(..), b.slice(..));
            // SAFETY: `combine3` reads N elements of a, b, x1 and writes N of out, all listed
            // views (`&mut` where written), on the joined stream.
            let (st, av, bv, xv, ov) = unsafe {
                (
                    s.stream(),
                    a.as_cuda_view(),
                    b.as_cuda_view(),
                    x1.as_cuda_view(),
                    out.as_cuda_view_mut(),
                )
            };
            launch!(st, k, "combine3", cfg(); &N, av, bv, xv, ov)?;
            Ok::<(), Error>(())
        },
    )?;
    let (_na, nb) = nodes.get().expect("the closure ran");
    assert_eq!(graph.nodes()?, 3);
    let mut exec = graph.instantiate()?;
    let model = |second: &[u32]| {
        let (a, b) = (host::affine(&i1, 3, 1), host::affine(second, 5, 2));
        (host::combine3(&a, &b, &i1), b)
    };
    let [mut ea, mut eb, mut eout] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    for (round, (second, input)) in [(&x2, &i2), (&x3, &i3)].into_iter().enumerate() {
        if round == 1 {
            // Node b now reads x3 (operand 2) instead of x2.
            let launch = k.affine(N, 5, 2, exec.read(2)?, exec.write(4)?).launch(cfg());
            exec.set_kernel(nb, launch)?;
        }
        exec.launch(&stream)?;
        let released = exec.release();
        launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, &x1, &mut ea)?;
        launch!(stream, k, "affine", cfg(); &N, &5u32, &2u32, second, &mut eb)?;
        launch!(stream, k, "combine3", cfg(); &N, &ea, &eb, &x1, &mut eout)?;
        let (want_out, want_b) = model(input);
        let got = stream.clone_dtoh(&out)?;
        assert_same(&got, &stream.clone_dtoh(&eout)?, &format!("round {round}: out vs eager"));
        assert_same(&got, &want_out, &format!("round {round}: out vs host"));
        assert_same(&stream.clone_dtoh(&b)?, &want_b, &format!("round {round}: b vs host"));
        exec = released.bind((&x1, &x2, &x3, &mut a, &mut b, &mut out));
    }
    drop(exec);
    ctx.check_err()?;
    Ok(())
}

/// A captured graph of one explicit kernel node, `y = affine(x, 2, 1)`, and that node (handed
/// out of the closure through a shared cell: the graph holds what its closure borrows).
fn one_node_graph<'a>(
    stream: &Arc<CudaStream>,
    k: &'a Ops,
    x: &'a CudaSlice<u32>,
    y: &'a mut CudaSlice<u32>,
) -> Result<(cudagraph::Graph<'a>, CapturedKernel)> {
    let node = std::rc::Rc::new(std::cell::OnceCell::new());
    let set = std::rc::Rc::clone(&node);
    let graph = capture(stream, (x, y), move |s, (x, mut y)| {
        let _ = set.set(s.kernel(k.affine(N, 2, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?);
        Ok::<(), Error>(())
    })?;
    let node = std::rc::Rc::try_unwrap(node).ok().and_then(std::cell::OnceCell::into_inner);
    Ok((graph, node.expect("the closure ran")))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn set_kernel_refuses_unheld_memory_another_graphs_node_and_another_function_leaving_the_exec_unchanged()
-> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let (i1, i2) = (host::iota(N, 3, 1), host::iota(N, 5, 2));
    let x = stream.clone_htod(&i1)?;
    let x2 = stream.clone_htod(&i2)?;
    let [mut y, mut y2] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let (g1, n1) = one_node_graph(&stream, &k, &x, &mut y)?;
    let (g2, n2) = one_node_graph(&stream, &k, &x2, &mut y2)?;
    let (n1, n2) = (&n1, &n2);
    let mut e1 = g1.instantiate()?;
    let mut e2 = g2.instantiate()?;
    let affine = |a: u32, x, y| k.affine(N, a, 1, x, y).launch(cfg());

    // Memory the exec does not hold: another exec's operands (read, then written).
    let r = e1.set_kernel(n1, affine(4, e2.read(0)?, e1.write(1)?));
    assert_eq!(refusal(r), Refusal::NotAnOperand { arg: Some(3) });
    let r = e1.set_kernel(n1, affine(4, e1.read(0)?, e2.write(1)?));
    assert_eq!(refusal(r), Refusal::NotAnOperand { arg: Some(4) });
    // A node of another graph, with this exec's own handles.
    let line = line!() + 1;
    match e1.set_kernel(n2, affine(4, e1.read(0)?, e1.write(1)?)) {
        Err(Error::NodeRefused { site, why: Refusal::OtherGraph }) => {
            assert_eq!((site.label, site.text, site.line), ("affine", "Exec::set_kernel", line));
            assert!(site.file.ends_with("capture.rs"), "{}", site.file);
        }
        other => panic!("expected a refusal of another graph's node, got {other:?}"),
    }
    // Another function (with this exec's handles), the same buffer read and written, zero dims.
    let r = e1.set_kernel(n1, k.mix(N, e1.read(0)?, e1.write(1)?).launch(cfg()));
    assert_eq!(refusal(r), Refusal::OtherFunction);
    let r = e1.set_kernel(n1, affine(4, e1.read(1)?, e1.write(1)?));
    assert_eq!(refusal(r), Refusal::Overlap { first: 3, second: 4 });
    match e1.set_kernel(n1, k.affine(N, 4, 1, e1.read(0)?, e1.write(1)?).launch((0u32, 256u32))) {
        Err(Error::ZeroDims { .. }) => {}
        other => panic!("expected Error::ZeroDims, got {other:?}"),
    }
    // Handles the exec refuses to make.
    assert_eq!(refusal(e1.write::<u32>(0).map(drop)), Refusal::NotWritten { index: 0 });
    assert_eq!(refusal(e1.read::<i32>(0).map(drop)), Refusal::ElementType { index: 0 });
    assert_eq!(refusal(e1.read::<u32>(2).map(drop)), Refusal::NoOperand { index: 2, operands: 2 });

    // Nothing of the refused calls reached the exec: it still computes y = 2 x + 1.
    e1.launch(&stream)?;
    e2.launch(&stream)?;
    drop((e1, e2));
    let mut ey = stream.alloc_zeros::<u32>(LEN)?;
    launch!(stream, k, "affine", cfg(); &N, &2u32, &1u32, &x, &mut ey)?;
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "exec 1 vs eager");
    assert_same(&stream.clone_dtoh(&y)?, &host::affine(&i1, 2, 1), "exec 1 vs host");
    assert_same(&stream.clone_dtoh(&y2)?, &host::affine(&i2, 2, 1), "exec 2 vs host");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capture_refuses_unlisted_memory_for_explicit_nodes_and_stays_valid() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let other = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    // Written on `other`: its event was recorded outside the capture (a cudarc call on it inside
    // the capture would invalidate it). `Capture::read` of a view of it no longer compiles (the
    // closure's views are `CaptureSlice`s: tests/ui/capture-read-unlisted-buffer.rs); an exec's
    // handle of memory the capture does not list is refused before any driver call.
    let unlisted = other.clone_htod(&host::iota(N, 3, 1))?;
    let input = host::iota(N, 9, 4);
    let x = stream.clone_htod(&input)?;
    let [mut y, mut z] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    // An exec holding `z`, which the capture does not list.
    let gz = capture(&stream, (&x, &mut z), |s, (x, mut z)| {
        s.kernel(k.affine(N, 1, 1, s.read(&x)?, s.write(&mut z)?).launch(cfg())).map(drop)
    })?;
    let ez = gz.instantiate()?;
    let refusals = std::cell::RefCell::new(Vec::new());
    let read_back = std::cell::OnceCell::new();
    let graph = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        let mut refusals = refusals.borrow_mut();
        // Safe code can still use `unlisted` on a stream of its own (`other`, not part of the
        // capture): it runs at once and is not recorded (the graph keeps one node, below).
        let _ = read_back.set(other.clone_dtoh(&unlisted));
        let launch = k.affine(N, 2, 1, s.read(&x)?, ez.write(1)?).launch(cfg());
        refusals.push(refusal(s.kernel(launch).map(drop)));
        let launch = k.affine(N, 2, 1, s.read(&y)?, s.write(&mut y)?).launch(cfg());
        refusals.push(refusal(s.kernel(launch).map(drop)));
        match s.kernel(k.affine(N, 2, 1, s.read(&x)?, s.write(&mut y)?).launch((1u32, 0u32))) {
            Err(Error::ZeroDims { .. }) => {}
            other => panic!("expected Error::ZeroDims, got {other:?}"),
        }
        // The one node that is kept.
        s.kernel(k.affine(N, 6, 5, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?;
        Ok::<(), Error>(())
    })?;
    assert_eq!(
        *refusals.borrow(),
        [Refusal::NotAnOperand { arg: Some(4) }, Refusal::Overlap { first: 3, second: 4 },]
    );
    assert_eq!(graph.nodes()?, 1);
    let mut exec = graph.instantiate()?;
    exec.launch(&stream)?;
    drop(exec); // the graph's closure borrowed `ez`
    let read_back = read_back.into_inner().expect("the closure ran");
    assert_same(&read_back?, &host::iota(N, 3, 1), "unlisted, read at once inside the closure");
    drop(ez);
    let mut ey = stream.alloc_zeros::<u32>(LEN)?;
    launch!(stream, k, "affine", cfg(); &N, &6u32, &5u32, &x, &mut ey)?;
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "graph vs eager");
    assert_same(&stream.clone_dtoh(&y)?, &host::affine(&input, 6, 5), "graph vs host");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn after_update_the_exec_sets_the_first_captures_nodes_and_refuses_the_updated_graphs() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let (ia, ib) = (host::iota(N, 3, 1), host::iota(N, 7, 5));
    let xa = stream.clone_htod(&ia)?;
    let xb = stream.clone_htod(&ib)?;
    let [mut ya, mut yb] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let (ga, na) = one_node_graph(&stream, &k, &xa, &mut ya)?;
    let (gb, nb) = one_node_graph(&stream, &k, &xb, &mut yb)?;
    let (na, nb) = (&na, &nb);
    let mut exec = ga.instantiate()?;
    exec.update(gb)?; // the exec now holds b's buffers; its nodes are still a's
    let r = exec.set_kernel(nb, k.affine(N, 7, 1, exec.read(0)?, exec.write(1)?).launch(cfg()));
    assert_eq!(refusal(r), Refusal::OtherGraph);
    exec.set_kernel(na, k.affine(N, 7, 1, exec.read(0)?, exec.write(1)?).launch(cfg()))?;
    exec.launch(&stream)?;
    drop(exec);
    assert_same(&stream.clone_dtoh(&ya)?, &vec![0; LEN], "a's buffer untouched");
    let mut ey = stream.alloc_zeros::<u32>(LEN)?;
    launch!(stream, k, "affine", cfg(); &N, &7u32, &1u32, &xb, &mut ey)?;
    assert_same(&stream.clone_dtoh(&yb)?, &stream.clone_dtoh(&ey)?, "b vs eager");
    assert_same(&stream.clone_dtoh(&yb)?, &host::affine(&ib, 7, 1), "b vs host");
    ctx.check_err()?;
    Ok(())
}

/// One step of a `graph!` whose capture statement adds an explicit kernel node: `y = affine(x,
/// a, 1)` (the node), then `out = mix(y)` (a kernel statement). Returns the node (recorded,
/// or run eagerly in `Mode::Eager`).
#[allow(clippy::borrow_deref_ref)] // `graph!` operands are places marked `&`: `&*x`
fn explicit_step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Ops,
    a: u32,
    (x, y, out): (&CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> Result<CapturedKernel> {
    let mut node = None;
    graph!(cache, stream, {
        capture(&*x, &mut *y, |s, (x, mut y)| -> std::result::Result<(), Error> {
            node = Some(s.kernel(k.affine(N, a, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?);
            Ok(())
        });
        k.mix(N, &*y, &mut *out).launch(cfg());
    })?;
    Ok(node.expect("the closure ran"))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_explicit_node_in_a_capture_statement_matches_eager_mode_and_the_host_model() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let input = host::iota(N, 5, 3);
    let x = stream.clone_htod(&input)?;
    let [mut y, mut out, mut ey, mut eout] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for a in [2u32, 3, 3, 11] {
        let node = explicit_step(&mut cache, &stream, &k, a, (&x, &mut y, &mut out))?;
        assert!(node.is_recorded(), "recorded into the statement's child graph");
        let enode = explicit_step(&mut eager, &stream, &k, a, (&x, &mut ey, &mut eout))?;
        assert!(!enode.is_recorded(), "run eagerly: no node");
        let want = host::mix(&host::affine(&input, a, 1));
        let got = stream.clone_dtoh(&out)?;
        assert_same(&got, &stream.clone_dtoh(&eout)?, &format!("a = {a}: graph vs eager"));
        assert_same(&got, &want, &format!("a = {a}: graph vs host"));
    }
    assert_eq!(cache.stats().builds, 1);
    // Neither node can be set on an exec of a standalone capture.
    let g = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        s.kernel(k.affine(N, 2, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg())).map(drop)
    })?;
    let exec = g.instantiate()?;
    let enode = explicit_step(&mut eager, &stream, &k, 2, (&x, &mut ey, &mut eout))?;
    let r = exec.set_kernel(&enode, k.affine(N, 4, 1, exec.read(0)?, exec.write(1)?).launch(cfg()));
    assert_eq!(refusal(r), Refusal::NotRecorded);
    let gnode = explicit_step(&mut cache, &stream, &k, 2, (&x, &mut ey, &mut eout))?;
    let r = exec.set_kernel(&gnode, k.affine(N, 4, 1, exec.read(0)?, exec.write(1)?).launch(cfg()));
    assert_eq!(refusal(r), Refusal::OtherGraph);
    drop(exec);
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_explicit_node_is_ordered_with_cudarc_work_on_a_stream_forked_into_the_capture() -> Result {
    let _serial = common::serial();
    // cudarc's multi-stream mode orders its work by the buffers' events; an explicit node waits
    // for and records those events as a cudarc launch would, so cudarc work on a second stream
    // joined into the capture is ordered with it both ways: iota (stream 2) -> the node (the
    // capturing stream) -> mix (stream 2). Without that, the node and iota would be two roots
    // and mix would follow iota only.
    let (ctx, stream, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    let [mut w, mut y, mut z] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let graph = capture(&stream, (&mut w, &mut y, &mut z), |s, (mut w, mut y, mut z)| {
        // SAFETY: stream 2 joins the capture; until it is joined back below, the only work on
        // it is `iota` (writes N elements of w) and `mix` (reads N of y, writes N of z), all
        // listed `&mut` views.
        unsafe { s.fork(&s2) }?;
        // SAFETY: on stream 2, forked in above.
        launch!(s2, k, "iota", cfg(); &N, &3u32, &1u32, unsafe { w.as_cuda_view_mut() })?;
        s.kernel(k.affine(N, 2, 1, s.read(&w)?, s.write(&mut y)?).launch(cfg()))?;
        let y = y.slice(..);
        // SAFETY: on stream 2, forked in above.
        let (yv, zv) = unsafe { (y.as_cuda_view(), z.as_cuda_view_mut()) };
        launch!(s2, k, "mix", cfg(); &N, yv, zv)?;
        s.join(&s2)?; // join back
        Ok::<(), Error>(())
    })?;
    assert_eq!(graph.nodes()?, 3);
    let edges = graph.edges()?;
    // iota -> node, node -> mix, and iota -> mix (stream 2's own order).
    assert_eq!(edges.len(), 3, "{edges:?}");
    let first = (0..3).find(|n| edges.iter().all(|&(_, to)| to != *n)).expect("one root");
    let last = (0..3).find(|n| edges.iter().all(|&(from, _)| from != *n)).expect("one leaf");
    let middle = 3 - first - last;
    for e in [(first, middle), (middle, last), (first, last)] {
        assert!(edges.contains(&e), "{e:?} in {edges:?}");
    }
    let mut exec = graph.instantiate()?;
    exec.launch(&stream)?;
    drop(exec);
    let want_y = host::affine(&host::iota(N, 3, 1), 2, 1);
    assert_same(&stream.clone_dtoh(&y)?, &want_y, "y vs host");
    assert_same(&stream.clone_dtoh(&z)?, &host::mix(&want_y), "z vs host");
    let [mut ew, mut ey, mut ez] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    launch!(stream, k, "iota", cfg(); &N, &3u32, &1u32, &mut ew)?;
    launch!(stream, k, "affine", cfg(); &N, &2u32, &1u32, &ew, &mut ey)?;
    launch!(stream, k, "mix", cfg(); &N, &ey, &mut ez)?;
    assert_same(&stream.clone_dtoh(&z)?, &stream.clone_dtoh(&ez)?, "z vs eager");
    ctx.check_err()?;
    Ok(())
}
