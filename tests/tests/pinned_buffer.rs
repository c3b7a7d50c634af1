//! `PinnedBuffer` (issue 31 item 4): page-locked host memory that waits for the device's uses
//! itself, with one `cuStreamSynchronize` of its own stream when it was last used there.
//!
//! Every result is compared exactly with the same work run by the eager oracle
//! (`Mode::Eager`) and with a host model of the integer kernels. `slow_iota` / `slow_affine` run
//! a few milliseconds on an H200, so a read, a host write or a free that does not wait for the
//! device shows as wrong data, not luck. Expected on a GPU: all pass.

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{GraphCache, Mode, PinnedBuffer, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of the slow kernels: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// `y = slow_iota(b)`, then `y` copied to `out`.
fn produce(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    y: &mut CudaSlice<u32>,
    out: &mut PinnedBuffer<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        k.slow_iota(N, SPINS, 7, b, &mut *y).launch(cfg());
        copy(&*y, &mut *out);
    })
}

/// A graph's copy into a `PinnedBuffer`, read with `as_slice` right after the call (no
/// `stream.synchronize()`): the read waits for the slow kernel and the copy, in graph mode
/// (unchanged calls and calls with a new scalar) and in eager mode alike.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_read_right_after_the_call_waits_for_the_copy() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let (mut graphed, mut eager) = (GraphCache::new(), GraphCache::new());
    eager.set_mode(Mode::Eager);
    let mut y_eager = s.alloc_zeros::<u32>(LEN)?;
    let mut out_eager = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    for step in 0..12u32 {
        let b = step / 3; // three calls per value: unchanged calls and updated ones
        produce(&mut graphed, &k, &s, &mut y, &mut out, b)?;
        let got = out.as_slice()?.to_vec();
        produce(&mut eager, &k, &s, &mut y_eager, &mut out_eager, b)?;
        let want = out_eager.as_slice()?.to_vec();
        assert_same(&got, &want, &format!("step {step}: graph against eager"));
        assert_same(&got, &host::slow_iota(N, SPINS, 7, b), &format!("step {step}: model"));
        // A second read waits for nothing and reads the same.
        assert_same(out.as_slice()?, &got, &format!("step {step}: second read"));
    }
    assert!(graphed.stats().unchanged_calls >= 6, "{:?}", graphed.stats());
    Ok(())
}

/// Two (then three) `PinnedBuffer`s alternated as the copy's destination for 100 calls: each
/// read right after its call holds that call's result (the memoized execs copy into the right
/// buffer), and in the last 50 calls no node is updated.
#[test]
#[ignore = "needs a CUDA GPU"]
fn alternating_destinations_read_their_own_calls_results() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    for sets in [2usize, 3] {
        let mut y = s.alloc_zeros::<u32>(LEN)?;
        let mut outs: Vec<PinnedBuffer<u32>> =
            (0..sets).map(|_| PinnedBuffer::zeros(&s, LEN)).collect::<cudagraph::Result<_>>()?;
        let mut cache = GraphCache::new();
        let mut eager = GraphCache::new();
        eager.set_mode(Mode::Eager);
        let mut y_eager = s.alloc_zeros::<u32>(LEN)?;
        let mut out_eager = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        let mut updates_after_first_round = None;
        for step in 0..100u32 {
            let i = step as usize % sets;
            let b = 5; // the same scalar: only the destination changes
            produce(&mut cache, &k, &s, &mut y, &mut outs[i], b)?;
            produce(&mut eager, &k, &s, &mut y_eager, &mut out_eager, b)?;
            let want = out_eager.as_slice()?.to_vec();
            assert_same(outs[i].as_slice()?, &want, &format!("{sets} sets, step {step}"));
            if step == 49 {
                updates_after_first_round = Some(cache.stats().node_updates);
            }
        }
        let st = cache.stats();
        assert_eq!(
            Some(st.node_updates),
            updates_after_first_round,
            "{sets} sets: node updates in the last 50 calls: {st:?}"
        );
        assert!(st.memo_hits > 0, "{sets} sets: {st:?}");
    }
    Ok(())
}

