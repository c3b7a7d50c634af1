//! Conditional nodes: device-side `while`, `if`, `if`/`else` and `switch`
//! (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_CONDITIONAL`, CUDA 12.4+; `switch` and
//! `if`/`else` need 12.8+), and the [`Condition`] kernel parameter that sets them.
//!
//! Each device condition of a call (`let c = condition(default);` in `graph!`) is a slot
//! number. When the cache builds a variant's `CUgraph` it creates one conditional handle per
//! slot (`cuGraphConditionalHandleCreate` with `CU_GRAPH_COND_ASSIGN_DEFAULT`: the default is
//! applied at the start of every launch) and keeps the handles with the variant's exec; kernel
//! arguments of type [`Condition`] carry the slot and are given that exec's handle whenever the
//! kernel node is added or its parameters are sent (a per-node update). The handles are bound
//! for the duration of a build or an update by [`with_handles`].
//!
//! The node's bodies are the driver's own graphs (`phGraph_out`), filled by the cache with the
//! body statements' nodes. The node itself has no parameter an exec can update: a changed
//! default, kind or branch count is a structural change (a new instantiation).

use core::cell::RefCell;
use core::ptr;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{
    CUDA_CONDITIONAL_NODE_PARAMS, CUcontext, CUgraph, CUgraphConditionalNodeType,
    CUgraphNodeParams, CUgraphNodeType,
};

use super::{NodeKind, NodeParams, NodeState};
use crate::error::{Error, NodeSite};
use crate::operand::{Accesses, KernelArg, Scalar};

/// A device condition as a kernel argument: declare the parameter as `c: Condition` in
/// `kernels!` (the kernel's C parameter is a `cudaGraphConditionalHandle`, 8 bytes) and pass
/// the name bound by `let c = condition(default);` inside `graph!`. The kernel sets it with
/// `cudaGraphSetConditional(c, value)`; compile the kernel with NVRTC, `#include
/// <cuda_device_runtime_api.h>` and the CUDA toolkit's `include` directory on the include path
/// (`CompileOptions { include_paths: vec!["/usr/local/cuda/include".into()], .. }`).
///
/// The value passed is a slot of the call, not the driver's handle: each exec gets its own
/// handles when it is built, and the kernel node receives that exec's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Condition {
    slot: u64,
    default: u32,
    /// The number of the `graph!` call or `GraphBuilder` that made it: a kernel may take it
    /// only in that call or builder, where a device statement it drives gives it a handle.
    owner: u64,
}

impl Condition {
    /// The condition of slot `slot` of a call, with the value it has at the start of every
    /// launch. Crate-private: conditions come only from `condition(..)` in `graph!` (through
    /// the `unsafe` [`__private::condition`](crate::__private::condition)) and
    /// [`GraphBuilder::condition`](crate::GraphBuilder::condition), so no forged slot reaches a
    /// kernel's `cudaGraphSetConditional`.
    pub(crate) fn new(slot: u32, default: u32, owner: u64) -> Self {
        Condition { slot: u64::from(slot), default, owner }
    }

    /// The number of the call or builder that made it.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// Its slot in the call.
    pub fn slot(&self) -> u32 {
        self.slot as u32
    }

    /// The value it has at the start of every launch (`CU_GRAPH_COND_ASSIGN_DEFAULT`).
    pub fn default(&self) -> u32 {
        self.default
    }
}

// Not listed in errors: `Scalar`'s message says what a scalar argument takes.
#[diagnostic::do_not_recommend]
impl crate::operand::sealed::SealedScalar for Condition {}
#[diagnostic::do_not_recommend]
impl Scalar for Condition {
    type Value = Condition;
    fn value(self) -> Condition {
        self
    }
}

// SAFETY: the bytes are the 8 bytes of a `u64`; the cache replaces them with the exec's
// conditional handle (also a `u64`, the size of `cudaGraphConditionalHandle`) before any driver
// call reads them. A condition names no memory.
unsafe impl KernelArg for Condition {
    fn bytes(&self) -> &[u8] {
        bytemuck::bytes_of(&self.slot)
    }
    fn condition(&self) -> Option<(u32, u64)> {
        Some((self.slot as u32, self.owner))
    }
}

