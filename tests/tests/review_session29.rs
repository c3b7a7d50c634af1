//! Review of session 29 (brief 1, safe code only): the readback change (ffaa65b..2f35704), which
//! makes `graph!`'s `copy(&dev, &mut pinned)` and `copy_2d` of contiguous rows of at most
//! `MAX_READBACK_BYTES` a kernel node of the crate's `cudagraph_readback` kernel instead of a
//! memcpy node (`kind/readback.rs`, chosen in `__private::copy_on` / `copy_2d_on`).
//!
//! Every result is compared exactly (integers, bytes) with the same statements in
//! `Mode::Eager` and/or a host model; a slow producer (`slow_iota`, `SPINS = 1 << 20`, a few
//! milliseconds on an H200) comes before each readback where ordering is what could break, and
//! pinned memory is read with `as_slice` right after the call (no explicit synchronization).
//!
//! Attacks (each test's doc comment says which hole it would catch):
//! 1. One cache whose copy crosses the 4 KiB bound back and forth (readback node, memcpy node),
//!    with one exec, memoized execs, `InstantiateFlags::device_launch`, `Mode::Instantiate`
//!    and `clear()` (`a_copy_crossing_the_bound…`).
//! 2. Views at odd byte offsets around 4096 bytes (1-, 2-, 4-, 8-byte words; grid 1..16) into
//!    cudarc pinned memory of every flag set (0, write-combined, portable|device-mapped), on one
//!    cache (`views_at_odd_offsets…`).
//! 3. `copy_2d` into rows at odd byte offsets inside a larger pinned buffer, switching between
//!    readback (one row, dense) and 2-D memcpy (gapped; dense over 4 KiB); the bytes around
//!    the rows must stay (`copy_2d_rows_at_odd_offsets…`); its refusals unchanged
//!    (`copy_2d_refusals…`).
//! 4. 1-D refusals unchanged (lengths, empty, pinned or device memory of a non-primary context)
//!    and nothing enqueued (`one_d_refusals…`).
//! 5. Contexts: a stream of a second `CudaContext` object of the device; copies wholly inside a
//!    non-primary context, for several non-primary contexts made and dropped one after another
//!    (the readback kernel's table keyed by the context's address) (`contexts…`).
//! 6. Readback inside `device_if` / `device_while` bodies (`readback_inside_device_bodies…`).
//! 7. The pinned memory a readback wrote, read by a later host→device memcpy node and by a host
//!    node in the same graph (`what_a_readback_wrote_is_seen…`).
//! 8. A graph-owned (`alloc`) source (a placeholder address, resolved only in the driver's view)
//!    whose size crosses the bound; an unrolled `for` run whose iterations are of different
//!    kinds and change kinds between calls (`a_graph_owned_source_and_a_run…`).
//! 9. Pinned memory dropped right after the call and its address taken at once by a canary
//!    (`pinned_memory_dropped_right_after…`).
//! 10. No NVRTC (`a_small_copy_needs_no_nvrtc`): runs on the CPU stub driver too.
//! 11. Non-primary contexts that ran a readback were never destroyed (fixed: at most one is
//!     kept, `non_primary_contexts_that_ran_a_small_copy_are_not_kept_without_bound`).
//!
//! Findings by reading: see the commit messages of this review and the report. Not run on a GPU
//! by this review (none was available); 10 was run on the CPU stub driver without NVRTC.

#![allow(clippy::borrow_deref_ref)] // `graph!` operands are places marked `&`: `&*x`

mod common;

use std::sync::{Arc, Mutex};

use common::review17::stub;
use common::{Ops, Result, assert_same, fresh_thread, gpu, host, serial};
use cudagraph::cudarc::driver::sys::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_WRITECOMBINED,
};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaView, LaunchConfig, PinnedHostSlice,
};
use cudagraph::{
    Error, GraphCache, GraphNodeKind, InstantiateFlags, MAX_READBACK_BYTES, Mode, PinnedBuffer,
    Rows, graph,
};

/// Steps of the slow kernel: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

type S = Arc<CudaStream>;

fn cfg(n: u32) -> LaunchConfig {
    LaunchConfig::for_num_elems(n)
}

/// The driver's node kinds of `cache`'s last variant: (kernel nodes, memcpy nodes).
fn kinds(cache: &GraphCache) -> Result<(usize, usize)> {
    let info = cache.graph_info()?.expect("a launched variant");
    let count = |k: GraphNodeKind| info.nodes.iter().filter(|n| n.kind == k).count();
    Ok((count(GraphNodeKind::Kernel), count(GraphNodeKind::Memcpy)))
}

/// Pinned host memory of cudarc with `flags`, filled with `v`.
fn pinned_with<T>(
    ctx: &Arc<CudaContext>,
    len: usize,
    flags: u32,
    v: T,
) -> Result<PinnedHostSlice<T>>
where
    T: cudagraph::cudarc::driver::DeviceRepr + cudagraph::cudarc::driver::ValidAsZeroBits + Copy,
{
    // SAFETY: written (filled) below before anything reads it.
    let mut p = unsafe { ctx.alloc_pinned_with_flags::<T>(len, flags) }?;
    p.as_mut_slice()?.fill(v);
    Ok(p)
}

