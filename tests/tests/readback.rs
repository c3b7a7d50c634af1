//! Readback nodes: `graph!`'s small `copy` (and `copy_2d` of contiguous rows) from device memory
//! into pinned host memory, at most `MAX_READBACK_BYTES`, is a kernel node of the crate's
//! readback kernel instead of a memcpy node. Each result is compared exactly with the same
//! statements run by the eager oracle (`Mode::Eager`, which launches the same kernel) and with a
//! host model; the node kinds with the driver's own view (`graph_info`). `slow_iota` runs a few
//! milliseconds on an H200, so a readback that does not wait for its producer, or a read that
//! does not wait for the readback, shows as wrong data.

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, CudaView, LaunchConfig, PinnedHostSlice};
use cudagraph::{GraphCache, GraphNodeKind, MAX_READBACK_BYTES, Mode, PinnedBuffer, Rows, graph};

/// Steps of the slow kernel: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg(n: u32) -> LaunchConfig {
    LaunchConfig::for_num_elems(n)
}

/// `y = slow_iota(7, b)`, then `y` copied to `out`.
fn produce(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    y: &mut CudaSlice<u32>,
    out: &mut PinnedBuffer<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    let n = y.len() as u32;
    graph!(cache, s, {
        k.slow_iota(n, SPINS, 7, b, &mut *y).launch(cfg(n));
        copy(&*y, &mut *out);
    })
}

/// The driver's node kinds of `cache`'s last variant: (kernel nodes, memcpy nodes).
fn kinds(cache: &GraphCache) -> Result<(usize, usize)> {
    let info = cache.graph_info()?.expect("a launched variant");
    let count = |k: GraphNodeKind| info.nodes.iter().filter(|n| n.kind == k).count();
    Ok((count(GraphNodeKind::Kernel), count(GraphNodeKind::Memcpy)))
}

/// A step: `y = slow_iota(7, b)`, then `y` copied to `out` (by `graph!` or a `GraphBuilder`).
type Produce = fn(
    &mut GraphCache,
    &Ops,
    &Arc<CudaStream>,
    &mut CudaSlice<u32>,
    &mut PinnedBuffer<u32>,
    u32,
) -> cudagraph::Result<()>;

/// A length's step: its length, kernels, stream and cache.
type Step<'a> = (usize, &'a Ops, &'a Arc<CudaStream>, &'a mut GraphCache);

/// For lengths around the bound: `produce`'s slow kernel, then its result read back into one of
/// two `PinnedBuffer`s alternated per call, the scalar changed every third call; read with
/// `as_slice` right after the call. Up to 4 KiB the copy is a kernel node (the driver's graph
/// has two kernel nodes), one element more and it is a memcpy node; results are those of eager
/// mode and of the host model either way. `then((len, kernels, stream, cache), y, outs)` checks
/// more after the twelve calls.
fn reads_at_every_size(
    produce: Produce,
    mut then: impl FnMut(Step<'_>, &mut CudaSlice<u32>, &mut [PinnedBuffer<u32>; 2]) -> Result,
) -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let most = MAX_READBACK_BYTES / 4;
    assert_eq!(most, 1024, "the documented bound");
    for len in [1usize, 3, 2 * 128 + 1, most, most + 1] {
        let mut y = s.alloc_zeros::<u32>(len)?;
        let mut outs = [PinnedBuffer::<u32>::zeros(&s, len)?, PinnedBuffer::<u32>::zeros(&s, len)?];
        let mut cache = GraphCache::new();
        let mut eager = GraphCache::new();
        eager.set_mode(Mode::Eager);
        let mut y_eager = s.alloc_zeros::<u32>(len)?;
        let mut out_eager = PinnedBuffer::<u32>::zeros(&s, len)?;
        for call in 0..12u32 {
            let b = call / 3;
            let o = &mut outs[call as usize % 2];
            produce(&mut cache, &k, &s, &mut y, o, b)?;
            let got = o.as_slice()?.to_vec();
            produce(&mut eager, &k, &s, &mut y_eager, &mut out_eager, b)?;
            let want = out_eager.as_slice()?.to_vec();
            let what = format!("{len} elements, call {call}");
            assert_same(&got, &want, &format!("{what}: against eager"));
            assert_same(&got, &host::slow_iota(len as u32, SPINS, 7, b), &format!("{what}: model"));
        }
        let want = if len <= most { (2, 0) } else { (1, 1) };
        assert_eq!(kinds(&cache)?, want, "{len} elements: (kernel, memcpy) nodes");
        then((len, &k, &s, &mut cache), &mut y, &mut outs)?;
    }
    Ok(())
}

