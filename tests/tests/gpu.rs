//! GPU integration tests of `graph!`.
//!
//! Every graph is compared with the same work launched eagerly on a stream with cudarc's own
//! API (`launch_builder`, `memcpy_*`, `memset_zeros`), and the integer ones also with a host
//! model of the kernels: integers with `assert_eq!`-exact comparisons, f32 bit for bit. The
//! kernels are `kernels/ops.cu`, compiled at run time by NVRTC.
//!
//! Each GPU test is `#[ignore = "needs a CUDA GPU"]` so that CI without a GPU passes; on a GPU
//! machine run `cargo test -p cudagraph-tests --test gpu -- --ignored` (or `.devbin/run.sh`).
//! A GPU test never skips silently: without a CUDA driver it panics and says so.
//! `plans_of_this_file` needs no GPU and runs everywhere.

use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::{Error, GraphCache, LaunchDims, NodeKind, graph};

mod common;
use common::{Ops, Result, assert_same, gpu, host, launch};

/// This file, to find the line and column of a statement an error names.
const THIS_FILE: &str = include_str!("gpu.rs");

/// 1-D launch configuration of `grid` blocks of `block` threads.
fn dims(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
}

/// The bit patterns of f32 values, for bit-exact comparisons.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// 1-based line and column of the one line of this file whose trimmed text is `stmt`.
fn statement_position(stmt: &str) -> (u32, u32) {
    let hits: Vec<(usize, &str)> =
        THIS_FILE.lines().enumerate().filter(|(_, l)| l.trim() == stmt).collect();
    assert_eq!(hits.len(), 1, "`{stmt}` must be on exactly one line of gpu.rs");
    let (i, l) = hits[0];
    let column = l.len() - l.trim_start().len() + 1;
    (i as u32 + 1, column as u32)
}

// ---------------------------------------------------------------------------------------------
// 1. A chain of dependent kernels.
// ---------------------------------------------------------------------------------------------

/// The `i`-th odd number from 3. A function rather than `2 * i + 3` inside the unrolled `for`
/// of `graph!`: there `i` becomes the literal `0`, and clippy denies `2 * 0` (`erasing_op`).
fn odd(i: u32) -> u32 {
    2 * i + 3
}

/// Eight kernels, each depending on the previous one (read after write, then three in-place
/// writes of one buffer from an unrolled `for`), over a size that is not a multiple of the
/// block. Three calls with a changing seed; each compared with eager and host.
#[test]
#[ignore = "needs a CUDA GPU"]
fn chain_of_dependent_kernels() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = (1 << 20) + 37;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let z = || stream.alloc_zeros::<u32>(len);
    let (mut b0, mut b1, mut b2, mut b3, mut b4) = (z()?, z()?, z()?, z()?, z()?);
    let (mut e0, mut e1, mut e2, mut e3, mut e4) = (z()?, z()?, z()?, z()?, z()?);
    let mut cache = GraphCache::new();
    for seed in [1u32, 2, 3] {
        graph!(&mut cache, &stream, {
            k.iota(n, 3, seed, &mut b0).launch(cfg);
            k.affine(n, 5, 7, &b0, &mut b1).launch(cfg);
            k.mix(n, &b1, &mut b2).launch(cfg);
            k.affine(n, 0x9e37, 11, &b2, &mut b3).launch(cfg);
            k.mix(n, &b3, &mut b4).launch(cfg);
            for i in 0..3 {
                k.affine_inplace(n, odd(i), i, &mut b4).launch(cfg);
            }
        })?;

        launch!(stream, k, "iota", cfg; &n, &3u32, &seed, &mut e0)?;
        launch!(stream, k, "affine", cfg; &n, &5u32, &7u32, &e0, &mut e1)?;
        launch!(stream, k, "mix", cfg; &n, &e1, &mut e2)?;
        launch!(stream, k, "affine", cfg; &n, &0x9e37u32, &11u32, &e2, &mut e3)?;
        launch!(stream, k, "mix", cfg; &n, &e3, &mut e4)?;
        for i in 0..3u32 {
            launch!(stream, k, "affine_inplace", cfg; &n, &odd(i), &i, &mut e4)?;
        }

        let mut want = host::mix(&host::affine(
            &host::mix(&host::affine(&host::iota(n, 3, seed), 5, 7)),
            0x9e37,
            11,
        ));
        for i in 0..3u32 {
            host::affine_inplace(&mut want, odd(i), i);
        }
        let got = stream.clone_dtoh(&b4)?;
        assert_same(&got, &stream.clone_dtoh(&e4)?, &format!("chain, seed {seed}: graph vs eager"));
        assert_same(&got, &want, &format!("chain, seed {seed}: graph vs host model"));
        assert_same(&stream.clone_dtoh(&b2)?, &stream.clone_dtoh(&e2)?, "chain: middle buffer");
    }
    let plan = cache.plan().expect("the cache ran a graph");
    assert_eq!(plan.nodes.len(), 8);
    assert_eq!(plan.edges(), (0..7).map(|i| (i, i + 1)).collect::<Vec<_>>(), "a chain");
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches, s.hits), (1, 1, 3, 2), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. Fan-out / fan-in, with struct fields as places.
// ---------------------------------------------------------------------------------------------

/// Buffers of the fan-out/fan-in graph, named by field (`g.src`, `g.a`, …).
struct Fan {
    src: CudaSlice<u32>,
    a: CudaSlice<u32>,
    b: CudaSlice<u32>,
    c: CudaSlice<u32>,
    out: CudaSlice<u32>,
}

impl Fan {
    fn new(stream: &Arc<CudaStream>, len: usize) -> Result<Fan> {
        Ok(Fan {
            src: stream.alloc_zeros(len)?,
            a: stream.alloc_zeros(len)?,
            b: stream.alloc_zeros(len)?,
            c: stream.alloc_zeros(len)?,
            out: stream.alloc_zeros(len)?,
        })
    }
}

