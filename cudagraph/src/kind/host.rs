//! Host function nodes: a Rust closure run on the host by every launch, made by
//! `host(&a, &mut b, |(a, b)| { … })` in `graph!`. The node is a child graph
//! (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_GRAPH`) of a host function node and a batch
//! mem-op node waiting for the closure's end ([`super::handoff`]): the closure runs on a worker
//! thread of the crate's, never on the driver's callback thread, so that the CUDA calls safe
//! code makes in it (dropping a device buffer it owns, allocating, copying on another stream)
//! are ordinary calls.
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
//! The closure may call CUDA, but not wait for the stream that runs it (that wait never ends:
//! the stream waits for the closure).

use core::cell::Cell;
use core::ffi::c_void;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{
    CUDA_BATCH_MEM_OP_NODE_PARAMS_v2, CUcontext, CUgraph, CUgraphNodeParams, CUgraphNodeType,
    CUstreamBatchMemOpParams, CUstreamBatchMemOpType, CUstreamWaitValue_flags,
};

use super::handoff::{self, Task};
use super::{NodeKind, Reports};
use crate::error::{CudaError, Error, NodeSite};
use crate::flags;
use crate::operand::{Accesses, HostRead, HostWrite};
use crate::raw::{self, Flag};

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

/// One launch's work of a host node: calls the call's closure on the call's buffers, and returns
/// the closure itself, dropped only after the node completed (see [`super::handoff`]).
pub(crate) type Job = Box<dyn FnOnce() -> Leftover + Send>;

/// What a job leaves to drop once its node completed: the closure with what it owns.
pub(crate) type Leftover = Box<dyn Send>;

/// What a `host` statement gives the cache (object-safe view of [`HostParams`]).
pub trait HostWork {
    /// Each operand's `(tag, written, context)` into `out`; returns how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// The closure on the operands, taken out (once: `None` after).
    ///
    /// # Safety
    /// The job runs (if at all) only while the operands' borrows and guards last, ordered by
    /// them (the cache runs it inside the call's launch).
    #[doc(hidden)]
    unsafe fn take_job(&self) -> Option<Job>;
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
    F: for<'s> FnMut(H::Views<'s>) + Send + 'static,
{
    fn accesses(&self, out: &mut Accesses) -> usize {
        self.handles.accesses(out)
    }

    unsafe fn take_job(&self) -> Option<Job> {
        let mut f = self.f.take()?;
        let raw = SendRaw(self.handles.raw());
        Some(Box::new(move || {
            let raw = raw;
            // SAFETY: see `SendRaw`: the views live only while the job runs, inside the launch
            // that the guards order every other use of the buffers around.
            f(unsafe { H::views(raw.0) });
            // Not dropped here: what the closure owns is dropped once the node completed.
            Box::new(f) as Leftover
        }))
    }
}

/// A job with where it came from and where its panic goes.
struct Queued {
    job: Job,
    site: NodeSite,
    reports: Arc<Reports>,
}

impl Queued {
    /// The statement's closure, taken out of its parameters (once: a second take is an error
    /// naming the statement), with the site and the cache's reports.
    fn take(
        h: &&dyn HostWork,
        reports: &Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<Self, Error> {
        // SAFETY: the job runs in the call's launch, ordered by the call's guards.
        let Some(job) = (unsafe { h.take_job() }) else {
            let why = "the statement's closure was already taken by an earlier launch".into();
            return Err(Error::InvalidNode { site: site(), why });
        };
        Ok(Queued { job, site: site(), reports: reports.clone() })
    }

    /// Runs the job; returns the closure to drop after the node completed (`None` after a
    /// panic, which dropped it while unwinding). A panic is reported to the cache.
    fn run(self) -> Option<Deferred> {
        let Queued { job, site, reports } = self;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
            Ok(value) => Some(Deferred { value, site, reports }),
            Err(panic) => {
                report(&reports, site, "", panic);
                None
            }
        }
    }
}

/// Reports a caught panic as the cache's next call's [`Error::HostFunction`] (`what` prefixes
/// the message). The payload's own drop may panic too, which must not unwind into a driver
/// thread or a worker: dropped inside `catch_unwind`, and a second payload is leaked.
pub(crate) fn report(
    reports: &Reports,
    site: NodeSite,
    what: &str,
    panic: Box<dyn core::any::Any + Send>,
) {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    reports.push(site, format!("{what}{message}"));
    if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(panic))) {
        core::mem::forget(again);
    }
}