/// [`reads_at_every_size`] with `graph!`; each length's cache memoized or updated its copy.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_readback_after_a_slow_kernel_matches_eager_at_every_size() -> Result {
    reads_at_every_size(produce, |(len, _, _, cache), _, _| {
        let st = cache.stats();
        assert!(st.memo_hits > 0 || st.node_updates > 0, "{len}: {st:?}");
        Ok(())
    })
}

/// `copy(src, out)` of a view, as the only statement.
fn read<'a>(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    src: CudaView<'a, u8>,
    out: &mut PinnedHostSlice<u8>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        copy(&src, &mut *out);
    })
}

/// Views at every alignment (so words of 8, 4, 2 and 1 bytes), read back into cudarc's pinned
/// memory: one cache whose source view moves between calls (the kernel node's arguments are
/// updated), each result equal to the bytes the view names and to eager mode's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn views_at_every_alignment_read_back_their_own_bytes() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    let bytes: Vec<u8> = (0..256u32).map(|i| (i * 37 + 11) as u8).collect();
    let src = s.clone_htod(&bytes)?;
    let mut out = common::pinned::<u8>(&ctx, 8)?;
    let mut out_eager = common::pinned::<u8>(&ctx, 8)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for (call, at) in [0usize, 1, 2, 4, 8, 3, 6, 0, 5, 248].into_iter().enumerate() {
        out.as_mut_slice()?.fill(0xee);
        read(&mut cache, &s, src.slice(at..at + 8), &mut out)?;
        read(&mut eager, &s, src.slice(at..at + 8), &mut out_eager)?;
        s.synchronize()?;
        let what = format!("call {call}, offset {at}");
        assert_same(out.as_slice()?, &bytes[at..at + 8], &format!("{what}: model"));
        assert_same(out.as_slice()?, out_eager.as_slice()?, &format!("{what}: eager"));
    }
    assert_eq!(kinds(&cache)?, (1, 0), "a readback node");
    assert_eq!(cache.stats().builds, 1, "{:?}", cache.stats());
    // Odd lengths at odd offsets, each its own cache.
    for (at, len) in [(1usize, 1usize), (3, 7), (2, 6), (5, 13), (0, 255), (1, 255)] {
        let mut o = common::pinned::<u8>(&ctx, len)?;
        let mut c = GraphCache::new();
        read(&mut c, &s, src.slice(at..at + len), &mut o)?;
        s.synchronize()?;
        assert_same(o.as_slice()?, &bytes[at..at + len], &format!("{len} bytes at {at}"));
        assert_eq!(kinds(&c)?, (1, 0), "{len} bytes at {at}: a readback node");
    }
    Ok(())
}

