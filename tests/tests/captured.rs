//! GPU tests of the `capture` statement of `graph!` (issue 13 item 4): stream work recorded into
//! a child-graph node every call, its buffers listed like a kernel's. Each test compares the
//! graph's results with the same body run eagerly ([`Mode::Eager`], where the closure runs
//! directly on the stream), exactly (integer data).

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host, launch};
use cudagraph::cudarc::driver::sys::CUstreamCaptureStatus;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg};
use cudagraph::{Error, GraphCache, Mode, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// One step: a kernel node writes `x` from `seed`, a captured region (two cudarc launches, a
/// memcpy and, when `extra`, a third launch: another topology) reads `x` and writes `y` and `z`,
/// and a kernel node after it reads `z` into `out`.
#[allow(clippy::too_many_arguments)]
fn step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Ops,
    seed: u32,
    extra: bool,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
    z: &mut CudaSlice<u32>,
    out: &mut CudaSlice<u32>,
) -> Result {
    graph!(cache, stream, {
        k.iota(N, 3, seed, &mut *x).launch(cfg());
        capture(&*x, &mut *y, &mut *z, |s, (x, mut y, mut z)| -> std::result::Result<(), Error> {
            // SAFETY: the kernels read N elements of x and write N of y and z, listed views
            // (`&mut` where written), on the joined stream.
            let st = unsafe { s.stream() };
            // SAFETY: used on `st`, joined above.
            let (xv, yv) = unsafe { (x.as_cuda_view(), y.as_cuda_view_mut()) };
            launch!(st, k, "affine", cfg(); &N, &5u32, &seed, xv, yv)?;
            s.copy(&y, &mut z)?;
            // SAFETY: as above.
            let zv = unsafe { z.as_cuda_view_mut() };
            launch!(st, k, "affine_inplace", cfg(); &N, &7u32, &1u32, &mut *zv)?;
            if extra {
                launch!(st, k, "affine_inplace", cfg(); &N, &3u32, &2u32, zv)?;
            }
            Ok(())
        });
        k.mix(N, &*z, &mut *out).launch(cfg());
    })
}

/// The host model of [`step`]: `(y, z, out)`.
fn model(seed: u32, extra: bool) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let x = host::iota(N, 3, seed);
    let y = host::affine(&x, 5, seed);
    let mut z = y.clone();
    host::affine_inplace(&mut z, 7, 1);
    if extra {
        host::affine_inplace(&mut z, 3, 2);
    }
    let out = host::mix(&z);
    (y, z, out)
}

struct Bufs {
    x: CudaSlice<u32>,
    y: CudaSlice<u32>,
    z: CudaSlice<u32>,
    out: CudaSlice<u32>,
}

fn bufs(stream: &Arc<CudaStream>) -> Result<Bufs> {
    Ok(Bufs {
        x: stream.alloc_zeros(LEN)?,
        y: stream.alloc_zeros(LEN)?,
        z: stream.alloc_zeros(LEN)?,
        out: stream.alloc_zeros(LEN)?,
    })
}

fn run(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Ops,
    (seed, extra): (u32, bool),
    b: &mut Bufs,
) -> Result {
    step(cache, stream, k, seed, extra, &mut b.x, &mut b.y, &mut b.z, &mut b.out)
}

