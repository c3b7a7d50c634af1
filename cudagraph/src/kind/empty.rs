//! Empty nodes (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_EMPTY`): no work, a join point.
//! Made by `empty()` in `graph!` (with `.after(…)`: `let joined = empty().after(a, b);`, then
//! `.after(joined)` on later statements) and [`GraphBuilder::empty`](crate::GraphBuilder::empty).

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{CUcontext, CUgraphNodeParams, CUgraphNodeType};

use super::{NodeKind, Reports};
use crate::error::{Error, NodeSite};
use crate::operand::Accesses;

/// An empty node's parameters (it has none), made by `empty()` in `graph!`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EmptyParams {
    _private: (),
}

/// `empty()`: a node that does nothing, to join edges.
pub fn empty() -> EmptyParams {
    EmptyParams { _private: () }
}

/// The empty node kind.
pub(crate) struct Empty;

impl NodeKind for Empty {
    type Params<'a> = EmptyParams;
    type State = ();
    const ADD: &'static str = "cuGraphAddNode_v2 (empty)";
    const SET: &'static str = "cuGraphExecNodeSetParams (empty)";
    const EAGER: &'static str = "(empty node: nothing to run)";

    fn validate(
        _: &EmptyParams,
        _: Option<&super::Limits>,
        _: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Ok(())
    }

    fn accesses(_: &EmptyParams, _: &mut Accesses) -> usize {
        0
    }

    fn state(_: &EmptyParams) {}

    fn record(_: &mut (), _: &EmptyParams) -> bool {
        false
    }

    fn with_params<R>(_: &mut (), _: CUcontext, f: impl FnOnce(&mut CUgraphNodeParams) -> R) -> R {
        f(&mut super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY))
    }

    /// Nothing: eagerly, statements run in source order on one stream, which every edge allows.
    unsafe fn eager(
        _: &EmptyParams,
        _: &CudaStream,
        _: &std::sync::Arc<Reports>,
        _: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Ok(())
    }
}
