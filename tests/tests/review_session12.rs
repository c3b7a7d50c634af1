//! Review 12 (brief 1, session commits b62da1d..23c612e): the one-word-per-argument encoding
//! of the unchanged-call check, the exec memo's threshold (`MEMO_MIN_UPDATED`), eager capture
//! statements that no longer prime their aliases' events, and `Guard::leaves` / the ledger's
//! identity skip.
//!
//! Safe code only, besides the documented `unsafe { c.fork(..) }` / `as_cuda_view` with their
//! contracts kept. Every result is compared exactly with a host model of the integer kernels;
//! `slow_affine` (a slow reader *and* writer whose output does not depend on its spins) runs a
//! few milliseconds on an H200, and freed memory is reallocated and written at once, so a
//! missing wait or a launch with stale pointers shows as wrong data. The CPU side of the
//! encoding is `cudagraph/src/cache/review12.rs`. Expected on a GPU: all pass.

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, fresh_thread, gpu, host, launch, load};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudagraph::{Error, GraphCache, Mode, capture, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;
/// Steps of `slow_affine`: a few milliseconds on an H200.
const SPINS: u32 = 1 << 20;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn input(r: u32) -> Vec<u32> {
    host::iota(N, 2_654_435_761, r.wrapping_mul(977).wrapping_add(13))
}

/// The device address of `b`.
fn addr<T>(b: &CudaSlice<T>, s: &Arc<CudaStream>) -> u64 {
    b.device_ptr(s).0
}

/// `z` of the two-kernel chain: `y = x * 3 + b`, `z = y * 5 + 1`.
fn chain_model(x: &[u32], b: u32) -> (Vec<u32>, Vec<u32>) {
    let y = host::affine(x, 3, b);
    let z = host::affine(&y, 5, 1);
    (y, z)
}

/// The chain as one `graph!` call on `s`; with `extra`, a third statement (another variant).
#[allow(clippy::too_many_arguments, clippy::borrow_deref_ref)]
fn chain(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    x: &CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
    z: &mut CudaSlice<u32>,
    b: u32,
    extra: Option<&mut CudaSlice<u32>>,
) -> Result {
    let e = extra.is_some();
    let mut none = None;
    let w = match extra {
        Some(w) => w,
        None => none.get_or_insert(s.alloc_zeros::<u32>(1)?),
    };
    graph!(cache, s, {
        k.slow_affine(N, SPINS, 3, b, &*x, &mut *y).launch(cfg());
        k.affine(N, 5, 1, &*y, &mut *z).launch(cfg());
        if e {
            k.iota(N, 1, b, &mut *w).launch(cfg());
        }
    })?;
    Ok(())
}

/// Attack 1 (unchanged words): buffers freed without a synchronization and allocated again
/// each round, in an order that permutes their addresses between the places, on either of two
/// `Arc<CudaContext>` objects of the device, and each round's calls alternating between a
/// stream of each object (one `CUcontext`: one variant). A call whose words equal its exec's
/// last call is launched with nothing sent: if two different pointer sets (or another
/// object's stream) packed alike, the exec would run with the other round's (freed, now
/// reused) pointers and `z` would be wrong. Between a call and the next, another stream writes
/// `x` at once: it must wait for the slow reader.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review12_unchanged_words_follow_reallocated_permuted_buffers_across_context_objects() -> Result {
    let _serial = common::serial();
    let (a, s, k) = gpu()?;
    let b = CudaContext::new(0)?;
    let (s2, other) = (b.new_stream()?, a.new_stream()?);
    let mut cache = GraphCache::new();
    let (mut seen, mut same_addresses) = (Vec::new(), 0);
    for round in 0..12u32 {
        let on = if round % 2 == 0 { &s } else { &s2 };
        let mut bufs: Vec<CudaSlice<u32>> =
            (0..3).map(|_| on.alloc_zeros::<u32>(LEN).unwrap()).collect();
        bufs.rotate_left(round as usize % 3);
        if round % 4 >= 2 {
            bufs.swap(0, 1);
        }
        let mut z = bufs.pop().unwrap();
        let mut y = bufs.pop().unwrap();
        let mut x = bufs.pop().unwrap();
        let set = [addr(&x, on), addr(&y, on), addr(&z, on)];
        same_addresses += usize::from(seen.contains(&set));
        seen.push(set);
        other.memcpy_htod(&input(round), &mut x)?;
        for rep in 0..3u32 {
            let call = if rep % 2 == 0 { &s } else { &s2 };
            // A scalar fixed within a round and repeating across rounds, so that a round's
            // later calls are unchanged calls and words can repeat across rounds.
            let bias = round % 2;
            chain(&mut cache, &k, call, &x, &mut y, &mut z, bias, None)?;
            let data = input(round * 10 + rep);
            let (want_y, want_z) =
                chain_model(&input(if rep == 0 { round } else { round * 10 + rep - 1 }), bias);
            // The next rep's input, written at once on another stream (the slow reader of x
            // must be waited for).
            other.memcpy_htod(&data, &mut x)?;
            assert_same(&other.clone_dtoh(&y)?, &want_y, &format!("round {round} rep {rep}: y"));
            assert_same(&other.clone_dtoh(&z)?, &want_z, &format!("round {round} rep {rep}: z"));
        }
        // Freed without waiting: the next round's buffers may take these addresses.
        drop((x, y, z));
    }
    let st = cache.stats();
    println!("{same_addresses} rounds reused a whole earlier address set; {st:?}");
    assert!(st.unchanged_calls > 0, "some calls were unchanged: {st:?}");
    a.check_err()?;
    b.check_err()?;
    Ok(())
}