/// `y = slow_iota(7, b)`, then `y` copied to `out`.
fn produce(
    cache: &mut GraphCache,
    k: &Ops,
    s: &S,
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

/// Attack 1. A statement whose node kind changes between calls on one cache (1024 `u32` = the
/// bound, a readback; 1025, a memcpy node; 1 and 2048 besides): an exec of the other kind
/// reused (its kernel node set to memcpy parameters, or the reverse), a memoized exec of the
/// wrong kind picked by its words, a kind change lost across `Mode::Instantiate`, `clear()` or
/// the device-launch flag, or a readback that does not wait for the slow producer (or that the
/// `as_slice` right after the call does not wait for) shows as data unlike eager's and the
/// model's, or as the wrong node kinds.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_copy_crossing_the_bound_on_one_cache_matches_eager_in_every_mode() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu()?;
    const LENS: [usize; 4] = [1024, 1025, 1, 2048];
    assert_eq!(LENS[0] * 4, MAX_READBACK_BYTES, "the documented bound");
    let bufs = |s: &S| -> Result<Vec<(CudaSlice<u32>, PinnedBuffer<u32>)>> {
        LENS.iter().map(|&n| Ok((s.alloc_zeros::<u32>(n)?, PinnedBuffer::zeros(s, n)?))).collect()
    };
    let launch = InstantiateFlags { device_launch: true, ..Default::default() };
    for (execs, flags) in
        [(1usize, InstantiateFlags::default()), (3, Default::default()), (1, launch)]
    {
        let (mut g, mut e) = (bufs(&s)?, bufs(&s)?);
        let mut cache = GraphCache::new();
        cache.set_execs_per_variant(execs);
        cache.set_instantiate_flags(flags);
        let mut eager = GraphCache::eager();
        for call in 0..24usize {
            let j = [0, 1, 0, 1, 2, 3, 1, 0][call % 8];
            // Two values, so that a buffer set comes back with its words (memo hits); the
            // outputs are filled with a sentinel before each call, so a copy skipped shows.
            let b = 3 + (call % 2) as u32;
            let what = format!("execs {execs}, {flags:?}, call {call}, {} elements", LENS[j]);
            if call == 12 {
                cache.clear();
            }
            if call % 7 == 3 {
                // Built and uploaded, not launched; the next call only launches it.
                cache.set_mode(Mode::Instantiate);
                let (y, o) = &mut g[j];
                produce(&mut cache, &k, &s, y, o, b)?;
                cache.set_mode(Mode::Graph);
            }
            let (y, o) = &mut g[j];
            o.as_mut_slice()?.fill(u32::MAX);
            produce(&mut cache, &k, &s, y, o, b)?;
            let got = o.as_slice()?.to_vec();
            let (ey, eo) = &mut e[j];
            eo.as_mut_slice()?.fill(u32::MAX);
            produce(&mut eager, &k, &s, ey, eo, b)?;
            assert_same(&got, eo.as_slice()?, &format!("{what}: graph against eager"));
            assert_same(&got, &host::slow_iota(LENS[j] as u32, SPINS, 7, b), &what);
            let want = if LENS[j] * 4 <= MAX_READBACK_BYTES { (2, 0) } else { (1, 1) };
            assert_eq!(kinds(&cache)?, want, "{what}: (kernel, memcpy) nodes");
        }
        let st = cache.stats();
        eprintln!("execs {execs}, {flags:?}: {st:?}");
        assert_eq!(st.launches, 24, "{st:?}");
        if execs == 3 {
            assert!(st.memo_hits > 0, "memoized execs of both kinds were reused: {st:?}");
        }
    }
    Ok(())
}

/// `copy(&src, &mut out)` of a byte view into cudarc pinned memory, as the only statement.
fn read_bytes(
    cache: &mut GraphCache,
    s: &S,
    src: CudaView<'_, u8>,
    out: &mut PinnedHostSlice<u8>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        copy(&src, &mut *out);
    })
}

