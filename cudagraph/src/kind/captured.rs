//! Captured nodes: the stream work of a `capture(&a, &mut b, |s, (a, b)| { … })` statement of
//! `graph!`, recorded by stream capture into a graph that becomes a child-graph node
//! (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_GRAPH`).
//!
//! When it is recorded: on every graph call, before anything is enqueued ([`NodeKind::prepare`]).
//! The closure's work depends on values the graph cannot see (a cuBLAS handle's settings, scalars
//! it captured, which function it calls), so replaying an older recording could be stale; a
//! recording needs no GPU work, only host time. The new recording is sent to the exec with
//! `cuGraphExecNodeSetParams` (the child graph's parameters updated in place, which the driver
//! accepts when the recording has the same topology); a recording of another topology is refused
//! there and the ladder falls to a whole-exec update or a new instantiation. In
//! [`Mode::Eager`](crate::Mode::Eager) the closure runs directly on the stream, not captured.

use core::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUgraph, CUgraphNodeParams, CUgraphNodeType};
use cudarc::driver::{CudaFunction, CudaStream, DriverError};

use super::NodeKind;
use crate::error::{CudaError, Error, NodeSite};
use crate::operand::{Accesses, DevRead, DevWrite, sealed};
use crate::raw;
use crate::session::imp::{Alias, Listed};
use crate::session::{
    Capture, CaptureOrigin, CaptureSlice, CaptureSliceMut, next_capture_id, order_streams,
    origin_stream,
};

/// A `CUgraph` this crate owns (destroyed on drop): one recording of a captured statement.
#[doc(hidden)]
pub struct OwnedGraph {
    raw: CUgraph,
    ctx: Arc<cudarc::driver::CudaContext>,
    /// The functions of the recording's explicit kernel nodes: their modules stay loaded while
    /// the recording (and so the cache's node that holds it) exists. Dropped after the graph.
    #[allow(dead_code)] // held for its drop only
    functions: Vec<CudaFunction>,
}

// SAFETY: the graph is only read (as the child graph of a node being added or set, which the
// driver copies) while the cache, which is not `Sync`, holds it behind `&mut self`.
unsafe impl Send for OwnedGraph {}
unsafe impl Sync for OwnedGraph {}

impl Drop for OwnedGraph {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: made by a capture of this crate, owned here, used by nothing after this.
        self.ctx.record_err(unsafe { raw::graph_destroy(self.raw) });
    }
}

/// One operand of a `capture` statement: a `&place` ([`DevRead`], the closure gets a
/// `CaptureSlice`) or `&mut place` ([`DevWrite`], a `CaptureSliceMut`) handle. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an operand of `capture`",
    label = "not `&buffer` or `&mut buffer` of device memory",
    note = "`capture` operands are device buffers marked `&` (read) or `&mut` (written)"
)]
pub trait CaptureOperand: sealed::Sealed {
    /// The element type.
    type Elem: 'static;
    /// What the closure gets for it.
    type View<'s>;
    /// `(pointer, length, context, tag, written)`.
    #[doc(hidden)]
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool);
    /// The stream the buffer was allocated on (set by `graph!`).
    #[doc(hidden)]
    fn own(&self) -> Option<&CudaStream>;
    /// The closure's view of the operand's alias.
    #[doc(hidden)]
    fn view<'s>(alias: &'s mut Alias<Self::Elem>, cap: &'s Capture) -> Self::View<'s>;
}

impl<T: 'static> CaptureOperand for DevRead<'_, T> {
    type Elem = T;
    type View<'s> = CaptureSlice<'s, T>;
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool) {
        (self.ptr, self.len, self.ctx, self.tag, false)
    }
    fn own(&self) -> Option<&CudaStream> {
        self.own
    }
    fn view<'s>(alias: &'s mut Alias<T>, cap: &'s Capture) -> CaptureSlice<'s, T> {
        alias.view(cap)
    }
}

impl<T: 'static> CaptureOperand for DevWrite<'_, T> {
    type Elem = T;
    type View<'s> = CaptureSliceMut<'s, T>;
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool) {
        (self.ptr, self.len, self.ctx, self.tag, true)
    }
    fn own(&self) -> Option<&CudaStream> {
        self.own
    }
    fn view<'s>(alias: &'s mut Alias<T>, cap: &'s Capture) -> CaptureSliceMut<'s, T> {
        alias.view_mut(cap)
    }
}

