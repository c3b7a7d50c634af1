//! Review 13 (brief 1, commit 84a81a8 `PinnedBuffer`, and 2b592bd `Pack::push_slow`): safe code
//! only (cudarc's safe API included) against `PinnedBuffer`'s waits.
//!
//! `slow_iota` runs a few milliseconds on an H200, so a read, a host write or a free that does
//! not wait for the device shows as wrong data. Every result is compared exactly with a host
//! model of the integer kernels (and eager mode where it applies). What each test attacks and
//! what is expected on a GPU:
//! - `two_context_objects_of_one_device`: buffer of one `Arc<CudaContext>`, graph on a stream
//!   (and kernels) of a second object of the same device: the event path. Expected: pass.
//! - (`host_write_right_after_a_call_on_another_stream_waits`, `as_mut_slice` racing a copy that
//!   reads the buffer on a stream other than its own, passed on the H200 and was merged into
//!   `pinned_buffer.rs`'s `a_host_write_right_after_the_call_waits_for_the_copy_that_reads_it`,
//!   which runs on both streams.)
//! - `two_other_streams_in_a_row_then_home`: uses on streams A, B (neither its own), then its
//!   own: each later use ordered after the earlier (slow one first). Expected: pass.
//! - `eager_cache_and_eager_macro_on_another_stream`: `Mode::Eager` and `eager!` on another
//!   stream, read right after. Expected: pass.
//! - `builder_copy_copy_2d_and_host_node`: `GraphBuilder` read/write, `copy`, `copy_2d` and a
//!   `host` node over the buffer, read right after `launch`. Expected: pass.
//! - `host_statement_over_pinned_buffers`: `host` statement reading one `PinnedBuffer` and
//!   writing another, graph and eager. Expected: pass.
//! - `swapped_between_calls`: `std::mem::swap` of two buffers between memoized calls. Expected:
//!   pass.
//! - `dropped_right_after_a_call_on_another_stream`: the `cuEventSynchronize` path of `drop`.
//!   Expected: pass.
//! - `moved_to_another_thread_then_read_and_dropped`: `Send`. Expected: pass.
//! - `panic_in_a_scalar_mid_call`: a scalar argument panics mid-call (after or before the
//!   acquire), then the buffer is used and read. Expected: pass.
//! - `zero_length_buffers`: `zeros(0)`, `from_slice(&[])` copied to/from. Expected: pass.
//! - `beside_cudarc_pinned_host_slice`: one call copying into a `PinnedBuffer` and a cudarc
//!   `PinnedHostSlice` from one device buffer; both read right after. Expected: pass.
//! - `graph_call_on_a_stream_cudarc_captures`: a call copying into the buffer while cudarc's
//!   safe `begin_capture` captures the buffer's own stream; the buffer is dropped after
//!   `end_capture`, its memory likely reused, and cudarc's graph (if any) launched. Expected:
//!   pass (the call is refused or records nothing that outlives it).
//! - `dropped_while_its_stream_is_capturing`: SUSPECTED HOLE. A slow copy into the buffer is
//!   pending on its own stream; cudarc's safe `begin_capture` (relaxed) starts a capture there;
//!   `drop` then gets `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` from `cuStreamSynchronize`,
//!   records it and calls `cuMemFreeHost` anyway (pinned.rs `Drop`: "the memory is freed either
//!   way (the faulted context runs nothing more)", but the context is not faulted and the copy
//!   still runs). Whether the copy then writes freed page-locked memory depends on whether
//!   `cuMemFreeHost` waits for the device (undocumented; SAFETY.md 12 measured that it did).
//!   Expected: pass only if it does; a failure is a use-after-free. `as_slice` in the same state
//!   must return an error, not a slice.
//! - `event_recorded_into_a_capture_of_another_stream`: SUSPECTED HOLE (same cause). A slow copy
//!   into the buffer on another stream (the event path), then a `graph!` call using it on that
//!   stream while cudarc captures it: the guard's `cuEventRecord` goes into the capture, so the
//!   event's last real record is no longer what `cuEventSynchronize` waits for (the driver
//!   answers `CUDA_ERROR_CAPTURED_EVENT` or similar); `as_slice` must give an error or the slow
//!   copy's complete result, and `drop` right after frees while the copy may still run.
//!   Expected: pass only if `cuMemFreeHost` waits for the device.
//!
//! Fixed after this review: `PinnedBuffer` waits with `cuEventSynchronize` only (the event's
//! last real record follows every use, so a capture begun on the stream afterwards does not
//! stop the wait), and `drop` leaks the memory when its wait fails instead of freeing it.

