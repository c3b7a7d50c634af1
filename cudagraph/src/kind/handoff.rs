//! Where a host node's closure runs: not on the driver's callback thread, where CUDA forbids
//! every CUDA call (a closure dropping a device buffer it owns makes one), but on a worker
//! thread of the crate's, while the stream waits for it on the device.
//!
//! A host node is a child graph of two nodes: the host function ([`crate::kind::host`]'s
//! callback), then a batch mem-op node that waits (`CU_STREAM_WAIT_VALUE_EQ`, polled by the
//! device) for the node's [`Flag`] to be 1. The callback only resets the flag to 0 and hands the
//! closure to a worker ([`submit`]), and returns: the driver's thread is free at once. The worker
//! runs the closure, where CUDA calls are ordinary calls (frees, allocations, copies on other
//! streams), then sets the flag to 1, which lets the device go on to the node's successors. An
//! eager host statement does the same with `cuLaunchHostFunc` and `cuStreamWaitValue32_v2`.
//! (The blocking hand-off, a callback that waits for the worker, deadlocks: measured on the H200,
//! a worker's `cuEventRecord` on the launching stream waits for the blocked callback;
//! `examples/probes/host_probe.cu`.)
//!
//! The closure is `FnMut`, called once: the worker calls it, sets the flag, and only then drops
//! it, with everything it owns. Those drops (a device buffer's `cuMemFreeAsync`, a pinned
//! buffer's `cuMemFreeHost`, which waits for the device, an exec's destruction) therefore never
//! run while the stream waits for the node. Measured on the H200 (`tests/tests/host_closures.rs`,
//! before drops were deferred): a free inside the closure waited for good for a driver lock held
//! by the user's thread, blocked in a pageable `clone_dtoh` on the same stream until the stream
//! passed the node; and `cuMemFreeHost` in the closure waited for the device itself. CUDA calls
//! the closure's body makes itself (allocating, copying on another stream) do run while the
//! stream waits: they work, unless another thread is blocked in a CUDA call waiting for that
//! stream (or the call waits for the device): the docs of `host` say so.
//!
//! Every pending job has a worker of its own (the pool grows when none is idle), so a closure
//! that waits for another stream's host node never waits behind it.
//!
//! `CUDAGRAPH_TRACE_HOST` set in the environment prints each hand-off on stderr (where a hang
//! is).
//!
//! Flags are 4-byte words of mapped pinned memory (`cuMemHostAlloc`, portable and device-mapped),
//! one cache line apart, allocated a page at a time per context and never freed: the context
//! that allocated a page is kept for the process ([`raw::keep_primary_context`]), so a page
//! never dangles. A flag goes back to its context's pool when the driver says no graph or exec
//! can read it any more: the template graph of its node owns a user object whose destructor
//! returns it (the driver runs that destructor after the last exec holding the node was
//! destroyed and its launches completed), and an eager statement's flag is returned by a
//! second host function after its wait.

use core::ffi::c_void;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};

use cudarc::driver::DriverError;
use cudarc::driver::sys::{CUcontext, CUdeviceptr};

use crate::raw;

/// Bytes allocated at a time for flags.
const PAGE: usize = 64 << 10;
/// Bytes between two flags (one cache line, so that the device's polling of one flag does not
/// share a line with the host's writes of another).
const STRIDE: usize = 64;

/// One flag: a 32-bit word in mapped pinned host memory, its device address, and the context
/// whose pool it returns to. Lives for the process (pages are never freed).
pub(crate) struct Flag {
    host: *mut u32,
    pub(crate) device: CUdeviceptr,
    ctx: usize,
}

// SAFETY: `host` points into pinned memory that is never freed; it is only accessed through
// `AtomicU32` (by the host) and by the device's wait.
unsafe impl Send for Flag {}
unsafe impl Sync for Flag {}

impl Flag {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `host` is 4-aligned (a multiple of `STRIDE` into a page) and lives for the
        // process; the host only ever accesses it atomically.
        unsafe { AtomicU32::from_ptr(self.host) }
    }

    /// 0: the device's wait holds until [`Self::set`].
    pub(crate) fn reset(&self) {
        self.word().store(0, Ordering::SeqCst);
    }

    /// 1: the device's wait ends. Everything the closure wrote before is visible to the work
    /// after the wait (host stores are ordered, and the device reads after it sees the flag).
    pub(crate) fn set(&self) {
        self.word().store(1, Ordering::SeqCst);
    }
}

/// A context's flags: whether its primary context is kept, and its free flags.
#[derive(Default)]
struct Pool {
    kept: bool,
    free: Vec<&'static Flag>,
}