/// The operands of a `capture` statement: a tuple of 1 to 6 [`CaptureOperand`]s. Sealed.
pub trait CaptureOperands: sealed::Sealed {
    /// The closure's views, in order.
    type Views<'s>;
    /// One alias per operand.
    #[doc(hidden)]
    type Aliases;
    /// Each operand's `(tag, written, context)` into `out`; returns how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// The own stream of each operand of another context than `ctx` (`None` for such an
    /// operand without one), into `out`.
    #[doc(hidden)]
    fn foreign<'x>(&'x self, ctx: CUcontext, out: &mut Vec<Option<&'x CudaStream>>);
    /// One alias per operand, over its memory: on `stream` for an operand of its context, else
    /// on the stream of `helpers` of the operand's context.
    ///
    /// # Safety
    /// The handles' memory stays borrowed (allocated) while the aliases live, and is of
    /// `stream`'s context or of the context of a stream in `helpers`.
    #[doc(hidden)]
    unsafe fn aliases(
        &self,
        stream: &Arc<CudaStream>,
        helpers: &[Arc<CudaStream>],
    ) -> Self::Aliases;
    /// The closure's views of the aliases.
    #[doc(hidden)]
    fn views<'s>(aliases: &'s mut Self::Aliases, cap: &'s Capture) -> Self::Views<'s>;
    /// What the [`Capture`] knows of each operand, from its alias.
    #[doc(hidden)]
    fn listed(&self, aliases: &mut Self::Aliases, stream: &CudaStream) -> Vec<Listed>;
}

macro_rules! capture_operands {
    ($($o:ident $i:tt),*) => {
        impl<$($o: CaptureOperand),*> sealed::Sealed for ($($o,)*) {}
        impl<$($o: CaptureOperand),*> CaptureOperands for ($($o,)*) {
            type Views<'s> = ($($o::View<'s>,)*);
            type Aliases = ($(Alias<$o::Elem>,)*);
            fn accesses(&self, out: &mut Accesses) -> usize {
                let mut n = 0;
                $(let (_, _, ctx, tag, write) = self.$i.parts();
                out[n] = (tag, write, ctx);
                n += 1;)*
                n
            }
            fn foreign<'x>(&'x self, ctx: CUcontext, out: &mut Vec<Option<&'x CudaStream>>) {
                $(if self.$i.parts().2 != ctx {
                    out.push(self.$i.own());
                })*
            }
            unsafe fn aliases(
                &self,
                stream: &Arc<CudaStream>,
                helpers: &[Arc<CudaStream>],
            ) -> Self::Aliases {
                // SAFETY: the caller's contract, operand by operand.
                ($({
                    let (ptr, len, ctx, ..) = self.$i.parts();
                    let on =
                        helpers.iter().find(|h| h.context().cu_ctx() == ctx).unwrap_or(stream);
                    unsafe { Alias::new(on, ptr, len) }
                },)*)
            }
            fn views<'s>(aliases: &'s mut Self::Aliases, cap: &'s Capture) -> Self::Views<'s> {
                ($($o::view(&mut aliases.$i, cap),)*)
            }
            fn listed(&self, aliases: &mut Self::Aliases, stream: &CudaStream) -> Vec<Listed> {
                vec![$(aliases.$i.listed(stream, self.$i.parts().4)),*]
            }
        }
    };
}
capture_operands!(A 0);
capture_operands!(A 0, B 1);
capture_operands!(A 0, B 1, C 2);
capture_operands!(A 0, B 1, C 2, D 3);
capture_operands!(A 0, B 1, C 2, D 3, E 4);
capture_operands!(A 0, B 1, C 2, D 3, E 4, F 5);