/// `y = affine(x)` where `x` was first written by a slow kernel and then overwritten by a copy
/// from the `PinnedBuffer`: writing the buffer with `as_mut_slice` right after the call waits
/// for that copy, so `y` is made from the values the buffer held at the call. On the buffer's
/// own stream and on another one (the event path; review 13's attack, merged here).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_write_right_after_the_call_waits_for_the_copy_that_reads_it() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    for on in [&s, &other] {
        let mut x = on.alloc_zeros::<u32>(LEN)?;
        let mut y = on.alloc_zeros::<u32>(LEN)?;
        let mut src = PinnedBuffer::from_slice(&s, &host::iota(N, 3, 1))?;
        let mut cache = GraphCache::new();
        for step in 0..6u32 {
            let sent = src.as_slice()?.to_vec();
            graph!(&mut cache, on, {
                k.slow_iota(N, SPINS, 1, 0, &mut x).launch(cfg());
                copy(&src, &mut x);
                k.affine(N, 2, 1, &x, &mut y).launch(cfg());
            })?;
            // At once: the slow kernel still runs, the copy has not read `src` yet.
            src.as_mut_slice()?.copy_from_slice(&host::iota(N, 11, step + 100));
            let got = on.clone_dtoh(&y)?;
            let own = core::ptr::eq(on, &s);
            assert_same(&got, &host::affine(&sent, 2, 1), &format!("own {own}, step {step}"));
        }
    }
    Ok(())
}

/// Used by a call on another stream than its own (the event path), then on its own stream
/// again (which waits for the other stream's use): each read right after holds its call's
/// result.
#[test]
#[ignore = "needs a CUDA GPU"]
fn uses_on_another_stream_are_waited_for() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    for step in 0..8u32 {
        let on = if step % 2 == 0 { &other } else { &s };
        produce(&mut cache, &k, on, &mut y, &mut out, step)?;
        assert_same(out.as_slice()?, &host::slow_iota(N, SPINS, 7, step), &format!("step {step}"));
    }
    // Two calls in a row, the first on the other stream writing with a slow kernel first, the
    // second on the buffer's own stream: the second's copy is ordered after the first's.
    produce(&mut cache, &k, &other, &mut y, &mut out, 40)?;
    let mut y2 = s.alloc_zeros::<u32>(LEN)?;
    let mut fast = GraphCache::new();
    graph!(&mut fast, &s, {
        k.iota(N, 1, 9, &mut y2).launch(cfg());
        copy(&y2, &mut out);
    })?;
    assert_same(out.as_slice()?, &host::iota(N, 1, 9), "the later call's copy lands last");
    Ok(())
}

/// A `PinnedBuffer` dropped right after a call whose copy into it is still pending: the drop
/// waits, so the page-locked memory allocated next (often at the same address) keeps what the
/// host wrote into it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_drop_waits_for_the_pending_copy() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let sentinel = host::iota(N, 13, 17);
    for step in 0..4u32 {
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        produce(&mut cache, &k, &s, &mut y, &mut out, step)?;
        drop(out);
        let mut next = PinnedBuffer::from_slice(&s, &sentinel)?;
        s.synchronize()?;
        assert_same(next.as_mut_slice()?, &sentinel, &format!("step {step}"));
    }
    Ok(())
}

