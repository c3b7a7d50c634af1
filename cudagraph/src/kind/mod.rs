//! Node kinds: one module per kind of graph node, each behind [`NodeKind`].
//!
//! A kind says everything the rest of the runtime needs of its nodes: the parameters a call
//! gives ([`NodeKind::Params`]), what an exec keeps of a node between calls
//! ([`NodeKind::State`]), how the node is validated before any driver call, which buffers it
//! touches, how it is added to a `CUgraph` and updated in an exec (both through the driver's
//! generic `cuGraphAddNode_v2` / `cuGraphExecNodeSetParams` with a `CUgraphNodeParams`), when
//! the driver allows that update, and how it runs eagerly. The cache ([`crate::cache`]) and the
//! update ladder loop over nodes through [`NodeParams`] and [`NodeState`], which [`node_kinds!`]
//! generates from the list at the bottom of this file; they never match on kinds.
//!
//! Adding a kind: a new module here implementing [`NodeKind`], one line in that list, and its
//! [`NodeKind`](crate::plan::NodeKind) entry in the plan (for the static plan and DOT).

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{
    CUcontext, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUgraphNodeParams,
};

use std::sync::{Arc, Mutex};

use crate::error::{CudaError, Error, NodeSite};
use crate::operand::Accesses;
use crate::raw::Driver;

pub(crate) mod alloc;
pub(crate) mod captured;
pub(crate) mod child;
pub(crate) mod conditional;
pub(crate) mod empty;
pub(crate) mod event;
pub(crate) mod fill;
pub(crate) mod handoff;
pub(crate) mod host;
pub(crate) mod kernel;
pub(crate) mod list;
pub(crate) mod memcpy;
pub(crate) mod memset;
pub(crate) mod own_kernel;
pub(crate) mod pitched;
pub(crate) mod readback;

pub use alloc::{AllocParams, FreeParams, GraphMemUsage, MAX_ALLOC_BYTES, Scratch, ScratchElem};
pub use captured::{
    CaptureKey, CaptureOperand, CaptureOperands, CaptureParams, CapturedWork, Keyed, KeyedFn,
};
pub use child::{GraphRef, NoGraphRead};
pub use conditional::{Condition, ConditionalParams, ConditionalType};
pub use empty::{EmptyParams, empty};
pub use event::{EventParams, EventRecordParams, EventWaitParams, event_record, event_wait};
pub use fill::{FillNode, MAX_FILL_BYTES};
pub use host::{HostOperand, HostOperands, HostParams, HostWork};
pub(crate) use kernel::Limits;
pub use kernel::{
    CallWords, KernelArgs, KernelCall, KernelFn, KernelLaunch, KernelNode, LaunchCfg, LaunchDims,
    LaunchNode,
};
pub use memcpy::{CopyTo, MemcpyParams, Memory, copy};
pub use memset::{MemsetParams, MemsetValue, MemsetValueOf, memset, zero};
pub use pitched::{Copy2dParams, Memset2dParams, Rows, copy_2d, memset_2d};
pub use readback::{MAX_READBACK_BYTES, ReadbackNode};

/// What one node kind needs to say about its nodes. Implemented by a unit type per kind.
pub(crate) trait NodeKind {
    /// The parameters a call gives for one node; they borrow the node's buffers (`'a`).
    type Params<'a>: Copy;
    /// What an exec keeps of a node between calls: its last parameters, laid out so the driver
    /// can read them.
    type State;
    /// The driver calls behind adding, updating and running a node eagerly, named in errors.
    const ADD: &'static str;
    const SET: &'static str;
    const EAGER: &'static str;

