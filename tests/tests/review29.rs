//! Review 29 (brief 1, safe code only): GPU tests of the attempts that compile. Each fails if
//! the hole exists. See the review's report for the reasoning of each.

use std::sync::Arc;

use cudagraph::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudagraph::cudarc::driver::{CudaContext, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use cudagraph::{Condition, Error, GraphCache, graph, kernels};

const CU: &str = include_str!("../kernels/conditional.cu");
const N: u32 = 1 << 16;

kernels! {
    /// Kernels of `kernels/conditional.cu` (a subset).
    struct K {
        fn set_nonzero(c: Condition, v: &[u32]);
        fn add(n: u32, a: u32, x: &mut [u32]);
    }
}

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn gpu() -> Result<(Arc<CudaContext>, Arc<CudaStream>, K)> {
    assert!(cudagraph::driver_available(), "no CUDA driver: the GPU tests need one");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    // SAFETY: the declarations match conditional.cu; the kernels stay within their buffers.
    let k = unsafe { K::load(&ctx, compile_ptx_with_opts(CU, opts)?) }?;
    Ok((ctx, stream, k))
}

/// A `Condition` made by one builder, passed to a kernel of another builder's graph that has
/// no device condition: the kernel would call `cudaGraphSetConditional` with handle 0 (the
/// unbound slot), a handle of no graph. `GraphBuilder::kernel` checks no condition argument
/// (only `device_*` check their condition's slot), so this must be refused at `launch`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_kernel_with_a_condition_of_another_builder_is_refused() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let v = stream.clone_htod(&[1u32])?;
    let mut other = GraphCache::new();
    let c = other.builder(&stream).condition(1);
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&stream);
    let vr = g.read(&v);
    g.kernel(k.set_nonzero(c, vr).launch((1, 1)));
    let r = g.launch();
    stream.synchronize()?;
    assert!(
        matches!(r, Err(Error::InvalidNode { .. })),
        "a kernel got a condition its graph does not have: {r:?}"
    );
    Ok(())
}

/// A condition made by the builder itself that drives no device statement: its slot has no
/// conditional node, so the kernel's handle is one the driver never associated (or 0).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_kernel_with_a_condition_that_drives_nothing_is_refused() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let v = stream.clone_htod(&[1u32])?;
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&stream);
    let c = g.condition(1);
    let vr = g.read(&v);
    g.kernel(k.set_nonzero(c, vr).launch((1, 1)));
    let r = g.launch();
    stream.synchronize()?;
    assert!(r.is_err(), "a kernel set a condition that no conditional node has: {r:?}");
    Ok(())
}

/// `Capture::kernel` accepts any `kernels!` launch whose buffers lie in listed operands; a
/// `Condition` argument is no buffer, and outside a build no handle is bound: the captured
/// kernel node gets handle 0. It must be refused (a captured graph has no device conditions).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_kernel_taking_a_condition_is_refused() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let v = stream.clone_htod(&[1u32])?;
    let c = GraphCache::new().builder(&stream).condition(1);
    let r = cudagraph::capture(&stream, (&v,), |s, (v,)| {
        s.kernel(k.set_nonzero(c, s.read(&v)?).launch((1, 1)))?;
        Ok::<(), Error>(())
    });
    assert!(r.is_err(), "a captured kernel got a condition of no graph");
    Ok(())
}

/// cudarc's `begin_capture` is safe: a `graph!` call (graph mode, not checked for a capturing
/// stream, unlike `Mode::Eager` and `Exec::launch`) on a stream that cudarc captures must record
/// nothing that outlives the call's borrows. The buffer is dropped after the call and a new one
/// of the same size (likely the same address) is allocated; replaying cudarc's graph must not
/// write it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graph_call_on_a_stream_cudarc_captures_records_nothing() -> Result {
    let (ctx, stream, k) = gpu()?;
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<u32>(N as usize)?;
    // Built once outside the capture, so the captured call is an update and a launch.
    graph!(&mut cache, &stream, {
        k.add(N, 1, &mut x).launch(LaunchConfig::for_num_elems(N));
    })?;
    stream.synchronize()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let r = graph!(&mut cache, &stream, {
        k.add(N, 1, &mut x).launch(LaunchConfig::for_num_elems(N));
    });
    let recorded = stream.end_capture(CUgraphInstantiate_flags(0));
    // The refused call invalidates cudarc's capture (its waits on events recorded outside it):
    // cudarc parks that error in the context, to be returned by its next call. Taken out here.
    let parked = ctx.check_err();
    // cudarc's `end_capture` returned the parked error before ending the capture: end it now
    // (the driver answers with the invalidation; no graph comes out).
    let ended = stream.end_capture(CUgraphInstantiate_flags(0));
    let _ = ctx.check_err();
    assert!(!matches!(ended, Ok(Some(_))), "an invalidated capture gave a graph");
    println!(
        "graph! call: {r:?}; end_capture: {:?}; parked: {parked:?}",
        recorded.as_ref().map(|g| g.is_some())
    );
    drop(x);
    // cudarc parks the ended capture's error again (x's drop waits on its events): taken out.
    let _ = ctx.check_err();
    let fresh = stream.alloc_zeros::<u32>(N as usize)?;
    stream.synchronize()?;
    if let Ok(Some(g)) = &recorded {
        g.launch()?;
        stream.synchronize()?;
    }
    let after = stream.clone_dtoh(&fresh)?;
    assert!(after.iter().all(|&v| v == 0), "a freed buffer was written by a replay ({r:?})");
    assert!(r.is_err(), "a graph call on a capturing stream was accepted");
    ctx.check_err()?;
    Ok(())
}

/// HOLE (found at compile time: this compiles): a `graph!` kernel's `c: Condition` argument
/// takes any `Condition` value, not only a name bound by `condition(..)` in the body. A body
/// without device control flow binds no handle, so the kernel is sent handle 0 (a builder's
/// condition here; one kept from an earlier `graph!` call works the same way). Must be refused
/// (at compile time, or at run time naming the statement).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graph_kernel_with_a_condition_from_outside_the_body_is_refused() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let v = stream.clone_htod(&[1u32])?;
    let c = GraphCache::new().builder(&stream).condition(1);
    let mut cache = GraphCache::new();
    let r = graph!(&mut cache, &stream, {
        k.set_nonzero(c, &v).launch((1, 1));
    });
    stream.synchronize()?;
    assert!(r.is_err(), "a kernel got a condition its graph does not have: {r:?}");
    Ok(())
}
