//! Review of session 30 (brief 1, safe code only): the builder's readback node (453f8f6), which
//! makes `GraphBuilder::copy` and `GraphBuilder::copy_2d` from device memory into pinned host
//! memory of at most `MAX_READBACK_BYTES` (both in the builder's stream's context) a kernel node
//! of the crate's `cudagraph_readback` kernel, recorded by `Recording::readback` as a
//! `RecKind::Kernel` (session 29's review, `review_session29.rs`, attacked `graph!`'s copy).
//!
//! Every GPU result is compared exactly (integers, bytes) with the same builder run in
//! `Mode::Eager` and/or a host model; a slow producer (`slow_iota`, `SPINS = 1 << 20`, a few
//! milliseconds on an H200) comes before each readback where ordering is what could break, and
//! pinned memory is read with `as_slice` right after `launch` (no explicit synchronization).
//!
//! Attacks (each test's doc comment says which hole it would catch):
//! 1. 1-D refusals through the builder: lengths, empty, pinned or device memory of another
//!    context, handles of another builder (alive, or launched), of a `graph!` call
//!    (`__private::acquire`), a graph-owned source after its free (at the top or in a device
//!    body), of 0 elements, or of another builder; a device body in `Mode::Eager`
//!    (`refusals_of_the_builder_s_copy…`).
//! 2. 2-D refusals through the builder (`copy_2d_refusals_of_the_builder…`).
//! 3. Device bodies holding a readback that unwind (caught), swap the builder, or launch the
//!    builder from inside its own body (`device_bodies_that_unwind…`).
//! 4. Readback nodes inside `device_if` / `device_while` bodies, one of a graph-owned source
//!    (`readback_nodes_in_device_bodies…`).
//! 5. One builder cache whose copy crosses the 4 KiB bound back and forth, with one exec,
//!    memoized execs, one variant kept (every kind change evicts the running variant),
//!    `Mode::Instantiate` and `clear()` (`a_builder_cache_alternating…`).
//! 6. Pinned memory dropped right after `launch` (a canary at its address), read right after
//!    `launch`, `clear()` right after `launch`, eager builders (`pinned_memory_dropped…`).
//! 7. Views at odd offsets and lengths around 4096 bytes, and `copy_2d` rows at odd offsets
//!    inside a larger pinned buffer (`views_and_rows_at_odd_offsets…`).
//! 8. Graph-owned sources of odd byte sizes and element types, and `copy_2d` of one of their
//!    rows (`graph_owned_sources_of_odd_sizes…`).
//! 9. A user kernel with the readback kernel's parameter layout (`u64, u64, u64, u32`, a read
//!    and a written buffer) has the same builder signature: one variant whose kernel node's
//!    function swaps between the two per call, with a graph-owned buffer in another argument
//!    position (pointer masks 0b0011 and 0b0110) (`a_user_kernel_of_the_readback_s_layout…`).
//!
//! Tests 1, 2, 3, 5, 6, 8 and 9 also run on the CPU stub driver (`REVIEW17_STUB=1`), where
//! only their host-side assertions (errors, launch and build counts) are checked; 4 and 7 return
//! at once there. None was run on a GPU by this review (none was lent). On the stub driver all
//! pass; mutants of the change fail them there: `Recording::readback` pushing no accesses
//! (tests 1 and 9), `try_new` without its length check (test 1), `try_new_2d` without its
//! `misfit` checks (test 2).
//!
//! Found by reading, not unsafe: every copy into a cudarc `PinnedHostSlice` asks the driver for
//! the allocation's id (`cuPointerGetAttribute`, in `CopyTo::memcpy`) before the builder turns
//! it into a readback node, which does not use it (8 queries for 8 such copies on the stub).

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::review17::stub;
use common::{Ops, Result, assert_same, fresh_thread, gpu, host, serial};
use cudagraph::cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED;
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice,
};
use cudagraph::{Error, GraphCache, GraphNodeKind, MAX_READBACK_BYTES, Mode, PinnedBuffer, Rows};

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