/// Attack 2. One cache, views at odd offsets and lengths around 4096 bytes (words of 1, 2, 4
/// and 8 bytes; grids of 1 to 16 blocks; 4097 bytes a memcpy node), each length its own pinned
/// buffer of another kind (flags 0, write-combined, portable|device-mapped), pre-filled with
/// `0xee`: a word size the addresses do not allow (a misaligned store, a fault), a stale word
/// count or grid after the per-node update, a wrong source offset, or a store past the end
/// shows as bytes unlike the view's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn views_at_odd_offsets_around_4096_bytes_read_back_their_own_bytes() -> Result {
    let _serial = serial();
    let (ctx, s, _k) = gpu()?;
    let bytes: Vec<u8> =
        (0..8192 + 64u32).map(|i| (i.wrapping_mul(151) ^ (i >> 7)) as u8).collect();
    let src = s.clone_htod(&bytes)?;
    let flags_of = |len: usize| match len {
        4096 => 0,
        4097 | 1 => CU_MEMHOSTALLOC_WRITECOMBINED,
        _ => CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP,
    };
    let mut outs: Vec<(usize, PinnedHostSlice<u8>, PinnedHostSlice<u8>)> = Vec::new();
    for len in [4096usize, 4097, 4095, 1, 4094] {
        let f = flags_of(len);
        outs.push((len, pinned_with(&ctx, len, f, 0xee)?, pinned_with(&ctx, len, f, 0xee)?));
    }
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::eager();
    let cases = [
        (0usize, 4096usize),
        (1, 4096),
        (2, 4096),
        (4, 4096),
        (3, 4097),
        (0, 4097),
        (7, 4095),
        (8, 4096),
        (5, 1),
        (6, 4094),
        (4095, 4096),
        (0, 4096),
        (4096, 4097),
        (1, 4096),
    ];
    for (call, (at, len)) in cases.into_iter().enumerate() {
        let (_, out, out_eager) = outs.iter_mut().find(|o| o.0 == len).expect("a buffer");
        out.as_mut_slice()?.fill(0xee);
        out_eager.as_mut_slice()?.fill(0xee);
        read_bytes(&mut cache, &s, src.slice(at..at + len), out)?;
        let got = out.as_slice()?.to_vec();
        read_bytes(&mut eager, &s, src.slice(at..at + len), out_eager)?;
        let what = format!("call {call}: {len} bytes at {at}");
        assert_same(&got, &bytes[at..at + len], &format!("{what}: model"));
        assert_same(&got, out_eager.as_slice()?, &format!("{what}: eager"));
        let want = if len <= MAX_READBACK_BYTES { (1, 0) } else { (0, 1) };
        assert_eq!(kinds(&cache)?, want, "{what}: (kernel, memcpy) nodes");
    }
    eprintln!("{:?}", cache.stats());
    Ok(())
}

/// `copy_2d(&src, sr, &mut out, dr)` of bytes, as the only statement.
fn read_rows(
    cache: &mut GraphCache,
    s: &S,
    src: &CudaSlice<u8>,
    (sr, dr): (Rows, Rows),
    out: &mut PinnedBuffer<u8>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        copy_2d(&*src, sr, &mut *out, dr);
    })
}

/// What `out` (all `fill`) holds after `copy_2d` of `src` from `sr` into `dr`.
fn rows_model(src: &[u8], sr: Rows, dr: Rows, len: usize, fill: u8) -> Vec<u8> {
    let mut out = vec![fill; len];
    for r in 0..sr.height {
        let from = (sr.first + r) * sr.pitch;
        let to = (dr.first + r) * dr.pitch;
        out[to..to + sr.width].copy_from_slice(&src[from..from + sr.width]);
    }
    out
}

/// Attack 3. `copy_2d` of bytes into a larger `PinnedBuffer` pre-filled with `0x5a`, on one
/// cache: one row of 29 bytes into rows 37 bytes apart from a moving row (odd destination
/// offsets: 1-byte words), dense rows from row 1 into row 3 (offset 87), gapped rows (a 2-D
/// memcpy node), dense rows of exactly 4096 bytes (a readback) and of 4160 (a 2-D memcpy node).
/// A readback that writes the gaps or past its rows, starts at the wrong row, uses a word the
/// offset does not allow, or an exec of the other kind kept, shows as bytes unlike the model's
/// and eager's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_2d_rows_at_odd_offsets_leave_the_bytes_around_them() -> Result {
    let _serial = serial();
    let (_ctx, s, _k) = gpu()?;
    const LEN: usize = 64 * 70;
    let bytes: Vec<u8> = (0..LEN as u32).map(|i| (i.wrapping_mul(73) ^ (i >> 5)) as u8).collect();
    let src = s.clone_htod(&bytes)?;
    let mut out = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    let mut out_eager = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::eager();
    for call in 0..20usize {
        let r = call % 5;
        let (name, sr, dr) = match call % 6 {
            0 | 3 => {
                ("one row", Rows::new(29, 1, 64).from_row(r + 1), Rows::new(29, 1, 37).from_row(r))
            }
            1 => ("dense", Rows::dense(29, 5).from_row(1), Rows::dense(29, 5).from_row(3)),
            2 => ("gapped", Rows::new(29, 5, 64), Rows::new(29, 5, 37).from_row(r)),
            4 => ("4096 dense", Rows::dense(64, 64).from_row(r), Rows::dense(64, 64).from_row(1)),
            _ => ("4160 dense", Rows::dense(64, 65), Rows::dense(64, 65).from_row(r)),
        };
        out.as_mut_slice()?.fill(0x5a);
        out_eager.as_mut_slice()?.fill(0x5a);
        read_rows(&mut cache, &s, &src, (sr, dr), &mut out)?;
        let got = out.as_slice()?.to_vec();
        read_rows(&mut eager, &s, &src, (sr, dr), &mut out_eager)?;
        let what = format!("call {call}, {name}: {sr:?} -> {dr:?}");
        assert_same(&got, &rows_model(&bytes, sr, dr, LEN, 0x5a), &format!("{what}: model"));
        assert_same(&got, out_eager.as_slice()?, &format!("{what}: eager"));
        let contiguous = sr.height == 1 || sr.pitch == sr.width && dr.pitch == dr.width;
        let readback = contiguous && sr.width * sr.height <= MAX_READBACK_BYTES;
        let want = if readback { (1, 0) } else { (0, 1) };
        assert_eq!(kinds(&cache)?, want, "{what}: (kernel, memcpy) nodes");
    }
    Ok(())
}

