//! Review of issue 30 (keyed `capture` statements, `Released::update`, `Mode::Instantiate`):
//! attempts, with safe code only (the kernels are the trusted `common::Ops`), to make a graph
//! write or read memory it does not borrow, replay a recording on other memory, or hit UB.
//! Each test compares the graph with the same calls run eagerly ([`Mode::Eager`]) and with a
//! host model, exactly (integer data), and fails if the attack gets through.
//!
//! Run them with `--test-threads=1` (they also take `common::serial()`): some rely on the
//! stream-ordered allocator handing a freed address out again at once.

mod common;

use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::{
    CudaSlice, CudaStream, CudaViewMut, DevicePtr, DeviceRepr, LaunchConfig, ValidAsZeroBits,
};
use cudagraph::{CaptureKey, GraphCache, Mode, graph};

const N: u32 = 1 << 16;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The device address of `b`.
fn addr<T>(b: &CudaSlice<T>, s: &Arc<CudaStream>) -> u64 {
    b.device_ptr(s).0
}

/// A new buffer made by `make`, at device address `at` if the stream-ordered allocator hands
/// it out again within a few tries (the misses are dropped after): `(buffer, whether at at)`.
fn alloc_at<T>(
    stream: &Arc<CudaStream>,
    at: u64,
    make: impl Fn() -> Result<CudaSlice<T>>,
) -> Result<(CudaSlice<T>, bool)> {
    let mut misses = Vec::new();
    for _ in 0..8 {
        let w = make()?;
        if addr(&w, stream) == at {
            return Ok((w, true));
        }
        misses.push(w);
    }
    Ok((misses.pop().expect("eight tries"), false))
}