/// `copy_2d` into pinned memory: dense rows and one row from a later row are readback nodes,
/// rows with gaps stay a 2-D memcpy node; each equal to the host model and to eager mode.
#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_2d_of_contiguous_rows_is_a_readback_and_gapped_rows_are_not() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let (w, h) = (16usize, 4usize);
    let n = (w * h) as u32;
    let cases = [
        ("dense", Rows::dense(w, h), Rows::dense(w, h), (2, 0)),
        ("one row", Rows::new(w, 1, w).from_row(2), Rows::new(w, 1, w), (2, 0)),
        ("gapped", Rows::new(w - 4, h, w), Rows::new(w - 4, h, w - 4), (1, 1)),
    ];
    for (name, sr, dr, want_kinds) in cases {
        let run = |cache: &mut GraphCache, y: &mut CudaSlice<u32>, o: &mut PinnedHostSlice<u32>| {
            graph!(cache, &s, {
                k.slow_iota(n, SPINS, 3, 1, &mut *y).launch(cfg(n));
                copy_2d(&*y, sr, &mut *o, dr);
            })
        };
        let mut y = s.alloc_zeros::<u32>(w * h)?;
        let mut y_eager = s.alloc_zeros::<u32>(w * h)?;
        let mut o = common::pinned::<u32>(&ctx, w * h)?;
        let mut o_eager = common::pinned::<u32>(&ctx, w * h)?;
        let mut cache = GraphCache::new();
        let mut eager = GraphCache::new();
        eager.set_mode(Mode::Eager);
        run(&mut cache, &mut y, &mut o)?;
        run(&mut eager, &mut y_eager, &mut o_eager)?;
        s.synchronize()?;
        let want = rows_model(&host::slow_iota(n, SPINS, 3, 1), sr, dr, w * h);
        assert_same(o.as_slice()?, &want, &format!("{name}: model"));
        assert_same(o.as_slice()?, o_eager.as_slice()?, &format!("{name}: eager"));
        assert_eq!(kinds(&cache)?, want_kinds, "{name}: (kernel, memcpy) nodes");
    }
    Ok(())
}

/// `len` zeros with rows `sr` of `src` copied to rows `dr`: what `copy_2d` leaves in a zeroed
/// destination.
fn rows_model(src: &[u32], sr: Rows, dr: Rows, len: usize) -> Vec<u32> {
    let mut want = vec![0u32; len];
    for r in 0..sr.height {
        let from = (sr.first + r) * sr.pitch;
        let to = (dr.first + r) * dr.pitch;
        want[to..to + sr.width].copy_from_slice(&src[from..from + sr.width]);
    }
    want
}

/// A `PinnedBuffer` freed after each call and a new one allocated, often at the same address
/// (a memcpy node's resolved host address would be stale there: the crate sets those again on
/// every call): each call's result lands in that call's buffer.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_new_pinned_buffer_at_a_freed_ones_address_gets_the_result() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(64)?;
    let mut cache = GraphCache::new();
    let mut addresses = Vec::new();
    for call in 0..6u32 {
        let mut out = PinnedBuffer::<u32>::zeros(&s, 64)?;
        addresses.push(out.as_slice()?.as_ptr() as usize);
        produce(&mut cache, &k, &s, &mut y, &mut out, call)?;
        assert_same(out.as_slice()?, &host::slow_iota(64, SPINS, 7, call), &format!("call {call}"));
        drop(out);
    }
    assert_eq!(kinds(&cache)?, (2, 0), "a readback node");
    let reused = addresses.windows(2).filter(|w| w[0] == w[1]).count();
    eprintln!("pinned addresses reused in {reused} of 5 calls");
    Ok(())
}

/// `GraphBuilder`: `y = slow_iota(7, b)`, then `y` copied to `out` (`GraphBuilder::copy`).
fn produce_built(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    y: &mut CudaSlice<u32>,
    out: &mut PinnedBuffer<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    let n = y.len() as u32;
    let mut g = cache.builder(s);
    let (yw, ow) = (g.write(y), g.write(out));
    g.kernel(k.slow_iota(n, SPINS, 7, b, yw).launch(cfg(n)));
    g.copy(yw.read(), ow);
    g.launch()
}

/// [`reads_at_every_size`] with a `GraphBuilder`: `GraphBuilder::copy` makes the node
/// `graph!`'s `copy` makes (up to 4 KiB a readback kernel node, one element more a memcpy
/// node). A launch equal to the last one then sends nothing (`Stats::node_updates`) and reads
/// the same.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_builder_s_small_copy_into_pinned_memory_is_a_readback_node() -> Result {
    reads_at_every_size(produce_built, |(len, k, s, cache), y, outs| {
        let before = cache.stats();
        outs[1].as_mut_slice()?.fill(0);
        produce_built(cache, k, s, y, &mut outs[1], 3)?;
        let after = cache.stats();
        assert_eq!(after.node_updates, before.node_updates, "{len}: {before:?} → {after:?}");
        let model = host::slow_iota(len as u32, SPINS, 7, 3);
        assert_same(outs[1].as_slice()?, &model, &format!("{len} elements, again: model"));
        Ok(())
    })
}

