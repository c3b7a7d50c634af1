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
//! The closure must not call CUDA (the driver forbids it in host nodes and may deadlock).

use core::cell::Cell;
use core::ffi::c_void;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{CUcontext, CUgraphNodeParams, CUgraphNodeType};

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
        let Some(job) = h.take_job() else {
            let why = "the statement's closure was already taken by an earlier launch".into();
            return Err(Error::InvalidNode { site: site(), why });
        };
        Ok(Queued { job, site: site(), reports: reports.clone() })
    }

    fn run(self) {
        let Queued { job, site, reports } = self;
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            reports.push(site, message);
            // The payload's own drop may panic too, which must not unwind into the driver
            // either: dropped inside `catch_unwind`, and a second payload is leaked.
            if let Err(again) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(panic)))
            {
                core::mem::forget(again);
            }
        }
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

/// The callback of every host node: takes the node's next job and runs it.
unsafe extern "C" fn run_queued(user: *mut c_void) {
    let id = user as u64;
    let job = with_queues(|q| {
        let queue = q.get_mut(&id)?;
        let job = queue.jobs.pop_front();
        if queue.orphan && queue.jobs.is_empty() {
            q.remove(&id);
        }
        job
    });
    // A launch always queues its job first; none here would be a bug of this module. Nothing
    // may unwind into the driver, so it is not a panic.
    if let Some(job) = job {
        job.run();
    }
}

/// The callback of an eager host statement (`cuLaunchHostFunc`): owns its job.
unsafe extern "C" fn run_once(user: *mut c_void) {
    // SAFETY: `user` is the `Box<Queued>` that `eager` leaked for this one callback.
    let queued = unsafe { Box::from_raw(user.cast::<Queued>()) };
    queued.run();
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
        let queued = Box::into_raw(Box::new(Queued::take(h, reports, site)?));
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