/// One producer, three independent consumers writing different buffers, one kernel reading
/// all three. The edges must be exactly producer→each consumer→combiner.
#[test]
#[ignore = "needs a CUDA GPU"]
fn fan_out_fan_in() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 777_777;
    let len = n as usize;
    let (grid, block) = (n.div_ceil(256), 256);
    let mut g = Fan::new(&stream, len)?;
    let mut e = Fan::new(&stream, len)?;
    let mut cache = GraphCache::new();
    for seed in [3u32, 1000, 0xffff_fff0] {
        graph!(&mut cache, &stream, {
            let produce = k.iota(n, 7, seed, &mut g.src).launch((grid, block));
            k.affine(n, 3, 1, &g.src, &mut g.a).launch((grid, block));
            k.mix(n, &g.src, &mut g.b).launch((grid, block));
            k.affine(n, 0xdead_beef, 5, &g.src, &mut g.c).launch((grid, block));
            k.combine3(n, &g.a, &g.b, &g.c, &mut g.out).launch((grid, block)).after(produce);
        })?;

        let cfg = dims(grid, block);
        launch!(stream, k, "iota", cfg; &n, &7u32, &seed, &mut e.src)?;
        launch!(stream, k, "affine", cfg; &n, &3u32, &1u32, &e.src, &mut e.a)?;
        launch!(stream, k, "mix", cfg; &n, &e.src, &mut e.b)?;
        launch!(stream, k, "affine", cfg; &n, &0xdead_beefu32, &5u32, &e.src, &mut e.c)?;
        launch!(stream, k, "combine3", cfg; &n, &e.a, &e.b, &e.c, &mut e.out)?;

        let src = host::iota(n, 7, seed);
        let want = host::combine3(
            &host::affine(&src, 3, 1),
            &host::mix(&src),
            &host::affine(&src, 0xdead_beef, 5),
        );
        let got = stream.clone_dtoh(&g.out)?;
        assert_same(
            &got,
            &stream.clone_dtoh(&e.out)?,
            &format!("fan-in, seed {seed}: graph vs eager"),
        );
        assert_same(&got, &want, &format!("fan-in, seed {seed}: graph vs host model"));
    }
    let plan = cache.plan().expect("the cache ran a graph");
    let mut edges = plan.edges();
    edges.sort_unstable();
    // The explicit `.after(produce)` is implied by the data edges, so the reduction drops it.
    assert_eq!(edges, [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)]);
    assert_eq!(plan.places, ["g.src", "g.a", "g.b", "g.c", "g.out"]);
    let s = cache.stats();
    assert_eq!((s.builds, s.launches, s.hits), (1, 3, 2), "{s:?}");
    // Only the producer's seed changes.
    assert_eq!((s.node_updates, s.nodes_unchanged), (2, 8), "{s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. Copies with pinned host memory, and device-to-device.
// ---------------------------------------------------------------------------------------------

/// Pinned host → device copy, a kernel, device → device copy, a kernel, device → pinned host
/// copy. The host→device copy waits behind a slow kernel (`.after`), and the host overwrites the
/// pinned input right after `graph!` returns: cudarc's event (recorded by the graph launch) must
/// make that write wait until the copy ran, so the result is still that of the old input.
#[test]
#[ignore = "needs a CUDA GPU"]
fn copies_with_pinned_host_memory() -> Result {
    let (ctx, stream, k) = gpu()?;
    let n: u32 = (1 << 16) + 3;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let spins = 1u32 << 16;
    // SAFETY: every element is written through `as_mut_slice` / a copy before it is read.
    let (mut pin_in, mut pin_out) =
        unsafe { (ctx.alloc_pinned::<u32>(len)?, ctx.alloc_pinned::<u32>(len)?) };
    // SAFETY: as above.
    let (mut e_pin_in, mut e_pin_out) =
        unsafe { (ctx.alloc_pinned::<u32>(len)?, ctx.alloc_pinned::<u32>(len)?) };
    let z = || stream.alloc_zeros::<u32>(len);
    let (mut d_slow, mut d_in, mut d_mid, mut d_copy, mut d_out) = (z()?, z()?, z()?, z()?, z()?);
    let (mut e_slow, mut e_in, mut e_mid, mut e_copy, mut e_out) = (z()?, z()?, z()?, z()?, z()?);

    let mut cache = GraphCache::new();
    for round in 0..3u32 {
        let input: Vec<u32> =
            (0..n).map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(round)).collect();
        pin_in.as_mut_slice()?.copy_from_slice(&input);
        graph!(&mut cache, &stream, {
            let slow = k.slow_iota(n, spins, 1, round, &mut d_slow).launch(cfg);
            copy(&pin_in, &mut d_in).after(slow);
            k.affine(n, 3, round, &d_in, &mut d_mid).launch(cfg);
            copy(&d_mid, &mut d_copy);
            k.mix(n, &d_copy, &mut d_out).launch(cfg);
            copy(&d_out, &mut pin_out);
        })?;
        // Must wait for the graph's copy out of `pin_in` (cudarc's event on `pin_in`).
        pin_in.as_mut_slice()?.fill(0xdead_beef);
        // Must wait for the graph's copy into `pin_out`.
        let got = pin_out.as_slice()?.to_vec();

        e_pin_in.as_mut_slice()?.copy_from_slice(&input);
        launch!(stream, k, "slow_iota", cfg; &n, &spins, &1u32, &round, &mut e_slow)?;
        stream.memcpy_htod(&e_pin_in, &mut e_in)?;
        launch!(stream, k, "affine", cfg; &n, &3u32, &round, &e_in, &mut e_mid)?;
        stream.memcpy_dtod(&e_mid, &mut e_copy)?;
        launch!(stream, k, "mix", cfg; &n, &e_copy, &mut e_out)?;
        stream.memcpy_dtoh(&e_out, &mut e_pin_out)?;
        let want = e_pin_out.as_slice()?.to_vec();

        assert_same(&got, &want, &format!("round {round}: graph vs eager"));
        assert_same(
            &got,
            &host::mix(&host::affine(&input, 3, round)),
            &format!("round {round}: graph vs host"),
        );
        assert_same(
            &stream.clone_dtoh(&d_copy)?,
            &stream.clone_dtoh(&d_mid)?,
            &format!("round {round}: device-to-device copy"),
        );
        assert_same(
            &stream.clone_dtoh(&d_in)?,
            &input,
            &format!("round {round}: host-to-device copy"),
        );
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 1, 3), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    let kinds: Vec<NodeKind> = cache.plan().unwrap().nodes.iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds,
        [
            NodeKind::Kernel("slow_iota"),
            NodeKind::Memcpy,
            NodeKind::Kernel("affine"),
            NodeKind::Memcpy,
            NodeKind::Kernel("mix"),
            NodeKind::Memcpy
        ]
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 4. memset and zero, then a kernel that reads the buffer.
// ---------------------------------------------------------------------------------------------

/// The buffers of the memset test: each memset/zero target, and the output of the kernel that
/// reads it.
struct Memsets {
    w: CudaSlice<u32>,
    z: CudaSlice<u32>,
    bytes: CudaSlice<u8>,
    zbytes: CudaSlice<u8>,
    halves: CudaSlice<u16>,
    q: CudaSlice<i32>,
    f: CudaSlice<f32>,
    out_w: CudaSlice<u32>,
    out_z: CudaSlice<u32>,
    out_b: CudaSlice<u32>,
    out_zb: CudaSlice<u32>,
    out_h: CudaSlice<u32>,
    out_q: CudaSlice<i32>,
    out_f: CudaSlice<f32>,
}

impl Memsets {
    /// Targets start non-zero, so that a memset or zero that did not run shows.
    fn new(stream: &Arc<CudaStream>, n: u32) -> Result<Memsets> {
        let len = n as usize;
        let u8s: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
        let u16s: Vec<u16> = (0..len).map(|i| (i % 65_000) as u16 + 1).collect();
        let i32s: Vec<i32> = (0..len).map(|i| (i % 999) as i32 - 499).collect();
        let f32s: Vec<f32> = (0..len).map(|i| i as f32 + 0.25).collect();
        Ok(Memsets {
            w: stream.clone_htod(&host::iota(n, 0x0101, 0x55))?,
            z: stream.clone_htod(&host::iota(n, 3, 1))?,
            bytes: stream.clone_htod(&u8s)?,
            zbytes: stream.clone_htod(&u8s)?,
            halves: stream.clone_htod(&u16s)?,
            q: stream.clone_htod(&i32s)?,
            f: stream.clone_htod(&f32s)?,
            out_w: stream.alloc_zeros(len)?,
            out_z: stream.alloc_zeros(len)?,
            out_b: stream.alloc_zeros(len)?,
            out_zb: stream.alloc_zeros(len)?,
            out_h: stream.alloc_zeros(len)?,
            out_q: stream.alloc_zeros(len)?,
            out_f: stream.alloc_zeros(len)?,
        })
    }
}

/// `memset` of 4-byte (u32, i32, f32), 2-byte (u16) and 1-byte (u8) elements and `zero` of u32
/// and of an odd number of bytes, each followed by a kernel that reads the buffer. Three calls;
/// the u16 value changes per call (a memset node update), the rest does not.
#[test]
#[ignore = "needs a CUDA GPU"]
fn memset_and_zero_then_read() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 100_003; // odd: `zero` of the u8 buffer must use 1-byte elements
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut g = Memsets::new(&stream, n)?;
    let mut e = Memsets::new(&stream, n)?;
    let mut cache = GraphCache::new();
    let fills = [0x1234u16, 0xbeef, 0x0001];
    for (call, fill16) in fills.into_iter().enumerate() {
        graph!(&mut cache, &stream, {
            let m = memset(&mut g.w, 7u32);
            k.affine(n, 3, 1, &g.w, &mut g.out_w).launch(cfg);
            zero(&mut g.z).after(m);
            k.mix(n, &g.z, &mut g.out_z).launch(cfg);
            memset(&mut g.bytes, 0xabu8);
            k.widen_u8(n, &g.bytes, &mut g.out_b).launch(cfg);
            zero(&mut g.zbytes);
            k.widen_u8(n, &g.zbytes, &mut g.out_zb).launch(cfg);
            memset(&mut g.halves, fill16);
            k.widen_u16(n, &g.halves, &mut g.out_h).launch(cfg);
            memset(&mut g.q, -5i32);
            k.scale_sub_i32(n, 2, &g.q, &mut g.out_q).launch(cfg);
            memset(&mut g.f, 1.5f32);
            k.axpy_f32(n, 2.0, &g.f, &mut g.out_f).launch(cfg);
        })?;

        // cudarc's safe API has no memset of a non-zero value: copy the value in instead.
        stream.memcpy_htod(&vec![7u32; len], &mut e.w)?;
        launch!(stream, k, "affine", cfg; &n, &3u32, &1u32, &e.w, &mut e.out_w)?;
        stream.memset_zeros(&mut e.z)?;
        launch!(stream, k, "mix", cfg; &n, &e.z, &mut e.out_z)?;
        stream.memcpy_htod(&vec![0xabu8; len], &mut e.bytes)?;
        launch!(stream, k, "widen_u8", cfg; &n, &e.bytes, &mut e.out_b)?;
        stream.memset_zeros(&mut e.zbytes)?;
        launch!(stream, k, "widen_u8", cfg; &n, &e.zbytes, &mut e.out_zb)?;
        stream.memcpy_htod(&vec![fill16; len], &mut e.halves)?;
        launch!(stream, k, "widen_u16", cfg; &n, &e.halves, &mut e.out_h)?;
        stream.memcpy_htod(&vec![-5i32; len], &mut e.q)?;
        launch!(stream, k, "scale_sub_i32", cfg; &n, &2i32, &e.q, &mut e.out_q)?;
        stream.memcpy_htod(&vec![1.5f32; len], &mut e.f)?;
        launch!(stream, k, "axpy_f32", cfg; &n, &2.0f32, &e.f, &mut e.out_f)?;

        let c = format!("call {call}");
        let d = |s: &CudaSlice<u32>| stream.clone_dtoh(s);
        assert_same(&d(&g.out_w)?, &d(&e.out_w)?, &format!("{c}: memset u32 (graph vs eager)"));
        assert_same(&d(&g.out_w)?, &vec![22; len], &format!("{c}: memset u32 then affine"));
        assert_same(&d(&g.w)?, &vec![7; len], &format!("{c}: memset u32"));
        assert_same(&d(&g.out_z)?, &d(&e.out_z)?, &format!("{c}: zero u32 (graph vs eager)"));
        assert_same(&d(&g.out_z)?, &vec![0; len], &format!("{c}: zero u32 then mix"));
        assert_same(&d(&g.out_b)?, &d(&e.out_b)?, &format!("{c}: memset u8 (graph vs eager)"));
        assert_same(&d(&g.out_b)?, &host::widen_u8(&vec![0xab; len]), &format!("{c}: memset u8"));
        assert_same(&d(&g.out_zb)?, &d(&e.out_zb)?, &format!("{c}: zero u8 (graph vs eager)"));
        assert_same(&stream.clone_dtoh(&g.zbytes)?, &vec![0; len], &format!("{c}: zero u8"));
        assert_same(&d(&g.out_h)?, &d(&e.out_h)?, &format!("{c}: memset u16 (graph vs eager)"));
        assert_same(
            &d(&g.out_h)?,
            &host::widen_u16(&vec![fill16; len]),
            &format!("{c}: memset u16"),
        );
        let out_q = stream.clone_dtoh(&g.out_q)?;
        assert_same(
            &out_q,
            &stream.clone_dtoh(&e.out_q)?,
            &format!("{c}: memset i32 (graph vs eager)"),
        );
        assert_same(&out_q, &host::scale_sub_i32(&vec![-5; len], 2), &format!("{c}: memset i32"));
        let out_f = bits(&stream.clone_dtoh(&g.out_f)?);
        assert_same(
            &out_f,
            &bits(&stream.clone_dtoh(&e.out_f)?),
            &format!("{c}: memset f32 (graph vs eager)"),
        );
        // 0 + 3 per call: exact in f32.
        let want_f = (call as f32 + 1.0) * 3.0;
        assert_same(&out_f, &vec![want_f.to_bits(); len], &format!("{c}: memset f32 then axpy"));
    }
    let plan = cache.plan().expect("the cache ran a graph");
    let mut edges = plan.edges();
    edges.sort_unstable();
    let mut want: Vec<(u32, u32)> = (0..7).map(|i| (2 * i, 2 * i + 1)).collect();
    want.push((0, 2)); // `.after(m)`
    want.sort_unstable();
    assert_eq!(edges, want);
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches, s.hits), (1, 1, 3, 2), "{s:?}");
    // Only the u16 memset's value changes between calls.
    assert_eq!((s.node_updates, s.nodes_unchanged), (2, 2 * 13), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 5. A graph called in a loop: changing scalar, swapped buffers.
// ---------------------------------------------------------------------------------------------

/// 50 calls; the scalar `step` changes every call and `a`/`c` are swapped after every call, so
/// both nodes get new parameters each time: per-node updates only, one build, one instantiation.
#[test]
#[ignore = "needs a CUDA GPU"]
fn loop_with_changing_scalar_and_swapped_buffers() -> Result {
    const CALLS: u32 = 50;
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = (1 << 18) + 1;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let start = host::iota(n, 1, 0);
    let (mut a, mut b, mut c) = (
        stream.clone_htod(&start)?,
        stream.alloc_zeros::<u32>(len)?,
        stream.alloc_zeros::<u32>(len)?,
    );
    let (mut ea, mut eb, mut ec) = (
        stream.clone_htod(&start)?,
        stream.alloc_zeros::<u32>(len)?,
        stream.alloc_zeros::<u32>(len)?,
    );
    let mut h = start;
    let mut cache = GraphCache::new();
    for step in 0..CALLS {
        graph!(&mut cache, &stream, {
            k.affine(n, 3, step, &a, &mut b).launch(cfg);
            k.mix(n, &b, &mut c).launch(cfg);
        })?;
        std::mem::swap(&mut a, &mut c);

        launch!(stream, k, "affine", cfg; &n, &3u32, &step, &ea, &mut eb)?;
        launch!(stream, k, "mix", cfg; &n, &eb, &mut ec)?;
        std::mem::swap(&mut ea, &mut ec);

        h = host::mix(&host::affine(&h, 3, step));
    }
    let got = stream.clone_dtoh(&a)?;
    assert_same(&got, &stream.clone_dtoh(&ea)?, "after the loop: graph vs eager");
    assert_same(&got, &h, "after the loop: graph vs host model");
    assert_same(&stream.clone_dtoh(&b)?, &stream.clone_dtoh(&eb)?, "intermediate buffer");
    let s = cache.stats();
    assert_eq!(s.builds, 1, "{s:?}");
    assert_eq!(s.instantiations, 1, "{s:?}");
    assert_eq!(s.launches, u64::from(CALLS), "{s:?}");
    assert_eq!(s.hits, u64::from(CALLS - 1), "{s:?}");
    assert!(s.node_updates > 0, "{s:?}");
    // Both nodes change on every call after the first.
    assert_eq!(s.node_updates, 2 * u64::from(CALLS - 1), "{s:?}");
    assert_eq!(s.nodes_unchanged, 0, "{s:?}");
    assert_eq!(s.exec_updates, 0, "{s:?}");
    assert_eq!(s.reinstantiations, 0, "{s:?}");
    Ok(())
}

/// The same kind of loop in f32 (a scalar that changes, buffers swapped), compared with eager
/// bit for bit.
#[test]
#[ignore = "needs a CUDA GPU"]
fn f32_loop_is_bit_exact() -> Result {
    const CALLS: u32 = 40;
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = (1 << 18) + 7;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let start: Vec<f32> = (0..len).map(|i| ((i % 1000) as f32 * 0.001).sin()).collect();
    let (mut u, mut v, mut w) = (
        stream.clone_htod(&start)?,
        stream.alloc_zeros::<f32>(len)?,
        stream.alloc_zeros::<f32>(len)?,
    );
    let (mut eu, mut ev, mut ew) = (
        stream.clone_htod(&start)?,
        stream.alloc_zeros::<f32>(len)?,
        stream.alloc_zeros::<f32>(len)?,
    );
    let mut cache = GraphCache::new();
    for step in 0..CALLS {
        let a = 0.01 * step as f32 - 0.2;
        graph!(&mut cache, &stream, {
            k.fill_f32(n, a, 0.5, &mut w).launch(cfg);
            k.smooth_f32(n, &u, &mut v).launch(cfg);
            k.axpy_f32(n, a, &w, &mut v).launch(cfg);
        })?;
        std::mem::swap(&mut u, &mut v);

        launch!(stream, k, "fill_f32", cfg; &n, &a, &0.5f32, &mut ew)?;
        launch!(stream, k, "smooth_f32", cfg; &n, &eu, &mut ev)?;
        launch!(stream, k, "axpy_f32", cfg; &n, &a, &ew, &mut ev)?;
        std::mem::swap(&mut eu, &mut ev);
    }
    let got = stream.clone_dtoh(&u)?;
    assert!(got.iter().all(|x| x.is_finite()), "the f32 loop went non-finite");
    assert_same(&bits(&got), &bits(&stream.clone_dtoh(&eu)?), "f32 loop: graph vs eager, bits");
    let mut edges = cache.plan().expect("ran").edges();
    edges.sort_unstable();
    assert_eq!(edges, [(0, 2), (1, 2)]);
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 1, u64::from(CALLS)), "{s:?}");
    assert_eq!(s.node_updates, 3 * u64::from(CALLS - 1), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    Ok(())
}

