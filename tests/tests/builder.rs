//! GPU tests of `GraphBuilder`, the run-time API below `graph!`.
//!
//! Every builder graph is compared with the same work launched eagerly: with cudarc's own API
//! (`launch_builder`, `memcpy_*`) or with the library's eager oracle (`Mode::Eager`, the same
//! builder code run node by node), and the integer ones also with a host model where one is
//! short; integer data compares exactly. The kernels are `kernels/ops.cu`, compiled at run time
//! by NVRTC.
//!
//! Each GPU test is `#[ignore = "needs a CUDA GPU"]`; on a GPU machine run
//! `cargo test -p cudagraph-tests --test builder -- --ignored`. A GPU test never skips silently:
//! without a CUDA driver it panics and says so.

use std::sync::Arc;

use cudagraph::cudarc::driver::sys::CUstreamCaptureStatus;
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudagraph::{Error, GraphCache, Mode, NodeSite, graph};

mod common;
use common::{Ops, Result, assert_same, gpu, host, launch};

/// A buffer of `len` elements with contents that depend on `k`, so that a swap, an in-place
/// update or a node that did not run shows in the result.
fn distinct(stream: &Arc<CudaStream>, len: usize, k: u32) -> Result<CudaSlice<u32>> {
    let v: Vec<u32> = (0..len as u32).map(|i| i.wrapping_mul(0x9e37_79b9) ^ k).collect();
    Ok(stream.clone_htod(&v)?)
}

// ---------------------------------------------------------------------------------------------
// 1. A fan-out / fan-in chain: one build, then hits with per-node updates.
// ---------------------------------------------------------------------------------------------

/// Buffers of the chain: `acc` accumulates across calls (read, then overwritten by a copy, then
/// updated in place) and `spare` is outside the graph, swapped with `acc` between calls.
struct Chain {
    src: CudaSlice<u32>,
    a: CudaSlice<u32>,
    b: CudaSlice<u32>,
    c: CudaSlice<u32>,
    out: CudaSlice<u32>,
    acc: CudaSlice<u32>,
    d: CudaSlice<u32>,
    spare: CudaSlice<u32>,
}

impl Chain {
    fn new(stream: &Arc<CudaStream>, len: usize) -> Result<Chain> {
        let f = |k| distinct(stream, len, k);
        Ok(Chain {
            src: f(1)?,
            a: f(2)?,
            b: f(3)?,
            c: f(4)?,
            out: f(5)?,
            acc: f(6)?,
            d: f(7)?,
            spare: f(8)?,
        })
    }

    fn host(&self, stream: &Arc<CudaStream>) -> Result<Vec<Vec<u32>>> {
        [&self.src, &self.a, &self.b, &self.c, &self.out, &self.acc, &self.d, &self.spare]
            .into_iter()
            .map(|x| Ok(stream.clone_dtoh(x)?))
            .collect()
    }
}

/// The chain as a builder graph: a producer, three consumers, a fan-in, then `acc` read, copied
/// over and updated in place. Returns the builder's edges.
fn chain_graph(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Ops,
    n: u32,
    seed: u32,
    b: &mut Chain,
) -> Result<Vec<(u32, u32)>> {
    let cfg = LaunchConfig::for_num_elems(n);
    let mut g = cache.builder(stream);
    assert!(g.is_empty());
    let (src, a, bb, c) =
        (g.write(&mut b.src), g.write(&mut b.a), g.write(&mut b.b), g.write(&mut b.c));
    let (out, acc, d) = (g.write(&mut b.out), g.write(&mut b.acc), g.write(&mut b.d));
    g.kernel(k.iota(n, 7, seed, src).launch(cfg));
    g.kernel(k.affine(n, 3, 1, src.read(), a).launch(cfg));
    g.kernel(k.mix(n, src.read(), bb).launch(cfg));
    g.kernel(k.affine(n, 0xdead_beef, 5, src.read(), c).launch(cfg));
    g.kernel(k.combine3(n, a.read(), bb.read(), c.read(), out).launch(cfg));
    g.kernel(k.combine3(n, out.read(), acc.read(), a.read(), d).launch(cfg));
    g.copy(d.read(), acc);
    g.kernel(k.affine_inplace(n, 5, seed, acc).launch(cfg));
    assert_eq!(g.len(), 8);
    let mut edges = g.edges();
    edges.sort_unstable();
    g.launch()?;
    Ok(edges)
}

/// The same work launched eagerly with cudarc.
fn chain_eager(stream: &Arc<CudaStream>, k: &Ops, n: u32, seed: u32, e: &mut Chain) -> Result {
    let cfg = LaunchConfig::for_num_elems(n);
    launch!(stream, k, "iota", cfg; &n, &7u32, &seed, &mut e.src)?;
    launch!(stream, k, "affine", cfg; &n, &3u32, &1u32, &e.src, &mut e.a)?;
    launch!(stream, k, "mix", cfg; &n, &e.src, &mut e.b)?;
    launch!(stream, k, "affine", cfg; &n, &0xdead_beefu32, &5u32, &e.src, &mut e.c)?;
    launch!(stream, k, "combine3", cfg; &n, &e.a, &e.b, &e.c, &mut e.out)?;
    launch!(stream, k, "combine3", cfg; &n, &e.out, &e.acc, &e.a, &mut e.d)?;
    stream.memcpy_dtod(&e.d, &mut e.acc)?;
    launch!(stream, k, "affine_inplace", cfg; &n, &5u32, &seed, &mut e.acc)?;
    Ok(())
}

