//! Review 31 (brief 1, safe code only), a fresh reviewer. Focus, in order: eager mode
//! (`Mode::Eager`, `eager!`, a cache switched between modes, panics and early returns mid-call,
//! buffers dropped right after an eager call); memoized execs (`set_execs_per_variant`),
//! eviction, `clear`, dropping the cache or a buffer while launches run, a buffer freed and its
//! address taken at once by another allocation; `__private`, user-implementable traits and
//! public constructors.
//!
//! Every GPU result is compared exactly (integers) with a host model; a slow kernel (`slow_iota`,
//! `SPINS = 1 << 20`, a few milliseconds on an H200) keeps a stream busy where ordering is what
//! could break, and nothing synchronizes before the step under attack.
//!
//! **Found (hole, fixed here): overlapping uses of one `PinnedBuffer` lose a record of its
//! event.** A `PinnedBuffer` orders its uses with one event: each use waits for it when
//! acquired (`PinnedState::order`) and records it when its guard drops (`PinnedState::used`),
//! and `as_slice`, `as_mut_slice`, `drop` and the own-stream shortcut rely on the event's last
//! record following every use. Acquisition and record are split across user code: two
//! `GraphBuilder`s may hold `&pb` at once, and a `graph!` body may make another call
//! (`eager!`, `graph!`) inside a scalar argument while the outer call holds `&pb`. Then use 1 on
//! stream A is ordered, use 2 on stream B is ordered and recorded, and use 1's record on A
//! replaces use 2's: the host's `as_mut_slice` (and the next use on the buffer's own stream,
//! which skips its wait) did not wait for use 2, whose copy out of `pb` was still queued on B
//! behind a slow kernel, so the host (or a device copy) overwrote memory that copy read.
//! Safe code only (tests 1 and 2). Fix (`operand.rs`): the state counts its records; a guard
//! notes the count when ordered, and when another record came in between, its stream first
//! waits for the event, so the last record follows both uses.
//!
//! **Found (hole, fixed after the review): the same with cudarc's `PinnedHostSlice`** (test 3):
//! its guard was cudarc's event (`GuardKind::Event`), recorded on drop with no count to
//! compare. Plain cudarc never splits `stream_synced_slice` from its record on one thread, so
//! this was the crate's. Fix (`operand.rs`, `SliceRecords`): a guard kind of its own notes a
//! process-wide record clock before cudarc's wait; under one lock, a guard whose event was
//! recorded since (or whose entry in a table of the last 16 events was evicted since) makes its
//! stream wait for the event before recording it. Unit test
//! `a_cudarc_pinned_slice_use_recorded_after_an_overlapping_one_waits_for_it_first` (stub
//! driver; fails with the wait removed, and with it made always).
//!
//! Refused or sound (tests 4 and 5, and by reading):
//! - memoized execs over ping-pong buffer sets where a set's buffer is freed and its address
//!   taken at once by a buffer of another length (a new exec: the length is in the words), or of
//!   the same length (the kept exec is right: a kernel node holds only the address), with
//!   eviction (`with_max_variants(2)`), `clear()` and the cache dropped right after a launch
//!   whose slow kernel still runs, then the freed memory reallocated (test 4);
//! - eager calls: a buffer of another stream dropped right after `eager!` returns (its free
//!   waits on its own stream, which the ledger made wait for the call), a panic in a `capture`
//!   statement's closure after an earlier statement was enqueued (the ledger still orders the
//!   buffers' own streams, the unwinding guards record), and the cache switched between
//!   `Mode::Eager`, `Mode::Instantiate` and `Mode::Graph` on one variant (test 5);
//! - `Mode::Eager` makes no words (`GraphCache::words`), so an eager call never takes a variant
//!   as unchanged and never skips validation or the aliasing check; a mode change needs `&mut`
//!   of the cache, which the call holds, so it cannot happen inside a call;
//! - a memo hit (`settle`'s twin) needs the twin's kept words equal to the call's, which hold
//!   every place's address range (and a pinned copy's allocation id), kept only by a call that
//!   passed the aliasing check; `same_variant` compares the context by handle, held alive by the
//!   variant (`_ctx_owner`), so no other context can take its address meanwhile;
//! - eviction and `clear` destroy execs without waiting (the driver defers); a host node's queue
//!   is orphaned, not removed, while jobs wait; variants with memory nodes are waited for;
//! - `BufferArray` hands out `&mut` elements only through paths that forget the memo (review 27);
//! - `__private::words`, `word_node`, `word_repeat`, `word_handle` are safe but only feed
//!   `CallWords`, which only the `unsafe` `run_words` consumes; generated locals are
//!   `mixed_site` (ui `review15b-body-cannot-name-its-words`).
//!
//! Not run on a GPU (none was lent to this review). On the CPU stub driver (`REVIEW17_STUB=1`)
//! tests 1, 2, 4 and 5 run their host side (no error, no panic escaping); their data checks need
//! a GPU. Expected on a GPU: tests 1 and 2 fail without the fix in `operand.rs` (the host or a
//! device copy writes `pb` while B's copy of it is still queued), pass with it; test 3 fails
//! until its hole is closed; tests 4 and 5 pass.