/// An i32 kernel with negative scalars, compared with eager and host.
#[test]
#[ignore = "needs a CUDA GPU"]
fn i32_kernels_with_negative_scalars() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 10_007;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let x0: Vec<i32> = (0..len).map(|i| (i % 2001) as i32 - 1000).collect();
    let (x, mut y, mut w) =
        (stream.clone_htod(&x0)?, stream.alloc_zeros::<i32>(len)?, stream.alloc_zeros::<i32>(len)?);
    let (ex, mut ey, mut ew) =
        (stream.clone_htod(&x0)?, stream.alloc_zeros::<i32>(len)?, stream.alloc_zeros::<i32>(len)?);
    let mut cache = GraphCache::new();
    for s in [-7i32, 3, -1, 5] {
        graph!(&mut cache, &stream, {
            k.scale_sub_i32(n, s, &x, &mut y).launch(cfg);
            k.scale_sub_i32(n, -s, &y, &mut w).launch(cfg);
        })?;
        launch!(stream, k, "scale_sub_i32", cfg; &n, &s, &ex, &mut ey)?;
        launch!(stream, k, "scale_sub_i32", cfg; &n, &-s, &ey, &mut ew)?;
        let got = stream.clone_dtoh(&w)?;
        assert_same(&got, &stream.clone_dtoh(&ew)?, &format!("s = {s}: graph vs eager"));
        let want = host::scale_sub_i32(&host::scale_sub_i32(&x0, s), -s);
        assert_same(&got, &want, &format!("s = {s}: graph vs host model"));
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.launches, s.node_updates), (1, 4, 6), "{s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 6. Nothing changes between calls.
// ---------------------------------------------------------------------------------------------