/// Object-safe view of a `capture` statement's value, used by the cache (sealed).
pub trait CapturedWork: sealed::Sealed {
    /// Each operand's `(tag, written, context)` into `out`; returns how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// Runs the closure under stream capture and keeps the recording, or the error.
    ///
    /// # Safety
    /// Called by the cache only, while the operands' borrows and guards last and before the
    /// call's launch orders the recording's work with them.
    #[doc(hidden)]
    unsafe fn record(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error>;
    /// The last recording.
    #[doc(hidden)]
    fn recorded(&self) -> Option<Arc<OwnedGraph>>;
    /// Runs the closure directly on the stream (not captured).
    ///
    /// # Safety
    /// Called by the cache only, while the operands' guards last (their events are recorded
    /// after the work this enqueues).
    #[doc(hidden)]
    unsafe fn run_eager(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error>;
}

/// What a `capture(&a, &mut b, |s, (a, b)| …)` statement of `graph!` evaluates to: the graph
/// call's stream, the operands' handles (borrowing the buffers for the call) and the closure,
/// run once per call. Made only by `graph!`.
pub struct CaptureParams<'a, H, F> {
    stream: &'a Arc<CudaStream>,
    handles: H,
    f: Cell<Option<F>>,
    recorded: RefCell<Option<Arc<OwnedGraph>>>,
}

impl<'a, H: CaptureOperands, F> CaptureParams<'a, H, F> {
    pub(crate) fn new(stream: &'a Arc<CudaStream>, handles: H, f: F) -> Self {
        CaptureParams { stream, handles, f: Cell::new(Some(f)), recorded: RefCell::new(None) }
    }

    /// Runs `f` on aliases of the operands: capturing on `origin` (this thread's private
    /// stream, whose capture has begun), or eagerly on the call's stream when `origin` is
    /// `None`. Returns the closure's result, or the panic; the driver error that made the
    /// recording unusable (an explicit node of [`Capture::kernel`] whose successors could not
    /// be set), if any; whether the closure joined the call's stream into the capture
    /// ([`Capture::stream`]); and the functions of its explicit kernel nodes.
    ///
    /// Operands of other devices (`helpers`: the thread's stream of each of their contexts)
    /// have their aliases on those streams, which first join the capture (eagerly: wait for
    /// the stream's work so far) and are joined back after the aliases were dropped (whose
    /// `leak` makes them wait for the views' last uses on any stream of their device).
    #[allow(clippy::type_complexity)]
    fn call<E>(
        &self,
        f: F,
        origin: Option<&CaptureOrigin>,
        helpers: &[CaptureOrigin],
    ) -> (std::thread::Result<Result<(), E>>, Option<CudaError>, bool, Vec<CudaFunction>)
    where
        F: for<'s> FnOnce(&'s Capture, H::Views<'s>) -> Result<(), E>,
    {
        let work: &Arc<CudaStream> = origin.map_or(self.stream, |o| o.stream());
        let mut forked = None;
        if let Some(here) = helpers.first().map(|_| origin_stream(work.context())) {
            let fork = |here: &CaptureOrigin| {
                helpers.iter().try_for_each(|h| order_streams(work, here.fork_event(), h.stream()))
            };
            if let Err(error) = here.and_then(|here| fork(&here)) {
                forked = Some(CudaError { call: Self::FORK, error });
            }
            let _ = work.context().bind_to_thread();
        }
        // SAFETY: the handles borrow their buffers for the whole graph call, which outlives
        // the aliases (dropped below); `validate` and `helpers` made sure that each is of the
        // stream's context or of a helper's. An alias is never freed (its drop leaks it), and
        // the closure gets only views of it, for a lifetime it must accept for any `'s`: they
        // cannot escape the closure.
        let streams: Vec<Arc<CudaStream>> = helpers.iter().map(|h| h.stream().clone()).collect();
        let mut aliases = unsafe { self.handles.aliases(work, &streams) };
        let listed = self.handles.listed(&mut aliases, work);
        let on: Vec<sys::CUstream> = streams.iter().map(|h| h.cu_stream()).collect();
        let (id, capturing) = (next_capture_id(), origin.is_some());
        let cap = Capture::new(work.clone(), self.stream.clone(), capturing, listed, id, &on);
        let result = catch_unwind(AssertUnwindSafe(|| f(&cap, H::views(&mut aliases, &cap))));
        let broken = cap.broken();
        let joined = cap.joined_user();
        let functions = cap.take_functions();
        drop(cap);
        // Still capturing when `capturing`, so their `leak` waits only on events recorded
        // inside this capture.
        drop(aliases);
        let mut back = None;
        for h in helpers {
            if let Err(error) = order_streams(h.stream(), h.join_event(), work) {
                back.get_or_insert(CudaError { call: Self::JOIN, error });
            }
        }
        if !helpers.is_empty() {
            let _ = work.context().bind_to_thread();
        }
        (result, broken.or(forked).or(back), joined, functions)
    }