/// Between calls: nothing, a scalar change, nothing, a pointer swap of `acc` with a buffer
/// outside the graph, a pointer swap of two buffers inside it. One build; every later call a
/// hit that sends exactly the changed nodes. All eight buffers equal the eager ones after every
/// call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn chain_and_fan_equal_eager_launches_and_update_in_place() -> Result {
    let _serial = common::serial();
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 300_007;
    let mut g = Chain::new(&stream, n as usize)?;
    let mut e = Chain::new(&stream, n as usize)?;
    let mut cache = GraphCache::new();
    #[derive(Clone, Copy, Debug)]
    enum Swap {
        None,
        AccSpare,
        AC,
    }
    // (seed, swap before the call, (builds, hits, node_updates, nodes_unchanged) after it)
    let calls = [
        (1u32, Swap::None, (1, 0, 0, 0)),
        // iota's and affine_inplace's seed
        (2, Swap::None, (1, 1, 2, 6)),
        // nothing changed
        (2, Swap::None, (1, 2, 2, 14)),
        // acc's three users: the second combine3, the copy, affine_inplace
        (2, Swap::AccSpare, (1, 3, 5, 19)),
        // both affines, both combine3s (they read a)
        (2, Swap::AC, (1, 4, 9, 23)),
        // iota's seed, and acc's three users (affine_inplace's seed among them)
        (9, Swap::AccSpare, (1, 5, 13, 27)),
    ];
    for (i, &(seed, swap, want)) in calls.iter().enumerate() {
        match swap {
            Swap::None => {}
            Swap::AccSpare => {
                std::mem::swap(&mut g.acc, &mut g.spare);
                std::mem::swap(&mut e.acc, &mut e.spare);
            }
            Swap::AC => {
                std::mem::swap(&mut g.a, &mut g.c);
                std::mem::swap(&mut e.a, &mut e.c);
            }
        }
        let edges = chain_graph(&mut cache, &stream, &k, n, seed, &mut g)?;
        assert_eq!(edges, [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4), (4, 5), (5, 6), (6, 7)]);
        chain_eager(&stream, &k, n, seed, &mut e)?;
        let (got, want_bufs) = (g.host(&stream)?, e.host(&stream)?);
        let names = ["src", "a", "b", "c", "out", "acc", "d", "spare"];
        for (j, name) in names.iter().enumerate() {
            assert_same(&got[j], &want_bufs[j], &format!("call {i} ({swap:?}): {name}"));
        }
        assert_same(&got[0], &host::iota(n, 7, seed), &format!("call {i}: src vs host model"));
        let s = cache.stats();
        assert_eq!((s.builds, s.hits, s.node_updates, s.nodes_unchanged), want, "call {i}: {s:?}");
        assert_eq!((s.instantiations, s.launches), (1, i as u64 + 1), "call {i}: {s:?}");
        assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "call {i}: {s:?}");
    }
    assert_eq!(cache.len(), 1);
    assert!(cache.plan().is_none(), "a builder graph has no static plan");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. Variants: calls switching between three topologies.
// ---------------------------------------------------------------------------------------------

/// One call with topology `topo` (0, 1 or 2) over the four buffers, registering them in reverse
/// order when `flip` (another numbering of the places, the same topology). In topology 1 the
/// first node is `iota` or, when `alt`, `affine_inplace`: another function with the same
/// parameters in the same node.
fn variant(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Ops,
    (topo, seed, flip, alt): (usize, u32, bool, bool),
    bufs: &mut [CudaSlice<u32>; 4],
) -> Result {
    let n = bufs[0].len() as u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let [x, y, z, w] = bufs;
    let mut g = cache.builder(stream);
    let (x, y, z, w) = if flip {
        let (w, z, y) = (g.write(w), g.write(z), g.write(y));
        (g.write(x), y, z, w)
    } else {
        (g.write(x), g.write(y), g.write(z), g.write(w))
    };
    match topo {
        0 => {
            g.kernel(k.iota(n, 3, seed, x).launch(cfg));
            g.kernel(k.affine(n, 5, seed, x.read(), y).launch(cfg));
            g.kernel(k.mix(n, y.read(), z).launch(cfg));
        }
        1 => {
            if alt {
                g.kernel(k.affine_inplace(n, 9, seed, x).launch(cfg));
            } else {
                g.kernel(k.iota(n, 1, seed, x).launch(cfg));
            }
            g.copy(x.read(), y);
            g.memset(w, seed ^ 0x5555_5555);
            g.kernel(k.affine(n, 11, seed, y.read(), z).launch(cfg));
            g.kernel(k.mix(n, z.read(), w).launch(cfg));
        }
        _ => {
            g.kernel(k.iota(n, 7, seed, x).launch((n.div_ceil(128), 128)));
            g.kernel(k.affine(n, 3, seed, x.read(), y).launch(cfg));
            g.kernel(k.mix(n, x.read(), z).launch(cfg));
            g.kernel(k.combine3(n, x.read(), y.read(), z.read(), w).launch(cfg));
            g.zero(x);
        }
    }
    g.launch()
}

/// Twelve calls over three topologies in a mixed order, with pointer swaps, scalar changes,
/// function changes and both registration orders: three builds, every other call a hit, and
/// after every call all four buffers equal those of the eager oracle.
#[test]
#[ignore = "needs a CUDA GPU"]
fn variants_hit_their_cached_execs() -> Result {
    let _serial = common::serial();
    let (_ctx, stream, k) = gpu()?;
    let len = 40_000;
    let bufs = |o: u32| -> Result<[CudaSlice<u32>; 4]> {
        Ok([
            distinct(&stream, len, o)?,
            distinct(&stream, len, o + 1)?,
            distinct(&stream, len, o + 2)?,
            distinct(&stream, len, o + 3)?,
        ])
    };
    let (mut gb, mut eb) = (bufs(10)?, bufs(10)?);
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let topos = [0usize, 1, 2, 0, 0, 1, 2, 2, 1, 0, 1, 2];
    for (i, &topo) in topos.iter().enumerate() {
        let (a, b) = (i % 4, (i * 3 + 1) % 4);
        gb.swap(a, b);
        eb.swap(a, b);
        let call = (topo, 17 * i as u32 + 1, i % 2 == 1, i % 3 == 1);
        variant(&mut cache, &stream, &k, call, &mut gb)?;
        variant(&mut eager, &stream, &k, call, &mut eb)?;
        for j in 0..4 {
            assert_same(
                &stream.clone_dtoh(&gb[j])?,
                &stream.clone_dtoh(&eb[j])?,
                &format!("call {i} {call:?}: buffer {j}"),
            );
        }
    }
    let s = cache.stats();
    let calls = topos.len() as u64;
    assert_eq!((s.builds, s.hits, s.launches, s.evictions), (3, calls - 3, calls, 0), "{s:?}");
    assert!(s.node_updates > 0, "{s:?}");
    assert_eq!(cache.len(), 3);
    let hits: u64 = cache.variant_hits().iter().map(|v| v.1).sum();
    assert_eq!(hits, calls - 3);
    let es = eager.stats();
    assert_eq!((es.eager_calls, es.builds, es.launches), (calls, 0, 0), "{es:?}");
    assert!(eager.is_empty());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Memoized execs: builder steps alternating between buffer sets.
// ---------------------------------------------------------------------------------------------

/// One step over a set of three buffers: `x` updated in place (so every call's result depends
/// on every earlier call of that set), `y` from `x`, a copy of `y` into `z`, and `x` mixed from
/// `z`: kernels and a copy only, so the builder's words cover the whole call.
fn memo_step(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Ops,
    n: u32,
    set: &mut [CudaSlice<u32>; 3],
) -> Result {
    let cfg = LaunchConfig::for_num_elems(n);
    let [x, y, z] = set;
    let mut g = cache.builder(stream);
    let (x, y, z) = (g.write(x), g.write(y), g.write(z));
    g.kernel(k.affine_inplace(n, 3, 1, x).launch(cfg));
    g.kernel(k.affine(n, 5, 2, x.read(), y).launch(cfg));
    g.copy(y.read(), z);
    g.kernel(k.mix(n, z.read(), x).launch(cfg));
    g.launch()
}

/// Builder steps alternating between two and then three sets of buffers over 100 calls (the
/// sets used in turn, as ping-pong buffers are), each call against the eager oracle on its own
/// copies of every set (exact): after two rounds every call is a memo hit, launching the exec
/// kept for its set with no node update and no build; one exec per set.
#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_steps_alternating_buffer_sets_launch_memoized_execs() -> Result {
    let _serial = common::serial();
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 50_000;
    for sets in [2usize, 3] {
        let make = |o: u32| -> Result<Vec<[CudaSlice<u32>; 3]>> {
            (0..sets as u32)
                .map(|s| {
                    let b = |j: u32| distinct(&stream, n as usize, o + 3 * s + j);
                    Ok([b(0)?, b(1)?, b(2)?])
                })
                .collect()
        };
        let (mut gb, mut eb) = (make(40)?, make(40)?);
        let mut cache = GraphCache::new();
        let mut eager = GraphCache::eager();
        let mut warm = None;
        for call in 0..100usize {
            let s = call % sets;
            memo_step(&mut cache, &stream, &k, n, &mut gb[s])?;
            memo_step(&mut eager, &stream, &k, n, &mut eb[s])?;
            for (j, (g, e)) in gb.iter().zip(&eb).enumerate() {
                for b in 0..3 {
                    let what = format!("{sets} sets, call {call}: set {j} buffer {b}");
                    assert_same(&stream.clone_dtoh(&g[b])?, &stream.clone_dtoh(&e[b])?, &what);
                }
            }
            if call == 2 * sets {
                warm = Some(cache.stats());
            }
        }
        let (w, st) = (warm.expect("warmed up"), cache.stats());
        assert_eq!(st.node_updates, w.node_updates, "{sets} sets: {st:?}");
        assert_eq!(st.memo_hits - w.memo_hits, 99 - 2 * sets as u64, "{sets} sets: {st:?}");
        let execs = (st.builds, st.memo_builds, cache.len());
        assert_eq!(execs, (sets as u64, sets as u64 - 1, sets), "{sets} sets: {st:?}");
        assert_eq!(st.launches, 100, "{st:?}");
    }
    Ok(())
}