/// A closure that ran, with what it owns, to be dropped once its node completed
/// ([`super::handoff`]); a panic of that drop is reported like one of the closure.
pub(crate) struct Deferred {
    value: Leftover,
    site: NodeSite,
    reports: Arc<Reports>,
}

impl Deferred {
    /// `value` to drop once its node completed, reported as `site`'s to `reports` if its drop
    /// panics (a host function of a capture: `capture_host.rs`).
    pub(crate) fn new(value: Leftover, site: NodeSite, reports: Arc<Reports>) -> Self {
        Deferred { value, site, reports }
    }

    /// Drops the closure; never unwinds.
    pub(crate) fn drop_now(self) {
        let Deferred { value, site, reports } = self;
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(value))) {
            report(&reports, site, "while dropping the closure after it ran: ", panic);
        }
    }
}

thread_local! {
    /// The reports of the graph call running on this thread (see [`with_call_reports`]): the
    /// address of the `Reports` inside the caller's `Arc`, null outside a call. A pointer rather
    /// than an `Arc` clone: setting it is a plain store (the clone's two atomic operations and
    /// the `RefCell` were a tenth of an unchanged one-kernel call, `.ci/host-profile`).
    static CALL_REPORTS: core::cell::Cell<*const Reports> =
        const { core::cell::Cell::new(core::ptr::null()) };
}

/// Runs `f` with `reports` as this thread's call reports: a host function recorded by a
/// capture closure that `f` runs (`Capture::host`, in `capture_host.rs`) reports its panics
/// there, so that the next call of the cache (or launch of the standalone exec) returns them as
/// [`Error::HostFunction`], as a `host` statement's are. The previous ones are restored after,
/// also when `f` unwinds.
///
/// # Safety
/// `reports` is [`Arc::as_ptr`] of an `Arc<Reports>` that stays alive (a strong reference
/// held) until this returns.
pub(crate) unsafe fn with_call_reports<R>(reports: *const Reports, f: impl FnOnce() -> R) -> R {
    struct Restore(*const Reports);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALL_REPORTS.with(|r| r.set(self.0));
        }
    }
    let old = CALL_REPORTS.with(|r| r.replace(reports));
    let _restore = Restore(old);
    f()
}

/// The reports of the graph call running on this thread, if any ([`with_call_reports`]).
pub(crate) fn call_reports() -> Option<Arc<Reports>> {
    let p = CALL_REPORTS.with(core::cell::Cell::get);
    // SAFETY: a non-null pointer is set only by `with_call_reports`, whose caller keeps a
    // strong reference of its `Arc` alive until it returns and the pointer is restored: this
    // runs inside it (on this thread), so the count is at least 1 and the pointer is
    // `Arc::as_ptr` of that `Arc`.
    (!p.is_null()).then(|| unsafe {
        Arc::increment_strong_count(p);
        Arc::from_raw(p)
    })
}

/// A node's queue in [`QUEUES`]: its waiting jobs, whether its node state is gone (then the
/// queue leaves the table once empty), and the flag its wait node waits for.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Queued>,
    orphan: bool,
    flag: Option<&'static Flag>,
}

/// Every host node's queue, by the number its driver node carries as `userData`.
static QUEUES: Mutex<Option<HashMap<u64, Queue>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn with_queues<R>(f: impl FnOnce(&mut HashMap<u64, Queue>) -> R) -> R {
    let mut q = QUEUES.lock().unwrap_or_else(|e| e.into_inner());
    f(q.get_or_insert_with(HashMap::new))
}

/// The callback of every host node: takes the node's next job and hands it to a worker, which
/// runs it and then sets the node's flag (no CUDA call here: the driver's thread).
unsafe extern "C" fn run_queued(user: *mut c_void) {
    let id = user as u64;
    let (job, flag) = with_queues(|q| {
        let Some(queue) = q.get_mut(&id) else {
            return (None, None);
        };
        let (job, flag) = (queue.jobs.pop_front(), queue.flag);
        if queue.orphan && queue.jobs.is_empty() {
            q.remove(&id);
        }
        (job, flag)
    });
    // A launch always queues its job first and a node has its flag from its setup; neither
    // missing would be a bug of this module. Nothing may unwind into the driver, so it is not a
    // panic.
    if let Some(flag) = flag {
        flag.reset();
        handoff::submit(Task {
            job: job.map(|j| Box::new(move || j.run()) as _),
            flag: Some(flag),
        });
    }
}

