//! Host function nodes (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_HOST`): a Rust closure run
//! on the host by every launch, made by `host(&a, &mut b, |(a, b)| { … })` in `graph!`.
//!
//! Each call gives its own closure (the statement is evaluated every call, like any other), and
//! the launch of that call runs it, once: a node's closures wait in a queue (per node of an exec)
//! that each call's launch appends to and each run of the node's callback takes from. The
//! driver runs the launches of one exec in order, so the callback takes its own call's closure.
//!
//! What the driver holds is never a pointer to Rust data: the node's `userData` is a number,
//! looked up in a process-wide table when the callback runs. A queue stays in the table while
//! its node state exists or closures wait in it, whichever is later, so a variant evicted (or a
//! cache dropped) while its launch is pending still runs that launch's closure, and a callback
//! never reaches freed memory.
//!
//! The closure may read or write the pinned host buffers it lists: it gets `&[T]` for `&x` and
//! `&mut [T]` for `&mut y`, valid while it runs. A panic inside it is caught (it must not unwind
//! into the driver) and returned as [`Error::HostFunction`] by the next call on the same cache.
//!
//! The closure never runs on the driver's callback thread, where the driver forbids every CUDA
//! call (one fails with `CUDA_ERROR_NOT_PERMITTED` and leaves the context refusing the next
//! allocation; DESIGN.md): safe code reaches CUDA from inside a closure in too many ways (a
//! `CudaSlice` moved in or taken out of a cell and dropped: `cuMemFreeAsync`) for a bound on
//! the closure to close. The callback hands the job to a worker thread of the crate's
//! ([`hand_off`]) and blocks until the worker ran it and dropped it with everything it owned,
//! so the node still completes only after the closure, as the driver orders its successors.
//! The worker binds the launch's context while it runs the job and keeps a handle of it until
//! the node completed (so that a closure dropping the context's last other handle does not
//! destroy it inside its own node). What remains: a closure that *waits* for its own launch
//! (`synchronize` of the launching stream, a pinned buffer the same launch still uses) waits
//! for the node it runs in, forever: a deadlock, never wrong data.

use core::cell::Cell;
use core::ffi::c_void;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use cudarc::driver::sys::{self, CUcontext, CUgraphNodeParams, CUgraphNodeType};
use cudarc::driver::{CudaContext, CudaStream};

use super::{NodeKind, Reports};
use crate::error::{Call, Error, NodeSite};
use crate::operand::{Accesses, HostRead, HostWrite};
use crate::raw;

/// One pinned host buffer a `host` statement lists: `&x` (a [`HostRead`]) or `&mut y` (a
/// [`HostWrite`]). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a pinned host buffer: a `host` closure can use only pinned host memory",
    label = "a device buffer (or not a buffer) listed for a `host` closure",
    note = "list pinned host buffers (`ctx.alloc_pinned::<T>(n)`, a `PinnedHostSlice`), copied to and from the device by `copy` statements around the `host` statement"
)]
pub trait HostOperand: host_sealed::Sealed {
    /// What the closure gets for it: `&[T]` or `&mut [T]`.
    type View<'s>;
    /// The buffer's address and length, sent to the callback.
    #[doc(hidden)]
    fn raw(&self) -> (*mut c_void, usize);
    /// `(tag, written, context)`.
    #[doc(hidden)]
    fn access(&self) -> (u64, bool, CUcontext);
    /// The view of `raw`.
    ///
    /// # Safety
    /// `raw` is this operand's, and its memory is not used by anything else while `'s` lasts.
    #[doc(hidden)]
    unsafe fn view<'s>(raw: (*mut c_void, usize)) -> Self::View<'s>;
}

mod host_sealed {
    pub trait Sealed {}
}

impl<T> host_sealed::Sealed for HostRead<'_, T> {}
impl<T: Sync + 'static> HostOperand for HostRead<'_, T> {
    type View<'s> = &'s [T];
    fn raw(&self) -> (*mut c_void, usize) {
        (self.ptr.cast_mut(), self.len)
    }
    fn access(&self) -> (u64, bool, CUcontext) {
        (self.tag, false, self.ctx)
    }
    unsafe fn view<'s>((ptr, len): (*mut c_void, usize)) -> &'s [T] {
        // SAFETY: the caller's contract; pinned memory of `len` elements of `T`.
        unsafe { core::slice::from_raw_parts(ptr.cast_const().cast(), len) }
    }
}