/// One node whose kernel changes between calls to one with another parameter list (`affine`,
/// five parameters, and `mix`, three), in the same topology (a kernel reading `x` and writing
/// `y`), both orders: every call must equal the eager oracle, whether the cache updates the
/// node or treats the calls as two variants.
#[test]
#[ignore = "needs a CUDA GPU"]
fn kernel_with_another_parameter_list_in_the_same_node() -> Result {
    let _serial = common::serial();
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 40_000;
    let cfg = LaunchConfig::for_num_elems(n);
    let (mut x, mut y) = (distinct(&stream, n as usize, 1)?, distinct(&stream, n as usize, 2)?);
    let (mut ex, mut ey) = (x.clone(), y.clone());
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let uses_mix = [false, true, true, false, true, false];
    for (i, &use_mix) in uses_mix.iter().enumerate() {
        let seed = 5 * i as u32 + 2;
        for (c, x, y) in [(&mut cache, &mut x, &mut y), (&mut eager, &mut ex, &mut ey)] {
            let mut g = c.builder(&stream);
            let (xw, yw) = (g.write(x), g.write(y));
            g.kernel(k.iota(n, 3, seed, xw).launch(cfg));
            if use_mix {
                g.kernel(k.mix(n, xw.read(), yw).launch(cfg));
            } else {
                g.kernel(k.affine(n, 7, seed, xw.read(), yw).launch(cfg));
            }
            g.launch()?;
        }
        let got = stream.clone_dtoh(&y)?;
        assert_same(&got, &stream.clone_dtoh(&ey)?, &format!("call {i} (mix: {use_mix})"));
        let x = host::iota(n, 3, seed);
        let want = if use_mix { host::mix(&x) } else { host::affine(&x, 7, seed) };
        assert_same(&got, &want, &format!("call {i} (mix: {use_mix}): host model"));
    }
    let s = cache.stats();
    assert_eq!(s.launches, uses_mix.len() as u64, "{s:?}");
    assert_eq!(s.builds, 2, "two parameter lists: two variants; {s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. Copies with pinned host memory.
// ---------------------------------------------------------------------------------------------

/// Buffers of the pinned copy test: pinned input and outputs, device intermediates.
struct Pinned {
    pin_in: PinnedHostSlice<u32>,
    pin_out: PinnedHostSlice<u32>,
    pin_out2: PinnedHostSlice<u32>,
    slow: CudaSlice<u32>,
    d_in: CudaSlice<u32>,
    d_mid: CudaSlice<u32>,
    d_out: CudaSlice<u32>,
}

impl Pinned {
    fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, len: usize) -> Result<Pinned> {
        let pinned = || -> Result<PinnedHostSlice<u32>> {
            // SAFETY: filled right away, before any read of it.
            let mut p = unsafe { ctx.alloc_pinned::<u32>(len)? };
            p.as_mut_slice()?.fill(0x0bad_f00d);
            Ok(p)
        };
        let z = || stream.alloc_zeros::<u32>(len);
        Ok(Pinned {
            pin_in: pinned()?,
            pin_out: pinned()?,
            pin_out2: pinned()?,
            slow: z()?,
            d_in: z()?,
            d_mid: z()?,
            d_out: z()?,
        })
    }
}

/// Pinned host → device copy after a slow kernel (`after`), two kernels, device → pinned host
/// copy. Returns the builder's edges.
fn pinned_graph(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Ops,
    (n, spins, round): (u32, u32, u32),
    p: &mut Pinned,
) -> Result<Vec<(u32, u32)>> {
    let cfg = LaunchConfig::for_num_elems(n);
    let mut g = cache.builder(stream);
    let input = g.read(&p.pin_in);
    let (slow, d_in) = (g.write(&mut p.slow), g.write(&mut p.d_in));
    let (d_mid, d_out) = (g.write(&mut p.d_mid), g.write(&mut p.d_out));
    let output = g.write(&mut p.pin_out);
    let s = g.kernel(k.slow_iota(n, spins, 1, round, slow).launch(cfg));
    let c = g.copy(input, d_in);
    g.after(c, &[s]);
    g.kernel(k.affine(n, 3, round, d_in.read(), d_mid).launch(cfg));
    g.kernel(k.mix(n, d_mid.read(), d_out).launch(cfg));
    g.copy(d_out.read(), output);
    let mut edges = g.edges();
    edges.sort_unstable();
    g.launch()?;
    Ok(edges)
}

/// Host → device and device → host copies with pinned memory, compared with the eager oracle
/// and a host model. The host overwrites the pinned input right after `launch` returns, while
/// the graph's copy out of it waits behind a slow kernel: cudarc's event recorded by the launch
/// must make that write wait, so the result is still that of the old input. The pinned output
/// is swapped with another pinned buffer on odd rounds (a host pointer update).
#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_host_copies_both_ways() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let n: u32 = (1 << 16) + 3;
    let spins = 1u32 << 16;
    let (mut gp, mut ep) =
        (Pinned::new(&ctx, &stream, n as usize)?, Pinned::new(&ctx, &stream, n as usize)?);
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for round in 0..4u32 {
        if round % 2 == 1 {
            std::mem::swap(&mut gp.pin_out, &mut gp.pin_out2);
            std::mem::swap(&mut ep.pin_out, &mut ep.pin_out2);
        }
        let input: Vec<u32> =
            (0..n).map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(round)).collect();
        gp.pin_in.as_mut_slice()?.copy_from_slice(&input);
        ep.pin_in.as_mut_slice()?.copy_from_slice(&input);
        let edges = pinned_graph(&mut cache, &stream, &k, (n, spins, round), &mut gp)?;
        assert_eq!(edges, [(0, 1), (1, 2), (2, 3), (3, 4)], "the `after` edge, then data edges");
        // Must wait for the graph's copy out of `pin_in`.
        gp.pin_in.as_mut_slice()?.fill(0xdead_beef);
        // Must wait for the graph's copy into `pin_out`.
        let got = gp.pin_out.as_slice()?.to_vec();
        pinned_graph(&mut eager, &stream, &k, (n, spins, round), &mut ep)?;
        let want = ep.pin_out.as_slice()?.to_vec();
        assert_same(&got, &want, &format!("round {round}: graph vs eager oracle"));
        assert_same(
            &got,
            &host::mix(&host::affine(&input, 3, round)),
            &format!("round {round}: graph vs host model"),
        );
        assert_same(&stream.clone_dtoh(&gp.d_in)?, &input, &format!("round {round}: d_in"));
        assert_same(
            &stream.clone_dtoh(&gp.slow)?,
            &stream.clone_dtoh(&ep.slow)?,
            &format!("round {round}: slow kernel"),
        );
        // The other pinned output is untouched by this round.
        assert_same(gp.pin_out2.as_slice()?, ep.pin_out2.as_slice()?, "the other pinned output");
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.hits, s.launches), (1, 1, 3, 4), "{s:?}");
    // Per round after the first: slow_iota's and affine's `round` (6), and a pinned copy only
    // on the rounds its pointer changed (2): a copy's pinned host allocation is known by its
    // driver id (`kind::memcpy::host_unresolved`), so an unchanged one is not sent again.
    assert_eq!(s.node_updates, 8, "{s:?}, last refusal {:?}", cache.last_refusal());
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 4. `after` edges.
// ---------------------------------------------------------------------------------------------

