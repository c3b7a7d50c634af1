//! Multi-GPU tests of `graph!` (issue 19): one graph whose nodes run on two devices, peer copies
//! between them, one cache used from streams of both devices, and an NCCL all-reduce captured
//! into the graph. Every graph is compared with the same statements run eagerly (`eager!`, or
//! NCCL's own calls), exactly (integers), and with a host model.
//!
//! They need two CUDA GPUs: each is `#[ignore = "needs two CUDA GPUs"]`, and run with
//! `--ignored` on a machine with fewer it fails with "needs two GPUs, found N" (it never skips).
//! Built only with the `multi-gpu` feature of `cudagraph-tests` (the NCCL test also needs
//! `nccl`), so that the single-GPU test run does not include them:
//!
//! ```text
//! cargo test -p cudagraph-tests --features multi-gpu --test multi_gpu -- --ignored
//! cargo test -p cudagraph-tests --features nccl --test multi_gpu -- --ignored
//! ```

use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaContext, CudaStream, LaunchConfig};
use cudagraph::{GraphCache, Mode, graph};

mod common;
use common::{Ops, Result, SOURCE, assert_same, host, serial};

/// Elements per buffer: more than one block, and a partial last block.
const N: u32 = 3000;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// One device's context, a new stream on it and the test kernels loaded there.
type Device = (Arc<CudaContext>, Arc<CudaStream>, Ops);

/// Devices 0 and 1, or a panic saying how many GPUs there are: a multi-GPU test run on one
/// GPU fails, it does not skip.
fn two_gpus() -> Result<[Device; 2]> {
    assert!(
        cudagraph::driver_available(),
        "no CUDA driver: libcuda could not be loaded; the multi-GPU tests need two NVIDIA GPUs"
    );
    let found = CudaContext::device_count()?;
    assert!(found >= 2, "needs two GPUs, found {found}");
    let ptx = cudagraph::cudarc::nvrtc::compile_ptx(SOURCE)?;
    let device = |ordinal: usize| -> Result<Device> {
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.new_stream()?;
        // SAFETY: the declarations of `common::Ops` match `kernels/ops.cu`, whose kernels stay
        // within their buffers.
        let k = unsafe { Ops::load(&ctx, ptx.clone()) }?;
        Ok((ctx, stream, k))
    };
    Ok([device(0)?, device(1)?])
}

/// A chain over two devices: a kernel of device 0, a peer copy to device 1, a kernel of
/// device 1 (launched from device 0's stream: its node runs on device 1), a peer copy back and
/// a kernel of device 0; three calls with other scalars (per-node updates, no rebuild),
/// against the same statements run eagerly and a host model.
#[test]
#[ignore = "needs two CUDA GPUs"]
fn a_two_device_chain_with_peer_copies_matches_eager() -> Result {
    let _serial = serial();
    let [(_, s0, k0), (_, s1, k1)] = two_gpus()?;
    let n = N as usize;
    let mut a0 = s0.alloc_zeros::<u32>(n)?;
    let mut b0 = s0.alloc_zeros::<u32>(n)?;
    let mut c0 = s0.alloc_zeros::<u32>(n)?;
    let mut a1 = s1.alloc_zeros::<u32>(n)?;
    let mut b1 = s1.alloc_zeros::<u32>(n)?;
    let mut cache = GraphCache::new();
    let mut oracle = GraphCache::new();
    oracle.set_mode(Mode::Eager);
    for step in 0..3u32 {
        for cache in [&mut cache, &mut oracle] {
            graph!(cache, &s0, {
                k0.iota(N, 3 + step, 1, &mut a0).launch(cfg());
                copy(&a0, &mut a1);
                k1.affine(N, 5, 7 + step, &a1, &mut b1).launch(cfg());
                copy(&b1, &mut b0);
                k0.affine(N, 2, 1, &b0, &mut c0).launch(cfg());
            })?;
            let want = host::affine(&host::affine(&host::iota(N, 3 + step, 1), 5, 7 + step), 2, 1);
            assert_same(&s0.clone_dtoh(&c0)?, &want, "c0 after the two-device chain");
            assert_same(
                &s1.clone_dtoh(&b1)?,
                &host::affine(&host::iota(N, 3 + step, 1), 5, 7 + step),
                "b1 on device 1",
            );
            s0.memset_zeros(&mut c0)?;
            s1.memset_zeros(&mut b1)?;
        }
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 1, 3), "{s:?}");
    assert_eq!(s.peer_enables, 1, "peer access enabled once for the pair: {s:?}");
    assert_eq!(s.reinstantiations, 0, "{s:?}");
    assert_eq!(oracle.stats().eager_calls, 3);
    Ok(())
}