    /// Checks what the driver would refuse or get wrong, before any driver call of the call.
    /// `limits`: the device's launch limits.
    fn validate(
        p: &Self::Params<'_>,
        limits: Option<&Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error>;
    /// Each buffer operand's `(tag, written, context)` into `out`; returns how many.
    fn accesses(p: &Self::Params<'_>, out: &mut Accesses) -> usize;
    /// The context the node's work runs on when it is not the call's stream's (a kernel of a
    /// `kernels!` struct loaded in another context: another device); `None` for the call's.
    fn context(_p: &Self::Params<'_>) -> Option<CUcontext> {
        None
    }
    /// Whether the node's buffer operands `ops` (from [`Self::accesses`]) may be of their
    /// contexts, in a call on a stream of context `call`. By default every buffer is of the
    /// context the node runs on ([`Self::context`], else `call`): a device has no node reading
    /// another device's memory. Copies between device buffers may cross devices (peer copies),
    /// and captured work may use buffers of any device.
    fn contexts_ok(p: &Self::Params<'_>, call: CUcontext, ops: &[(u64, bool, CUcontext)]) -> bool {
        let on = Self::context(p).unwrap_or(call);
        ops.iter().all(|o| o.2 == on)
    }
    /// A copy between device buffers of two different contexts: `(source, destination)`, the
    /// pair whose peer access the cache enables (`cuCtxEnablePeerAccess`, both ways) before the
    /// first graph or eager call that has it.
    fn peer(_p: &Self::Params<'_>) -> Option<(CUcontext, CUcontext)> {
        None
    }
    /// The state of a node made from `p`.
    fn state(p: &Self::Params<'_>) -> Self::State;
    /// Records `p` in `state`; returns whether anything the exec holds changed.
    fn record(state: &mut Self::State, p: &Self::Params<'_>) -> bool;
    /// The driver's rule for a per-node update: `false` when the driver would refuse
    /// `cuGraphExecNodeSetParams` from `old` to `new` (measured on the H200, see DESIGN.md), so
    /// the ladder goes straight to a whole-exec update. Called before [`Self::record`].
    fn settable(_old: &Self::State, _new: &Self::Params<'_>) -> bool {
        true
    }
    /// `Some(programmatic)` for a kernel node (whether its kernel is declared
    /// `#[programmatic]`), `None` for every other kind: an edge is programmatic only from a
    /// kernel node into a programmatic kernel's node (see [`EdgeKind`](crate::EdgeKind)).
    fn kernel(_p: &Self::Params<'_>) -> Option<bool> {
        None
    }
    /// Whether an exec's node made from `old` can take `new` in the same graph: `false` when
    /// what the kinds of its edges were made from changed ([`Self::kernel`]), so that the call
    /// needs another graph. Called before [`Self::record`].
    fn same_edges(_old: &Self::State, _new: &Self::Params<'_>) -> bool {
        true
    }
    /// Makes what a new node's driver parameters point to and what needs driver calls of its own
    /// (a host node's template child graph), right before the node is added. `ctx` is current.
    /// A state whose setup failed is dropped without being used.
    ///
    /// # Safety
    /// `ctx` is current and the driver's.
    unsafe fn setup(
        _state: &mut Self::State,
        _driver: &mut impl Driver,
        _ctx: CUcontext,
    ) -> Result<(), CudaError> {
        Ok(())
    }
    /// Right after the node was added (or refused): frees what [`Self::setup`] made for the
    /// add only (the driver copied it).
    fn added(_state: &mut Self::State, _driver: &mut impl Driver) {}
    /// Calls `f` with the driver's view of `state` (`ctx`: the exec's context). Pointers in it
    /// are valid only during `f`.
    fn with_params<R>(
        state: &mut Self::State,
        ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R;
    /// After a whole-exec update, the exec keeps its old graph: what the new state must take
    /// over from the old one for that graph (e.g. the functions it names).
    fn carry(_old: &mut Self::State, _new: &mut Self::State) {}
    /// Whether the node may run work on buffers its statement did not list (a capture closure's
    /// own), which the cache then orders with the context's legacy default stream.
    fn unlisted_work(_p: &Self::Params<'_>) -> bool {
        false
    }
    /// Work done on the host before anything of a graph call is enqueued, after validation:
    /// a captured statement records its stream work here. Returns whether it recorded (counted
    /// in [`Stats::captures`](crate::Stats::captures)). Errors leave nothing enqueued.
    fn prepare(_p: &Self::Params<'_>, _site: &dyn Fn() -> NodeSite) -> Result<bool, Error> {
        Ok(false)
    }
    /// Whether [`Self::launching`] has work: the cache then calls it before each launch.
    const LAUNCH_WORK: bool = false;
    /// Right before the launch of a call, after everything else of the call succeeded: hands
    /// the node its call's work that runs at launch (a host node queues its closure).
    /// `reports` takes what goes wrong asynchronously.
    fn launching(
        _state: &mut Self::State,
        _p: &Self::Params<'_>,
        _reports: &Arc<Reports>,
        _site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Ok(())
    }
    /// The launch after [`Self::launching`] failed: takes that work back, and returns it for
    /// the caller to drop once every node's work was taken back (dropping it runs user code,
    /// which may panic).
    fn unlaunched(_state: &mut Self::State) -> Option<Box<dyn Send>> {
        None
    }
    /// A memory allocation node's `(place slot, address, bytes)` (see [`alloc`]); `None` for
    /// every other kind.
    fn scratch(_state: &Self::State) -> Option<(u32, u64, usize)> {
        None
    }
    /// Bytes of graph memory that the node's child graph allocates and frees inside each launch
    /// (a `capture` statement whose closure allocated while captured); 0 for none. A graph
    /// holding such a node is never updated as a whole (`cuGraphExecUpdate`), as with
    /// [`Self::scratch`] nodes.
    fn recorded_memory(_state: &Self::State) -> u64 {
        0
    }
    /// Whether the node's child graph holds memory nodes (even of 0 bytes): see
    /// [`Self::recorded_memory`].
    fn memory_nodes(_state: &Self::State) -> bool {
        false
    }
    /// Right after an add the driver refused: undoes what [`Self::with_params`] did for that
    /// add only (a recording marked moved into the node stays the crate's).
    fn unadded(_state: &mut Self::State) {}
    /// Runs the node eagerly on `stream` (the oracle of [`Mode::Eager`](crate::Mode::Eager)).
    ///
    /// # Safety
    /// `p` was validated; its buffers stay borrowed until the work completed or was ordered
    /// before any later use (the call's guards).
    unsafe fn eager(
        p: &Self::Params<'_>,
        stream: &CudaStream,
        reports: &Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error>;
}

/// Runs eager `work` of another context (device) than `stream`'s, ordered as though it ran on
/// `stream`: the calling thread's stream of `ctx` (its capture origin, made once with
/// `ctx.new_stream()`) first waits for `stream`'s work so far, `work` runs on it with `ctx`
/// current, then `stream` waits for it (`cuEventRecord` and `cuStreamWaitEvent` each way, with
/// events of each side's context), and `stream`'s context is current again. Two records and two
/// waits per node: the eager oracle of a multi-device call, not its fast path.
pub(crate) fn on_context(
    stream: &CudaStream,
    ctx: &Arc<cudarc::driver::CudaContext>,
    site: &dyn Fn() -> NodeSite,
    work: impl FnOnce(&CudaStream) -> Result<(), Error>,
) -> Result<(), Error> {
    use crate::session::{order_streams, origin_stream};
    let err = |call, error| Error::Node { site: site(), source: CudaError { call, error } };
    let here =
        origin_stream(stream.context()).map_err(|e| err("cuStreamCreate (eager helper)", e))?;
    let there = crate::session::idle_origin(ctx)
        .map_err(|e| err("cuStreamCreate / cuStreamIsCapturing (eager helper)", e))?;
    order_streams(stream, here.fork_event(), there.stream())
        .map_err(|e| err("cuEventRecord / cuStreamWaitEvent (into another device's stream)", e))?;
    let r = work(there.stream());
    // Joined back even after an error: what `work` enqueued stays ordered before `stream`.
    let joined = order_streams(there.stream(), there.join_event(), stream).map_err(|e| {
        err("cuEventRecord / cuStreamWaitEvent (back from another device's stream)", e)
    });
    r.and(joined)
}

/// What goes wrong in nodes that run asynchronously on the host (a panic in a host node's
/// closure), reported by the next call on the cache whose launch or eager call ran them.
#[derive(Default)]
pub(crate) struct Reports {
    panics: Mutex<Vec<(NodeSite, String)>>,
    /// Set (under the lock) when a panic is pushed, cleared when taken: a call with nothing to
    /// take reads one flag instead of locking (a tenth of an unchanged one-kernel call).
    any: core::sync::atomic::AtomicBool,
}

impl Reports {
    /// The first panic reported since the last call, as the error of this call.
    pub(crate) fn take(&self) -> Option<Error> {
        use core::sync::atomic::Ordering;
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut p = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        self.any.store(false, Ordering::Relaxed);
        if p.is_empty() {
            return None;
        }
        let (site, message) = p.remove(0);
        p.clear();
        Some(Error::HostFunction { site, message })
    }

    fn push(&self, site: NodeSite, message: String) {
        let mut p = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        p.push((site, message));
        self.any.store(true, core::sync::atomic::Ordering::Release);
    }
}

/// How [`NodeState::update`] went for one node.
pub(crate) enum Update {
    /// Not in this variant.
    Absent,
    /// Parameters unchanged: nothing sent.
    Unchanged,
    /// Changed, and `cuGraphExecNodeSetParams` accepted.
    Sent,
    /// Changed and recorded, but not sent: an earlier node was not sent (a rebuild follows),
    /// or the driver's rule forbids a per-node update ([`NodeKind::settable`]).
    NotSent,
    /// The driver refused the per-node update.
    Refused(&'static str, cudarc::driver::DriverError),
    /// Not a node of this state's kind (a misused key), or one whose edges would be of other
    /// kinds ([`NodeKind::same_edges`]): the variant must be rebuilt.
    Mismatch,
}

/// [`NodeKind::record`] of a kind whose state is its parameters' plain value: stores `new`,
/// returns whether it differs from what was there.
pub(crate) fn record_value<T: PartialEq>(state: &mut T, new: T) -> bool {
    let changed = *state != new;
    *state = new;
    changed
}

/// A zeroed `CUgraphNodeParams` of node type `t`: the union's fields are then filled in by the
/// kind. (All-zero bytes are valid: `type_` has a zero variant and the rest is a union of
/// plain data and reserved words.)
pub(crate) fn node_params(t: cudarc::driver::sys::CUgraphNodeType) -> CUgraphNodeParams {
    // SAFETY: see above; every field of every union member is an integer, a pointer, or an enum
    // that the kind overwrites before the driver reads it.
    let mut p: CUgraphNodeParams = unsafe { core::mem::zeroed() };
    p.type_ = t;
    p
}

/// Generates [`NodeParams`] (a call's parameters of one node, one variant per kind) and
/// [`NodeState`] (an exec's node, one variant per kind) with their dispatch to [`NodeKind`].
macro_rules! node_kinds {
    ($($(#[$doc:meta])* $variant:ident($params:ty) => $kind:ty,)*) => {
        /// A statement's node parameters, as handed to the cache: one variant per node kind.
        #[derive(Clone, Copy)]
        pub enum NodeParams<'a> {
            $($(#[$doc])* $variant($params),)*
        }

        /// A node of an exec: its handle in the graph and its last parameters.
        pub(crate) enum NodeState {
            /// Not in this variant.
            Absent,
            $($variant(CUgraphNode, <$kind as NodeKind>::State),)*
        }

        impl NodeParams<'_> {
            /// See [`NodeKind::validate`].
            pub(crate) fn validate(
                &self,
                limits: Option<&Limits>,
                site: &dyn Fn() -> NodeSite,
            ) -> Result<(), Error> {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::validate(p, limits, site),)*
                }
            }

            /// Each buffer operand's `(tag, written, context)` (see
            /// [`Handle`](crate::Handle)) into `out`; returns how many.
            pub(crate) fn accesses(&self, out: &mut Accesses) -> usize {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::accesses(p, out),)*
                }
            }

            /// See [`NodeKind::context`].
            pub(crate) fn context(&self) -> Option<CUcontext> {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::context(p),)*
                }
            }

            /// See [`NodeKind::contexts_ok`].
            pub(crate) fn contexts_ok(
                &self,
                call: CUcontext,
                ops: &[(u64, bool, CUcontext)],
            ) -> bool {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::contexts_ok(p, call, ops),)*
                }
            }

            /// See [`NodeKind::peer`].
            pub(crate) fn peer(&self) -> Option<(CUcontext, CUcontext)> {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::peer(p),)*
                }
            }

            /// See [`NodeKind::kernel`].
            pub(crate) fn kernel(&self) -> Option<bool> {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::kernel(p),)*
                }
            }

            /// Adds the node to `graph` after `deps` (`cuGraphAddNode_v2`), with edge data
            /// `edges` (see [`raw::add_node`](crate::raw::add_node); empty: plain edges).
            ///
            /// # Safety
            /// `graph` is live, `deps` are its nodes, `ctx` is current; the parameters were
            /// validated; a programmatic edge comes from a kernel node and this node is a
            /// programmatic kernel's.
            pub(crate) unsafe fn add(
                &self,
                driver: &mut impl Driver,
                graph: CUgraph,
                (deps, edges): (&[CUgraphNode], &[CUgraphEdgeData]),
                ctx: CUcontext,
            ) -> Result<NodeState, CudaError> {
                match self {
                    $(NodeParams::$variant(p) => {
                        let mut state = <$kind>::state(p);
                        // SAFETY: the caller's contract (`ctx` current).
                        unsafe { <$kind>::setup(&mut state, driver, ctx) }?;
                        // SAFETY: the caller's contract; the parameters point into `state`.
                        let node = <$kind>::with_params(&mut state, ctx, |params| unsafe {
                            driver.add_node(graph, deps, edges, params)
                        });
                        <$kind>::added(&mut state, driver);
                        if node.is_err() {
                            <$kind>::unadded(&mut state);
                        }
                        let node = node.map_err(|error| CudaError { call: <$kind>::ADD, error })?;
                        Ok(NodeState::$variant(node, state))
                    })*
                }
            }

            /// See [`NodeKind::unlisted_work`].
            pub(crate) fn unlisted_work(&self) -> bool {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::unlisted_work(p),)*
                }
            }

            /// See [`NodeKind::prepare`].
            pub(crate) fn prepare(&self, site: &dyn Fn() -> NodeSite) -> Result<bool, Error> {
                match self {
                    $(NodeParams::$variant(p) => <$kind>::prepare(p, site),)*
                }
            }

            /// Runs the node eagerly (see [`NodeKind::eager`]).
            ///
            /// # Safety
            /// See [`NodeKind::eager`].
            pub(crate) unsafe fn eager(
                &self,
                stream: &CudaStream,
                reports: &Arc<Reports>,
                site: &dyn Fn() -> NodeSite,
            ) -> Result<(), Error> {
                match self {
                    // SAFETY: the caller's contract.
                    $(NodeParams::$variant(p) => unsafe { <$kind>::eager(p, stream, reports, site) },)*
                }
            }
        }

        impl NodeState {
            /// The node's handle in its graph (`None` when absent from this variant).
            pub(crate) fn handle(&self) -> Option<CUgraphNode> {
                match self {
                    NodeState::Absent => None,
                    $(NodeState::$variant(h, _) => Some(*h),)*
                }
            }

            /// Sets the node's handle (after a whole-exec update, to the kept graph's).
            pub(crate) fn set_handle(&mut self, handle: CUgraphNode) {
                match self {
                    NodeState::Absent => {}
                    $(NodeState::$variant(h, _) => *h = handle,)*
                }
            }

            /// Records `new` and, when it changed and `send` holds, sends it to `exec`
            /// (`cuGraphExecNodeSetParams`), if the kind's rule allows.
            ///
            /// # Safety
            /// `exec` was instantiated from the graph holding this node, in context `ctx`,
            /// which is current; `new` was validated.
            pub(crate) unsafe fn update(
                &mut self,
                new: Option<&NodeParams<'_>>,
                driver: &mut impl Driver,
                exec: CUgraphExec,
                ctx: CUcontext,
                send: bool,
            ) -> Update {
                match (self, new) {
                    (NodeState::Absent, None) => Update::Absent,
                    $((NodeState::$variant(handle, state), Some(NodeParams::$variant(p))) => {
                        if !<$kind>::same_edges(state, p) {
                            return Update::Mismatch;
                        }
                        let settable = <$kind>::settable(state, p);
                        if !<$kind>::record(state, p) {
                            return Update::Unchanged;
                        }
                        if !send || !settable {
                            return Update::NotSent;
                        }
                        let handle = *handle;
                        // SAFETY: the caller's contract; the parameters point into `state`.
                        let r = <$kind>::with_params(state, ctx, |params| unsafe {
                            driver.set_node(exec, handle, params)
                        });
                        match r {
                            Ok(()) => Update::Sent,
                            Err(e) => Update::Refused(<$kind>::SET, e),
                        }
                    })*
                    _ => Update::Mismatch,
                }
            }

            /// Whether the node's kind has work at launch ([`NodeKind::LAUNCH_WORK`]).
            pub(crate) fn launch_work(&self) -> bool {
                match self {
                    NodeState::Absent => false,
                    $(NodeState::$variant(..) => <$kind>::LAUNCH_WORK,)*
                }
            }

            /// See [`NodeKind::launching`].
            pub(crate) fn launching(
                &mut self,
                p: Option<&NodeParams<'_>>,
                reports: &Arc<Reports>,
                site: &dyn Fn() -> NodeSite,
            ) -> Result<(), Error> {
                match (self, p) {
                    $((NodeState::$variant(_, s), Some(NodeParams::$variant(p))) => {
                        <$kind>::launching(s, p, reports, site)
                    })*
                    _ => Ok(()),
                }
            }

            /// See [`NodeKind::unlaunched`].
            pub(crate) fn unlaunched(&mut self) -> Option<Box<dyn Send>> {
                match self {
                    NodeState::Absent => None,
                    $(NodeState::$variant(_, s) => <$kind>::unlaunched(s),)*
                }
            }

            /// See [`NodeKind::scratch`].
            pub(crate) fn scratch(&self) -> Option<(u32, u64, usize)> {
                match self {
                    NodeState::Absent => None,
                    $(NodeState::$variant(_, s) => <$kind>::scratch(s),)*
                }
            }

            /// See [`NodeKind::memory_nodes`].
            pub(crate) fn memory_nodes(&self) -> bool {
                match self {
                    NodeState::Absent => false,
                    $(NodeState::$variant(_, s) => <$kind>::memory_nodes(s),)*
                }
            }

            /// See [`NodeKind::recorded_memory`].
            pub(crate) fn recorded_memory(&self) -> u64 {
                match self {
                    NodeState::Absent => 0,
                    $(NodeState::$variant(_, s) => <$kind>::recorded_memory(s),)*
                }
            }

            /// See [`NodeKind::carry`].
            pub(crate) fn carry(old: &mut NodeState, new: &mut NodeState) {
                match (old, new) {
                    $((NodeState::$variant(_, o), NodeState::$variant(_, n)) => {
                        <$kind>::carry(o, n)
                    })*
                    _ => {}
                }
            }
        }
    };
}