/// Ten identical calls: after the first, every node is found unchanged and nothing is sent.
#[test]
#[ignore = "needs a CUDA GPU"]
fn unchanged_calls_send_nothing() -> Result {
    const CALLS: u64 = 10;
    const NODES: u64 = 5;
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 50_000;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let z = || stream.alloc_zeros::<u32>(len);
    let (mut x, mut y, mut yc, mut out) = (z()?, z()?, z()?, z()?);
    let (mut ex, mut ey, mut eyc, mut eout) = (z()?, z()?, z()?, z()?);
    let (mut flags, mut eflags) = (stream.alloc_zeros::<u32>(64)?, stream.alloc_zeros::<u32>(64)?);
    let mut cache = GraphCache::new();
    for call in 0..CALLS {
        graph!(&mut cache, &stream, {
            k.iota(n, 5, 9, &mut x).launch(cfg);
            k.affine(n, 7, 3, &x, &mut y).launch(cfg);
            memset(&mut flags, 1u32);
            copy(&y, &mut yc);
            k.mix(n, &yc, &mut out).launch(cfg);
        })?;
        let s = cache.stats();
        assert_eq!(s.node_updates, 0, "call {call}: {s:?}");
        assert_eq!(s.nodes_unchanged, NODES * call, "call {call}: {s:?}");
        assert_eq!((s.builds, s.launches, s.hits), (1, call + 1, call), "call {call}: {s:?}");
    }
    launch!(stream, k, "iota", cfg; &n, &5u32, &9u32, &mut ex)?;
    launch!(stream, k, "affine", cfg; &n, &7u32, &3u32, &ex, &mut ey)?;
    stream.memcpy_htod(&[1u32; 64], &mut eflags)?;
    stream.memcpy_dtod(&ey, &mut eyc)?;
    launch!(stream, k, "mix", cfg; &n, &eyc, &mut eout)?;
    let got = stream.clone_dtoh(&out)?;
    assert_same(&got, &stream.clone_dtoh(&eout)?, "graph vs eager");
    assert_same(&got, &host::mix(&host::affine(&host::iota(n, 5, 9), 7, 3)), "graph vs host");
    assert_same(&stream.clone_dtoh(&flags)?, &stream.clone_dtoh(&eflags)?, "memset");
    let s = cache.stats();
    assert_eq!((s.exec_updates, s.reinstantiations, s.instantiations), (0, 0, 1), "{s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 7. A host `if`: two variants, then hits only.
// ---------------------------------------------------------------------------------------------

/// A host `if` alternating between its branches: two builds (one per variant), then every call
/// is a hit. The result is checked after every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn host_if_alternates_between_two_cached_variants() -> Result {
    const CALLS: u32 = 20;
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 65_536 + 100;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let z0 = host::iota(n, 1, 1);
    let (mut x, mut y, mut z) =
        (stream.alloc_zeros::<u32>(len)?, stream.alloc_zeros::<u32>(len)?, stream.clone_htod(&z0)?);
    let (mut ex, mut ey, mut ez) =
        (stream.alloc_zeros::<u32>(len)?, stream.alloc_zeros::<u32>(len)?, stream.clone_htod(&z0)?);
    let mut cache = GraphCache::new();
    for call in 0..CALLS {
        let even = call % 2 == 0;
        graph!(&mut cache, &stream, {
            k.iota(n, 1, call, &mut x).launch(cfg);
            if even {
                k.affine(n, 3, 1, &x, &mut y).launch(cfg);
            } else {
                k.mix(n, &x, &mut y).launch(cfg);
                zero(&mut z);
            }
            k.affine_inplace(n, 2, 0, &mut y).launch(cfg);
        })?;

        launch!(stream, k, "iota", cfg; &n, &1u32, &call, &mut ex)?;
        if even {
            launch!(stream, k, "affine", cfg; &n, &3u32, &1u32, &ex, &mut ey)?;
        } else {
            launch!(stream, k, "mix", cfg; &n, &ex, &mut ey)?;
            stream.memset_zeros(&mut ez)?;
        }
        launch!(stream, k, "affine_inplace", cfg; &n, &2u32, &0u32, &mut ey)?;

        let xs = host::iota(n, 1, call);
        let mut want = if even { host::affine(&xs, 3, 1) } else { host::mix(&xs) };
        host::affine_inplace(&mut want, 2, 0);
        let got = stream.clone_dtoh(&y)?;
        assert_same(&got, &stream.clone_dtoh(&ey)?, &format!("call {call}: graph vs eager"));
        assert_same(&got, &want, &format!("call {call}: graph vs host model"));
        let want_z = if call == 0 { z0.clone() } else { vec![0; len] };
        assert_same(
            &stream.clone_dtoh(&z)?,
            &want_z,
            &format!("call {call}: zero in the else branch"),
        );
        assert_same(&stream.clone_dtoh(&ez)?, &want_z, &format!("call {call}: eager zero"));
    }
    let s = cache.stats();
    assert_eq!(s.builds, 2, "{s:?}");
    assert_eq!(s.instantiations, 2, "{s:?}");
    assert_eq!(s.hits, u64::from(CALLS - 2), "{s:?}");
    assert_eq!(s.launches, u64::from(CALLS), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations, s.evictions), (0, 0, 0), "{s:?}");
    assert_eq!(cache.len(), 2);
    let plan = cache.plan().expect("ran");
    assert_eq!(plan.conditions, 1);
    let conditional: Vec<bool> = plan.nodes.iter().map(|n| !n.condition.is_empty()).collect();
    assert_eq!(conditional, [false, true, true, true, false]);
    // Each variant's edges, as the cache builds them.
    let even_edges = cudagraph::infer_edges(plan.nodes, &[true, true, false, false, true]);
    assert_eq!(even_edges, [(0, 1), (1, 4)]);
    let odd_edges = cudagraph::infer_edges(plan.nodes, &[true, false, true, true, true]);
    assert_eq!(odd_edges, [(0, 2), (2, 4)]);
    Ok(())
}