/// Flag pools by context.
static FLAGS: Mutex<Option<HashMap<usize, Pool>>> = Mutex::new(None);
/// Flags taken and not given back, over every context.
static IN_USE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many flags are taken and not given back (a graph or exec, or an eager statement, may
/// still read them). For tests.
pub fn in_use() -> usize {
    IN_USE.load(Ordering::SeqCst)
}

fn with_pool<R>(ctx: usize, f: impl FnOnce(&mut Pool) -> R) -> R {
    let mut pools = FLAGS.lock().unwrap_or_else(|e| e.into_inner());
    f(pools.get_or_insert_with(HashMap::new).entry(ctx).or_default())
}

/// A free flag of the current context `ctx`, allocating a page of them when none is free
/// (`cuMemHostAlloc`; the first time for a context, `cuDevicePrimaryCtxRetain` too).
///
/// # Safety
/// `ctx` is current on this thread.
pub(crate) unsafe fn take(ctx: CUcontext) -> Result<&'static Flag, DriverError> {
    let key = ctx as usize;
    let r = with_pool(key, |pool| {
        if let Some(f) = pool.free.pop() {
            return Ok(f);
        }
        if !pool.kept {
            // SAFETY: the caller's contract (a context is current).
            unsafe { raw::keep_primary_context() }?;
            pool.kept = true;
        }
        // SAFETY: a context is current; the page lives as long as it, which is the process.
        let (host, device) = unsafe { raw::mem_host_alloc_mapped(PAGE) }?;
        let flags: Vec<Flag> = (0..PAGE / STRIDE)
            .map(|i| Flag {
                host: host.cast::<u8>().wrapping_add(i * STRIDE).cast(),
                device: device + (i * STRIDE) as u64,
                ctx: key,
            })
            .collect();
        let flags: &'static [Flag] = Vec::leak(flags);
        pool.free.extend(flags[1..].iter());
        Ok(&flags[0])
    });
    if r.is_ok() {
        IN_USE.fetch_add(1, Ordering::SeqCst);
    }
    r
}

/// Returns `flag` to its context's pool. No CUDA call: callable from driver threads.
pub(crate) fn give(flag: &'static Flag) {
    with_pool(flag.ctx, |pool| pool.free.push(flag));
    IN_USE.fetch_sub(1, Ordering::SeqCst);
}

/// The user-object destructor and host function that return a flag (`user` is the flag).
pub(crate) unsafe extern "C" fn give_back(user: *mut c_void) {
    // SAFETY: `user` is a `&'static Flag` handed to the driver by this module.
    give(unsafe { &*user.cast_const().cast::<Flag>() });
}

/// `flag` as the driver's `void*` for [`give_back`].
pub(crate) fn as_user(flag: &'static Flag) -> *mut c_void {
    (flag as *const Flag).cast_mut().cast()
}

/// A host node's work for a worker: run `job` (if any), then set `flag`.
pub(crate) struct Task {
    /// Runs the closure; returns what to drop after the flag is set (the closure and what it
    /// owns), so that those drops, which may make CUDA calls, never run while the stream waits.
    pub(crate) job: Option<Box<dyn FnOnce() -> Option<super::host::Deferred> + Send>>,
    pub(crate) flag: &'static Flag,
}

/// Whether `CUDAGRAPH_TRACE_HOST` is set: then the hand-off prints each step on stderr.
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("CUDAGRAPH_TRACE_HOST").is_some())
}

impl Task {
    /// [`Self::run`] on a driver thread: the closure's values are leaked, not dropped.
    fn run_here(self) {
        let Task { job, flag } = self;
        let job = job.map(|j| Box::new(move || j().map(core::mem::forget).and(None)) as _);
        Task { job, flag }.run();
    }

    fn run(self) {
        if tracing() {
            eprintln!("[handoff] worker runs a job for flag {:#x}", self.flag.device);
        }
        let mut leftover = None;
        if let Some(job) = self.job {
            // The job catches its own panics (it reports them); a second one from its drop is
            // caught here so that the flag is set whatever happens.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
                Ok(l) => leftover = l,
                Err(p) => core::mem::forget(p),
            }
        }
        self.flag.set();
        if tracing() {
            eprintln!("[handoff] flag {:#x} set", self.flag.device);
        }
        // The closure's own values (device buffers, caches, pinned memory) are freed now, off
        // the stream's path: a free that waits for the device or for a driver lock held by a
        // thread waiting for the stream no longer waits for this node. A panic of a `Drop` is
        // caught (the worker must live on) and reported by a later call of the cache.
        if let Some(d) = leftover {
            d.drop_now();
        }
    }
}

/// The workers' queue.
struct Workers {
    tasks: VecDeque<Task>,
    /// Workers waiting for a task.
    idle: usize,
}

static WORKERS: Mutex<Workers> = Mutex::new(Workers { tasks: VecDeque::new(), idle: 0 });
static WAKE: Condvar = Condvar::new();

fn workers() -> std::sync::MutexGuard<'static, Workers> {
    WORKERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hands `task` to a worker: an idle one, or a new one when every worker has a task (so no task
/// waits behind another). No CUDA call: called from the driver's callback thread. If no thread
/// can be started, the task runs here (CUDA calls inside it then fail as before).
pub(crate) fn submit(task: Task) {
    if tracing() {
        eprintln!("[handoff] callback hands over flag {:#x}", task.flag.device);
    }
    let mut p = workers();
    p.tasks.push_back(task);
    if p.tasks.len() <= p.idle {
        drop(p);
        WAKE.notify_one();
        return;
    }
    drop(p);
    let spawned = std::thread::Builder::new().name("cudagraph-host".into()).spawn(worker);
    if spawned.is_err() {
        // No thread to be had: the job runs here, on the driver's thread (CUDA calls in its
        // body fail), and what it owns is leaked rather than dropped here.
        let task = workers().tasks.pop_back();
        if let Some(t) = task {
            t.run_here();
        }
    }
}

/// A worker: runs tasks for the rest of the process.
fn worker() {
    loop {
        let task = {
            let mut p = workers();
            loop {
                if let Some(t) = p.tasks.pop_front() {
                    break t;
                }
                p.idle += 1;
                p = WAKE.wait(p).unwrap_or_else(|e| e.into_inner());
                p.idle -= 1;
            }
        };
        task.run();
    }
}