node_kinds! {
    /// Kernel node.
    Kernel(&'a dyn KernelNode) => kernel::Kernel,
    /// Memcpy node.
    Memcpy(&'a MemcpyParams<'a>) => memcpy::Memcpy,
    /// Memset node.
    Memset(&'a MemsetParams<'a>) => memset::Memset,
    /// Child-graph node of stream work recorded by a `capture` statement.
    Captured(&'a dyn CapturedWork) => captured::Captured,
    /// Child-graph node of a captured [`Graph`](crate::Graph), `child(&mut g)`.
    Child(&'a GraphRef<'a>) => child::Child,
    /// Kernel node of the crate's fill kernel, `fill(&mut dst, value)`.
    Fill(&'a FillNode<'a>) => fill::Fill,
    /// Kernel node of the crate's readback kernel: a small `copy(&dev, &mut pinned)`.
    Readback(&'a ReadbackNode<'a>) => readback::Readback,
    /// Host function node, `host(&a, &mut b, |(a, b)| …)`.
    Host(&'a dyn HostWork) => host::Host,
    /// Empty node, `empty()`.
    Empty(EmptyParams) => empty::Empty,
    /// Event record node, `event_record(&e)`.
    EventRecord(EventRecordParams<'a>) => event::Record,
    /// Event wait node, `event_wait(&e)`.
    EventWait(EventWaitParams<'a>) => event::Wait,
    /// 2-D (pitched) memcpy node, `copy_2d(&src, src_rows, &mut dst, dst_rows)`.
    Memcpy2d(&'a Copy2dParams<'a>) => pitched::Memcpy2d,
    /// 2-D (pitched) memset node, `memset_2d(&mut dst, rows, value)`.
    Memset2d(&'a Memset2dParams<'a>) => pitched::Memset2d,
    /// Memory allocation node of a graph-owned buffer, `let tmp = alloc::<T>(n);`.
    MemAlloc(&'a AllocParams<'a>) => alloc::Alloc,
    /// Memory free node of a graph-owned buffer (after its last use, or `free(&mut tmp)`).
    MemFree(&'a FreeParams<'a>) => alloc::Free,
    /// Conditional node (device `while`, `if`, `if`/`else`, `switch`).
    Conditional(ConditionalParams) => conditional::Conditional,
}

impl NodeParams<'_> {
    /// Appends the node's words for the cache's unchanged-call check: the kernel's
    /// [`KernelNode::pack`] (its first word carries its kind, `kernel::pack_head`); `3` and a memset's parameters and handle; `4` and a copy's
    /// ([`pack_copy`], 1-D and 2-D), unless its pinned host allocation's id is unknown; `2`, the
    /// recording's
    /// serial and the operands' handles for a keyed `capture` statement that took a kept
    /// recording. `false` for a node of another kind (or a kernel that does not pack, or a
    /// keyed statement still to be recorded): the call then takes the node-by-node path.
    pub(crate) fn pack(&self, out: &mut kernel::Pack<'_>) -> bool {
        match self {
            NodeParams::Kernel(k) => kernel::pack_node(*k, out),
            // A readback: a kernel node of the crate's kernel, packed as one (its arguments are
            // both addresses and the length; the pinned side needs no allocation id: the kernel
            // stores through the address, nothing of it is resolved when the node is set).
            NodeParams::Readback(r) => kernel::pack_node(*r, out),
            // A memset: everything `validate` and the node's state look at, and its handle.
            NodeParams::Memset(m) => {
                let r = &m.raw;
                out.push(3);
                out.push(r.dst);
                out.push(r.len as u64);
                out.push(u64::from(r.elem_size) | u64::from(r.value) << 32);
                out.push(r.ctx as u64);
                out.push_handle(m.dst_tag, true);
                true
            }
            // A 1-D copy: everything `validate` and the node's state look at (the pinned host
            // side's allocation id included: a copy whose id is unknown is sent every call and
            // does not pack), and its handles.
            NodeParams::Memcpy(m) => pack_copy(out, &m.raw, (m.src_tag, m.dst_tag), None),
            // A 2-D copy: the same, and the rows of both sides.
            NodeParams::Memcpy2d(m) => {
                let r = &m.raw;
                pack_copy(out, &r.base, (m.src_tag, m.dst_tag), Some((r.src_rows, r.dst_rows)))
            }
            // A keyed statement whose recording was taken from the kept ones: its serial and
            // its operands' handles.
            NodeParams::Captured(c) => {
                let Some(g) = c.recorded().filter(|_| c.key().is_some()) else { return false };
                out.push(2);
                out.push(g.serial());
                let mut accesses: crate::operand::Accesses =
                    [(0, false, core::ptr::null_mut()); 16];
                let n = c.accesses(&mut accesses);
                for &(tag, write, _) in &accesses[..n] {
                    out.push_handle(tag, write);
                }
                true
            }
            _ => false,
        }
    }
}

/// The unchanged-call words of a copy node ([`NodeParams::pack`]): `4` with the sides' memory
/// types (and `1 << 10` for a 2-D copy), the addresses, lengths, element size, contexts, the
/// pinned host allocation's id, the rows of a 2-D copy, and the handles. `false` (nothing
/// packed) when the host allocation's id is unknown: such a copy is sent on every call.
fn pack_copy(
    out: &mut kernel::Pack<'_>,
    r: &memcpy::Copy1d,
    (src_tag, dst_tag): (u64, u64),
    rows: Option<(pitched::Rows, pitched::Rows)>,
) -> bool {
    if memcpy::host_unresolved(r) {
        return false;
    }
    let word = |side: memcpy::Memory| match side {
        memcpy::Memory::Device(p) => (p, 0),
        memcpy::Memory::Host(p) => (p as u64, 1),
    };
    let ((src, src_host), (dst, dst_host)) = (word(r.src), word(r.dst));
    out.push(4 | src_host << 8 | dst_host << 9 | u64::from(rows.is_some()) << 10);
    for w in [src, dst, r.src_len as u64, r.dst_len as u64, r.elem_size as u64] {
        out.push(w);
    }
    out.push(r.src_ctx as u64);
    out.push(r.dst_ctx as u64);
    out.push(r.host_buffer);
    if let Some((a, b)) = rows {
        for x in [a, b] {
            for w in [x.width, x.height, x.pitch, x.first] {
                out.push(w as u64);
            }
        }
    }
    out.push_handle(src_tag, false);
    out.push_handle(dst_tag, true);
    true
}

/// What a statement evaluates to inside `graph!` (sealed: a kernel launch made by a
/// `kernels!` method, or the parameters of `copy`, `memset` and `zero`).
pub trait IntoNode: crate::operand::sealed::Sealed {
    /// Whether [`Self::node`] is always a kernel node ([`NodeParams::Kernel`]): true only for a
    /// `kernels!` launch (the trait is sealed).
    #[doc(hidden)]
    const KERNEL: bool = false;
    /// The node parameters.
    fn node(&self) -> NodeParams<'_>;
    /// Its unchanged-call words ([`NodeParams::pack`]), without the dynamic dispatch.
    #[doc(hidden)]
    #[inline(always)]
    fn words(&self, out: &mut kernel::Pack<'_>) -> bool {
        self.node().pack(out)
    }
}
impl<A: KernelArgs> crate::operand::sealed::Sealed for KernelLaunch<'_, A> {}
impl<A: KernelArgs> IntoNode for KernelLaunch<'_, A> {
    const KERNEL: bool = true;
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Kernel(self)
    }
    #[inline(always)]
    fn words(&self, out: &mut kernel::Pack<'_>) -> bool {
        // As `NodeParams::pack` of a kernel node, with the launch's own `pack`.
        kernel::pack_node(self, out)
    }
}
impl crate::operand::sealed::Sealed for MemcpyParams<'_> {}
impl IntoNode for MemcpyParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Memcpy(self)
    }
}
impl crate::operand::sealed::Sealed for MemsetParams<'_> {}
impl IntoNode for MemsetParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Memset(self)
    }
}
impl<H, F, K> crate::operand::sealed::Sealed for CaptureParams<'_, H, F, K> {}
impl<H, F, E> IntoNode for CaptureParams<'_, H, F>
where
    H: CaptureOperands,
    F: for<'s> FnOnce(&'s crate::session::Capture, H::Views<'s>) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Captured(self)
    }
}
impl<H, K, E> IntoNode for CaptureParams<'_, H, KeyedFn<H, K, E>, Keyed<K>>
where
    H: CaptureOperands,
    K: CaptureKey,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Captured(self)
    }
}
impl<'a> IntoNode for FillNode<'a> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Fill(self)
    }
}
impl<'a> IntoNode for ReadbackNode<'a> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Readback(self)
    }
}