#![allow(clippy::borrow_deref_ref)] // `graph!` operands are places marked `&`: `&*x`

mod common;

use std::sync::Arc;

use common::review17::stub;
use common::{Result, gpu, serial};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{Error, GraphCache, Mode, PinnedBuffer, eager, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

type S = Arc<CudaStream>;
type B = CudaSlice<u32>;

#[track_caller]
fn all_equal(got: &[u32], v: u32, what: &str) {
    if stub() {
        return;
    }
    if let Some(i) = got.iter().position(|&x| x != v) {
        panic!("{what}: element {i} is {:#x}, not {v:#x}", got[i]);
    }
}

/// Test 1 (hole, fixed): two `GraphBuilder`s hold `&pb` at once. Builder 1 (stream A, `pb`'s
/// own) copies `pb` into `d1`; builder 2 (stream B, busy with a slow kernel) copies `pb` into
/// `d2` and launches first; builder 1 launches last. Then the host writes `pb` (`as_mut_slice`)
/// or a call on A writes it (the own-stream shortcut): B's copy, still queued behind the slow
/// kernel, must still read the 1s `pb` held when it was enqueued.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review31_a_pinned_buffer_read_by_two_overlapping_builders_is_waited_for() -> Result {
    let _serial = serial();
    let (ctx, a, k) = gpu()?;
    let b = ctx.new_stream()?;
    let c = cfg();
    for round in 0..4u32 {
        let mut pb = PinnedBuffer::<u32>::from_slice(&a, &vec![1; LEN])?;
        let mut d1 = a.alloc_zeros::<u32>(LEN)?;
        let mut d2 = b.alloc_zeros::<u32>(LEN)?;
        let mut z = b.alloc_zeros::<u32>(LEN)?;
        let twos = a.clone_htod(&vec![2u32; LEN])?;
        let (mut c1, mut c2, mut c3) = (GraphCache::new(), GraphCache::new(), GraphCache::new());
        {
            let mut g1 = c1.builder(&a);
            let (r1, w1) = (g1.read(&pb), g1.write(&mut d1));
            g1.copy(r1, w1);
            // B is busy for a while: builder 2's copy waits behind this kernel.
            eager!(&b, k.slow_iota(N, SPINS, 1, 0, &mut z).launch(c))?;
            let mut g2 = c2.builder(&b);
            let (r2, w2) = (g2.read(&pb), g2.write(&mut d2));
            g2.copy(r2, w2);
            g2.launch()?;
            g1.launch()?;
        }
        if round % 2 == 0 {
            // The host writes `pb`: must wait for B's copy.
            pb.as_mut_slice()?.fill(2);
        } else {
            // A call on `pb`'s own stream writes it: must wait for B's copy too.
            graph!(&mut c3, &a, {
                copy(&twos, &mut pb);
            })?;
        }
        b.synchronize()?;
        a.synchronize()?;
        all_equal(&b.clone_dtoh(&d2)?, 1, &format!("round {round}: B's copy of pb"));
        all_equal(&a.clone_dtoh(&d1)?, 1, &format!("round {round}: A's copy of pb"));
        all_equal(pb.as_slice()?, 2, &format!("round {round}: pb after the write"));
    }
    Ok(())
}

