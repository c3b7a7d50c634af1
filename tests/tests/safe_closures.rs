//! GPU tests of issue 29 (safe code inside capture closures cannot record unlisted memory into a
//! graph): a capture runs on a private stream of the crate's, so what safe code does inside the
//! closure with the streams it holds (the call's stream from the environment, buffers' own
//! streams) runs at once and is not recorded, and the closure's views refuse those streams.
//! Each test compares with eager results, checks free device memory over 12 rounds (within 64
//! MiB), that no error is parked in the context, and that the stream and a cache still work.

mod common;

use std::cell::{OnceCell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;

use common::{Ops, Result, assert_same, free_memory, gpu, host, launch};
use cudagraph::cudarc::driver::sys::CUstreamCaptureStatus;
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{CapturedKernel, Error, GraphCache, capture, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
const ROUNDS: u32 = 12;
/// The buffer moved into the closures: 256 MiB, so that 12 leaked ones would show.
const BIG: usize = 256 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// No leak since `before`, no error parked in the context, the stream out of capture mode.
#[track_caller]
fn assert_clean(ctx: &Arc<CudaContext>, stream: &CudaStream, before: usize, what: &str) {
    common::assert_no_leak(ctx, before, what);
    let status = stream.capture_status().expect("cuStreamIsCapturing");
    assert_eq!(status, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE, "{what}");
}

/// The stream and a fresh cache still work: `y = affine(x, 3, 1)` by `graph!`, vs eager.
#[track_caller]
fn assert_usable(stream: &Arc<CudaStream>, k: &Ops, x: &CudaSlice<u32>, what: &str) {
    let run = || -> Result<(Vec<u32>, Vec<u32>)> {
        let mut y = stream.alloc_zeros::<u32>(LEN)?;
        let mut ey = stream.alloc_zeros::<u32>(LEN)?;
        let mut cache = GraphCache::new();
        graph!(&mut cache, stream, {
            k.affine(N, 3, 1, &*x, &mut y).launch(cfg());
        })?;
        launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, x, &mut ey)?;
        Ok((stream.clone_dtoh(&y)?, stream.clone_dtoh(&ey)?))
    };
    let (got, want) = run().unwrap_or_else(|e| panic!("{what}: the stream or cache failed: {e}"));
    assert_same(&got, &want, &format!("{what}: usable after (graph vs eager)"));
}

/// The message of a caught panic.
fn message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_unlisted_buffer_moved_into_a_capture_closure_and_dropped_there_is_freed_not_recorded()
-> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(LEN)?;
    let [mut y, mut ey] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let mut cache = GraphCache::new();
    for statement in [false, true] {
        let what = if statement { "graph! capture statement" } else { "cudagraph::capture" };
        let before = free_memory(&ctx)?;
        for round in 0..ROUNDS {
            let input = host::iota(N, round + 3, round);
            stream.memcpy_htod(&input, &mut x)?;
            // Unlisted, on the call's stream; dropped inside the closure: an ordinary free on
            // its own stream (not capturing), at once.
            let big = RefCell::new(Some(stream.alloc_zeros::<u8>(BIG)?));
            if statement {
                graph!(&mut cache, &stream, {
                    capture(&x, &mut y, move |s, (x, mut y)| {
                        drop(big.borrow_mut().take());
                        s.copy(&x, &mut y)
                    });
                })?;
            } else {
                let graph = capture(&stream, (&x, &mut y), move |s, (x, mut y)| {
                    drop(big.borrow_mut().take());
                    s.copy(&x, &mut y)
                })?;
                assert_eq!(graph.nodes()?, 1, "{what}: the copy only, no free node");
                graph.instantiate()?.launch(&stream)?;
            }
            stream.memcpy_dtod(&x, &mut ey)?;
            let got = stream.clone_dtoh(&y)?;
            assert_same(&got, &stream.clone_dtoh(&ey)?, &format!("{what} {round}: vs eager"));
            assert_same(&got, &input, &format!("{what} {round}: vs host"));
        }
        assert_clean(&ctx, &stream, before, what);
    }
    assert_eq!(cache.stats().builds, 1, "one build; the other calls re-recorded the statement");
    assert_usable(&stream, &k, &x, "after the rounds");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_module_a_cache_an_exec_and_a_graph_moved_into_a_capture_closure_and_dropped_there() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let ptx = compile_ptx(common::SOURCE)?;
    let x = stream.clone_htod(&host::iota(N, 7, 3))?;
    let [mut y, mut t, mut ey] =
        std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let before = free_memory(&ctx)?;
    for round in 0..ROUNDS {
        // SAFETY: the declarations match the kernels, which stay within their buffers.
        let k2 = unsafe { Ops::load(&ctx, ptx.clone()) }?;
        let mut t2 = stream.alloc_zeros::<u32>(LEN)?;
        let mut cache2 = GraphCache::new();
        graph!(&mut cache2, &stream, {
            k2.iota(N, 1, round, &mut t2).launch(cfg());
        })?;
        let mut exec = capture(&stream, (&mut t,), |s, (mut t,)| s.zero(&mut t))?.instantiate()?;
        exec.launch(&stream)?;
        let g2 = capture(&stream, (&t2,), |_, _| Ok::<(), Error>(()))?;
        let k = &k;
        let graph = capture(&stream, (&x, &mut y), move |s, (x, mut y)| {
            // Each dropped while the capture goes on: none of it is recorded or refused.
            drop(cache2);
            drop(exec);
            drop(g2);
            drop(k2);
            s.kernel(k.affine(N, 5, round, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?;
            Ok::<(), Error>(())
        })?;
        assert_eq!(graph.nodes()?, 1, "round {round}: the kernel node only");
        let mut exec = graph.instantiate()?;
        exec.launch(&stream)?;
        drop(exec);
        drop(t2);
        launch!(stream, k, "affine", cfg(); &N, &5u32, &round, &x, &mut ey)?;
        let got = stream.clone_dtoh(&y)?;
        assert_same(&got, &stream.clone_dtoh(&ey)?, &format!("round {round}: vs eager"));
        assert_same(&got, &host::affine(&host::iota(N, 7, 3), 5, round), "vs host");
    }
    assert_clean(&ctx, &stream, before, "module, cache, exec, graph dropped in closures");
    assert_usable(&stream, &k, &x, "after the rounds");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn copies_and_allocations_on_the_environments_stream_inside_a_closure_run_at_once_unrecorded()
-> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    // The node count of the closure without the safe stream work.
    let plain = capture(&stream, (&x, &mut y), |s, (x, mut y)| s.copy(&x, &mut y))?.nodes()?;
    assert_eq!(plain, 1);
    let before = free_memory(&ctx)?;
    for round in 0..ROUNDS {
        let src_data = host::iota(N, round + 5, 2 * round);
        let src = stream.clone_htod(&src_data)?; // unlisted, read inside the closure
        let dst = RefCell::new(stream.clone_htod(&vec![7u32; LEN])?); // unlisted, written
        let read = OnceCell::new();
        let read_into = RefCell::new(vec![0u32; LEN]);
        let escaped = OnceCell::new();
        let local = host::iota(N, 11, round);
        let graph = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
            s.copy(&x, &mut y)?;
            // Safe code with the call's stream, held from the environment: not capturing.
            let _ = read.set(stream.clone_dtoh(&src)?);
            stream.memcpy_dtoh(&src, &mut read_into.borrow_mut()[..])?;
            stream.memcpy_htod(&local, &mut *dst.borrow_mut())?;
            let _ = escaped.set(stream.alloc_zeros::<u32>(LEN)?);
            Ok::<(), Error>(())
        })?;
        // All of it ran at once: the data is there before any launch.
        let what = format!("round {round}");
        assert_same(read.get().expect("the closure ran"), &src_data, &format!("{what}: clone"));
        assert_same(&read_into.borrow(), &src_data, &format!("{what}: memcpy_dtoh"));
        assert_same(&stream.clone_dtoh(&*dst.borrow())?, &local, &format!("{what}: htod"));
        assert_eq!(graph.nodes()?, plain, "{what}: none of it was recorded");
        let mut exec = graph.instantiate()?;
        // A launch touches none of it.
        stream.memcpy_htod(&vec![9u32; LEN], &mut *dst.borrow_mut())?;
        exec.launch(&stream)?;
        drop(exec);
        assert_same(&stream.clone_dtoh(&*dst.borrow())?, &vec![9; LEN], &format!("{what}: dst"));
        assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&x)?, &format!("{what}: y"));
        // The escaped buffer is an ordinary one, zeroed, usable after the graph is gone.
        let mut escaped = escaped.into_inner().expect("the closure ran");
        assert_same(&stream.clone_dtoh(&escaped)?, &vec![0; LEN], &format!("{what}: zeroed"));
        launch!(stream, k, "affine", cfg(); &N, &3u32, &round, &x, &mut escaped)?;
        let want = host::affine(&host::iota(N, 3, 1), 3, round);
        assert_same(&stream.clone_dtoh(&escaped)?, &want, &format!("{what}: escaped, used"));
    }
    assert_clean(&ctx, &stream, before, "safe stream work inside closures");
    assert_usable(&stream, &k, &x, "after the rounds");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_view_used_on_the_unjoined_call_stream_panics_and_everything_is_usable_after() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let y0 = host::iota(N, 5, 2);
    let mut y = stream.clone_htod(&y0)?;
    let mut cache = GraphCache::new();
    let before = free_memory(&ctx)?;
    for round in 0..ROUNDS {
        let (statement, copy) = (round % 2 == 1, round % 4 >= 2);
        let what = format!("round {round} (statement {statement}, copy {copy})");
        let caught = catch_unwind(AssertUnwindSafe(|| {
            if statement {
                graph!(&mut cache, &stream, {
                    capture(&x, &mut y, |_, (x, mut y)| {
                        if copy {
                            stream.memcpy_dtod(&x, &mut y)
                        } else {
                            stream.memset_zeros(&mut y)
                        }
                    });
                })
            } else {
                capture(&stream, (&x, &mut y), |_, (x, mut y)| {
                    if copy { stream.memcpy_dtod(&x, &mut y) } else { stream.memset_zeros(&mut y) }
                })
                .map(drop)
            }
        }));
        let payload = caught.expect_err("a view on a stream outside the capture panics");
        assert!(message(&*payload).contains("not part of the capture"), "{what}");
        assert_same(&stream.clone_dtoh(&y)?, &y0, &format!("{what}: y untouched"));
    }
    assert_clean(&ctx, &stream, before, "views on the unjoined call stream");
    // The same work, done right, on the same stream, buffers and cache: vs eager.
    graph!(&mut cache, &stream, {
        capture(&x, &mut y, |s, (x, mut y)| s.copy(&x, &mut y));
    })?;
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&x)?, "the statement after");
    let graph = capture(&stream, (&mut y,), |s, (mut y,)| s.zero(&mut y))?;
    graph.instantiate()?.launch(&stream)?;
    let mut ey = stream.clone_htod(&y0)?;
    stream.memset_zeros(&mut ey)?;
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "the capture after");
    ctx.check_err()?;
    assert_usable(&stream, &k, &x, "after the panics");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_explicit_node_keeps_its_module_loaded_after_the_kernels_struct_is_dropped() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(LEN)?;
    let [mut y, mut ey] = std::array::from_fn(|_| stream.alloc_zeros::<u32>(LEN).expect("alloc"));
    let before = free_memory(&ctx)?;
    for round in 0..ROUNDS {
        // SAFETY: the declarations match the kernels, which stay within their buffers.
        let k2 = unsafe { Ops::load(&ctx, compile_ptx(common::SOURCE)?) }?;
        let node: Rc<OnceCell<CapturedKernel>> = Rc::new(OnceCell::new());
        let set = Rc::clone(&node);
        let graph = capture(&stream, (&x, &mut y), move |s, (x, mut y)| {
            let _ =
                set.set(s.kernel(k2.affine(N, 3, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?);
            drop(k2); // the struct, its functions and module handle: gone here
            Ok::<(), Error>(())
        })?;
        let node = Rc::try_unwrap(node).ok().and_then(OnceCell::into_inner).expect("recorded");
        assert!(node.is_recorded());
        drop(node);
        assert_eq!(graph.nodes()?, 1);
        let mut exec = graph.instantiate()?;
        for launch in 0..3u32 {
            let input = host::iota(N, round + launch + 2, launch);
            let released = exec.release();
            stream.memcpy_htod(&input, &mut x)?;
            exec = released.bind((&x, &mut y));
            exec.launch(&stream)?;
            let released = exec.release();
            launch!(stream, k, "affine", cfg(); &N, &3u32, &1u32, &x, &mut ey)?;
            let got = stream.clone_dtoh(&y)?;
            let what = format!("round {round}, launch {launch}");
            assert_same(&got, &stream.clone_dtoh(&ey)?, &format!("{what}: vs eager"));
            assert_same(&got, &host::affine(&input, 3, 1), &format!("{what}: vs host"));
            exec = released.bind((&x, &mut y));
        }
        drop(exec);
    }
    assert_clean(&ctx, &stream, before, "explicit nodes of dropped modules");
    assert_usable(&stream, &k, &x, "after the rounds");
    Ok(())
}
