//! Introspection of built graphs: their nodes (each node's kind and main parameters, as the
//! driver reports them), their edges, and clones with node lookup.
//!
//! For [`GraphCache::nodes`]/[`edges`](GraphCache::edges) (the `CUgraph` of the variant last
//! launched, from `graph!` or a [`GraphBuilder`](crate::GraphBuilder)),
//! [`Graph::node_info`](crate::Graph::node_info) (a capture) and [`ClonedGraph`]. Driver calls:
//! `cuGraphGetNodes`, `cuGraphGetEdges_v2`, `cuGraphNodeGetType`, and per kind
//! `cuGraphKernelNodeGetParams_v2`, `cuGraphMemcpyNodeGetParams`, `cuGraphMemsetNodeGetParams`,
//! `cuGraphMemAllocNodeGetParams`, `cuGraphMemFreeNodeGetParams`; `cuGraphClone` and
//! `cuGraphNodeFindInClone`.
//!
//! A cache's graph is its variant's graph *as built* (or last rebuilt): per-node updates go to
//! the exec only (`cuGraphExec*NodeSetParams`), so a kernel's grid or a memset's value seen here
//! is the one of the build, not necessarily of the last launch.

use std::collections::HashMap;

use cudarc::driver::DriverError;
use cudarc::driver::sys::{self, CUgraph, CUgraphNode, CUgraphNodeType as T};

use crate::error::{CudaError, Error, Result};
use crate::raw;

/// A node's kind (`cuGraphNodeGetType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GraphNodeKind {
    /// Kernel node (also `fill`).
    Kernel,
    /// Memcpy node.
    Memcpy,
    /// Memset node.
    Memset,
    /// Host function node.
    Host,
    /// Child-graph node (`capture`, `child`).
    ChildGraph,
    /// Empty node.
    Empty,
    /// Event wait node.
    EventWait,
    /// Event record node.
    EventRecord,
    /// Memory allocation node (a graph-owned buffer).
    MemAlloc,
    /// Memory free node.
    MemFree,
    /// Conditional node (device `while`, `if`, `switch`).
    Conditional,
    /// Any other node type, by its `CUgraphNodeType` value.
    Other(u32),
}

impl GraphNodeKind {
    pub(crate) fn of(t: T) -> Self {
        match t {
            T::CU_GRAPH_NODE_TYPE_KERNEL => Self::Kernel,
            T::CU_GRAPH_NODE_TYPE_MEMCPY => Self::Memcpy,
            T::CU_GRAPH_NODE_TYPE_MEMSET => Self::Memset,
            T::CU_GRAPH_NODE_TYPE_HOST => Self::Host,
            T::CU_GRAPH_NODE_TYPE_GRAPH => Self::ChildGraph,
            T::CU_GRAPH_NODE_TYPE_EMPTY => Self::Empty,
            T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => Self::EventWait,
            T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => Self::EventRecord,
            T::CU_GRAPH_NODE_TYPE_MEM_ALLOC => Self::MemAlloc,
            T::CU_GRAPH_NODE_TYPE_MEM_FREE => Self::MemFree,
            T::CU_GRAPH_NODE_TYPE_CONDITIONAL => Self::Conditional,
            other => Self::Other(other as u32),
        }
    }
}

/// A node's main parameters, as the driver reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeDetails {
    /// A kernel node's launch dimensions and dynamic shared memory (bytes).
    Kernel {
        /// Grid, in blocks.
        grid: (u32, u32, u32),
        /// Block, in threads.
        block: (u32, u32, u32),
        /// Dynamic shared memory, bytes.
        shared_bytes: u32,
    },
    /// A memcpy node: bytes per row, rows, and whether each side is device memory.
    Memcpy {
        /// Bytes per row (`WidthInBytes`; the whole copy for a 1-D copy).
        width_bytes: usize,
        /// Rows (`Height`, 1 for a 1-D copy).
        height: usize,
        /// The source is device memory (else host).
        src_device: bool,
        /// The destination is device memory (else host).
        dst_device: bool,
    },
    /// A memset node: element size (bytes), elements per row, rows, row pitch (bytes), value.
    Memset {
        /// Element size, bytes (1, 2 or 4).
        element_size: u32,
        /// Elements per row.
        width: usize,
        /// Rows.
        height: usize,
        /// Row pitch, bytes.
        pitch: usize,
        /// The value, in the element's low bytes.
        value: u32,
    },
    /// A memory allocation node: its size (bytes) and address.
    MemAlloc {
        /// Size, bytes.
        bytes: usize,
        /// The allocation's address (fixed for the graph's lifetime).
        address: u64,
    },
    /// A memory free node: the address it frees.
    MemFree {
        /// The freed allocation's address.
        address: u64,
    },
    /// No parameters reported for this kind.
    None,
}