/// Attack 3 (refusals). `copy_2d` rows that do not fit (one row wider than its pitch among
/// them: contiguous, so only the readback's own `misfit` check keeps it from a kernel), of
/// unequal shapes, or empty, into pinned memory, each after a good call on the same cache:
/// refused as before the change (`InvalidNode`, `Empty`), nothing launched, the output
/// untouched, and the next good call right. A readback made of rows the 2-D memcpy refuses would write past the buffer (or
/// launch), shown as a result or a changed output.
#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_2d_refusals_are_unchanged_and_enqueue_nothing() -> Result {
    let _serial = serial();
    let (_ctx, s, _k) = gpu()?;
    const LEN: usize = 64 * 8;
    let bytes: Vec<u8> = (0..LEN as u32).map(|i| (i * 7 + 3) as u8).collect();
    let src = s.clone_htod(&bytes)?;
    let mut out = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    let good = (Rows::new(29, 1, 64).from_row(2), Rows::new(29, 1, 37).from_row(3));
    let bad: [(&str, (Rows, Rows)); 6] = [
        (
            "destination rows past the end",
            (Rows::new(29, 1, 64), Rows::new(29, 1, 37).from_row(14)),
        ),
        ("source rows past the end", (Rows::dense(64, 8).from_row(1), Rows::dense(64, 8))),
        ("unequal heights", (Rows::dense(64, 8), Rows::dense(64, 9))),
        ("unequal widths", (Rows::new(29, 1, 64), Rows::new(28, 1, 37))),
        ("one row wider than its pitch", (Rows::new(29, 1, 28), Rows::new(29, 1, 37))),
        ("empty", (Rows::new(0, 1, 64), Rows::new(0, 1, 37))),
    ];
    for (name, rows) in bad {
        out.as_mut_slice()?.fill(0x11);
        read_rows(&mut cache, &s, &src, good, &mut out)?;
        assert_same(out.as_slice()?, &rows_model(&bytes, good.0, good.1, LEN, 0x11), name);
        out.as_mut_slice()?.fill(0x22);
        let launches = cache.stats().launches;
        let r = read_rows(&mut cache, &s, &src, rows, &mut out);
        match (&r, name) {
            (Err(Error::Empty { .. }), "empty") => {}
            (Err(Error::InvalidNode { .. }), n) if n != "empty" => {}
            _ => panic!("{name}: refused as before the change, got {r:?}"),
        }
        assert_eq!(cache.stats().launches, launches, "{name}: nothing launched");
        s.synchronize()?;
        assert!(out.as_slice()?.iter().all(|&b| b == 0x22), "{name}: the output was written");
    }
    Ok(())
}

/// `copy(&src, &mut out)` into cudarc pinned memory, as the only statement.
fn read_u32(
    cache: &mut GraphCache,
    s: &S,
    src: &CudaSlice<u32>,
    out: &mut PinnedHostSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        copy(&*src, &mut *out);
    })
}

/// `copy(&src, &mut out)` into a `PinnedBuffer`, as the only statement.
fn read_into(
    cache: &mut GraphCache,
    s: &S,
    src: &CudaSlice<u32>,
    out: &mut PinnedBuffer<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        copy(&*src, &mut *out);
    })
}

