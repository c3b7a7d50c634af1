//! GPU tests of recorded captures (issue 30): a keyed `capture` statement of `graph!` is recorded
//! again only when its operands (address, length) or its key change, the cache keeps a few
//! recordings per statement (ping-pong buffers record twice, then never), and an `Exec` takes a
//! new recording with new borrows (`Released::update`). Each test compares the graph with the
//! same calls run eagerly ([`Mode::Eager`]) and with a host model, exactly (integer data).

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::sys::CUgraphExecUpdateResult;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{
    Capture, CaptureSlice, CaptureSliceMut, Error, GraphCache, Mode, ReleasedUpdateRefused,
    capture, graph,
};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// One step: a kernel node writes `x` from `seed`; a keyed capture statement (an explicit
/// kernel node `y = a·x + 1` and a memcpy `z = y`) reads `x` and writes `y` and `z`; a kernel
/// node reads `z` into `out`.
fn step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Arc<Ops>,
    (seed, a): (u32, u32),
    b: &mut Bufs,
) -> Result {
    let Bufs { x, y, z, out } = b;
    let ops: &Ops = k; // `graph!`'s kernel statements take the `kernels!` struct itself
    graph!(cache, stream, {
        ops.iota(N, 3, seed, &mut *x).launch(cfg());
        capture(&*x, &mut *y, &mut *z, key = (a, k.clone()), |s, (a, k), (x, mut y, mut z)| {
            s.kernel(k.affine(N, *a, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?;
            s.copy(&y, &mut z)
        });
        ops.mix(N, &*z, &mut *out).launch(cfg());
    })
}

/// The host model of [`step`]: `(y, out)`.
fn model(seed: u32, a: u32) -> (Vec<u32>, Vec<u32>) {
    let y = host::affine(&host::iota(N, 3, seed), a, 1);
    let out = host::mix(&y);
    (y, out)
}

struct Bufs {
    x: CudaSlice<u32>,
    y: CudaSlice<u32>,
    z: CudaSlice<u32>,
    out: CudaSlice<u32>,
}

fn bufs(stream: &Arc<CudaStream>) -> Result<Bufs> {
    let z = || stream.alloc_zeros::<u32>(LEN);
    Ok(Bufs { x: z()?, y: z()?, z: z()?, out: z()? })
}

#[track_caller]
fn check(stream: &Arc<CudaStream>, b: &Bufs, want: &(Vec<u32>, Vec<u32>), what: &str) {
    let get = |s: &CudaSlice<u32>| stream.clone_dtoh(s).expect("copy back");
    assert_same(&get(&b.y), &want.0, &format!("{what}: y"));
    assert_same(&get(&b.z), &want.0, &format!("{what}: z"));
    assert_same(&get(&b.out), &want.1, &format!("{what}: out"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_keyed_capture_unchanged_over_100_calls_records_once_and_matches_eager() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let (mut g, mut e) = (bufs(&stream)?, bufs(&stream)?);
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for call in 0..100u32 {
        // The seed changes every call (the first kernel node's scalar); the capture does not.
        let seed = 7 + call;
        step(&mut cache, &stream, &k, (seed, 5), &mut g)?;
        step(&mut eager, &stream, &k, (seed, 5), &mut e)?;
        if call % 10 == 0 || call == 99 {
            let want = model(seed, 5);
            check(&stream, &g, &want, &format!("graph, call {call}"));
            check(&stream, &e, &want, &format!("eager, call {call}"));
        }
    }
    let s = cache.stats();
    assert_eq!((s.captures, s.capture_reuses), (1, 99), "{s:?}");
    // Only the first kernel node changes: one node update per later call, the child graph
    // never sent again.
    assert_eq!((s.builds, s.node_updates, s.exec_updates, s.reinstantiations), (1, 99, 0, 0));
    assert_eq!(cache.recordings_kept(), 1);
    // With the seed fixed too, a call is unchanged: nothing recorded, validated or sent.
    for _ in 0..10 {
        step(&mut cache, &stream, &k, (500, 5), &mut g)?;
    }
    check(&stream, &g, &model(500, 5), "graph, fixed seed");
    let s = cache.stats();
    assert_eq!((s.captures, s.capture_reuses, s.node_updates), (1, 109, 100), "{s:?}");
    assert!(s.unchanged_calls >= 9, "{s:?}");
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_key_change_records_again_and_a_key_seen_before_reuses_its_recording() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let (mut g, mut e) = (bufs(&stream)?, bufs(&stream)?);
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    // a = 5 for 40 calls, 9 for 40, then 5 again for 20: recorded for 5, for 9, then reused.
    for call in 0..100u32 {
        let a = if (40..80).contains(&call) { 9 } else { 5 };
        let seed = 3 * call;
        step(&mut cache, &stream, &k, (seed, a), &mut g)?;
        step(&mut eager, &stream, &k, (seed, a), &mut e)?;
        let want = model(seed, a);
        check(&stream, &g, &want, &format!("graph, call {call} (a = {a})"));
        check(&stream, &e, &want, &format!("eager, call {call} (a = {a})"));
    }
    let s = cache.stats();
    assert_eq!((s.captures, s.capture_reuses), (2, 98), "{s:?}");
    // Another module object (a new key: the `Arc`'s identity) records again.
    let k2 = Arc::new(gpu()?.2);
    step(&mut cache, &stream, &k2, (1, 5), &mut g)?;
    check(&stream, &g, &model(1, 5), "graph, another module");
    assert_eq!(cache.stats().captures, 3);
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn operands_swapped_between_two_sets_record_twice_then_never_and_three_sets_thrash_two_kept()
-> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let mut sets = [bufs(&stream)?, bufs(&stream)?, bufs(&stream)?];
    let mut e = bufs(&stream)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let mut updates_after_round = 0;
    for call in 0..100u32 {
        // Fixed scalars: only the buffer set changes. Its outputs are cleared first, so a call
        // whose graph did not run shows zeros.
        let b = &mut sets[call as usize % 2];
        for o in [&mut b.y, &mut b.z, &mut b.out] {
            stream.memset_zeros(o)?;
        }
        step(&mut cache, &stream, &k, (11, 3), b)?;
        step(&mut eager, &stream, &k, (11, 3), &mut e)?;
        let want = model(11, 3);
        check(&stream, b, &want, &format!("graph, call {call}"));
        check(&stream, &e, &want, &format!("eager, call {call}"));
        if call == 4 {
            updates_after_round = cache.stats().node_updates;
        }
    }
    let s = cache.stats();
    assert_eq!((s.captures, s.capture_reuses), (2, 98), "{s:?}");
    // After the first rounds each buffer set has an exec of its own (the cache's exec memo)
    // holding its recording: nothing is sent any more.
    assert_eq!(s.node_updates, updates_after_round, "{s:?}");
    assert!(s.memo_hits >= 90, "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");

    // Three sets cycling with two recordings kept: each call's set is the least recently used
    // one, evicted by the call before, so every call records; results stay exact.
    cache.set_recordings_per_capture(2);
    let before = cache.stats().captures;
    for call in 0..30u32 {
        let b = &mut sets[call as usize % 3];
        step(&mut cache, &stream, &k, (call, 4), b)?;
        check(&stream, b, &model(call, 4), &format!("graph, 3 sets, call {call}"));
    }
    assert_eq!(cache.stats().captures - before, 30);
    assert_eq!(cache.recordings_kept(), 2);
    // Kept 0: a keyed statement records every call, as one without a key.
    cache.set_recordings_per_capture(0);
    assert_eq!(cache.recordings_kept(), 0);
    let before = cache.stats().captures;
    for call in 0..3u32 {
        step(&mut cache, &stream, &k, (call, 4), &mut sets[0])?;
    }
    check(&stream, &sets[0], &model(2, 4), "graph, none kept");
    assert_eq!(cache.stats().captures - before, 3);
    ctx.check_err()?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kept_recording_of_freed_buffers_is_never_replayed_on_new_ones() -> Result {
    // Buffers dropped between calls and reallocated at once: the driver hands out the same
    // addresses, and a recording is kept only by (address, length, context), so a new buffer at
    // a freed one's address takes its recording, which is exactly what recording it again
    // would give. A new buffer of another length is recorded again. Slow writers before the
    // capture show any ordering hole as wrong data.
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let ops: &Ops = &k;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let mut e = bufs(&stream)?;
    for call in 0..20u32 {
        let len = if call % 5 == 4 { LEN / 2 } else { LEN };
        let z = || stream.alloc_zeros::<u32>(len);
        let mut b = Bufs { x: z()?, y: z()?, z: z()?, out: z()? };
        let n = len as u32;
        graph!(&mut cache, &stream, {
            ops.slow_iota(n, 2000, 3, call, &mut b.x).launch(LaunchConfig::for_num_elems(n));
            capture(&b.x, &mut b.y, key = k.clone(), |s, k, (x, mut y)| {
                let n = x.len() as u32;
                let c = LaunchConfig::for_num_elems(n);
                s.kernel(k.affine(n, 5, 1, s.read(&x)?, s.write(&mut y)?).launch(c)).map(drop)
            });
        })?;
        graph!(&mut eager, &stream, {
            ops.slow_iota(n, 2000, 3, call, &mut e.x).launch(LaunchConfig::for_num_elems(n));
            capture(&e.x, &mut e.y, key = k.clone(), |s, k, (x, mut y)| {
                let n = x.len() as u32;
                let c = LaunchConfig::for_num_elems(n);
                s.kernel(k.affine(n, 5, 1, s.read(&x)?, s.write(&mut y)?).launch(c)).map(drop)
            });
        })?;
        let want = host::affine(&host::slow_iota(n, 2000, 3, call), 5, 1);
        assert_same(&stream.clone_dtoh(&b.y)?, &want, &format!("graph, call {call}"));
        assert_same(&stream.clone_dtoh(&e.y)?[..len], &want, &format!("eager, call {call}"));
        drop(b); // freed now; the next call's buffers reuse the addresses
    }
    let s = cache.stats();
    assert!(s.captures >= 2 && s.capture_reuses >= 1, "{s:?}");
    ctx.check_err()?;
    Ok(())
}

type Views<'s> = (CaptureSlice<'s, u32>, CaptureSliceMut<'s, u32>);

/// `y = a·x + 1` (one explicit kernel node); with `twice`, a second node `y = 3·x + 2` after
/// it: another topology.
fn affine(k: &Ops, a: u32, twice: bool, s: &Capture, (x, mut y): Views<'_>) -> Result {
    s.kernel(k.affine(N, a, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?;
    if twice {
        s.kernel(k.affine(N, 3, 2, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_exec_takes_a_new_recording_with_new_borrows_and_refuses_another_topology() -> Result {
    // NVIDIA's Jacobi sample, method 1: capture every iteration and update the exec.
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let xs = [stream.clone_htod(&host::iota(N, 3, 1))?, stream.clone_htod(&host::iota(N, 7, 2))?];
    let mut ys = [stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?];
    let mut e = stream.alloc_zeros::<u32>(LEN)?;
    let mut exec =
        capture(&stream, (&xs[0], &mut ys[0]), |s, v| affine(&k, 2, false, s, v))?.instantiate()?;
    for i in 0..10u32 {
        let (a, which) = (2 + i, i as usize % 2);
        let released = exec.release();
        let (x, y) = (&xs[which], &mut ys[which]);
        let k = &k;
        let graph = capture(&stream, (x, &mut *y), move |s, v| affine(k, a, false, s, v))?;
        exec = released.update(graph)?; // new scalar, and every other iteration new buffers
        exec.launch(&stream)?;
        // The same work eagerly, with cudarc's launch of the same kernel.
        let mut eager = GraphCache::new();
        eager.set_mode(Mode::Eager);
        graph!(&mut eager, &stream, {
            k.affine(N, a, 1, &xs[which], &mut e).launch(cfg());
        })?;
        let want = host::affine(&host::iota(N, [3, 7][which], [1, 2][which]), a, 1);
        let released = exec.release();
        assert_same(&stream.clone_dtoh(&ys[which])?, &want, &format!("exec, iteration {i}"));
        assert_same(&stream.clone_dtoh(&e)?, &want, &format!("eager, iteration {i}"));
        exec = released.bind((&xs[which], &mut ys[which]));
    }
    // Another topology: refused with the driver's reason; the exec and the graph come back.
    let released = exec.release();
    let graph = capture(&stream, (&xs[0], &mut ys[0]), |s, v| affine(&k, 4, true, s, v))?;
    let line = line!() + 1;
    let (released, graph) = match released.update(graph) {
        Err(ReleasedUpdateRefused {
            error: Error::GraphUpdateRefused { file, line: l, result, .. },
            released,
            graph,
        }) => {
            assert!(file.ends_with("recordings.rs"), "{file}");
            assert_eq!(l, line);
            assert_eq!(
                result,
                CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
            );
            (released, graph)
        }
        other => panic!("expected a refused update, got {other:?}"),
    };
    drop(graph);
    // The exec still runs its last recording (a = 11 on set 1): cleared, then launched.
    stream.memset_zeros(&mut ys[1])?;
    let mut exec = released.bind((&xs[1], &mut ys[1]));
    exec.launch(&stream)?;
    drop(exec);
    let want = host::affine(&host::iota(N, 7, 2), 11, 1);
    assert_same(&stream.clone_dtoh(&ys[1])?, &want, "after the refusal");
    ctx.check_err()?;
    Ok(())
}

/// Issue 30 item 5: two `capture` statements that use one cuBLAS handle (its workspace is
/// shared, and no listed buffer shows it) never run concurrently, though their listed buffers
/// are disjoint: every capture statement is ordered after the earlier ones of its block. The
/// first does a large GEMM between two time stamps, the second a small one between two; the
/// second's first stamp comes after the first's last. Both GEMMs are compared with the same
/// body run eagerly, bit for bit.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_captures_on_one_cublas_handle_never_overlap() -> Result {
    use cudagraph::cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as cublas_sys};
    use cudagraph::cudarc::driver::{DevicePtr, PushKernelArg};
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let workspace = stream.alloc_zeros::<u8>(32 << 20)?;
    let blas = Arc::new(CudaBlas::new(stream.clone()).expect("cublasCreate"));
    {
        let (ptr, _sync) = workspace.device_ptr(&stream);
        // SAFETY: device memory of the handle's context, 32 MiB, alive longer than the handle
        // and the caches (declared before them).
        let status =
            unsafe { cublas_sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, 32 << 20) };
        assert_eq!(status, cublas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
    }
    let gemm = |n: usize| {
        let op = cublas_sys::cublasOperation_t::CUBLAS_OP_N;
        let n = n as i32;
        GemmConfig {
            transa: op,
            transb: op,
            m: n,
            n,
            k: n,
            alpha: 1.0f32,
            lda: n,
            ldb: n,
            beta: 0.0f32,
            ldc: n,
        }
    };
    let (big, small) = (2048usize, 64usize);
    let vals = |n: usize, seed: u32| -> Vec<f32> {
        (0..n * n).map(|i| ((i as u32).wrapping_mul(seed) % 17) as f32 / 16.0 - 0.5).collect()
    };
    let (wa, xa) = (stream.clone_htod(&vals(big, 7))?, stream.clone_htod(&vals(big, 11))?);
    let (wb, xb) = (stream.clone_htod(&vals(small, 13))?, stream.clone_htod(&vals(small, 5))?);
    type Outs = (CudaSlice<f32>, CudaSlice<f32>, [CudaSlice<u64>; 4]);
    let outs = || -> Result<Outs> {
        Ok((
            stream.alloc_zeros::<f32>(big * big)?,
            stream.alloc_zeros::<f32>(small * small)?,
            std::array::from_fn(|_| stream.alloc_zeros::<u64>(1).expect("alloc")),
        ))
    };
    let one = LaunchConfig::for_num_elems(1);
    let step = |cache: &mut GraphCache, (ya, yb, t): &mut Outs| -> Result {
        let [t0, t1, t2, t3] = t;
        graph!(cache, &stream, {
            // SAFETY (every `unsafe` below): the stamps and the GEMM run on the joined stream and
            // touch only the listed views and cuBLAS's workspace (set above, alive longer than
            // the caches); the sizes are the buffers'.
            capture(&wa, &xa, &mut *ya, &mut *t0, &mut *t1, |s, (w, x, mut y, mut t0, mut t1)| {
                let st = unsafe { s.stream() };
                common::launch!(st, k, "stamp", one; unsafe { t0.as_cuda_view_mut() })?;
                unsafe { blas.gemm(gemm(big), &w, &x, &mut y) }?;
                common::launch!(st, k, "stamp", one; unsafe { t1.as_cuda_view_mut() })?;
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            });
            capture(
                &wb,
                &xb,
                &mut *yb,
                &mut *t2,
                &mut *t3,
                key = (k.clone(), blas.clone()),
                |s, (k, blas), (w, x, mut y, mut t2, mut t3)| {
                    let st = unsafe { s.stream() };
                    let one = LaunchConfig::for_num_elems(1);
                    common::launch!(st, k, "stamp", one; unsafe { t2.as_cuda_view_mut() })?;
                    let op = cublas_sys::cublasOperation_t::CUBLAS_OP_N;
                    let n = 64;
                    let cfg = GemmConfig {
                        transa: op,
                        transb: op,
                        m: n,
                        n,
                        k: n,
                        alpha: 1.0f32,
                        lda: n,
                        ldb: n,
                        beta: 0.0f32,
                        ldc: n,
                    };
                    unsafe { blas.gemm(cfg, &w, &x, &mut y) }?;
                    common::launch!(st, k, "stamp", one; unsafe { t3.as_cuda_view_mut() })?;
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                },
            );
        })?;
        Ok(())
    };
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let (mut g, mut e) = (outs()?, outs()?);
    for call in 0..5 {
        step(&mut cache, &mut g)?;
        step(&mut eager, &mut e)?;
        let stamp = |t: &CudaSlice<u64>| stream.clone_dtoh(t).expect("copy back")[0];
        let [a0, a1, b0, b1] = [0, 1, 2, 3].map(|i| stamp(&g.2[i]));
        assert!(a0 < a1 && b0 < b1, "call {call}: stamps {a0} {a1} {b0} {b1}");
        assert!(
            b0 >= a1,
            "call {call}: the second capture started {} ns before the first ended",
            a1 - b0
        );
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_same(&bits(stream.clone_dtoh(&g.0)?), &bits(stream.clone_dtoh(&e.0)?), "large GEMM");
        assert_same(&bits(stream.clone_dtoh(&g.1)?), &bits(stream.clone_dtoh(&e.1)?), "small GEMM");
    }
    assert_eq!(cache.stats().capture_reuses, 4, "{:?}", cache.stats());
    ctx.check_err()?;
    Ok(())
}