fn check(stream: &Arc<CudaStream>, b: &Bufs, want: &(Vec<u32>, Vec<u32>, Vec<u32>), what: &str) {
    let get = |s: &CudaSlice<u32>| stream.clone_dtoh(s).expect("copy back");
    assert_same(&get(&b.y), &want.0, &format!("{what}: y"));
    assert_same(&get(&b.z), &want.1, &format!("{what}: z"));
    assert_same(&get(&b.out), &want.2, &format!("{what}: out"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_region_whose_buffers_swap_every_call_matches_eager_in_multi_stream_mode() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?; // multi-stream mode: cudarc's events are on
    assert!(ctx.is_managing_stream_synchronization());
    let (mut a, mut b) = (bufs(&stream)?, bufs(&stream)?);
    let mut e = bufs(&stream)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for call in 0..6u32 {
        let seed = 11 + call;
        run(&mut cache, &stream, &k, (seed, false), &mut a)?;
        run(&mut eager, &stream, &k, (seed, false), &mut e)?;
        let want = model(seed, false);
        check(&stream, &a, &want, &format!("graph, call {call}"));
        check(&stream, &e, &want, &format!("eager, call {call}"));
        std::mem::swap(&mut a, &mut b); // every pointer changes every call
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 1, 6));
    // Every later call re-records the region and sends it (child-graph set-params), and the
    // swapped pointers of the two kernel nodes: 3 node updates per call, nothing rebuilt.
    assert_eq!((s.node_updates, s.exec_updates, s.reinstantiations), (15, 0, 0), "{s:?}");
    assert_eq!(s.captures, 6, "{s:?}");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recording_of_another_topology_falls_down_the_ladder_and_stays_right() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let mut a = bufs(&stream)?;
    let mut e = bufs(&stream)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for (call, extra) in [false, true, true, false].into_iter().enumerate() {
        let seed = 5 + call as u32;
        run(&mut cache, &stream, &k, (seed, extra), &mut a)?;
        run(&mut eager, &stream, &k, (seed, extra), &mut e)?;
        let want = model(seed, extra);
        check(&stream, &a, &want, &format!("graph, call {call}"));
        check(&stream, &e, &want, &format!("eager, call {call}"));
    }
    let s = cache.stats();
    // The child graph's topology changed twice (3 → 4 → 4 → 3 nodes): each time the child's
    // set-params was refused, and so was the whole-exec update (the driver compares child
    // graphs' topologies too), so the exec was instantiated anew; the same topology in between
    // is a plain child update.
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 3, 4), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 2), "{s:?}");
    assert!(cache.last_refusal().is_some());
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_error_returned_by_the_closure_names_the_statement_and_enqueues_nothing() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(LEN)?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let mut fail = true;
    let mut call = |cache: &mut GraphCache, fail: bool| {
        graph!(cache, &stream, {
            k.iota(N, 1, 2, &mut x).launch(cfg());
            capture(&x, &mut y, |s, (x, mut y)| {
                if fail {
                    return Err("the closure's own error".into());
                }
                s.copy(&x, &mut y).map_err(Box::<dyn std::error::Error + Send + Sync>::from)
            });
        })
    };
    let line = line!() - 8; // the `capture(` line above
    let err = call(&mut cache, fail).expect_err("the closure failed");
    match &err {
        Error::Capture { file, line: l, source } => {
            assert!(file.ends_with("captured.rs"), "{err}");
            assert_eq!(*l, line, "{err}");
            assert_eq!(source.to_string(), "the closure's own error");
        }
        other => panic!("expected Error::Capture, got {other}"),
    }
    assert_eq!(cache.stats().launches, 0);
    assert!(cache.is_empty(), "nothing was built");
    assert_eq!(stream.capture_status()?, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    fail = false;
    call(&mut cache, fail)?;
    assert_same(&stream.clone_dtoh(&y)?, &host::iota(N, 1, 2), "after the error");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panic_in_the_closure_unwinds_and_the_cache_and_stream_stay_usable() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let mut b = bufs(&stream)?;
    let mut cache = GraphCache::new();
    run(&mut cache, &stream, &k, (1, false), &mut b)?;
    let x = &mut b.x;
    let y = &mut b.y;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        graph!(&mut cache, &stream, {
            k.iota(N, 3, 9, &mut *x).launch(cfg());
            capture(&*x, &mut *y, |_, (_x, _y)| -> std::result::Result<(), DriverError> {
                panic!("inside the captured closure")
            });
        })
    }));
    assert!(caught.is_err(), "the panic continues out of graph!");
    assert_eq!(stream.capture_status()?, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    run(&mut cache, &stream, &k, (4, false), &mut b)?;
    check(&stream, &b, &model(4, false), "after the panic");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_synchronize_inside_the_closure_is_an_invalidated_capture_error() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(LEN)?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let err = graph!(&mut cache, &stream, {
        k.iota(N, 1, 2, &mut x).launch(cfg());
        capture(&x, &mut y, |s, (x, mut y)| -> std::result::Result<(), Error> {
            s.copy(&x, &mut y)?;
            // SAFETY: nothing is enqueued: the synchronize of the joined (capturing) stream is
            // refused by the driver, which invalidates the capture (what this test checks).
            unsafe { s.stream() }.synchronize()?;
            Ok(())
        });
    })
    .expect_err("a synchronize cannot be captured");
    assert!(matches!(err, Error::CaptureInvalidated { .. }), "{err}");
    assert!(err.to_string().contains("captured.rs"), "{err}");
    assert_eq!(stream.capture_status()?, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    // cudarc may have kept the driver's complaint in the context; the stream works again.
    let _ = ctx.check_err();
    graph!(&mut cache, &stream, {
        k.iota(N, 1, 2, &mut x).launch(cfg());
        capture(&x, &mut y, |s, (x, mut y)| s.copy(&x, &mut y));
    })?;
    assert_same(&stream.clone_dtoh(&y)?, &host::iota(N, 1, 2), "after the invalidated capture");
    Ok(())
}

/// A captured graph of `y = affine(x, 5, s)`, `y = affine_inplace(y, 7, 1)`.
fn captured_affine<'a>(
    stream: &Arc<CudaStream>,
    k: &'a Ops,
    s: u32,
    x: &'a CudaSlice<u32>,
    y: &'a mut CudaSlice<u32>,
) -> Result<cudagraph::Graph<'a>> {
    // `move`: the graph holds what its closure borrows (`k`) for as long as it lives.
    cudagraph::capture(
        stream,
        (x, y),
        move |c, (x, mut y)| -> std::result::Result<(), DriverError> {
            // SAFETY: the kernels read N elements of x and read and write N of y, listed views
            // (`&mut` where written), on the joined stream.
            let (st, xv, yv) = unsafe { (c.stream(), x.as_cuda_view(), y.as_cuda_view_mut()) };
            launch!(st, k, "affine", cfg(); &N, &5u32, &s, xv, &mut *yv)?;
            launch!(st, k, "affine_inplace", cfg(); &N, &7u32, &1u32, yv)
        },
    )
}