/// Attack 2 (exec memo): two-node pointer sets A and B alternate (so a memo exec is built for
/// the set coming back), and a third set C is made anew from memory just freed before each of
/// its calls (its addresses may be B's, in B's roles or others): every call must compute with
/// its own buffers. With a cache of two variants, a host `if` adds another variant every few
/// calls, so execs are evicted while their slow launches still run. One-node sets (only `z`
/// swapped) alternate too: set in place. Expected: exact.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review12_memo_execs_run_only_their_own_pointer_sets_even_when_evicted_in_flight() -> Result {
    let _serial = common::serial();
    let (a, s, k) = gpu()?;
    let other = a.new_stream()?;
    for max in [GraphCache::DEFAULT_MAX_VARIANTS, 2] {
        let mut cache = GraphCache::with_max_variants(max);
        let mk = || -> Result<[CudaSlice<u32>; 3]> {
            Ok([s.alloc_zeros(LEN)?, s.alloc_zeros(LEN)?, s.alloc_zeros(LEN)?])
        };
        let [xa, mut ya, mut za] = mk()?;
        let [xb, mut yb, mut zb] = mk()?;
        let mut w = s.alloc_zeros::<u32>(LEN)?;
        let (mut xa, mut xb) = (xa, xb);
        for call in 0..24u32 {
            let what = format!("max {max}, call {call}");
            let data = input(call);
            let extra = call % 5 == 4;
            let ew = if extra { Some(&mut w) } else { None };
            match call % 3 {
                0 => {
                    other.memcpy_htod(&data, &mut xa)?;
                    chain(&mut cache, &k, &s, &xa, &mut ya, &mut za, 1, ew)?;
                    let (wy, wz) = chain_model(&data, 1);
                    assert_same(&other.clone_dtoh(&ya)?, &wy, &format!("{what}: A y"));
                    assert_same(&other.clone_dtoh(&za)?, &wz, &format!("{what}: A z"));
                }
                1 => {
                    other.memcpy_htod(&data, &mut xb)?;
                    chain(&mut cache, &k, &s, &xb, &mut yb, &mut zb, 1, ew)?;
                    let (wy, wz) = chain_model(&data, 1);
                    assert_same(&other.clone_dtoh(&yb)?, &wy, &format!("{what}: B y"));
                    assert_same(&other.clone_dtoh(&zb)?, &wz, &format!("{what}: B z"));
                }
                _ => {
                    // B dropped (no wait), C made from the freed memory in another order,
                    // called at once, then B made again for the next calls.
                    drop((xb, yb, zb));
                    let mut zc = s.alloc_zeros::<u32>(LEN)?;
                    let mut yc = s.alloc_zeros::<u32>(LEN)?;
                    let mut xc = s.alloc_zeros::<u32>(LEN)?;
                    other.memcpy_htod(&data, &mut xc)?;
                    chain(&mut cache, &k, &s, &xc, &mut yc, &mut zc, 1, ew)?;
                    let (wy, wz) = chain_model(&data, 1);
                    // Scribble over C at once from another stream after reading it: a later
                    // launch holding C's pointers would read this.
                    let (gy, gz) = (other.clone_dtoh(&yc)?, other.clone_dtoh(&zc)?);
                    other.memcpy_htod(&vec![0xdead_beef; LEN], &mut zc)?;
                    assert_same(&gy, &wy, &format!("{what}: C y"));
                    assert_same(&gz, &wz, &format!("{what}: C z"));
                    drop((xc, yc, zc));
                    [xb, yb, zb] = mk()?;
                }
            }
            if extra {
                assert_same(&other.clone_dtoh(&w)?, &host::iota(N, 1, 1), &format!("{what}: w"));
            }
        }
        // One-node sets: only z alternates (set in place), the memo must not be used for them
        // with another set's pointers.
        let mut zs = [s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?];
        for call in 0..10u32 {
            let data = input(100 + call);
            other.memcpy_htod(&data, &mut xa)?;
            let zi = &mut zs[call as usize % 2];
            chain(&mut cache, &k, &s, &xa, &mut ya, zi, 2, None)?;
            let (_, wz) = chain_model(&data, 2);
            let got = other.clone_dtoh(&zs[call as usize % 2])?;
            assert_same(&got, &wz, &format!("max {max}, one-node call {call}: z"));
        }
        println!("max {max}: {:?}", cache.stats());
    }
    a.check_err()?;
    Ok(())
}

