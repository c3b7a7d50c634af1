//! The safe layer: building a `CUgraph` from node parameters, instantiating it, updating the
//! exec in place and launching it. [`GraphCache`] owns every driver object it creates.

use core::ffi::c_void;
use core::ptr;
use std::ffi::CString;
use std::path::Path;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUcontext, CUfunction,
    CUgraph, CUgraphExec, CUgraphNode, CUmemorytype,
};

use crate::error::{Call, CudaError, Error, NodeSite, Result};
use crate::node::{LaunchDims, MemcpyParams, Memory, MemsetParams, NodeParams};
use crate::plan::{Plan, infer_edges};
use crate::raw;

/// Most kernel parameters one kernel node may have.
pub const MAX_KERNEL_PARAMS: usize = 64;

/// Counters of a [`GraphCache`]: what each call cost in driver work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls of `graph!` on this cache that launched.
    pub launches: u64,
    /// `CUgraph`s built node by node for a new variant (`cuGraphCreate` + `cuGraphAdd*Node`).
    pub builds: u64,
    /// `cuGraphInstantiateWithFlags` calls (first call of a variant, and re-instantiations).
    pub instantiations: u64,
    /// Calls that reused a cached exec (a variant hit).
    pub hits: u64,
    /// Per-node `cuGraphExec*NodeSetParams` calls.
    pub node_updates: u64,
    /// Nodes whose parameters were unchanged, so nothing was sent.
    pub nodes_unchanged: u64,
    /// Whole-graph `cuGraphExecUpdate` calls (after the driver refused a per-node update).
    pub exec_updates: u64,
    /// Re-instantiations after `cuGraphExecUpdate` was refused too.
    pub reinstantiations: u64,
    /// Variants evicted to stay within the cache bound.
    pub evictions: u64,
}

/// Owns the instantiated graphs of one `graph!` call site, one per structural variant (each
/// combination of taken host `if` branches), and updates them in place between calls.
///
/// Use one cache per call site. The first call of a variant builds a `CUgraph` with explicit
/// `cuGraphAdd*Node` calls and instantiates it; later calls compare every node's parameters with
/// the last ones and send only the changed nodes (`cuGraphExec*NodeSetParams`), then
/// `cuGraphLaunch`. At most [`GraphCache::DEFAULT_MAX_VARIANTS`] variants are kept (least
/// recently used evicted; the driver frees an evicted exec only after its launches complete).
///
/// Thread safety: CUDA graph objects are not internally synchronized; a `GraphCache` is `Send`
/// (it can move to another thread) but not `Sync`, and every use takes `&mut self`.
pub struct GraphCache {
    plan: Option<&'static Plan>,
    variants: Vec<Variant>,
    max_variants: usize,
    clock: u64,
    stats: Stats,
}

// SAFETY: the raw driver handles inside are only used through `&mut self` (or `Drop`), so
// every driver call on them is serialized, which is all CUDA asks of graph objects; the driver
// accepts calls on them from any thread once the context is current, which `run` ensures.
unsafe impl Send for GraphCache {}

struct Variant {
    key: u64,
    ctx: CUcontext,
    graph: CUgraph,
    exec: CUgraphExec,
    nodes: Vec<NodeState>,
    last_use: u64,
}

enum NodeState {
    Absent,
    Kernel { handle: CUgraphNode, params: KernelState },
    Memcpy { handle: CUgraphNode, params: MemcpyParams },
    Memset { handle: CUgraphNode, params: MemsetParams },
}

/// A kernel node's last parameters: the argument bytes live in `args`, each argument at an
/// 8-byte-aligned offset, so `kernelParams` can point into it.
struct KernelState {
    func: CUfunction,
    dims: LaunchDims,
    args: Box<[u64]>,
    offsets: Box<[(u32, u32)]>,
}

