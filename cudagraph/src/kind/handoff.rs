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
//! The flags and their pool are in `flags.rs`.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::{Condvar, Mutex};

use crate::raw::Flag;

/// A host node's work for a worker: run `job` (if any), then set `flag` (if any: a host function
/// of a capture sets its flag itself, `capture_host.rs`, and a dropped capture closure has none).
pub(crate) struct Task {
    /// Runs the closure; returns what to drop after the flag is set (the closure and what it
    /// owns), so that those drops, which may make CUDA calls, never run while the stream waits.
    pub(crate) job: Option<Box<dyn FnOnce() -> Option<super::host::Deferred> + Send>>,
    pub(crate) flag: Option<&'static Flag>,
}

/// Whether an eager host function's closure may still run (review 33c): its callback
/// (`cuLaunchHostFunc`) is enqueued before the wait for its flag (`cuStreamWaitValue32_v2`), and
/// when that wait is refused the call returns its error, ending its borrows, so the closure
/// must then either never run or have finished. The callback [`start`](Self::start)s it (or
/// finds it given up and drops the closure unrun), the worker marks it [`done`](Self::done)
/// after the closure returned, and the refused call [`give_up`](Self::give_up)s.
#[derive(Default)]
pub(crate) struct Gate(AtomicU8);

const PENDING: u8 = 0;
const STARTED: u8 = 1;
const DONE: u8 = 2;
const GIVEN_UP: u8 = 3;

impl Gate {
    /// The callback: whether the closure may run (`false`: the call gave it up).
    pub(crate) fn start(&self) -> bool {
        self.0.compare_exchange(PENDING, STARTED, AcqRel, Acquire).is_ok()
    }

    /// The worker, after the closure returned (or unwound).
    pub(crate) fn done(&self) {
        self.0.store(DONE, Release);
    }

    /// The call, whose wait was refused: after this the closure never runs, or it has ended.
    /// Blocks while it runs (on a worker; it makes no call that waits for this thread).
    pub(crate) fn give_up(&self) {
        if self.0.compare_exchange(PENDING, GIVEN_UP, AcqRel, Acquire).is_ok() {
            return;
        }
        while self.0.load(Acquire) != DONE {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
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
        let device = self.flag.map_or(0, |f| f.device);
        if tracing() {
            eprintln!("[handoff] worker runs a job for flag {device:#x}");
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
        if let Some(flag) = self.flag {
            flag.set();
        }
        if tracing() {
            eprintln!("[handoff] flag {device:#x} set");
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
        eprintln!("[handoff] callback hands over flag {:#x}", task.flag.map_or(0, |f| f.device));
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

/// Review 33c: the gate of an eager host function whose wait was refused.
#[cfg(test)]
mod gate_tests {
    use super::Gate;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// Given up before the callback: the closure never runs.
    #[test]
    fn given_up_first_the_callback_does_not_start() {
        let g = Gate::default();
        g.give_up();
        assert!(!g.start());
    }

    /// Started first: giving up waits until the run is done.
    #[test]
    fn started_first_giving_up_waits_for_the_run() {
        let g = Arc::new(Gate::default());
        assert!(g.start());
        let ended = Arc::new(AtomicBool::new(false));
        let (g2, e2) = (g.clone(), ended.clone());
        let worker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            e2.store(true, Ordering::SeqCst);
            g2.done();
        });
        g.give_up();
        assert!(ended.load(Ordering::SeqCst), "give_up returned while the run went on");
        worker.join().unwrap();
        assert!(!g.start(), "a gate starts once");
    }
}