/// One cache whose call site runs from a stream of device 0 and then of device 1, with
/// buffers of both devices swapped between calls (pointer updates): one variant per launch
/// context, each spanning both devices, every result against eager.
#[test]
#[ignore = "needs two CUDA GPUs"]
fn a_cache_used_on_both_devices_matches_eager() -> Result {
    let _serial = serial();
    let [(_, s0, k0), (_, s1, k1)] = two_gpus()?;
    let n = N as usize;
    let (mut x0, mut y0) = (s0.alloc_zeros::<u32>(n)?, s0.alloc_zeros::<u32>(n)?);
    let (mut x1, mut y1) = (s1.alloc_zeros::<u32>(n)?, s1.alloc_zeros::<u32>(n)?);
    let mut out = s0.alloc_zeros::<u32>(n)?;
    let mut cache = GraphCache::new();
    let mut oracle = GraphCache::new();
    oracle.set_mode(Mode::Eager);
    for step in 0..6u32 {
        let stream = if step % 2 == 0 { &s0 } else { &s1 };
        for c in [&mut cache, &mut oracle] {
            graph!(c, stream, {
                k1.iota(N, step + 1, 2, &mut x1).launch(cfg());
                copy(&x1, &mut x0);
                k0.affine(N, 3, step, &x0, &mut y0).launch(cfg());
                copy(&y0, &mut y1);
                k1.affine(N, 1, 1, &y1, &mut x1).launch(cfg());
                copy(&x1, &mut out);
            })?;
            let want = host::affine(&host::affine(&host::iota(N, step + 1, 2), 3, step), 1, 1);
            assert_same(&s0.clone_dtoh(&out)?, &want, "out of the two-device chain");
            s0.memset_zeros(&mut out)?;
        }
        // Other buffers next call: pointer updates of every node.
        std::mem::swap(&mut x0, &mut y0);
        std::mem::swap(&mut x1, &mut y1);
    }
    let s = cache.stats();
    assert_eq!(cache.len(), 2, "one variant per launch context: {s:?}");
    assert_eq!((s.builds, s.launches, s.reinstantiations), (2, 6, 0), "{s:?}");
    Ok(())
}

/// A builder kernel of a `kernels!` struct loaded on device 1, added to a builder on device 0's
/// stream: the builder's kernels run in its stream's context, so `launch` refuses it
/// (`InvalidNode`, naming the kernel and the line), in graph and eager mode, nothing enqueued:
/// the buffer keeps its contents.
#[test]
#[ignore = "needs two CUDA GPUs"]
fn a_builder_kernel_loaded_on_another_device_is_refused() -> Result {
    let _serial = serial();
    let [(_, s0, _), (_, _, k1)] = two_gpus()?;
    let mut x0 = s0.clone_htod(&host::iota(N, 5, 1))?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut g = cache.builder(&s0);
        let w = g.write(&mut x0);
        let line = line!() + 1;
        g.kernel(k1.iota(N, 9, 9, w).launch(cfg()));
        let e = g.launch().expect_err("a kernel of device 1 in a builder of device 0");
        match &e {
            cudagraph::Error::InvalidNode { site, why } => {
                assert_eq!((site.label, site.line), ("iota", line), "{e}");
                assert!(why.contains("another context"), "{e}");
            }
            other => panic!("{mode:?}: {other}"),
        }
        assert_same(&s0.clone_dtoh(&x0)?, &host::iota(N, 5, 1), "nothing ran");
    }
    Ok(())
}

