//! Helpers shared by the GPU test binaries (`gpu`, `builder`, `bad_input`): the kernels of
//! `kernels/ops.cu`, the first step of a GPU test, eager launches with cudarc, slice comparisons
//! and host models of the integer kernels. Each binary compiles its own copy (`mod common;`) and
//! uses only part of it, hence the `allow`s.

#![allow(dead_code)]

use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::kernels;

/// The kernels of the GPU tests, compiled at run time by NVRTC.
pub const SOURCE: &str = include_str!("../../kernels/ops.cu");

kernels! {
    /// Kernels of `kernels/ops.cu` (see the comments there).
    pub struct Ops {
        fn iota(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn affine(n: u32, a: u32, b: u32, x: &[u32], y: &mut [u32]);
        fn affine_inplace(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn mix(n: u32, x: &[u32], y: &mut [u32]);
        fn combine3(n: u32, a: &[u32], b: &[u32], c: &[u32], out: &mut [u32]);
        fn slow_iota(n: u32, spins: u32, a: u32, b: u32, x: &mut [u32]);
        fn slow_affine(n: u32, spins: u32, a: u32, b: u32, x: &[u32], y: &mut [u32]);
        fn slow_stamp(spins: u32, t: &mut [u64]);
        fn stamp(t: &mut [u64]);
        fn widen_u8(n: u32, x: &[u8], y: &mut [u32]);
        fn widen_u16(n: u32, x: &[u16], y: &mut [u32]);
        fn scale_sub_i32(n: u32, s: i32, x: &[i32], y: &mut [i32]);
        fn fill_f32(n: u32, a: f32, b: f32, x: &mut [f32]);
        fn axpy_f32(n: u32, a: f32, x: &[f32], y: &mut [f32]);
        fn smooth_f32(n: u32, x: &[f32], y: &mut [f32]);
    }
}

pub type Result<T = ()> = cudagraph::Result<T>;

/// Runs the GPU tests of one binary one at a time (hold the guard for the whole test). A stream
/// capture is invalidated by a `cuCtxSynchronize` of its context from any thread (the driver's
/// rule), and cudarc makes one when a fresh `CudaContext` object creates its first stream, as
/// every test's [`gpu`] does: so tests that capture must not overlap with other tests.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that panicked while holding it poisons it; the next test still runs.
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The kernels, loaded in `ctx` (a context object of the test's choosing).
pub fn load(ctx: &Arc<CudaContext>) -> Result<Ops> {
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    unsafe { Ops::load(ctx, compile_ptx(SOURCE)?) }
}

/// Runs `f` on a new thread: its capture origins (thread-local, one per `CUcontext`, owned by
/// the `Arc<CudaContext>` object that made it) start empty and are dropped with it.
pub fn fresh_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|sc| sc.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Makes `stream`'s context object the owner of this thread's capture origin of its
/// `CUcontext` (the first capture of the thread there makes it, with `ctx.new_stream()`).
pub fn own_origin(stream: &Arc<CudaStream>) -> Result {
    drop(cudagraph::capture(stream, (), |_, ()| Ok::<(), cudagraph::Error>(()))?);
    Ok(())
}

/// The first step of every GPU test: asserts that a CUDA driver is present (a GPU test must not
/// skip silently on a GPU machine), then creates the context of device 0, a new stream, and
/// loads the kernels.
pub fn gpu() -> Result<(Arc<CudaContext>, Arc<CudaStream>, Ops)> {
    let ctx = device_0()?;
    let stream = ctx.new_stream()?;
    let k = load(&ctx)?;
    Ok((ctx, stream, k))
}

/// As [`gpu`], with cudarc's event tracking off before any buffer is allocated: the buffers the
/// test allocates have no events, so their guards are inert. Each caller orders every use of
/// its buffers itself (one stream, or the graph calls whose ordering is what it tests).
pub fn gpu_untracked() -> Result<(Arc<CudaContext>, Arc<CudaStream>, Ops)> {
    let ctx = device_0()?;
    // SAFETY: the caller's contract above: no buffer is used on two streams unordered.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    let k = load(&ctx)?;
    Ok((ctx, stream, k))
}

/// The context of device 0, after asserting that a CUDA driver is present.
fn device_0() -> Result<Arc<CudaContext>> {
    assert!(
        cudagraph::driver_available(),
        "no CUDA driver: libcuda could not be loaded. The GPU tests need an NVIDIA GPU and its \
         driver; they are #[ignore]d so that machines without one skip them unless asked"
    );
    Ok(CudaContext::new(0)?)
}

/// The addresses of buffers freed and allocated again, counting those seen before: a test of
/// memory allocated again at a freed address tests nothing unless some address comes back.
#[derive(Default)]
pub struct AddressesSeen {
    seen: std::collections::HashSet<usize>,
    noted: usize,
    repeated: usize,
}

impl AddressesSeen {
    /// Notes one buffer's address.
    pub fn note(&mut self, address: usize) {
        self.noted += 1;
        self.repeated += usize::from(!self.seen.insert(address));
    }

    /// Prints how many addresses came back (after `what`), and asserts that some did.
    pub fn assert_some_came_back(&self, what: &str) {
        eprintln!("{what}addresses seen again: {} of {}", self.repeated, self.noted);
        assert!(self.repeated > 0, "no pinned address came back: the test tests nothing");
    }
}

/// `n` zeroed device buffers of `len` `u32` each, on `s`.
pub fn buffers(s: &Arc<CudaStream>, n: usize, len: usize) -> Result<Vec<CudaSlice<u32>>> {
    Ok((0..n).map(|_| s.alloc_zeros::<u32>(len)).collect::<std::result::Result<_, _>>()?)
}

/// Every buffer of `bufs` copied to the host.
/// A view of `of` from its element 4 on, to put in the place of `of`'s neighbour (as two views
/// of one allocation would overlap) in the aliasing tests. The caller leaks it (it never frees
/// the memory, which `of` alone frees).
pub fn overlapping_view(s: &Arc<CudaStream>, of: &CudaSlice<u32>) -> CudaSlice<u32> {
    let base = of.device_ptr(s).0;
    // SAFETY (of these tests only): within `of`'s allocation; leaked by the caller, never freed.
    unsafe { s.upgrade_device_ptr::<u32>(base + 16, of.len() - 4) }
}

pub fn read_all(s: &Arc<CudaStream>, bufs: &[CudaSlice<u32>]) -> Result<Vec<Vec<u32>>> {
    Ok(bufs.iter().map(|b| s.clone_dtoh(b)).collect::<std::result::Result<_, _>>()?)
}

/// Asserts two lists of buffer contents are equal: as many buffers, each [`assert_same`].
#[track_caller]
pub fn same_all(got: &[Vec<u32>], want: &[Vec<u32>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_same(g, w, &format!("{what}, element {i}"));
    }
}

/// Pinned host memory the host reads fast (flags 0, not write-combined), zeroed.
pub fn pinned<
    T: cudagraph::cudarc::driver::DeviceRepr
        + cudagraph::cudarc::driver::ValidAsZeroBits
        + Default
        + Clone,
>(
    ctx: &Arc<CudaContext>,
    len: usize,
) -> Result<cudagraph::cudarc::driver::PinnedHostSlice<T>> {
    // SAFETY: written (zeroed) below before anything reads it.
    let mut p = unsafe { ctx.alloc_pinned_with_flags::<T>(len, 0) }?;
    p.as_mut_slice()?.fill(T::default());
    Ok(p)
}

/// Free device memory may differ this much between before and after a leak test's rounds.
pub const LEAK_SLACK: usize = 64 << 20;

/// Free device memory (`cuMemGetInfo`), once the device is idle and the graph memory pool's
/// unused reserve is given back (`cuDeviceGraphMemTrim`): the pool keeps its physical memory
/// between launches, in chunks of tens of MiB, so without the trim a leak test's before and after
/// differ by whatever the pool grew to in between (review_alloc saw 66 MiB on the H200 with
/// nothing leaked). What a graph or a buffer still holds is not trimmed and still counts.
pub fn free_memory(ctx: &Arc<CudaContext>) -> Result<usize> {
    ctx.synchronize()?;
    ctx.bind_to_thread()?;
    // SAFETY: the device of a live context; the trim frees only reserve no allocation uses.
    unsafe { cudagraph::cudarc::driver::sys::cuDeviceGraphMemTrim(ctx.cu_device()) }.result()?;
    Ok(cudagraph::cudarc::driver::result::mem_get_info()?.0)
}

/// No leak since `before` (within [`LEAK_SLACK`]), no error parked in the context.
#[track_caller]
pub fn assert_no_leak(ctx: &Arc<CudaContext>, before: usize, what: &str) {
    let after = free_memory(ctx).expect("mem_get_info");
    assert!(
        before.saturating_sub(after) <= LEAK_SLACK,
        "{what}: {} MiB less free device memory after the rounds",
        (before - after) >> 20
    );
    ctx.check_err().unwrap_or_else(|e| panic!("{what}: an error parked in the context: {e:?}"));
}

/// Aborts the process unless dropped within `secs`: a deadlock would otherwise hang CI.
pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

/// A [`Watchdog`] for `what`.
pub fn watchdog(secs: u64, what: &'static str) -> Watchdog {
    use std::sync::mpsc;
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let limit = std::time::Duration::from_secs(secs);
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            eprintln!("{what}: still running after {secs} s (a deadlock): aborting");
            std::process::abort();
        }
    });
    Watchdog(Some(tx))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// Launches kernel `$name` of `$k` eagerly on `$stream` with cudarc's launch builder, with the
/// arguments in order (`&scalar`, `&buffer`, `&mut buffer`). The caller imports
/// `cudarc::driver::PushKernelArg` (for `.arg`).
///
/// Only the launch itself is in the macro's `unsafe` block: the stream, the arguments and the
/// configuration are evaluated outside it, so that inside a capture's closure the caller still
/// writes `unsafe { s.stream() }` and `unsafe { view.as_cuda_view() }` with its own `SAFETY:`
/// comment (the macro's block does not cover them).
#[allow(unused_macros)]
macro_rules! launch {
    ($stream:expr, $k:expr, $name:literal, $cfg:expr; $($arg:expr),* $(,)?) => {{
        let f = $k
            .function($name)
            .expect(concat!("`", $name, "` is declared in `kernels!`"));
        let cfg = $cfg;
        // The arguments' temporaries live until the end of the `match`.
        match $stream.launch_builder(f)$(.arg($arg))* {
            // SAFETY: the arguments match the kernel's signature in kernels/ops.cu (the same
            // one that `kernels!` declares), and every buffer holds at least `n` elements.
            args => unsafe { args.launch(cfg) }.map(drop),
        }
    }};
}

#[allow(unused_imports)]
pub(crate) use launch;

/// Asserts two slices are equal; on failure reports how many elements differ and the first
/// one, instead of printing them all.
#[track_caller]
pub fn assert_same<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        let bad = got.iter().zip(want).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: {bad} of {} elements differ; first at index {i}: got {:?}, want {:?}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// Host models of the integer kernels of `ops.cu`.
pub mod host {
    pub fn iota(n: u32, a: u32, b: u32) -> Vec<u32> {
        (0..n).map(|i| i.wrapping_mul(a).wrapping_add(b)).collect()
    }

    /// `slow_iota`'s values: `spins` steps of the generator `v * 1664525 + 1013904223` from
    /// `i * a + b`. The steps compose to one affine map `v * m + k` (mod 2^32), made by squaring
    /// in `log2(spins)` steps, so the model costs `n` steps, not `n * spins` (65 536 × 2^20 took
    /// minutes per call).
    pub fn slow_iota(n: u32, spins: u32, a: u32, b: u32) -> Vec<u32> {
        // `(m, k)` is `v -> v * m + k`; `then(f, g)` is `g` after `f`.
        let then = |f: (u32, u32), g: (u32, u32)| {
            (f.0.wrapping_mul(g.0), f.1.wrapping_mul(g.0).wrapping_add(g.1))
        };
        let (mut map, mut pow, mut s) = ((1u32, 0u32), (1664525u32, 1013904223u32), spins);
        while s > 0 {
            if s & 1 == 1 {
                map = then(map, pow);
            }
            pow = then(pow, pow);
            s >>= 1;
        }
        iota(n, a, b).into_iter().map(|v| v.wrapping_mul(map.0).wrapping_add(map.1)).collect()
    }

    /// [`slow_iota`] step by step (the model's own check).
    pub fn slow_iota_stepwise(n: u32, spins: u32, a: u32, b: u32) -> Vec<u32> {
        let step = |v: u32| v.wrapping_mul(1664525).wrapping_add(1013904223);
        iota(n, a, b).into_iter().map(|v| (0..spins).fold(v, |v, _| step(v))).collect()
    }

    pub fn affine(x: &[u32], a: u32, b: u32) -> Vec<u32> {
        x.iter().map(|&v| v.wrapping_mul(a).wrapping_add(b)).collect()
    }

    pub fn affine_inplace(x: &mut [u32], a: u32, b: u32) {
        for (i, v) in x.iter_mut().enumerate() {
            *v = v.wrapping_mul(a).wrapping_add(b).wrapping_add(i as u32);
        }
    }

    pub fn mix(x: &[u32]) -> Vec<u32> {
        let n = x.len();
        (0..n)
            .map(|i| 3u32.wrapping_mul(x[i]).wrapping_add(x[n - 1 - i] ^ (x[(i + 1) % n] << 1)))
            .collect()
    }

    pub fn combine3(a: &[u32], b: &[u32], c: &[u32]) -> Vec<u32> {
        let n = a.len();
        (0..n)
            .map(|i| {
                a[i].wrapping_add(2u32.wrapping_mul(b[n - 1 - i])).wrapping_add(c[i] ^ 0x9e37_79b9)
            })
            .collect()
    }

    pub fn widen_u8(x: &[u8]) -> Vec<u32> {
        x.iter().enumerate().map(|(i, &v)| (u32::from(v) * 0x0101_0101) ^ i as u32).collect()
    }

    pub fn widen_u16(x: &[u16]) -> Vec<u32> {
        x.iter().enumerate().map(|(i, &v)| (u32::from(v) * 0x0001_0001) ^ i as u32).collect()
    }

    pub fn scale_sub_i32(x: &[i32], s: i32) -> Vec<i32> {
        let n = x.len();
        (0..n).map(|i| x[n - 1 - i] * s - (i % 1024) as i32).collect()
    }
}

/// Reviews 17 and 17b (`review_session17.rs`, `review_session17b.rs`): their tests also run on
/// the CPU stub driver, where kernels and copies do nothing, so only their host-side assertions
/// (call counts, unchanged calls) are checked there.
pub mod review17 {
    /// Whether the tests run on the CPU stub driver (`REVIEW17_STUB` set, `LD_LIBRARY_PATH` at
    /// the libraries `.ci/host-profile` builds).
    pub fn stub() -> bool {
        std::env::var_os("REVIEW17_STUB").is_some()
    }

    /// [`super::assert_same`], except on the stub driver.
    #[track_caller]
    pub fn assert_same(got: &[u32], want: &[u32], what: &str) {
        if !stub() {
            super::assert_same(got, want, what);
        }
    }

    /// [`super::same_all`], except on the stub driver.
    #[track_caller]
    pub fn same_all(got: &[Vec<u32>], want: &[Vec<u32>], what: &str) {
        if !stub() {
            super::same_all(got, want, what);
        }
    }
}

/// What reviews 26 and 26b (`review_session26.rs`, `review_session26b.rs`) share.
pub mod review26 {
    use std::sync::Arc;

    use cudagraph::cudarc::driver::CudaContext;

    use super::Result;
    use super::review17::stub;

    /// What the view check of a capture closure panics with.
    pub const REFUSED: &str = "not part of the capture";

    /// The text of a caught panic.
    pub fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
        match p.downcast::<String>() {
            Ok(s) => *s,
            Err(p) => p.downcast_ref::<&str>().map(|s| s.to_string()).unwrap_or_default(),
        }
    }

    /// A second `CUcontext` of device 0 (a non-primary context; on the CPU stub driver, whose
    /// every `CudaContext::new` is a context of its own, another object).
    pub fn non_primary() -> Result<Arc<CudaContext>> {
        if stub() {
            return Ok(CudaContext::new(0)?);
        }
        Ok(CudaContext::new_non_primary(0, 0)?)
    }
}