/// Attack 4. 1-D copies into pinned memory that the memcpy node refused before the change,
/// each after a good call on the same cache: lengths 8 and 9 (`CopyLength` with both lengths),
/// both empty (`Empty`), pinned memory of a non-primary context (`WrongContext`: its address
/// is null on this stream) and a device buffer of one (`WrongContext`). A readback made where
/// the memcpy node refuses (its lengths, a null host address, a function of another context)
/// launches, writes or faults: a launch counted, an output changed, or another error.
#[test]
#[ignore = "needs a CUDA GPU"]
fn one_d_refusals_are_unchanged_and_enqueue_nothing() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let (ctx, s, _k) = gpu()?;
        let other = CudaContext::new_non_primary(0, 0)?;
        let os = other.new_stream()?;
        let foreign_dev = os.clone_htod(&[5u32; 8])?;
        let mut foreign_pin = pinned_with(&other, 8, 0, 0x33u32)?;
        ctx.bind_to_thread()?;
        let data: Vec<u32> = (0..9).map(|i| i * 1000 + 17).collect();
        let (src8, src9, src0) = (s.clone_htod(&data[..8])?, s.clone_htod(&data)?, s.null()?);
        let (mut out8, mut out9) = (pinned_with(&ctx, 8, 0, 0u32)?, pinned_with(&ctx, 9, 0, 0u32)?);
        let mut out0 = PinnedBuffer::<u32>::zeros(&s, 0)?;
        let mut cache = GraphCache::new();
        for case in 0..5 {
            out8.as_mut_slice()?.fill(0);
            read_u32(&mut cache, &s, &src8, &mut out8)?;
            assert_same(out8.as_slice()?, &data[..8], &format!("case {case}: the good call"));
            out9.as_mut_slice()?.fill(0x44);
            let launches = cache.stats().launches;
            let (name, r) = match case {
                0 => ("8 into 9", read_u32(&mut cache, &s, &src8, &mut out9)),
                1 => ("9 into 8", read_u32(&mut cache, &s, &src9, &mut out8)),
                2 => ("empty", read_into(&mut cache, &s, &src0, &mut out0)),
                3 => {
                    ("pinned of another context", read_u32(&mut cache, &s, &src8, &mut foreign_pin))
                }
                _ => {
                    ("device of another context", read_u32(&mut cache, &s, &foreign_dev, &mut out8))
                }
            };
            match (case, &r) {
                (0, Err(Error::CopyLength { src: 8, dst: 9, .. })) => {}
                (1, Err(Error::CopyLength { src: 9, dst: 8, .. })) => {}
                (2, Err(Error::Empty { .. })) => {}
                (3 | 4, Err(Error::WrongContext { .. })) => {}
                _ => panic!("{name}: refused as before the change, got {r:?}"),
            }
            assert_eq!(cache.stats().launches, launches, "{name}: nothing launched");
            ctx.synchronize()?;
            other.synchronize()?;
            assert!(out9.as_slice()?.iter().all(|&v| v == 0x44), "{name}: out9 written");
            assert!(foreign_pin.as_slice()?.iter().all(|&v| v == 0x33), "{name}: foreign written");
            ctx.bind_to_thread()?;
        }
        Ok(())
    })
}

/// Attack 5. Contexts. (a) A stream of a second `CudaContext` object of device 0 (the same
/// primary `CUcontext`) with the buffers of the first object. (b) Three non-primary contexts
/// made one after another, each with its own kernels, buffers and cache, dropped before the
/// next is made: the readback kernel is looked up by the context's address (`OwnKernel`); a
/// function of another (or a destroyed) context at a reused address would fault or compute
/// nothing, shown as an error or as data unlike the model's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn contexts_other_objects_and_non_primary_ones_read_back_right() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let (ctx, s, k) = gpu()?;
        // (a)
        let ctx2 = CudaContext::new(0)?;
        let s2 = ctx2.new_stream()?;
        let mut y = s.alloc_zeros::<u32>(256)?;
        let mut out = PinnedBuffer::<u32>::zeros(&s, 256)?;
        let mut cache = GraphCache::new();
        produce(&mut cache, &k, &s, &mut y, &mut out, 1)?;
        let mut pin = pinned_with(&ctx, 256, CU_MEMHOSTALLOC_WRITECOMBINED, 0u32)?;
        let mut c2 = GraphCache::new();
        for call in 0..3 {
            pin.as_mut_slice()?.fill(0);
            read_u32(&mut c2, &s2, &y, &mut pin)?;
            let what = format!("second object, call {call}");
            assert_same(pin.as_slice()?, &host::slow_iota(256, SPINS, 7, 1), &what);
        }
        assert_eq!(kinds(&c2)?, (1, 0), "a readback node on the second object's stream");
        // (b)
        let mut addresses = Vec::new();
        for round in 0..3u32 {
            let np = CudaContext::new_non_primary(0, 0)?;
            addresses.push(np.cu_ctx() as usize);
            let ns = np.new_stream()?;
            let kn = common::load(&np)?;
            let mut y = ns.alloc_zeros::<u32>(300)?;
            let mut out = PinnedBuffer::<u32>::zeros(&ns, 300)?;
            let mut cache = GraphCache::new();
            for call in 0..3u32 {
                produce(&mut cache, &kn, &ns, &mut y, &mut out, round * 10 + call)?;
                let what = format!("non-primary context {round}, call {call}");
                let want = host::slow_iota(300, SPINS, 7, round * 10 + call);
                assert_same(out.as_slice()?, &want, &what);
            }
            assert_eq!(kinds(&cache)?, (2, 0), "round {round}: a readback node");
            np.check_err()?;
        }
        eprintln!("non-primary context addresses: {addresses:x?}");
        ctx.bind_to_thread()?;
        Ok(())
    })
}