/// Four kernels over three buffers with and without `after` edges: `edges()` is the transitive
/// reduction of the data hazards plus the `after` edges; `after` edges are part of the topology
/// (two builds, then hits); results equal eager cudarc launches. An empty builder launches too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn after_edges_and_edges_of_a_real_builder() -> Result {
    let _serial = common::serial();
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 100_003;
    let cfg = LaunchConfig::for_num_elems(n);
    let (mut x, mut y, mut z) = (
        distinct(&stream, n as usize, 1)?,
        distinct(&stream, n as usize, 2)?,
        distinct(&stream, n as usize, 3)?,
    );
    let (mut ex, mut ey, mut ez) = (x.clone(), y.clone(), z.clone());
    let mut cache = GraphCache::new();
    for (call, with_after) in [false, true, true, false, true].into_iter().enumerate() {
        let call = call as u32;
        let mut g = cache.builder(&stream);
        let (xw, yw, zw) = (g.write(&mut x), g.write(&mut y), g.write(&mut z));
        let a = g.kernel(k.iota(n, 3, call, xw).launch(cfg));
        let b = g.kernel(k.iota(n, 5, call, yw).launch(cfg));
        let c = g.kernel(k.affine(n, 7, 1, yw.read(), zw).launch(cfg));
        let d = g.kernel(k.affine_inplace(n, 1, 2, xw).launch(cfg));
        assert_eq!([a.index(), b.index(), c.index(), d.index()], [0, 1, 2, 3]);
        let mut edges = g.edges();
        edges.sort_unstable();
        assert_eq!(edges, [(0, 3), (1, 2)], "data hazards only");
        if with_after {
            g.after(c, &[a]);
            g.after(d, &[b, c]);
            let mut edges = g.edges();
            edges.sort_unstable();
            // (0, 3) and (1, 3) are implied by 0 → 2 → 3 and 1 → 2 → 3.
            assert_eq!(edges, [(0, 2), (1, 2), (2, 3)], "with `after` edges");
        }
        g.launch()?;
        launch!(stream, k, "iota", cfg; &n, &3u32, &call, &mut ex)?;
        launch!(stream, k, "iota", cfg; &n, &5u32, &call, &mut ey)?;
        launch!(stream, k, "affine", cfg; &n, &7u32, &1u32, &ey, &mut ez)?;
        launch!(stream, k, "affine_inplace", cfg; &n, &1u32, &2u32, &mut ex)?;
        for (name, got, want) in [("x", &x, &ex), ("y", &y, &ey), ("z", &z, &ez)] {
            assert_same(
                &stream.clone_dtoh(got)?,
                &stream.clone_dtoh(want)?,
                &format!("call {call} (after: {with_after}): {name}"),
            );
        }
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.hits, s.launches), (2, 3, 5), "{s:?}");
    assert_eq!(cache.len(), 2);

    // An empty builder is an empty graph: it builds, launches and changes nothing.
    let before = stream.clone_dtoh(&x)?;
    let mut empty = GraphCache::new();
    let g = empty.builder(&stream);
    assert!(g.is_empty() && g.edges().is_empty());
    g.launch()?;
    assert_same(&stream.clone_dtoh(&x)?, &before, "after an empty graph");
    let s = empty.stats();
    assert_eq!((s.builds, s.launches), (1, 1), "{s:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 5. Bad input through the real API.
// ---------------------------------------------------------------------------------------------

const N: u32 = 4096;

/// A cache with buffers `x` and `y` and their eager twins, for the bad-input tests.
struct Fixture {
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    k: Ops,
    x: CudaSlice<u32>,
    y: CudaSlice<u32>,
    ex: CudaSlice<u32>,
    ey: CudaSlice<u32>,
    cache: GraphCache,
    good_calls: u64,
}

impl Fixture {
    fn new() -> Result<Fixture> {
        let (ctx, stream, k) = gpu()?;
        let f = |i| distinct(&stream, N as usize, i);
        let (x, y, ex, ey) = (f(1)?, f(2)?, f(1)?, f(2)?);
        let cache = GraphCache::new();
        Ok(Fixture { _ctx: ctx, stream, k, x, y, ex, ey, cache, good_calls: 0 })
    }

    /// A good call on the fixture's cache (x = iota(3, b), y = affine(x, 5, 1)), compared with
    /// eager cudarc launches.
    fn good(&mut self, b: u32) -> Result {
        let cfg = LaunchConfig::for_num_elems(N);
        let mut g = self.cache.builder(&self.stream);
        let (x, y) = (g.write(&mut self.x), g.write(&mut self.y));
        g.kernel(self.k.iota(N, 3, b, x).launch(cfg));
        g.kernel(self.k.affine(N, 5, 1, x.read(), y).launch(cfg));
        g.launch()?;
        launch!(self.stream, self.k, "iota", cfg; &N, &3u32, &b, &mut self.ex)?;
        launch!(self.stream, self.k, "affine", cfg; &N, &5u32, &1u32, &self.ex, &mut self.ey)?;
        self.same(&format!("good call {b}"))?;
        assert_same(&self.stream.clone_dtoh(&self.x)?, &host::iota(N, 3, b), "x vs host model");
        self.good_calls += 1;
        Ok(())
    }

    /// x and y equal their eager twins: after a refused call, what the last good call left.
    fn same(&self, what: &str) -> Result {
        assert_same(
            &self.stream.clone_dtoh(&self.x)?,
            &self.stream.clone_dtoh(&self.ex)?,
            &format!("{what}: x"),
        );
        assert_same(
            &self.stream.clone_dtoh(&self.y)?,
            &self.stream.clone_dtoh(&self.ey)?,
            &format!("{what}: y"),
        );
        Ok(())
    }

    /// Runs `bad` (which returns the refused call's result) in both modes, each between two
    /// good calls: nothing of the bad call may run, and the cache must work afterwards.
    fn refused(
        &mut self,
        mut bad: impl FnMut(&mut Fixture) -> (Result, u32),
        check: impl Fn(&Error, u32),
    ) -> Result {
        for mode in [Mode::Graph, Mode::Eager] {
            self.cache.set_mode(mode);
            let before = self.cache.stats();
            self.good(1)?;
            let (r, line) = bad(self);
            match r {
                Ok(()) => panic!("{mode:?}: the bad call must be refused"),
                Err(e) => check(&e, line),
            }
            self.same(&format!("{mode:?}: after the refused call"))?;
            self.good(2)?;
            let s = self.cache.stats();
            match mode {
                Mode::Graph => assert_eq!(s.launches - before.launches, 2, "{s:?}"),
                _ => assert_eq!(s.eager_calls - before.eager_calls, 2, "{s:?}"),
            }
        }
        Ok(())
    }
}

/// The site of a node error.
fn site(e: &Error) -> NodeSite {
    match e {
        Error::InvalidNode { site, .. }
        | Error::CopyLength { site, .. }
        | Error::ZeroDims { site, .. }
        | Error::Node { site, .. } => *site,
        other => panic!("expected a node error, got {other:?}"),
    }
}

/// Asserts `e` names node `label` at `line` of this file.
#[track_caller]
fn names(e: &Error, label: &str, line: u32) {
    let s = site(e);
    assert_eq!((s.label, s.line), (label, line), "{e}");
    assert!(s.file.ends_with("builder.rs"), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("node `{label}`")) && msg.contains(&format!("builder.rs:{line}:")),
        "{msg}"
    );
}