/// [`assert_same`], except on the stub driver (kernels and copies do nothing there).
#[track_caller]
fn same<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) {
    if !stub() {
        assert_same(got, want, what);
    }
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

/// The builder: `y = slow_iota(7, b)`, then `y` copied to `out` (`GraphBuilder::copy`).
fn produce(
    cache: &mut GraphCache,
    k: &Ops,
    s: &S,
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

/// As [`produce`], into cudarc's pinned memory.
fn produce_into(
    cache: &mut GraphCache,
    k: &Ops,
    s: &S,
    y: &mut CudaSlice<u32>,
    out: &mut PinnedHostSlice<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    let n = y.len() as u32;
    let mut g = cache.builder(s);
    let (yw, ow) = (g.write(y), g.write(out));
    g.kernel(k.slow_iota(n, SPINS, 7, b, yw).launch(cfg(n)));
    g.copy(yw.read(), ow);
    g.launch()
}

/// Whether `r` is `InvalidNode` whose reason contains `why`.
fn invalid(r: &cudagraph::Result<()>, why: &str) -> bool {
    matches!(r, Err(Error::InvalidNode { why: w, .. }) if w.contains(why))
}

/// Attack 1. 1-D copies into pinned memory through the builder that a memcpy node refuses (or
/// that the recording refuses), each after a good call (8 elements, a readback node) on the
/// same cache. A readback node made where the memcpy node refuses (lengths that differ, a null
/// host address, a source of another context), or a kernel node recorded without the
/// recording's checks (a handle of another builder or of a `graph!` call, a graph-owned buffer
/// after its free node, in particular one freed in a device body, or one of another builder,
/// whose placeholder names another graph's slot), launches, writes, or returns another error:
/// a launch counted, a sentinel changed, or the wrong error.
#[test]
#[ignore = "needs a CUDA GPU"]
fn refusals_of_the_builder_s_copy_into_pinned_memory_are_the_memcpy_node_s() -> Result {
    let _serial = serial();
    fresh_thread(|| -> Result {
        let (ctx, s, _k) = gpu()?;
        let other = common::review26::non_primary()?;
        let os = other.new_stream()?;
        let foreign_dev = os.clone_htod(&[5u32; 8])?;
        let mut foreign_pin = pinned_with(&other, 8, 0, 0x33u32)?;
        ctx.bind_to_thread()?;
        let data: Vec<u32> = (0..9).map(|i| i * 1000 + 17).collect();
        let (src8, src9, src0) = (s.clone_htod(&data[..8])?, s.clone_htod(&data)?, s.null()?);
        let mut out8 = PinnedBuffer::<u32>::zeros(&s, 8)?;
        let mut out8b = pinned_with(&ctx, 8, 0, 0u32)?;
        let mut out9 = pinned_with(&ctx, 9, 0, 0u32)?;
        let mut out0 = PinnedBuffer::<u32>::zeros(&s, 0)?;
        let mut cache = GraphCache::new();
        let mut spare = GraphCache::new();
        const SENTINEL: u32 = 0x44;
        for case in 0..14 {
            out8.as_mut_slice()?.fill(0);
            {
                let mut g = cache.builder(&s);
                let (r, w) = (g.read(&src8), g.write(&mut out8));
                g.copy(r, w);
                g.launch()?;
            }
            same(out8.as_slice()?, &data[..8], &format!("case {case}: the good call"));
            out8.as_mut_slice()?.fill(SENTINEL);
            out8b.as_mut_slice()?.fill(SENTINEL);
            out9.as_mut_slice()?.fill(SENTINEL);
            let (launches, spare_launches) = (cache.stats().launches, spare.stats().launches);
            let (name, r): (&str, cudagraph::Result<()>) = match case {
                0 => ("8 into 9", {
                    let mut g = cache.builder(&s);
                    let (r, w) = (g.read(&src8), g.write(&mut out9));
                    g.copy(r, w);
                    g.launch()
                }),
                1 => ("9 into 8", {
                    let mut g = cache.builder(&s);
                    let (r, w) = (g.read(&src9), g.write(&mut out8));
                    g.copy(r, w);
                    g.launch()
                }),
                2 => ("empty", {
                    let mut g = cache.builder(&s);
                    let (r, w) = (g.read(&src0), g.write(&mut out0));
                    g.copy(r, w);
                    g.launch()
                }),
                3 => ("pinned of another context", {
                    let mut g = cache.builder(&s);
                    let (r, w) = (g.read(&src8), g.write(&mut foreign_pin));
                    g.copy(r, w);
                    g.launch()
                }),
                4 => ("device of another context", {
                    let mut g = cache.builder(&s);
                    let (r, w) = (g.read(&foreign_dev), g.write(&mut out8));
                    g.copy(r, w);
                    g.launch()
                }),
                5 => ("source of another builder", {
                    let mut g2 = spare.builder(&s);
                    let r2 = g2.read(&src8);
                    let mut g = cache.builder(&s);
                    let w = g.write(&mut out8);
                    g.copy(r2, w);
                    let r = g.launch();
                    drop(g2);
                    r
                }),
                6 => ("destination of another builder", {
                    let mut g2 = spare.builder(&s);
                    let w2 = g2.write(&mut out8b);
                    let mut g = cache.builder(&s);
                    let r = g.read(&src8);
                    g.copy(r, w2);
                    let r = g.launch();
                    drop(g2);
                    r
                }),
                7 => ("a graph! call's handle", {
                    let call = cudagraph::__private::begin_call();
                    let (r0, _guard) = cudagraph::__private::acquire(&src8, &s, &call, 0);
                    let mut g = cache.builder(&s);
                    let w = g.write(&mut out8);
                    g.copy(r0, w);
                    g.launch()
                }),
                8 => ("graph-owned source after its free", {
                    let mut g = cache.builder(&s);
                    let w = g.write(&mut out8);
                    let t = g.alloc::<u32>(8);
                    g.memset(t.write(), 5u32);
                    g.free(t);
                    g.copy(t.read(), w);
                    g.launch()
                }),
                9 => ("graph-owned source of 0 elements", {
                    let mut g = cache.builder(&s);
                    let w = g.write(&mut out0);
                    let t = g.alloc::<u32>(0);
                    g.copy(t.read(), w);
                    g.launch()
                }),
                10 => ("graph-owned source of another builder", {
                    let mut g2 = spare.builder(&s);
                    let t2 = g2.alloc::<u32>(8);
                    g2.memset(t2.write(), 6u32);
                    let mut g = cache.builder(&s);
                    let w = g.write(&mut out8);
                    // Same slot number in `g` (its first graph-owned buffer): only the tag's
                    // builder number tells them apart.
                    let t = g.alloc::<u32>(8);
                    g.memset(t.write(), 7u32);
                    g.copy(t2.read(), w);
                    let r = g.launch();
                    drop(g2);
                    r
                }),
                11 => ("graph-owned source of a launched builder", {
                    let t2 = {
                        let mut g2 = spare.builder(&s);
                        let t2 = g2.alloc::<u32>(8);
                        g2.memset(t2.write(), 6u32);
                        g2.launch()?;
                        t2
                    };
                    let mut g = cache.builder(&s);
                    let w = g.write(&mut out8);
                    let t = g.alloc::<u32>(8);
                    g.memset(t.write(), 7u32);
                    g.copy(t2.read(), w);
                    g.launch()
                }),
                12 => ("graph-owned source freed in a device body", {
                    let mut g = cache.builder(&s);
                    let w = g.write(&mut out8);
                    let t = g.alloc::<u32>(8);
                    g.memset(t.write(), 5u32);
                    let c = g.condition(1);
                    g.device_if(c, |g| {
                        g.free(t);
                    });
                    g.copy(t.read(), w);
                    g.launch()
                }),
                _ => ("a device body in Mode::Eager", {
                    let mut eager = GraphCache::eager();
                    let mut g = eager.builder(&s);
                    let (r, w) = (g.read(&src8), g.write(&mut out8));
                    let c = g.condition(1);
                    g.device_if(c, |g| {
                        g.copy(r, w);
                    });
                    let res = g.launch();
                    assert_eq!(eager.stats().launches, 0, "eager: nothing launched");
                    res
                }),
            };
            let ok = match case {
                0 => matches!(r, Err(Error::CopyLength { src: 8, dst: 9, .. })),
                1 => matches!(r, Err(Error::CopyLength { src: 9, dst: 8, .. })),
                2 | 9 => matches!(r, Err(Error::Empty { .. })),
                3 | 4 => matches!(r, Err(Error::WrongContext { .. })),
                5..=7 => invalid(&r, "not registered with this GraphBuilder"),
                8 => invalid(&r, "used after its free node"),
                10 | 11 => invalid(&r, "not registered with this GraphBuilder"),
                12 => invalid(&r, "freed inside a device body"),
                _ => invalid(&r, "Mode::Eager"),
            };
            assert!(ok, "case {case}, {name}: refused as a memcpy node is, got {r:?}");
            assert_eq!(cache.stats().launches, launches, "{name}: nothing launched");
            if case != 11 {
                assert_eq!(spare.stats().launches, spare_launches, "{name}: the other builder");
            }
            ctx.synchronize()?;
            other.synchronize()?;
            ctx.bind_to_thread()?;
            for (what, v) in [
                ("out8", out8.as_slice()?),
                ("out8b", out8b.as_slice()?),
                ("out9", out9.as_slice()?),
            ] {
                assert!(v.iter().all(|&x| x == SENTINEL), "{name}: {what} written: {v:?}");
            }
            assert!(foreign_pin.as_slice()?.iter().all(|&v| v == 0x33), "{name}: foreign written");
            ctx.bind_to_thread()?;
        }
        Ok(())
    })
}

/// `GraphBuilder::copy_2d(src, sr, out, dr)` of bytes, as the only node.
fn rows_built(
    cache: &mut GraphCache,
    s: &S,
    src: &CudaSlice<u8>,
    (sr, dr): (Rows, Rows),
    out: &mut PinnedBuffer<u8>,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let (r, w) = (g.read(src), g.write(out));
    g.copy_2d(r, sr, w, dr);
    g.launch()
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

/// Attack 2. `GraphBuilder::copy_2d` rows into pinned memory that do not fit (one row wider
/// than its pitch among them: one row is "dense" to the readback's choice whatever its pitch,
/// so only its own `misfit` check keeps it from a kernel that stores past the row), of unequal
/// shapes, or empty, each after a good call on the same cache: refused as the 2-D memcpy node
/// refuses them (`InvalidNode`, `Empty`), nothing launched, the output untouched.
#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_2d_refusals_of_the_builder_are_the_memcpy_node_s() -> Result {
    let _serial = serial();
    let (_ctx, s, _k) = gpu()?;
    const LEN: usize = 64 * 8;
    let bytes: Vec<u8> = (0..LEN as u32).map(|i| (i * 7 + 3) as u8).collect();
    let src = s.clone_htod(&bytes)?;
    let mut out = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    let good = (Rows::new(29, 1, 64).from_row(2), Rows::new(29, 1, 37).from_row(3));
    let bad: [(&str, (Rows, Rows)); 7] = [
        (
            "destination rows past the end",
            (Rows::new(29, 1, 64), Rows::new(29, 1, 37).from_row(14)),
        ),
        ("source rows past the end", (Rows::dense(64, 8).from_row(1), Rows::dense(64, 8))),
        ("unequal heights", (Rows::dense(64, 8), Rows::dense(64, 7))),
        ("unequal widths", (Rows::new(29, 1, 64), Rows::new(28, 1, 37))),
        ("one source row wider than its pitch", (Rows::new(29, 1, 28), Rows::new(29, 1, 37))),
        (
            // 59 * 8 + 40 = 512: within the buffer, refused for its width alone.
            "one destination row wider than its pitch, ending at the end",
            (Rows::new(40, 1, 64), Rows::new(40, 1, 8).from_row(59)),
        ),
        ("empty", (Rows::new(0, 1, 64), Rows::new(0, 1, 37))),
    ];
    for (name, rows) in bad {
        out.as_mut_slice()?.fill(0x11);
        rows_built(&mut cache, &s, &src, good, &mut out)?;
        same(out.as_slice()?, &rows_model(&bytes, good.0, good.1, LEN, 0x11), name);
        out.as_mut_slice()?.fill(0x22);
        let launches = cache.stats().launches;
        let r = rows_built(&mut cache, &s, &src, rows, &mut out);
        match (&r, name) {
            (Err(Error::Empty { .. }), "empty") => {}
            (Err(Error::InvalidNode { .. }), n) if n != "empty" => {}
            _ => panic!("{name}: refused as the 2-D memcpy node is, got {r:?}"),
        }
        assert_eq!(cache.stats().launches, launches, "{name}: nothing launched");
        s.synchronize()?;
        assert!(out.as_slice()?.iter().all(|&b| b == 0x22), "{name}: the output was written");
    }
    Ok(())
}

/// Attack 3. A device body holding a readback node that does not return normally into its
/// builder: (a) it panics and the caller catches the panic; (b) a nested body panics and the
/// outer body catches it; (c) the body swaps the builder with another cache's builder; (d) the
/// body launches its own builder (taken out with `mem::replace`). A conditional node without its
/// body's accesses would not be ordered after the slow producer of the source (or the pinned
/// memory not guarded): every such builder must be refused (`InvalidNode`), nothing launched,
/// the pinned memory untouched.
#[test]
#[ignore = "needs a CUDA GPU"]
fn device_bodies_that_unwind_or_swap_the_builder_refuse_it() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu()?;
    const N: u32 = 256;
    let mut y = s.alloc_zeros::<u32>(N as usize)?;
    let y2 = s.clone_htod(&[3u32; N as usize])?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, N as usize)?;
    let mut out2 = PinnedBuffer::<u32>::zeros(&s, N as usize)?;
    out.as_mut_slice()?.fill(0x77);
    out2.as_mut_slice()?.fill(0x77);
    let unfinished = "did not return normally";
    let (mut cache, mut other) = (GraphCache::new(), GraphCache::new());
    // (a)
    let r = {
        let mut g = cache.builder(&s);
        let (yw, ow) = (g.write(&mut y), g.write(&mut out));
        g.kernel(k.slow_iota(N, SPINS, 7, 1, yw).launch(cfg(N)));
        let c = g.condition(1);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            g.device_if(c, |g| {
                g.copy(yw.read(), ow);
                panic!("review 30: a body that panics");
            })
        }));
        assert!(caught.is_err(), "(a) the body's panic");
        g.launch()
    };
    assert!(invalid(&r, unfinished), "(a) a body that panicked: {r:?}");
    // (b)
    let r = {
        let mut g = cache.builder(&s);
        let (yw, ow) = (g.write(&mut y), g.write(&mut out));
        g.kernel(k.slow_iota(N, SPINS, 7, 2, yw).launch(cfg(N)));
        let (c, inner) = (g.condition(1), g.condition(1));
        g.device_if(c, |g| {
            let caught = catch_unwind(AssertUnwindSafe(|| {
                g.device_while(inner, |g| {
                    g.copy(yw.read(), ow);
                    panic!("review 30: a nested body that panics");
                })
            }));
            assert!(caught.is_err(), "(b) the nested body's panic");
        });
        g.launch()
    };
    assert!(invalid(&r, unfinished), "(b) a nested body that panicked: {r:?}");
    // (c)
    let (r, r2) = {
        let mut g = cache.builder(&s);
        let mut g2 = other.builder(&s);
        let (yw, ow) = (g.write(&mut y), g.write(&mut out));
        let (y2r, o2) = (g2.read(&y2), g2.write(&mut out2));
        g.kernel(k.slow_iota(N, SPINS, 7, 3, yw).launch(cfg(N)));
        let c = g.condition(1);
        g.device_if(c, |g| {
            g.copy(yw.read(), ow);
            std::mem::swap(g, &mut g2);
            // A readback into the other builder's pinned memory, in its recording.
            g.copy(y2r, o2);
        });
        (g.launch(), g2.launch())
    };
    assert!(invalid(&r, "swapped"), "(c) the builder after the swap: {r:?}");
    assert!(invalid(&r2, unfinished), "(c) the builder swapped out: {r2:?}");
    // (d)
    let (inner, r) = {
        let mut g = cache.builder(&s);
        let mut spare = Some(other.builder(&s));
        let (yw, ow) = (g.write(&mut y), g.write(&mut out));
        g.kernel(k.slow_iota(N, SPINS, 7, 4, yw).launch(cfg(N)));
        let c = g.condition(1);
        let mut inner = None;
        g.device_if(c, |g| {
            g.copy(yw.read(), ow);
            if let Some(fresh) = spare.take() {
                let me = std::mem::replace(g, fresh);
                inner = Some(me.launch());
            }
        });
        (inner.expect("the body ran"), g.launch())
    };
    assert!(invalid(&inner, unfinished), "(d) launched inside its own body: {inner:?}");
    assert!(invalid(&r, "swapped"), "(d) the builder put in its place: {r:?}");
    assert_eq!((cache.stats().launches, other.stats().launches), (0, 0), "nothing launched");
    s.synchronize()?;
    assert!(out.as_slice()?.iter().all(|&v| v == 0x77), "the pinned memory was written");
    assert!(out2.as_slice()?.iter().all(|&v| v == 0x77), "the other pinned memory was written");
    Ok(())
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