impl KernelState {
    fn new(k: &dyn crate::node::KernelNode) -> Self {
        let mut offsets = Vec::with_capacity(k.arg_count());
        let mut words = 0u32;
        k.for_each_arg(&mut |b| {
            offsets.push((words * 8, b.len() as u32));
            words += (b.len() as u32).div_ceil(8);
        });
        let mut s = KernelState {
            func: k.function().cu_function(),
            dims: k.dims(),
            args: vec![0u64; words as usize].into_boxed_slice(),
            offsets: offsets.into_boxed_slice(),
        };
        s.store_args(k);
        s
    }

    fn arg_bytes_mut(&mut self) -> &mut [u8] {
        let len = self.args.len() * 8;
        // SAFETY: `args` is `len` initialized bytes; u8 has no alignment or validity invariant.
        unsafe { core::slice::from_raw_parts_mut(self.args.as_mut_ptr().cast::<u8>(), len) }
    }

    /// Copies `k`'s argument bytes in; returns whether any byte changed.
    fn store_args(&mut self, k: &dyn crate::node::KernelNode) -> bool {
        let offsets = core::mem::take(&mut self.offsets);
        let bytes = self.arg_bytes_mut();
        let mut changed = false;
        let mut i = 0;
        k.for_each_arg(&mut |b| {
            let (off, len) = offsets[i];
            let slot = &mut bytes[off as usize..(off + len) as usize];
            if slot != b {
                slot.copy_from_slice(b);
                changed = true;
            }
            i += 1;
        });
        self.offsets = offsets;
        changed
    }

    /// Calls `f` with the driver's view of these parameters. `kernelParams` points into
    /// `self.args` and is only valid during `f`.
    fn with_params<R>(&mut self, f: impl FnOnce(&CUDA_KERNEL_NODE_PARAMS) -> R) -> R {
        let mut ptrs = [ptr::null_mut::<c_void>(); MAX_KERNEL_PARAMS];
        let base = self.args.as_mut_ptr().cast::<u8>();
        for (p, &(off, _)) in ptrs.iter_mut().zip(self.offsets.iter()) {
            // SAFETY: `off` is within `args` by construction in `new`.
            *p = unsafe { base.add(off as usize) }.cast();
        }
        let d = self.dims;
        let params = CUDA_KERNEL_NODE_PARAMS {
            func: self.func,
            gridDimX: d.grid.0,
            gridDimY: d.grid.1,
            gridDimZ: d.grid.2,
            blockDimX: d.block.0,
            blockDimY: d.block.1,
            blockDimZ: d.block.2,
            sharedMemBytes: d.shared_bytes,
            kernelParams: ptrs.as_mut_ptr(),
            extra: raw::NO_EXTRA,
            kern: ptr::null_mut(),
            ctx: ptr::null_mut(),
        };
        f(&params)
    }
}

fn memory_fields(m: Memory) -> (CUmemorytype, *const c_void, sys::CUdeviceptr) {
    match m {
        Memory::Device(p) => (CUmemorytype::CU_MEMORYTYPE_DEVICE, ptr::null(), p),
        Memory::Host(p) => (CUmemorytype::CU_MEMORYTYPE_HOST, p, 0),
    }
}

/// A 1-D `CUDA_MEMCPY3D`, built field by field (`mem::zeroed` is invalid for it: its memory
/// type enum has no zero value).
fn memcpy3d(p: &MemcpyParams) -> CUDA_MEMCPY3D {
    let bytes = p.src_len * p.elem_size;
    let (src_type, src_host, src_dev) = memory_fields(p.src);
    let (dst_type, dst_host, dst_dev) = memory_fields(p.dst);
    CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: src_host,
        srcDevice: src_dev,
        srcArray: ptr::null_mut(),
        reserved0: ptr::null_mut(),
        srcPitch: bytes,
        srcHeight: 1,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: dst_host.cast_mut(),
        dstDevice: dst_dev,
        dstArray: ptr::null_mut(),
        reserved1: ptr::null_mut(),
        dstPitch: bytes,
        dstHeight: 1,
        WidthInBytes: bytes,
        Height: 1,
        Depth: 1,
    }
}