/// `GraphBuilder::copy_2d` into pinned memory: dense rows a readback node, gapped rows a 2-D
/// memcpy node; and `GraphBuilder::copy` from a graph-owned buffer (`alloc`, written by a slow
/// kernel, freed after the copy) a readback node whose source address the cache resolves. Each
/// equal to the host model and to the eager builder.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_builder_s_copy_2d_and_graph_owned_sources_read_back() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let (w, h) = (16usize, 4usize);
    let n = (w * h) as u32;
    let cases = [
        ("dense", Rows::dense(w, h), Rows::dense(w, h), (2, 0)),
        ("gapped", Rows::new(w - 4, h, w), Rows::new(w - 4, h, w - 4), (1, 1)),
    ];
    for (name, sr, dr, want_kinds) in cases {
        let run = |cache: &mut GraphCache, y: &mut CudaSlice<u32>, o: &mut PinnedHostSlice<u32>| {
            let mut g = cache.builder(&s);
            let (yw, ow) = (g.write(y), g.write(o));
            g.kernel(k.slow_iota(n, SPINS, 3, 1, yw).launch(cfg(n)));
            g.copy_2d(yw.read(), sr, ow, dr);
            g.launch()
        };
        let mut y = s.alloc_zeros::<u32>(w * h)?;
        let mut y_eager = s.alloc_zeros::<u32>(w * h)?;
        let mut o = common::pinned::<u32>(&ctx, w * h)?;
        let mut o_eager = common::pinned::<u32>(&ctx, w * h)?;
        let mut cache = GraphCache::new();
        let mut eager = GraphCache::new();
        eager.set_mode(Mode::Eager);
        run(&mut cache, &mut y, &mut o)?;
        run(&mut eager, &mut y_eager, &mut o_eager)?;
        s.synchronize()?;
        let want = rows_model(&host::slow_iota(n, SPINS, 3, 1), sr, dr, w * h);
        assert_same(o.as_slice()?, &want, &format!("builder {name}: model"));
        assert_same(o.as_slice()?, o_eager.as_slice()?, &format!("builder {name}: eager"));
        assert_eq!(kinds(&cache)?, want_kinds, "builder {name}: (kernel, memcpy) nodes");
    }
    // A graph-owned source: alloc, slow kernel, copy out of it, free; three calls.
    let len = 100usize;
    let owned = |cache: &mut GraphCache, out: &mut PinnedBuffer<u32>, b: u32| {
        let mut g = cache.builder(&s);
        let ow = g.write(out);
        let t = g.alloc::<u32>(len);
        g.kernel(k.slow_iota(len as u32, SPINS, 5, b, t.write()).launch(cfg(len as u32)));
        g.copy(t.read(), ow);
        g.free(t);
        g.launch()
    };
    let mut out = PinnedBuffer::<u32>::zeros(&s, len)?;
    let mut out_eager = PinnedBuffer::<u32>::zeros(&s, len)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    for call in 0..3u32 {
        owned(&mut cache, &mut out, call)?;
        owned(&mut eager, &mut out_eager, call)?;
        let model = host::slow_iota(len as u32, SPINS, 5, call);
        assert_same(out.as_slice()?, &model, &format!("graph-owned source, call {call}: model"));
        assert_same(out.as_slice()?, out_eager.as_slice()?, &format!("call {call}: eager"));
    }
    let info = cache.graph_info()?.expect("a launched variant");
    let count = |kind: GraphNodeKind| info.nodes.iter().filter(|n| n.kind == kind).count();
    assert_eq!((count(GraphNodeKind::Kernel), count(GraphNodeKind::Memcpy)), (2, 0));
    Ok(())
}