/// Attack 4 (GPU only: the stub driver has no conditional nodes). Readback nodes of the
/// builder inside device bodies: `device_if` (taken or not, decided by a kernel from a memset
/// value) reading a device buffer and a graph-owned buffer (allocated, set and written at the
/// top, read only inside the body, freed at `launch`: its placeholder must be resolved in the
/// body graph, and the body ordered between the alloc and free nodes), and `device_while` (the
/// copies after each step). A readback that runs when its branch is not taken, reads an
/// unresolved placeholder (a fault), runs before its producer, or is missing from an
/// iteration, shows as an error or a value unlike the device's or the model's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn readback_nodes_in_device_bodies_of_the_builder_run_as_the_condition_says() -> Result {
    use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
    let _serial = serial();
    if stub() {
        return Ok(());
    }
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
    let mut pt = PinnedBuffer::<u32>::zeros(&s, N as usize)?;
    let mut pc = PinnedBuffer::<u32>::zeros(&s, 1)?;
    let mut cache = GraphCache::new();
    for (call, f) in [1u32, 0, 1, 1, 0, 7].into_iter().enumerate() {
        px.as_mut_slice()?.fill(0xdead);
        pt.as_mut_slice()?.fill(0xdead);
        let a = call as u32;
        {
            let mut g = cache.builder(&s);
            let (fw, xw) = (g.write(&mut flag), g.write(&mut x));
            let (pxw, ptw) = (g.write(&mut px), g.write(&mut pt));
            let c = g.condition(0);
            g.memset(fw, f);
            g.kernel(k.set_nonzero(c, fw.read()).launch((1, 1)));
            g.kernel(k.add(N, a, xw).launch(cfg(N)));
            let t = g.alloc::<u32>(N as usize);
            g.memset(t.write(), 9u32);
            g.kernel(k.add(N, a + 100, t.write()).launch(cfg(N)));
            g.device_if(c, |g| {
                g.copy(xw.read(), pxw);
                g.copy(t.read(), ptw);
            });
            g.launch()?;
        }
        let (got_x, got_t) = (px.as_slice()?.to_vec(), pt.as_slice()?.to_vec());
        let what = format!("device_if, call {call}, flag {f}");
        if f != 0 {
            assert_same(&got_x, &s.clone_dtoh(&x)?, &format!("{what}: x"));
            let model: Vec<u32> = (0..N)
                .map(|i| 9u32.wrapping_mul(5).wrapping_add(a + 100).wrapping_add(i))
                .collect();
            assert_same(&got_t, &model, &format!("{what}: the graph-owned buffer"));
        } else {
            assert!(got_x.iter().all(|&v| v == 0xdead), "{what}: x copied");
            assert!(got_t.iter().all(|&v| v == 0xdead), "{what}: the graph-owned buffer copied");
        }
    }
    assert_eq!(cache.stats().builds, 1, "{:?}", cache.stats());
    let mut wcache = GraphCache::new();
    for n in [0u32, 1, 5, 2] {
        px.as_mut_slice()?.fill(0xbeef);
        pc.as_mut_slice()?.fill(0xbeef);
        {
            let mut g = wcache.builder(&s);
            let (cw, xw) = (g.write(&mut counter), g.write(&mut x));
            let (pxw, pcw) = (g.write(&mut px), g.write(&mut pc));
            let c = g.condition(1);
            g.memset(cw, n);
            g.kernel(k.set_nonzero(c, cw.read()).launch((1, 1)));
            g.device_while(c, |g| {
                g.kernel(k.step(N, 11, cw.read(), xw).launch(cfg(N)));
                g.copy(xw.read(), pxw);
                g.copy(cw.read(), pcw);
                g.kernel(k.count_down(c, cw).launch((1, 1)));
            });
            g.launch()?;
        }
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

/// Attack 5. One builder cache whose copy crosses the 4 KiB bound back and forth (1024 `u32`
/// = the bound, a readback node; 1025, a memcpy node; 1 and 2048 besides): with one exec per
/// variant, three (memoized execs), and one variant kept (`with_max_variants(1)`: every kind
/// change evicts the variant whose launch is still running), `Mode::Instantiate` calls between
/// them and `clear()` half way. An exec of the other kind reused, a kind change lost, a
/// readback that does not wait for the slow producer (or that `as_slice` right after does not
/// wait for), or an evicted exec that stops writing, shows as data unlike the eager builder's
/// and the model's, or as the wrong node kinds. On the stub driver: the calls' counts.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_cache_alternating_readback_and_memcpy_nodes_matches_eager() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu()?;
    const LENS: [usize; 4] = [1024, 1025, 1, 2048];
    assert_eq!(LENS[0] * 4, MAX_READBACK_BYTES, "the documented bound");
    let bufs = |s: &S| -> Result<Vec<(CudaSlice<u32>, PinnedBuffer<u32>)>> {
        LENS.iter().map(|&n| Ok((s.alloc_zeros::<u32>(n)?, PinnedBuffer::zeros(s, n)?))).collect()
    };
    for (execs, max) in [(1usize, 16usize), (3, 16), (1, 1)] {
        let (mut g, mut e) = (bufs(&s)?, bufs(&s)?);
        let mut cache = GraphCache::with_max_variants(max);
        cache.set_execs_per_variant(execs);
        let mut eager = GraphCache::eager();
        for call in 0..24usize {
            let j = [0, 1, 0, 1, 2, 3, 1, 0][call % 8];
            let b = call as u32 / 2;
            let what = format!("execs {execs}, max {max}, call {call}, {} elements", LENS[j]);
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
            produce(&mut cache, &k, &s, y, o, b)?;
            let got = o.as_slice()?.to_vec();
            let (ey, eo) = &mut e[j];
            produce(&mut eager, &k, &s, ey, eo, b)?;
            same(&got, eo.as_slice()?, &format!("{what}: builder against eager"));
            same(&got, &host::slow_iota(LENS[j] as u32, SPINS, 7, b), &what);
            if !stub() {
                let want = if LENS[j] * 4 <= MAX_READBACK_BYTES { (2, 0) } else { (1, 1) };
                assert_eq!(kinds(&cache)?, want, "{what}: (kernel, memcpy) nodes");
            }
        }
        let st = cache.stats();
        eprintln!("execs {execs}, max {max}: {st:?}");
        assert_eq!(st.launches, 24, "{st:?}");
        assert!(cache.len() <= max, "{st:?}");
        if max == 1 {
            assert!(st.builds >= 12, "each kind change built again: {st:?}");
        }
    }
    Ok(())
}