/// An eager host statement's job and flag, owned by its callback.
struct Eager {
    queued: Queued,
    flag: &'static Flag,
    /// Shared with the call, which gives the job up when its wait is refused (review 33c).
    gate: Arc<handoff::Gate>,
}

/// The callback of an eager host statement (`cuLaunchHostFunc`): owns its job, which it hands to
/// a worker like [`run_queued`], unless the call gave it up (then the worker drops it unrun).
unsafe extern "C" fn run_once(user: *mut c_void) {
    // SAFETY: `user` is the `Box<Eager>` that `eager` leaked for this one callback.
    let Eager { queued, flag, gate } = *unsafe { Box::from_raw(user.cast::<Eager>()) };
    flag.reset();
    let job: Box<dyn FnOnce() -> Option<Deferred> + Send> = if gate.start() {
        Box::new(move || {
            let deferred = queued.run();
            gate.done();
            deferred
        })
    } else {
        // Given up: dropped unrun, on the worker (what it owns may make CUDA calls).
        Box::new(move || {
            drop(queued);
            None
        })
    };
    handoff::submit(Task { job: Some(job), flag: Some(flag) });
}

/// An exec's host node: its queue's number, and the child graph (host function, then the wait
/// for its flag) that the node is a copy of, alive only between [`Host::setup`] and
/// [`Host::added`] (the flag returns to its pool once no graph or exec holds a copy, through
/// the template's user object). Dropping it orphans the queue (see the module docs).
pub(crate) struct HostState {
    id: u64,
    template: CUgraph,
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

/// The template of a host node (`cuGraphCreate`): its flag (and the user object that returns
/// it), the host function node calling [`run_queued`] with `id`, and the batch mem-op node
/// waiting for the flag to be 1, all through `driver` (a test driver gives no flag: no wait).
/// On error the template is destroyed.
///
/// # Safety
/// `ctx` is current and the driver's.
unsafe fn template(
    s: &mut HostState,
    driver: &mut impl crate::raw::Driver,
    ctx: CUcontext,
) -> Result<(), CudaError> {
    let err = |call| move |error| CudaError { call, error };
    // SAFETY (every call): `ctx` is current; the graph is the state's until `Host::added`.
    let graph = unsafe { driver.graph_create() }.map_err(err("cuGraphCreate (host node)"))?;
    s.template = graph;
    let r = (|| {
        let flag = unsafe { driver.host_flag(graph, ctx) }
            .map_err(err("cuMemHostAlloc / cuUserObjectCreate (host node flag)"))?;
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST);
        p.__bindgen_anon_1.host.fn_ = Some(run_queued);
        p.__bindgen_anon_1.host.userData = s.id as *mut c_void;
        let host = unsafe { driver.add_node(graph, &[], &[], &mut p) }
            .map_err(err("cuGraphAddNode_v2 (host function)"))?;
        let Some(crate::raw::HostFlag(flag)) = flag else {
            return Ok(());
        };
        // SAFETY: all-zero is a valid value of this union of plain integers.
        let mut op: CUstreamBatchMemOpParams = unsafe { core::mem::zeroed() };
        op.waitValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
        op.waitValue.address = flag.device;
        op.waitValue.__bindgen_anon_1.value = 1;
        op.waitValue.flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32;
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
        p.__bindgen_anon_1.memOp =
            CUDA_BATCH_MEM_OP_NODE_PARAMS_v2 { ctx, count: 1, paramArray: &mut op, flags: 0 };
        unsafe { driver.add_node(graph, &[host], &[], &mut p) }
            .map_err(err("cuGraphAddNode_v2 (batch mem op: wait for the host closure)"))?;
        with_queues(|q| q.entry(s.id).or_default().flag = Some(flag));
        Ok(())
    })();
    if r.is_err() {
        Host::added(s, driver);
    }
    r
}

/// The host function node kind.
pub(crate) struct Host;

