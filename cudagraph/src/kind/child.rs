//! Child-graph nodes of a captured [`Graph`](crate::Graph), embedded in `graph!` with
//! `child(&mut g)` (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_GRAPH`; the driver copies the
//! graph into the node).
//!
//! The graph is replayed as recorded: it is the user's recording, made once, of work on the
//! buffers it holds borrowed, so nothing it points at can change or be freed while it exists.
//! A call that embeds another graph (a different `Graph` value) sends it to the exec in place
//! (`cuGraphExecNodeSetParams`); the driver refuses one of another topology and the ladder
//! re-instantiates. The same graph again sends nothing.

use core::marker::PhantomData;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{CUcontext, CUgraph, CUgraphNodeParams, CUgraphNodeType};

use super::NodeKind;
use crate::error::{Call, Error, NodeSite};
use crate::operand::{Accesses, Handle, sealed};
use crate::raw;

/// A captured [`Graph`](crate::Graph) as a `graph!` operand, made by `child(&mut g)`: the
/// graph, borrowed (with all its operands acquired on the stream) for the call.
#[derive(Clone, Copy, Debug)]
pub struct GraphRef<'b> {
    pub(crate) raw: CUgraph,
    /// The graph's capture number, unique in the process: what tells two graphs apart (a
    /// dropped graph's handle address may be reused by a new one).
    pub(crate) id: u64,
    pub(crate) ctx: CUcontext,
    /// Why the graph cannot be a child: its operands are not the memory it was captured with,
    /// or it keeps outputs ([`Capture::keep`](crate::Capture::keep)). `None`: it can.
    pub(crate) refused: Option<&'static str>,
    pub(crate) tag: u64,
    pub(crate) _borrow: PhantomData<&'b ()>,
}

impl GraphRef<'_> {
    /// This handle as a [`GraphBuilder`](crate::GraphBuilder) records it, tag kept: without
    /// the borrow, which the builder's guard and `'a` hold (as
    /// [`MemcpyParams::recorded`](crate::MemcpyParams) for a copy).
    pub(crate) fn recorded(&self) -> GraphRef<'static> {
        let GraphRef { raw, id, ctx, refused, tag, _borrow } = *self;
        GraphRef { raw, id, ctx, refused, tag, _borrow: PhantomData }
    }
}

impl Handle for GraphRef<'_> {
    fn tag(&self) -> u64 {
        self.tag
    }
    fn with_tag(mut self, tag: u64, _: sealed::Token) -> Self {
        self.tag = tag;
        self
    }
}

/// The read handle of a graph operand: a graph is only embedded with `child(&mut g)` (its
/// operands are acquired for writing where the graph writes them), never read on its own.
#[derive(Clone, Copy, Debug)]
pub struct NoGraphRead<'b> {
    pub(crate) tag: u64,
    pub(crate) _borrow: PhantomData<&'b ()>,
}

impl sealed::Sealed for NoGraphRead<'_> {}
impl Handle for NoGraphRead<'_> {
    fn tag(&self) -> u64 {
        self.tag
    }
    fn with_tag(mut self, tag: u64, _: sealed::Token) -> Self {
        self.tag = tag;
        self
    }
}

/// The child-graph node kind of an embedded [`Graph`](crate::Graph).
pub(crate) struct Child;

impl NodeKind for Child {
    type Params<'a> = &'a GraphRef<'a>;
    /// The graph's handle and capture number.
    type State = (CUgraph, u64);
    const ADD: &'static str = "cuGraphAddNode_v2 (child graph)";
    const SET: &'static str = "cuGraphExecNodeSetParams (child graph)";
    const EAGER: &'static str = "cuGraphInstantiateWithFlags + cuGraphLaunch (child graph, eager)";

    fn validate(
        g: &&GraphRef<'_>,
        _: Option<&super::Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        match g.refused {
            None => Ok(()),
            Some(why) => Err(Error::InvalidNode { site: site(), why: why.into() }),
        }
    }

    fn accesses(g: &&GraphRef<'_>, out: &mut Accesses) -> usize {
        out[0] = (g.tag, true, g.ctx);
        1
    }

    fn state(g: &&GraphRef<'_>) -> (CUgraph, u64) {
        (g.raw, g.id)
    }

    /// Another graph (by capture number, not handle address) is a change.
    fn record(s: &mut (CUgraph, u64), g: &&GraphRef<'_>) -> bool {
        let changed = s.1 != g.id;
        *s = (g.raw, g.id);
        changed
    }

    fn with_params<R>(
        s: &mut (CUgraph, u64),
        _: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH);
        p.__bindgen_anon_1.graph.graph = s.0;
        f(&mut p)
    }

    /// Instantiates the graph and launches that exec on the stream, then destroys it (the
    /// driver frees it once the launch completed).
    unsafe fn eager(
        g: &&GraphRef<'_>,
        stream: &CudaStream,
        _: &std::sync::Arc<super::Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let err = |source| Error::Node { site: site(), source };
        // SAFETY: the graph is alive (borrowed for the call) and of the stream's context, which
        // is current; its operands are acquired on the stream for the call.
        let exec = unsafe { raw::instantiate(g.raw) }.call(Self::EAGER).map_err(err)?;
        let launched = unsafe { raw::launch(exec, stream.cu_stream()) }.call(Self::EAGER);
        // SAFETY: ours; a launch in flight completes first.
        let _ = unsafe { raw::exec_destroy(exec) };
        launched.map_err(err)
    }
}