/// Asserts `e` is `Error::InvalidNode` naming `label` at `line`, saying `why`.
#[track_caller]
fn invalid(e: &Error, label: &str, line: u32, why: &str) {
    match e {
        Error::InvalidNode { why: w, .. } => assert!(w.contains(why), "{e}"),
        other => panic!("expected Error::InvalidNode, got {other:?}"),
    }
    names(e, label, line);
}

/// A buffer handle of another builder (two builders over two caches alive at once) is refused;
/// the other builder is unaffected and launches.
#[test]
#[ignore = "needs a CUDA GPU"]
fn handle_of_another_builder_is_refused() -> Result {
    let _serial = common::serial();
    let mut f = Fixture::new()?;
    let mut other = GraphCache::new();
    let mut spare = f.stream.alloc_zeros::<u32>(N as usize)?;
    let mut e_spare = f.stream.alloc_zeros::<u32>(N as usize)?;
    let cfg = LaunchConfig::for_num_elems(N);
    let mut round = 0u32;
    f.refused(
        |f| {
            round += 1;
            let mut g1 = other.builder(&f.stream);
            let mut g2 = f.cache.builder(&f.stream);
            let foreign = g1.write(&mut spare);
            let y = g2.write(&mut f.y);
            g2.kernel(f.k.iota(N, 3, 99, y).launch(cfg)); // would change y
            let line = line!() + 1;
            g2.kernel(f.k.affine(N, 1, 2, foreign.read(), y).launch(cfg));
            let r = g2.launch();
            g1.kernel(f.k.iota(N, 1, round, foreign).launch(cfg));
            g1.launch().expect("the other builder is unaffected");
            (r, line)
        },
        |e, line| invalid(e, "affine", line, "not registered with this GraphBuilder"),
    )?;
    launch!(f.stream, f.k, "iota", cfg; &N, &1u32, &round, &mut e_spare)?;
    assert_same(&f.stream.clone_dtoh(&spare)?, &f.stream.clone_dtoh(&e_spare)?, "other builder");
    assert_eq!(other.stats().launches, 2, "the other builder launched in both rounds");
    Ok(())
}