/// Attack 6. Pinned memory the builder's readback writes after a slow producer: (a) dropped
/// right after `launch` and its address taken at once by a canary (cudarc's write-combined
/// pinned memory, and the crate's `PinnedBuffer`), in `Mode::Graph` and `Mode::Eager`; (b)
/// `clear()` right after `launch` (the exec destroyed in flight), then read; (c) a cache of one
/// variant alternating two topologies, each launch evicting the running variant, read right
/// after. A drop that does not wait, or a readback the eviction cut short or left running into
/// freed memory, shows as a written canary or a result unlike the model's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_memory_dropped_or_read_right_after_a_builder_launch() -> Result {
    let _serial = serial();
    let (ctx, s, k) = gpu()?;
    const N: usize = 512;
    let mut y = s.alloc_zeros::<u32>(N)?;
    // (a)
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let (mut reused, mut canaries) = (0, Vec::new());
        for call in 0..8u32 {
            if call % 2 == 0 {
                let mut out = pinned_with(&ctx, N, CU_MEMHOSTALLOC_WRITECOMBINED, 0u32)?;
                let at = out.as_slice()?.as_ptr() as usize;
                produce_into(&mut cache, &k, &s, &mut y, &mut out, call)?;
                drop(out);
                let canary =
                    pinned_with(&ctx, N, CU_MEMHOSTALLOC_WRITECOMBINED, 0xcafe_0000 | call)?;
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
                "{mode:?} call {call}: canary written"
            );
        }
        eprintln!("{mode:?}: cudarc pinned addresses taken by the canary: {reused} of 4");
    }
    // (b)
    let mut cache = GraphCache::new();
    let mut out = PinnedBuffer::<u32>::zeros(&s, N)?;
    for call in 0..4u32 {
        produce(&mut cache, &k, &s, &mut y, &mut out, 40 + call)?;
        cache.clear();
        same(out.as_slice()?, &host::slow_iota(N as u32, SPINS, 7, 40 + call), "clear");
    }
    assert_eq!(cache.stats().launches, 4);
    // (c)
    let mut cache = GraphCache::with_max_variants(1);
    let mut z = s.alloc_zeros::<u32>(N)?;
    for call in 0..8u32 {
        out.as_mut_slice()?.fill(0);
        {
            let mut g = cache.builder(&s);
            let (yw, ow) = (g.write(&mut y), g.write(&mut out));
            g.kernel(k.slow_iota(N as u32, SPINS, 7, call, yw).launch(cfg(N as u32)));
            if call % 2 == 1 {
                let zw = g.write(&mut z);
                g.zero(zw);
            }
            g.copy(yw.read(), ow);
            g.launch()?;
        }
        same(out.as_slice()?, &host::slow_iota(N as u32, SPINS, 7, call), "evicted");
    }
    let st = cache.stats();
    assert_eq!((st.launches, cache.len()), (8, 1), "{st:?}");
    assert!(st.builds >= 8, "every call evicted the other topology: {st:?}");
    Ok(())
}