/// One node of a graph: its kind and main parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphNode {
    /// The node's kind.
    pub kind: GraphNodeKind,
    /// Its parameters.
    pub details: NodeDetails,
}

/// A graph's nodes (in the driver's order, `cuGraphGetNodes`, stable for an unchanged graph)
/// and edges, as `(from, to)` indices into `nodes`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GraphInfo {
    /// The nodes.
    pub nodes: Vec<GraphNode>,
    /// The edges.
    pub edges: Vec<(usize, usize)>,
}

type Failed = (&'static str, DriverError);

/// The kernel details of the driver's kernel parameters.
pub(crate) fn kernel_details(p: &sys::CUDA_KERNEL_NODE_PARAMS) -> NodeDetails {
    NodeDetails::Kernel {
        grid: (p.gridDimX, p.gridDimY, p.gridDimZ),
        block: (p.blockDimX, p.blockDimY, p.blockDimZ),
        shared_bytes: p.sharedMemBytes,
    }
}

/// The memcpy details of a `CUDA_MEMCPY3D`.
pub(crate) fn memcpy_details(p: &sys::CUDA_MEMCPY3D) -> NodeDetails {
    let device = |t| t == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    NodeDetails::Memcpy {
        width_bytes: p.WidthInBytes,
        height: p.Height,
        src_device: device(p.srcMemoryType),
        dst_device: device(p.dstMemoryType),
    }
}

/// The memset details of the driver's memset parameters.
pub(crate) fn memset_details(p: &sys::CUDA_MEMSET_NODE_PARAMS) -> NodeDetails {
    NodeDetails::Memset {
        element_size: p.elementSize,
        width: p.width,
        height: p.height,
        pitch: p.pitch,
        value: p.value,
    }
}

/// One node's details (`cuGraph*NodeGetParams` of its kind).
///
/// # Safety
/// `node` is a live node of kind `kind`.
unsafe fn details(node: CUgraphNode, kind: GraphNodeKind) -> Result<NodeDetails, Failed> {
    Ok(match kind {
        GraphNodeKind::Kernel => {
            // SAFETY: plain integers and pointers, all-zero valid; written by the driver.
            let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { core::mem::zeroed() };
            unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }
                .result()
                .map_err(|e| ("cuGraphKernelNodeGetParams_v2", e))?;
            kernel_details(&p)
        }
        GraphNodeKind::Memcpy => {
            // Built field by field (`zeroed` is invalid for its memory-type fields).
            let dummy = crate::kind::memcpy::Copy1d {
                src: crate::kind::Memory::Device(0),
                dst: crate::kind::Memory::Device(0),
                src_len: 0,
                dst_len: 0,
                elem_size: 1,
                src_ctx: core::ptr::null_mut(),
                dst_ctx: core::ptr::null_mut(),
                host_buffer: 0,
            };
            let mut p = crate::kind::memcpy::memcpy3d(&dummy);
            // SAFETY: `node` is a memcpy node; `p` is a valid out-struct.
            unsafe { sys::cuGraphMemcpyNodeGetParams(node, &mut p) }
                .result()
                .map_err(|e| ("cuGraphMemcpyNodeGetParams", e))?;
            memcpy_details(&p)
        }
        GraphNodeKind::Memset => {
            // SAFETY: plain integers and a pointer, all-zero valid.
            let mut p: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { core::mem::zeroed() };
            unsafe { sys::cuGraphMemsetNodeGetParams(node, &mut p) }
                .result()
                .map_err(|e| ("cuGraphMemsetNodeGetParams", e))?;
            memset_details(&p)
        }
        GraphNodeKind::MemAlloc => {
            // SAFETY: integers, pointers and enums whose zero value is a variant
            // (`CU_MEM_ALLOCATION_TYPE_INVALID`, `CU_MEM_LOCATION_TYPE_INVALID`).
            let mut p: sys::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { core::mem::zeroed() };
            unsafe { sys::cuGraphMemAllocNodeGetParams(node, &mut p) }
                .result()
                .map_err(|e| ("cuGraphMemAllocNodeGetParams", e))?;
            NodeDetails::MemAlloc { bytes: p.bytesize, address: p.dptr }
        }
        GraphNodeKind::MemFree => {
            let mut d: sys::CUdeviceptr = 0;
            // SAFETY: `node` is a free node; `d` a valid out-pointer.
            unsafe { sys::cuGraphMemFreeNodeGetParams(node, &mut d) }
                .result()
                .map_err(|e| ("cuGraphMemFreeNodeGetParams", e))?;
            NodeDetails::MemFree { address: d }
        }
        _ => NodeDetails::None,
    })
}

