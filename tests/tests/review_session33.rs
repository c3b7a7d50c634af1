//! Review 33 (brief 1, safe code only), a fresh reviewer. Focus: readback nodes, lazily made
//! node runs, builder words, memoized execs with the guessed next exec, pinned host buffers and
//! their guards, 2-D copies; then the closures.
//!
//! Every GPU result is compared exactly (integers) with what running the statements in order
//! on one stream gives; a slow kernel (`slow_iota`, `SPINS = 1 << 20`, a few milliseconds on an
//! H200) keeps a stream busy where ordering is what could break, and nothing synchronizes
//! before the step under attack.
//!
//! **Found (hole, fixed in this session): a `PinnedBuffer` whose own stream is a per-thread default stream,
//! moved to another thread.** `PinnedState::order` skips the wait for the buffer's event when
//! every use since the host last waited was on the buffer's own stream and this one is too,
//! comparing `CudaStream` objects (`core::ptr::eq`). cudarc's `per_thread_stream()` is one
//! object whose handle, `CU_STREAM_PER_THREAD`, names the calling thread's per-thread default
//! stream: the same object used on two threads is two streams. `PinnedBuffer` and
//! `Arc<CudaStream>` are `Send`: a use on thread 1 (queued behind a slow kernel), then the
//! buffer moved to thread 2 and used there through the same stream object, is not ordered
//! after thread 1's use, and `as_slice` on thread 2 waits for thread 2's record only, so the
//! host holds a `&[u32]` of memory that thread 1's copy writes afterwards (a data race with
//! the device; the slice's contents change under a shared borrow). Unit test (stub driver):
//! `pinned::review33::a_use_through_a_per_thread_stream_object_on_another_thread_waits_for_the_event`
//! (failed before the fix). Test 1 below shows the wrong data on a GPU.
//!
//! **Found (hole, fixed in this session): a pinned host operand of another context in a `capture` statement or
//! `GraphBuilder::capture`** (tests 3 and 3b). Acquiring pinned memory of another context than
//! the call's gives a null address with the buffer's length (`PinnedBuffer::use_on`, and
//! `Acquire for PinnedHostSlice` in `operand.rs`), on the promise that validation refuses the
//! call. Every node kind does, except captured work: `Captured::contexts_ok` is `true` and
//! `CaptureOperands::foreign` looks at device operands only (the standalone `capture` checks
//! every operand's context first, `capture.rs`). The closure's host view is (null, len); its
//! `slice`/`slice_mut`/`split_at_mut` move the pointer with `wrapping_add`, and `Capture::host`
//! turns a non-null pointer into `&[T]`/`&mut [T]` (`slice_of`, `HostFnArg::view`): a slice
//! at address 16 of 4 elements, read or written by the host function. Fails on the CPU stub
//! driver (`STUB_FRESH_RETAINS=2`); on a GPU it needs two devices.
//!
//! Not run on a GPU (none was lent to this review). On the CPU stub driver
//! (`REVIEW17_STUB=1`, `LD_LIBRARY_PATH` at the stub libraries) the tests run their host side;
//! their data checks need a GPU. Tests 3, 3b and 4 need `STUB_FRESH_RETAINS=2` there (the stub
//! then hands out a new context for the next two retains: "another device"), and test 4 must
//! run alone (the earlier tests use those two up). After the fixes all five pass there; tests 2,
//! 3 and 3b fail there with the fixes taken out.

#![allow(clippy::borrow_deref_ref)] // `graph!` operands are places marked `&`: `&*x`

mod common;

use common::review17::stub;
use common::{Result, gpu, serial};

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::{Error, GraphCache, Mode, PinnedBuffer, graph};

const SPINS: u32 = 1 << 20;
/// Elements of the pinned buffer (a small copy: a readback node, and a memcpy node in round 1).
const SMALL: u32 = 64;