/// Attack 3 (eager statements without priming): in `Mode::Eager`, a slow writer of `x` on a
/// producer stream right before the call, then a capture statement whose closure forks a stream
/// of a *second* context object of the device (managed: it made a stream) and copies the listed
/// `x` into `y` there through its views. The alias of `x` is pooled from the earlier calls (its
/// events last recorded on the fork of an earlier call, never recorded by this statement): only
/// the fork's wait for the call's stream orders the copy after the producer. Not joined back on
/// odd calls (eagerly allowed). Then another stream overwrites `x` and reads `y` at once.
/// Alternates two call streams (two pools of aliases) and `Mode::Graph` calls in between.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review12_eager_fork_on_another_object_waits_for_a_producer_without_primed_events() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let b = CudaContext::new(0)?;
        let (s1, s2, p, other) =
            (a.new_stream()?, a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let f = b.new_stream()?;
        let k = load(&a)?;
        let mut x = p.alloc_zeros::<u32>(LEN)?;
        let mut y = s1.alloc_zeros::<u32>(LEN)?;
        let mut t = s1.alloc_zeros::<u32>(LEN)?;
        let mut cache = GraphCache::new();
        for call in 0..16u32 {
            let mode = if call % 8 == 7 { Mode::Graph } else { Mode::Eager };
            cache.set_mode(mode);
            let s = if call % 4 < 2 { &s1 } else { &s2 };
            let seed = input(call);
            let src = p.clone_htod(&seed)?;
            // Slow writer of x on the producer stream (x's own stream), just before the call.
            launch!(&p, &k, "slow_affine", cfg(); &N, &SPINS, &7u32, &call, &src, &mut x)?;
            let join = call % 2 == 0;
            let fr = &f;
            graph!(&mut cache, s, {
                capture(&x, &mut y, |c, (xv, mut yv)| {
                    // SAFETY: `f` is a stream of a context object that manages synchronization
                    // (it made a stream), as is the capture's; until the closure's end (eagerly)
                    // or the join it runs one copy of the listed x into the listed `&mut` y.
                    unsafe { c.fork(fr) }?;
                    fr.memcpy_dtod(&xv, &mut yv)?;
                    if join || c.is_capturing() {
                        c.join(fr)?;
                    }
                    Ok::<(), Error>(())
                });
                capture(&y, &mut t, |c, (yv, mut tv)| {
                    c.copy(&yv, &mut tv)?;
                    Ok::<(), Error>(())
                });
            })?;
            // Another stream overwrites x and reads y and t at once.
            other.memcpy_htod(&input(call + 1000), &mut x)?;
            let want = host::affine(&seed, 7, call);
            let what = format!("call {call} ({mode:?}, join {join})");
            assert_same(&other.clone_dtoh(&y)?, &want, &format!("{what}: y"));
            assert_same(&other.clone_dtoh(&t)?, &want, &format!("{what}: t"));
            drop(src);
        }
        a.check_err()?;
        b.check_err()?;
        Ok(())
    })
}