/// Session 18's run of 8 kernels over an array (`guard_words.rs`, `review_session18.rs`): each
/// element of `bufs` written in place by one iteration of an unrolled `for`, an indexed run.
pub mod run8 {
    use std::sync::Arc;

    use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
    use cudagraph::{GraphCache, graph};

    use super::{Ops, Result, host};

    /// Elements per buffer.
    pub const N: u32 = 1 << 16;
    pub const LEN: usize = N as usize;

    pub fn cfg() -> LaunchConfig {
        LaunchConfig::for_num_elems(N)
    }

    /// An indexed run of 8 kernels, each on its own element of `bufs`, in place.
    pub fn run8(
        cache: &mut GraphCache,
        k: &Ops,
        s: &Arc<CudaStream>,
        bufs: &mut [CudaSlice<u32>],
    ) -> cudagraph::Result<()> {
        let c = cfg();
        graph!(cache, s, {
            for i in 0..8 {
                k.affine_inplace(N, 3, 1, &mut bufs[i]).launch(c);
            }
        })
    }

    /// `run8`'s work, launch by launch.
    pub fn run8_eager(k: &Ops, s: &Arc<CudaStream>, bufs: &mut [CudaSlice<u32>]) -> Result {
        for b in bufs.iter_mut() {
            launch!(s, k, "affine_inplace", cfg(); &N, &3u32, &1u32, b)?;
        }
        Ok(())
    }