/// A cache bounded to one variant with a host `if` alternating: every call builds, the previous
/// variant is evicted (its exec may still be running: the driver frees it when done), and every
/// result is still right.
#[test]
#[ignore = "needs a CUDA GPU"]
fn evicted_variants_rebuild_correctly() -> Result {
    const CALLS: u32 = 6;
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 300_001;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let (mut x, mut y) = (stream.alloc_zeros::<u32>(len)?, stream.alloc_zeros::<u32>(len)?);
    let mut cache = GraphCache::with_max_variants(1);
    for call in 0..CALLS {
        let odd = call % 2 == 1;
        graph!(&mut cache, &stream, {
            k.iota(n, 1, call, &mut x).launch(cfg);
            if odd {
                k.mix(n, &x, &mut y).launch(cfg);
            } else {
                k.affine(n, 5, call, &x, &mut y).launch(cfg);
            }
        })?;
        let xs = host::iota(n, 1, call);
        let want = if odd { host::mix(&xs) } else { host::affine(&xs, 5, call) };
        assert_same(&stream.clone_dtoh(&y)?, &want, &format!("call {call}"));
    }
    let s = cache.stats();
    assert_eq!(
        (s.builds, s.evictions, s.hits),
        (u64::from(CALLS), u64::from(CALLS - 1), 0),
        "{s:?}"
    );
    assert_eq!(cache.len(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 8. Errors: nothing enqueued, the cache still usable.
// ---------------------------------------------------------------------------------------------

/// Source and destination of the copy-length test.
struct Pair {
    src: CudaSlice<u32>,
    dst: CudaSlice<u32>,
}

impl Pair {
    fn new(stream: &Arc<CudaStream>, src: usize, dst: usize) -> Result<Pair> {
        Ok(Pair { src: stream.alloc_zeros(src)?, dst: stream.alloc_zeros(dst)? })
    }
}

/// Fills `p.src` and copies it to `p.dst`: one call site, so one cache serves every call.
fn seed_and_mirror(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Ops,
    seed: u32,
    p: &mut Pair,
) -> Result {
    let n = p.src.len() as u32;
    let cfg = LaunchConfig::for_num_elems(n);
    graph!(cache, stream, {
        k.iota(n, 3, seed, &mut p.src).launch(cfg);
        let mirror = copy(&p.src, &mut p.dst);
    })
}

#[track_caller]
fn assert_copy_length(err: &Error, src: usize, dst: usize) {
    let Error::CopyLength { site, src: s, dst: d } = err else {
        panic!("expected Error::CopyLength, got {err:?}");
    };
    assert_eq!((*s, *d), (src, dst), "{err}");
    assert_eq!(site.label, "mirror", "{err}");
    assert!(site.file.ends_with("gpu.rs"), "{err}");
    let (line, column) = statement_position("let mirror = copy(&p.src, &mut p.dst);");
    assert_eq!((site.line, site.column), (line, column), "{err}");
    let msg = err.to_string();
    for part in [
        "`mirror`".to_string(),
        format!("{}:{line}:{column}", site.file),
        format!("source has {src} elements, destination has {dst}"),
    ] {
        assert!(msg.contains(&part), "`{msg}` does not contain `{part}`");
    }
}

/// A `copy` between device buffers of different lengths is refused before anything is enqueued
/// (not even the kernel before it runs), names the node and its file:line:column, and the same
/// cache then works for correct calls, before and after it holds a built graph.
#[test]
#[ignore = "needs a CUDA GPU"]
fn error_copy_length_then_cache_still_works() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 4099;
    let len = n as usize;
    let mut bad = Pair::new(&stream, len, len - 1)?;
    let mut good = Pair::new(&stream, len, len)?;
    let mut other = Pair::new(&stream, len, len)?;
    let mut cache = GraphCache::new();

    let err = seed_and_mirror(&mut cache, &stream, &k, 1, &mut bad)
        .expect_err("copying 4099 elements into 4098 must be refused");
    assert_copy_length(&err, len, len - 1);
    assert_eq!((cache.stats().builds, cache.stats().launches), (0, 0));
    assert!(cache.is_empty());

    seed_and_mirror(&mut cache, &stream, &k, 2, &mut good)?;
    assert_same(&stream.clone_dtoh(&good.dst)?, &host::iota(n, 3, 2), "first correct call");

    // Again, now that the cache holds a built graph.
    let err = seed_and_mirror(&mut cache, &stream, &k, 3, &mut bad)
        .expect_err("copying 4099 elements into 4098 must be refused");
    assert_copy_length(&err, len, len - 1);

    // Different buffers: a hit with pointer updates.
    seed_and_mirror(&mut cache, &stream, &k, 4, &mut other)?;
    assert_same(&stream.clone_dtoh(&other.dst)?, &host::iota(n, 3, 4), "call after the error");
    assert_same(&stream.clone_dtoh(&good.dst)?, &host::iota(n, 3, 2), "earlier result kept");

    // Nothing of the failed calls ran: not the copy, and not the kernel before it.
    assert_same(&stream.clone_dtoh(&bad.src)?, &vec![0; len], "source of the failed calls");
    assert_same(
        &stream.clone_dtoh(&bad.dst)?,
        &vec![0; len - 1],
        "destination of the failed calls",
    );
    let s = cache.stats();
    assert_eq!((s.builds, s.launches, s.hits), (1, 2, 1), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    Ok(())
}

/// `iota` into `x` as a one-node graph with the given launch dimensions.
fn iota_graph(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Ops,
    seed: u32,
    x: &mut CudaSlice<u32>,
    cfg: LaunchDims,
) -> Result {
    let n = x.len() as u32;
    graph!(cache, stream, {
        k.iota(n, 1, seed, &mut *x).launch(cfg);
    })
}

#[track_caller]
fn assert_zero_dims(err: &Error, grid: (u32, u32, u32), block: (u32, u32, u32)) {
    let Error::ZeroDims { site, grid: g, block: b } = err else {
        panic!("expected Error::ZeroDims, got {err:?}");
    };
    assert_eq!((*g, *b), (grid, block), "{err}");
    assert_eq!(site.label, "iota", "{err}");
    assert!(site.file.ends_with("gpu.rs"), "{err}");
    let (line, column) = statement_position("k.iota(n, 1, seed, &mut *x).launch(cfg);");
    assert_eq!((site.line, site.column), (line, column), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("every dimension must be at least 1"), "{msg}");
    assert!(msg.contains(&format!("{}:{line}:{column}", site.file)), "{msg}");
}

/// A launch with a zero grid or block dimension is refused with `Error::ZeroDims`, nothing is
/// enqueued, and the same cache then works (before and after a build).
#[test]
#[ignore = "needs a CUDA GPU"]
fn error_zero_dims_then_cache_still_works() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 1000;
    let mut x = stream.alloc_zeros::<u32>(n as usize)?;
    let mut cache = GraphCache::new();

    let err = iota_graph(&mut cache, &stream, &k, 1, &mut x, (0u32, 256u32).into())
        .expect_err("a zero grid must be refused");
    assert_zero_dims(&err, (0, 1, 1), (256, 1, 1));
    assert_same(&stream.clone_dtoh(&x)?, &vec![0; n as usize], "nothing ran");
    assert_eq!(cache.stats().launches, 0);

    iota_graph(&mut cache, &stream, &k, 2, &mut x, (n.div_ceil(256), 256u32).into())?;
    assert_same(&stream.clone_dtoh(&x)?, &host::iota(n, 1, 2), "first correct call");

    let zero_block =
        LaunchConfig { grid_dim: (4, 1, 1), block_dim: (0, 1, 1), shared_mem_bytes: 0 };
    let err = iota_graph(&mut cache, &stream, &k, 3, &mut x, zero_block.into())
        .expect_err("a zero block must be refused");
    assert_zero_dims(&err, (4, 1, 1), (0, 1, 1));
    let zero_z = ((n.div_ceil(32), 1u32, 0u32), (32u32, 1u32, 1u32));
    let err = iota_graph(&mut cache, &stream, &k, 3, &mut x, zero_z.into())
        .expect_err("a zero grid z must be refused");
    assert_zero_dims(&err, (n.div_ceil(32), 1, 0), (32, 1, 1));
    assert_same(&stream.clone_dtoh(&x)?, &host::iota(n, 1, 2), "nothing of the failed calls ran");

    // A hit that changes the seed and the launch dimensions.
    iota_graph(&mut cache, &stream, &k, 4, &mut x, (n.div_ceil(128), 128u32).into())?;
    assert_same(&stream.clone_dtoh(&x)?, &host::iota(n, 1, 4), "call after the errors");
    let s = cache.stats();
    assert_eq!((s.builds, s.launches, s.hits, s.node_updates), (1, 2, 1, 1), "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    Ok(())
}

/// A memset or copy of an empty buffer is refused with `Error::Empty` (the driver refuses
/// 0-byte nodes) instead of failing inside the driver.
#[test]
#[ignore = "needs a CUDA GPU"]
fn error_empty_buffer() -> Result {
    let (_ctx, stream, _k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(16)?;
    let mut y = stream.alloc_zeros::<u32>(16)?;
    {
        let mut empty = x.slice_mut(0..0);
        let mut cache = GraphCache::new();
        let r = graph!(&mut cache, &stream, {
            zero(&mut empty);
        });
        match r {
            Err(Error::Empty { site, what }) => {
                assert_eq!((site.label, what), ("zero", "memset"));
            }
            other => panic!("expected Error::Empty, got {other:?}"),
        }
        assert!(cache.is_empty());
    }
    {
        let a = x.slice(0..0);
        let mut b = y.slice_mut(0..0);
        let mut cache = GraphCache::new();
        let r = graph!(&mut cache, &stream, {
            copy(&a, &mut b);
        });
        match r {
            Err(Error::Empty { site, what }) => {
                assert_eq!((site.label, what), ("copy", "memcpy"));
            }
            other => panic!("expected Error::Empty, got {other:?}"),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 9. A `kernels!` struct whose module lacks a declared function.
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// More: sizes, views, streams, upload, DOT.
// ---------------------------------------------------------------------------------------------

/// Views of changing length: the kernels' `n` and grids change and the copy's size changes on
/// every call, all as per-node updates of one exec. Elements past the view keep older values,
/// the same in graph and eager.
#[test]
#[ignore = "needs a CUDA GPU"]
fn changing_sizes_update_grid_and_copy_length() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let sizes = [1000usize, 5000, 64, 70_000, 1, 4096];
    let max = 70_000;
    let z = || stream.alloc_zeros::<u32>(max);
    let (mut a_buf, mut b_buf, mut ea_buf, mut eb_buf) = (z()?, z()?, z()?, z()?);
    let mut cache = GraphCache::new();
    for (call, &m) in sizes.iter().enumerate() {
        let (n, call) = (m as u32, call as u32);
        let cfg = LaunchConfig::for_num_elems(n);
        {
            let mut a = a_buf.slice_mut(..m);
            let mut b = b_buf.slice_mut(..m);
            graph!(&mut cache, &stream, {
                k.iota(n, 3, call, &mut a).launch(cfg);
                copy(&a, &mut b);
                k.affine_inplace(n, 5, 1, &mut b).launch((n.div_ceil(128), 128));
            })?;
        }
        {
            let mut a = ea_buf.slice_mut(..m);
            let mut b = eb_buf.slice_mut(..m);
            launch!(stream, k, "iota", cfg; &n, &3u32, &call, &mut a)?;
            stream.memcpy_dtod(&a, &mut b)?;
            launch!(stream, k, "affine_inplace", dims(n.div_ceil(128), 128); &n, &5u32, &1u32, &mut b)?;
        }
        let got = stream.clone_dtoh(&b_buf)?;
        assert_same(&got, &stream.clone_dtoh(&eb_buf)?, &format!("size {m}: graph vs eager"));
        let mut want = host::iota(n, 3, call);
        host::affine_inplace(&mut want, 5, 1);
        assert_same(&got[..m], &want, &format!("size {m}: graph vs host model"));
    }
    let s = cache.stats();
    let hits = sizes.len() as u64 - 1;
    assert_eq!((s.builds, s.instantiations, s.hits), (1, 1, hits), "{s:?}");
    assert_eq!(s.node_updates, 3 * hits, "{s:?}");
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    Ok(())
}

/// Two views made by `split_at_mut` before the macro are two places: the graph orders the
/// kernels by their hazards on each half.
#[test]
#[ignore = "needs a CUDA GPU"]
fn split_views_are_distinct_places() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let h: u32 = 123_457;
    let half = h as usize;
    let cfg = LaunchConfig::for_num_elems(h);
    let mut buf = stream.alloc_zeros::<u32>(2 * half)?;
    let mut ebuf = stream.alloc_zeros::<u32>(2 * half)?;
    let mut cache = GraphCache::new();
    {
        let (mut lo, mut hi) = buf.split_at_mut(half);
        graph!(&mut cache, &stream, {
            k.iota(h, 2, 1, &mut lo).launch(cfg);
            k.affine(h, 3, 4, &lo, &mut hi).launch(cfg);
            k.mix(h, &hi, &mut lo).launch(cfg);
        })?;
    }
    {
        let (mut lo, mut hi) = ebuf.split_at_mut(half);
        launch!(stream, k, "iota", cfg; &h, &2u32, &1u32, &mut lo)?;
        launch!(stream, k, "affine", cfg; &h, &3u32, &4u32, &lo.as_view(), &mut hi)?;
        launch!(stream, k, "mix", cfg; &h, &hi.as_view(), &mut lo)?;
    }
    let got = stream.clone_dtoh(&buf)?;
    assert_same(&got, &stream.clone_dtoh(&ebuf)?, "graph vs eager");
    let hi = host::affine(&host::iota(h, 2, 1), 3, 4);
    let mut want = host::mix(&hi);
    want.extend_from_slice(&hi);
    assert_same(&got, &want, "graph vs host model");
    assert_eq!(cache.plan().expect("ran").edges(), [(0, 1), (1, 2)]);
    Ok(())
}

/// Elements of an array are places too (`bufs[0]`, `bufs[1]`): disjoint borrows, ordered by
/// their hazards.
#[test]
#[ignore = "needs a CUDA GPU"]
fn indexed_places_in_an_array() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 33_333;
    let cfg = LaunchConfig::for_num_elems(n);
    let z = || stream.alloc_zeros::<u32>(n as usize);
    let mut bufs = [z()?, z()?, z()?];
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        k.iota(n, 1, 0, &mut bufs[0]).launch(cfg);
        k.affine(n, 2, 1, &bufs[0], &mut bufs[1]).launch(cfg);
        k.mix(n, &bufs[1], &mut bufs[2]).launch(cfg);
    })?;
    let b1 = host::affine(&host::iota(n, 1, 0), 2, 1);
    assert_same(&stream.clone_dtoh(&bufs[1])?, &b1, "bufs[1]");
    assert_same(&stream.clone_dtoh(&bufs[2])?, &host::mix(&b1), "bufs[2]");
    let plan = cache.plan().expect("ran");
    assert_eq!(plan.places, ["bufs[0]", "bufs[1]", "bufs[2]"]);
    assert_eq!(plan.edges(), [(0, 1), (1, 2)]);
    Ok(())
}

/// The slow pipeline as a graph, on whatever stream it is given (one call site, one cache).
fn slow_pipeline(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Ops,
    spins: u32,
    seed: u32,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> Result {
    let n = x.len() as u32;
    let cfg = LaunchConfig::for_num_elems(n);
    graph!(cache, stream, {
        k.slow_iota(n, spins, 5, seed, &mut *x).launch(cfg);
        k.affine(n, 3, 2, &*x, &mut *y).launch(cfg);
    })
}

/// cudarc's events order a graph with work on other streams: a read on another stream right
/// after the (slow) graph waits for it; the same exec launched on a second stream waits for the
/// first launch's buffers; a graph waits for a slow eager writer on another stream.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graphs_and_other_streams_are_ordered_by_cudarc_events() -> Result {
    let (ctx, s1, k) = gpu()?;
    let s2 = ctx.new_stream()?;
    let n: u32 = 1 << 20;
    let len = n as usize;
    let cfg = LaunchConfig::for_num_elems(n);
    let spins = 1u32 << 16;
    let reference = |seed: u32| -> Result<Vec<u32>> {
        let (mut ex, mut ey) = (s1.alloc_zeros::<u32>(len)?, s1.alloc_zeros::<u32>(len)?);
        launch!(s1, k, "slow_iota", cfg; &n, &spins, &5u32, &seed, &mut ex)?;
        launch!(s1, k, "affine", cfg; &n, &3u32, &2u32, &ex, &mut ey)?;
        Ok(s1.clone_dtoh(&ey)?)
    };
    let (want1, want2) = (reference(1)?, reference(2)?);
    assert_ne!(want1, want2);

    let (mut x, mut y) = (s1.alloc_zeros::<u32>(len)?, s1.alloc_zeros::<u32>(len)?);
    let mut cache = GraphCache::new();
    slow_pipeline(&mut cache, &s1, &k, spins, 1, &mut x, &mut y)?;
    assert_same(&s2.clone_dtoh(&y)?, &want1, "graph on s1, read at once on s2");

    slow_pipeline(&mut cache, &s2, &k, spins, 2, &mut x, &mut y)?;
    assert_same(&s1.clone_dtoh(&y)?, &want2, "the same exec on s2, read at once on s1");
    let s = cache.stats();
    assert_eq!((s.builds, s.launches, s.hits), (1, 2, 1), "{s:?}");

    let (mut w, mut out) = (s1.alloc_zeros::<u32>(len)?, s1.alloc_zeros::<u32>(len)?);
    launch!(s2, k, "slow_iota", cfg; &n, &spins, &5u32, &1u32, &mut w)?;
    let mut reader = GraphCache::new();
    graph!(&mut reader, &s1, {
        k.affine(n, 3, 2, &w, &mut out).launch(cfg);
    })?;
    assert_same(&s1.clone_dtoh(&out)?, &want1, "slow eager writer on s2, graph reader on s1");
    Ok(())
}

/// `upload` before a launch, and the driver's own DOT of the built graph.
#[test]
#[ignore = "needs a CUDA GPU"]
fn upload_and_driver_dot() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 4096;
    let cfg = LaunchConfig::for_num_elems(n);
    let (mut x, mut y) = (stream.alloc_zeros::<u32>(4096)?, stream.alloc_zeros::<u32>(4096)?);
    let mut cache = GraphCache::new();
    cache.upload(&stream)?; // an empty cache: nothing to do
    let path = std::env::temp_dir().join(format!("cudagraph-gpu-test-{}.dot", std::process::id()));
    assert!(!cache.debug_dot_print(&path)?, "an empty cache has no graph to print");
    for seed in 0..3u32 {
        graph!(&mut cache, &stream, {
            k.iota(n, 1, seed, &mut x).launch(cfg);
            k.affine(n, 2, 1, &x, &mut y).launch(cfg);
        })?;
        cache.upload(&stream)?;
        assert_same(
            &stream.clone_dtoh(&y)?,
            &host::affine(&host::iota(n, 1, seed), 2, 1),
            "result",
        );
    }
    assert!(cache.debug_dot_print(&path)?);
    let dot = std::fs::read_to_string(&path).expect("cuGraphDebugDotPrint wrote the file");
    std::fs::remove_file(&path).ok();
    assert!(dot.contains("digraph"), "{dot}");
    Ok(())
}

/// Needs no GPU: the plans of this file's `graph!` calls are registered, with each node's label,
/// kind, statement text and position.
#[test]
fn plans_of_this_file() {
    let plans: Vec<_> = cudagraph::plans().filter(|p| p.file.ends_with("gpu.rs")).collect();
    assert!(plans.len() >= 15, "found {} plans of gpu.rs", plans.len());
    let stmt = "let mirror = copy(&p.src, &mut p.dst);";
    let (line, column) = statement_position(stmt);
    let mirror = plans
        .iter()
        .flat_map(|p| p.nodes)
        .find(|n| n.label == "mirror")
        .expect("the copy-length test's node");
    assert_eq!(mirror.kind, NodeKind::Memcpy);
    assert_eq!((mirror.line, mirror.column), (line, column));
    assert_eq!(mirror.text, stmt);
    let fan = plans.iter().find(|p| p.places.contains(&"g.src")).expect("the fan-out graph");
    assert_eq!(fan.nodes[0].label, "produce");
    assert_eq!(fan.nodes[4].after, [0]);
    assert_eq!(fan.nodes[4].kind, NodeKind::Kernel("combine3"));
}

/// One call of a graph with a node in each branch of a host `if` and a node after the `if` that
/// depends on whichever branch ran: `x = 3`, then `y = x` if `flag` or `y = 7` if not, then
/// `z = y`. Its plan is `plan_edges_say_which_branch_they_belong_to`'s (issue 32).
fn branch_then_join(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    flag: bool,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
    z: &mut CudaSlice<u32>,
) -> Result {
    graph!(cache, stream, {
        memset(&mut *x, 3u32);
        if flag {
            copy(&*x, &mut *y);
        } else {
            memset(&mut *y, 7u32);
        }
        copy(&*y, &mut *z);
    })?;
    Ok(())
}

/// Needs no GPU (issue 32, "plan printing lists an edge from a node that exists only in the other
/// branch"): the printed plan of `branch_then_join` has no edge between the two branches, and
/// the node after the `if` lists each branch's node with the branch's condition. Before the fix
/// the plan printed `n2 … after [n1] if !(flag)` (n1 is in the other branch) and `n3 … after
/// [n2]` (missing n1, its only predecessor when `flag`).
#[test]
fn plan_edges_say_which_branch_they_belong_to() {
    let plan = cudagraph::plans()
        .find(|p| {
            p.file.ends_with("gpu.rs")
                && p.places == ["x", "y", "z"]
                && p.nodes.iter().any(|n| n.condition == "flag")
        })
        .expect("branch_then_join's plan is registered");
    let conditions: Vec<&str> = plan.nodes.iter().map(|n| n.condition).collect();
    assert_eq!(conditions, ["", "flag", "!(flag)", ""]);
    let edges = plan.edge_conditions();
    let want = [(0, 1, ""), (1, 3, "flag"), (2, 3, "!(flag)")];
    assert_eq!(edges, want.map(|(a, b, c)| (a, b, c.to_string())), "{plan}");
    let text = plan.to_string();
    let line = |i: usize| text.lines().nth(i + 1).unwrap_or_default().to_string();
    assert!(line(1).contains("after [n0] if flag"), "{text}");
    assert!(line(2).contains("after [] if !(flag)"), "{text}");
    assert!(line(3).contains("after [n1 if flag, n2 if !(flag)]"), "{text}");
    let dot = plan.to_dot();
    assert!(!dot.contains("n1 -> n2"), "{dot}");
    assert!(dot.contains("n1 -> n3 [style=dashed, label=\"if flag\"];"), "{dot}");
    assert!(dot.contains("n2 -> n3 [style=dashed, label=\"if !(flag)\"];"), "{dot}");
    assert!(dot.contains("n0 -> n1;"), "{dot}");
}

/// `branch_then_join` on the GPU, both branches in turn, against eager mode.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_node_after_a_host_if_follows_the_branch_that_ran() -> Result {
    let (_ctx, stream, _k) = gpu()?;
    let len = 4099;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(cudagraph::Mode::Eager);
    for call in 0..6u32 {
        let flag = call % 3 != 1;
        let mut got = Vec::new();
        for c in [&mut cache, &mut eager] {
            let (mut x, mut y, mut z) = (
                stream.alloc_zeros::<u32>(len)?,
                stream.alloc_zeros::<u32>(len)?,
                stream.alloc_zeros::<u32>(len)?,
            );
            branch_then_join(c, &stream, flag, &mut x, &mut y, &mut z)?;
            got.push((stream.clone_dtoh(&y)?, stream.clone_dtoh(&z)?));
        }
        let want = vec![if flag { 3 } else { 7 }; len];
        assert_same(&got[0].1, &got[1].1, &format!("call {call}, flag {flag}: z, graph vs eager"));
        assert_same(&got[0].0, &got[1].0, &format!("call {call}, flag {flag}: y, graph vs eager"));
        assert_same(&got[0].1, &want, &format!("call {call}, flag {flag}: z"));
    }
    assert_eq!(cache.len(), 2, "two variants");
    Ok(())
}

