//! The safe layer: building a `CUgraph` from node parameters, instantiating it, updating the
//! exec in place and launching it. [`GraphCache`] owns every driver object it creates.

use core::ffi::c_void;
use core::ptr;
use std::ffi::CString;
use std::path::Path;

use std::sync::Arc;

use cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUcontext, CUfunction,
    CUgraph, CUgraphExec, CUgraphNode, CUmemorytype, CUstream,
};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream};

use crate::error::{Call, CudaError, Error, NodeSite, Result};
use crate::node::{Guard, LaunchDims, Memcpy, Memory, Memset, NodeParams};
use crate::plan::{Plan, infer_edges};
use crate::raw::{self, Cuda, Driver};

/// What the cache needs of a call besides its node parameters: where each node comes from
/// (for errors) and the edges among the present nodes. A `graph!` [`Plan`] or a
/// [`GraphBuilder`](crate::GraphBuilder)'s recording.
pub(crate) trait Shape {
    /// Where the graph is made: the `graph!` call, or the builder's `launch` call.
    fn location(&self) -> (&'static str, u32);
    /// The error of a driver call on the graph as a whole.
    fn graph_error(&self, source: CudaError) -> Error {
        let (file, line) = self.location();
        Error::Graph { file, line, source }
    }
    /// Node `i`'s label and source location.
    fn site(&self, i: usize) -> NodeSite;
    /// Edges `(from, to)` among the `present` nodes, sorted by `(to, from)`.
    fn edges(&self, present: &[bool]) -> Vec<(u32, u32)>;
    /// The first node that accesses place `place` (for errors about that place).
    fn place_site(&self, place: usize) -> NodeSite;
}

impl Shape for Plan {
    fn location(&self) -> (&'static str, u32) {
        (self.file, self.line)
    }
    fn site(&self, i: usize) -> NodeSite {
        NodeSite::of(self, &self.nodes[i])
    }
    fn edges(&self, present: &[bool]) -> Vec<(u32, u32)> {
        infer_edges(self.nodes, present)
    }
    fn place_site(&self, place: usize) -> NodeSite {
        let first =
            self.nodes.iter().find(|n| n.accesses.iter().any(|a| a.place as usize == place));
        match first {
            Some(n) => NodeSite::of(self, n),
            None => NodeSite {
                label: "graph",
                text: "graph!",
                file: self.file,
                line: self.line,
                column: 0,
            },
        }
    }
}

/// Which call site a cache's variants belong to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Site {
    /// One `graph!` invocation.
    Plan(&'static Plan),
    /// Graphs of [`GraphBuilder`](crate::GraphBuilder)s, told apart by their topology.
    Builder,
}

impl Site {
    fn same(self, other: Site) -> bool {
        match (self, other) {
            (Site::Plan(a), Site::Plan(b)) => ptr::eq(a, b),
            (Site::Builder, Site::Builder) => true,
            _ => false,
        }
    }
}

/// Most kernel parameters one kernel node may have.
pub const MAX_KERNEL_PARAMS: usize = 16;

/// Counters of a [`GraphCache`]: what each call cost in driver work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls (of `graph!` or [`GraphBuilder::launch`](crate::GraphBuilder::launch)) that
    /// launched a graph.
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
    /// Calls run eagerly, statement by statement ([`Mode::Eager`]).
    pub eager_calls: u64,
    /// `cuStreamWaitEvent` calls that ordered a buffer's own stream (the one it was allocated
    /// on, which frees it) with the graph's stream, before and after a launch; 0 while every
    /// buffer lives on the graph's stream.
    pub stream_waits: u64,
    /// Aliasing checks of the call's buffer address ranges (made when a pointer or length
    /// changed since the last checked call).
    pub alias_checks: u64,
}

/// How a [`GraphCache`] runs each `graph!` call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Build, cache, update and launch a CUDA graph (the default).
    #[default]
    Graph,
    /// The eager oracle: launch the statements one by one on the stream, in source order
    /// (`cuLaunchKernel`, `cuMemcpyAsync`, `cuMemsetD*Async`), with the same arguments. Computes
    /// what the graph means, for tests and debugging; no graph is built or touched.
    Eager,
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
pub struct GraphCache<D: Driver = Cuda> {
    driver: D,
    mode: Mode,
    last_refusal: Option<Error>,
    limits: Option<Limits>,
    site: Option<Site>,
    /// `Error::Graph` of the last call site, for `upload`.
    location: (&'static str, u32),
    variants: Vec<Variant>,
    max_variants: usize,
    clock: u64,
    stats: Stats,
    /// The last [`GraphBuilder`](crate::GraphBuilder)'s emptied vectors, reused by the next.
    pub(crate) recording: crate::builder::Recording,
    /// Buffer ranges `(start, bytes, written)` of the last two calls whose aliasing was checked
    /// (two: buffers swapped between calls alternate between two sets), the older first.
    checked: [Vec<(u64, u64, bool)>; 2],
    /// Scratch of the aliasing check and of the ledger, kept so that calls allocate nothing.
    scratch: Vec<(u64, u64, bool, usize)>,
    own: Vec<CUstream>,
    /// Events of the stream ledger ([`GraphCache::order_before`]), of context `events_ctx`.
    events: Vec<CudaEvent>,
    events_ctx: CUcontext,
}

// SAFETY: the raw driver handles inside are only used through `&mut self` (or `Drop`), so
// every driver call on them is serialized, which is all CUDA asks of graph objects; the driver
// accepts calls on them from any thread once the context is current, which `run` ensures.
// `recording` holds no pointer between calls (a builder empties it before handing it back).
unsafe impl<D: Driver + Send> Send for GraphCache<D> {}

struct Variant {
    key: u64,
    /// A builder variant's topology ([`crate::builder`]), compared in full; empty for `graph!`.
    signature: Box<[u32]>,
    ctx: CUcontext,
    /// Keeps `ctx` alive while the exec exists (`None` only under the test driver).
    _ctx_owner: Option<Arc<CudaContext>>,
    graph: CUgraph,
    exec: CUgraphExec,
    nodes: Vec<NodeState>,
    last_use: u64,
    hits: u64,
}

enum NodeState {
    Absent,
    Kernel { handle: CUgraphNode, params: KernelState },
    Memcpy { handle: CUgraphNode, params: Memcpy },
    Memset { handle: CUgraphNode, params: Memset },
}

impl NodeState {
    /// The node's handle in its graph (`None` when absent from this variant).
    fn handle_mut(&mut self) -> Option<&mut CUgraphNode> {
        match self {
            NodeState::Kernel { handle, .. }
            | NodeState::Memcpy { handle, .. }
            | NodeState::Memset { handle, .. } => Some(handle),
            NodeState::Absent => None,
        }
    }