impl NodeKind for Host {
    type Params<'a> = &'a dyn HostWork;
    type State = HostState;
    const ADD: &'static str = "cuGraphAddNode_v2 (child graph: host function, wait)";
    const SET: &'static str = "cuGraphExecNodeSetParams (child graph: host function, wait)";
    const EAGER: &'static str = "cuLaunchHostFunc / cuStreamWaitValue32_v2";
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
        HostState { id, template: core::ptr::null_mut() }
    }

    unsafe fn setup(
        s: &mut HostState,
        driver: &mut impl crate::raw::Driver,
        ctx: CUcontext,
    ) -> Result<(), CudaError> {
        // SAFETY: the trait's contract: `ctx` is current.
        unsafe { template(s, driver, ctx) }
    }

    /// The driver copied the template into the graph (with a reference to the flag's user
    /// object): destroyed now.
    fn added(s: &mut HostState, driver: &mut impl crate::raw::Driver) {
        if !s.template.is_null() {
            // SAFETY: the template is this state's and used by nothing else.
            unsafe { driver.graph_destroy(s.template) };
            s.template = core::ptr::null_mut();
        }
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
        // The driver copies the template (and a reference to its flag's user object).
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH);
        p.__bindgen_anon_1.graph.graph = s.template;
        f(&mut p)
    }

    /// After a whole-exec update the exec runs the new graph's callbacks, whose numbers are the
    /// new states': nothing to carry.
    fn launching(
        s: &mut HostState,
        h: &&dyn HostWork,
        reports: &Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let queued = Queued::take(h, reports, site)?;
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
        let node = |call, error| Error::Node { site: site(), source: CudaError { call, error } };
        let queued = Queued::take(h, reports, site)?;
        let s = stream.cu_stream();
        // SAFETY: the stream's context is current.
        let flag = unsafe { flags::take(stream.context().cu_ctx()) }
            .map_err(|e| node("cuMemHostAlloc (host node flags)", e))?;
        let gate = Arc::new(handoff::Gate::default());
        let eager = Box::into_raw(Box::new(Eager { queued, flag, gate: gate.clone() }));
        // SAFETY: the stream is alive and its context current; `run_once` takes ownership of
        // `eager` when the driver calls it (exactly once, after the stream's earlier work).
        if let Err(e) = unsafe { raw::launch_host_func(s, run_once, eager.cast()) } {
            // SAFETY: the driver refused the callback: it will never run, the job is still ours.
            drop(unsafe { Box::from_raw(eager) });
            flags::give(flag);
            return Err(node("cuLaunchHostFunc", e));
        }
        // SAFETY: the flag lives for the process; it is returned by the host function after
        // the wait, once the device no longer reads it.
        // After a refusal here (a broken context), the flag is never returned (a few bytes):
        // the worker still writes it. The callback is enqueued: the closure must never run, or
        // have ended, before the call returns and its borrows end (review 33c).
        if let Err(e) = unsafe { raw::stream_wait_value32(s, flag.device, 1) } {
            gate.give_up();
            return Err(node("cuStreamWaitValue32_v2", e));
        }
        unsafe { raw::launch_host_func(s, flags::give_back, flags::as_user(flag)) }
            .map_err(|e| node("cuLaunchHostFunc (returning the host node's flag)", e))
    }
}