/// Issue 12's example made legal: `middle` is named inside its branch only, and `last` is after
/// `first`, which it shares no buffer with. With `flag` false the variant has no `middle`, and
/// the `.after(first)` edge must still order `last` after the slow `first`: `last` stamps the
/// GPU's timer when it starts, `first` when it ends. Compared with eager mode (one stream, in
/// order) for the same flags; `middle`'s output compared exactly.
#[test]
#[ignore = "needs a CUDA GPU"]
fn after_an_outer_node_holds_in_every_variant() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 4096;
    let cfg = LaunchConfig::for_num_elems(n);
    let one = (1u32, 32u32);
    let spins = 1u32 << 20;
    let step = |cache: &mut GraphCache, flag: bool, round: u32| -> Result<(u64, u64, Vec<u32>)> {
        let (mut a, mut b, mut c) = (
            stream.alloc_zeros::<u64>(1)?,
            stream.alloc_zeros::<u32>(n as usize)?,
            stream.alloc_zeros::<u64>(1)?,
        );
        graph!(cache, &stream, {
            let first = k.slow_stamp(spins, &mut a).launch(one);
            if flag {
                let middle = k.iota(n, 3, round, &mut b).launch(cfg).after(first);
                k.affine_inplace(n, 1, 1, &mut b).launch(cfg).after(middle);
            }
            k.stamp(&mut c).launch(one).after(first);
        })?;
        Ok((stream.clone_dtoh(&a)?[0], stream.clone_dtoh(&c)?[0], stream.clone_dtoh(&b)?))
    };
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(cudagraph::Mode::Eager);
    for round in 0..6u32 {
        let flag = round % 2 == 1;
        let (first_end, last_start, b) = step(&mut cache, flag, round)?;
        let (e_end, e_start, eb) = step(&mut eager, flag, round)?;
        assert!(e_start >= e_end, "eager: last started at {e_start} before first ended at {e_end}");
        assert!(
            last_start >= first_end,
            "round {round}, flag {flag}: last started at {last_start} ns, before first ended at {first_end} ns"
        );
        assert_same(&b, &eb, &format!("round {round}: middle's output, graph vs eager"));
    }
    let edges = cache.plan().expect("ran").edges();
    assert!(edges.contains(&(0, 3)), "{edges:?}");
    assert_eq!(cache.len(), 2, "two variants");
    Ok(())
}