/// Finding (not UB; a resource leak), fixed: a non-primary context that ran one small `copy`
/// into pinned memory was never destroyed, since the readback kernel's table kept its module,
/// and so the `CudaContext`, until the process ended. The table (`kind/own_kernel.rs`) now
/// drops a context only it keeps alive when another context loads the kernel, so at most one
/// dropped context stays: four more rounds after four rounds leave free memory as it was (an
/// unbounded leak keeps four more contexts). The control rounds (copies over the bound: memcpy
/// nodes) give every context back.
#[test]
#[ignore = "needs a CUDA GPU"]
fn non_primary_contexts_that_ran_a_small_copy_are_not_kept_without_bound() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let (ctx, _s, _k) = gpu()?;
        let rounds = |len: usize| -> Result {
            for _ in 0..4 {
                let np = CudaContext::new_non_primary(0, 0)?;
                let ns = np.new_stream()?;
                let y = ns.clone_htod(&vec![9u32; len])?;
                let mut out = PinnedBuffer::<u32>::zeros(&ns, len)?;
                let mut cache = GraphCache::new();
                graph!(&mut cache, &ns, {
                    copy(&y, &mut out);
                })?;
                assert!(out.as_slice()?.iter().all(|&v| v == 9));
            }
            Ok(())
        };
        let before = common::free_memory(&ctx)?;
        rounds(4096)?;
        common::assert_no_leak(&ctx, before, "four non-primary contexts with memcpy nodes");
        rounds(16)?;
        let before = common::free_memory(&ctx)?;
        rounds(16)?;
        common::assert_no_leak(&ctx, before, "four more non-primary contexts with readback nodes");
        Ok(())
    })
}

mod cond {
    use cudagraph::{Condition, kernels};

    kernels! {
        /// Kernels of `kernels/conditional.cu`.
        pub struct K {
            fn set_nonzero(c: Condition, v: &[u32]);
            fn count_down(c: Condition, counter: &mut [u32]);
            fn step(n: u32, a: u32, counter: &[u32], x: &mut [u32]);
            fn add(n: u32, a: u32, x: &mut [u32]);
        }
    }
}

/// Attack 6. A readback inside a conditional body: `device_if` (taken or not, decided by a
/// kernel from a memset value) and `device_while` (the copy after each step, the counter read
/// back before it counts down). A readback node that runs when its branch is not taken, not
/// in each iteration, out of order in the body, or that the driver refuses in a body, shows as
/// an error or a pinned value unlike the device's (the model needs no eager run: the values
/// are read from the device afterwards).
#[test]
#[ignore = "needs a CUDA GPU"]
fn readback_inside_device_bodies_runs_as_the_condition_says() -> Result {
    use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
    let _serial = serial();
    let (ctx, s, _k) = gpu()?;
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    let src = include_str!("../kernels/conditional.cu");
    // SAFETY: the declarations match conditional.cu; the kernels stay within their buffers
    // (`N` elements, one element for the counters and flags).
    let k = unsafe { cond::K::load(&ctx, compile_ptx_with_opts(src, opts)?) }?;
    const N: u32 = 1000;
    let init: Vec<u32> = (0..N).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let mut x = s.clone_htod(&init)?;
    let (mut flag, mut counter) = (s.alloc_zeros::<u32>(1)?, s.alloc_zeros::<u32>(1)?);
    let mut px = PinnedBuffer::<u32>::zeros(&s, N as usize)?;
    let mut pc = PinnedBuffer::<u32>::zeros(&s, 1)?;
    let mut cache = GraphCache::new();
    for (call, f) in [1u32, 0, 1, 1, 0, 7].into_iter().enumerate() {
        px.as_mut_slice()?.fill(0xdead);
        graph!(&mut cache, &s, {
            let c = condition(0);
            memset(&mut flag, f);
            k.set_nonzero(c, &flag).launch((1, 1));
            k.add(N, call as u32, &mut x).launch(cfg(N));
            device_if(c, {
                copy(&x, &mut px);
            });
        })?;
        let got = px.as_slice()?.to_vec();
        let want = if f != 0 { s.clone_dtoh(&x)? } else { vec![0xdead; N as usize] };
        assert_same(&got, &want, &format!("device_if, call {call}, flag {f}"));
    }
    let mut wcache = GraphCache::new();
    for n in [0u32, 1, 5, 2] {
        px.as_mut_slice()?.fill(0xbeef);
        pc.as_mut_slice()?.fill(0xbeef);
        graph!(&mut wcache, &s, {
            let c = condition(1);
            memset(&mut counter, n);
            k.set_nonzero(c, &counter).launch((1, 1));
            device_while(c, {
                k.step(N, 11, &counter, &mut x).launch(cfg(N));
                copy(&x, &mut px);
                copy(&counter, &mut pc);
                k.count_down(c, &mut counter).launch((1, 1));
            });
        })?;
        let (got, count) = (px.as_slice()?.to_vec(), pc.as_slice()?[0]);
        if n == 0 {
            assert!(got.iter().all(|&v| v == 0xbeef) && count == 0xbeef, "n = 0: no copy ran");
        } else {
            assert_same(&got, &s.clone_dtoh(&x)?, &format!("device_while n = {n}: last x"));
            assert_eq!(count, 1, "device_while n = {n}: the counter before its last count down");
        }
    }
    assert_eq!(kinds(&wcache)?.1, 0, "no memcpy node in the body");
    Ok(())
}

