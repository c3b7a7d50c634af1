//! GPU tests of stream capture (`cudagraph::capture`, issue 13 item 2): cudarc work captured in
//! multi-stream mode with event tracking on, a panic, an invalidated capture and an error inside
//! the closure (the stream usable afterwards), `Exec::update` (pointer swap; refused topology
//! change), `Released::bind`, and the graph's nodes, edges and DOT. Every test compares the
//! graph's results with the same work run eagerly on one stream, exactly (integer data).

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host, launch};
use cudagraph::cudarc::driver::sys::{CUgraphExecUpdateResult, CUresult, CUstreamCaptureStatus};
use cudagraph::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DriverError, LaunchConfig, PushKernelArg,
};
use cudagraph::{Capture, Error, UpdateRefused, capture};

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

/// The work of test 1, on views (inside a capture) or buffers (eagerly): `y = affine(x, 3, 1)`,
/// `z = y` (memcpy), `w = 0` (memset), `w = affine_inplace(w, 5, 2)`, `out = combine3(z, w, x)`.
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_cudarc_work_in_multi_stream_mode_matches_eager_over_three_launches() -> Result {
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
    let graph = capture(
        &stream,
        (&x, &mut y, &mut z, &mut w, &mut out),
        |s, (x, mut y, mut z, mut w, mut out)| -> std::result::Result<(), DriverError> {
            five_steps!(s.stream(), &k, &x, &mut y, &mut z, &mut w, &mut out);
            Ok(())
        },
    )?;
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
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        capture(&stream, (&x, &mut y), |s, (x, mut y)| {
            launch!(s.stream(), k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut y)?;
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
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let line = line!() + 1;
    let r = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        launch!(s.stream(), k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut y)?;
        s.stream().synchronize()?;
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
fn an_unlisted_buffer_written_outside_the_capture_invalidates_it_with_the_isolation_error() -> Result
{
    let (ctx, stream, k) = gpu()?;
    let other = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    // Written on `other`: its write event was recorded outside the capture.
    let unlisted = other.clone_htod(&host::iota(N, 3, 1))?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    // cudarc's launch builder returns the failed wait; its copies record it in the context.
    for copy in [false, true] {
        let line = line!() + 1;
        let r = capture(&stream, (&mut y,), |s, (mut y,)| {
            if copy {
                s.stream().memcpy_dtod(&unlisted, &mut y)
            } else {
                launch!(s.stream(), k, "affine", cfg(); &N, &3u32, &1u32, &unlisted, &mut y)
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
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let line = line!() + 1;
    let r = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        launch!(s.stream(), k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut y)?;
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
    (x, mut t, mut y): (CudaView<'_, u32>, CudaViewMut<'_, u32>, CudaViewMut<'_, u32>),
) -> std::result::Result<(), DriverError> {
    launch!(s.stream(), k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut t)?;
    launch!(s.stream(), k, "mix", cfg(); &N, &t.as_view(), &mut y)
}

/// [`two_kernels`] and then `y = affine_inplace(y, 5, 2)`: another topology.
fn three_kernels(
    k: &Ops,
    s: &Capture,
    (x, mut t, mut y): (CudaView<'_, u32>, CudaViewMut<'_, u32>, CudaViewMut<'_, u32>),
) -> std::result::Result<(), DriverError> {
    launch!(s.stream(), k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut t)?;
    launch!(s.stream(), k, "mix", cfg(); &N, &t.as_view(), &mut y)?;
    launch!(s.stream(), k, "affine_inplace", cfg(); &N, &5u32, &2u32, &mut y)
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
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let [mut a, mut b, mut c] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let g = capture(&stream, (&mut a, &mut b, &mut c), |s, (mut a, mut b, mut c)| {
        let st = s.stream();
        launch!(st, k, "iota", cfg(); &N, &3u32, &1u32, &mut a)?;
        launch!(st, k, "affine", cfg(); &N, &5u32, &7u32, &a.as_view(), &mut b)?;
        launch!(st, k, "mix", cfg(); &N, &b.as_view(), &mut c)
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
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let [mut t, mut y] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let g = capture(&stream, (&x, &mut t, &mut y), |s, v| two_kernels(&k, s, v))?;
    let mut exec = g.instantiate()?;
    let mut nested = None;
    let mut launched = None;
    let outer = capture(&stream, (), |s, ()| {
        nested = Some(capture(s.stream(), (), |_, ()| Ok::<(), DriverError>(())).map(drop));
        launched = Some(exec.launch(s.stream()));
        Ok::<(), DriverError>(())
    })?;
    assert_eq!(outer.nodes()?, 0);
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_with_event_tracking_off_matches_eager() -> Result {
    assert!(cudagraph::driver_available(), "no CUDA driver");
    let ctx = cudagraph::cudarc::driver::CudaContext::new(0)?;
    // SAFETY: every buffer of this test is used on `stream` only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { Ops::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx(common::SOURCE)?) }?;
    let mut x = stream.alloc_zeros::<u32>(LEN)?;
    let [mut t, mut y] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let g = capture(&stream, (&x, &mut t, &mut y), |s, v| two_kernels(&k, s, v))?;
    let mut released = g.instantiate()?.release();
    for round in 0..2 {
        let input = host::iota(N, 3 + round, round);
        stream.memcpy_htod(&input, &mut x)?;
        let mut exec = released.bind((&x, &mut t, &mut y));
        exec.launch(&stream)?;
        released = exec.release();
        assert_same(&stream.clone_dtoh(&y)?, &two_kernels_host(&input), "graph vs host model");
        let mut ey = stream.alloc_zeros::<u32>(LEN)?;
        let mut et = stream.alloc_zeros::<u32>(LEN)?;
        launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut et)?;
        launch!(stream, k, "mix", cfg(); &N, &et, &mut ey)?;
        assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "graph vs eager");
    }
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_view_used_on_a_stream_outside_the_capture_invalidates_it_after_running_eagerly() -> Result {
    let (ctx, stream, k) = gpu()?;
    let other = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.clone_htod(&host::iota(N, 5, 1))?;
    let line = line!() + 1;
    let r = capture(&stream, (&mut y,), |_, (mut y,)| other.memset_zeros(&mut y)).map(drop);
    match r {
        Err(Error::CaptureInvalidated { file, line: l, source }) => {
            println!("invalidated: {source}");
            assert!(file.ends_with("capture.rs"), "{file}");
            assert_eq!(l, line);
            assert_eq!(source.error.0, CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
        }
        other => panic!("expected Error::CaptureInvalidated, got {other:?}"),
    }
    ctx.check_err()?;
    // The memset ran eagerly on `other` (as it would without the capture) and is complete.
    assert_same(&stream.clone_dtoh(&y)?, &vec![0; LEN], "y after the eager memset");
    assert_usable(&stream, &k, &x, &mut y);
    Ok(())
}