impl<T> host_sealed::Sealed for HostWrite<'_, T> {}
impl<T: Send + 'static> HostOperand for HostWrite<'_, T> {
    type View<'s> = &'s mut [T];
    fn raw(&self) -> (*mut c_void, usize) {
        (self.ptr, self.len)
    }
    fn access(&self) -> (u64, bool, CUcontext) {
        (self.tag, true, self.ctx)
    }
    unsafe fn view<'s>((ptr, len): (*mut c_void, usize)) -> &'s mut [T] {
        // SAFETY: the caller's contract; pinned memory of `len` elements of `T`.
        unsafe { core::slice::from_raw_parts_mut(ptr.cast(), len) }
    }
}

/// The operands of a `host` statement: a tuple of 0 to 6 [`HostOperand`]s. Sealed.
pub trait HostOperands: host_sealed::Sealed {
    /// The closure's views, in order.
    type Views<'s>;
    /// The operands' addresses and lengths.
    #[doc(hidden)]
    type Raw: Copy + 'static;
    #[doc(hidden)]
    fn raw(&self) -> Self::Raw;
    /// Each operand's `(tag, written, context)` into `out`; returns how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// # Safety
    /// As [`HostOperand::view`], for each operand.
    #[doc(hidden)]
    unsafe fn views<'s>(raw: Self::Raw) -> Self::Views<'s>;
}

macro_rules! host_operands {
    ($($o:ident $i:tt),*) => {
        impl<$($o: HostOperand),*> host_sealed::Sealed for ($($o,)*) {}
        impl<$($o: HostOperand),*> HostOperands for ($($o,)*) {
            type Views<'s> = ($($o::View<'s>,)*);
            type Raw = ($(host_operands!(@raw $o),)*);
            #[allow(clippy::unused_unit)]
            fn raw(&self) -> Self::Raw {
                ($(self.$i.raw(),)*)
            }
            #[allow(unused_variables, unused_mut)]
            fn accesses(&self, out: &mut Accesses) -> usize {
                let mut n = 0;
                $(out[n] = self.$i.access(); n += 1;)*
                n
            }
            #[allow(unused_variables, clippy::unused_unit)]
            unsafe fn views<'s>(raw: Self::Raw) -> Self::Views<'s> {
                // SAFETY: the caller's contract.
                ($(unsafe { $o::view(raw.$i) },)*)
            }
        }
    };
    (@raw $o:ident) => { (*mut c_void, usize) };
}
host_operands!();
host_operands!(A 0);
host_operands!(A 0, B 1);
host_operands!(A 0, B 1, C 2);
host_operands!(A 0, B 1, C 2, D 3);
host_operands!(A 0, B 1, C 2, D 3, E 4);
host_operands!(A 0, B 1, C 2, D 3, E 4, F 5);

/// One launch's work of a host node: the call's closure on the call's buffers.
type Job = Box<dyn FnOnce() + Send>;

/// What a `host` statement gives the cache (object-safe view of [`HostParams`]).
pub trait HostWork {
    /// Each operand's `(tag, written, context)` into `out`; returns how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// The closure on the operands, taken out (once: `None` after).
    #[doc(hidden)]
    fn take_job(&self) -> Option<Job>;
}

/// A `host` statement's parameters, made by `host(&a, &mut b, |(a, b)| …)` in `graph!`: the
/// operands' handles and the closure. Borrows the buffers (`'a`) like every node's parameters.
pub struct HostParams<'a, H, F> {
    handles: H,
    f: Cell<Option<F>>,
    _borrow: core::marker::PhantomData<&'a ()>,
}

impl<H: HostOperands, F> HostParams<'_, H, F> {
    pub(crate) fn new(handles: H, f: F) -> Self {
        HostParams { handles, f: Cell::new(Some(f)), _borrow: core::marker::PhantomData }
    }
}