/// One buffer passed twice to one node with a write (`w.read()` and `w` to a kernel; a copy
/// onto itself) is refused; read twice is allowed.
#[test]
#[ignore = "needs a CUDA GPU"]
fn one_buffer_twice_in_one_node_with_a_write_is_refused() -> Result {
    let _serial = common::serial();
    let mut f = Fixture::new()?;
    let cfg = LaunchConfig::for_num_elems(N);
    let why = "passed twice to one node, and written";
    f.refused(
        |f| {
            let mut g = f.cache.builder(&f.stream);
            let (x, y) = (g.write(&mut f.x), g.write(&mut f.y));
            g.kernel(f.k.iota(N, 3, 99, x).launch(cfg)); // would change x
            let line = line!() + 1;
            g.kernel(f.k.affine(N, 1, 2, y.read(), y).launch(cfg));
            (g.launch(), line)
        },
        |e, line| invalid(e, "affine", line, why),
    )?;
    f.refused(
        |f| {
            let mut g = f.cache.builder(&f.stream);
            let y = g.write(&mut f.y);
            g.kernel(f.k.iota(N, 3, 99, y).launch(cfg));
            let line = line!() + 1;
            g.copy(y.read(), y);
            (g.launch(), line)
        },
        |e, line| invalid(e, "copy", line, why),
    )?;
    // One buffer read twice by one node is fine: out = x + 2 x[rev] + (x ^ c).
    let mut out = f.stream.alloc_zeros::<u32>(N as usize)?;
    let mut e_out = f.stream.alloc_zeros::<u32>(N as usize)?;
    let mut g = f.cache.builder(&f.stream);
    let (x, o) = (g.read(&f.x), g.write(&mut out));
    g.kernel(f.k.combine3(N, x, x, x, o).launch(cfg));
    g.launch()?;
    launch!(f.stream, f.k, "combine3", cfg; &N, &f.ex, &f.ex, &f.ex, &mut e_out)?;
    assert_same(&f.stream.clone_dtoh(&out)?, &f.stream.clone_dtoh(&e_out)?, "x read three times");
    Ok(())
}

/// `after` naming a later node, the node itself, or a node of another builder, and `after` on a
/// node of another builder, are refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn after_that_is_not_an_earlier_node_of_this_builder_is_refused() -> Result {
    let _serial = common::serial();
    let mut f = Fixture::new()?;
    let cfg = LaunchConfig::for_num_elems(N);
    // A later node: the error names the node given first and the `after` call's location.
    f.refused(
        |f| {
            let mut g = f.cache.builder(&f.stream);
            let (x, y) = (g.write(&mut f.x), g.write(&mut f.y));
            let n0 = g.kernel(f.k.iota(N, 3, 99, x).launch(cfg));
            let n1 = g.kernel(f.k.affine(N, 1, 2, x.read(), y).launch(cfg));
            let line = line!() + 1;
            g.after(n0, &[n1]);
            (g.launch(), line)
        },
        |e, line| invalid(e, "iota", line, "which is not earlier than this node"),
    )?;
    // The node itself.
    f.refused(
        |f| {
            let mut g = f.cache.builder(&f.stream);
            let (x, y) = (g.write(&mut f.x), g.write(&mut f.y));
            g.kernel(f.k.iota(N, 3, 99, x).launch(cfg));
            let n1 = g.kernel(f.k.affine(N, 1, 2, x.read(), y).launch(cfg));
            let line = line!() + 1;
            g.after(n1, &[n1]);
            (g.launch(), line)
        },
        |e, line| invalid(e, "affine", line, "not earlier"),
    )?;
    // Nodes of another builder, in either place: named in `after` (the error names this
    // builder's node), or given as the node (the error can only name the `after` call).
    let mut other = GraphCache::new();
    let mut spare = f.stream.alloc_zeros::<u32>(N as usize)?;
    for foreign_is_the_node in [false, true] {
        f.refused(
            |f| {
                let mut g1 = other.builder(&f.stream);
                let s = g1.write(&mut spare);
                let foreign = g1.zero(s);
                let mut g = f.cache.builder(&f.stream);
                let x = g.write(&mut f.x);
                let n0 = g.kernel(f.k.iota(N, 3, 99, x).launch(cfg));
                let (node, earlier) =
                    if foreign_is_the_node { (foreign, n0) } else { (n0, foreign) };
                let line = line!() + 1;
                g.after(node, &[earlier]);
                (g.launch(), line)
            },
            |e, line| {
                if foreign_is_the_node {
                    invalid(e, "after", line, "`after` on a node of another GraphBuilder")
                } else {
                    invalid(e, "iota", line, "names a node of another GraphBuilder")
                }
            },
        )?;
    }
    assert!(other.stats().launches == 0 && other.stats().eager_calls == 0);
    Ok(())
}

/// A copy between buffers of different lengths is `Error::CopyLength`, naming the copy.
#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_length_mismatch_is_refused() -> Result {
    let _serial = common::serial();
    let mut f = Fixture::new()?;
    let mut short = f.stream.alloc_zeros::<u32>(N as usize / 2)?;
    let cfg = LaunchConfig::for_num_elems(N);
    f.refused(
        |f| {
            let mut g = f.cache.builder(&f.stream);
            let (x, s) = (g.write(&mut f.x), g.write(&mut short));
            g.kernel(f.k.iota(N, 3, 99, x).launch(cfg));
            let line = line!() + 1;
            g.copy(x.read(), s);
            (g.launch(), line)
        },
        |e, line| {
            assert!(
                matches!(e, Error::CopyLength { src, dst, .. } if (*src, *dst) == (N as usize, N as usize / 2)),
                "{e}"
            );
            names(e, "copy", line);
        },
    )?;
    assert!(f.stream.clone_dtoh(&short)?.iter().all(|&v| v == 0), "nothing was copied");
    Ok(())
}