    const FORK: &'static str =
        "cuEventRecord / cuStreamWaitEvent (another device's stream into the capture)";
    const JOIN: &'static str =
        "cuEventRecord / cuStreamWaitEvent (another device's stream back from the capture)";

    /// The thread's stream of each other context (device) of the operands, once per context
    /// (made on the operand's own context object the first time: `ctx.new_stream()`). Refused
    /// ([`Error::WrongContext`]) for an operand of another context without an own stream (not
    /// made by `graph!`), and ([`Error::Node`]) unless cudarc manages stream synchronization
    /// for that context object, as for the call's stream (see `require_tracking`).
    fn helpers(&self, site: &dyn Fn() -> NodeSite) -> Result<Vec<CaptureOrigin>, Error> {
        let mut owns = Vec::new();
        self.handles.foreign(self.stream.context().cu_ctx(), &mut owns);
        let mut helpers: Vec<CaptureOrigin> = Vec::new();
        for own in owns {
            let Some(own) = own else { return Err(Error::WrongContext { site: site() }) };
            let ctx = own.context();
            if helpers.iter().any(|h| h.stream().context().cu_ctx() == ctx.cu_ctx()) {
                continue;
            }
            let err = |call, error| Error::Node { site: site(), source: CudaError { call, error } };
            let h = crate::session::idle_origin(ctx).map_err(|e| {
                err("cuStreamCreate / cuStreamIsCapturing (another device's helper stream)", e)
            })?;
            crate::session::require_tracking(h.stream())
                .map_err(|why| err(why, DriverError(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED)))?;
            helpers.push(h);
        }
        Ok(helpers)
    }