/// The addresses a job's closure gets its views from.
struct SendRaw<R>(R);
// SAFETY: the addresses are of pinned host memory that the call's guards keep alive and
// unused by anything else until the launch that runs the job completed (the guards record the
// buffers' events after the launch; cudarc makes host access and the free wait for them).
// Nothing else is done with them than building the closure's views while the job runs.
unsafe impl<R> Send for SendRaw<R> {}

impl<H, F> HostWork for HostParams<'_, H, F>
where
    H: HostOperands,
    F: for<'s> FnOnce(H::Views<'s>) + Send + 'static,
{
    fn accesses(&self, out: &mut Accesses) -> usize {
        self.handles.accesses(out)
    }

    fn take_job(&self) -> Option<Job> {
        let f = self.f.take()?;
        let raw = SendRaw(self.handles.raw());
        Some(Box::new(move || {
            let raw = raw;
            // SAFETY: see `SendRaw`: the views live only while the job runs, inside the launch
            // that the guards order every other use of the buffers around.
            f(unsafe { H::views(raw.0) })
        }))
    }
}

/// A job with where it came from, where its panic goes, and the context it runs in.
struct Queued {
    job: Job,
    site: NodeSite,
    reports: Arc<Reports>,
    /// The launch's context: bound on the worker while the job runs, and kept alive until the
    /// node completed (`None` under the mock driver and in unit tests: nothing bound).
    ctx: Option<Arc<CudaContext>>,
}

impl Queued {
    /// The statement's closure, taken out of its parameters (once: a second take is an error
    /// naming the statement), with the site, the cache's reports and the launch's context.
    fn take(
        h: &&dyn HostWork,
        reports: &Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
        ctx: Option<&Arc<CudaContext>>,
    ) -> Result<Self, Error> {
        let Some(job) = h.take_job() else {
            let why = "the statement's closure was already taken by an earlier launch".into();
            return Err(Error::InvalidNode { site: site(), why });
        };
        Ok(Queued { job, site: site(), reports: reports.clone(), ctx: ctx.cloned() })
    }

    /// Runs the job on the calling thread (a worker: see [`hand_off`]) with the launch's
    /// context bound, catching its panic: the job, what it owned and the panic's payload are
    /// dropped before this returns. Returns the context, for the worker to drop once the node
    /// completed (the closure may have dropped every other handle of it: destroying a context
    /// inside its own node would wait for that node).
    fn run(self) -> Option<Arc<CudaContext>> {
        let Queued { job, site, reports, ctx } = self;
        if let Some(ctx) = &ctx {
            // `cuCtxSetCurrent`: the worker's CUDA calls (a buffer's drop) find the context
            // current, as on the thread that launched. A failure is the closure's to see (a
            // cudarc call binds its own context).
            let _ = ctx.bind_to_thread();
        }
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            reports.push(site, message);
            // The payload's own drop may panic too, which must not end the worker either:
            // dropped inside `catch_unwind`, and a second payload is leaked.
            if let Err(again) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(panic)))
            {
                core::mem::forget(again);
            }
        }
        if ctx.is_some() {
            // SAFETY: unbinds whatever context the job left current (no handle is passed): the
            // worker keeps none current between jobs, since one may be destroyed meanwhile.
            let _ = unsafe { sys::cuCtxSetCurrent(core::ptr::null_mut()) };
        }
        ctx
    }
}

/// A worker thread's mailbox: the callback that took the worker puts its job in, the worker
/// runs it and says it is done.
struct Worker {
    slot: Mutex<Slot>,
    changed: Condvar,
}

enum Slot {
    /// Waiting for a job (and while the worker runs one: the job is then the worker's).
    Idle,
    /// Handed by a callback, not yet taken by the worker.
    Job(Queued),
    /// The job ran and was dropped, with everything it owned; the callback may return.
    Done,
}