/// Test 1 (hole, fixed in this session): thread 1 runs `slow_iota` into `a` then copies `a` into `pb` on its
/// per-thread default stream; `pb` and the stream object move to thread 2, which copies
/// `sevens` into `pb` on its own per-thread default stream, through the same object, and reads
/// `pb`. In statement order the last copy wins: `pb` is all 7 when read, and stays so. With the
/// hole, thread 2's copy is not ordered after thread 1's, `as_slice` returns at once with the
/// 7s, and thread 1's copy then overwrites them under the host's `&[u32]`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review33_a_pinned_buffer_on_a_per_thread_stream_moved_to_another_thread() -> Result {
    let _serial = serial();
    let (ctx, side, k) = gpu()?;
    for round in 0..2u32 {
        // Round 1: a copy above the readback bound (a memcpy node), the same ordering.
        let n = if round == 0 { SMALL } else { 2048 };
        let len = n as usize;
        let s = ctx.per_thread_stream();
        let mut pb = PinnedBuffer::<u32>::zeros(&s, len)?;
        let mut a = s.alloc_zeros::<u32>(len)?;
        // Made on another stream and finished before anything else runs.
        let sevens = side.clone_htod(&vec![7u32; len])?;
        side.synchronize()?;
        s.synchronize()?;
        let mut c1 = GraphCache::new();
        // Thread 1 (this one): a slow kernel, then `a` into `pb`.
        graph!(&mut c1, &s, {
            k.slow_iota(n, SPINS, 1, 0, &mut a).launch(LaunchConfig::for_num_elems(n));
            copy(&a, &mut pb);
        })?;
        // Thread 2: `sevens` into `pb` through the same stream object, then read it twice.
        let (first, second) = std::thread::scope(|sc| {
            let (s, sevens) = (&s, &sevens);
            sc.spawn(move || -> Result<(Vec<u32>, Vec<u32>)> {
                let mut pb = pb;
                let mut c2 = GraphCache::new();
                graph!(&mut c2, s, {
                    copy(&*sevens, &mut pb);
                })?;
                let view = pb.as_slice()?;
                let first = view.to_vec();
                // Long enough for thread 1's slow kernel and copy to finish.
                std::thread::sleep(std::time::Duration::from_millis(500));
                let second = view.to_vec();
                Ok((first, second))
            })
            .join()
            .expect("thread 2")
        })?;
        ctx.synchronize()?;
        if !stub() {
            let want = vec![7u32; len];
            assert_eq!(first, want, "round {round}: pb as thread 2 read it first");
            assert_eq!(
                second, want,
                "round {round}: the same `&[u32]` read 500 ms later: thread 1's copy wrote it \
                 after `as_slice` returned (its use was not waited for)"
            );
        }
    }
    Ok(())
}

/// Test 2 (hole of the crate's ordering claim, fixed: the legacy default stream waits for a
/// launch on a per-thread default stream; the same root as cudarc's own race): SAFETY.md
/// paragraph 5 says the ledger orders every graph use of a buffer after every earlier graph
/// use "on any stream, whatever cudarc's stream mode is". A context object that made no stream
/// of its own (`new_stream`) manages no synchronization in cudarc, so its buffers have no
/// events and the ledger is the only order. The ledger skips a buffer whose own stream is the
/// call's, compared as objects (`core::ptr::eq`, `ledger.rs` and `Guard::foreign_to`): a
/// buffer made on `per_thread_stream()` and written by graphs on two threads through that one
/// object is written by two streams, unordered. Thread 1 writes `d` slowly, thread 2 then writes
/// it quickly and reads it: in statement order thread 2's values are what `d` holds.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review33_graph_writes_on_two_threads_per_thread_streams_through_one_object() -> Result {
    let _serial = serial();
    assert!(cudagraph::driver_available(), "no CUDA driver");
    const N: u32 = 1 << 16;
    let c = LaunchConfig::for_num_elems(N);
    // Another context object of device 0 that makes no stream: cudarc tracks nothing for it.
    let quiet = cudagraph::cudarc::driver::CudaContext::new(0)?;
    let k = common::load(&quiet)?;
    assert!(!quiet.is_managing_stream_synchronization());
    let s = quiet.per_thread_stream();
    let mut d = s.alloc_zeros::<u32>(N as usize)?;
    s.synchronize()?;
    let mut c1 = GraphCache::new();
    graph!(&mut c1, &s, {
        k.slow_iota(N, SPINS, 1, 0, &mut d).launch(c);
    })?;
    // Fixed: the launch on a per-thread default stream is also waited for by the legacy
    // default stream (`Ledger::after`), which every thread's per-thread stream synchronizes
    // with: thread 2's graph below runs after thread 1's.
    assert_eq!(c1.stats().stream_waits, 1, "{:?}", c1.stats());
    let got = std::thread::scope(|sc| {
        let (s, k, d) = (&s, &k, &mut d);
        sc.spawn(move || -> Result<Vec<u32>> {
            let mut c2 = GraphCache::new();
            graph!(&mut c2, s, {
                k.iota(N, 3, 5, &mut *d).launch(c);
            })?;
            s.synchronize()?;
            // Long enough for thread 1's slow kernel to finish too.
            std::thread::sleep(std::time::Duration::from_millis(500));
            Ok(s.clone_dtoh(&*d)?)
        })
        .join()
        .expect("thread 2")
    })?;
    quiet.synchronize()?;
    if !stub() {
        common::assert_same(&got, &common::host::iota(N, 3, 5), "d after thread 2's write");
    }
    Ok(())
}