/// Attack 7 (GPU only). (a) `GraphBuilder::copy` of byte views at odd offsets and lengths
/// around 4096 bytes (words of 1, 2, 4 and 8 bytes; grids of 1 to 16 blocks; 4097 bytes a
/// memcpy node) into `PinnedBuffer`s of exactly their length pre-filled with `0xee`, on one
/// cache whose view moves between calls of one length (the kernel node's arguments updated
/// through the recording, not `graph!`'s words); (b) `copy_2d` of rows at odd offsets inside a
/// larger pinned buffer pre-filled with `0x5a` (one row, dense rows, gapped rows, dense rows
/// of exactly 4096 and of 4160 bytes). A word the addresses do not allow, a stale word count,
/// grid or offset after an update, or a store past the rows, shows as bytes unlike the
/// model's and the eager builder's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn views_and_rows_at_odd_offsets_read_back_through_the_builder() -> Result {
    let _serial = serial();
    if stub() {
        return Ok(());
    }
    let (_ctx, s, _k) = gpu()?;
    let bytes: Vec<u8> =
        (0..8192 + 64u32).map(|i| (i.wrapping_mul(151) ^ (i >> 7)) as u8).collect();
    let src = s.clone_htod(&bytes)?;
    let view_copy = |cache: &mut GraphCache, at: usize, out: &mut PinnedBuffer<u8>| {
        let view = src.slice(at..at + out.len());
        let mut g = cache.builder(&s);
        let (r, w) = (g.read(&view), g.write(out));
        g.copy(r, w);
        g.launch()
    };
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    let lens = [8usize, 7, 13, 4092, 4094, 4095, 4096, 4097, 1];
    for (li, &len) in lens.iter().enumerate() {
        let mut out = PinnedBuffer::<u8>::zeros(&s, len)?;
        let mut out_eager = PinnedBuffer::<u8>::zeros(&s, len)?;
        for at in [0usize, 1, 2, 3, 4, 5, 6, 8, 16 + 4, 4096 - 1] {
            out.as_mut_slice()?.fill(0xee);
            view_copy(&mut cache, at, &mut out)?;
            let got = out.as_slice()?.to_vec();
            view_copy(&mut eager, at, &mut out_eager)?;
            let what = format!("{len} bytes at {at}");
            assert_same(&got, &bytes[at..at + len], &format!("{what}: model"));
            assert_same(&got, out_eager.as_slice()?, &format!("{what}: eager"));
            let want = if len <= MAX_READBACK_BYTES { (1, 0) } else { (0, 1) };
            assert_eq!(kinds(&cache)?, want, "{what}: (kernel, memcpy) nodes");
        }
        eprintln!("length {li} ({len}): {:?}", cache.stats());
    }
    // (b)
    const LEN: usize = 64 * 70;
    let mut out = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    let mut out_eager = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    let src2 = s.clone_htod(&bytes[..LEN])?;
    let mut cache = GraphCache::new();
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
        rows_built(&mut cache, &s, &src2, (sr, dr), &mut out)?;
        let got = out.as_slice()?.to_vec();
        rows_built(&mut eager, &s, &src2, (sr, dr), &mut out_eager)?;
        let what = format!("call {call}, {name}: {sr:?} -> {dr:?}");
        let model = rows_model(&bytes[..LEN], sr, dr, LEN, 0x5a);
        assert_same(&got, &model, &format!("{what}: model"));
        assert_same(&got, out_eager.as_slice()?, &format!("{what}: eager"));
        let contiguous = sr.height == 1 || sr.pitch == sr.width && dr.pitch == dr.width;
        let readback = contiguous && sr.width * sr.height <= MAX_READBACK_BYTES;
        let want = if readback { (1, 0) } else { (0, 1) };
        assert_eq!(kinds(&cache)?, want, "{what}: (kernel, memcpy) nodes");
    }
    Ok(())
}