/// Test 2 (hole, fixed): the same with `graph!` alone. The outer call on A reads `pb` (a copy
/// into `d1`); a scalar argument of its next statement makes an `eager!` call on B that reads
/// `pb` too (behind a slow kernel on B) while the outer call holds `&pb`. The outer guard
/// records last. Then the host writes `pb`, or a `graph!` call on A writes it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review31_a_pinned_buffer_read_by_a_call_inside_a_call_is_waited_for() -> Result {
    let _serial = serial();
    let (ctx, a, k) = gpu()?;
    let b = ctx.new_stream()?;
    let c = cfg();
    for round in 0..4u32 {
        let mut pb = PinnedBuffer::<u32>::from_slice(&a, &vec![1; LEN])?;
        let mut d1 = a.alloc_zeros::<u32>(LEN)?;
        let mut d2 = b.alloc_zeros::<u32>(LEN)?;
        let mut z = b.alloc_zeros::<u32>(LEN)?;
        let mut x = a.alloc_zeros::<u32>(LEN)?;
        let twos = a.clone_htod(&vec![2u32; LEN])?;
        let (mut outer, mut later) = (GraphCache::new(), GraphCache::new());
        if round >= 2 {
            outer.set_mode(Mode::Eager);
        }
        {
            let pbr = &pb;
            let mut inner = || -> u32 {
                eager!(&b, {
                    k.slow_iota(N, SPINS, 1, 0, &mut z).launch(c);
                    copy(&*pbr, &mut d2);
                })
                .expect("the inner call");
                7
            };
            graph!(&mut outer, &a, {
                copy(&*pbr, &mut d1);
                k.iota(N, inner(), 0, &mut x).launch(c);
            })?;
        }
        if round % 2 == 0 {
            pb.as_mut_slice()?.fill(2);
        } else {
            graph!(&mut later, &a, {
                copy(&twos, &mut pb);
            })?;
        }
        b.synchronize()?;
        a.synchronize()?;
        all_equal(&b.clone_dtoh(&d2)?, 1, &format!("round {round}: the inner copy of pb"));
        all_equal(&a.clone_dtoh(&d1)?, 1, &format!("round {round}: the outer copy of pb"));
        all_equal(pb.as_slice()?, 2, &format!("round {round}: pb after the write"));
    }
    Ok(())
}

/// Test 3 (hole, fixed): test 1 with cudarc's `PinnedHostSlice` instead of a `PinnedBuffer`:
/// cudarc's `as_mut_slice` waits for the event's last record only, which must follow builder
/// 2's use on B as well as builder 1's on A.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review31_a_cudarc_pinned_slice_read_by_two_overlapping_builders_is_waited_for() -> Result {
    let _serial = serial();
    let (ctx, a, k) = gpu()?;
    let b = ctx.new_stream()?;
    let c = cfg();
    for round in 0..4u32 {
        // SAFETY: written in full below before any use.
        let mut ph = unsafe { ctx.alloc_pinned::<u32>(LEN) }?;
        ph.as_mut_slice()?.fill(1);
        let mut d1 = a.alloc_zeros::<u32>(LEN)?;
        let mut d2 = b.alloc_zeros::<u32>(LEN)?;
        let mut z = b.alloc_zeros::<u32>(LEN)?;
        let (mut c1, mut c2) = (GraphCache::new(), GraphCache::new());
        {
            let mut g1 = c1.builder(&a);
            let (r1, w1) = (g1.read(&ph), g1.write(&mut d1));
            g1.copy(r1, w1);
            eager!(&b, k.slow_iota(N, SPINS, 1, 0, &mut z).launch(c))?;
            let mut g2 = c2.builder(&b);
            let (r2, w2) = (g2.read(&ph), g2.write(&mut d2));
            g2.copy(r2, w2);
            g2.launch()?;
            g1.launch()?;
        }
        ph.as_mut_slice()?.fill(2);
        b.synchronize()?;
        a.synchronize()?;
        all_equal(&b.clone_dtoh(&d2)?, 1, &format!("round {round}: B's copy of the slice"));
    }
    Ok(())
}