/// A launch with a zero grid is `Error::ZeroDims`, naming the kernel.
#[test]
#[ignore = "needs a CUDA GPU"]
fn zero_grid_is_refused() -> Result {
    let _serial = common::serial();
    let mut f = Fixture::new()?;
    let cfg = LaunchConfig::for_num_elems(N);
    f.refused(
        |f| {
            let mut g = f.cache.builder(&f.stream);
            let (x, y) = (g.write(&mut f.x), g.write(&mut f.y));
            g.kernel(f.k.iota(N, 3, 99, x).launch(cfg));
            let line = line!() + 1;
            g.kernel(f.k.affine(N, 1, 2, x.read(), y).launch((0, 256)));
            (g.launch(), line)
        },
        |e, line| {
            assert!(
                matches!(e, Error::ZeroDims { grid: (0, 1, 1), block: (256, 1, 1), .. }),
                "{e}"
            );
            names(e, "affine", line);
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 6. One cache used by `graph!` and by builders.
// ---------------------------------------------------------------------------------------------

/// `graph!` and a builder making the same work, on one cache in turns: each switch drops the
/// other's graphs and builds anew, repeats hit, and every result equals eager cudarc launches.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_macro_and_builder_share_a_cache() -> Result {
    let _serial = common::serial();
    let (_ctx, stream, k) = gpu()?;
    let n: u32 = 65_537;
    let cfg = LaunchConfig::for_num_elems(n);
    let z = || stream.alloc_zeros::<u32>(n as usize);
    let (mut x, mut y, mut ex, mut ey) = (z()?, z()?, z()?, z()?);
    let mut cache = GraphCache::new();
    // (use the builder, (builds, hits) after the call)
    let calls = [
        (false, (1, 0)),
        (true, (2, 0)),
        (true, (2, 1)),
        (false, (3, 1)),
        (false, (3, 2)),
        (true, (4, 2)),
    ];
    for (i, &(builder, want)) in calls.iter().enumerate() {
        let seed = 11 * i as u32 + 1;
        if builder {
            let mut g = cache.builder(&stream);
            let (xw, yw) = (g.write(&mut x), g.write(&mut y));
            g.kernel(k.iota(n, 3, seed, xw).launch(cfg));
            g.kernel(k.mix(n, xw.read(), yw).launch(cfg));
            g.launch()?;
        } else {
            graph!(&mut cache, &stream, {
                k.iota(n, 3, seed, &mut x).launch(cfg);
                k.mix(n, &x, &mut y).launch(cfg);
            })?;
        }
        launch!(stream, k, "iota", cfg; &n, &3u32, &seed, &mut ex)?;
        launch!(stream, k, "mix", cfg; &n, &ex, &mut ey)?;
        let got = stream.clone_dtoh(&y)?;
        assert_same(&got, &stream.clone_dtoh(&ey)?, &format!("call {i} (builder: {builder})"));
        assert_same(&got, &host::mix(&host::iota(n, 3, seed)), &format!("call {i}: host model"));
        let s = cache.stats();
        assert_eq!((s.builds, s.hits), want, "call {i} (builder: {builder}): {s:?}");
        assert_eq!(cache.len(), 1, "call {i}: the other call site's graphs were dropped");
        assert_eq!(cache.plan().is_some(), !builder, "call {i}");
    }
    Ok(())
}

/// With cudarc's event tracking on but a single stream (no `new_stream()`), cudarc records no
/// event for a pinned buffer, so nothing would make `as_slice` wait for the graph's copy; the
/// builder's guard records it itself after the launch. The pinned output, read right
/// after each call with no explicit synchronization, must hold the slow kernel's result (the
/// same as an eager cudarc launch and the host model), never the stale fill.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_output_is_ready_after_the_call_on_a_single_stream() -> Result {
    let _serial = common::serial();
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { Ops::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx(common::SOURCE)?) }?;
    assert!(ctx.is_event_tracking() && !ctx.is_managing_stream_synchronization());
    let (n, spins) = (1u32 << 16, 20_000u32);
    let cfg = LaunchConfig::for_num_elems(n);
    let mut x = stream.alloc_zeros::<u32>(n as usize)?;
    let mut e = stream.alloc_zeros::<u32>(n as usize)?;
    // SAFETY: filled before any read.
    let mut out = unsafe { ctx.alloc_pinned::<u32>(n as usize)? };
    let mut cache = GraphCache::new();
    for round in 0..3u32 {
        out.as_mut_slice()?.fill(0x0bad_f00d);
        let (a, b) = (3 + round, 7 * round);
        let mut g = cache.builder(&stream);
        let (xw, ow) = (g.write(&mut x), g.write(&mut out));
        g.kernel(k.slow_iota(n, spins, a, b, xw).launch(cfg));
        g.copy(xw.read(), ow);
        g.launch()?;
        let got = out.as_slice()?.to_vec(); // no synchronize: the guard's job
        launch!(stream, k, "slow_iota", cfg; &n, &spins, &a, &b, &mut e)?;
        let want = stream.clone_dtoh(&e)?;
        assert_same(&got, &want, &format!("round {round}: pinned output vs eager launch"));
        let model: Vec<u32> = host::iota(n, a, b)
            .into_iter()
            .map(|v| (0..spins).fold(v, |v, _| v.wrapping_mul(1664525).wrapping_add(1013904223)))
            .collect();
        assert_same(&got, &model, &format!("round {round}: pinned output vs host model"));
    }
    assert_eq!(cache.stats().builds, 1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 7. Captured work: `GraphBuilder::capture`.
// ---------------------------------------------------------------------------------------------

/// Buffers of [`captured_step`].
struct Captured {
    x: CudaSlice<u32>,
    y: CudaSlice<u32>,
    z: CudaSlice<u32>,
    out: CudaSlice<u32>,
}

impl Captured {
    fn new(stream: &Arc<CudaStream>, k: u32) -> Result<Captured> {
        let f = |i| distinct(stream, N as usize, k + i);
        Ok(Captured { x: f(0)?, y: f(1)?, z: f(2)?, out: f(3)? })
    }
}

/// One step: a kernel node writes `x` from `seed`; a captured region (two cudarc launches and a
/// memcpy, and when `extra` a third launch: a recording of another topology) reads `x` and
/// writes `y` and `z`; a kernel node after it reads `z` into `out`. Returns the builder's edges.
fn captured_step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Ops,
    (seed, extra): (u32, bool),
    b: &mut Captured,
) -> Result<Vec<(u32, u32)>> {
    let cfg = LaunchConfig::for_num_elems(N);
    let mut g = cache.builder(stream);
    let (x, y) = (g.write(&mut b.x), g.write(&mut b.y));
    let (z, out) = (g.write(&mut b.z), g.write(&mut b.out));
    g.kernel(k.iota(N, 3, seed, x).launch(cfg));
    let c = g.capture(
        stream,
        (x.read(), y, z),
        move |s, (x, mut y, mut z)| -> std::result::Result<(), cudagraph::Error> {
            // SAFETY: the kernels read N elements of x and write N of y and z, listed views
            // (`&mut` where written), on the joined stream.
            let st = unsafe { s.stream() };
            // SAFETY: used on `st`, joined above.
            let (xv, yv) = unsafe { (x.as_cuda_view(), y.as_cuda_view_mut()) };
            launch!(st, k, "affine", cfg; &N, &5u32, &seed, xv, yv)?;
            s.copy(&y, &mut z)?;
            launch!(st, k, "affine_inplace", cfg; &N, &7u32, &1u32, unsafe { z.as_cuda_view_mut() })?;
            if extra {
                // SAFETY: as above.
                let zv = unsafe { z.as_cuda_view_mut() };
                launch!(st, k, "affine_inplace", cfg; &N, &3u32, &2u32, zv)?;
            }
            Ok(())
        },
    );
    assert_eq!(c.index(), 1);
    g.kernel(k.mix(N, z.read(), out).launch(cfg));
    let mut edges = g.edges();
    edges.sort_unstable();
    g.launch()?;
    Ok(edges)
}

/// The host model of [`captured_step`]: `(x, y, z, out)`.
fn captured_model(seed: u32, extra: bool) -> [Vec<u32>; 4] {
    let x = host::iota(N, 3, seed);
    let y = host::affine(&x, 5, seed);
    let mut z = y.clone();
    host::affine_inplace(&mut z, 7, 1);
    if extra {
        host::affine_inplace(&mut z, 3, 2);
    }
    let out = host::mix(&z);
    [x, y, z, out]
}

/// `b`'s buffers equal the host model `want`.
fn captured_check(stream: &Arc<CudaStream>, b: &Captured, want: &[Vec<u32>; 4], what: &str) {
    let got = [&b.x, &b.y, &b.z, &b.out].map(|s| stream.clone_dtoh(s).expect("copy back"));
    for ((got, want), name) in got.iter().zip(want).zip(["x", "y", "z", "out"]) {
        assert_same(got, want, &format!("{what}: {name}"));
    }
}

/// A kernel node, a captured region and a kernel node after it, with two sets of buffers swapped
/// between launches (every pointer changes every call) and a new seed every call, in cudarc's
/// multi-stream mode: equal to the same builder code run eagerly ([`Mode::Eager`], the closure
/// run directly on the stream) and to the host model after every call. One build; each later
/// call re-records the region and sets its child graph and the two kernels' parameters.
#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_region_between_kernels_with_swapped_buffers_matches_eager_and_the_host_model() -> Result
{
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let _other = ctx.new_stream()?; // multi-stream mode: cudarc's events are on
    assert!(ctx.is_managing_stream_synchronization());
    let (mut a, mut b) = (Captured::new(&stream, 10)?, Captured::new(&stream, 20)?);
    let mut e = Captured::new(&stream, 30)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let calls = 6u32;
    for call in 0..calls {
        let seed = 11 + call;
        let edges = captured_step(&mut cache, &stream, &k, (seed, false), &mut a)?;
        assert_eq!(edges, [(0, 1), (1, 2)], "kernel → capture → kernel");
        captured_step(&mut eager, &stream, &k, (seed, false), &mut e)?;
        let want = captured_model(seed, false);
        captured_check(&stream, &a, &want, &format!("graph, call {call}"));
        captured_check(&stream, &e, &want, &format!("eager, call {call}"));
        std::mem::swap(&mut a, &mut b);
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches, cache.len()), (1, 1, 6, 1), "{s:?}");
    assert_eq!((s.node_updates, s.exec_updates, s.reinstantiations), (15, 0, 0), "{s:?}");
    assert_eq!(s.captures, u64::from(calls), "recorded on every launch: {s:?}");
    let es = eager.stats();
    assert_eq!((es.eager_calls, es.captures, es.launches), (6, 0, 0), "{es:?}");
    ctx.check_err()?;
    Ok(())
}