/// What a conditional node does with its condition's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionalType {
    /// `device_while`: runs the body while the value is non-zero (checked before each
    /// iteration, so a value of 0 at the node runs it 0 times).
    While,
    /// `device_if`: runs body 0 when the value is non-zero, else body 1 if there is one.
    If,
    /// `device_switch`: runs body `n` when the value is `n`, none when it is out of range.
    Switch,
}

impl ConditionalType {
    fn raw(self) -> Option<CUgraphConditionalNodeType> {
        match self {
            ConditionalType::While => Some(CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE),
            ConditionalType::If => Some(CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF),
            #[cfg(not(any(
                feature = "cuda-12040",
                feature = "cuda-12050",
                feature = "cuda-12060"
            )))]
            ConditionalType::Switch => Some(CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH),
            #[cfg(any(feature = "cuda-12040", feature = "cuda-12050", feature = "cuda-12060"))]
            ConditionalType::Switch => None,
        }
    }
}

/// The parameters of a conditional node: its condition's slot and default value, its type and
/// its number of bodies (1 for `while` and `if`, 2 for `if`/`else`, the number of cases for
/// `switch`).
#[derive(Clone, Copy, Debug)]
pub struct ConditionalParams {
    pub(crate) slot: u32,
    pub(crate) ty: ConditionalType,
    pub(crate) size: u32,
    pub(crate) default: u32,
}

impl ConditionalParams {
    /// A conditional node. Crate-private: generated code makes one from a [`Condition`]
    /// (`__private::conditional`), never from a bare slot.
    pub(crate) fn new(slot: u32, ty: ConditionalType, size: u32, default: u32) -> Self {
        ConditionalParams { slot, ty, size, default }
    }
}

impl crate::operand::sealed::Sealed for ConditionalParams {}
impl super::IntoNode for ConditionalParams {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Conditional(*self)
    }
}

/// What an exec keeps of a conditional node: its parameters, its handle, and its bodies (the
/// driver's graphs, owned by the node).
pub(crate) struct ConditionalState {
    params: ConditionalParams,
    handle: u64,
    pub(crate) bodies: Vec<CUgraph>,
}

thread_local! {
    /// The conditional handles of the graph being built or the exec being updated, by slot.
    static HANDLES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with `handles` (by slot) as the handles that conditional nodes and [`Condition`]
/// kernel arguments get.
pub(crate) fn with_handles<R>(handles: &[u64], f: impl FnOnce() -> R) -> R {
    /// Puts the thread's handles back, also when `f` unwinds (review 33d: hardening; no safe
    /// code unwinds out of `f` today).
    struct Restore(Vec<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = core::mem::take(&mut self.0);
            HANDLES.with(|h| *h.borrow_mut() = old);
        }
    }
    let old = HANDLES.with(|h| core::mem::replace(&mut *h.borrow_mut(), handles.to_vec()));
    let _restore = Restore(old);
    f()
}

/// The bound handle of slot `slot` (0, which no conditional node accepts, when none is bound).
pub(crate) fn handle(slot: u32) -> u64 {
    HANDLES.with(|h| h.borrow().get(slot as usize).copied().unwrap_or(0))
}

/// The conditional node kind.
pub(crate) struct Conditional;

impl NodeKind for Conditional {
    type Params<'a> = ConditionalParams;
    type State = ConditionalState;
    const ADD: &'static str = "cuGraphAddNode_v2 (conditional)";
    const SET: &'static str = "cuGraphExecNodeSetParams (conditional)";
    const EAGER: &'static str = "Mode::Eager (a conditional node runs only in a graph)";