/// `iota(a, b)` into `y` behind a slow kernel on `t`, then `affine(y → out)`: one variant whose
/// execs differ by buffers only.
fn step(
    cache: &mut GraphCache,
    k: &common::Ops,
    s: &S,
    bufs: (&mut B, &mut B, &mut B),
    a: u32,
) -> cudagraph::Result<()> {
    let (t, y, out) = bufs;
    let c = cfg();
    graph!(cache, s, {
        k.slow_iota(N, SPINS, a, 1, &mut *t).launch(c);
        k.affine(N, 3, a, &*t, &mut *y).launch(c);
        k.affine(N, 5, 1, &*y, &mut *out).launch(c);
    })
}

fn model(a: u32) -> (Vec<u32>, Vec<u32>) {
    let t = common::host::slow_iota(N, SPINS, a, 1);
    let y = common::host::affine(&t, 3, a);
    let out = common::host::affine(&y, 5, 1);
    (y, out)
}

/// Test 4 (refused or sound): memoized execs (3 per variant) over three buffer sets used in
/// turn, on a cache of at most 2 variants (so memo builds evict), where after some calls a
/// set's `out` is dropped right after the launch (its slow kernel still running) and its memory
/// taken at once by a canary, and the set gets a new `out` of the same or another length;
/// `clear()` right after a launch; the whole cache dropped right after a launch, then every
/// buffer of that launch's set dropped and the memory reallocated as canaries. Every result
/// against the host model; every canary intact.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review31_memoized_execs_with_eviction_clear_drops_and_reused_addresses() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu()?;
    let new = |len: usize| -> Result<B> { Ok(s.alloc_zeros::<u32>(len)?) };
    let mut sets: Vec<(B, B, B)> =
        (0..3).map(|_| Ok((new(LEN)?, new(LEN)?, new(LEN)?))).collect::<Result<_>>()?;
    let mut cache = GraphCache::with_max_variants(2);
    cache.set_execs_per_variant(3);
    for call in 0..24u32 {
        let what = format!("call {call}");
        let i = call as usize % 3;
        let a = 1 + call % 4;
        let (t, y, out) = &mut sets[i];
        step(&mut cache, &k, &s, (t, y, out), a)?;
        let (want_y, want_out) = model(a);
        let mut canaries = Vec::new();
        if call % 5 == 4 {
            // Drop `out` while its writer may still run; take its memory at once. The new `out`
            // has the length the kernels write (N): a shorter one (LEN - 64, as first written)
            // made `affine(N, …)` write past its end, the test's own breach of the kernel's
            // contract, which compute-sanitizer showed on the H200 (2026-12-05).
            let fresh = new(LEN)?;
            drop(std::mem::replace(&mut sets[i].2, fresh));
            canaries.push(s.clone_htod(&vec![0xdead_0000 | call; LEN])?);
        }
        if call % 7 == 6 {
            cache.clear();
        }
        s.synchronize()?;
        for cn in &canaries {
            all_equal(&s.clone_dtoh(cn)?, 0xdead_0000 | call, &format!("{what}: canary"));
        }
        if call % 5 != 4 {
            let got = s.clone_dtoh(&sets[i].2)?;
            if !stub() {
                assert_eq!(got, want_out, "{what}: out");
            }
        }
        let got = s.clone_dtoh(&sets[i].1)?;
        if !stub() {
            assert_eq!(got, want_y, "{what}: y");
        }
    }
    // The cache dropped right after a launch, then that launch's buffers.
    let (mut t, mut y, mut out) = (new(LEN)?, new(LEN)?, new(LEN)?);
    let mut c2 = GraphCache::new();
    c2.set_execs_per_variant(2);
    step(&mut c2, &k, &s, (&mut t, &mut y, &mut out), 9)?;
    step(&mut c2, &k, &s, (&mut t, &mut y, &mut out), 9)?;
    drop(c2);
    drop((t, y, out));
    let canaries: Vec<B> =
        (0..3).map(|j| Ok(s.clone_htod(&vec![0xdead_1000 | j; LEN])?)).collect::<Result<_>>()?;
    s.synchronize()?;
    for (j, cn) in canaries.iter().enumerate() {
        all_equal(&s.clone_dtoh(cn)?, 0xdead_1000 | j as u32, "after the cache's drop: canary");
    }
    Ok(())
}