/// The workers waiting for a job (each on its `changed`). A callback takes one, or starts one
/// when none waits; a worker puts itself back once its callback returned and it dropped the
/// job's context handle: as many workers as callbacks ever ran at once, each parked between
/// jobs, and no allocation per job once the list has its capacity.
static IDLE: Mutex<Vec<Arc<Worker>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `queued` on a worker thread of the crate's and returns once it ran and was dropped
/// there. The host callbacks (on the driver's thread, where no CUDA call is allowed) call it:
/// nothing of the user's runs or is dropped on the calling thread. A worker that cannot be
/// started (the system refuses a thread) leaves the job unrun and leaked, not dropped here,
/// and reports it as the closure's error.
fn hand_off(queued: Queued) {
    let idle = lock(&IDLE).pop();
    let worker = match idle {
        Some(w) => w,
        None => match start_worker() {
            Ok(w) => w,
            Err(e) => {
                let why = format!(
                    "cudagraph could not start its host-function worker thread ({e}); \
                     the closure did not run and was leaked"
                );
                queued.reports.push(queued.site, why);
                core::mem::forget(queued);
                return;
            }
        },
    };
    let mut slot = lock(&worker.slot);
    *slot = Slot::Job(queued);
    worker.changed.notify_all();
    while !matches!(*slot, Slot::Done) {
        slot = worker.changed.wait(slot).unwrap_or_else(|e| e.into_inner());
    }
    *slot = Slot::Idle;
    worker.changed.notify_all();
}

/// Starts a worker thread, parked until a callback hands it a job.
fn start_worker() -> std::io::Result<Arc<Worker>> {
    let w = Arc::new(Worker { slot: Mutex::new(Slot::Idle), changed: Condvar::new() });
    let mine = w.clone();
    std::thread::Builder::new().name("cudagraph-host".into()).spawn(move || work(mine))?;
    Ok(w)
}

/// A worker's loop: takes the job handed to it, runs it (and drops it), says it is done, waits
/// for the callback to return, drops the job's context handle and goes back to the idle list.
fn work(w: Arc<Worker>) {
    /// Says the job is done also if the worker unwinds (it does not: `Queued::run` catches the
    /// job's panics), so that no callback waits forever.
    struct Done<'w>(&'w Worker);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            *lock(&self.0.slot) = Slot::Done;
            self.0.changed.notify_all();
        }
    }
    loop {
        let mut slot = lock(&w.slot);
        while !matches!(*slot, Slot::Job(_)) {
            slot = w.changed.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        let Slot::Job(queued) = core::mem::replace(&mut *slot, Slot::Idle) else {
            continue;
        };
        drop(slot);
        let done = Done(&w);
        let ctx = queued.run();
        drop(done);
        // The callback resets the slot before it returns; only then is the worker free.
        let mut slot = lock(&w.slot);
        while matches!(*slot, Slot::Done) {
            slot = w.changed.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        drop(slot);
        // After the node completed: the last handle of the context (the closure dropped the
        // others) destroys it here, not inside its own node. Not yet idle meanwhile, so that
        // no later node's callback waits for this worker while the destroy waits for it.
        drop(ctx);
        lock(&IDLE).push(w.clone());
    }
}

/// A node's queue in [`QUEUES`]: its waiting jobs, and whether its node state is gone (then the
/// queue leaves the table once empty).
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Queued>,
    orphan: bool,
}

/// Every host node's queue, by the number its driver node carries as `userData`.
static QUEUES: Mutex<Option<HashMap<u64, Queue>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn with_queues<R>(f: impl FnOnce(&mut HashMap<u64, Queue>) -> R) -> R {
    let mut q = QUEUES.lock().unwrap_or_else(|e| e.into_inner());
    f(q.get_or_insert_with(HashMap::new))
}

/// The callback of every host node, on the driver's thread: takes the node's next job and has a
/// worker run it ([`hand_off`]), returning once it ran and was dropped.
unsafe extern "C" fn run_queued(user: *mut c_void) {
    let id = user as u64;
    let job = with_queues(|q| {
        let queue = q.get_mut(&id)?;
        let job = queue.jobs.pop_front();
        if queue.orphan && queue.jobs.is_empty() {
            // An empty queue: nothing of the user's is dropped here.
            q.remove(&id);
        }
        job
    });
    // A launch always queues its job first; none here would be a bug of this module. Nothing
    // may unwind into the driver, so it is not a panic.
    if let Some(job) = job {
        hand_off(job);
    }
}