    /// The closure, taken: each statement value runs it once (the cache records or runs it
    /// once per call); a second run is an error rather than an empty recording.
    fn take(&self, site: &dyn Fn() -> NodeSite) -> Result<F, Error> {
        self.f.take().ok_or_else(|| {
            let at = site();
            let source = "the closure of this capture statement already ran in this call".into();
            Error::Capture { file: at.file, line: at.line, source }
        })
    }
}

impl<H, F, E> CapturedWork for CaptureParams<'_, H, F>
where
    H: CaptureOperands,
    F: for<'s> FnOnce(&'s Capture, H::Views<'s>) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn accesses(&self, out: &mut Accesses) -> usize {
        self.handles.accesses(out)
    }

    unsafe fn record(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error> {
        let at = site();
        let graph_err =
            |call, error| Error::Node { site: site(), source: CudaError { call, error } };
        // SAFETY: the stream is alive (borrowed by the call) and its context current (bound by
        // `run_call`).
        unsafe { crate::session::can_capture(self.stream) }
            .map_err(|(call, e)| graph_err(call, e))?;
        let helpers = self.helpers(site)?;
        let f = self.take(site)?;
        let origin = crate::session::idle_origin(self.stream.context()).map_err(|e| {
            graph_err("cuStreamCreate / cuStreamIsCapturing (capture origin; a capture inside another capture's closure on this thread is refused)", e)
        })?;
        // SAFETY: the origin is this thread's own, alive and not capturing; its context is the
        // stream's, current.
        unsafe { crate::session::begin_origin(&origin) }
            .map_err(|e| graph_err("cuStreamBeginCapture", e))?;
        let (result, broken, joined, functions) = self.call(f, Some(&origin), &helpers);
        let ctx = self.stream.context();
        let _ = ctx.bind_to_thread();
        // SAFETY: this thread began the capture on `origin` (and the closure joined the stream
        // when `joined`), both alive; it ends whatever the closure did.
        let end = unsafe { crate::session::end_origin(&origin, joined.then_some(&**self.stream)) };
        let end = end.map(|raw| OwnedGraph { raw, ctx: ctx.clone(), functions });
        let (file, line) = (at.file, at.line);
        if end.is_err() {
            // An invalidated capture: work the closure enqueued on another stream may still be
            // queued on the buffers; it must finish before their borrows end.
            let _ = ctx.synchronize();
        }

        match result {
            Err(panic) => {
                drop(end);
                resume_unwind(panic)
            }
            Ok(Err(e)) => {
                let source = e.into();
                Err(match end {
                    Ok(_) => Error::Capture { file, line, source },
                    Err(error) => {
                        let source = CudaError { call: "cuStreamEndCapture", error };
                        Error::CaptureInvalidated { file, line, source }
                    }
                })
            }
            Ok(Ok(())) => match (end, broken) {
                // An explicit node whose successors could not be set: unusable.
                (Ok(_), Some(source)) => Err(Error::CaptureInvalidated { file, line, source }),
                (Ok(graph), None) => {
                    if let Err(why) = crate::session::check_recording(graph.raw) {
                        let error = DriverError(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED);
                        return Err(graph_err(why, error));
                    }
                    *self.recorded.borrow_mut() = Some(Arc::new(graph));
                    Ok(())
                }
                (Err(error), _) => {
                    let source = CudaError { call: "cuStreamEndCapture", error };
                    Err(Error::CaptureInvalidated { file, line, source })
                }
            },
        }
    }

    fn recorded(&self) -> Option<Arc<OwnedGraph>> {
        self.recorded.borrow().clone()
    }

    unsafe fn run_eager(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error> {
        crate::session::require_tracking(self.stream).map_err(|why| {
            let error = DriverError(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED);
            Error::Node { site: site(), source: CudaError { call: why, error } }
        })?;
        let helpers = self.helpers(site)?;
        let f = self.take(site)?;
        match self.call(f, None, &helpers) {
            (Err(panic), ..) => resume_unwind(panic),
            (Ok(Err(e)), ..) => {
                let at = site();
                Err(Error::Capture { file: at.file, line: at.line, source: e.into() })
            }
            (Ok(Ok(())), Some(source), ..) => Err(Error::Node { site: site(), source }),
            (Ok(Ok(())), None, ..) => Ok(()),
        }
    }
}

/// The captured node kind: a child-graph node holding one recording.
pub(crate) struct Captured;

/// A captured node's last recording.
pub(crate) struct ChildState {
    graph: Option<Arc<OwnedGraph>>,
}

impl NodeKind for Captured {
    type Params<'a> = &'a dyn CapturedWork;
    type State = ChildState;
    const ADD: &'static str = "cuGraphAddNode_v2 (child graph of the captured work; a child graph \
                               cannot hold memory allocation nodes: a library that allocates while \
                               captured, such as cuBLAS without cublasSetWorkspace, cannot be a \
                               captured statement)";
    const SET: &'static str = "cuGraphExecNodeSetParams (child graph)";
    const EAGER: &'static str = "captured work, run eagerly";

    fn validate(
        _: &&dyn CapturedWork,
        _: Option<&super::Limits>,
        _: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Ok(())
    }

    /// Captured work may use buffers of any context (collectives and send/recv of NCCL over
    /// the devices of the host, on streams of their devices).
    fn contexts_ok(_: &&dyn CapturedWork, _: CUcontext, _: &[(u64, bool, CUcontext)]) -> bool {
        true
    }

    /// The closure may use buffers it did not list.
    fn unlisted_work(_: &&dyn CapturedWork) -> bool {
        true
    }

    fn prepare(p: &&dyn CapturedWork, site: &dyn Fn() -> NodeSite) -> Result<bool, Error> {
        // SAFETY: the cache's prepare step, inside the call, before its launch.
        unsafe { p.record(site) }.map(|()| true)
    }

    fn accesses(p: &&dyn CapturedWork, out: &mut Accesses) -> usize {
        p.accesses(out)
    }

    fn state(p: &&dyn CapturedWork) -> ChildState {
        ChildState { graph: p.recorded() }
    }

    /// A new recording every call: always changed.
    fn record(s: &mut ChildState, p: &&dyn CapturedWork) -> bool {
        s.graph = p.recorded();
        true
    }

    fn with_params<R>(
        s: &mut ChildState,
        _ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH);
        // A null graph (no recording: never, since `prepare` records first) is refused by the
        // driver with an error, not used.
        p.__bindgen_anon_1.graph.graph = s.graph.as_ref().map_or(core::ptr::null_mut(), |g| g.raw);
        f(&mut p)
    }

    unsafe fn eager(
        p: &&dyn CapturedWork,
        _: &CudaStream,
        _: &std::sync::Arc<super::Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        // SAFETY: the cache's eager run, inside the call, guards alive.
        unsafe { p.run_eager(site) }
    }
}