/// Attack 8. Graph-owned sources through the builder: byte buffers of 1, 3, 13, 4095, 4096
/// and 4097 bytes and `u16` ones of 7 and 2049 elements (14 and 4098 bytes), each set from
/// pinned memory by a host→device copy node and read back (`copy`) into a `PinnedBuffer` of its
/// length, all on one cache (the allocation's size changes every call: re-instantiations; the
/// node kind changes at the bound); then `copy_2d` of one row from a later row of a graph-owned
/// buffer into a row at an odd offset of a larger pinned buffer. A placeholder address whose
/// alignment chose a word the real address does not allow, an unresolved placeholder, or a
/// stale allocation address shows as an error or bytes unlike the model's and the eager
/// builder's. On the stub driver: the calls run, nothing more.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_owned_sources_of_odd_sizes_read_back_through_the_builder() -> Result {
    let _serial = serial();
    let (_ctx, s, _k) = gpu()?;
    fn through_scratch<T>(
        cache: &mut GraphCache,
        s: &S,
        data: &PinnedBuffer<T>,
        out: &mut PinnedBuffer<T>,
    ) -> cudagraph::Result<()>
    where
        T: cudagraph::ScratchElem,
    {
        let mut g = cache.builder(s);
        let (r, w) = (g.read(data), g.write(out));
        let t = g.alloc::<T>(data.len());
        g.copy(r, t.write());
        g.copy(t.read(), w);
        g.launch()
    }
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    for (round, len) in [1usize, 3, 13, 4095, 4096, 4097, 3, 4096, 1].into_iter().enumerate() {
        let v: Vec<u8> = (0..len).map(|i| (i * 29 + round * 7 + 1) as u8).collect();
        let data = PinnedBuffer::from_slice(&s, &v)?;
        let mut out = PinnedBuffer::<u8>::zeros(&s, len)?;
        let mut out_eager = PinnedBuffer::<u8>::zeros(&s, len)?;
        out.as_mut_slice()?.fill(0xee);
        through_scratch(&mut cache, &s, &data, &mut out)?;
        let got = out.as_slice()?.to_vec();
        through_scratch(&mut eager, &s, &data, &mut out_eager)?;
        let what = format!("round {round}: {len} bytes");
        same(&got, &v, &format!("{what}: model"));
        same(&got, out_eager.as_slice()?, &format!("{what}: eager"));
    }
    for (round, len) in [7usize, 2049, 7].into_iter().enumerate() {
        let v: Vec<u16> = (0..len).map(|i| (i * 613 + round) as u16).collect();
        let data = PinnedBuffer::from_slice(&s, &v)?;
        let mut out = PinnedBuffer::<u16>::zeros(&s, len)?;
        let mut out_eager = PinnedBuffer::<u16>::zeros(&s, len)?;
        through_scratch(&mut cache, &s, &data, &mut out)?;
        let got = out.as_slice()?.to_vec();
        through_scratch(&mut eager, &s, &data, &mut out_eager)?;
        let what = format!("u16 round {round}: {len} elements");
        same(&got, &v, &format!("{what}: model"));
        same(&got, out_eager.as_slice()?, &format!("{what}: eager"));
    }
    // `copy_2d` out of a graph-owned buffer: one row of 29 bytes from row 2 (pitch 64) into
    // row 3 of rows 37 apart (offset 111: 1-byte words), explicitly freed after it.
    const LEN: usize = 64 * 8;
    let v: Vec<u8> = (0..LEN).map(|i| (i * 13 + 5) as u8).collect();
    let data = PinnedBuffer::from_slice(&s, &v)?;
    let (sr, dr) = (Rows::new(29, 1, 64).from_row(2), Rows::new(29, 1, 37).from_row(3));
    let rows = |cache: &mut GraphCache, out: &mut PinnedBuffer<u8>| {
        let mut g = cache.builder(&s);
        let (r, w) = (g.read(&data), g.write(out));
        let t = g.alloc::<u8>(LEN);
        g.copy(r, t.write());
        g.copy_2d(t.read(), sr, w, dr);
        g.free(t);
        g.launch()
    };
    let mut out = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    let mut out_eager = PinnedBuffer::<u8>::zeros(&s, LEN)?;
    for call in 0..3 {
        out.as_mut_slice()?.fill(0x5a);
        out_eager.as_mut_slice()?.fill(0x5a);
        rows(&mut cache, &mut out)?;
        let got = out.as_slice()?.to_vec();
        rows(&mut eager, &mut out_eager)?;
        same(&got, &rows_model(&v, sr, dr, LEN, 0x5a), &format!("rows, call {call}: model"));
        same(&got, out_eager.as_slice()?, &format!("rows, call {call}: eager"));
    }
    if !stub() {
        assert_eq!(kinds(&cache)?, (1, 1), "a readback kernel node after the htod memcpy node");
    }
    eprintln!("{:?}", cache.stats());
    Ok(())
}