/// The callback of an eager host statement (`cuLaunchHostFunc`), on the driver's thread: owns
/// its job, which a worker runs ([`hand_off`]).
unsafe extern "C" fn run_once(user: *mut c_void) {
    // SAFETY: `user` is the `Box<Queued>` that `eager` leaked for this one callback. Only the
    // box's memory is freed here; the job moves to the worker.
    let queued = *unsafe { Box::from_raw(user.cast::<Queued>()) };
    hand_off(queued);
}

/// An exec's host node: its queue's number. Dropping it orphans the queue (see the module docs).
pub(crate) struct HostState {
    id: u64,
}

impl Drop for HostState {
    fn drop(&mut self) {
        with_queues(|q| match q.get_mut(&self.id) {
            Some(queue) if !queue.jobs.is_empty() => queue.orphan = true,
            _ => {
                q.remove(&self.id);
            }
        });
    }
}

/// The host function node kind.
pub(crate) struct Host;

impl NodeKind for Host {
    type Params<'a> = &'a dyn HostWork;
    type State = HostState;
    const ADD: &'static str = "cuGraphAddNode_v2 (host function)";
    const SET: &'static str = "cuGraphExecNodeSetParams (host function)";
    const EAGER: &'static str = "cuLaunchHostFunc";
    const LAUNCH_WORK: bool = true;

    fn validate(
        _: &&dyn HostWork,
        _: Option<&super::Limits>,
        _: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Ok(())
    }

    fn accesses(h: &&dyn HostWork, out: &mut Accesses) -> usize {
        h.accesses(out)
    }

    fn state(_: &&dyn HostWork) -> HostState {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        with_queues(|q| q.insert(id, Queue::default()));
        HostState { id }
    }

    /// The driver's node never changes: the call's closure goes to the queue at launch.
    fn record(_: &mut HostState, _: &&dyn HostWork) -> bool {
        false
    }

    fn with_params<R>(
        s: &mut HostState,
        _: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST);
        p.__bindgen_anon_1.host.fn_ = Some(run_queued);
        p.__bindgen_anon_1.host.userData = s.id as *mut c_void;
        f(&mut p)
    }

    /// After a whole-exec update the exec runs the new graph's callbacks, whose numbers are the
    /// new states': nothing to carry.
    fn launching(
        s: &mut HostState,
        h: &&dyn HostWork,
        ctx: Option<&Arc<CudaContext>>,
        reports: &Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let queued = Queued::take(h, reports, site, ctx)?;
        with_queues(|q| q.entry(s.id).or_default().jobs.push_back(queued));
        Ok(())
    }

    fn unlaunched(s: &mut HostState) -> Option<Box<dyn Send>> {
        let job = with_queues(|q| q.get_mut(&s.id).and_then(|queue| queue.jobs.pop_back()));
        job.map(|j| Box::new(j) as Box<dyn Send>)
    }

    unsafe fn eager(
        h: &&dyn HostWork,
        stream: &CudaStream,
        reports: &Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let queued = Queued::take(h, reports, site, Some(stream.context()))?;
        let queued = Box::into_raw(Box::new(queued));
        // SAFETY: the stream is alive and its context current; `run_once` takes ownership of
        // `queued` when the driver calls it (exactly once, after the stream's earlier work).
        let r = unsafe { raw::launch_host_func(stream.cu_stream(), run_once, queued.cast()) };
        r.call(Self::EAGER).map_err(|source| {
            // SAFETY: the driver refused the callback: it will never run, the job is still ours.
            drop(unsafe { Box::from_raw(queued) });
            Error::Node { site: site(), source }
        })
    }
}

#[cfg(test)]
mod tests {
    //! The handoff without a GPU: the test thread calls the callbacks as the driver's thread
    //! would (a null context: nothing is bound, no driver call).
    use super::*;
    use std::sync::Barrier;
    use std::thread::ThreadId;