/// An all-reduce (sum) over both devices, captured into `graph!` with the capture statement
/// (NCCL in one process driving both GPUs: `Comm::from_devices`, a group of one call per
/// device), the reduced buffers swapped for others between calls; against the same work run
/// with NCCL's own eager calls, and the graph's eager mode.
#[cfg(feature = "nccl")]
#[test]
#[ignore = "needs two CUDA GPUs"]
fn an_all_reduce_captured_into_the_graph_matches_eager_nccl() -> Result {
    use cudarc::nccl::{Comm, ReduceOp, group_end, group_start};
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let nccl = |e: cudarc::nccl::result::NcclError| -> BoxError { format!("NCCL: {e:?}").into() };
    let _serial = serial();
    let [(_, s0, k0), (_, s1, k1)] = two_gpus()?;
    let comms = Comm::from_devices(vec![s0.clone(), s1.clone()])
        .map_err(|e| cudagraph::Error::Capture { file: file!(), line: line!(), source: nccl(e) })?;
    let n = N as usize;
    let (mut x0, mut y0) = (s0.alloc_zeros::<u32>(n)?, s0.alloc_zeros::<u32>(n)?);
    let (mut x1, mut y1) = (s1.alloc_zeros::<u32>(n)?, s1.alloc_zeros::<u32>(n)?);
    let (mut e0, mut e1) = (s0.alloc_zeros::<u32>(n)?, s1.alloc_zeros::<u32>(n)?);
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for step in 0..4u32 {
        for c in [&mut cache, &mut eager] {
            graph!(c, &s0, {
                k0.iota(N, step + 1, 5, &mut x0).launch(cfg());
                k1.iota(N, 2, step, &mut x1).launch(cfg());
                capture(&mut x0, &mut x1, |s, (mut v0, mut v1)| {
                    // Device 1's stream joins the capture, the group's collectives are
                    // enqueued at `group_end`, then that stream joins back.
                    // SAFETY: the call's stream (comms[0]'s, joined by `s.stream()`) and `s1`
                    // (comms[1]'s) carry only NCCL's all-reduce of the listed views until the
                    // closure returns; `s1` is joined back below.
                    unsafe {
                        s.stream();
                        s.fork(&s1)?;
                    }
                    group_start().map_err(nccl)?;
                    comms[0].all_reduce_in_place(&mut v0, &ReduceOp::Sum).map_err(nccl)?;
                    comms[1].all_reduce_in_place(&mut v1, &ReduceOp::Sum).map_err(nccl)?;
                    group_end().map_err(nccl)?;
                    s.join(&s1)?;
                    Ok::<(), BoxError>(())
                });
                k1.affine(N, 3, 1, &x1, &mut y1).launch(cfg());
            })?;
            // The same with NCCL's own eager calls.
            cudagraph::eager!(&s0, {
                k0.iota(N, step + 1, 5, &mut e0).launch(cfg());
            })?;
            cudagraph::eager!(&s1, {
                k1.iota(N, 2, step, &mut e1).launch(cfg());
            })?;
            group_start().map_err(nccl).unwrap();
            comms[0].all_reduce_in_place(&mut e0, &ReduceOp::Sum).map_err(nccl).unwrap();
            comms[1].all_reduce_in_place(&mut e1, &ReduceOp::Sum).map_err(nccl).unwrap();
            group_end().map_err(nccl).unwrap();
            let sum: Vec<u32> = host::iota(N, step + 1, 5)
                .iter()
                .zip(host::iota(N, 2, step))
                .map(|(a, b)| a.wrapping_add(b))
                .collect();
            let (g0, g1) = (s0.clone_dtoh(&x0)?, s1.clone_dtoh(&x1)?);
            assert_same(&s0.clone_dtoh(&e0)?, &sum, "eager NCCL all-reduce on device 0");
            assert_same(&s1.clone_dtoh(&e1)?, &sum, "eager NCCL all-reduce on device 1");
            assert_same(&g0, &sum, "graph all-reduce on device 0");
            assert_same(&g1, &sum, "graph all-reduce on device 1");
            assert_same(&s1.clone_dtoh(&y1)?, &host::affine(&sum, 3, 1), "after the all-reduce");
        }
        // The reduced buffers are others next call (pointer swap): the capture is recorded
        // again on every call, the kernels' pointers updated.
        std::mem::swap(&mut x0, &mut y0);
        std::mem::swap(&mut x1, &mut y1);
        s0.memset_zeros(&mut y0)?;
        s1.memset_zeros(&mut y1)?;
    }
    let s = cache.stats();
    assert_eq!((s.launches, s.captures, s.reinstantiations), (4, 4, 0), "{s:?}");
    Ok(())
}