/// Attack 7. What a readback kernel stored into pinned memory is read in the same graph by a
/// host→device memcpy node and by a host node, after a slow producer: stores of the kernel
/// not visible to the copy engine or the host function at their edge show as data unlike
/// eager's and the model's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn what_a_readback_wrote_is_seen_by_a_later_copy_and_host_node() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu()?;
    const N: u32 = 1000;
    let mut results = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut y = s.alloc_zeros::<u32>(N as usize)?;
        let mut z = s.alloc_zeros::<u32>(N as usize)?;
        let mut w = s.alloc_zeros::<u32>(N as usize)?;
        let mut pin = PinnedBuffer::<u32>::zeros(&s, N as usize)?;
        let sums = Arc::new(Mutex::new(Vec::new()));
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut got = Vec::new();
        for call in 0..4u32 {
            let sums = sums.clone();
            graph!(&mut cache, &s, {
                k.slow_iota(N, SPINS, 3, call, &mut y).launch(cfg(N));
                copy(&y, &mut pin);
                host(&pin, move |(p,)| {
                    sums.lock().unwrap().push(p.iter().fold(0u32, |a, &v| a.wrapping_add(v)));
                });
                copy(&pin, &mut z);
                k.affine(N, 5, 1, &z, &mut w).launch(cfg(N));
            })?;
            got.push(s.clone_dtoh(&w)?);
        }
        s.synchronize()?;
        let sums = sums.lock().unwrap().clone();
        for (call, g) in got.iter().enumerate() {
            let y = host::slow_iota(N, SPINS, 3, call as u32);
            assert_same(g, &host::affine(&y, 5, 1), &format!("{mode:?} call {call}"));
            let sum = y.iter().fold(0u32, |a, &v| a.wrapping_add(v));
            assert_eq!(sums[call], sum, "{mode:?} call {call}: the host node's sum");
        }
        results.push(got);
    }
    assert_eq!(results[0], results[1], "graph and eager");
    Ok(())
}

/// A graph-owned buffer of `n` elements made by the slow kernel, copied to `out`.
fn scratch_read(
    cache: &mut GraphCache,
    k: &Ops,
    s: &S,
    out: &mut PinnedBuffer<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    let n = out.len() as u32;
    graph!(cache, s, {
        let t = alloc::<u32>(n as usize);
        k.slow_iota(n, SPINS, 5, b, &mut t).launch(cfg(n));
        copy(&t, &mut *out);
    })
}

/// Each element of `r` copied to the same element of `p`: an unrolled run.
fn run_copies(
    cache: &mut GraphCache,
    s: &S,
    r: &mut [CudaSlice<u32>; 4],
    p: &mut [PinnedBuffer<u32>; 4],
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..4 {
            copy(&r[i], &mut p[i]);
        }
    })
}

/// Attack 8. (a) A graph-owned source (its handle a placeholder address, resolved only in the
/// driver's view of a node) whose size crosses the bound between calls (a re-instantiation and
/// a kind change at once): an unresolved placeholder faults, a stale allocation address reads
/// freed graph memory. (b) An unrolled `for` of copies over arrays whose elements are of
/// different lengths (1024 and 1025 elements: iterations of both kinds in one run), swapped
/// between calls so each iteration changes kind, then unchanged calls, then a pinned element
/// replaced: a later iteration taken as clean by the run's words while its kind or buffer
/// changed shows as a pinned element unlike its source.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graph_owned_source_and_a_run_of_mixed_kinds_read_back_right() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu()?;
    // (a)
    let mut outs = [1024usize, 1025, 64].map(|n| PinnedBuffer::<u32>::zeros(&s, n).expect("pin"));
    let mut eouts = [1024usize, 1025, 64].map(|n| PinnedBuffer::<u32>::zeros(&s, n).expect("pin"));
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    for call in 0..9usize {
        let j = [0, 1, 0, 2, 1, 1, 0, 2, 0][call];
        scratch_read(&mut cache, &k, &s, &mut outs[j], call as u32)?;
        let got = outs[j].as_slice()?.to_vec();
        scratch_read(&mut eager, &k, &s, &mut eouts[j], call as u32)?;
        let what = format!("scratch call {call}, {} elements", got.len());
        assert_same(&got, eouts[j].as_slice()?, &format!("{what}: eager"));
        assert_same(&got, &host::slow_iota(got.len() as u32, SPINS, 5, call as u32), &what);
    }
    // (b)
    let lens = [1024usize, 1025, 1024, 1025];
    let data = |j: usize, v: u32| -> Vec<u32> {
        (0..lens[j] as u32).map(|i| i ^ (v << 16) ^ (j as u32) << 12).collect()
    };
    let mut r: [CudaSlice<u32>; 4] =
        core::array::from_fn(|j| s.clone_htod(&data(j, 0)).expect("source"));
    let mut p: [PinnedBuffer<u32>; 4] =
        core::array::from_fn(|j| PinnedBuffer::zeros(&s, lens[j]).expect("pinned"));
    let mut cache = GraphCache::new();
    cache.set_execs_per_variant(1);
    for call in 0..12u32 {
        match call {
            // Swap two elements of both arrays: iterations 1 and 2 change kind.
            2 | 5 => {
                r.swap(1, 2);
                p.swap(1, 2);
            }
            // Element 3 of the pinned array replaced by a new buffer of its length.
            8 => p[3] = PinnedBuffer::zeros(&s, p[3].len())?,
            // Element 0 (the run's first iteration) swapped with element 3: another kind.
            10 => {
                r.swap(0, 3);
                p.swap(0, 3);
            }
            _ => {}
        }
        for (j, x) in r.iter_mut().enumerate() {
            let v: Vec<u32> =
                (0..x.len() as u32).map(|i| i ^ (call << 20) ^ (j as u32) << 12).collect();
            s.memcpy_htod(&v, x)?;
        }
        for q in p.iter_mut() {
            q.as_mut_slice()?.fill(0xfeed);
        }
        run_copies(&mut cache, &s, &mut r, &mut p)?;
        for j in 0..4 {
            let want = s.clone_dtoh(&r[j])?;
            assert_same(p[j].as_slice()?, &want, &format!("run call {call}, element {j}"));
        }
    }
    eprintln!("run: {:?}", cache.stats());
    Ok(())
}