/// The nodes (handles, and described) and edges of `graph`.
///
/// # Safety
/// `graph` is live.
pub(crate) unsafe fn describe(graph: CUgraph) -> Result<(Vec<CUgraphNode>, GraphInfo), Failed> {
    // SAFETY: the caller's contract.
    let handles = unsafe { raw::graph_nodes(graph) }.map_err(|e| ("cuGraphGetNodes", e))?;
    let raw_edges = unsafe { raw::graph_edges(graph) }.map_err(|e| ("cuGraphGetEdges_v2", e))?;
    let mut nodes = Vec::with_capacity(handles.len());
    for &h in &handles {
        // SAFETY: `h` is a node of the live graph.
        let t = unsafe { raw::node_type(h) }.map_err(|e| ("cuGraphNodeGetType", e))?;
        let kind = GraphNodeKind::of(t);
        // SAFETY: as above, of kind `kind`.
        let details = unsafe { details(h, kind) }?;
        nodes.push(GraphNode { kind, details });
    }
    let index: HashMap<CUgraphNode, usize> =
        handles.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let unknown = ("cuGraphGetEdges_v2 (an edge's node is not in the node list)", unknown());
    let edges = raw_edges
        .into_iter()
        .map(|(a, b, _)| Ok((*index.get(&a).ok_or(unknown)?, *index.get(&b).ok_or(unknown)?)))
        .collect::<Result<Vec<_>, Failed>>()?;
    Ok((handles, GraphInfo { nodes, edges }))
}

fn unknown() -> DriverError {
    DriverError(sys::CUresult::CUDA_ERROR_UNKNOWN)
}

/// A copy of a graph (`cuGraphClone`), for introspection, with lookup of the original's nodes
/// in it (`cuGraphNodeFindInClone`). It borrows what it was cloned from, whose node handles it
/// looks up; it cannot be instantiated or launched (its nodes use the original's buffers, which
/// it does not borrow). Destroyed (`cuGraphDestroy`) when dropped. Not `Send`, not `Sync`.
pub struct ClonedGraph<'o> {
    raw: CUgraph,
    originals: Vec<CUgraphNode>,
    info: GraphInfo,
    clone_nodes: Vec<CUgraphNode>,
    location: (&'static str, u32),
    _original: core::marker::PhantomData<&'o ()>,
}