/// Test 5 (refused or sound): eager calls. (a) `y` lives on stream B; an eager call on A writes
/// it behind a slow kernel, and it is dropped right after `eager!` returns, its memory taken at
/// once on B by a canary: the canary stays intact and `out` (read after) is right. (b) a
/// `capture` statement's closure panics after a slow kernel statement was enqueued: the panic
/// leaves the call, and buffers of B dropped after it are freed after the kernel. (c) one cache
/// switched between `Mode::Eager`, `Mode::Instantiate` and `Mode::Graph`, with buffers
/// swapped, against the model.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review31_eager_calls_drops_panics_and_mode_switches() -> Result {
    let _serial = serial();
    let (ctx, a, k) = gpu()?;
    let b = ctx.new_stream()?;
    let c = cfg();
    // (a)
    for round in 0..3u32 {
        let mut t = a.alloc_zeros::<u32>(LEN)?;
        let mut y = b.alloc_zeros::<u32>(LEN)?;
        let mut out = a.alloc_zeros::<u32>(LEN)?;
        eager!(&a, {
            k.slow_iota(N, SPINS, 2, round, &mut t).launch(c);
            k.affine(N, 3, 1, &t, &mut y).launch(c);
            k.affine(N, 1, 0, &y, &mut out).launch(c);
        })?;
        drop(y);
        let canary = b.clone_htod(&vec![0xdead_2000 | round; LEN])?;
        a.synchronize()?;
        b.synchronize()?;
        all_equal(&b.clone_dtoh(&canary)?, 0xdead_2000 | round, "(a) canary");
        let want = common::host::affine(&common::host::slow_iota(N, SPINS, 2, round), 3, 1);
        if !stub() {
            assert_eq!(a.clone_dtoh(&out)?, want, "(a) round {round}: out");
        }
    }
    // (b)
    {
        let mut t = b.alloc_zeros::<u32>(LEN)?;
        let mut u = b.alloc_zeros::<u32>(LEN)?;
        let mut cache = GraphCache::eager();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            graph!(&mut cache, &a, {
                k.slow_iota(N, SPINS, 4, 0, &mut t).launch(c);
                capture(&t, &mut u, |_c, (_t, _u)| -> std::result::Result<(), Error> {
                    panic!("review31: on purpose")
                });
            })
        }));
        assert!(r.is_err(), "(b) the panic leaves the call");
        drop((t, u));
        let canary = b.clone_htod(&vec![0xdead_3000u32; LEN])?;
        a.synchronize()?;
        b.synchronize()?;
        all_equal(&b.clone_dtoh(&canary)?, 0xdead_3000, "(b) canary");
    }
    // (c)
    {
        let mut sets: Vec<(B, B, B)> = (0..2)
            .map(|_| Ok((a.alloc_zeros(LEN)?, a.alloc_zeros(LEN)?, a.alloc_zeros(LEN)?)))
            .collect::<Result<_>>()?;
        let mut cache = GraphCache::new();
        cache.set_execs_per_variant(2);
        let modes =
            [Mode::Graph, Mode::Eager, Mode::Instantiate, Mode::Graph, Mode::Eager, Mode::Graph];
        for (call, &mode) in modes.iter().cycle().take(18).enumerate() {
            let i = call % 2;
            let av = 1 + (call as u32 / 3) % 3;
            cache.set_mode(mode);
            let (t, y, out) = &mut sets[i];
            step(&mut cache, &k, &a, (t, y, out), av)?;
            a.synchronize()?;
            if mode != Mode::Instantiate && !stub() {
                let (want_y, want_out) = model(av);
                assert_eq!(a.clone_dtoh(&sets[i].1)?, want_y, "(c) call {call} {mode:?}: y");
                assert_eq!(a.clone_dtoh(&sets[i].2)?, want_out, "(c) call {call} {mode:?}: out");
            }
        }
    }
    Ok(())
}