    /// 8 buffers on `s`, each with other values.
    pub fn distinct(s: &Arc<CudaStream>) -> Result<Vec<CudaSlice<u32>>> {
        (0..8u32).map(|j| Ok(s.clone_htod(&host::iota(N, j + 2, 5 * j))?)).collect()
    }
}

/// The registered plans of the review tests of session 19 (`review_session19b.rs`, `…19c.rs`,
/// `…19d.rs`), which check a body's edges without a GPU.
pub mod plans {
    /// The plan of source file `file` (a suffix of its path) whose statements' text holds
    /// `marker`.
    #[track_caller]
    pub fn plan_with(file: &str, marker: &str) -> &'static cudagraph::Plan {
        cudagraph::plans()
            .find(|p| p.file.ends_with(file) && p.nodes.iter().any(|n| n.text.contains(marker)))
            .unwrap_or_else(|| panic!("the graph! with `{marker}` is registered"))
    }

    /// Whether node `to` is reachable from node `from` by `edges`.
    pub fn reaches(edges: &[(u32, u32)], from: u32, to: u32) -> bool {
        let mut stack = vec![from];
        let mut seen = std::collections::HashSet::new();
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n) {
                stack.extend(edges.iter().filter(|e| e.0 == n).map(|e| e.1));
            }
        }
        false
    }
}

/// What the `BufferArray` tests (`buffer_array.rs`, `review_session27.rs`) share.
pub mod buffer_array {
    use std::sync::Arc;

    use cudagraph::BufferArray;
    use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

    use super::{Result, buffers};

    /// `n` zeroed buffers of `len` `u32` each, on `s`, as a `BufferArray`.
    pub fn array(s: &Arc<CudaStream>, n: usize, len: usize) -> Result<BufferArray<u32>> {
        Ok(buffers(s, n, len)?.into())
    }

    /// Whether the array's memo holds (its `Debug` says so).
    pub fn remembers(a: &BufferArray<u32>) -> bool {
        let d = format!("{a:?}");
        assert!(d.contains("remembered"), "Debug names the memo: {d}");
        d.contains("remembered: true")
    }

    /// A buffer's device address (event tracking off: its guard records nothing).
    pub fn address(s: &Arc<CudaStream>, b: &CudaSlice<u32>) -> usize {
        let (p, _g) = b.device_ptr(s);
        p as usize
    }
}