/// A pinned host buffer dropped after a call and a new one allocated before the next (the
/// allocator often hands back the same address): the next call must copy into the new buffer
/// and must not make the driver touch the freed one. (The `cg` example crashed inside
/// `cuGraphLaunch` this way when its pinned flag was allocated per solve.) Both pinned kinds,
/// write-combined (`alloc_pinned`) and plain (`alloc_pinned_with_flags(_, 0)`), and both
/// directions.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pinned_buffer_freed_and_reallocated_between_calls() -> Result {
    let (ctx, stream, k) = gpu()?;
    let n: u32 = 1000;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut d = stream.alloc_zeros::<u32>(n as usize)?;
    let mut back = stream.alloc_zeros::<u32>(n as usize)?;
    let mut cache = GraphCache::new();
    let mut addresses = Vec::new();
    for round in 0..12u32 {
        // SAFETY: written by the graph's copy (or by the host) before it is read.
        let (mut out, mut input) = unsafe {
            if round % 2 == 0 {
                (ctx.alloc_pinned::<u32>(n as usize)?, ctx.alloc_pinned::<u32>(n as usize)?)
            } else {
                (
                    ctx.alloc_pinned_with_flags::<u32>(n as usize, 0)?,
                    ctx.alloc_pinned_with_flags::<u32>(n as usize, 0)?,
                )
            }
        };
        addresses.push(out.as_slice()?.as_ptr() as usize);
        let src: Vec<u32> = (0..n).map(|i| i * 7 + round).collect();
        input.as_mut_slice()?.copy_from_slice(&src);
        graph!(&mut cache, &stream, {
            copy(&input, &mut back);
            k.affine(n, 3, round, &back, &mut d).launch(cfg);
            copy(&d, &mut out);
        })?;
        let got = out.as_slice()?.to_vec();
        assert_same(&got, &host::affine(&src, 3, round), &format!("round {round}"));
        drop((out, input));
    }
    eprintln!("pinned addresses per round: {addresses:x?}");
    Ok(())
}
