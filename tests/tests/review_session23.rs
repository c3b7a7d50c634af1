//! Review session 23 (brief 1, safe code only) of commit c2706b5: a `PinnedBuffer` carries its
//! own allocation id (`operand::pinned_id`, top bit set) in its handles, and a copy's words hold
//! it instead of the driver's `CU_POINTER_ATTRIBUTE_BUFFER_ID`. The driver keeps the host
//! address it resolved when a memcpy node is set, so a cached exec whose pinned host side was
//! freed and reallocated at the same address, with its node left as it was, crashes inside
//! `cuGraphLaunch` (or copies into / from the freed allocation). Each test frees and
//! reallocates pinned host memory between calls (usually landing at the same address) along a
//! path the commit's own test does not take, keeps every scalar of the graph the same (so that
//! only the allocation changed), and compares the results with a host model. A hole shows as
//! zeros or stale values in a fresh buffer, or as a crash.
//!
//! - `builder_alternates_pinned_buffer_and_pinned_host_slice_at_one_address`: one
//!   `GraphBuilder` shape whose host sides are a `PinnedBuffer` in even rounds and a cudarc
//!   `PinnedHostSlice` in odd rounds (both give `HostRead`/`HostWrite`, so one signature),
//!   each freed before the next is allocated: the crate's ids and the driver's must never be
//!   equal. The source side also goes through `HostWrite::read`.
//! - `copy_2d_into_pinned_buffers_freed_and_allocated_again`: `copy_2d` (graph! and builder)
//!   into a fresh `PinnedBuffer` each round.
//! - `swapped_and_replaced_pinned_buffers_with_memoized_execs`: ping-pong `PinnedBuffer`s
//!   (`std::mem::swap` every call, memoized execs on), one of them freed and reallocated every
//!   few calls: a memoized exec kept for the old buffer's words must not be taken for the new
//!   buffer at the same address.
//! - `keyed_capture_statements_on_pinned_buffers_freed_and_allocated_again`: keyed `capture`
//!   statements (kept recordings, `copy_dtoh` / `copy_htod` of `PinnedBuffer` operands) with
//!   fresh buffers every round; graph and eager mode.
//!
//! Run: `cargo test -p cudagraph-tests --test review_session23 -- --ignored --test-threads=1`.

mod common;

use std::sync::Arc;

use common::{Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice,
};
use cudagraph::{GraphCache, HostRead, HostWrite, Mode, PinnedBuffer, Rows, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of the slow kernel: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The pinned host memory of one round: the crate's or cudarc's.
enum Host {
    Buffer(PinnedBuffer<u32>),
    Slice(PinnedHostSlice<u32>),
}

impl Host {
    fn make(
        ctx: &Arc<CudaContext>,
        s: &Arc<CudaStream>,
        buffer: bool,
        data: &[u32],
    ) -> Result<Self> {
        Ok(if buffer {
            Host::Buffer(PinnedBuffer::from_slice(s, data)?)
        } else {
            let mut p = common::pinned::<u32>(ctx, data.len())?;
            p.as_mut_slice()?.copy_from_slice(data);
            Host::Slice(p)
        })
    }
    fn address(&self) -> Result<usize> {
        Ok(match self {
            Host::Buffer(b) => b.as_slice()?.as_ptr() as usize,
            Host::Slice(p) => p.as_ptr()? as usize,
        })
    }
    fn values(&self) -> Result<Vec<u32>> {
        Ok(match self {
            Host::Buffer(b) => b.as_slice()?.to_vec(),
            Host::Slice(p) => p.as_slice()?.to_vec(),
        })
    }
}

/// One builder graph, the same shape and scalars every call: `y = slow_iota(7, 3)`, the host
/// source copied into `x` (through `HostWrite::read` of the source's write handle), `z = 5x + 1`,
/// `y` copied into the host destination.
#[allow(clippy::too_many_arguments)]
fn builder_step(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    k: &common::Ops,
    (x, y, z): (&mut CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
    src: &mut Host,
    out: &mut Host,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let (xw, yw, zw) = (g.write(x), g.write(y), g.write(z));
    let sw: HostWrite<'_, u32> = match src {
        Host::Buffer(b) => g.write(b),
        Host::Slice(p) => g.write(p),
    };
    let sr: HostRead<'_, u32> = sw.read();
    let ow: HostWrite<'_, u32> = match out {
        Host::Buffer(b) => g.write(b),
        Host::Slice(p) => g.write(p),
    };
    g.kernel(k.slow_iota(N, SPINS, 7, 3, yw).launch(cfg()));
    g.copy(sr, xw);
    g.kernel(k.affine(N, 5, 1, xw.read(), zw).launch(cfg()));
    g.copy(yw.read(), ow);
    g.launch()
}

