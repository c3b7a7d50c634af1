//! Event record and event wait nodes (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_EVENT_RECORD`
//! / `CU_GRAPH_NODE_TYPE_WAIT_EVENT`), made by `event_record(&e)` and `event_wait(&e)` in
//! `graph!` with a cudarc [`CudaEvent`] held in an `Arc`. The two kinds share this module: they
//! differ only in their node type and eager call.
//!
//! An event node touches no buffer, so `graph!` orders it only by `.after(…)`:
//! `let t0 = event_record(&start).after(a);` records when `a` is done; a statement after
//! `let w = event_wait(&ready);` waits for the event with `.after(w)`. GPU timing of a part of a
//! step: record `start` after the part's first nodes' predecessors and `stop` after its last
//! nodes, then `start.elapsed_ms(&stop)` (cudarc; the events need timing:
//! `ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))`, since cudarc's `new_event(None)` makes
//! events without it, for which the driver refuses `cuEventElapsedTime`).
//!
//! An exec's node keeps its event alive (an `Arc` clone), so dropping the user's `Arc` while a
//! launch is pending destroys nothing the driver still uses.

use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUevent, CUgraphNodeParams, CUgraphNodeType};
use cudarc::driver::{CudaEvent, CudaStream};

use super::{NodeKind, Reports};
use crate::error::{Call, Error, NodeSite};
use crate::operand::Accesses;
use crate::raw;

/// An event node's parameters, made by `event_record(&e)` / `event_wait(&e)` in `graph!`: the
/// event, borrowed for the call.
#[derive(Clone, Copy, Debug)]
pub struct EventParams<'a> {
    pub(crate) event: &'a Arc<CudaEvent>,
}

/// `event_record(&e)`: records `e` when the node's predecessors are done.
pub fn event_record(event: &Arc<CudaEvent>) -> EventRecordParams<'_> {
    EventRecordParams(EventParams { event })
}

/// `event_wait(&e)`: the node's successors wait for the last record of `e`.
pub fn event_wait(event: &Arc<CudaEvent>) -> EventWaitParams<'_> {
    EventWaitParams(EventParams { event })
}

/// The parameters of an event record node (see [`event_record()`]).
#[derive(Clone, Copy, Debug)]
pub struct EventRecordParams<'a>(pub(crate) EventParams<'a>);

/// The parameters of an event wait node (see [`event_wait()`]).
#[derive(Clone, Copy, Debug)]
pub struct EventWaitParams<'a>(pub(crate) EventParams<'a>);

/// What an exec keeps of an event node: the event it runs, and the one the exec's original graph
/// names (kept alive while that graph is, after whole-exec updates).
pub(crate) struct EventState {
    event: Arc<CudaEvent>,
    graph_event: Arc<CudaEvent>,
}

fn validate(
    p: &EventParams<'_>,
    limits: Option<&super::Limits>,
    site: &dyn Fn() -> NodeSite,
) -> Result<(), Error> {
    match limits {
        Some(l) if l.ctx != p.event.context().cu_ctx() => Err(Error::WrongContext { site: site() }),
        _ => Ok(()),
    }
}

fn state(p: &EventParams<'_>) -> EventState {
    EventState { event: p.event.clone(), graph_event: p.event.clone() }
}

/// Another event is a change (sent with `cuGraphExecNodeSetParams`).
fn record(s: &mut EventState, p: &EventParams<'_>) -> bool {
    if s.event.cu_event() == p.event.cu_event() {
        return false;
    }
    s.event = p.event.clone();
    true
}

fn params(t: CUgraphNodeType, s: &EventState) -> (CUgraphNodeParams, CUevent) {
    (super::node_params(t), s.event.cu_event())
}

macro_rules! event_kind {
    ($(#[$m:meta])* $kind:ident, $params:ident, $type:ident, $field:ident, $add:literal, $set:literal, $eager:literal, $run:path) => {
        $(#[$m])*
        pub(crate) struct $kind;

        impl NodeKind for $kind {
            type Params<'a> = $params<'a>;
            type State = EventState;
            const ADD: &'static str = $add;
            const SET: &'static str = $set;
            const EAGER: &'static str = $eager;

            fn validate(
                p: &$params<'_>,
                limits: Option<&super::Limits>,
                site: &dyn Fn() -> NodeSite,
            ) -> Result<(), Error> {
                validate(&p.0, limits, site)
            }

            fn accesses(_: &$params<'_>, _: &mut Accesses) -> usize {
                0
            }

            fn state(p: &$params<'_>) -> EventState {
                state(&p.0)
            }

            fn record(s: &mut EventState, p: &$params<'_>) -> bool {
                record(s, &p.0)
            }

            fn with_params<R>(
                s: &mut EventState,
                _: CUcontext,
                f: impl FnOnce(&mut CUgraphNodeParams) -> R,
            ) -> R {
                let (mut p, event) = params(CUgraphNodeType::$type, s);
                p.__bindgen_anon_1.$field.event = event;
                f(&mut p)
            }

            fn carry(old: &mut EventState, new: &mut EventState) {
                new.graph_event = old.graph_event.clone();
            }

            unsafe fn eager(
                p: &$params<'_>,
                stream: &CudaStream,
                _: &Arc<Reports>,
                site: &dyn Fn() -> NodeSite,
            ) -> Result<(), Error> {
                // SAFETY: the event (borrowed) and the stream are alive, of the current context
                // (validated).
                unsafe { $run(stream.cu_stream(), p.0.event.cu_event()) }
                    .call(Self::EAGER)
                    .map_err(|source| Error::Node { site: site(), source })
            }
        }
    };
}

event_kind!(
    /// The event record node kind.
    Record,
    EventRecordParams,
    CU_GRAPH_NODE_TYPE_EVENT_RECORD,
    eventRecord,
    "cuGraphAddNode_v2 (event record)",
    "cuGraphExecNodeSetParams (event record)",
    "cuEventRecord",
    record_on
);
event_kind!(
    /// The event wait node kind.
    Wait,
    EventWaitParams,
    CU_GRAPH_NODE_TYPE_WAIT_EVENT,
    eventWait,
    "cuGraphAddNode_v2 (event wait)",
    "cuGraphExecNodeSetParams (event wait)",
    "cuStreamWaitEvent",
    raw::wait_event
);

/// `cuEventRecord` with the stream first, as [`raw::wait_event`] takes it.
///
/// # Safety
/// As [`raw::record_event`].
unsafe fn record_on(
    stream: cudarc::driver::sys::CUstream,
    event: CUevent,
) -> Result<(), cudarc::driver::DriverError> {
    // SAFETY: the caller's contract.
    unsafe { raw::record_event(event, stream) }
}
