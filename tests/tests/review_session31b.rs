//! Review 31b (brief 1, safe code only), a fresh reviewer. Attacked, in order: `GraphBuilder`
//! calls taking `graph!`'s unchanged-call shortcut and memoized execs (commit dd01cc3:
//! `KernelView::pack`, `settle`, `bring_up_to_date`), and overlapping uses of one pinned host
//! buffer (`PinnedState::order`/`used`, the cudarc slices' guards, commits e2992c5, e652f9f).
//!
//! Every GPU result is compared exactly (integers) with a host model; a slow kernel
//! (`slow_iota`, `SPINS = 1 << 20`) keeps a stream busy where ordering is what could break, and
//! nothing synchronizes before the step under attack.
//!
//! **Found (hole, fixed here): a plain cudarc call on a `PinnedHostSlice` made while a guard
//! of the crate holds it.** Review 31's fix let a cudarc pinned slice's guard wait for the
//! slice's event before recording it only when the crate's own record clock moved since the
//! guard was made. Plain cudarc (`memcpy_htod(&p, …)`, safe; it waits for the slice's one
//! event and records it) can run on the same thread while a guard holds `&p`: between
//! `GraphBuilder::read(&p)` and `launch` (test 1), or in a `graph!` scalar (test 2). Its record
//! does not move the clock, so the guard's record replaced it without waiting, and cudarc's
//! `as_mut_slice` waited for the graph's stream only: the host wrote `p` while the plain copy,
//! queued on another stream behind a slow kernel, still had to read it. (Plain cudarc alone
//! never holds the slice between its wait and its record on one thread, so this was the
//! crate's.) Fix (`operand.rs`, `slice_used`): the guard always makes its stream wait for the
//! event before recording it, under the lock; unit test
//! `a_cudarc_pinned_slice_used_by_plain_cudarc_inside_a_guard_is_waited_for` (stub driver;
//! fails before the fix). `PinnedBuffer` is not affected: no code but the crate's guards
//! records its event (it has no cudarc `HostSlice` impl, and its state is not `Sync`).
//!
//! Refused or sound (by reading, and test 3, which is on branch lazy-runs: it needs builders that pack their words):
//! - builder words (`KernelView::pack`): function, dimensions (2-D included), `#[programmatic]`,
//!   argument count and lengths (large arguments and 0-byte ones by an explicit length word),
//!   every argument's bytes, the pointer mask, each handle's context, each device scalar's
//!   length; a node's word count is fixed by the variant's signature (argument lengths) and its
//!   function (whose declaration fixes which arguments are handles), so the concatenation over
//!   nodes is unambiguous. A function handle in a kept exec's words is kept loaded by that
//!   exec's node (`KernelState::owner`), so no other module's function can take it; the stream's
//!   context is part of the variant (`find`, `same_variant`) and kept alive by it;
//! - a builder call with any node that does not pack (alloc/free and so placeholders,
//!   conditional nodes and so conditions, captures, host nodes, events, child graphs, 2-D
//!   memsets) never reaches `settle`: validated and compared node by node as before; a kernel
//!   taking a condition without a device statement is refused by `Recording::finish` anyway;
//! - copies into pinned memory: a memcpy node's words hold the host allocation's id, a
//!   readback node's the address it stores through (of the pinned buffer this call borrowed);
//! - handles are checked at record time and the aliasing check runs on every builder call
//!   (`guarded` is false for a builder), so neither depends on the words;
//! - `graph!` and builders on one cache: another site, so no variant is found (`unchanged`)
//!   and the cache is cleared; `Mode::Eager` makes no words; `clear`/eviction remove execs and
//!   their words together;
//! - ping-pong builder buffer sets with memoized execs, a set's buffer dropped right after a
//!   launch (its slow writer still running) and its memory taken at once by a canary, the set
//!   given a buffer of the same or another length, `clear()`, and a switch to `Mode::Eager` and
//!   back (test 3, lazy-runs);
//! - cudarc pinned slice guards: the lock is taken only in a guard's drop and holds no user
//!   code (no drop of another guard inside it); a panic between acquisition and launch drops
//!   the guards (they record); `mem::forget` of a builder forgets guards whose use was never
//!   launched. A `PinnedBuffer`'s count: `as_slice` (allowed while a builder holds `&pb`) marks
//!   it idle, but a guard still outstanding compares the count when it records, and a write
//!   needs `&mut pb`, so no write overlaps a use.
//!
//! Needs a GPU to confirm: the data checks of tests 1 to 3 (on the stub driver, which runs no
//! kernel and copies nothing to the host, they run their host side only). Expected: tests 1
//! and 2 fail before the fix in `operand.rs` (B's copy reads the 2s the host wrote), pass
//! with it; test 3 (lazy-runs) passes.