/// What the closure records changes topology (3 → 4 → 4 → 3 nodes) while the builder's nodes
/// stay the same: still one builder variant; the child graph's set-params is refused and the
/// ladder updates the whole exec or re-instantiates it, and every result is right.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recording_of_another_topology_keeps_one_builder_variant_and_stays_right() -> Result {
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let mut a = Captured::new(&stream, 10)?;
    let mut e = Captured::new(&stream, 30)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for (call, extra) in [false, true, true, false].into_iter().enumerate() {
        let seed = 5 + call as u32;
        captured_step(&mut cache, &stream, &k, (seed, extra), &mut a)?;
        captured_step(&mut eager, &stream, &k, (seed, extra), &mut e)?;
        let want = captured_model(seed, extra);
        captured_check(&stream, &a, &want, &format!("graph, call {call}"));
        captured_check(&stream, &e, &want, &format!("eager, call {call}"));
    }
    let s = cache.stats();
    assert_eq!(cache.len(), 1, "the recording is not part of the builder's variant: {s:?}");
    assert!(s.exec_updates + s.reinstantiations >= 2, "{s:?}");
    assert!(cache.last_refusal().is_some());
    assert_eq!(s.captures, 4, "{s:?}");
    ctx.check_err()?;
    Ok(())
}

/// `capture` given a stream other than the builder's is `Error::InvalidNode` at launch, naming
/// the node `capture` and the line of the call; nothing of the call runs, in both modes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_on_another_stream_than_the_builders_is_refused() -> Result {
    let _serial = common::serial();
    let mut f = Fixture::new()?;
    let other = f._ctx.new_stream()?;
    let cfg = LaunchConfig::for_num_elems(N);
    f.refused(
        |f| {
            let mut g = f.cache.builder(&f.stream);
            let (x, y) = (g.write(&mut f.x), g.write(&mut f.y));
            g.kernel(f.k.iota(N, 3, 99, x).launch(cfg)); // would change x
            let line = line!() + 1;
            g.capture(&other, (x.read(), y), |s, (x, mut y)| s.copy(&x, &mut y));
            (g.launch(), line)
        },
        |e, line| invalid(e, "capture", line, "not this GraphBuilder's stream"),
    )?;
    assert_eq!(f.cache.stats().captures, 0, "never recorded");
    Ok(())
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error returned by the closure is `Error::Capture` naming the `capture` call's line, with
/// nothing enqueued (the kernel node before it did not run), the stream no longer capturing and
/// the cache usable.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_error_of_the_captured_closure_names_the_call_and_enqueues_nothing() -> Result {
    let _serial = common::serial();
    let mut f = Fixture::new()?;
    f.good(1)?;
    let launches = f.cache.stats().launches;
    let cfg = LaunchConfig::for_num_elems(N);
    let mut g = f.cache.builder(&f.stream);
    let (x, y) = (g.write(&mut f.x), g.write(&mut f.y));
    g.kernel(f.k.iota(N, 3, 99, x).launch(cfg)); // would change x
    let line = line!() + 1;
    g.capture(&f.stream, (x.read(), y), |_, _| -> std::result::Result<(), BoxError> {
        Err("own error".into())
    });
    let err = g.launch().expect_err("the closure failed");
    match &err {
        Error::Capture { file, line: l, source } => {
            assert!(file.ends_with("builder.rs"), "{err}");
            assert_eq!(*l, line, "{err}");
            assert_eq!(source.to_string(), "own error");
        }
        other => panic!("expected Error::Capture, got {other}"),
    }
    assert_eq!(f.cache.stats().launches, launches);
    assert_eq!(f.stream.capture_status()?, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE);
    f.same("after the closure's error")?;
    f.good(2)?;
    Ok(())
}