/// Attack 9. Pinned memory (cudarc's, write-combined; the crate's `PinnedBuffer`) dropped right
/// after a call whose readback waits for a slow kernel, and its address taken at once by a
/// canary of the same size: a readback that outlives the drop writes the canary.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_memory_dropped_right_after_the_call_is_not_written_later() -> Result {
    let _serial = serial();
    let (ctx, s, k) = gpu()?;
    const N: usize = 512;
    let mut y = s.alloc_zeros::<u32>(N)?;
    let mut cache = GraphCache::new();
    let (mut reused, mut canaries) = (0, Vec::new());
    for call in 0..8u32 {
        if call % 2 == 0 {
            let mut out = pinned_with(&ctx, N, CU_MEMHOSTALLOC_WRITECOMBINED, 0u32)?;
            let at = out.as_slice()?.as_ptr() as usize;
            graph!(&mut cache, &s, {
                k.slow_iota(N as u32, SPINS, 7, call, &mut y).launch(cfg(N as u32));
                copy(&y, &mut out);
            })?;
            drop(out);
            let canary = pinned_with(&ctx, N, CU_MEMHOSTALLOC_WRITECOMBINED, 0xcafe_0000 | call)?;
            reused += usize::from(canary.as_slice()?.as_ptr() as usize == at);
            canaries.push((call, canary));
        } else {
            let mut out = PinnedBuffer::<u32>::zeros(&s, N)?;
            produce(&mut cache, &k, &s, &mut y, &mut out, call)?;
            drop(out);
            let canary = pinned_with(&ctx, N, 0, 0xcafe_0000 | call)?;
            canaries.push((call, canary));
        }
    }
    s.synchronize()?;
    for (call, c) in &canaries {
        assert!(
            c.as_slice()?.iter().all(|&v| v == 0xcafe_0000 | call),
            "call {call}: canary written"
        );
    }
    eprintln!("cudarc pinned addresses taken by the canary: {reused} of 4");
    Ok(())
}

/// Attack 10 (a bug found by reading, `readback.rs` `function`): the readback kernel is
/// compiled with NVRTC at the first small copy. With cudarc's run-time loading, a missing
/// NVRTC library is a panic inside `compile_ptx`, not an error: a program with a driver and no
/// NVRTC (which needed none for `copy` before the change) panicked in `graph!` instead of
/// keeping a memcpy node, as the module's doc promises. On a GPU machine NVRTC is there and the
/// copy must equal its source; on the CPU stub driver (`REVIEW17_STUB=1`, `LD_LIBRARY_PATH` at
/// a directory with the stub `libcuda.so` only, no `libnvrtc`) only the absence of a panic is
/// checked: it panicked before the fix.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_small_copy_needs_no_nvrtc() -> Result {
    let _serial = serial();
    assert!(cudagraph::driver_available(), "no CUDA driver");
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let data: Vec<u32> = (0..64).map(|i| i * 3 + 1).collect();
    let src = s.clone_htod(&data)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, 64)?;
    let mut cache = GraphCache::new();
    for call in 0..2 {
        graph!(&mut cache, &s, {
            copy(&src, &mut out);
        })?;
        if !stub() {
            assert_same(out.as_slice()?, &data, &format!("call {call}"));
        }
    }
    assert_eq!(cache.stats().launches, 2);
    Ok(())
}