/// `PinnedBuffer`s freed after a call and allocated again before the next (the allocator hands
/// the same addresses back): a copy's words hold the buffer's own allocation id, not the
/// driver's, so the next call must see new buffers at old addresses as changed, copy from the
/// new source and into the new destination, and never make the driver touch the freed ones
/// (a memcpy node left as it was crashed inside `cuGraphLaunch`, `kind/memcpy.rs` `host_side`).
/// Both directions, behind a slow kernel; graph against eager and the host model. The
/// addresses must repeat at least once, or the test tests nothing.
#[test]
#[ignore = "needs a CUDA GPU"]
fn buffers_freed_and_allocated_again_at_the_same_addresses() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut y_eager = s.alloc_zeros::<u32>(LEN)?;
    let mut x_eager = s.alloc_zeros::<u32>(LEN)?;
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::new());
    eager.set_mode(Mode::Eager);
    let mut addresses = common::AddressesSeen::default();
    for round in 0..12u32 {
        let src = host::iota(N, 3, round);
        let input = PinnedBuffer::from_slice(&s, &src)?;
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        addresses.note(input.as_slice()?.as_ptr() as usize);
        addresses.note(out.as_slice()?.as_ptr() as usize);
        let step = |c: &mut GraphCache,
                    x: &mut CudaSlice<u32>,
                    y: &mut CudaSlice<u32>,
                    out: &mut PinnedBuffer<u32>| {
            graph!(c, &s, {
                k.slow_iota(N, SPINS, 7, round, &mut *y).launch(cfg());
                copy(&input, &mut *x);
                k.affine_inplace(N, 5, 1, &mut *x).launch(cfg());
                k.affine(N, 1, 0, &*x, &mut *y).launch(cfg());
                copy(&*y, &mut *out);
            })
        };
        step(&mut cache, &mut x, &mut y, &mut out)?;
        let got = out.as_slice()?.to_vec();
        let mut want = src.clone();
        host::affine_inplace(&mut want, 5, 1);
        assert_same(&got, &want, &format!("round {round}: model"));
        let mut out_eager = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        step(&mut eager, &mut x_eager, &mut y_eager, &mut out_eager)?;
        assert_same(&got, out_eager.as_slice()?, &format!("round {round}: graph against eager"));
        drop((input, out));
    }
    addresses.assert_some_came_back("");
    assert!(cache.stats().hits >= 11, "{:?}", cache.stats());
    Ok(())
}

/// The host model of `slow_iota` (composed by squaring) equals the generator run step by step.
#[test]
fn the_slow_iota_model_equals_the_stepwise_generator() {
    for spins in [0, 1, 2, 3, 7, 64, 1000, 4097] {
        for (a, b) in [(7, 0), (7, 5), (1, 1 << 31)] {
            assert_eq!(
                host::slow_iota(64, spins, a, b),
                host::slow_iota_stepwise(64, spins, a, b),
                "spins {spins}, a {a}, b {b}"
            );
        }
    }
}

/// `graph!`'s `capture` statement with `PinnedBuffer` operands (it takes any pinned place): a
/// captured device→host copy after a slow kernel, read right after the call, and a captured
/// host→device copy of a buffer the host rewrites right after the call (it must wait for the
/// copy). Graph and eager mode, keyed recordings reused across calls.
#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_statement_copies_into_and_out_of_pinned_buffers() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut y = s.alloc_zeros::<u32>(LEN)?;
        let mut x = s.alloc_zeros::<u32>(LEN)?;
        let mut z = s.alloc_zeros::<u32>(LEN)?;
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        let mut src = PinnedBuffer::from_slice(&s, &host::iota(N, 3, 1))?;
        for step in 0..6u32 {
            let sent = src.as_slice()?.to_vec();
            graph!(&mut cache, &s, {
                k.slow_iota(N, SPINS, 7, step % 2, &mut y).launch(cfg());
                capture(&y, &mut out, key = step % 2, |c, _, (y, mut out)| {
                    c.copy_dtoh(&y, &mut out)?;
                    Ok::<(), cudagraph::Error>(())
                });
                k.slow_iota(N, SPINS, 1, 0, &mut x).launch(cfg());
                capture(&src, &mut x, key = 0u32, |c, _, (src, mut x)| {
                    c.copy_htod(&src, &mut x)?;
                    Ok::<(), cudagraph::Error>(())
                });
                k.affine(N, 2, 1, &x, &mut z).launch(cfg());
            })?;
            // At once: the slow kernels still run, the captured copies have not run yet.
            src.as_mut_slice()?.copy_from_slice(&host::iota(N, 11, step + 100));
            let what = format!("{mode:?} step {step}");
            assert_same(out.as_slice()?, &host::slow_iota(N, SPINS, 7, step % 2), &what);
            assert_same(&s.clone_dtoh(&z)?, &host::affine(&sent, 2, 1), &what);
        }
    }
    Ok(())
}