fn memset_params(p: &MemsetParams) -> CUDA_MEMSET_NODE_PARAMS {
    CUDA_MEMSET_NODE_PARAMS {
        dst: p.dst,
        pitch: p.len * p.elem_size as usize,
        value: p.value,
        elementSize: p.elem_size,
        width: p.len,
        height: 1,
    }
}

/// Checks everything the driver would refuse or get wrong, before any driver call, so that an
/// error leaves nothing enqueued.
fn validate(plan: &'static Plan, nodes: &[Option<NodeParams<'_>>], ctx: CUcontext) -> Result<()> {
    for (i, n) in nodes.iter().enumerate() {
        let site = || NodeSite::of(plan, &plan.nodes[i]);
        match n {
            None => {}
            Some(NodeParams::Kernel(k)) => {
                let d = k.dims();
                let (g, b) = (d.grid, d.block);
                if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
                    return Err(Error::ZeroDims { site: site(), grid: g, block: b });
                }
                if k.arg_count() > MAX_KERNEL_PARAMS {
                    return Err(Error::Node {
                        site: site(),
                        source: CudaError {
                            call: "cuGraphAddKernelNode",
                            error: cudarc::driver::DriverError(
                                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                            ),
                        },
                    });
                }
            }
            Some(NodeParams::Memcpy(c)) => {
                if c.src_len != c.dst_len {
                    return Err(Error::CopyLength { site: site(), src: c.src_len, dst: c.dst_len });
                }
                if c.src_len == 0 || c.elem_size == 0 {
                    return Err(Error::Empty { site: site(), what: "memcpy" });
                }
                if c.src_ctx != ctx || c.dst_ctx != ctx {
                    return Err(Error::WrongContext { site: site() });
                }
            }
            Some(NodeParams::Memset(m)) => {
                if m.len == 0 {
                    return Err(Error::Empty { site: site(), what: "memset" });
                }
                if m.ctx != ctx {
                    return Err(Error::WrongContext { site: site() });
                }
            }
        }
    }
    Ok(())
}

impl Default for GraphCache {
    fn default() -> Self {
        Self::new()
    }
}

impl GraphCache {
    /// Variants kept by [`GraphCache::new`].
    pub const DEFAULT_MAX_VARIANTS: usize = 8;

    /// An empty cache keeping at most [`Self::DEFAULT_MAX_VARIANTS`] variants. Touches no driver.
    pub fn new() -> Self {
        Self::with_max_variants(Self::DEFAULT_MAX_VARIANTS)
    }