/// Test 3 (hole, fixed in this session): a pinned host operand of another context than the call's, listed in a
/// `capture` statement. Its acquisition gives a null address with the buffer's length
/// (`PinnedBuffer::use_on`, and cudarc's `PinnedHostSlice` in `operand.rs`: "validation then
/// refuses the call"), but nothing refuses it for a `capture` statement: `Captured::contexts_ok`
/// is `true` (captured work may cross devices) and `CaptureOperands::foreign` looks at device
/// operands only. The closure gets a `CaptureHostSliceMut` of (null, 8); `slice_mut(4..)` moves
/// the null pointer by 4 elements (`wrapping_add`: address 16), and `Capture::host` gives the
/// host function `&[u32]` of 4 elements at address 16 (`slice_of` only maps a *null* pointer to
/// an empty slice). Reading it dereferences address 16 on the worker thread: undefined
/// behaviour from safe code (a segfault). Here the host function only notes the slice's address
/// and length. Expected: the call refused (`Error::WrongContext`, as a `copy` or `host`
/// statement with that operand is), or the function given a slice of the buffer's own memory.
///
/// Needs two contexts: a non-primary context of the GPU (the buffer's), or the CPU stub
/// driver (`STUB_FRESH_RETAINS=2 REVIEW17_STUB=1`, `LD_LIBRARY_PATH` at the stub built from
/// `.ci/stub-driver/cuda_stub.c`), whose context objects of device 0 are different contexts and
/// whose `cuLaunchHostFunc` runs the function at once. On the stub it failed before the fix (the
/// call went through; the function got a 4-element `&[u32]` at address 0x10). In `Mode::Graph` (and through
/// `GraphBuilder::capture`, the same operands) the recorded host node reads it at each launch.
#[test]
#[ignore = "needs a CUDA GPU, or the CPU stub driver with REVIEW17_STUB=1"]
fn review33_a_pinned_operand_of_another_context_in_a_capture_statement() -> Result {
    let _serial = serial();
    let (_ctx, s, _) = gpu()?;
    let (_other, mut pb) = other_context_pinned()?;
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let r = graph!(&mut cache, &s, {
        capture(&mut pb, |c, (mut hv,)| {
            let tail = hv.slice_mut(4..);
            // Not dereferenced: with the hole it points at address 16.
            c.host((&tail,), |(t,)| {
                std::hint::black_box(t.as_ptr());
            })?;
            Ok::<(), Error>(())
        });
    });
    refused_as_another_context(r, "capture statement");
    s.synchronize()?;
    Ok(())
}

/// A pinned buffer of another context than `gpu()`'s: a non-primary context of device 0 (on
/// the stub, another context object of device 0, which the stub makes another context), with
/// that context object. One GPU is enough.
fn other_context_pinned() -> Result<(std::sync::Arc<CudaContext>, PinnedBuffer<u32>)> {
    let other = common::review26::non_primary()?;
    let os = other.new_stream()?;
    let pb = PinnedBuffer::<u32>::zeros(&os, 8)?;
    Ok((other, pb))
}

/// `r` is the refusal of a pinned operand of another context (fixed: before, the closure's host
/// function got a 4-element `&[u32]` at address 16, from the operand's null address).
#[track_caller]
fn refused_as_another_context(r: cudagraph::Result<()>, what: &str) {
    assert!(matches!(r, Err(Error::WrongContext { .. })), "{what}: {r:?}");
}