impl ClonedGraph<'_> {
    /// Clones `graph`.
    ///
    /// # Safety
    /// `graph` is live for `'o` and its context is current.
    pub(crate) unsafe fn of(graph: CUgraph, location: (&'static str, u32)) -> Result<Self> {
        let err = |(call, error): Failed| Error::Graph {
            file: location.0,
            line: location.1,
            source: CudaError { call, error },
        };
        // SAFETY: the caller's contract.
        let (originals, _) = unsafe { describe(graph) }.map_err(err)?;
        let mut raw: CUgraph = core::ptr::null_mut();
        // SAFETY: `graph` is live; `raw` is a valid out-pointer.
        unsafe { sys::cuGraphClone(&mut raw, graph) }
            .result()
            .map_err(|e| err(("cuGraphClone", e)))?;
        let mut c = ClonedGraph {
            raw,
            originals,
            info: GraphInfo::default(),
            clone_nodes: Vec::new(),
            location,
            _original: core::marker::PhantomData,
        };
        // SAFETY: the clone is ours and live (destroyed by `c`'s drop on error).
        let (clone_nodes, info) = unsafe { describe(c.raw) }.map_err(err)?;
        c.clone_nodes = clone_nodes;
        c.info = info;
        Ok(c)
    }

    /// The clone's nodes and edges (see [`GraphInfo`]).
    pub fn info(&self) -> &GraphInfo {
        &self.info
    }

    /// The index, in [`info`](Self::info)'s nodes, of the clone of the original's node
    /// `original` (an index into the original's node list, as
    /// [`GraphCache::nodes`](crate::GraphCache::nodes) gives it): `cuGraphNodeFindInClone`.
    /// `None` when `original` is out of range.
    ///
    /// # Errors
    /// [`Error::Graph`] if the driver call fails.
    pub fn find(&self, original: usize) -> Result<Option<usize>> {
        let Some(&o) = self.originals.get(original) else { return Ok(None) };
        let mut n: CUgraphNode = core::ptr::null_mut();
        // SAFETY: `o` is a node of the original graph, alive while `'o` borrows it; the clone
        // is live.
        unsafe { sys::cuGraphNodeFindInClone(&mut n, o, self.raw) }.result().map_err(|error| {
            let (file, line) = self.location;
            Error::Graph { file, line, source: CudaError { call: "cuGraphNodeFindInClone", error } }
        })?;
        Ok(self.clone_nodes.iter().position(|&c| c == n))
    }
}

impl Drop for ClonedGraph<'_> {
    fn drop(&mut self) {
        // SAFETY: the clone is ours; nothing was instantiated from it.
        let _ = unsafe { raw::graph_destroy(self.raw) };
    }
}

impl core::fmt::Debug for ClonedGraph<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ClonedGraph").field("info", &self.info).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_kinds_and_details_from_the_drivers_structs() {
        assert_eq!(GraphNodeKind::of(T::CU_GRAPH_NODE_TYPE_MEM_ALLOC), GraphNodeKind::MemAlloc);
        assert_eq!(GraphNodeKind::of(T::CU_GRAPH_NODE_TYPE_GRAPH), GraphNodeKind::ChildGraph);
        assert_eq!(
            GraphNodeKind::of(T::CU_GRAPH_NODE_TYPE_CONDITIONAL),
            GraphNodeKind::Conditional
        );
        // SAFETY: all-zero is valid for these plain structs.
        let mut k: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { core::mem::zeroed() };
        (k.gridDimX, k.gridDimY, k.gridDimZ, k.blockDimX, k.sharedMemBytes) = (8, 2, 1, 256, 64);
        let want = NodeDetails::Kernel { grid: (8, 2, 1), block: (256, 0, 0), shared_bytes: 64 };
        assert_eq!(kernel_details(&k), want);
        let c = crate::kind::memcpy::Copy1d {
            src: crate::kind::Memory::Host(core::ptr::null()),
            dst: crate::kind::Memory::Device(0x100),
            src_len: 10,
            dst_len: 10,
            elem_size: 4,
            src_ctx: core::ptr::null_mut(),
            dst_ctx: core::ptr::null_mut(),
            host_buffer: 0,
        };
        let want =
            NodeDetails::Memcpy { width_bytes: 40, height: 1, src_device: false, dst_device: true };
        assert_eq!(memcpy_details(&crate::kind::memcpy::memcpy3d(&c)), want);
        // SAFETY: as above.
        let mut m: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { core::mem::zeroed() };
        (m.elementSize, m.width, m.height, m.pitch, m.value) = (2, 7, 3, 16, 0xbeef);
        let want =
            NodeDetails::Memset { element_size: 2, width: 7, height: 3, pitch: 16, value: 0xbeef };
        assert_eq!(memset_details(&m), want);
    }
}