    /// An empty cache keeping at most `max` (at least 1) instantiated variants.
    pub fn with_max_variants(max: usize) -> Self {
        GraphCache {
            plan: None,
            variants: Vec::new(),
            max_variants: max.max(1),
            clock: 0,
            stats: Stats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The static plan of the `graph!` call site this cache last ran, if any.
    pub fn plan(&self) -> Option<&'static Plan> {
        self.plan
    }

    /// Number of instantiated variants held.
    pub fn len(&self) -> usize {
        self.variants.len()
    }

    /// `true` when no variant is instantiated yet.
    pub fn is_empty(&self) -> bool {
        self.variants.is_empty()
    }

    /// `cuGraphUpload` of the most recently used variant's exec on `stream`, so that its next
    /// launch does not pay for the upload. Does nothing on an empty cache.
    pub fn upload(&mut self, stream: &CudaStream) -> Result<()> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(());
        };
        let plan = self.plan.expect("a cache with variants has a plan");
        stream.context().bind_to_thread().call("cuCtxSetCurrent")?;
        // SAFETY: exec and stream are live and of the same context (checked when built).
        unsafe { raw::upload(v.exec, stream.cu_stream()) }
            .call("cuGraphUpload")
            .map_err(|source| Error::Graph { file: plan.file, line: plan.line, source })
    }

    /// Writes the driver's own Graphviz DOT (`cuGraphDebugDotPrint`, verbose) of the most recently
    /// used variant to `path`. Returns `false` on an empty cache.
    pub fn debug_dot_print(&self, path: &Path) -> Result<bool> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(false);
        };
        let c = CString::new(path.to_string_lossy().as_bytes()).expect("path without NUL");
        // SAFETY: the graph is live while `self` is.
        unsafe { raw::debug_dot_print(v.graph, c.as_ptr()) }.call("cuGraphDebugDotPrint")?;
        Ok(true)
    }

    /// Builds, updates and launches the graph of one `graph!` call. Called by generated code.
    ///
    /// `nodes[i]` is `Some` for each node of `plan.nodes` present in variant `key`.
    /// On error nothing is enqueued, and the cache stays usable.
    #[doc(hidden)]
    pub fn run(
        &mut self,
        plan: &'static Plan,
        key: u64,
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        debug_assert_eq!(nodes.len(), plan.nodes.len());
        if self.plan.is_some_and(|p| !ptr::eq(p, plan)) {
            // Another call site: its graphs have nothing in common with ours.
            self.clear();
        }
        self.plan = Some(plan);
        let ctx = stream.context().cu_ctx();
        validate(plan, nodes, ctx)?;
        let graph_err = |source| Error::Graph { file: plan.file, line: plan.line, source };
        stream.context().bind_to_thread().call("cuCtxSetCurrent").map_err(graph_err)?;
        self.clock += 1;
        let idx = match self.variants.iter().position(|v| v.key == key && v.ctx == ctx) {
            Some(i) => {
                self.stats.hits += 1;
                self.update(i, plan, nodes)?;
                i
            }
            None => self.insert(plan, key, ctx, nodes)?,
        };
        let v = &mut self.variants[idx];
        v.last_use = self.clock;
        // SAFETY: exec is live and was built in the stream's context; every pointer in it was
        // acquired from a place that the caller keeps borrowed until after this launch, with a
        // guard that records the launch on the buffer's events.
        unsafe { raw::launch(v.exec, stream.cu_stream()) }
            .call("cuGraphLaunch")
            .map_err(graph_err)?;
        self.stats.launches += 1;
        Ok(())
    }

    fn insert(
        &mut self,
        plan: &'static Plan,
        key: u64,
        ctx: CUcontext,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<usize> {
        let (graph, states) = build(plan, nodes, ctx)?;
        self.stats.builds += 1;
        // SAFETY: graph is live.
        let exec = match unsafe { raw::instantiate(graph) } {
            Ok(e) => e,
            Err(error) => {
                // SAFETY: graph is ours and unused.
                let _ = unsafe { raw::graph_destroy(graph) };
                let source = CudaError { call: "cuGraphInstantiateWithFlags", error };
                return Err(Error::Graph { file: plan.file, line: plan.line, source });
            }
        };
        self.stats.instantiations += 1;
        if self.variants.len() >= self.max_variants {
            let lru = (0..self.variants.len()).min_by_key(|&i| self.variants[i].last_use);
            if let Some(i) = lru {
                self.variants.swap_remove(i);
                self.stats.evictions += 1;
            }
        }
        self.variants.push(Variant { key, ctx, graph, exec, nodes: states, last_use: self.clock });
        Ok(self.variants.len() - 1)
    }

    /// The update ladder: unchanged nodes send nothing; changed nodes get per-node set-params;
    /// if the driver refuses one, `cuGraphExecUpdate` from a rebuilt graph; if that is refused,
    /// a new instantiation.
    fn update(
        &mut self,
        i: usize,
        plan: &'static Plan,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        let v = &mut self.variants[i];
        let mut refused = false;
        for (state, new) in v.nodes.iter_mut().zip(nodes) {
            match (state, new) {
                (NodeState::Absent, None) => {}
                (NodeState::Kernel { handle, params }, Some(NodeParams::Kernel(k))) => {
                    let func = k.function().cu_function();
                    let mut changed = params.store_args(*k);
                    changed |= params.func != func || params.dims != k.dims();
                    params.func = func;
                    params.dims = k.dims();
                    if !changed {
                        self.stats.nodes_unchanged += 1;
                    } else if !refused {
                        // SAFETY: handle is a kernel node of v.graph, from which v.exec was
                        // instantiated; params point into `params.args` for the call.
                        let r = params.with_params(|p| unsafe {
                            raw::exec_kernel_set_params(v.exec, *handle, p)
                        });
                        refused = r.is_err();
                        self.stats.node_updates += u64::from(!refused);
                    }
                }
                (NodeState::Memcpy { handle, params }, Some(NodeParams::Memcpy(c))) => {
                    if params == c {
                        self.stats.nodes_unchanged += 1;
                    } else {
                        *params = *c;
                        if !refused {
                            // SAFETY: handle is a memcpy node of the exec's graph.
                            let r = unsafe {
                                raw::exec_memcpy_set_params(v.exec, *handle, &memcpy3d(c), v.ctx)
                            };
                            refused = r.is_err();
                            self.stats.node_updates += u64::from(!refused);
                        }
                    }
                }
                (NodeState::Memset { handle, params }, Some(NodeParams::Memset(m))) => {
                    if params == m {
                        self.stats.nodes_unchanged += 1;
                    } else {
                        *params = *m;
                        if !refused {
                            // SAFETY: handle is a memset node of the exec's graph.
                            let r = unsafe {
                                raw::exec_memset_set_params(
                                    v.exec,
                                    *handle,
                                    &memset_params(m),
                                    v.ctx,
                                )
                            };
                            refused = r.is_err();
                            self.stats.node_updates += u64::from(!refused);
                        }
                    }
                }
                _ => unreachable!("the variant key fixes which nodes are present and their kinds"),
            }
        }
        if refused {
            self.rebuild(i, plan, nodes)?;
        }
        Ok(())
    }

    /// Second and third rungs: whole-exec update from a rebuilt graph, else re-instantiate.
    fn rebuild(
        &mut self,
        i: usize,
        plan: &'static Plan,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        let ctx = self.variants[i].ctx;
        let built = build(plan, nodes, ctx);
        let (graph, states) = match built {
            Ok(b) => b,
            Err(e) => {
                // The exec may hold a mix of old and new parameters: drop the variant.
                self.variants.swap_remove(i);
                return Err(e);
            }
        };
        let v = &mut self.variants[i];
        // SAFETY: both live, same context, same topology (same variant key).
        if unsafe { raw::exec_update(v.exec, graph) }.is_ok() {
            self.stats.exec_updates += 1;
            // The exec keeps its node identities from the graph it was instantiated from; keep
            // that graph and its handles, with the new parameters recorded.
            for (old, new) in v.nodes.iter_mut().zip(states) {
                *old = match (core::mem::replace(old, NodeState::Absent), new) {
                    (NodeState::Kernel { handle, .. }, NodeState::Kernel { params, .. }) => {
                        NodeState::Kernel { handle, params }
                    }
                    (NodeState::Memcpy { handle, .. }, NodeState::Memcpy { params, .. }) => {
                        NodeState::Memcpy { handle, params }
                    }
                    (NodeState::Memset { handle, .. }, NodeState::Memset { params, .. }) => {
                        NodeState::Memset { handle, params }
                    }
                    _ => NodeState::Absent,
                };
            }
            // SAFETY: the temporary graph is ours and no exec refers to it.
            let _ = unsafe { raw::graph_destroy(graph) };
            return Ok(());
        }
        // SAFETY: graph is live.
        match unsafe { raw::instantiate(graph) } {
            Ok(exec) => {
                self.stats.reinstantiations += 1;
                self.stats.instantiations += 1;
                // SAFETY: the old exec and graph are ours; the driver frees an exec that is
                // still running once its launches complete.
                unsafe {
                    let _ = raw::exec_destroy(v.exec);
                    let _ = raw::graph_destroy(v.graph);
                }
                v.exec = exec;
                v.graph = graph;
                v.nodes = states;
                Ok(())
            }
            Err(error) => {
                // SAFETY: graph is ours and unused.
                let _ = unsafe { raw::graph_destroy(graph) };
                self.variants.swap_remove(i);
                let source = CudaError { call: "cuGraphInstantiateWithFlags", error };
                Err(Error::Graph { file: plan.file, line: plan.line, source })
            }
        }
    }

    /// Destroys every variant (the driver finishes launches in flight first).
    pub fn clear(&mut self) {
        self.variants.clear();
        self.plan = None;
    }
}