/// A keyed capture statement in a generic function. A `static` inside a generic function is
/// one item for every instantiation, so `zero_keyed::<u32>` and `zero_keyed::<u8>` share one
/// plan, one node index, and the recordings the cache keeps for it.
fn zero_keyed<T: DeviceRepr + ValidAsZeroBits + 'static>(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    x: &mut CudaViewMut<'_, T>,
) -> Result {
    graph!(cache, stream, {
        capture(&mut *x, key = 0u32, |s, _, (mut x,)| s.zero(&mut x));
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kept_recording_is_never_replayed_on_memory_of_another_element_type() -> Result {
    // Attack: `zero_keyed::<u32>` records a memset of LEN u32 (4·LEN bytes) at address A. The
    // buffer is freed and a 4·LEN-byte u8 buffer of ones is allocated at A; `zero_keyed::<u8>`
    // on its first LEN bytes has the same (address, length in elements, context, written) and
    // key. Replaying the kept recording would zero 4·LEN bytes: 3·LEN bytes outside the view
    // (outside the buffer, for a buffer of LEN bytes).
    let _serial = common::serial();
    let (ctx, stream, _k) = gpu()?;
    let mut cache = GraphCache::new();
    let mut w = stream.alloc_zeros::<u32>(LEN)?;
    let at = addr(&w, &stream);
    zero_keyed::<u32>(&mut cache, &stream, &mut w.slice_mut(..))?;
    assert_eq!(cache.stats().captures, 1);
    drop(w);
    let (mut big, hit) = alloc_at(&stream, at, || Ok(stream.clone_htod(&vec![1u8; 4 * LEN])?))?;
    assert!(hit, "the allocator did not hand the freed address out again: the attack needs it");
    zero_keyed::<u8>(&mut cache, &stream, &mut big.slice_mut(..LEN))?;
    // Eagerly, the same call zeroes the view only.
    let mut e = stream.clone_htod(&vec![1u8; 4 * LEN])?;
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    zero_keyed::<u8>(&mut eager, &stream, &mut e.slice_mut(..LEN))?;
    let mut want = vec![0u8; LEN];
    want.extend(vec![1u8; 3 * LEN]);
    assert_same(&stream.clone_dtoh(&e)?, &want, "eager");
    assert_same(&stream.clone_dtoh(&big)?, &want, "graph: bytes past the u8 view zeroed");
    let s = cache.stats();
    assert_eq!((s.captures, s.capture_reuses), (2, 0), "{s:?}");

    // The other way round: a recording of LEN u8 replayed on LEN u32 at the same address
    // would zero a quarter of them only.
    drop(big);
    let (mut w, hit) = alloc_at(&stream, at, || Ok(stream.clone_htod(&vec![7u32; LEN])?))?;
    assert!(hit, "the allocator did not hand the freed address out again");
    zero_keyed::<u32>(&mut cache, &stream, &mut w.slice_mut(..))?;
    assert_same(&stream.clone_dtoh(&w)?, &vec![0u32; LEN], "graph: u32 after u8");
    ctx.check_err()?;
    Ok(())
}

/// A key of the user's that lies: `same` is always `true` (its value, behind a mutex, changes
/// between calls), and it panics when asked to.
#[derive(Clone)]
struct Liar {
    a: Arc<std::sync::Mutex<u32>>,
    panic: Arc<std::sync::atomic::AtomicBool>,
}

impl CaptureKey for Liar {
    fn same(&self, _: &Self) -> bool {
        if self.panic.swap(false, std::sync::atomic::Ordering::Relaxed) {
            panic!("a key that panics");
        }
        true
    }
}

/// `y = a·x + 1` with `a` read from the key, in a keyed capture; `victim` is written by a kernel
/// node of the same call after it (it must hold `iota(N, 5, 9)` whatever the capture does).
fn liar_step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Arc<Ops>,
    key: &Liar,
    (x, y, victim): (&CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> Result {
    let ops: &Ops = k;
    graph!(cache, stream, {
        capture(&x, &mut *y, key = (key.clone(), k.clone()), |s, (key, k), (x, mut y)| {
            let a = *key.a.lock().expect("not poisoned");
            s.kernel(k.affine(N, a, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg())).map(drop)
        });
        ops.iota(N, 5, 9, &mut *victim).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lying_or_panicking_key_replays_stale_scalars_on_the_same_memory_only() -> Result {
    // Attack: a `CaptureKey` whose `same` always says yes (interior mutability changes what the
    // closure records), and one that panics inside the cache's lookup. The documented outcome:
    // a stale recording of the *same* operands (the old scalar), never other memory; a panic
    // leaves the cache usable.
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let (mut y, mut victim) = (stream.alloc_zeros::<u32>(LEN)?, stream.alloc_zeros::<u32>(LEN)?);
    let key = Liar { a: Arc::new(std::sync::Mutex::new(2)), panic: Arc::default() };
    let mut cache = GraphCache::new();
    liar_step(&mut cache, &stream, &k, &key, (&x, &mut y, &mut victim))?;
    let want2 = host::affine(&host::iota(N, 3, 1), 2, 1);
    assert_same(&stream.clone_dtoh(&y)?, &want2, "first call");
    // The key's value changes; `same` says it did not: the recording with a = 2 is replayed.
    *key.a.lock().expect("not poisoned") = 7;
    stream.memset_zeros(&mut y)?;
    liar_step(&mut cache, &stream, &k, &key, (&x, &mut y, &mut victim))?;
    assert_same(&stream.clone_dtoh(&y)?, &want2, "stale scalar, same memory");
    assert_same(&stream.clone_dtoh(&victim)?, &host::iota(N, 5, 9), "victim");
    assert_eq!(cache.stats().capture_reuses, 1);
    // A panic in `same`: the call unwinds before anything is enqueued; the cache still works.
    key.panic.store(true, std::sync::atomic::Ordering::Relaxed);
    stream.memset_zeros(&mut victim)?;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        liar_step(&mut cache, &stream, &k, &key, (&x, &mut y, &mut victim))
    }));
    assert!(r.is_err(), "the key's panic comes out of the call");
    stream.synchronize()?;
    assert_same(&stream.clone_dtoh(&victim)?, &vec![0; LEN], "nothing enqueued by the panic");
    liar_step(&mut cache, &stream, &k, &key, (&x, &mut y, &mut victim))?;
    assert_same(&stream.clone_dtoh(&y)?, &want2, "after the panic");
    assert_same(&stream.clone_dtoh(&victim)?, &host::iota(N, 5, 9), "victim after the panic");
    // A fresh cache records with a = 7: the eager oracle agrees.
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    liar_step(&mut eager, &stream, &k, &key, (&x, &mut y, &mut victim))?;
    assert_same(&stream.clone_dtoh(&y)?, &host::affine(&host::iota(N, 3, 1), 7, 1), "eager");
    ctx.check_err()?;
    Ok(())
}

/// A keyed capture whose closure panics while `boom` is set, else `y = 3·x + 1`.
fn panicky(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Arc<Ops>,
    boom: bool,
    x: &CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> Result {
    graph!(cache, stream, {
        capture(&x, &mut *y, key = (boom, k.clone()), |s, (boom, k), (x, mut y)| {
            s.kernel(k.affine(N, 3, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg()))?;
            if *boom {
                panic!("the closure panics after adding a node");
            }
            Ok::<(), cudagraph::Error>(())
        });
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_keyed_closure_that_panicked_keeps_no_recording() -> Result {
    // Attack: a closure that panics mid-recording (after a node was added) must leave no
    // recording behind for its key and operands; the same key later records again.
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let x = stream.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = stream.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    for _ in 0..2 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            panicky(&mut cache, &stream, &k, true, &x, &mut y)
        }));
        assert!(r.is_err());
        assert_eq!(cache.recordings_kept(), 0);
    }
    stream.synchronize()?;
    assert_same(&stream.clone_dtoh(&y)?, &vec![0; LEN], "nothing launched");
    panicky(&mut cache, &stream, &k, false, &x, &mut y)?;
    assert_same(&stream.clone_dtoh(&y)?, &host::affine(&host::iota(N, 3, 1), 3, 1), "recorded");
    assert_eq!((cache.stats().captures, cache.recordings_kept()), (1, 1));
    ctx.check_err()?;
    Ok(())
}

/// A slow writer of `x`, then a keyed capture `y = 5·x + 1`, then `out = mix(y)`.
fn slow_step(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    k: &Arc<Ops>,
    seed: u32,
    (x, y, out): (&mut CudaSlice<u32>, &mut CudaSlice<u32>, &mut CudaSlice<u32>),
) -> Result {
    let ops: &Ops = k;
    graph!(cache, stream, {
        ops.slow_iota(N, 1 << 14, 3, seed, &mut *x).launch(cfg());
        capture(&*x, &mut *y, key = k.clone(), |s, k, (x, mut y)| {
            s.kernel(k.affine(N, 5, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg())).map(drop)
        });
        ops.mix(N, &*y, &mut *out).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn buffers_freed_after_an_instantiate_call_and_reallocated_run_on_the_new_ones() -> Result {
    // Attack: a `Mode::Instantiate` call (built, instantiated, uploaded; the ledger skipped),
    // its buffers dropped at once and new ones (other contents) allocated at the same
    // addresses, then `Mode::Graph` calls, unchanged (the seed fixed) and changed, on the new
    // ones, and back to `Mode::Instantiate` between two launches.
    let _serial = common::serial();
    let (ctx, stream, k) = gpu()?;
    let k = Arc::new(k);
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Instantiate);
    let z = || stream.alloc_zeros::<u32>(LEN);
    let (mut x, mut y, mut out) = (z()?, z()?, z()?);
    let ats = [addr(&x, &stream), addr(&y, &stream), addr(&out, &stream)];
    slow_step(&mut cache, &stream, &k, 1, (&mut x, &mut y, &mut out))?;
    assert_eq!((cache.stats().launches, cache.stats().uploads), (0, 1));
    drop((x, y, out));
    let ones = || Ok(stream.clone_htod(&vec![1u32; LEN])?);
    let (mut x, hit_x) = alloc_at(&stream, ats[0], ones)?;
    let (mut y, hit_y) = alloc_at(&stream, ats[1], ones)?;
    let (mut out, hit_out) = alloc_at(&stream, ats[2], ones)?;
    assert!(hit_x && hit_y && hit_out, "the allocator did not hand the addresses out again");
    stream.synchronize()?;
    assert_same(&stream.clone_dtoh(&out)?, &vec![1; LEN], "nothing ran in Mode::Instantiate");
    cache.set_mode(Mode::Graph);
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let (mut ex, mut ey, mut eout) = (z()?, z()?, z()?);
    for (call, seed) in [1u32, 1, 2, 2].into_iter().enumerate() {
        if call == 3 {
            // Uploaded again between two launches: nothing runs.
            cache.set_mode(Mode::Instantiate);
            slow_step(&mut cache, &stream, &k, 9, (&mut x, &mut y, &mut out))?;
            cache.set_mode(Mode::Graph);
        }
        slow_step(&mut cache, &stream, &k, seed, (&mut x, &mut y, &mut out))?;
        slow_step(&mut eager, &stream, &k, seed, (&mut ex, &mut ey, &mut eout))?;
        let y_want = host::affine(&host::slow_iota(N, 1 << 14, 3, seed), 5, 1);
        let want = host::mix(&y_want);
        assert_same(&stream.clone_dtoh(&eout)?, &want, &format!("eager, call {call}"));
        assert_same(&stream.clone_dtoh(&out)?, &want, &format!("graph, call {call}"));
        assert_same(&stream.clone_dtoh(&y)?, &y_want, &format!("graph y, call {call}"));
    }
    let s = cache.stats();
    assert_eq!((s.captures, s.uploads, s.launches), (1, 2, 4), "{s:?}");
    ctx.check_err()?;
    Ok(())
}