    fn handle(&self) -> Option<CUgraphNode> {
        match self {
            NodeState::Kernel { handle, .. }
            | NodeState::Memcpy { handle, .. }
            | NodeState::Memset { handle, .. } => Some(*handle),
            NodeState::Absent => None,
        }
    }
}

/// A kernel node's last parameters: the argument bytes live in `args`, each argument at an
/// 8-byte-aligned offset, so `kernelParams` can point into it.
struct KernelState {
    func: CUfunction,
    /// Keeps `func`'s module loaded while this node may run or be updated.
    owner: Option<CudaFunction>,
    /// The function the variant's template graph names for this node (the one it was built
    /// with; per-node updates change only the exec), kept loaded while the template lives.
    template: Option<CudaFunction>,
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
            func: k.function(),
            owner: k.function_owner().cloned(),
            template: k.function_owner().cloned(),
            dims: k.dims(),
            args: vec![0u64; words as usize].into_boxed_slice(),
            offsets: offsets.into_boxed_slice(),
        };
        let stored = s.store_args(k);
        debug_assert!(stored.is_some(), "storage laid out from `k` itself");
        s
    }

    fn arg_bytes_mut(&mut self) -> &mut [u8] {
        let len = self.args.len() * 8;
        // SAFETY: `args` is `len` initialized bytes; u8 has no alignment or validity invariant.
        unsafe { core::slice::from_raw_parts_mut(self.args.as_mut_ptr().cast::<u8>(), len) }
    }

    /// Copies `k`'s argument bytes in; returns whether any byte changed, or `None` when `k`'s
    /// arguments have other sizes than these were stored with (a builder node of another
    /// kernel), after which these hold no usable arguments and need [`Self::new`].
    fn store_args(&mut self, k: &dyn crate::node::KernelNode) -> Option<bool> {
        if k.arg_count() != self.offsets.len() {
            return None;
        }
        let offsets = core::mem::take(&mut self.offsets);
        let bytes = self.arg_bytes_mut();
        let (mut changed, mut same_layout) = (false, true);
        let mut i = 0;
        k.for_each_arg(&mut |b| {
            match offsets.get(i) {
                Some(&(off, len)) if len as usize == b.len() => {
                    let slot = &mut bytes[off as usize..(off + len) as usize];
                    if slot != b {
                        slot.copy_from_slice(b);
                        changed = true;
                    }
                }
                _ => same_layout = false,
            }
            i += 1;
        });
        self.offsets = offsets;
        same_layout.then_some(changed)
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
fn memcpy3d(p: &Memcpy) -> CUDA_MEMCPY3D {
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

fn memset_params(p: &Memset) -> CUDA_MEMSET_NODE_PARAMS {
    CUDA_MEMSET_NODE_PARAMS {
        dst: p.dst,
        pitch: p.len * p.elem_size as usize,
        value: p.value,
        elementSize: p.elem_size,
        width: p.len,
        height: 1,
    }
}

/// One call of [`GraphCache::run_call`]: its nodes' shape, call site and variant.
pub(crate) struct GraphCall<'s> {
    pub(crate) shape: &'s dyn Shape,
    pub(crate) site: Site,
    /// The variant: `graph!`'s if-bits, or a hash of a builder's `signature`.
    pub(crate) key: u64,
    /// A builder variant's topology, compared in full (empty for `graph!`).
    pub(crate) signature: &'s [u32],
}

/// Launch limits of a device, read once per cache and context (`cuDeviceGetAttribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    ctx: CUcontext,
    threads_per_block: u64,
    block: (u32, u32, u32),
    grid: (u32, u32, u32),
    shared_bytes: u32,
}

