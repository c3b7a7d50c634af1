//! Raw driver graphs, the baselines of `bench` and `toggle`: a `CUgraph` with its node handles
//! and a `CUgraphExec`, each destroyed on drop. Included with `#[path]`; each example adds the
//! constructors it needs in an `impl` block of its own.

use cudagraph::cudarc::driver::sys::{self, CUgraph, CUgraphExec, CUgraphNode, CUstream};

/// The examples' result type.
type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A `CUgraph` and its node handles (in the order they were added), destroyed on drop.
pub struct OwnedGraph {
    pub graph: CUgraph,
    pub nodes: Vec<CUgraphNode>,
}

impl OwnedGraph {
    /// `cuGraphCreate`, with room for `nodes` node handles.
    pub fn create(nodes: usize) -> Res<OwnedGraph> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: the example's context is current on this thread.
        unsafe { sys::cuGraphCreate(&mut graph, 0) }.result()?;
        Ok(OwnedGraph { graph, nodes: Vec::with_capacity(nodes) })
    }
}

impl Drop for OwnedGraph {
    fn drop(&mut self) {
        // SAFETY: the graph is ours and used by nothing after this (execs copy it).
        if let Err(e) = unsafe { sys::cuGraphDestroy(self.graph) }.result() {
            eprintln!("cuGraphDestroy failed: {e}");
        }
    }
}

/// A `CUgraphExec`, destroyed on drop.
pub struct OwnedExec(pub CUgraphExec);

impl OwnedExec {
    /// `cuGraphInstantiateWithFlags(graph, 0)`.
    pub fn instantiate(g: &OwnedGraph) -> Res<OwnedExec> {
        let mut exec = std::ptr::null_mut();
        // SAFETY: the graph is live and its context current.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, g.graph, 0) }.result()?;
        Ok(OwnedExec(exec))
    }

    /// `cuGraphLaunch`.
    pub fn launch(&self, stream: CUstream) -> Res<()> {
        // SAFETY: exec and stream are live and of one context; the buffers the nodes use
        // outlive every launch (each measurement synchronizes before its buffers drop).
        unsafe { sys::cuGraphLaunch(self.0, stream) }.result()?;
        Ok(())
    }

    /// `cuGraphUpload`.
    pub fn upload(&self, stream: CUstream) -> Res<()> {
        // SAFETY: as `launch`.
        unsafe { sys::cuGraphUpload(self.0, stream) }.result()?;
        Ok(())
    }
}

impl Drop for OwnedExec {
    fn drop(&mut self) {
        // SAFETY: the exec is ours; the driver lets launches in flight finish.
        if let Err(e) = unsafe { sys::cuGraphExecDestroy(self.0) }.result() {
            eprintln!("cuGraphExecDestroy failed: {e}");
        }
    }
}