/// The host model of [`captured_affine`]: `y`.
fn captured_affine_host(x: &[u32], s: u32) -> Vec<u32> {
    let mut y = host::affine(x, 5, s);
    host::affine_inplace(&mut y, 7, 1);
    y
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_embedded_graph_is_replayed_and_swapped_in_place_and_matches_eager() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?; // multi-stream mode: cudarc's events are on
    let x1 = stream.clone_htod(&host::iota(N, 3, 1))?;
    let x2 = stream.clone_htod(&host::iota(N, 5, 2))?;
    let (mut y1, mut y2) = (stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?);
    let (mut a, mut b) = (stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?);
    let mut g1 = captured_affine(&stream, &k, 9, &x1, &mut y1)?;
    let mut g2 = captured_affine(&stream, &k, 4, &x2, &mut y2)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for call in 0..4u32 {
        // Calls 0, 1 embed g1 (the second sends nothing for it); 2, 3 embed g2 (a child update,
        // then nothing).
        let g = if call < 2 { &mut g1 } else { &mut g2 };
        graph!(&mut cache, &stream, {
            child(&mut *g);
            k.iota(N, 2, call, &mut a).launch(cfg());
            k.mix(N, &a, &mut b).launch(cfg());
        })?;
        let want_b = host::mix(&host::iota(N, 2, call));
        assert_same(&stream.clone_dtoh(&b)?, &want_b, &format!("call {call}: b"));
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 1, 4), "{s:?}");
    // Call 1: nothing changed; call 2: the child and a's iota scalar; call 3: the scalar.
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    // Eagerly: the embedded graph instantiated and launched on the stream.
    graph!(&mut eager, &stream, {
        child(&mut g1);
        k.iota(N, 2, 0, &mut a).launch(cfg());
    })?;
    drop((g1, g2));
    assert_same(&stream.clone_dtoh(&y1)?, &captured_affine_host(&host::iota(N, 3, 1), 9), "y1");
    assert_same(&stream.clone_dtoh(&y2)?, &captured_affine_host(&host::iota(N, 5, 2), 4), "y2");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_embeds_a_captured_graph_and_swaps_it_in_place() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?; // multi-stream mode: cudarc's events are on
    let x1 = stream.clone_htod(&host::iota(N, 3, 1))?;
    let x2 = stream.clone_htod(&host::iota(N, 5, 2))?;
    let (mut y1, mut y2) = (stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?);
    let (mut a, mut b) = (stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?);
    let mut g1 = captured_affine(&stream, &k, 9, &x1, &mut y1)?;
    let mut g2 = captured_affine(&stream, &k, 4, &x2, &mut y2)?;
    let mut cache = GraphCache::new();
    for call in 0..4u32 {
        let g = if call < 2 { &mut g1 } else { &mut g2 };
        let mut bld = cache.builder(&stream);
        bld.child(g);
        let (aw, bw) = (bld.write(&mut a), bld.write(&mut b));
        bld.kernel(k.iota(N, 2, call, aw).launch(cfg()));
        bld.kernel(k.mix(N, aw.read(), bw).launch(cfg()));
        bld.launch()?;
        let want_b = host::mix(&host::iota(N, 2, call));
        assert_same(&stream.clone_dtoh(&b)?, &want_b, &format!("call {call}: b"));
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 1, 4), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    drop((g1, g2));
    assert_same(&stream.clone_dtoh(&y1)?, &captured_affine_host(&host::iota(N, 3, 1), 9), "y1");
    assert_same(&stream.clone_dtoh(&y2)?, &captured_affine_host(&host::iota(N, 5, 2), 4), "y2");
    ctx.check_err()?;
    Ok(())
}