impl Limits {
    fn of(stream: &CudaStream) -> Result<Limits, CudaError> {
        use sys::CUdevice_attribute as A;
        let c = stream.context();
        let a = |attr| c.attribute(attr).map(|v| v as u32).call("cuDeviceGetAttribute");
        Ok(Limits {
            ctx: c.cu_ctx(),
            threads_per_block: u64::from(a(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
            block: (
                a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ),
            grid: (
                a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ),
            shared_bytes: a(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        })
    }

    /// Why `d` exceeds these limits, if it does.
    fn exceeded(&self, d: &LaunchDims) -> Option<String> {
        let (b, g) = (d.block, d.grid);
        let threads = u64::from(b.0) * u64::from(b.1) * u64::from(b.2);
        let over = |v: (u32, u32, u32), m: (u32, u32, u32)| v.0 > m.0 || v.1 > m.1 || v.2 > m.2;
        if threads > self.threads_per_block {
            Some(format!(
                "block {b:?} has {threads} threads; the device allows {}",
                self.threads_per_block
            ))
        } else if over(b, self.block) {
            Some(format!("block {b:?} exceeds the device's maximum block {:?}", self.block))
        } else if over(g, self.grid) {
            Some(format!("grid {g:?} exceeds the device's maximum grid {:?}", self.grid))
        } else if d.shared_bytes > self.shared_bytes {
            Some(format!(
                "{} bytes of dynamic shared memory; the device allows {} per block",
                d.shared_bytes, self.shared_bytes
            ))
        } else {
            None
        }
    }
}

/// Checks everything the driver would refuse or get wrong, before any driver call, so that an
/// error leaves nothing enqueued: zero or over-limit launch dimensions, copy lengths, empty
/// buffers, buffers of another context; and for a `graph!` call (`handles`: its plan and
/// [`CallId`](crate::__private::CallId)), that every node's buffer handles are its own
/// ([`check_handles`]).
fn validate(
    shape: &dyn Shape,
    nodes: &[Option<NodeParams<'_>>],
    ctx: CUcontext,
    limits: Option<&Limits>,
    handles: Option<(&Plan, u64)>,
) -> Result<()> {
    let mut ops = crate::node::NO_ACCESSES;
    for (i, n) in nodes.iter().enumerate() {
        let site = || shape.site(i);
        let Some(n) = n else { continue };
        match n {
            NodeParams::Kernel(k) => {
                let d = k.dims();
                let (g, b) = (d.grid, d.block);
                if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
                    return Err(Error::ZeroDims { site: site(), grid: g, block: b });
                }
                if let Some(why) = limits.and_then(|l| l.exceeded(&d)) {
                    return Err(Error::LaunchLimit { site: site(), why });
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
            NodeParams::Memcpy(c) => {
                let c = &c.raw;
                if c.src_len != c.dst_len {
                    return Err(Error::CopyLength { site: site(), src: c.src_len, dst: c.dst_len });
                }
                if c.src_len == 0 || c.elem_size == 0 {
                    return Err(Error::Empty { site: site(), what: "memcpy" });
                }
            }
            NodeParams::Memset(m) => {
                if m.raw.len == 0 {
                    return Err(Error::Empty { site: site(), what: "memset" });
                }
            }
        }
        let len = n.accesses(&mut ops);
        let ops = &mut ops[..len];
        if ops.iter().any(|o| o.2 != ctx) {
            return Err(Error::WrongContext { site: site() });
        }
        if let Some((plan, call)) = handles {
            check_handles(plan, i, call, ops)?;
        }
    }
    Ok(())
}

/// Every buffer handle `ops` of node `i` must be one that `graph!` call `call` made for a
/// place the plan lists among that node's accesses, written only where the plan says so, and no
/// written place may appear twice: so the plan's edges, made from those accesses, order every
/// buffer the node touches. A handle of another call or of a builder (kept from elsewhere, or
/// passed through a method of the user's) is refused, naming the node.
fn check_handles(
    plan: &Plan,
    i: usize,
    call: u64,
    ops: &mut [(u64, bool, CUcontext)],
) -> Result<()> {
    let listed = plan.nodes[i].accesses;
    let mut bad = false;
    for (tag, write, _) in ops.iter_mut() {
        match crate::builder::place_of(*tag, call) {
            Some(p) => {
                bad |= !listed.iter().any(|a| a.place == p && (a.write || !*write));
                *tag = u64::from(p);
            }
            None => bad = true,
        }
    }
    // No written place twice in one node (only a method of the user's can do that).
    let twice = !bad
        && ops.len() > 1
        && ops.iter().enumerate().any(|(j, a)| ops[..j].iter().any(|b| b.0 == a.0 && (a.1 || b.1)));
    if !(bad || twice) {
        return Ok(());
    }
    let why = if bad {
        "a buffer handle that this statement's own `&`/`&mut` operands did not borrow in this \
         call (a handle kept from another call or builder)"
    } else {
        "one buffer passed twice to one node, and written: the operands would alias"
    };
    Err(Error::InvalidNode { site: NodeSite::of(plan, &plan.nodes[i]), why: why.into() })
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
        Self::with_driver(Cuda, max)
    }

    /// Builds, updates and launches the graph of one `graph!` call. Called by generated code.
    ///
    /// `nodes[i]` is `Some` for each node of `plan.nodes` present in variant `key`; `guards[p]`
    /// is place `p`'s borrow. Every buffer handle a node carries must be one that `call` made
    /// for a place the plan lists among that node's accesses (else [`Error::InvalidNode`]).
    /// On error nothing is enqueued, and the cache stays usable.
    ///
    /// # Safety
    /// `plan` must be the plan `graph!` generated for these nodes and `guards` the borrows of
    /// its places, in place order, held until this returns. (The handles are checked against the
    /// plan; the plan's edges are trusted to follow from its accesses.)
    #[doc(hidden)]
    pub unsafe fn run(
        &mut self,
        plan: &'static Plan,
        call_id: &crate::__private::CallId,
        key: u64,
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
        guards: &[Guard<'_>],
    ) -> Result<()> {
        if nodes.len() != plan.nodes.len() || guards.len() != plan.places.len() {
            let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
            let source = CudaError { call: "GraphCache::run (node list of another plan)", error };
            return Err(plan.graph_error(source));
        }
        let call = GraphCall { shape: plan, site: Site::Plan(plan), key, signature: &[] };
        self.run_call(call, stream, nodes, guards, Some(call_id.0))
    }

    /// Binds the stream's context, reads the device's launch limits once per context,
    /// validates the call and checks its buffers for aliasing, then runs it eagerly
    /// ([`Mode::Eager`]) or as a graph, ordered with its buffers' own streams.
    pub(crate) fn run_call(
        &mut self,
        call: GraphCall<'_>,
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
        guards: &[Guard<'_>],
        call_id: Option<u64>,
    ) -> Result<()> {
        let graph_err = |source| call.shape.graph_error(source);
        stream.context().bind_to_thread().call("cuCtxSetCurrent").map_err(graph_err)?;
        let ctx = stream.context().cu_ctx();
        if self.limits.is_none_or(|l| l.ctx != ctx) {
            self.limits = Some(Limits::of(stream).map_err(graph_err)?);
        }
        let handles = match (call.site, call_id) {
            (Site::Plan(plan), Some(id)) => Some((plan, id)),
            _ => None,
        };
        validate(call.shape, nodes, ctx, self.limits.as_ref(), handles)?;
        self.check_aliasing(call.shape, guards)?;
        self.order_before(stream, guards).map_err(graph_err)?;
        let r = if self.mode == Mode::Eager {
            self.run_eager(call.shape, stream, nodes)
        } else {
            self.run_validated(call, (ctx, Some(stream.context())), stream.cu_stream(), nodes)
        };
        // After an error part way through an eager call, its earlier nodes are enqueued.
        if r.is_ok() || self.mode == Mode::Eager {
            self.order_after(stream).map_err(graph_err)?;
        }
        r
    }

    /// Fills `self.own` with the streams other than `stream` that own a buffer of the call,
    /// each once.
    fn own_streams(&mut self, stream: &CudaStream, guards: &[Guard<'_>]) {
        self.own.clear();
        for g in guards {
            if let Some(o) = g.own
                && o != stream.cu_stream()
                && !self.own.contains(&o)
            {
                self.own.push(o);
            }
        }
    }

    /// `n` reusable events of `stream`'s context.
    fn ledger_events(&mut self, stream: &CudaStream, n: usize) -> Result<(), CudaError> {
        let ctx = stream.context();
        if self.events_ctx != ctx.cu_ctx() {
            self.events.clear();
            self.events_ctx = ctx.cu_ctx();
        }
        while self.events.len() < n {
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
            self.events.push(ctx.new_event(Some(flags)).call("cuEventCreate")?);
        }
        Ok(())
    }

    /// The ledger, before the launch: `stream` waits for the work already on each buffer's own
    /// stream (`cuEventRecord` there, `cuStreamWaitEvent` here). Every graph use of a buffer
    /// leaves its completion on the buffer's own stream ([`Self::order_after`]), so a graph
    /// waits for every earlier graph use of its buffers, readers included, on any stream and
    /// whatever cudarc's event mode. Nothing to do while every buffer lives on `stream`.
    fn order_before(&mut self, stream: &CudaStream, guards: &[Guard<'_>]) -> Result<(), CudaError> {
        self.own_streams(stream, guards);
        if self.own.is_empty() {
            return Ok(());
        }
        self.ledger_events(stream, self.own.len() + 1)?;
        for (&o, e) in self.own.iter().zip(&self.events[1..]) {
            // SAFETY: `o` is alive (the borrowed buffer holds it) and of the context of
            // `stream`, which is current (`run_call`), as is the event.
            unsafe { raw::record_event(e.cu_event(), o) }.call("cuEventRecord")?;
            unsafe { raw::wait_event(stream.cu_stream(), e.cu_event()) }
                .call("cuStreamWaitEvent")?;
            self.stats.stream_waits += 1;
        }
        Ok(())
    }

    /// The ledger, after the launch: each buffer's own stream waits for the graph
    /// (`cuEventRecord` on `stream`, `cuStreamWaitEvent` there). cudarc frees a buffer on its
    /// own stream (`cuMemFreeAsync`, or after synchronizing it), so a buffer dropped right
    /// after the call is freed after the graph, whichever context object allocated it and
    /// whatever cudarc's stream mode is by then; later work on the own stream waits too. Uses the
    /// own streams and events that [`Self::order_before`] found and made for this call.
    fn order_after(&mut self, stream: &CudaStream) -> Result<(), CudaError> {
        if self.own.is_empty() {
            return Ok(());
        }
        let done = self.events[0].cu_event();
        // SAFETY: as in `order_before`.
        unsafe { raw::record_event(done, stream.cu_stream()) }.call("cuEventRecord")?;
        for &o in &self.own {
            unsafe { raw::wait_event(o, done) }.call("cuStreamWaitEvent")?;
            self.stats.stream_waits += 1;
        }
        Ok(())
    }

    /// The eager oracle (see [`Mode::Eager`]), on a validated call: a driver error part way
    /// names the node and leaves the earlier statements enqueued, as eager launches do.
    fn run_eager(
        &mut self,
        shape: &dyn Shape,
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        let s = stream.cu_stream();
        for (i, n) in nodes.iter().enumerate() {
            let site = || shape.site(i);
            // SAFETY: parameters validated; pointers come from places the caller keeps
            // borrowed until after this call, with guards recording these uses on `stream`.
            let r = match n {
                None => continue,
                Some(NodeParams::Kernel(k)) => KernelState::new(*k)
                    .with_params(|p| unsafe { raw::launch_kernel(p, s) })
                    .call("cuLaunchKernel"),
                Some(NodeParams::Memcpy(c)) => {
                    let c = &c.raw;
                    let addr = |m: Memory| match m {
                        Memory::Device(p) => p,
                        Memory::Host(p) => p as sys::CUdeviceptr,
                    };
                    let bytes = c.src_len * c.elem_size;
                    unsafe { raw::memcpy_async(addr(c.dst), addr(c.src), bytes, s) }
                        .call("cuMemcpyAsync")
                }
                Some(NodeParams::Memset(m)) => {
                    unsafe { raw::memset_async(&memset_params(&m.raw), s) }.call("cuMemsetD32Async")
                }
            };
            r.map_err(|source| Error::Node { site: site(), source })?;
        }
        self.stats.eager_calls += 1;
        Ok(())
    }

    /// `cuGraphUpload` of the most recently used variant's exec on `stream`, so that its next
    /// launch does not pay for the upload. Does nothing on an empty cache.
    pub fn upload(&mut self, stream: &CudaStream) -> Result<()> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(());
        };
        let (file, line) = self.location;
        if stream.context().cu_ctx() != v.ctx {
            let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT);
            let source = CudaError { call: "cuGraphUpload (stream of another context)", error };
            return Err(Error::Graph { file, line, source });
        }
        stream.context().bind_to_thread().call("cuCtxSetCurrent")?;
        // SAFETY: exec and stream are live and of the same context (checked when built).
        unsafe { self.driver.upload(v.exec, stream.cu_stream()) }
            .call("cuGraphUpload")
            .map_err(|source| Error::Graph { file, line, source })
    }

    /// Writes the driver's own Graphviz DOT (`cuGraphDebugDotPrint`, verbose) of the most recently
    /// used variant to `path`. Returns `false` on an empty cache.
    pub fn debug_dot_print(&self, path: &Path) -> Result<bool> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(false);
        };
        let refuse = |why| {
            let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
            CudaError { call: why, error }
        };
        // The path's own bytes: a lossy conversion would write another file.
        #[cfg(unix)]
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
        #[cfg(not(unix))]
        let bytes = path
            .to_str()
            .ok_or_else(|| refuse("cuGraphDebugDotPrint (path is not UTF-8)"))?
            .as_bytes();
        let c =
            CString::new(bytes).map_err(|_| refuse("cuGraphDebugDotPrint (path contains NUL)"))?;
        // SAFETY: the graph is live while `self` is.
        unsafe { raw::debug_dot_print(v.graph, c.as_ptr()) }.call("cuGraphDebugDotPrint")?;
        Ok(true)
    }
}

impl<D: Driver> GraphCache<D> {
    /// Errors when two places of the call overlap in memory and one of them is written: the
    /// graph would have no edge between their nodes. Borrows prove places distinct for buffers
    /// made by safe code; this catches views of one allocation that cudarc hands out more than
    /// once. Checked only when the ranges differ from both of the last two checked calls'.
    pub(crate) fn check_aliasing(&mut self, shape: &dyn Shape, guards: &[Guard<'_>]) -> Result<()> {
        let same = |c: &Vec<(u64, u64, bool)>| {
            c.len() == guards.len()
                && c.iter().zip(guards).all(|(c, g)| *c == (g.start, g.bytes, g.write))
        };
        if self.checked.iter().any(same) {
            return Ok(());
        }
        self.stats.alias_checks += 1;
        let mut order = core::mem::take(&mut self.scratch);
        order.clear();
        order.extend(
            guards
                .iter()
                .enumerate()
                .filter(|(_, g)| g.bytes > 0)
                .map(|(p, g)| (g.start, g.start.saturating_add(g.bytes), g.write, p)),
        );
        order.sort_unstable();
        let overlap = order.iter().enumerate().find_map(|(i, a)| {
            let mut later = order[i + 1..].iter().take_while(|b| b.0 < a.1);
            later.find(|b| a.2 || b.2).map(|b| (a.3.min(b.3), a.3.max(b.3)))
        });
        self.scratch = order;
        if let Some((first, second)) = overlap {
            let (first, second) = (shape.place_site(first), shape.place_site(second));
            return Err(Error::Aliasing { first, second });
        }
        // The new set replaces the older one.
        self.checked.swap(0, 1);
        self.checked[1].clear();
        self.checked[1].extend(guards.iter().map(|g| (g.start, g.bytes, g.write)));
        Ok(())
    }

    /// How later calls run: [`Mode::Graph`] (default) or the eager oracle [`Mode::Eager`].
    /// Switching keeps the cached graphs.
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// The most recent driver refusal the update ladder recovered from, naming the node: a
    /// per-node `cuGraphExec*NodeSetParams` ([`Error::Node`]) answered by a whole-exec update,
    /// or a `cuGraphExecUpdate` ([`Error::UpdateRefused`]) answered by a new instantiation.
    /// `None` while every update was accepted.
    pub fn last_refusal(&self) -> Option<&Error> {
        self.last_refusal.as_ref()
    }

    /// The current [`Mode`].
    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn with_driver(driver: D, max: usize) -> Self {
        GraphCache {
            driver,
            mode: Mode::Graph,
            last_refusal: None,
            limits: None,
            site: None,
            location: ("", 0),
            variants: Vec::new(),
            max_variants: max.max(1),
            clock: 0,
            stats: Stats::default(),
            recording: crate::builder::Recording::new(0),
            checked: [Vec::new(), Vec::new()],
            scratch: Vec::new(),
            own: Vec::new(),
            events: Vec::new(),
            events_ctx: ptr::null_mut(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The static plan of the `graph!` call site this cache last ran, if any.
    pub fn plan(&self) -> Option<&'static Plan> {
        match self.site {
            Some(Site::Plan(p)) => Some(p),
            _ => None,
        }
    }

    /// Number of instantiated variants held.
    pub fn len(&self) -> usize {
        self.variants.len()
    }

    /// `true` when no variant is instantiated yet.
    pub fn is_empty(&self) -> bool {
        self.variants.is_empty()
    }

    /// Hits per cached variant, as `(variant key, hits)`, most recently used first. For `graph!`
    /// the key has bit `i` set when the `i`-th host `if` of the body took its `then` branch; for
    /// a [`GraphBuilder`](crate::GraphBuilder) it is a hash of the variant's topology.
    pub fn variant_hits(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<_> = self.variants.iter().map(|v| (v.last_use, v.key, v.hits)).collect();
        v.sort_unstable_by_key(|x| core::cmp::Reverse(x.0));
        v.into_iter().map(|(_, k, h)| (k, h)).collect()
    }

    /// [`GraphCache::run`] of a `graph!` plan with the context already current.
    #[cfg(test)]
    pub(crate) fn run_raw(
        &mut self,
        plan: &'static Plan,
        key: u64,
        ctx: (CUcontext, Option<&Arc<CudaContext>>),
        stream: CUstream,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        let call = GraphCall { shape: plan, site: Site::Plan(plan), key, signature: &[] };
        self.run_shape(call, ctx, stream, nodes)
    }

    /// Validates, builds or updates, and launches one call, with the context already current
    /// (the mock driver's entry: no stream ledger, no aliasing check).
    #[cfg(test)]
    pub(crate) fn run_shape(
        &mut self,
        call: GraphCall<'_>,
        ctx: (CUcontext, Option<&Arc<CudaContext>>),
        stream: CUstream,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        validate(call.shape, nodes, ctx.0, self.limits.as_ref(), None)?;
        self.run_validated(call, ctx, stream, nodes)
    }

    /// Builds or updates, and launches, one validated call, with the context already current.
    fn run_validated(
        &mut self,
        call: GraphCall<'_>,
        (ctx, owner): (CUcontext, Option<&Arc<CudaContext>>),
        stream: CUstream,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        let GraphCall { shape, site, key, signature } = call;
        if self.site.is_some_and(|s| !s.same(site)) {
            // Another call site: its graphs have nothing in common with ours.
            self.clear();
        }
        self.site = Some(site);
        self.location = shape.location();
        self.clock += 1;
        let found = self
            .variants
            .iter()
            .position(|v| v.key == key && v.ctx == ctx && *v.signature == *signature);
        let idx = match found {
            Some(i) => {
                self.stats.hits += 1;
                self.variants[i].hits += 1;
                if self.update(i, shape, nodes)? {
                    i
                } else {
                    // Only a misused hidden `GraphCache::run` (a key that does not fix the
                    // nodes' presence and kinds) gets here: drop that variant, build anew.
                    self.stats.hits -= 1;
                    self.remove(i);
                    self.insert(shape, (key, signature), (ctx, owner), nodes)?
                }
            }
            None => self.insert(shape, (key, signature), (ctx, owner), nodes)?,
        };
        let v = &mut self.variants[idx];
        v.last_use = self.clock;
        // SAFETY: exec is live and was built in the stream's context; every pointer in it was
        // acquired from a place that the caller keeps borrowed until after this launch, with a
        // guard that records the launch on the buffer's events.
        unsafe { self.driver.launch(v.exec, stream) }
            .call("cuGraphLaunch")
            .map_err(|source| shape.graph_error(source))?;
        self.stats.launches += 1;
        Ok(())
    }

    fn insert(
        &mut self,
        shape: &dyn Shape,
        (key, signature): (u64, &[u32]),
        (ctx, owner): (CUcontext, Option<&Arc<CudaContext>>),
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<usize> {
        let (graph, states) = build(&mut self.driver, shape, nodes, ctx)?;
        self.stats.builds += 1;
        let exec = match self.instantiate(shape, graph) {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: graph is ours and unused.
                unsafe { self.driver.graph_destroy(graph) };
                return Err(e);
            }
        };
        if self.variants.len() >= self.max_variants {
            let lru = (0..self.variants.len()).min_by_key(|&i| self.variants[i].last_use);
            if let Some(i) = lru {
                self.remove(i);
                self.stats.evictions += 1;
            }
        }
        let v = Variant {
            key,
            signature: signature.into(),
            ctx,
            _ctx_owner: owner.cloned(),
            graph,
            exec,
            nodes: states,
            last_use: self.clock,
            hits: 0,
        };
        self.variants.push(v);
        Ok(self.variants.len() - 1)
    }

    fn instantiate(&mut self, shape: &dyn Shape, graph: CUgraph) -> Result<CUgraphExec> {
        // SAFETY: graph is live and its context current.
        let exec = unsafe { self.driver.instantiate(graph) }
            .call("cuGraphInstantiateWithFlags")
            .map_err(|source| shape.graph_error(source))?;
        self.stats.instantiations += 1;
        Ok(exec)
    }

    /// Destroys variant `i`. The driver frees an exec still in flight once its launches complete
    /// (`cuGraphExecDestroy`), so this never waits and never cuts a launch short.
    fn remove(&mut self, i: usize) {
        let v = self.variants.swap_remove(i);
        // SAFETY: exec and graph are this variant's, used by nothing else from now on.
        unsafe {
            self.driver.exec_destroy(v.exec);
            self.driver.graph_destroy(v.graph);
        }
    }

    /// The update ladder: unchanged nodes send nothing; changed nodes get per-node set-params;
    /// if the driver refuses one, `cuGraphExecUpdate` from a rebuilt graph; if that is refused,
    /// a new instantiation. Returns `false`, part way, when `nodes` does not have the variant's
    /// node kinds (the variant must then be dropped).
    fn update(
        &mut self,
        i: usize,
        shape: &dyn Shape,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<bool> {
        if self.variants[i].nodes.len() != nodes.len() {
            return Ok(false);
        }
        let v = &mut self.variants[i];
        let driver = &mut self.driver;
        // Set once the driver refuses a node; later changed nodes are recorded but not sent,
        // since the rebuild below sends everything.
        let mut refused = false;
        let mut refusal: Option<(usize, &'static str, cudarc::driver::DriverError)> = None;
        for (j, (state, new)) in v.nodes.iter_mut().zip(nodes).enumerate() {
            // SAFETY (every send): the handle is a node of the kind of its state in the graph
            // v.exec was instantiated from, in context v.ctx; kernelParams point into
            // `params.args` for the call.
            let sent = match (state, new) {
                (NodeState::Absent, None) => continue,
                (NodeState::Kernel { handle, params }, Some(NodeParams::Kernel(k))) => {
                    let mut changed = match params.store_args(*k) {
                        Some(changed) => changed,
                        // Another parameter list (a builder node of another kernel).
                        None => {
                            let template = params.template.take();
                            *params = KernelState::new(*k);
                            params.template = template;
                            true
                        }
                    };
                    if params.func != k.function() {
                        params.func = k.function();
                        params.owner = k.function_owner().cloned();
                        changed = true;
                    }
                    changed |= params.dims != k.dims();
                    params.dims = k.dims();
                    changed.then(|| {
                        refused
                            || params
                                .with_params(|p| unsafe { driver.set_kernel(v.exec, *handle, p) })
                                .map_err(|e| {
                                    refusal = Some((j, "cuGraphExecKernelNodeSetParams_v2", e))
                                })
                                .is_err()
                    })
                }
                (NodeState::Memcpy { handle, params }, Some(NodeParams::Memcpy(c))) => {
                    let c = &c.raw;
                    let changed = params != c;
                    *params = *c;
                    changed.then(|| {
                        refused
                            || unsafe { driver.set_memcpy(v.exec, *handle, &memcpy3d(c), v.ctx) }
                                .map_err(|e| {
                                    refusal = Some((j, "cuGraphExecMemcpyNodeSetParams", e))
                                })
                                .is_err()
                    })
                }
                (NodeState::Memset { handle, params }, Some(NodeParams::Memset(m))) => {
                    let m = &m.raw;
                    let changed = params != m;
                    *params = *m;
                    changed.then(|| {
                        refused
                            || unsafe {
                                driver.set_memset(v.exec, *handle, &memset_params(m), v.ctx)
                            }
                            .map_err(|e| refusal = Some((j, "cuGraphExecMemsetNodeSetParams", e)))
                            .is_err()
                    })
                }
                _ => return Ok(false),
            };
            // `sent`: None = unchanged; Some(false) = updated; Some(true) = refused or not sent.
            match sent {
                None => self.stats.nodes_unchanged += 1,
                Some(false) => self.stats.node_updates += 1,
                Some(true) => refused = true,
            }
        }
        if let Some((j, call, error)) = refusal {
            let site = shape.site(j);
            self.last_refusal = Some(Error::Node { site, source: CudaError { call, error } });
        }
        if refused {
            self.rebuild(i, shape, nodes)?;
        }
        Ok(true)
    }

    /// Second and third rungs: whole-exec update from a rebuilt graph, else re-instantiate.
    /// If both fail the variant is dropped (its exec may hold a mix of old and new parameters)
    /// and the next call builds it anew.
    fn rebuild(
        &mut self,
        i: usize,
        shape: &dyn Shape,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        let ctx = self.variants[i].ctx;
        let (graph, states) = match build(&mut self.driver, shape, nodes, ctx) {
            Ok(b) => b,
            Err(e) => {
                self.remove(i);
                return Err(e);
            }
        };
        let exec = self.variants[i].exec;
        // SAFETY: both live, same context, same topology (same variant key).
        let updated = unsafe { self.driver.exec_update(exec, graph) };
        if let Err((error, info)) = updated {
            let j = states.iter().position(|s| s.handle() == Some(info.errorNode)).unwrap_or(0);
            self.last_refusal = Some(Error::UpdateRefused {
                site: shape.site(j),
                result: info.result,
                source: CudaError { call: "cuGraphExecUpdate_v2", error },
            });
        }
        if updated.is_ok() {
            self.stats.exec_updates += 1;
            // The exec keeps its node identities from the graph it was instantiated from; keep
            // that graph and its handles, with the new parameters recorded.
            for (old, mut new) in self.variants[i].nodes.iter_mut().zip(states) {
                if let (Some(h), Some(slot)) = (old.handle(), new.handle_mut()) {
                    *slot = h;
                }
                // The kept graph still names the functions it was built with.
                if let (NodeState::Kernel { params: o, .. }, NodeState::Kernel { params: n, .. }) =
                    (&mut *old, &mut new)
                {
                    n.template = o.template.take();
                }
                *old = new;
            }
            // SAFETY: the temporary graph is ours and no exec refers to it.
            unsafe { self.driver.graph_destroy(graph) };
            return Ok(());
        }
        match self.instantiate(shape, graph) {
            Ok(exec) => {
                self.stats.reinstantiations += 1;
                let v = &mut self.variants[i];
                let (old_exec, old_graph) = (v.exec, v.graph);
                v.exec = exec;
                v.graph = graph;
                v.nodes = states;
                // SAFETY: the old exec and graph are ours and replaced; an exec in flight is
                // freed by the driver once its launches complete.
                unsafe {
                    self.driver.exec_destroy(old_exec);
                    self.driver.graph_destroy(old_graph);
                }
                Ok(())
            }
            Err(e) => {
                // SAFETY: graph is ours and unused.
                unsafe { self.driver.graph_destroy(graph) };
                self.remove(i);
                Err(e)
            }
        }
    }

    /// Destroys every variant (`cuGraphExecDestroy` and `cuGraphDestroy`; the driver frees an
    /// exec still in flight once its launches complete). Dropping the cache does the same.
    pub fn clear(&mut self) {
        while !self.variants.is_empty() {
            self.remove(self.variants.len() - 1);
        }
        self.site = None;
    }
}

impl<D: Driver> Drop for GraphCache<D> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Builds a `CUgraph` of the present nodes with explicit `cuGraphAdd*Node` calls in plan order,
/// with the plan's edges. On error the partial graph is destroyed.
fn build(
    driver: &mut impl Driver,
    shape: &dyn Shape,
    nodes: &[Option<NodeParams<'_>>],
    ctx: CUcontext,
) -> Result<(CUgraph, Vec<NodeState>)> {
    let present: Vec<bool> = nodes.iter().map(Option::is_some).collect();
    let edges = shape.edges(&present);
    // SAFETY: the context is current (bound by `run`).
    let graph = unsafe { driver.graph_create() }
        .call("cuGraphCreate")
        .map_err(|source| shape.graph_error(source))?;
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
                    .with_params(|p| unsafe { driver.add_kernel(graph, &deps, p) })
                    .map(|handle| NodeState::Kernel { handle, params })
                    .call("cuGraphAddKernelNode_v2")
            }
            Some(NodeParams::Memcpy(c)) => {
                let c = &c.raw;
                // SAFETY: graph live, deps are its nodes; pointers checked by `validate`.
                unsafe { driver.add_memcpy(graph, &deps, &memcpy3d(c), ctx) }
                    .map(|handle| NodeState::Memcpy { handle, params: *c })
                    .call("cuGraphAddMemcpyNode")
            }
            Some(NodeParams::Memset(m)) => {
                let m = &m.raw;
                // SAFETY: as above.
                unsafe { driver.add_memset(graph, &deps, &memset_params(m), ctx) }
                    .map(|handle| NodeState::Memset { handle, params: *m })
                    .call("cuGraphAddMemsetNode")
            }
        };
        match added {
            Ok(s) => {
                if let Some(h) = s.handle() {
                    handles[j] = h;
                }
                states.push(s);
            }
            Err(source) => {
                // SAFETY: the graph is ours and unused.
                unsafe { driver.graph_destroy(graph) };
                return Err(Error::Node { site: shape.site(j), source });
            }
        }
    }
    Ok((graph, states))
}

#[cfg(test)]
pub(crate) mod tests {
    //! The ladder's decisions against a mock driver: which driver calls each change causes.
    use super::*;
    use crate::node::{KernelNode, MemcpyParams, Memory, MemsetParams};
    use crate::plan::{Access, NodeKind, PlanNode};
    use cudarc::driver::DriverError;
    use cudarc::driver::sys::CUresult;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[derive(Default)]
    pub(crate) struct Log {
        calls: Vec<String>,
        next: usize,
        live_graphs: Vec<usize>,
        live_execs: Vec<usize>,
        refuse_set: bool,
        refuse_update: bool,
        /// Argument bytes the driver read through `kernelParams` in each set-params call.
        set_args: Vec<Vec<Vec<u8>>>,
    }

    #[derive(Clone, Default)]
    pub(crate) struct Mock(Rc<RefCell<Log>>);

    const REFUSED: DriverError = DriverError(CUresult::CUDA_ERROR_INVALID_VALUE);

    impl Mock {
        fn handle<T>(&self) -> *mut T {
            let mut l = self.0.borrow_mut();
            l.next += 1;
            (l.next * 16) as *mut T
        }
        fn log(&self, s: impl Into<String>) {
            self.0.borrow_mut().calls.push(s.into());
        }
        pub(crate) fn calls(&self) -> Vec<String> {
            std::mem::take(&mut self.0.borrow_mut().calls)
        }
    }

    fn read_args(p: &CUDA_KERNEL_NODE_PARAMS, sizes: &[usize]) -> Vec<Vec<u8>> {
        sizes
            .iter()
            .enumerate()
            // SAFETY: the cache passes one valid pointer per argument, each to `size` bytes.
            .map(|(i, &n)| unsafe {
                core::slice::from_raw_parts((*p.kernelParams.add(i)).cast::<u8>(), n).to_vec()
            })
            .collect()
    }

    impl Driver for Mock {
        unsafe fn graph_create(&mut self) -> Result<CUgraph, DriverError> {
            let g: CUgraph = self.handle();
            self.0.borrow_mut().live_graphs.push(g as usize);
            self.log("graph_create");
            Ok(g)
        }
        unsafe fn graph_destroy(&mut self, graph: CUgraph) {
            self.0.borrow_mut().live_graphs.retain(|&g| g != graph as usize);
            self.log("graph_destroy");
        }
        unsafe fn add_kernel(
            &mut self,
            _: CUgraph,
            deps: &[CUgraphNode],
            _: &CUDA_KERNEL_NODE_PARAMS,
        ) -> Result<CUgraphNode, DriverError> {
            self.log(format!("add_kernel deps={}", deps.len()));
            Ok(self.handle())
        }
        unsafe fn add_memcpy(
            &mut self,
            _: CUgraph,
            deps: &[CUgraphNode],
            _: &CUDA_MEMCPY3D,
            _: CUcontext,
        ) -> Result<CUgraphNode, DriverError> {
            self.log(format!("add_memcpy deps={}", deps.len()));
            Ok(self.handle())
        }
        unsafe fn add_memset(
            &mut self,
            _: CUgraph,
            deps: &[CUgraphNode],
            _: &CUDA_MEMSET_NODE_PARAMS,
            _: CUcontext,
        ) -> Result<CUgraphNode, DriverError> {
            self.log(format!("add_memset deps={}", deps.len()));
            Ok(self.handle())
        }
        unsafe fn instantiate(&mut self, _: CUgraph) -> Result<CUgraphExec, DriverError> {
            let e: CUgraphExec = self.handle();
            self.0.borrow_mut().live_execs.push(e as usize);
            self.log("instantiate");
            Ok(e)
        }
        unsafe fn exec_destroy(&mut self, exec: CUgraphExec) {
            self.0.borrow_mut().live_execs.retain(|&e| e != exec as usize);
            self.log("exec_destroy");
        }
        unsafe fn set_kernel(
            &mut self,
            _: CUgraphExec,
            _: CUgraphNode,
            p: &CUDA_KERNEL_NODE_PARAMS,
        ) -> Result<(), DriverError> {
            self.log(format!("set_kernel grid={}", p.gridDimX));
            let args = read_args(p, &[4, 8]);
            self.0.borrow_mut().set_args.push(args);
            if self.0.borrow().refuse_set { Err(REFUSED) } else { Ok(()) }
        }
        unsafe fn set_memcpy(
            &mut self,
            _: CUgraphExec,
            _: CUgraphNode,
            p: &CUDA_MEMCPY3D,
            _: CUcontext,
        ) -> Result<(), DriverError> {
            self.log(format!("set_memcpy bytes={}", p.WidthInBytes));
            Ok(())
        }
        unsafe fn set_memset(
            &mut self,
            _: CUgraphExec,
            _: CUgraphNode,
            p: &CUDA_MEMSET_NODE_PARAMS,
            _: CUcontext,
        ) -> Result<(), DriverError> {
            self.log(format!("set_memset value={}", p.value));
            Ok(())
        }
        unsafe fn exec_update(
            &mut self,
            _: CUgraphExec,
            _: CUgraph,
        ) -> Result<(), (DriverError, sys::CUgraphExecUpdateResultInfo)> {
            self.log("exec_update");
            let info = sys::CUgraphExecUpdateResultInfo {
                result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
                errorNode: ptr::null_mut(),
                errorFromNode: ptr::null_mut(),
            };
            if self.0.borrow().refuse_update { Err((REFUSED, info)) } else { Ok(()) }
        }
        unsafe fn launch(&mut self, _: CUgraphExec, _: CUstream) -> Result<(), DriverError> {
            self.log("launch");
            Ok(())
        }
        unsafe fn upload(&mut self, _: CUgraphExec, _: CUstream) -> Result<(), DriverError> {
            self.log("upload");
            Ok(())
        }
    }

    /// A kernel node with a `u32` scalar and a `u64` pointer argument.
    struct K {
        func: usize,
        grid: u32,
        scalar: u32,
        ptr: u64,
        ctx: CUcontext,
        /// The pointer's handle tag (see `check_accesses`).
        tag: u64,
    }

    impl KernelNode for K {
        fn function(&self) -> CUfunction {
            self.func as CUfunction
        }
        fn dims(&self) -> LaunchDims {
            LaunchDims { grid: (self.grid, 1, 1), block: (32, 1, 1), shared_bytes: 0 }
        }
        fn arg_count(&self) -> usize {
            2
        }
        fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
            f(&self.scalar.to_ne_bytes());
            f(&self.ptr.to_ne_bytes());
        }
        fn accesses(&self, out: &mut crate::node::Accesses) -> usize {
            out[0] = (self.tag, true, self.ctx);
            1
        }
    }
    impl crate::node::sealed::Sealed for K {}

    pub(crate) const CTX: CUcontext = 0x1000 as CUcontext;
    pub(crate) const STREAM: CUstream = 0x2000 as CUstream;

    fn k(scalar: u32, ptr: u64) -> K {
        K { func: 0x10, grid: 4, scalar, ptr, ctx: CTX, tag: 0 }
    }

    fn copy(len: usize) -> MemcpyParams<'static> {
        MemcpyParams::recorded(Memcpy {
            src: Memory::Device(0x100),
            dst: Memory::Device(0x200),
            src_len: len,
            dst_len: len,
            elem_size: 4,
            src_ctx: CTX,
            dst_ctx: CTX,
        })
    }

    fn memset(value: u32) -> MemsetParams<'static> {
        MemsetParams::recorded(Memset { dst: 0x300, len: 8, elem_size: 4, value, ctx: CTX })
    }

    /// Plan: n0 kernel writes place 0; n1 kernel reads 0 writes 1; n2 copy reads 1 writes 2;
    /// n3 memset writes 3 (independent); n4 (conditional) kernel writes 2.
    fn plan() -> &'static Plan {
        fn node(kind: NodeKind, accesses: Vec<Access>, condition: &'static str) -> PlanNode {
            PlanNode {
                label: "n",
                text: "stmt",
                kind,
                line: 7,
                column: 9,
                accesses: Box::leak(accesses.into_boxed_slice()),
                after: &[],
                condition,
            }
        }
        let (r, w) = (|p| Access { place: p, write: false }, |p| Access { place: p, write: true });
        let nodes = vec![
            node(NodeKind::Kernel("a"), vec![w(0)], ""),
            node(NodeKind::Kernel("b"), vec![r(0), w(1)], ""),
            node(NodeKind::Memcpy, vec![r(1), w(2)], ""),
            node(NodeKind::Memset, vec![w(3)], ""),
            node(NodeKind::Kernel("c"), vec![w(2)], "flag"),
        ];
        Box::leak(Box::new(Plan {
            file: "mock.rs",
            line: 5,
            places: &["a", "b", "c", "d"],
            nodes: Box::leak(nodes.into_boxed_slice()),
            conditions: 1,
        }))
    }

    fn run(
        cache: &mut GraphCache<Mock>,
        plan: &'static Plan,
        k0: &K,
        k1: &K,
        c: MemcpyParams<'static>,
        m: MemsetParams<'static>,
        k4: Option<&K>,
    ) -> Result<()> {
        let nodes = [
            Some(NodeParams::Kernel(k0)),
            Some(NodeParams::Kernel(k1)),
            Some(NodeParams::Memcpy(c)),
            Some(NodeParams::Memset(m)),
            k4.map(|k| NodeParams::Kernel(k as &dyn KernelNode)),
        ];
        cache.run_raw(plan, u64::from(k4.is_some()), (CTX, None), STREAM, &nodes)
    }

    fn setup() -> (Mock, GraphCache<Mock>, &'static Plan) {
        let mock = Mock::default();
        let cache = GraphCache::with_driver(mock.clone(), 8);
        (mock, cache, plan())
    }

    #[test]
    fn a_key_that_does_not_fix_the_nodes_builds_anew_instead_of_panicking() {
        let (_mock, mut cache, plan) = setup();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        // Key 0 again (as a misused hidden `GraphCache::run` could pass), with node 4 present.
        let (k0, k1, k4) = (k(1, 0xa0), k(2, 0xb0), k(3, 0xc0));
        let nodes = [
            Some(NodeParams::Kernel(&k0 as &dyn KernelNode)),
            Some(NodeParams::Kernel(&k1)),
            Some(NodeParams::Memcpy(copy(4))),
            Some(NodeParams::Memset(memset(0))),
            Some(NodeParams::Kernel(&k4)),
        ];
        cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes).unwrap();
        let s = cache.stats();
        assert_eq!((s.builds, s.launches, cache.len()), (2, 2, 1), "{s:?}");
    }

    #[test]
    fn first_call_builds_with_inferred_edges_then_launches() {
        let (mock, mut cache, plan) = setup();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(
            mock.calls(),
            [
                "graph_create",
                "add_kernel deps=0",
                "add_kernel deps=1",
                "add_memcpy deps=1",
                "add_memset deps=0",
                "instantiate",
                "launch"
            ]
        );
        let s = cache.stats();
        assert_eq!((s.builds, s.instantiations, s.launches, s.hits), (1, 1, 1, 0));
    }

    #[test]
    fn unchanged_call_sends_nothing_but_the_launch() {
        let (mock, mut cache, plan) = setup();
        for _ in 0..3 {
            run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        }
        let calls = mock.calls();
        assert_eq!(calls[calls.len() - 2..], ["launch", "launch"]);
        assert_eq!(calls.iter().filter(|c| c.starts_with("set_")).count(), 0);
        let s = cache.stats();
        assert_eq!((s.hits, s.nodes_unchanged, s.node_updates), (2, 8, 0));
    }

    #[test]
    fn each_change_class_sends_one_set_params_for_its_node_only() {
        let (mock, mut cache, plan) = setup();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        mock.calls();
        // scalar of node 1
        run(&mut cache, plan, &k(1, 0xa0), &k(3, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
        // pointer of node 0
        run(&mut cache, plan, &k(1, 0xc0), &k(3, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
        // grid of node 0
        let mut g = k(1, 0xc0);
        g.grid = 8;
        run(&mut cache, plan, &g, &k(3, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=8", "launch"]);
        // function of node 0
        let mut f = k(1, 0xc0);
        f.func = 0x20;
        run(&mut cache, plan, &f, &k(3, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
        // copy length, memset value
        run(&mut cache, plan, &f, &k(3, 0xb0), copy(2), memset(9), None).unwrap();
        assert_eq!(mock.calls(), ["set_memcpy bytes=8", "set_memset value=9", "launch"]);
        let s = cache.stats();
        assert_eq!((s.builds, s.instantiations, s.node_updates), (1, 1, 6));
        assert_eq!((s.exec_updates, s.reinstantiations), (0, 0));
    }

    #[test]
    fn set_params_sends_the_values_of_this_call() {
        let (mock, mut cache, plan) = setup();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        run(&mut cache, plan, &k(1, 0xa0), &k(77, 0xdead), copy(4), memset(0), None).unwrap();
        let args = mock.0.borrow().set_args.clone();
        assert_eq!(args, [vec![77u32.to_ne_bytes().to_vec(), 0xdeadu64.to_ne_bytes().to_vec()]]);
    }

    #[test]
    fn refused_set_params_falls_back_to_exec_update() {
        let (mock, mut cache, plan) = setup();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        mock.calls();
        mock.0.borrow_mut().refuse_set = true;
        run(&mut cache, plan, &k(5, 0xa0), &k(6, 0xb0), copy(4), memset(0), None).unwrap();
        let calls = mock.calls();
        // one refused set, no second set, a rebuilt graph, one exec update, the temporary destroyed
        assert_eq!(calls.iter().filter(|c| c.starts_with("set_kernel")).count(), 1);
        assert!(calls.contains(&"exec_update".to_string()), "{calls:?}");
        assert!(!calls.contains(&"instantiate".to_string()), "{calls:?}");
        assert_eq!(calls.last().unwrap(), "launch");
        let s = cache.stats();
        assert_eq!((s.exec_updates, s.reinstantiations, s.instantiations), (1, 0, 1));
        assert_eq!(mock.0.borrow().live_graphs.len(), 1);
        let refusal = cache.last_refusal().expect("recorded").to_string();
        assert!(
            refusal.starts_with(
                "node `n` (`stmt`) at mock.rs:7:9: cuGraphExecKernelNodeSetParams_v2 returned"
            ),
            "{refusal}"
        );
        // the recorded parameters are the new ones: the same call again changes nothing
        mock.0.borrow_mut().refuse_set = false;
        run(&mut cache, plan, &k(5, 0xa0), &k(6, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(mock.calls(), ["launch"]);
    }

    #[test]
    fn refused_exec_update_reinstantiates() {
        let (mock, mut cache, plan) = setup();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        {
            let mut l = mock.0.borrow_mut();
            l.refuse_set = true;
            l.refuse_update = true;
        }
        mock.calls();
        run(&mut cache, plan, &k(5, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        let calls = mock.calls();
        let tail: Vec<&str> = calls.iter().rev().take(4).rev().map(String::as_str).collect();
        assert_eq!(tail, ["instantiate", "exec_destroy", "graph_destroy", "launch"]);
        let s = cache.stats();
        assert_eq!((s.exec_updates, s.reinstantiations, s.instantiations), (0, 1, 2));
        let refusal = cache.last_refusal().expect("recorded");
        assert!(matches!(refusal, Error::UpdateRefused { .. }), "{refusal}");
        assert!(refusal.to_string().contains("PARAMETERS_CHANGED"), "{refusal}");
        let l = mock.0.borrow();
        assert_eq!((l.live_graphs.len(), l.live_execs.len()), (1, 1));
    }

    #[test]
    fn two_variants_alternating_build_twice_then_hit() {
        let (mock, mut cache, plan) = setup();
        let k4 = k(4, 0xe0);
        for i in 0..1000 {
            let c = (i % 2 == 0).then_some(&k4);
            run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), c).unwrap();
        }
        let s = cache.stats();
        assert_eq!((s.builds, s.instantiations, s.hits, s.launches), (2, 2, 998, 1000));
        assert_eq!(s.node_updates, 0);
        let mut hits = cache.variant_hits();
        hits.sort_unstable();
        assert_eq!(hits, [(0, 499), (1, 499)]);
        assert!(mock.calls().iter().filter(|c| c.starts_with("add_kernel")).count() == 5);
    }

    #[test]
    fn least_recently_used_variant_is_evicted_at_the_bound() {
        let mock = Mock::default();
        let mut cache = GraphCache::with_driver(mock.clone(), 1);
        let plan = plan();
        let k4 = k(4, 0xe0);
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), Some(&k4)).unwrap();
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.stats().evictions, 1);
        assert_eq!(mock.0.borrow().live_execs.len(), 1);
    }

    #[test]
    fn invalid_input_is_refused_before_any_driver_call_and_cache_stays_usable() {
        let (mock, mut cache, plan) = setup();
        let mut bad = copy(4);
        bad.raw.dst_len = 3;
        let e = run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), bad, memset(0), None).unwrap_err();
        assert!(matches!(e, Error::CopyLength { src: 4, dst: 3, .. }));
        assert_eq!(
            e.to_string(),
            "node `n` (`stmt`) at mock.rs:7:9: copy length mismatch: source has 4 elements, destination has 3"
        );
        assert!(mock.calls().is_empty());
        let mut zero = k(1, 0xa0);
        zero.grid = 0;
        let e = run(&mut cache, plan, &zero, &k(2, 0xb0), copy(4), memset(0), None).unwrap_err();
        assert!(matches!(e, Error::ZeroDims { grid: (0, 1, 1), .. }), "{e}");
        assert!(mock.calls().is_empty());
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(cache.stats().launches, 1);
    }

    #[test]
    fn over_limit_dims_and_foreign_buffers_are_refused_before_any_driver_call() {
        let (mock, mut cache, plan) = setup();
        cache.limits = Some(Limits {
            ctx: CTX,
            threads_per_block: 1024,
            block: (1024, 1024, 64),
            grid: (i32::MAX as u32, 65535, 65535),
            shared_bytes: 232_448,
        });
        let mut big = k(1, 0xa0);
        big.grid = u32::MAX;
        let e = run(&mut cache, plan, &big, &k(2, 0xb0), copy(4), memset(0), None).unwrap_err();
        assert!(matches!(e, Error::LaunchLimit { .. }), "{e}");
        assert!(e.to_string().contains("exceeds the device's maximum grid"), "{e}");
        let mut foreign = k(1, 0xa0);
        foreign.ctx = 0x9999 as CUcontext;
        let e = run(&mut cache, plan, &k(1, 0xa0), &foreign, copy(4), memset(0), None).unwrap_err();
        assert!(matches!(e, Error::WrongContext { .. }), "{e}");
        let mut c = copy(4);
        c.raw.dst_ctx = 0x9999 as CUcontext;
        let e = run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), c, memset(0), None).unwrap_err();
        assert!(matches!(e, Error::WrongContext { .. }), "{e}");
        assert!(mock.calls().is_empty());
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        assert_eq!(cache.stats().launches, 1);
    }

    /// `check_handles` of every present node.
    fn check_accesses(plan: &Plan, call: u64, nodes: &[Option<NodeParams<'_>>]) -> Result<()> {
        let mut ops = crate::node::NO_ACCESSES;
        for (i, n) in nodes.iter().enumerate() {
            if let Some(n) = n {
                let len = n.accesses(&mut ops);
                check_handles(plan, i, call, &mut ops[..len])?;
            }
        }
        Ok(())
    }

    #[test]
    fn handles_must_be_this_calls_places_that_the_plan_lists_for_the_node() {
        let plan = plan();
        let call = 5;
        // A kernel writing the place `place` (the mock kernel's pointer is written).
        let tagged = |place| {
            let mut x = k(1, 0xa0);
            x.tag = crate::builder::tag(call, place);
            x
        };
        let mut c = copy(4);
        (c.src_tag, c.dst_tag) = (crate::builder::tag(call, 1), crate::builder::tag(call, 2));
        let mut m = memset(0);
        m.dst_tag = crate::builder::tag(call, 3);
        let check = |k0: &K, k1: &K, c: MemcpyParams<'_>| {
            let nodes = [
                Some(NodeParams::Kernel(k0)),
                Some(NodeParams::Kernel(k1)),
                Some(NodeParams::Memcpy(c)),
                Some(NodeParams::Memset(m)),
                None,
            ];
            check_accesses(plan, call, &nodes)
        };
        // n0 writes place 0, n1 writes place 1 (and reads 0), the copy reads 1 and writes 2.
        check(&tagged(0), &tagged(1), c).unwrap();
        let refused = |e: Error, line_label: &str| match e {
            Error::InvalidNode { site, why } => {
                assert_eq!(site.label, line_label);
                assert!(why.contains("did not borrow in this call"), "{why}");
            }
            e => panic!("expected InvalidNode, got {e:?}"),
        };
        // A place the node does not list; a write where the node only reads place 0.
        refused(check(&tagged(1), &tagged(1), c).unwrap_err(), "n");
        refused(check(&tagged(0), &tagged(0), c).unwrap_err(), "n");
        // A handle of another call, of a builder-numbered id, and an untagged one.
        let mut other = tagged(0);
        other.tag = crate::builder::tag(call + 1, 0);
        refused(check(&other, &tagged(1), c).unwrap_err(), "n");
        other.tag = 0;
        refused(check(&other, &tagged(1), c).unwrap_err(), "n");
        // One written place passed twice to a node (through a method of the user's).
        let mut both = copy(4);
        (both.src_tag, both.dst_tag) = (crate::builder::tag(call, 2), crate::builder::tag(call, 2));
        match check(&tagged(0), &tagged(1), both).unwrap_err() {
            Error::InvalidNode { why, .. } => assert!(why.contains("passed twice"), "{why}"),
            e => panic!("expected InvalidNode, got {e:?}"),
        }
        // The copy's sides swapped: it would write place 1, which it only reads.
        let mut swapped = c;
        (swapped.src_tag, swapped.dst_tag) = (c.dst_tag, c.src_tag);
        refused(check(&tagged(0), &tagged(1), swapped).unwrap_err(), "n");
    }

    #[test]
    fn overlapping_places_with_a_write_are_refused_naming_both_statements() {
        let (_, mut cache, plan) = setup();
        let g = |start, bytes, write| Guard::for_test(start, bytes, write);
        // Four places: disjoint; then place 3 inside place 1, read-only both: allowed.
        let ok = [g(0x100, 64, true), g(0x200, 64, false), g(0x300, 64, true), g(0x210, 8, false)];
        cache.check_aliasing(plan, &ok).unwrap();
        assert_eq!(cache.stats().alias_checks, 1);
        cache.check_aliasing(plan, &ok).unwrap();
        assert_eq!(cache.stats().alias_checks, 1, "unchanged ranges are not checked again");
        // Place 3 overlaps written place 2 by one byte.
        let bad = [g(0x100, 64, true), g(0x200, 64, false), g(0x300, 64, true), g(0x33f, 8, false)];
        match cache.check_aliasing(plan, &bad).unwrap_err() {
            Error::Aliasing { first, second } => {
                // The first statements using places 2 and 3: the copy (node 2), the memset (node 3).
                assert_eq!((first.label, second.label), ("n", "n"));
                assert_eq!(first.text, "stmt");
            }
            e => panic!("expected Aliasing, got {e:?}"),
        }
        // A refused call is checked again next time, and empty buffers never overlap.
        assert!(cache.check_aliasing(plan, &bad).is_err());
        assert_eq!(cache.stats().alias_checks, 3);
        // Two sets alternating (buffers swapped between calls) are checked once each.
        let swapped =
            [g(0x200, 64, true), g(0x100, 64, false), g(0x300, 64, true), g(0x110, 8, false)];
        for _ in 0..3 {
            cache.check_aliasing(plan, &ok).unwrap();
            cache.check_aliasing(plan, &swapped).unwrap();
        }
        assert_eq!(cache.stats().alias_checks, 4);
        let empty = [g(0x100, 0, true), g(0x100, 64, true), g(0x300, 64, true), g(0x400, 8, false)];
        cache.check_aliasing(plan, &empty).unwrap();
    }

    #[test]
    fn block_and_shared_memory_limits() {
        let l = Limits {
            ctx: CTX,
            threads_per_block: 1024,
            block: (1024, 1024, 64),
            grid: (i32::MAX as u32, 65535, 65535),
            shared_bytes: 232_448,
        };
        let d = |block, shared_bytes| LaunchDims { grid: (1, 1, 1), block, shared_bytes };
        assert_eq!(l.exceeded(&d((1024, 1, 1), 0)), None);
        assert_eq!(l.exceeded(&d((32, 32, 1), 232_448)), None);
        let e = l.exceeded(&d((64, 32, 1), 0)).unwrap();
        assert_eq!(e, "block (64, 32, 1) has 2048 threads; the device allows 1024");
        assert!(l.exceeded(&d((1, 1, 128), 0)).unwrap().contains("maximum block"));
        let e = l.exceeded(&d((32, 1, 1), 300_000)).unwrap();
        assert_eq!(e, "300000 bytes of dynamic shared memory; the device allows 232448 per block");
    }

    #[test]
    fn cache_is_send() {
        fn send<T: Send>() {}
        send::<GraphCache>();
        // Not `Sync`: tests/tests/ui/cache-is-not-sync.rs
    }

    #[test]
    fn dropping_the_cache_destroys_every_exec_and_graph() {
        let (mock, mut cache, plan) = setup();
        let k4 = k(4, 0xe0);
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), Some(&k4)).unwrap();
        assert_eq!(mock.0.borrow().live_execs.len(), 2);
        drop(cache);
        let l = mock.0.borrow();
        assert!(l.live_execs.is_empty() && l.live_graphs.is_empty());
    }
}