#![allow(clippy::borrow_deref_ref)] // `graph!` operands are places marked `&`: `&*x`

mod common;

use common::review17::stub;
use common::{Result, gpu, serial};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::{GraphCache, Mode, eager, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

#[track_caller]
fn all_equal(got: &[u32], v: u32, what: &str) {
    if stub() {
        return;
    }
    if let Some(i) = got.iter().position(|&x| x != v) {
        panic!("{what}: element {i} is {:#x}, not {v:#x}", got[i]);
    }
}

/// Test 1 (hole, fixed): a builder on A reads the cudarc pinned slice `ph` (a copy into `d1`);
/// between its `read` and its `launch`, plain cudarc copies `ph` into `d2` on B, behind a slow
/// kernel. The builder's guard records last. Then the host writes `ph` (`as_mut_slice`): B's
/// copy must still read the 1s.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review31b_plain_cudarc_use_of_a_pinned_slice_inside_a_builder_is_waited_for() -> Result {
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
        let mut cache = GraphCache::new();
        {
            let mut g = cache.builder(&a);
            let (r, w) = (g.read(&ph), g.write(&mut d1));
            g.copy(r, w);
            // B is busy for a while: the plain copy waits behind this kernel.
            eager!(&b, k.slow_iota(N, SPINS, 1, 0, &mut z).launch(c))?;
            b.memcpy_htod(&ph, &mut d2)?;
            g.launch()?;
        }
        ph.as_mut_slice()?.fill(2);
        b.synchronize()?;
        a.synchronize()?;
        all_equal(&b.clone_dtoh(&d2)?, 1, &format!("round {round}: B's plain copy of ph"));
        all_equal(&a.clone_dtoh(&d1)?, 1, &format!("round {round}: the builder's copy of ph"));
    }
    Ok(())
}

/// Test 2 (hole, fixed): the same with `graph!`: a scalar argument of the call's second
/// statement makes the plain cudarc copy of `ph` on B while the call holds `&ph`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review31b_plain_cudarc_use_of_a_pinned_slice_inside_a_graph_call_is_waited_for() -> Result {
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
        let mut x = a.alloc_zeros::<u32>(LEN)?;
        let mut cache = GraphCache::new();
        if round >= 2 {
            cache.set_mode(Mode::Eager);
        }
        {
            let phr = &ph;
            let mut inner = || -> u32 {
                eager!(&b, k.slow_iota(N, SPINS, 1, 0, &mut z).launch(c)).expect("slow kernel");
                b.memcpy_htod(phr, &mut d2).expect("the plain copy");
                7
            };
            graph!(&mut cache, &a, {
                copy(&*phr, &mut d1);
                k.iota(N, inner(), 0, &mut x).launch(c);
            })?;
        }
        ph.as_mut_slice()?.fill(2);
        b.synchronize()?;
        a.synchronize()?;
        all_equal(&b.clone_dtoh(&d2)?, 1, &format!("round {round}: B's plain copy of ph"));
        all_equal(&a.clone_dtoh(&d1)?, 1, &format!("round {round}: the call's copy of ph"));
    }
    Ok(())
}

// Test 3 (builder calls that are unchanged calls and memo hits) needs builders that pack
// their words: on branch lazy-runs, not here.