/// Review 12b: the thread's call reports as a raw pointer (`with_call_reports`/`call_reports`),
/// and `Reports`' flag read before locking.
#[cfg(test)]
mod review12b_tests {
    use super::{Reports, call_reports, with_call_reports};
    use crate::Error;
    use crate::error::NodeSite;
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Barrier, mpsc};

    fn site(line: u32) -> NodeSite {
        NodeSite { label: "host", text: "review12b", file: file!(), line, column: 1 }
    }

    fn taken_line(r: &Reports) -> Option<u32> {
        match r.take() {
            Some(Error::HostFunction { site, .. }) => Some(site.line),
            Some(other) => panic!("unexpected {other:?}"),
            None => None,
        }
    }

    /// [`with_call_reports`] on an `Arc` the caller holds.
    fn scoped<R>(r: &Arc<Reports>, f: impl FnOnce() -> R) -> R {
        // SAFETY: `r` is borrowed, so its `Arc` is alive until this returns.
        unsafe { with_call_reports(Arc::as_ptr(r), f) }
    }

    /// The `Arc` handed out inside the scope is a real strong reference (the count goes up and
    /// back down, the `Arc` outlives the scope and the caller's `Arc`), nested scopes restore
    /// the outer pointer, an unwinding scope restores it, and another thread sees none.
    #[test]
    fn call_reports_is_a_counted_clone_and_scopes_restore_also_on_unwind() {
        assert!(call_reports().is_none());
        let outer = Arc::new(Reports::default());
        let inner = Arc::new(Reports::default());
        let kept = scoped(&outer, || {
            let a = call_reports().expect("set");
            assert!(Arc::ptr_eq(&a, &outer));
            assert_eq!(Arc::strong_count(&outer), 2);
            scoped(&inner, || {
                assert!(Arc::ptr_eq(&call_reports().unwrap(), &inner));
            });
            assert!(Arc::ptr_eq(&call_reports().unwrap(), &outer), "outer restored");
            // An unwinding inner scope restores the outer pointer too.
            let inner2 = Arc::new(Reports::default());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                scoped(&inner2, || panic!("on purpose"))
            }));
            assert!(r.is_err());
            drop(inner2);
            assert!(Arc::ptr_eq(&call_reports().unwrap(), &outer), "restored on unwind");
            // Another thread has no call reports.
            std::thread::scope(|s| s.spawn(|| assert!(call_reports().is_none())).join()).unwrap();
            a
        });
        assert!(call_reports().is_none(), "cleared after the scope");
        assert_eq!(Arc::strong_count(&outer), 2, "the handed-out clone counts");
        drop(outer);
        assert_eq!(Arc::strong_count(&kept), 1, "the clone alone keeps the reports");
        kept.push(site(7), "after".into());
        assert_eq!(taken_line(&kept), Some(7));
        assert_eq!(Arc::strong_count(&inner), 1, "no count leaked by the inner scope");
    }

    /// A push that happened before a take (joined thread, channel) is returned by it, once.
    #[test]
    fn a_push_on_another_thread_is_taken_once() {
        let r = Arc::new(Reports::default());
        for i in 0..2000u32 {
            let r2 = r.clone();
            std::thread::spawn(move || r2.push(site(i), "p".into())).join().unwrap();
            assert_eq!(taken_line(&r), Some(i), "round {i}: lost");
            assert_eq!(taken_line(&r), None, "round {i}: returned twice");
        }
        // Ping-pong with a long-lived thread (happens-before through the channel alone).
        let (tx, rx) = mpsc::channel::<u32>();
        let (back, done) = mpsc::channel::<()>();
        let r2 = r.clone();
        let t = std::thread::spawn(move || {
            for i in rx {
                r2.push(site(i), "p".into());
                back.send(()).unwrap();
            }
        });
        for i in 0..20_000u32 {
            tx.send(i).unwrap();
            done.recv().unwrap();
            assert_eq!(taken_line(&r), Some(i), "ping-pong round {i}: lost");
            assert_eq!(taken_line(&r), None, "ping-pong round {i}: twice");
        }
        drop(tx);
        t.join().unwrap();
    }

    /// Pushers racing a taker: no report is returned twice, and once all are done the flag is
    /// set exactly when the list holds something (a report left is never hidden behind a clear
    /// flag), so the next take returns it, and the one after nothing.
    #[test]
    fn racing_pushes_and_takes_leave_the_flag_consistent() {
        for round in 0..200u32 {
            let r = Arc::new(Reports::default());
            let go = Arc::new(Barrier::new(4));
            let seen = std::thread::scope(|s| {
                for t in 0..3u32 {
                    let (r, go) = (r.clone(), go.clone());
                    s.spawn(move || {
                        go.wait();
                        for i in 0..200 {
                            r.push(site(t * 1000 + i), "p".into());
                        }
                    });
                }
                let (r, go) = (r.clone(), go.clone());
                s.spawn(move || {
                    go.wait();
                    let mut seen = Vec::new();
                    for _ in 0..400 {
                        if let Some(l) = taken_line(&r) {
                            seen.push(l);
                        }
                    }
                    seen
                })
                .join()
                .unwrap()
            });
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), seen.len(), "round {round}: a report returned twice");
            let left = !r.panics.lock().unwrap().is_empty();
            assert_eq!(r.any.load(Ordering::SeqCst), left, "round {round}: flag vs list");
            assert_eq!(taken_line(&r).is_some(), left, "round {round}");
            assert_eq!(taken_line(&r), None, "round {round}: after the final take");
        }
    }
}