/// A `copy(&src, &mut dst)` statement of `graph!`: a memcpy node, or for a small copy from
/// device memory into pinned host memory a kernel node of the crate's readback kernel
/// ([`ReadbackNode`]).
pub enum CopyNode<'a> {
    /// A memcpy node.
    Memcpy(MemcpyParams<'a>),
    /// A readback kernel node.
    Readback(ReadbackNode<'a>),
}
impl crate::operand::sealed::Sealed for CopyNode<'_> {}
impl IntoNode for CopyNode<'_> {
    fn node(&self) -> NodeParams<'_> {
        match self {
            CopyNode::Memcpy(c) => NodeParams::Memcpy(c),
            CopyNode::Readback(r) => NodeParams::Readback(r),
        }
    }
}

/// A `copy_2d(&src, src_rows, &mut dst, dst_rows)` statement of `graph!`: a 2-D memcpy node,
/// or for a small copy of contiguous rows from device memory into pinned host memory a
/// [`ReadbackNode`].
pub enum Copy2dNode<'a> {
    /// A 2-D memcpy node.
    Memcpy2d(Copy2dParams<'a>),
    /// A readback kernel node.
    Readback(ReadbackNode<'a>),
}
impl crate::operand::sealed::Sealed for Copy2dNode<'_> {}
impl IntoNode for Copy2dNode<'_> {
    fn node(&self) -> NodeParams<'_> {
        match self {
            Copy2dNode::Memcpy2d(c) => NodeParams::Memcpy2d(c),
            Copy2dNode::Readback(r) => NodeParams::Readback(r),
        }
    }
}