    fn site() -> NodeSite {
        NodeSite { label: "host", text: "host(..)", file: file!(), line: 1, column: 1 }
    }

    fn queued(reports: &Arc<Reports>, job: impl FnOnce() + Send + 'static) -> Queued {
        Queued { job: Box::new(job), site: site(), reports: reports.clone(), ctx: None }
    }

    /// Queues `q` for a fresh host node, as `launching` does; returns the node's `userData`.
    fn queue(q: Queued) -> *mut c_void {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        with_queues(|m| m.entry(id).or_default().jobs.push_back(q));
        id as *mut c_void
    }

    /// Calls `f` on a thread of its own (the "driver's callback thread"); returns its id and
    /// what `f` returned.
    fn on_driver_thread<R: Send>(f: impl FnOnce() -> R + Send) -> (ThreadId, R) {
        std::thread::scope(|s| s.spawn(|| (std::thread::current().id(), f())).join().unwrap())
    }

    /// Records the thread it is dropped on, after a pause (so that a callback returning before
    /// the drop finished would be seen).
    struct Probe(Arc<Mutex<Option<ThreadId>>>);
    impl Drop for Probe {
        fn drop(&mut self) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            *self.0.lock().unwrap() = Some(std::thread::current().id());
        }
    }

    #[test]
    fn a_host_nodes_job_runs_and_drops_on_a_worker_before_the_callback_returns() {
        let reports = Arc::new(Reports::default());
        let ran = Arc::new(Mutex::new(None));
        let dropped = Arc::new(Mutex::new(None));
        let (ran2, probe) = (ran.clone(), Probe(dropped.clone()));
        let user = queue(queued(&reports, move || {
            let _owned = probe;
            std::thread::sleep(std::time::Duration::from_millis(20));
            *ran2.lock().unwrap() = Some(std::thread::current().id());
        }));
        let user = user as usize;
        let (driver, after) = on_driver_thread(|| {
            // SAFETY: `user` is a queue of this module with one job.
            unsafe { run_queued(user as *mut c_void) };
            (*ran.lock().unwrap(), *dropped.lock().unwrap())
        });
        let (Some(ran_on), Some(dropped_on)) = after else {
            panic!("the callback returned before the job ran and dropped: {after:?}");
        };
        assert_ne!(ran_on, driver, "the job ran on the callback's thread");
        assert_ne!(dropped_on, driver, "what the job owned was dropped on the callback's thread");
        assert_ne!(ran_on, std::thread::current().id());
        assert_eq!(ran_on, dropped_on, "ran and dropped on the worker");
        assert!(reports.take().is_none());
    }

    #[test]
    fn an_eager_job_runs_and_drops_on_a_worker_before_the_callback_returns() {
        let reports = Arc::new(Reports::default());
        let dropped = Arc::new(Mutex::new(None));
        let probe = Probe(dropped.clone());
        let user = Box::into_raw(Box::new(queued(&reports, move || drop(probe)))) as usize;
        let (driver, after) = on_driver_thread(|| {
            // SAFETY: `user` is a leaked `Box<Queued>`, given to this one callback.
            unsafe { run_once(user as *mut c_void) };
            *dropped.lock().unwrap()
        });
        let dropped_on = after.expect("the callback returned before the job's drop");
        assert_ne!(dropped_on, driver, "dropped on the callback's thread");
    }

    /// A panic is caught on the worker and reported; its payload (owning a value with a `Drop`)
    /// is dropped there too; the callback returns normally, and the next job still runs.
    #[test]
    fn a_panic_on_the_worker_is_reported_and_its_payload_dropped_there() {
        let reports = Arc::new(Reports::default());
        let dropped = Arc::new(Mutex::new(None));
        let probe = Probe(dropped.clone());
        let user = queue(queued(&reports, move || {
            std::panic::panic_any((probe, "payload"));
        })) as usize;
        let next = Arc::new(AtomicU64::new(0));
        let n = next.clone();
        let user2 = queue(queued(&reports, move || {
            n.fetch_add(1, Ordering::SeqCst);
        })) as usize;
        let (driver, after) = on_driver_thread(|| {
            // SAFETY: queues of this module with one job each.
            unsafe { run_queued(user as *mut c_void) };
            let after = *dropped.lock().unwrap();
            unsafe { run_queued(user2 as *mut c_void) };
            after
        });
        let dropped_on = after.expect("the payload was not dropped before the callback returned");
        assert_ne!(dropped_on, driver, "the payload was dropped on the callback's thread");
        assert_eq!(next.load(Ordering::SeqCst), 1, "the next job ran");
        match reports.take() {
            Some(Error::HostFunction { site: s, message }) => {
                assert_eq!(s, site());
                assert_eq!(message, "a panic without a message");
            }
            other => panic!("expected Error::HostFunction, got {other:?}"),
        }
        let user = queue(queued(&reports, || panic!("with a message {}", 7))) as usize;
        // SAFETY: as above.
        on_driver_thread(|| unsafe { run_queued(user as *mut c_void) });
        match reports.take() {
            Some(Error::HostFunction { message, .. }) => assert_eq!(message, "with a message 7"),
            other => panic!("expected Error::HostFunction, got {other:?}"),
        }
    }

    /// Two callbacks at once (two driver threads) each get a worker: jobs that wait for each
    /// other finish, as they would on the driver's threads.
    #[test]
    fn callbacks_running_at_once_get_a_worker_each() {
        let reports = Arc::new(Reports::default());
        let both = Arc::new(Barrier::new(2));
        let users: Vec<usize> = (0..2)
            .map(|_| {
                let both = both.clone();
                queue(queued(&reports, move || {
                    both.wait();
                })) as usize
            })
            .collect();
        std::thread::scope(|s| {
            for &user in &users {
                // SAFETY: queues of this module with one job each.
                s.spawn(move || unsafe { run_queued(user as *mut c_void) });
            }
        });
        assert!(reports.take().is_none());
    }

    /// One node's jobs run in queue order, each on a worker; an orphaned queue (its node state
    /// dropped with jobs waiting) still runs them and then leaves the table.
    #[test]
    fn an_orphaned_queue_still_runs_its_jobs_in_order_and_leaves_the_table() {
        let reports = Arc::new(Reports::default());
        let state = Host::state(&(&NoWork as &dyn HostWork));
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let order = order.clone();
            let q = queued(&reports, move || order.lock().unwrap().push(i));
            with_queues(|m| m.get_mut(&state.id).unwrap().jobs.push_back(q));
        }
        let id = state.id;
        drop(state);
        assert!(with_queues(|m| m.get(&id).is_some_and(|q| q.orphan)));
        let user = id as usize;
        for _ in 0..3 {
            // SAFETY: a queue of this module with a job.
            on_driver_thread(|| unsafe { run_queued(user as *mut c_void) });
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        assert!(with_queues(|m| !m.contains_key(&id)), "the orphaned queue left the table");
    }

    /// A job taken back (its launch failed) is handed to the caller, who drops it on its own
    /// thread: never on a callback's.
    #[test]
    fn a_job_taken_back_is_dropped_by_the_caller() {
        let reports = Arc::new(Reports::default());
        let mut state = Host::state(&(&NoWork as &dyn HostWork));
        let dropped = Arc::new(Mutex::new(None));
        let probe = Probe(dropped.clone());
        let q = queued(&reports, move || drop(probe));
        with_queues(|m| m.get_mut(&state.id).unwrap().jobs.push_back(q));
        let back = Host::unlaunched(&mut state).expect("the job is taken back");
        drop(back);
        assert_eq!(*dropped.lock().unwrap(), Some(std::thread::current().id()));
        assert!(Host::unlaunched(&mut state).is_none());
    }

    /// A `HostWork` with no closure (the tests queue their own jobs).
    struct NoWork;
    impl HostWork for NoWork {
        fn accesses(&self, _: &mut Accesses) -> usize {
            0
        }
        fn take_job(&self) -> Option<Job> {
            None
        }
    }
}
