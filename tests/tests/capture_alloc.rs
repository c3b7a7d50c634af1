//! GPU tests of captures whose closure allocates (issue 30 item 3): a library in the style of
//! candle's, whose every op allocates its output on the stream it is given (and a scratch
//! buffer it frees), called inside a `capture` statement of `graph!` and inside the standalone
//! `capture`. Its allocations become graph memory of the recording: allocation nodes, freed
//! inside each launch (a buffer dropped in the closure is a free node; a recording with an
//! allocation the closure kept is refused). Each test compares with the same calls run eagerly
//! ([`Mode::Eager`]) and with a host model, exactly (integer data), and checks that device
//! memory stays flat (`cuMemGetInfo`) over 100 calls.

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host, launch};
use cudagraph::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, DriverError, LaunchConfig, PushKernelArg,
};
use cudagraph::{GraphCache, Mode, capture, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// A library that allocates what it returns, as candle does for every op's output, and a
/// scratch buffer per op that it frees before returning.
struct Lib {
    k: Ops,
}

impl Lib {
    /// `a·x + b` in a new buffer, through a scratch buffer holding `a·x` (allocated and freed
    /// here).
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

    /// `mix(x)` in a new buffer.
    fn mix(
        &self,
        s: &Arc<CudaStream>,
        x: &CudaSlice<u32>,
    ) -> std::result::Result<CudaSlice<u32>, DriverError> {
        let mut out = s.alloc_zeros::<u32>(LEN)?;
        launch!(s, self.k, "mix", cfg(); &N, x, &mut out)?;
        Ok(out)
    }
}

/// The closure of the capture statement: two library ops (each allocating its output and a
/// scratch buffer), the result copied into the listed `y`. Each op's output is dropped here
/// (a free node), after its last use.
fn forward(
    s: &cudagraph::Capture,
    (lib, a): &(Arc<Lib>, u32),
    (x, mut y): (cudagraph::CaptureSlice<'_, u32>, cudagraph::CaptureSliceMut<'_, u32>),
) -> std::result::Result<(), DriverError> {
    // SAFETY: the work joined on the stream reads `x` and writes `y` (listed views), and
    // otherwise only buffers it allocates on the stream while captured and frees here.
    let (st, xv) = unsafe { (s.stream(), x.as_cuda_view()) };
    let t = lib.affine(st, xv, (*a, 1))?;
    let u = lib.mix(st, &t)?;
    drop(t);
    st.memcpy_dtod(&u, &mut y)?;
    drop(u);
    Ok(())
}

/// One step: a kernel node writes `x` from `seed`; the keyed capture statement computes
/// `y = mix(a·x + 1)` through the library; a kernel node writes `out = 3·y + seed`.
fn step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    lib: &Arc<Lib>,
    (seed, a): (u32, u32),
    (x, y, out): (&mut CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> Result {
    let k: &Ops = &lib.k;
    graph!(cache, stream, {
        k.iota(N, 3, seed, &mut *x).launch(cfg());
        capture(&*x, &mut *y, key = (lib.clone(), a), |s, key, views| forward(s, key, views));
        k.affine(N, 3, seed, &*y, &mut *out).launch(cfg());
    })
}

fn model(seed: u32, a: u32) -> (Vec<u32>, Vec<u32>) {
    let y = host::mix(&host::affine(&host::iota(N, 3, seed), a, 1));
    let out = host::affine(&y, 3, seed);
    (y, out)
}

#[track_caller]
fn check(stream: &Arc<CudaStream>, got: (&CudaSlice<u32>, &CudaSlice<u32>), seed: u32, a: u32) {
    let want = model(seed, a);
    let get = |s: &CudaSlice<u32>| stream.clone_dtoh(s).expect("copy back");
    assert_same(&get(got.0), &want.0, &format!("y, seed {seed}, a {a}"));
    assert_same(&get(got.1), &want.1, &format!("out, seed {seed}, a {a}"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_library_allocating_outputs_and_scratch_while_captured_over_100_calls() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let z = || stream.alloc_zeros::<u32>(LEN);
    let (mut x, mut y, mut out) = (z()?, z()?, z()?);
    let (mut ex, mut ey, mut eout) = (z()?, z()?, z()?);
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    // Warm up (the first launch reserves the graph memory pool), then measure.
    step(&mut cache, &stream, &lib, (1, 5), (&mut x, &mut y, &mut out))?;
    check(&stream, (&y, &out), 1, 5);
    let s = cache.stats();
    // affine: scratch + output; mix: output.
    assert_eq!((s.captures, s.capture_allocations), (1, 3), "{s:?}");
    // Three buffers of N u32 each launch.
    assert_eq!(cache.graph_owned_bytes(), 3 * LEN * 4);
    let before = common::free_memory(&ctx)?;
    for call in 0..100u32 {
        let seed = 7 + call;
        step(&mut cache, &stream, &lib, (seed, 5), (&mut x, &mut y, &mut out))?;
        step(&mut eager, &stream, &lib, (seed, 5), (&mut ex, &mut ey, &mut eout))?;
        if call % 10 == 0 || call == 99 {
            check(&stream, (&y, &out), seed, 5);
            check(&stream, (&ey, &eout), seed, 5);
        }
    }
    common::assert_no_leak(&ctx, before, "100 graph calls of a capture that allocates");
    let s = cache.stats();
    // Recorded once: the capture's operands and key never changed; only the kernel nodes'
    // seed did (two node updates per call).
    assert_eq!((s.captures, s.capture_reuses, s.capture_allocations), (1, 100, 3), "{s:?}");
    assert_eq!((s.builds, s.reinstantiations, s.node_updates), (1, 0, 200), "{s:?}");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_allocating_capture_with_a_changed_key_or_operands_gets_a_new_graph() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let z = || stream.alloc_zeros::<u32>(LEN);
    let (mut x, mut y, mut out) = (z()?, z()?, z()?);
    let (mut x2, mut y2, mut out2) = (z()?, z()?, z()?);
    let mut cache = GraphCache::new();
    step(&mut cache, &stream, &lib, (1, 5), (&mut x, &mut y, &mut out))?;
    let before = common::free_memory(&ctx)?;
    // Alternate the key (a) and the buffers: each change is a recording with memory nodes
    // that cannot be set into the exec's node, so the exec is instantiated anew; a kept
    // recording taken again was moved into an earlier graph, so it is recorded again.
    for call in 0..40u32 {
        let a = if call % 2 == 0 { 5 } else { 9 };
        let seed = 11 + call;
        if call % 4 < 2 {
            step(&mut cache, &stream, &lib, (seed, a), (&mut x, &mut y, &mut out))?;
            check(&stream, (&y, &out), seed, a);
        } else {
            step(&mut cache, &stream, &lib, (seed, a), (&mut x2, &mut y2, &mut out2))?;
            check(&stream, (&y2, &out2), seed, a);
        }
    }
    common::assert_no_leak(&ctx, before, "40 calls alternating keys and buffers");
    let s = cache.stats();
    assert!(s.reinstantiations + s.memo_builds >= 1, "{s:?}");
    assert_eq!(s.exec_updates, 0, "no whole-exec update of a graph with memory nodes: {s:?}");
    assert_eq!(s.capture_allocations, 3 * s.captures, "{s:?}");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_unkeyed_allocating_capture_records_and_reinstantiates_every_call() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let z = || stream.alloc_zeros::<u32>(LEN);
    let (mut x, mut y) = (z()?, z()?);
    let mut cache = GraphCache::new();
    let before = common::free_memory(&ctx)?;
    for call in 0..20u32 {
        let seed = 3 + call;
        let l = &lib;
        let kk: &Ops = &lib.k;
        graph!(&mut cache, &stream, {
            kk.iota(N, 3, seed, &mut x).launch(cfg());
            capture(&x, &mut y, |s, views| forward(s, &(l.clone(), 5), views));
        })?;
        let want = host::mix(&host::affine(&host::iota(N, 3, seed), 5, 1));
        assert_same(&stream.clone_dtoh(&y)?, &want, &format!("call {call}"));
    }
    common::assert_no_leak(&ctx, before, "20 unkeyed calls");
    let s = cache.stats();
    assert_eq!((s.captures, s.capture_allocations), (20, 60), "{s:?}");
    assert_eq!((s.builds, s.reinstantiations, s.exec_updates), (1, 19, 0), "{s:?}");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_standalone_capture_that_allocates_launches_100_times_without_leaking() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let z = || stream.alloc_zeros::<u32>(LEN);
    let (mut x, mut y) = (z()?, z()?);
    let fill = |x: &mut CudaSlice<u32>, seed: u32| -> Result {
        stream.memcpy_htod(&host::iota(N, 3, seed), x)?;
        Ok(())
    };
    fill(&mut x, 1)?;
    let key = (lib.clone(), 5u32);
    let mut exec = capture(&stream, (&x, &mut y), |s, v| forward(s, &key, v))?.instantiate()?;
    exec.launch(&stream)?;
    let released = exec.release();
    let before = common::free_memory(&ctx)?;
    let mut released = Some(released);
    for call in 0..100u32 {
        let seed = 20 + call;
        fill(&mut x, seed)?;
        let mut exec = released.take().expect("released").bind((&x, &mut y));
        exec.launch(&stream)?;
        released = Some(exec.release());
        if call % 10 == 0 || call == 99 {
            let want = host::mix(&host::affine(&host::iota(N, 3, seed), 5, 1));
            assert_same(&stream.clone_dtoh(&y)?, &want, &format!("call {call}"));
        }
    }
    drop(released);
    common::assert_no_leak(&ctx, before, "100 launches of a standalone capture that allocates");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capture_freeing_a_buffer_it_did_not_allocate_is_refused() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let (mut x, mut y) = (stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?);
    let mut cache = GraphCache::new();
    let mut owned = Some(stream.alloc_zeros::<u32>(LEN)?);
    let r = graph!(&mut cache, &stream, {
        k.iota(N, 3, 1, &mut x).launch(cfg());
        capture(&x, &mut y, |s, (_x, _y)| {
            // SAFETY: deliberately breaks the contract's "frees nothing else": the buffer was
            // made before the capture, and its drop on the joined stream is captured as a free.
            let st = unsafe { s.stream() };
            let b = owned.take().expect("once");
            let _ = st;
            drop(b);
            Ok::<(), DriverError>(())
        });
    });
    // Refused by the crate (a free node of memory the recording did not allocate), or by the
    // driver (the capture invalidated): never a recording that frees it at each launch.
    let e = r.expect_err("a recording freeing memory it did not allocate");
    let text = format!("{e}");
    assert!(
        text.contains("did not allocate")
            || matches!(e, cudagraph::Error::CaptureInvalidated { .. }),
        "{text}"
    );
    eprintln!("refused: {text}");
    ctx.synchronize()?;
    let _ = ctx.check_err();
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capture_keeping_an_allocation_past_the_closure_is_refused_and_the_cache_stays_usable() -> Result
{
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let z = || stream.alloc_zeros::<u32>(LEN);
    let (mut x, mut y, mut out) = (z()?, z()?, z()?);
    let mut cache = GraphCache::new();
    let kk: &Ops = &lib.k;
    let r = graph!(&mut cache, &stream, {
        kk.iota(N, 3, 1, &mut x).launch(cfg());
        capture(&x, &mut y, key = lib.clone(), |s, lib, (x, mut y)| {
            // SAFETY: the joined work reads `x`, writes `y`, and allocates `t` on the stream;
            // `t` is forgotten, not freed: the recording must be refused, whatever happens to
            // the handle.
            let (st, xv) = unsafe { (s.stream(), x.as_cuda_view()) };
            let t = lib.affine(st, xv, (5, 1))?;
            st.memcpy_dtod(&t, &mut y)?;
            std::mem::forget(t);
            Ok::<(), DriverError>(())
        });
    });
    let e = r.expect_err("a recording with an allocation the closure did not free");
    assert!(format!("{e}").contains("did not free it"), "{e}");
    assert_eq!(cache.stats().launches, 0);
    // The same cache runs the step that frees everything it allocates.
    step(&mut cache, &stream, &lib, (4, 5), (&mut x, &mut y, &mut out))?;
    check(&stream, (&y, &out), 4, 5);
    ctx.check_err()?;
    Ok(())
}

/// The closure of the kept-output tests: `t = affine(x, 5, 1)` and `u = mix(t)` through the
/// library (each op allocating its output and a scratch buffer it frees), both outputs kept
/// (`Capture::keep`) instead of copied into listed operands.
fn forward_kept(
    s: &cudagraph::Capture,
    lib: &Lib,
    x: cudagraph::CaptureSlice<'_, u32>,
) -> std::result::Result<(cudagraph::Kept<u32>, cudagraph::Kept<u32>), cudagraph::Error> {
    // SAFETY: the work joined on the stream reads `x` (a listed view) and otherwise only
    // buffers it allocates on the stream while captured, freed or kept here.
    let (st, xv) = unsafe { (s.stream(), x.as_cuda_view()) };
    let t = lib.affine(st, xv, (5, 1))?;
    let u = lib.mix(st, &t)?;
    Ok((s.keep(t)?, s.keep(u)?))
}

/// Kept outputs (`Capture::keep`): a library's outputs allocated while captured stay with the
/// exec. Before the first launch `Exec::output` refuses; after each launch both outputs hold
/// that launch's results (host model and eager library calls), over 100 launches with a new
/// input each time (release, write, bind); device memory and the graph memory pool stay flat,
/// and dropping the exec gives the kept outputs' graph memory back (`used_current` returns to
/// where it was before the first launch).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_standalone_capture_keeps_its_allocated_outputs_readable_over_100_launches() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let mut x = stream.alloc_zeros::<u32>(LEN)?;
    let fill = |x: &mut CudaSlice<u32>, seed: u32| -> Result {
        stream.memcpy_htod(&host::iota(N, 3, seed), x)?;
        Ok(())
    };
    let want = |seed: u32| {
        let t = host::affine(&host::iota(N, 3, seed), 5, 1);
        let u = host::mix(&t);
        (t, u)
    };
    fill(&mut x, 1)?;
    ctx.synchronize()?;
    let pool_before = cudagraph::graph_mem_usage(&ctx)?.used_current;
    let kept = std::cell::Cell::new(None);
    let graph = capture(&stream, (&x,), |s, (x,)| {
        kept.set(Some(forward_kept(s, &lib, x)?));
        Ok::<(), cudagraph::Error>(())
    })?;
    let (kt, ku) = kept.get().expect("the closure kept both outputs");
    let mut exec = graph.instantiate()?;
    match exec.output(&kt) {
        Err(cudagraph::Error::Node { source, .. }) => {
            assert!(source.call.contains("not launched yet"), "{source}")
        }
        other => panic!("expected a refused output before the first launch, got {other:?}"),
    }
    exec.launch(&stream)?;
    let (t1, u1) = want(1);
    assert_same(&stream.clone_dtoh(&exec.output(&kt)?)?, &t1, "t after the first launch");
    assert_same(&stream.clone_dtoh(&exec.output(&ku)?)?, &u1, "u after the first launch");
    // The same calls eagerly, on the library: the outputs match them too.
    let et = lib.affine(&stream, &x.as_view(), (5, 1))?;
    let eu = lib.mix(&stream, &et)?;
    assert_same(&stream.clone_dtoh(&exec.output(&ku)?)?, &stream.clone_dtoh(&eu)?, "u vs eager");
    drop((et, eu));
    let before = common::free_memory(&ctx)?;
    let pool_used = cudagraph::graph_mem_usage(&ctx)?.used_current;
    println!("graph pool used: {pool_before} bytes before the first launch, {pool_used} after it");
    let mut released = Some(exec.release());
    for call in 0..100u32 {
        let seed = 20 + call;
        fill(&mut x, seed)?;
        let mut exec = released.take().expect("released").bind((&x,));
        exec.launch(&stream)?;
        if call % 10 == 0 || call == 99 {
            let (t, u) = want(seed);
            assert_same(&stream.clone_dtoh(&exec.output(&kt)?)?, &t, &format!("t, call {call}"));
            assert_same(&stream.clone_dtoh(&exec.output(&ku)?)?, &u, &format!("u, call {call}"));
        }
        released = Some(exec.release());
    }
    common::assert_no_leak(&ctx, before, "100 launches of a capture with kept outputs");
    assert_eq!(cudagraph::graph_mem_usage(&ctx)?.used_current, pool_used, "pool flat");
    drop(released);
    ctx.synchronize()?;
    println!("graph pool used after the drop: {}", cudagraph::graph_mem_usage(&ctx)?.used_current);
    ctx.check_err()?;
    Ok(())
}

/// Elements of the big kept output of [`dropped_execs_give_their_kept_outputs_back`]: 64 MiB.
const BIG: usize = 16 << 20;

/// Each exec's drop frees its kept outputs: 8 rounds of capture (a 64 MiB buffer allocated and
/// filled while captured, kept), launch, read, drop. Kept memory that a dropped exec did not
/// free would stay allocated, 512 MiB after the rounds, which `cuDeviceGraphMemTrim` cannot
/// give back: device memory after the rounds and a trim is within [`common::LEAK_SLACK`] of
/// before.
#[test]
#[ignore = "needs a CUDA GPU"]
fn dropped_execs_give_their_kept_outputs_back() -> Result {
    let _serial = common::serial();
    let (ctx, stream, _k) = gpu()?;
    let x = stream.alloc_zeros::<u32>(1)?;
    let trim = || -> Result {
        ctx.synchronize()?;
        // SAFETY: the device of a live context; gives unused graph pool memory back.
        unsafe { cudagraph::cudarc::driver::sys::cuDeviceGraphMemTrim(ctx.cu_device()) }
            .result()?;
        Ok(())
    };
    trim()?;
    let before = common::free_memory(&ctx)?;
    for round in 0..8u8 {
        let kept = std::cell::Cell::new(None);
        let graph = capture(&stream, (&x,), |s, (_x,)| {
            // SAFETY: the joined work only allocates and fills a buffer of its own, kept.
            let st = unsafe { s.stream() };
            let mut big = st.alloc_zeros::<u8>(BIG * 4)?;
            st.memset_zeros(&mut big)?;
            kept.set(Some(s.keep(big)?));
            Ok::<(), cudagraph::Error>(())
        })?;
        let big = kept.get().expect("kept");
        let mut exec = graph.instantiate()?;
        exec.launch(&stream)?;
        let got = stream.clone_dtoh(&exec.output(&big)?)?;
        assert!(got.iter().all(|&b| b == 0), "round {round}: the kept output after a launch");
        drop(exec);
    }
    trim()?;
    common::assert_no_leak(&ctx, before, "8 execs with a 64 MiB kept output, dropped");
    Ok(())
}

/// `Capture::keep` is refused where it cannot hold: in a `capture` statement of `graph!` (the
/// statement's recording is a child of the cache's graph), and for a buffer the recording did
/// not allocate (made before the capture); both name the call, and nothing is recorded or kept.
#[test]
#[ignore = "needs a CUDA GPU"]
fn keep_is_refused_in_a_capture_statement_and_for_memory_the_recording_did_not_allocate() -> Result
{
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let lib = Arc::new(Lib { k });
    let (mut x, mut y) = (stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?);
    let mut cache = GraphCache::new();
    let kk: &Ops = &lib.k;
    let r = graph!(&mut cache, &stream, {
        kk.iota(N, 3, 1, &mut x).launch(cfg());
        capture(&x, &mut y, key = lib.clone(), |s, lib, (x, _y)| forward_kept(s, lib, x).map(drop));
    });
    let e = r.expect_err("keep in a capture statement");
    assert!(format!("{e}").contains("Capture::keep"), "{e}");
    assert_eq!(cache.stats().launches, 0);

    let made_before = stream.alloc_zeros::<u32>(LEN)?;
    let line = line!() + 1;
    let r = capture(&stream, (&x,), move |s, (_x,)| s.keep(made_before).map(drop));
    match r {
        Err(cudagraph::Error::Capture { line: l, source, .. }) => {
            assert_eq!(l, line);
            assert!(
                format!("{source}").contains("not memory this recording allocated"),
                "{source}"
            );
        }
        other => panic!("expected the closure's refused keep, got {other:?}"),
    }
    ctx.synchronize()?;
    ctx.check_err()?;
    Ok(())
}