/// Attack 3b (eager, nested): an eager statement's closure runs another eager `graph!` call on
/// a second stream that slowly reads the outer statement's listed `&x` (a shared borrow: the
/// closure may take one too) into `v`, then the outer closure copies `x` into `y` on the call's
/// stream. Right after the outer call, a `graph!` call on a third stream writes `x`: it must
/// wait for both readers (the ledger through `x`'s own stream). Expected: exact.
#[test]
#[ignore = "needs a CUDA GPU"]
#[allow(clippy::borrow_deref_ref)] // `&*xr`: the operand syntax of `graph!` wants a place
fn review12_eager_nested_reader_on_another_stream_is_waited_for_by_the_next_writer() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let (s, s2, s3) = (a.new_stream()?, a.new_stream()?, a.new_stream()?);
        let k = load(&a)?;
        let mut x = s.clone_htod(&input(0))?;
        let [mut y, mut v] = std::array::from_fn(|_| s.alloc_zeros::<u32>(LEN).unwrap());
        let (mut outer, mut inner, mut writer) =
            (GraphCache::new(), GraphCache::new(), GraphCache::new());
        outer.set_mode(Mode::Eager);
        inner.set_mode(Mode::Eager);
        for call in 0..6u32 {
            let (inner, v, k2, xr, s2r) = (&mut inner, &mut v, &k, &x, &s2);
            graph!(&mut outer, &s, {
                capture(&x, &mut y, |c, (xv, mut yv)| {
                    graph!(inner, s2r, {
                        k2.slow_affine(N, SPINS, 3, call, &*xr, &mut *v).launch(cfg());
                    })
                    .map_err(|e| Error::Capture {
                        file: file!(),
                        line: line!(),
                        source: e.into(),
                    })?;
                    c.copy(&xv, &mut yv)?;
                    Ok::<(), Error>(())
                });
            })?;
            let want_v = host::affine(&input(call), 3, call);
            // The next input, written by a graph call on a third stream at once.
            graph!(&mut writer, &s3, {
                k.iota(N, 2_654_435_761, (call + 1).wrapping_mul(977).wrapping_add(13), &mut x)
                    .launch(cfg());
            })?;
            assert_same(&s3.clone_dtoh(&*v)?, &want_v, &format!("call {call}: v (nested reader)"));
            assert_same(&s3.clone_dtoh(&y)?, &input(call), &format!("call {call}: y"));
            assert_same(&s3.clone_dtoh(&x)?, &input(call + 1), &format!("call {call}: x"));
        }
        a.check_err()?;
        Ok(())
    })
}

/// Attack 4 (`GuardKind::Parts`, `Guard::leaves`, the ledger's identity skip): a captured
/// graph embedded with `child(&mut g)` is one place of several buffers, whose guards are its
/// children. Its operands live on the legacy default stream of a context object that made no
/// stream (cudarc orders nothing there: no waits, no records), so only the ledger orders the
/// launch with them: before it, with the producer's upload of `x`; after it, with the writes
/// and reads that the default stream makes at once. A child missed by `leaves` would read `x`
/// before its upload or be overwritten under its slow read. Graph and eager modes.
#[test]
#[ignore = "needs a CUDA GPU"]
fn review12_child_graph_parts_are_ordered_by_the_ledger_on_an_untracked_stream() -> Result {
    let _serial = common::serial();
    fresh_thread(|| -> Result {
        let a = CudaContext::new(0)?;
        let s = a.new_stream()?;
        let k = load(&a)?;
        let b = CudaContext::new(0)?;
        let legacy = b.default_stream();
        for mode in [Mode::Graph, Mode::Eager] {
            let mut x = legacy.alloc_zeros::<u32>(LEN)?;
            let mut y = legacy.alloc_zeros::<u32>(LEN)?;
            let mut z = s.alloc_zeros::<u32>(LEN)?;
            let mut cache = GraphCache::new();
            cache.set_mode(mode);
            for call in 0..6u32 {
                legacy.memcpy_htod(&input(call), &mut x)?;
                let mut g = capture(&s, (&x, &mut y), |c, (xv, mut yv)| {
                    let (xr, yw) = (c.read(&xv)?, c.write(&mut yv)?);
                    c.kernel(k.slow_affine(N, SPINS, 3, call, xr, yw).launch(cfg()))?;
                    Ok::<(), Error>(())
                })?;
                graph!(&mut cache, &s, {
                    child(&mut g);
                    k.iota(N, 1, call, &mut z).launch(cfg());
                })?;
                drop(g);
                // At once on the default stream: overwrite x, read y.
                legacy.memcpy_htod(&input(call + 500), &mut x)?;
                let got = legacy.clone_dtoh(&y)?;
                let what = format!("{mode:?} call {call}");
                assert_same(&got, &host::affine(&input(call), 3, call), &format!("{what}: y"));
                assert_same(&s.clone_dtoh(&z)?, &host::iota(N, 1, call), &format!("{what}: z"));
            }
        }
        a.check_err()?;
        b.check_err()?;
        Ok(())
    })
}