/// A `PinnedBuffer` and a cudarc `PinnedHostSlice` alternate as the host sides of one builder
/// shape, each round's freed before the next round's is allocated (so usually at the same
/// address): the crate's id of one and the driver's id of the other must differ, so every call
/// after a change sets the copies again. Each round: a changed call and an unchanged one.
#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_alternates_pinned_buffer_and_pinned_host_slice_at_one_address() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(300, "review 23: builder, pinned kinds alternating");
    let (ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut z = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let mut addresses = common::AddressesSeen::default();
    let want_out = host::slow_iota(N, SPINS, 7, 3);
    for round in 0..12u32 {
        let buffer = round % 2 == 0;
        let data = host::iota(N, 3, round * 17 + 1);
        let mut src = Host::make(&ctx, &s, buffer, &data)?;
        let mut out = Host::make(&ctx, &s, buffer, &vec![0u32; LEN])?;
        addresses.note(src.address()?);
        addresses.note(out.address()?);
        for again in 0..2 {
            let what = format!("round {round} (PinnedBuffer: {buffer}), call {again}");
            builder_step(&mut cache, &s, &k, (&mut x, &mut y, &mut z), &mut src, &mut out)?;
            s.synchronize()?;
            assert_same(&out.values()?, &want_out, &format!("{what}: destination"));
            assert_same(&s.clone_dtoh(&z)?, &host::affine(&data, 5, 1), &format!("{what}: source"));
            if let Host::Buffer(b) = &mut out {
                b.as_mut_slice()?.fill(0);
            } else if let Host::Slice(p) = &mut out {
                p.as_mut_slice()?.fill(0);
            }
        }
        drop((src, out));
    }
    addresses.assert_some_came_back(&format!("{:?}: ", cache.stats()));
    Ok(())
}

/// `copy_2d` from a device buffer into a fresh `PinnedBuffer` each round (freed after the
/// round), in `graph!` and through a `GraphBuilder`; the same rows and scalars every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_2d_into_pinned_buffers_freed_and_allocated_again() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(300, "review 23: copy_2d into reallocated pinned buffers");
    let (_ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let (w, h) = (256usize, 256usize);
    let rows = Rows::dense(w, h);
    let want = host::slow_iota(N, SPINS, 7, 4);
    let (mut graphed, mut built) = (GraphCache::new(), GraphCache::new());
    let mut addresses = common::AddressesSeen::default();
    for round in 0..10u32 {
        let mut a = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        let mut b = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        addresses.note(a.as_slice()?.as_ptr() as usize);
        addresses.note(b.as_slice()?.as_ptr() as usize);
        for again in 0..2 {
            graph!(&mut graphed, &s, {
                k.slow_iota(N, SPINS, 7, 4, &mut y).launch(cfg());
                copy_2d(&y, rows, &mut a, rows);
            })?;
            assert_same(a.as_slice()?, &want, &format!("round {round}, call {again}: graph!"));
            a.as_mut_slice()?.fill(0);
            let mut g = built.builder(&s);
            let (yw, bw) = (g.write(&mut y), g.write(&mut b));
            g.kernel(k.slow_iota(N, SPINS, 7, 4, yw).launch(cfg()));
            g.copy_2d(yw.read(), rows, bw, rows);
            g.launch()?;
            assert_same(b.as_slice()?, &want, &format!("round {round}, call {again}: builder"));
            b.as_mut_slice()?.fill(0);
        }
        drop((a, b));
    }
    addresses.assert_some_came_back("");
    assert!(graphed.stats().unchanged_calls >= 5, "{:?}", graphed.stats());
    Ok(())
}

/// One call: `y = slow_iota(7, 2)` copied into `out`, `src` copied into `x`, `z = 5x + 1`.
#[allow(clippy::too_many_arguments)]
fn pingpong(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    k: &common::Ops,
    (x, y, z): (&mut CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
    src: &PinnedBuffer<u32>,
    out: &mut PinnedBuffer<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        k.slow_iota(N, SPINS, 7, 2, &mut *y).launch(cfg());
        copy(&*y, &mut *out);
        copy(&src, &mut *x);
        k.affine(N, 5, 1, &*x, &mut *z).launch(cfg());
    })
}