/// Test 3b (the same hole through `GraphBuilder::capture`): `g.write(&mut pb)` of a pinned
/// buffer of another context gives a `HostWrite` of (null, 8), which the builder's `capture`
/// lists as test 3's statement does; its closure's `slice_mut(4..)` reaches a host function as
/// a 4-element `&[u32]` at address 16. Expected: `launch` refused (`Error::WrongContext` or
/// `Error::InvalidNode`), or the slice inside the buffer.
#[test]
#[ignore = "needs a CUDA GPU, or the CPU stub driver with REVIEW17_STUB=1"]
fn review33_a_pinned_operand_of_another_context_in_a_builder_capture() -> Result {
    let _serial = serial();
    let (_ctx, s, _) = gpu()?;
    let (_other, mut pb) = other_context_pinned()?;
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let r = {
        let mut g = cache.builder(&s);
        let w = g.write(&mut pb);
        g.capture(&s, (w,), |c, (mut hv,)| {
            let tail = hv.slice_mut(4..);
            c.host((&tail,), |(t,)| {
                std::hint::black_box(t.as_ptr());
            })?;
            Ok::<(), Error>(())
        });
        g.launch()
    };
    refused_as_another_context(r, "GraphBuilder::capture");
    s.synchronize()?;
    Ok(())
}

/// Test 4 (no hole, the comparison for tests 3 and 3b): the same pinned buffer of another
/// context in a `host` statement and a `copy` is refused before anything runs
/// (`Error::WrongContext`): those node kinds check every operand's context.
#[test]
#[ignore = "needs a CUDA GPU, or the CPU stub driver with REVIEW17_STUB=1"]
fn review33_a_pinned_operand_of_another_context_in_host_and_copy_statements_is_refused() -> Result {
    let _serial = serial();
    let (_ctx, s, _) = gpu()?;
    let (_other, mut pb) = other_context_pinned()?;
    let d = s.alloc_zeros::<u32>(8)?;
    for mode in [Mode::Eager, Mode::Graph] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let r = graph!(&mut cache, &s, {
            host(&mut pb, |(p,)| p.fill(1));
        });
        assert!(matches!(r, Err(Error::WrongContext { .. })), "{mode:?}: host: {r:?}");
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let r = graph!(&mut cache, &s, {
            copy(&d, &mut pb);
        });
        assert!(matches!(r, Err(Error::WrongContext { .. })), "{mode:?}: copy: {r:?}");
    }
    Ok(())
}

/// Test 5 (review 33b's test 1; hole, fixed: the legacy default stream waits for the launch,
/// so the free on thread 2's per-thread stream follows it): thread 1 launches `slow_iota` into `d` on its per-thread
/// default stream while the context object manages synchronization (a `new_stream()` stream
/// exists), then drops that stream; `d` moves to thread 2, which drops it and at once allocates
/// `e` on its own per-thread stream, fills it with 7 and reads it after thread 1's kernel had
/// time to finish. In statement order `d` is freed after the graph, so `e` holds 7s. With the
/// hole, `d`'s memory is freed under the running graph, `e` gets it, and the graph's writes land
/// in `e`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review33b_a_per_thread_buffer_dropped_on_another_thread_after_the_last_stream_went() -> Result {
    const N: u32 = 1 << 16;
    const LEN: usize = N as usize;
    let _serial = serial();
    assert!(cudagraph::driver_available(), "no CUDA driver");
    let c = LaunchConfig::for_num_elems(N);
    // A context object of its own, so that its stream count is this test's.
    let ctx = CudaContext::new(0)?;
    let k = common::load(&ctx)?;
    let s = ctx.per_thread_stream();
    let made = ctx.new_stream()?;
    assert!(ctx.is_managing_stream_synchronization());
    let mut d = s.alloc_zeros::<u32>(LEN)?;
    s.synchronize()?;
    let mut cache = GraphCache::new();
    // Accepted: the context object manages synchronization now.
    graph!(&mut cache, &s, {
        k.slow_iota(N, SPINS, 1, 0, &mut d).launch(c);
    })?;
    assert_eq!(cache.stats().stream_waits, 1, "the legacy stream's wait: {:?}", cache.stats());
    // Dropping the last stream the object made turns its management off (no synchronization).
    drop(made);
    assert!(!ctx.is_managing_stream_synchronization());
    let got = std::thread::scope(|sc| {
        let s = &s;
        sc.spawn(move || -> Result<Vec<u32>> {
            // Freed on this thread's per-thread stream, waiting for nothing.
            drop(d);
            let e = s.clone_htod(&vec![7u32; LEN])?;
            s.synchronize()?;
            // Long enough for thread 1's slow kernel to finish.
            std::thread::sleep(std::time::Duration::from_millis(500));
            Ok(s.clone_dtoh(&e)?)
        })
        .join()
        .expect("thread 2")
    })?;
    ctx.synchronize()?;
    common::review17::assert_same(
        &got,
        &vec![7u32; LEN],
        "e, allocated after d was dropped: thread 1's graph wrote d's memory after its free",
    );
    Ok(())
}