mod words {
    use cudagraph::kernels;

    /// Kernels with the readback kernel's parameter layout (`u64, u64, u64, u32` with a read
    /// and a written buffer) in two argument orders, and a filler.
    pub const SOURCE: &str = r#"
extern "C" __global__ void rev30_fill(unsigned long long n, unsigned long long seed,
                                      unsigned long long *x) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = seed * 0x9E3779B97F4A7C15ull + i * 0x100000001ull;
}
extern "C" __global__ void rev30_add(const unsigned long long *src, unsigned long long *dst,
                                     unsigned long long n, unsigned int k) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + k;
}
extern "C" __global__ void rev30_add_n_first(unsigned long long n, const unsigned long long *src,
                                             unsigned long long *dst, unsigned int k) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + k;
}
"#;

    kernels! {
        /// Kernels of [`SOURCE`].
        pub struct W {
            fn rev30_fill(n: u64, seed: u64, x: &mut [u64]);
            fn rev30_add(src: &[u64], dst: &mut [u64], n: u64, k: u32);
            fn rev30_add_n_first(n: u64, src: &[u64], dst: &mut [u64], k: u32);
        }
    }

    /// `rev30_fill`'s values.
    pub fn fill(n: usize, seed: u64) -> Vec<u64> {
        (0..n as u64)
            .map(|i| {
                seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i.wrapping_mul(0x1_0000_0001))
            })
            .collect()
    }
}