    fn validate(
        p: &ConditionalParams,
        _: Option<&super::Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        if p.ty.raw().is_none() {
            let why = "`device_switch` needs CUDA 12.8 or newer (this build's bindings are older: build with feature `cuda-12080` or newer)".into();
            return Err(Error::InvalidNode { site: site(), why });
        }
        let ok = match p.ty {
            ConditionalType::While => p.size == 1,
            ConditionalType::If => p.size == 1 || p.size == 2,
            ConditionalType::Switch => p.size >= 1,
        };
        if !ok {
            let why = format!("a {:?} node cannot have {} bodies", p.ty, p.size);
            return Err(Error::InvalidNode { site: site(), why });
        }
        Ok(())
    }

    /// None of its own: the plan lists its bodies' accesses for the parent's edges, and each
    /// body node is checked on its own.
    fn accesses(_: &ConditionalParams, _: &mut Accesses) -> usize {
        0
    }

    fn state(p: &ConditionalParams) -> ConditionalState {
        ConditionalState { params: *p, handle: handle(p.slot), bodies: Vec::new() }
    }

    fn record(s: &mut ConditionalState, p: &ConditionalParams) -> bool {
        let q = s.params;
        let changed = (q.slot, q.ty, q.size, q.default) != (p.slot, p.ty, p.size, p.default)
            || s.handle != handle(p.slot);
        s.params = *p;
        s.handle = handle(p.slot);
        changed
    }

    /// Nothing of a conditional node can be set on an exec (its handle's default is fixed when
    /// the exec is instantiated): any change re-instantiates.
    fn settable(_: &ConditionalState, _: &ConditionalParams) -> bool {
        false
    }

    fn with_params<R>(
        s: &mut ConditionalState,
        ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL);
        // `validate` refused a type these bindings lack; `If` stands in (never sent).
        let type_ = s.params.ty.raw().unwrap_or(CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF);
        p.__bindgen_anon_1.conditional = CUDA_CONDITIONAL_NODE_PARAMS {
            handle: s.handle,
            type_,
            size: s.params.size,
            phGraph_out: ptr::null_mut(),
            ctx,
        };
        let r = f(&mut p);
        // SAFETY: the union member written above; after a successful add the driver set
        // `phGraph_out` to its array of `size` body graphs, valid for the node's lifetime.
        let out = unsafe { p.__bindgen_anon_1.conditional.phGraph_out };
        let n = s.params.size as usize;
        s.bodies = if out.is_null() {
            // Not added (or a mock driver): no graphs to fill.
            vec![ptr::null_mut(); n]
        } else {
            // SAFETY: see above: `n` initialized graph handles.
            unsafe { core::slice::from_raw_parts(out, n) }.to_vec()
        };
        r
    }

    /// A conditional node cannot run outside a graph: the condition is set by
    /// `cudaGraphSetConditional`, which only a kernel of a graph can call. `GraphCache::run`
    /// refuses an eager call with device control flow before enqueuing anything; this is the
    /// same refusal should a node get here.
    unsafe fn eager(
        _: &ConditionalParams,
        _: &CudaStream,
        _: &std::sync::Arc<super::Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Err(eager_refused(site()))
    }
}

/// The error of [`Mode::Eager`](crate::Mode::Eager) on device control flow.
pub(crate) fn eager_refused(site: NodeSite) -> Error {
    let why = "device control flow (a conditional node, or a kernel taking a `Condition`) runs only in a graph: Mode::Eager cannot run it statement by statement (write the host-driven equivalent instead)".into();
    Error::InvalidNode { site, why }
}

impl NodeParams<'_> {
    /// For a conditional node: its condition's slot and default value.
    pub(crate) fn conditional(&self) -> Option<(u32, u32)> {
        match self {
            NodeParams::Conditional(p) => Some((p.slot, p.default)),
            _ => None,
        }
    }
}

impl NodeState {
    /// For a conditional node: its body graphs (else none).
    pub(crate) fn bodies(&self) -> &[CUgraph] {
        match self {
            NodeState::Conditional(_, s) => &s.bodies,
            _ => &[],
        }
    }
}