mod common;

use std::sync::{Arc, Mutex};

use common::{Ops, Result, assert_same, gpu, host, load};
use cudagraph::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{GraphCache, Mode, PinnedBuffer, Rows, eager, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of the slow kernels: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// `y = slow_iota(b)` on `s`, then `y` copied to `out`.
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

/// Ends the capture of `s`, whatever it recorded or refused, and clears what cudarc parked in
/// the context; twice, so that a capture the first attempt left open ends too.
fn end_capture_and_clear(ctx: &Arc<CudaContext>, s: &Arc<CudaStream>) {
    for _ in 0..2 {
        let _ = s.end_capture(CUgraphInstantiate_flags(0));
        let _ = ctx.check_err();
    }
}

/// `y = iota(1, b)` on `s` (fast), then `y` copied to `out`.
fn produce_fast(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    y: &mut CudaSlice<u32>,
    out: &mut PinnedBuffer<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        k.iota(N, 1, b, &mut *y).launch(cfg());
        copy(&*y, &mut *out);
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_context_objects_of_one_device() -> Result {
    let _serial = common::serial();
    let (_ctx, s, _k) = gpu()?;
    let ctx2 = CudaContext::new(0)?;
    let s2 = ctx2.new_stream()?;
    let k2 = load(&ctx2)?;
    let mut y2 = s2.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    for step in 0..6u32 {
        produce(&mut cache, &k2, &s2, &mut y2, &mut out, step)?;
        assert_same(out.as_slice()?, &host::slow_iota(N, SPINS, 7, step), &format!("step {step}"));
    }
    // A use on the second object's stream, then at once one on the buffer's own stream of the
    // first object: the second (fast) lands last.
    produce(&mut cache, &k2, &s2, &mut y2, &mut out, 50)?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    produce_fast(&mut GraphCache::new(), &k2, &s, &mut y, &mut out, 9)?;
    assert_same(out.as_slice()?, &host::iota(N, 1, 9), "own stream after the other object's");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_other_streams_in_a_row_then_home() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
    let mut ya = a.alloc_zeros::<u32>(LEN)?;
    let mut yb = b.alloc_zeros::<u32>(LEN)?;
    let mut ys = s.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let (mut ca, mut cb, mut cs) = (GraphCache::new(), GraphCache::new(), GraphCache::new());
    for step in 0..4u32 {
        // Slow on A, fast on B: B's copy must land after A's.
        produce(&mut ca, &k, &a, &mut ya, &mut out, step)?;
        produce_fast(&mut cb, &k, &b, &mut yb, &mut out, step + 1000)?;
        assert_same(out.as_slice()?, &host::iota(N, 1, step + 1000), &format!("A then B {step}"));
        // Slow on A, fast on B, fast on its own stream: the own stream's lands last.
        produce(&mut ca, &k, &a, &mut ya, &mut out, step)?;
        produce_fast(&mut cb, &k, &b, &mut yb, &mut out, step + 2000)?;
        produce_fast(&mut cs, &k, &s, &mut ys, &mut out, step + 3000)?;
        assert_same(out.as_slice()?, &host::iota(N, 1, step + 3000), &format!("A B s {step}"));
        // Slow on its own stream, fast on A: A's lands last.
        produce(&mut cs, &k, &s, &mut ys, &mut out, step)?;
        produce_fast(&mut ca, &k, &a, &mut ya, &mut out, step + 4000)?;
        assert_same(out.as_slice()?, &host::iota(N, 1, step + 4000), &format!("s then A {step}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn eager_cache_and_eager_macro_on_another_stream() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut y = other.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    for step in 0..4u32 {
        produce(&mut cache, &k, &other, &mut y, &mut out, step)?;
        assert_same(out.as_slice()?, &host::slow_iota(N, SPINS, 7, step), &format!("eager {step}"));
        eager!(&other, {
            k.slow_iota(N, SPINS, 7, step + 10, &mut y).launch(cfg());
            copy(&y, &mut out);
        })?;
        let want = host::slow_iota(N, SPINS, 7, step + 10);
        assert_same(out.as_slice()?, &want, &format!("eager! {step}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_copy_copy_2d_and_host_node() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut rows = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let sum = Arc::new(Mutex::new(Vec::new()));
    let mut cache = GraphCache::new();
    let (w, h, p) = (100usize, 64usize, 256usize);
    for step in 0..4u32 {
        let on = if step % 2 == 0 { &s } else { &other };
        let mut g = cache.builder(on);
        let yw = g.write(&mut y);
        let (ow, rw) = (g.write(&mut out), g.write(&mut rows));
        g.kernel(k.slow_iota(N, SPINS, 7, step, yw).launch(cfg()));
        g.copy(yw.read(), ow);
        g.copy_2d(yw.read(), Rows::new(w, h, p), rw, Rows::new(w, h, p));
        let seen = sum.clone();
        g.host((ow.read(),), move |(o,)| {
            seen.lock().unwrap().push(o.iter().fold(0u32, |a, &v| a.wrapping_add(v)));
        });
        g.launch()?;
        let want = host::slow_iota(N, SPINS, 7, step);
        assert_same(out.as_slice()?, &want, &format!("builder copy {step}"));
        let got_rows = rows.as_slice()?;
        for r in 0..h {
            let at = r * p;
            assert_same(&got_rows[at..at + w], &want[at..at + w], &format!("row {r} {step}"));
        }
        on.synchronize()?;
        let total = want.iter().fold(0u32, |a, &v| a.wrapping_add(v));
        assert_eq!(sum.lock().unwrap().last(), Some(&total), "host node {step}");
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn host_statement_over_pinned_buffers() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    for mode in [Mode::Graph, Mode::Eager] {
        let mut y = s.alloc_zeros::<u32>(LEN)?;
        let mut a = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        let mut b = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        for step in 0..4u32 {
            graph!(&mut cache, &s, {
                k.slow_iota(N, SPINS, 7, step, &mut y).launch(cfg());
                copy(&y, &mut a);
                host(&a, &mut b, move |(a, b)| {
                    for (o, i) in b.iter_mut().zip(a) {
                        *o = i.wrapping_mul(7) ^ step;
                    }
                });
            })?;
            let want: Vec<u32> = host::slow_iota(N, SPINS, 7, step)
                .iter()
                .map(|v| v.wrapping_mul(7) ^ step)
                .collect();
            assert_same(b.as_slice()?, &want, &format!("{mode:?} {step}"));
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn swapped_between_calls() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut a = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut b = PinnedBuffer::<u32>::from_slice(&s, &host::iota(N, 5, 5))?;
    let mut cache = GraphCache::new();
    let mut kept = host::iota(N, 5, 5); // what `b` (after the swap: the other one) holds
    for step in 0..8u32 {
        produce(&mut cache, &k, &s, &mut y, &mut a, step % 2)?;
        std::mem::swap(&mut a, &mut b);
        // `b` is the buffer just written; `a` holds the previous call's result.
        assert_same(b.as_slice()?, &host::slow_iota(N, SPINS, 7, step % 2), &format!("{step}"));
        assert_same(a.as_slice()?, &kept, &format!("other {step}"));
        kept = b.as_slice()?.to_vec();
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dropped_right_after_a_call_on_another_stream() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut y = other.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let sentinel = host::iota(N, 13, 17);
    for step in 0..4u32 {
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        produce(&mut cache, &k, &other, &mut y, &mut out, step)?;
        drop(out);
        let mut next = PinnedBuffer::from_slice(&s, &sentinel)?;
        ctx.synchronize()?;
        assert_same(next.as_mut_slice()?, &sentinel, &format!("step {step}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn moved_to_another_thread_then_read_and_dropped() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let sentinel = host::iota(N, 13, 17);
    for step in 0..4u32 {
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        let on = if step % 2 == 0 { &s } else { &other };
        let mut yy = on.alloc_zeros::<u32>(LEN)?;
        produce(&mut cache, &k, on, if step % 2 == 0 { &mut y } else { &mut yy }, &mut out, step)?;
        let got =
            std::thread::spawn(move || out.as_slice().map(<[u32]>::to_vec)).join().unwrap()?;
        assert_same(&got, &host::slow_iota(N, SPINS, 7, step), &format!("read {step}"));
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        produce(&mut cache, &k, on, if step % 2 == 0 { &mut y } else { &mut yy }, &mut out, step)?;
        std::thread::spawn(move || drop(out)).join().unwrap();
        let mut next = PinnedBuffer::from_slice(&s, &sentinel)?;
        ctx.synchronize()?;
        assert_same(next.as_mut_slice()?, &sentinel, &format!("drop {step}"));
    }
    Ok(())
}

fn boom(step: u32) -> u32 {
    assert!(step != 1, "a scalar panics mid-call");
    step
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn panic_in_a_scalar_mid_call() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut y = other.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    let mut want = vec![0u32; LEN];
    for step in 0..4u32 {
        let on = if step % 2 == 0 { &s } else { &other };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            graph!(&mut cache, on, {
                k.slow_iota(N, SPINS, 7, step, &mut y).launch(cfg());
                copy(&y, &mut out);
                k.iota(N, 1, boom(step), &mut y).launch(cfg());
                copy(&y, &mut out);
            })
        }));
        if step == 1 {
            assert!(r.is_err(), "step 1 panics");
        } else {
            r.unwrap()?;
            want = host::iota(N, 1, step);
        }
        assert_same(out.as_slice()?, &want, &format!("step {step}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn zero_length_buffers() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut empty = PinnedBuffer::<u32>::zeros(&s, 0)?;
    let from = PinnedBuffer::<u32>::from_slice(&s, &[])?;
    assert!(empty.is_empty() && from.is_empty());
    assert!(empty.as_slice()?.is_empty() && empty.as_mut_slice()?.is_empty());
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    graph!(&mut cache, &s, {
        k.iota(N, 1, 3, &mut y).launch(cfg());
    })?;
    // Copies of zero elements, or of lengths that differ: refused or nothing, never a crash.
    let r1 = graph!(&mut cache, &s, {
        copy(&y, &mut empty);
    });
    let r2 = graph!(&mut cache, &s, {
        copy(&from, &mut y);
    });
    println!("copy into an empty PinnedBuffer: {r1:?}; from one: {r2:?}");
    assert_same(&s.clone_dtoh(&y)?, &host::iota(N, 1, 3), "y unchanged");
    assert!(empty.as_slice()?.is_empty());
    drop((empty, from));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn beside_cudarc_pinned_host_slice() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut mine = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut theirs = common::pinned::<u32>(&ctx, LEN)?;
    let mut cache = GraphCache::new();
    for step in 0..4u32 {
        graph!(&mut cache, &s, {
            k.slow_iota(N, SPINS, 7, step, &mut y).launch(cfg());
            copy(&y, &mut mine);
            copy(&y, &mut theirs);
        })?;
        let want = host::slow_iota(N, SPINS, 7, step);
        assert_same(theirs.as_slice()?, &want, &format!("cudarc's {step}"));
        assert_same(mine.as_slice()?, &want, &format!("ours {step}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_call_on_a_stream_cudarc_captures() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let mut cache = GraphCache::new();
    produce_fast(&mut cache, &k, &s, &mut y, &mut out, 1)?;
    assert_same(out.as_slice()?, &host::iota(N, 1, 1), "before");
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let r = produce_fast(&mut cache, &k, &s, &mut y, &mut out, 2);
    let recorded = s.end_capture(CUgraphInstantiate_flags(0));
    let parked = ctx.check_err();
    let _ = s.end_capture(CUgraphInstantiate_flags(0));
    let _ = ctx.check_err();
    println!(
        "call: {r:?}; recorded: {:?}; parked {parked:?}",
        recorded.as_ref().map(Option::is_some)
    );
    drop(out);
    let _ = ctx.check_err();
    let sentinel = host::iota(N, 13, 17);
    let mut next = PinnedBuffer::from_slice(&s, &sentinel)?;
    s.synchronize()?;
    if let Ok(Some(g)) = &recorded {
        g.launch()?;
        s.synchronize()?;
    }
    assert_same(next.as_mut_slice()?, &sentinel, "a replay wrote the freed buffer");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dropped_while_its_stream_is_capturing() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let mut y = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let sentinel = host::iota(N, 13, 17);
    for step in 0..4u32 {
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        produce(&mut cache, &k, &s, &mut y, &mut out, step)?;
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        // Not a slice while the copy may be pending: an error, or (the event was recorded
        // before the capture began, so `cuEventSynchronize` waits for it) the finished copy.
        // (Review 13 expected an error: the first design waited with `cuStreamSynchronize`,
        // which a capturing stream refuses.)
        if let Ok(got) = out.as_slice() {
            let want = host::slow_iota(N, SPINS, 7, step);
            assert_same(got, &want, &format!("step {step}: a slice while the stream captures"));
        }
        end_capture_and_clear(&ctx, &s);
        // The copy is still pending if the failed wait did not wait: drop during a new capture.
        produce(&mut cache, &k, &s, &mut y, &mut out, step)?;
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        drop(out);
        let freed = ctx.check_err();
        let next = PinnedBuffer::from_slice(&s, &sentinel);
        end_capture_and_clear(&ctx, &s);
        s.synchronize()?;
        let _ = ctx.check_err();
        println!(
            "step {step}: drop's error {freed:?}; allocation during capture: {}",
            next.is_ok()
        );
        let mut next = match next {
            Ok(n) => n,
            Err(_) => PinnedBuffer::from_slice(&s, &sentinel)?,
        };
        assert_same(next.as_mut_slice()?, &sentinel, &format!("step {step}: freed memory written"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn event_recorded_into_a_capture_of_another_stream() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let other = ctx.new_stream()?;
    let mut y = other.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    let sentinel = host::iota(N, 13, 17);
    for step in 0..4u32 {
        let mut out = PinnedBuffer::<u32>::zeros(&s, LEN)?;
        produce(&mut cache, &k, &other, &mut y, &mut out, step)?;
        other.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let r = produce_fast(&mut cache, &k, &other, &mut y, &mut out, 77);
        end_capture_and_clear(&ctx, &other);
        let read = out.as_slice().map(<[u32]>::to_vec);
        println!("step {step}: call {r:?}; read {:?}", read.as_ref().map(|_| "a slice"));
        if let Ok(got) = read {
            assert_same(&got, &host::slow_iota(N, SPINS, 7, step), &format!("read {step}"));
        }
        produce(&mut cache, &k, &other, &mut y, &mut out, step)?;
        other.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let _ = produce_fast(&mut cache, &k, &other, &mut y, &mut out, 77);
        end_capture_and_clear(&ctx, &other);
        drop(out);
        let _ = ctx.check_err();
        let mut next = PinnedBuffer::from_slice(&s, &sentinel)?;
        ctx.synchronize()?;
        assert_same(next.as_mut_slice()?, &sentinel, &format!("step {step}: freed memory written"));
    }
    Ok(())
}