/// Two sources and two destinations swapped with `std::mem::swap` every call (memoized execs:
/// each set gets its own exec, later calls launch it sending nothing), and every third call the
/// current source or destination freed and another allocated (at its address, usually): the
/// memoized exec kept for the old buffer holds its words (address and the old id) and must not
/// be launched for the new one. Destinations are zeroed before each call and sources rewritten,
/// so a copy that went to the wrong buffer shows.
#[test]
#[ignore = "needs a CUDA GPU"]
fn swapped_and_replaced_pinned_buffers_with_memoized_execs() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(300, "review 23: memoized execs, pinned buffers replaced");
    let (_ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut z = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    assert!(cache.execs_per_variant() > 1, "memoized execs are off by default");
    let mut src_a = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut src_b = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut out_a = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut out_b = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let want_out = host::slow_iota(N, SPINS, 7, 2);
    let mut reused = 0;
    for step in 0..60u32 {
        std::mem::swap(&mut src_a, &mut src_b);
        std::mem::swap(&mut out_a, &mut out_b);
        if step >= 8 && step % 3 == 0 {
            // Replace the source (even steps) or the destination (odd steps) used now.
            if step % 2 == 0 {
                let at = src_a.as_slice()?.as_ptr() as usize;
                drop(src_a);
                src_a = PinnedBuffer::<u32>::zeros(&s, LEN)?;
                reused += usize::from(src_a.as_slice()?.as_ptr() as usize == at);
            } else {
                let at = out_a.as_slice()?.as_ptr() as usize;
                drop(out_a);
                out_a = PinnedBuffer::<u32>::zeros(&s, LEN)?;
                reused += usize::from(out_a.as_slice()?.as_ptr() as usize == at);
            }
        }
        let data = host::iota(N, 3, step);
        src_a.as_mut_slice()?.copy_from_slice(&data);
        out_a.as_mut_slice()?.fill(0);
        pingpong(&mut cache, &s, &k, (&mut x, &mut y, &mut z), &src_a, &mut out_a)?;
        assert_same(out_a.as_slice()?, &want_out, &format!("step {step}: destination"));
        assert_same(
            &s.clone_dtoh(&z)?,
            &host::affine(&data, 5, 1),
            &format!("step {step}: source"),
        );
    }
    let st = cache.stats();
    eprintln!("replacements at the same address: {reused} of 18; {st:?}");
    assert!(st.memo_hits > 0, "the memoized path was not taken: {st:?}");
    assert!(reused > 0, "no pinned address came back: the test tests nothing");
    Ok(())
}

/// Keyed `capture` statements (recordings kept by operands and key) copying into and out of a
/// fresh `PinnedBuffer` each round, the key and scalars the same every call: a recording's
/// memcpy nodes resolved the old buffers' addresses, so a new buffer at the same address must
/// not take it. Graph and eager mode.
#[test]
#[ignore = "needs a CUDA GPU"]
fn keyed_capture_statements_on_pinned_buffers_freed_and_allocated_again() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(300, "review 23: keyed captures on reallocated pinned buffers");
    let (_ctx, s, k) = gpu()?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut y = s.alloc_zeros::<u32>(LEN)?;
        let mut x = s.alloc_zeros::<u32>(LEN)?;
        let mut z = s.alloc_zeros::<u32>(LEN)?;
        let want_out = host::slow_iota(N, SPINS, 7, 6);
        let mut addresses = common::AddressesSeen::default();
        for round in 0..10u32 {
            let data = host::iota(N, 11, round + 100);
            let src = PinnedBuffer::from_slice(&s, &data)?;
            let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
            addresses.note(src.as_slice()?.as_ptr() as usize);
            addresses.note(out.as_slice()?.as_ptr() as usize);
            for again in 0..2 {
                graph!(&mut cache, &s, {
                    k.slow_iota(N, SPINS, 7, 6, &mut y).launch(cfg());
                    capture(&y, &mut out, key = 1u32, |c, _, (y, mut out)| {
                        c.copy_dtoh(&y, &mut out)?;
                        Ok::<(), cudagraph::Error>(())
                    });
                    capture(&src, &mut x, key = 2u32, |c, _, (src, mut x)| {
                        c.copy_htod(&src, &mut x)?;
                        Ok::<(), cudagraph::Error>(())
                    });
                    k.affine(N, 5, 1, &x, &mut z).launch(cfg());
                })?;
                let what = format!("{mode:?} round {round} call {again}");
                assert_same(out.as_slice()?, &want_out, &format!("{what}: destination"));
                assert_same(
                    &s.clone_dtoh(&z)?,
                    &host::affine(&data, 5, 1),
                    &format!("{what}: source"),
                );
                out.as_mut_slice()?.fill(0);
            }
            drop((src, out));
        }
        addresses.assert_some_came_back(&format!("{mode:?}, {:?}: ", cache.stats()));
    }
    Ok(())
}