/// Attack 9. A builder's signature has a kernel node's parameter sizes and its accesses, not
/// its function: a user kernel `(src: &[u64], dst: &mut [u64], n: u64, k: u32)` after a fill
/// has the same signature as the readback node after that fill (sizes 8, 8, 8, 4; one place
/// read, one written), so the two share one variant and the node's function is swapped per
/// node (`cuGraphExecKernelNodeSetParams`) between the crate's readback kernel and the user's
/// on alternate calls. Both with device buffers and with a graph-owned source, where the user
/// kernel `rev30_add_n_first` takes it in argument 1 (pointer mask 0b0110) and the readback in
/// argument 0 (0b0011): a mask not swapped with the function leaves a placeholder unresolved
/// (a fault) or resolves a scalar. Any slip shows as an error or data unlike the model's; the
/// count of builds shows that the variant was shared (also on the stub driver).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_user_kernel_of_the_readback_s_layout_shares_its_variant_and_swaps_right() -> Result {
    use cudagraph::cudarc::nvrtc::compile_ptx;
    let _serial = serial();
    let (ctx, s, _k) = gpu()?;
    // SAFETY: the declarations match `words::SOURCE`; each kernel stays within `n` elements,
    // and every buffer passed has `n` elements.
    let w = unsafe { words::W::load(&ctx, compile_ptx(words::SOURCE)?) }?;
    const N: usize = 300;
    let n = N as u64;
    let c = LaunchConfig::for_num_elems(N as u32);
    let mut y = s.alloc_zeros::<u64>(N)?;
    let mut z = s.alloc_zeros::<u64>(N)?;
    let mut out = PinnedBuffer::<u64>::zeros(&s, N)?;
    // Device buffers: fill y; then y read back, or y + k into z.
    let mut cache = GraphCache::new();
    for call in 0..8u32 {
        let seed = u64::from(call) + 1;
        out.as_mut_slice()?.fill(0);
        {
            let mut g = cache.builder(&s);
            let (yw, zw, ow) = (g.write(&mut y), g.write(&mut z), g.write(&mut out));
            g.kernel(w.rev30_fill(n, seed, yw).launch(c));
            if call % 2 == 0 {
                g.copy(yw.read(), ow);
            } else {
                g.kernel(w.rev30_add(yw.read(), zw, n, call).launch(c));
            }
            g.launch()?;
        }
        let model = words::fill(N, seed);
        if call % 2 == 0 {
            same(out.as_slice()?, &model, &format!("call {call}: the readback"));
        } else {
            let want: Vec<u64> = model.iter().map(|v| v + u64::from(call)).collect();
            same(&s.clone_dtoh(&z)?, &want, &format!("call {call}: the user's kernel"));
        }
    }
    let st = cache.stats();
    eprintln!("device buffers: {st:?}");
    assert_eq!(st.builds, 1, "one variant for both kernels: {st:?}");
    // A graph-owned source in argument 0 (the readback) or 1 (`rev30_add_n_first`).
    let mut cache = GraphCache::new();
    for call in 0..8u32 {
        let seed = u64::from(call) + 50;
        out.as_mut_slice()?.fill(0);
        {
            let mut g = cache.builder(&s);
            let (zw, ow) = (g.write(&mut z), g.write(&mut out));
            let t = g.alloc::<u64>(N);
            g.kernel(w.rev30_fill(n, seed, t.write()).launch(c));
            if call % 2 == 0 {
                g.copy(t.read(), ow);
            } else {
                g.kernel(w.rev30_add_n_first(n, t.read(), zw, call).launch(c));
            }
            g.free(t);
            g.launch()?;
        }
        let model = words::fill(N, seed);
        if call % 2 == 0 {
            same(out.as_slice()?, &model, &format!("graph-owned, call {call}: the readback"));
        } else {
            let want: Vec<u64> = model.iter().map(|v| v + u64::from(call)).collect();
            same(&s.clone_dtoh(&z)?, &want, &format!("graph-owned, call {call}: the user's"));
        }
    }
    let st = cache.stats();
    eprintln!("graph-owned source: {st:?}");
    assert_eq!(st.builds, 1, "one variant for both kernels: {st:?}");
    Ok(())
}