/// [`copy_2d`] on `stream`: a [`Copy2dNode`].
pub fn copy_2d_on<'x, S: CopyTo<D> + 'x, D: 'x>(
    stream: &CudaStream,
    src: S,
    src_rows: Rows,
    dst: D,
    dst_rows: Rows,
) -> Copy2dNode<'x> {
    let mut c = pitched::copy_2d_unresolved(src, src_rows, dst, dst_rows);
    match ReadbackNode::try_new_2d(stream, &c) {
        Some(r) => Copy2dNode::Readback(r),
        None => {
            c.raw.base.resolve_host_buffer();
            Copy2dNode::Memcpy2d(c)
        }
    }
}

/// [`copy`] on `stream`: a [`CopyNode`].
pub fn copy_on<'x, S: CopyTo<D> + 'x, D: 'x>(stream: &CudaStream, src: S, dst: D) -> CopyNode<'x> {
    let mut c = src.memcpy(dst);
    match ReadbackNode::try_new(stream, &c) {
        Some(r) => CopyNode::Readback(r),
        None => {
            c.raw.resolve_host_buffer();
            CopyNode::Memcpy(c)
        }
    }
}
impl<H, F> crate::operand::sealed::Sealed for HostParams<'_, H, F> {}
impl<H, F> IntoNode for HostParams<'_, H, F>
where
    H: HostOperands,
    F: for<'s> FnMut(H::Views<'s>) + Send + 'static,
{
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Host(self)
    }
}
impl crate::operand::sealed::Sealed for EmptyParams {}
impl IntoNode for EmptyParams {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Empty(*self)
    }
}
impl crate::operand::sealed::Sealed for EventRecordParams<'_> {}
impl IntoNode for EventRecordParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::EventRecord(*self)
    }
}
impl crate::operand::sealed::Sealed for EventWaitParams<'_> {}
impl IntoNode for EventWaitParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::EventWait(*self)
    }
}
impl crate::operand::sealed::Sealed for Copy2dParams<'_> {}
impl IntoNode for Copy2dParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Memcpy2d(self)
    }
}
impl crate::operand::sealed::Sealed for Memset2dParams<'_> {}
impl IntoNode for Memset2dParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Memset2d(self)
    }
}
impl crate::operand::sealed::Sealed for AllocParams<'_> {}
impl IntoNode for AllocParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::MemAlloc(self)
    }
}
impl crate::operand::sealed::Sealed for FreeParams<'_> {}
impl IntoNode for FreeParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::MemFree(self)
    }
}
impl crate::operand::sealed::Sealed for GraphRef<'_> {}
impl IntoNode for GraphRef<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Child(self)
    }
}