impl Drop for Variant {
    fn drop(&mut self) {
        // SAFETY: exec and graph are owned by this variant and used by nothing else; an exec
        // still running is freed by the driver when its launches complete.
        unsafe {
            let _ = raw::exec_destroy(self.exec);
            let _ = raw::graph_destroy(self.graph);
        }
    }
}

/// Builds a `CUgraph` of the present nodes with explicit `cuGraphAdd*Node` calls in plan order,
/// with the plan's edges. On error the partial graph is destroyed.
fn build(
    plan: &'static Plan,
    nodes: &[Option<NodeParams<'_>>],
    ctx: CUcontext,
) -> Result<(CUgraph, Vec<NodeState>)> {
    let present: Vec<bool> = nodes.iter().map(Option::is_some).collect();
    let edges = infer_edges(plan.nodes, &present);
    // SAFETY: the context is current (bound by `run`).
    let graph = unsafe { raw::graph_create() }
        .call("cuGraphCreate")
        .map_err(|source| Error::Graph { file: plan.file, line: plan.line, source })?;
    let mut states: Vec<NodeState> = Vec::with_capacity(nodes.len());
    let mut handles: Vec<CUgraphNode> = vec![ptr::null_mut(); nodes.len()];
    let mut deps: Vec<CUgraphNode> = Vec::new();
    let mut e = 0;
    for (j, n) in nodes.iter().enumerate() {
        deps.clear();
        while e < edges.len() && edges[e].1 as usize == j {
            deps.push(handles[edges[e].0 as usize]);
            e += 1;
        }
        let added = match n {
            None => Ok(NodeState::Absent),
            Some(NodeParams::Kernel(k)) => {
                let mut params = KernelState::new(*k);
                // SAFETY: graph live, deps are its nodes, params point into `params.args`.
                params
                    .with_params(|p| unsafe { raw::add_kernel_node(graph, &deps, p) })
                    .map(|handle| NodeState::Kernel { handle, params })
                    .call("cuGraphAddKernelNode_v2")
            }
            Some(NodeParams::Memcpy(c)) => {
                // SAFETY: graph live, deps are its nodes; pointers checked by `validate`.
                unsafe { raw::add_memcpy_node(graph, &deps, &memcpy3d(c), ctx) }
                    .map(|handle| NodeState::Memcpy { handle, params: *c })
                    .call("cuGraphAddMemcpyNode")
            }
            Some(NodeParams::Memset(m)) => {
                // SAFETY: as above.
                unsafe { raw::add_memset_node(graph, &deps, &memset_params(m), ctx) }
                    .map(|handle| NodeState::Memset { handle, params: *m })
                    .call("cuGraphAddMemsetNode")
            }
        };
        match added {
            Ok(s) => {
                if let NodeState::Kernel { handle, .. }
                | NodeState::Memcpy { handle, .. }
                | NodeState::Memset { handle, .. } = &s
                {
                    handles[j] = *handle;
                }
                states.push(s);
            }
            Err(source) => {
                // SAFETY: the graph is ours and unused.
                let _ = unsafe { raw::graph_destroy(graph) };
                return Err(Error::Node { site: NodeSite::of(plan, &plan.nodes[j]), source });
            }
        }
    }
    Ok((graph, states))
}
