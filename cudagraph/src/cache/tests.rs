//! The ladder's decisions against a mock driver: which driver calls each change causes.
use super::validate::check_handles;
use super::*;
use crate::kind::memcpy::Copy1d;
use crate::kind::memset::Set1d;
use crate::kind::{KernelNode, LaunchDims, MemcpyParams, Memory, MemsetParams};
use crate::plan::{Access, EdgeKind, NodeKind, PlanNode};
use cudarc::driver::DriverError;
use cudarc::driver::sys::{
    CUDA_KERNEL_NODE_PARAMS_v3, CUfunction, CUgraphEdgeData, CUgraphNode, CUgraphNodeParams,
    CUgraphNodeType, CUresult,
};
use std::cell::RefCell;
use std::rc::Rc;

/// A kernel node's arguments as the mock read them (see [`read_args`]).
type Args = Vec<Vec<u8>>;

/// An exec's kernel node in the mock: the node handles that name it, and its arguments.
type ExecKernel = (Vec<usize>, Args);

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
    /// The same for each kernel node added.
    add_args: Vec<Vec<Vec<u8>>>,
    /// Whether `add_node` reads kernel arguments into `add_args` (only for `K` kernels).
    read_args: bool,
    /// `(width bytes, height, src pitch, dst pitch)` of each memcpy node added, and
    /// `(element size, width, height, pitch)` of each memset node.
    add_copies: Vec<(usize, usize, usize, usize)>,
    add_sets: Vec<(u32, usize, usize, usize)>,
    /// The context of each kernel node added (`ctx` of its parameters) and of each memcpy node
    /// (`copyCtx`), in order.
    add_ctx: Vec<(&'static str, usize)>,
    /// [`Mock::track`]: each graph's kernel nodes (handle, arguments read as a `u32` and a
    /// `u64`) in the order added; each exec's (the handles that name each node: its graph's,
    /// and those of the graphs it was updated from), as instantiated, set and updated; and the
    /// exec launched or uploaded last.
    track: bool,
    graph_kernels: Vec<(usize, Vec<(usize, Args)>)>,
    exec_kernels: Vec<(usize, Vec<ExecKernel>)>,
    last_exec: usize,
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
    /// Keeps what each exec's kernel nodes hold (every kernel added must take a `u32` and a
    /// `u64` first, as [`K`] and the builder tests' kernels do): see
    /// [`Self::launched_kernels`].
    pub(crate) fn track(&self) {
        self.0.borrow_mut().track = true;
    }
    /// The arguments (as a `u32` and a `u64`) of each kernel set-params call since the last
    /// time this was asked, in order.
    pub(crate) fn take_set_args(&self) -> Vec<Vec<Vec<u8>>> {
        std::mem::take(&mut self.0.borrow_mut().set_args)
    }
    /// The arguments (as a `u32` and a `u64`) of each kernel node of the exec launched (or
    /// uploaded) last, in the order its graph added them, as instantiation, set-params calls
    /// and whole-exec updates left them: what the GPU would run.
    pub(crate) fn launched_kernels(&self) -> Vec<Vec<Vec<u8>>> {
        let l = self.0.borrow();
        let e = l.exec_kernels.iter().find(|e| e.0 == l.last_exec).expect("a launched exec");
        e.1.iter().map(|n| n.1.clone()).collect()
    }
}

fn read_args(p: &CUDA_KERNEL_NODE_PARAMS_v3, sizes: &[usize]) -> Vec<Vec<u8>> {
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
    unsafe fn add_node(
        &mut self,
        graph: CUgraph,
        deps: &[CUgraphNode],
        edges: &[CUgraphEdgeData],
        p: &mut CUgraphNodeParams,
    ) -> Result<CUgraphNode, DriverError> {
        let kind = match p.type_ {
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => "kernel",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY => "memcpy",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET => "memset",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH => "graph",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL => "conditional",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                // The driver returns the allocation's address in `dptr`.
                let dptr = 0x7000_0000 + self.handle::<u8>() as u64 * 0x1000;
                // SAFETY: the cache fills the union member of the node's type.
                let a = unsafe { &mut p.__bindgen_anon_1.alloc };
                a.dptr = dptr;
                let at = a.poolProps.location.type_;
                self.log(format!(
                    "add_mem_alloc bytes={} dptr={dptr:#x} deps={}",
                    a.bytesize,
                    deps.len()
                ));
                assert_eq!(at, sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE);
                return Ok(self.handle());
            }
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => {
                // SAFETY: as above.
                let d = unsafe { p.__bindgen_anon_1.free.dptr };
                self.log(format!("add_mem_free dptr={d:#x} deps={}", deps.len()));
                return Ok(self.handle());
            }
            _ => "other",
        };
        assert!(edges.is_empty() || edges.len() == deps.len(), "one edge datum per dependency");
        let programmatic = edges.iter().filter(|e| **e == crate::raw::PROGRAMMATIC_EDGE).count();
        assert!(programmatic == 0 || kind == "kernel", "a programmatic edge into a {kind} node");
        if p.type_ == CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY {
            // SAFETY: as above.
            let c = unsafe { &p.__bindgen_anon_1.memcpy.copyParams };
            let row = (c.WidthInBytes, c.Height, c.srcPitch, c.dstPitch);
            self.0.borrow_mut().add_copies.push(row);
            // SAFETY: as above.
            let ctx = unsafe { p.__bindgen_anon_1.memcpy.copyCtx };
            self.0.borrow_mut().add_ctx.push(("memcpy", ctx as usize));
        }
        if p.type_ == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            // SAFETY: as above.
            let ctx = unsafe { p.__bindgen_anon_1.kernel.ctx };
            self.0.borrow_mut().add_ctx.push(("kernel", ctx as usize));
        }
        if p.type_ == CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET {
            // SAFETY: as above.
            let m = unsafe { &p.__bindgen_anon_1.memset };
            let row = (m.elementSize, m.width, m.height, m.pitch);
            self.0.borrow_mut().add_sets.push(row);
        }
        // Only when a test asks: its kernels are this file's `K` (a u32 and a u64 argument);
        // other tests add kernels of other parameter lists through this mock.
        if p.type_ == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL && self.0.borrow().read_args {
            // SAFETY: as above.
            let args = read_args(unsafe { &p.__bindgen_anon_1.kernel }, &[4, 8]);
            self.0.borrow_mut().add_args.push(args);
        }
        if programmatic == 0 {
            self.log(format!("add_{kind} deps={}", deps.len()));
        } else {
            self.log(format!("add_{kind} deps={} programmatic={programmatic}", deps.len()));
        }
        let node: CUgraphNode = self.handle();
        if p.type_ == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL && self.0.borrow().track {
            // SAFETY: as above; tracked kernels take a `u32` and a `u64` first.
            let args = read_args(unsafe { &p.__bindgen_anon_1.kernel }, &[4, 8]);
            let mut l = self.0.borrow_mut();
            let at = match l.graph_kernels.iter().position(|g| g.0 == graph as usize) {
                Some(at) => at,
                None => {
                    l.graph_kernels.push((graph as usize, Vec::new()));
                    l.graph_kernels.len() - 1
                }
            };
            l.graph_kernels[at].1.push((node as usize, args));
        }
        Ok(node)
    }
    unsafe fn instantiate(
        &mut self,
        graph: CUgraph,
        flags: u64,
        upload: CUstream,
    ) -> Result<CUgraphExec, DriverError> {
        let e: CUgraphExec = self.handle();
        self.0.borrow_mut().live_execs.push(e as usize);
        if self.0.borrow().track {
            let mut l = self.0.borrow_mut();
            let g = l.graph_kernels.iter().find(|g| g.0 == graph as usize);
            let nodes =
                g.map_or(Vec::new(), |g| g.1.iter().map(|(n, a)| (vec![*n], a.clone())).collect());
            l.exec_kernels.push((e as usize, nodes));
        }
        if flags == 0 {
            self.log("instantiate");
        } else {
            self.log(format!("instantiate flags={flags} upload={}", upload as usize));
        }
        Ok(e)
    }
    unsafe fn exec_destroy(&mut self, exec: CUgraphExec) {
        self.0.borrow_mut().live_execs.retain(|&e| e != exec as usize);
        self.0.borrow_mut().exec_kernels.retain(|e| e.0 != exec as usize);
        self.log("exec_destroy");
    }
    unsafe fn set_node(
        &mut self,
        exec: CUgraphExec,
        node: CUgraphNode,
        p: &mut CUgraphNodeParams,
    ) -> Result<(), DriverError> {
        // SAFETY: the cache fills the union member of the node's type.
        match p.type_ {
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => {
                let k = unsafe { &p.__bindgen_anon_1.kernel };
                self.log(format!("set_kernel grid={}", k.gridDimX));
                let args = read_args(k, &[4, 8]);
                self.0.borrow_mut().set_args.push(args.clone());
                if self.0.borrow().refuse_set {
                    return Err(REFUSED);
                }
                let mut l = self.0.borrow_mut();
                if l.track {
                    let e = l.exec_kernels.iter_mut().find(|e| e.0 == exec as usize);
                    let e = e.expect("set-params on an exec the mock made");
                    let n = e.1.iter_mut().find(|n| n.0.contains(&(node as usize)));
                    n.expect("set-params on a kernel node of the exec").1 = args;
                }
                Ok(())
            }
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY => {
                let c = unsafe { &p.__bindgen_anon_1.memcpy };
                self.log(format!("set_memcpy bytes={}", c.copyParams.WidthInBytes));
                Ok(())
            }
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET => {
                let m = unsafe { &p.__bindgen_anon_1.memset };
                self.log(format!("set_memset value={}", m.value));
                Ok(())
            }
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH => {
                self.log("set_graph");
                Ok(())
            }
            _ => Err(REFUSED),
        }
    }
    unsafe fn exec_update(
        &mut self,
        exec: CUgraphExec,
        graph: CUgraph,
    ) -> Result<(), (DriverError, sys::CUgraphExecUpdateResultInfo)> {
        self.log("exec_update");
        let info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
            errorNode: ptr::null_mut(),
            errorFromNode: ptr::null_mut(),
        };
        if self.0.borrow().refuse_update {
            return Err((REFUSED, info));
        }
        let mut l = self.0.borrow_mut();
        if l.track {
            // The exec takes the graph's parameters, node for node (kernels in the order added);
            // the graph's node handles name the exec's nodes too.
            let g = l.graph_kernels.iter().find(|g| g.0 == graph as usize);
            let g = g.map_or(Vec::new(), |g| g.1.clone());
            let e = l.exec_kernels.iter_mut().find(|e| e.0 == exec as usize);
            let e = e.expect("an update of an exec the mock made");
            assert_eq!(e.1.len(), g.len(), "an update from a graph of other kernel nodes");
            for (n, (h, a)) in e.1.iter_mut().zip(g) {
                n.0.push(h);
                n.1 = a;
            }
        }
        Ok(())
    }
    unsafe fn launch(&mut self, exec: CUgraphExec, _: CUstream) -> Result<(), DriverError> {
        self.log("launch");
        self.0.borrow_mut().last_exec = exec as usize;
        Ok(())
    }
    unsafe fn upload(&mut self, exec: CUgraphExec, _: CUstream) -> Result<(), DriverError> {
        self.log("upload");
        self.0.borrow_mut().last_exec = exec as usize;
        Ok(())
    }
    unsafe fn conditional_handle(
        &mut self,
        _: CUgraph,
        _: cudarc::driver::sys::CUcontext,
        default: u32,
    ) -> Result<u64, DriverError> {
        self.log(format!("conditional_handle default={default}"));
        Ok(self.handle::<*mut u8>() as u64)
    }
    unsafe fn enable_peer_access(
        &mut self,
        ctx: CUcontext,
        peer: CUcontext,
    ) -> Result<bool, DriverError> {
        self.log(format!("enable_peer_access {:#x}->{:#x}", ctx as usize, peer as usize));
        Ok(true)
    }
}

/// A kernel node with a `u32` scalar and a `u64` pointer argument.
#[derive(Clone)]
pub(super) struct K {
    func: usize,
    grid: u32,
    pub(super) scalar: u32,
    pub(super) ptr: u64,
    pub(super) ctx: CUcontext,
    /// The pointer's handle tag (see `check_accesses`).
    tag: u64,
    /// Declared `#[programmatic]`.
    programmatic: bool,
    /// The context its function was loaded in (`None`: the call's).
    on: Option<CUcontext>,
    /// Whether `ptr` is declared a pointer (else a plain `u64` scalar).
    ptr_is_pointer: bool,
}

impl KernelNode for K {
    fn pointer_args(&self) -> u16 {
        if self.ptr_is_pointer { 0b10 } else { 0 }
    }
    fn function(&self) -> CUfunction {
        self.func as CUfunction
    }
    fn dims(&self) -> LaunchDims {
        LaunchDims { grid: (self.grid, 1, 1), block: (32, 1, 1), shared_bytes: 0 }
    }
    fn programmatic(&self) -> bool {
        self.programmatic
    }
    fn arg_count(&self) -> usize {
        2
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        f(&self.scalar.to_ne_bytes());
        f(&self.ptr.to_ne_bytes());
    }
    fn accesses(&self, out: &mut crate::operand::Accesses) -> usize {
        out[0] = (self.tag, true, self.ctx);
        1
    }
    fn node_context(&self) -> Option<CUcontext> {
        self.on
    }
    fn pack(&self, out: &mut crate::kind::kernel::Pack<'_>) -> bool {
        let d = self.dims();
        let f = self.function();
        // The layout: both arguments with a word of their form first (0xf), as below, but the
        // address one 8 plain bytes when it is not a pointer argument (as `KernelArgs` would
        // lay out a `u64`), so that the words tell the two apart.
        let layout = if self.ptr_is_pointer { 0xff } else { 0x8f };
        crate::kind::kernel::pack_head(out, f, Some(self.on), &d, self.programmatic, 2, layout);
        // As `KernelArgs::pack`: length, bytes, context of each argument.
        for w in [4, u64::from(self.scalar), 0, 8, self.ptr, self.ctx as u64] {
            out.push(w);
        }
        out.push_handle(self.tag, true);
        true
    }
}
impl crate::operand::sealed::Sealed for K {}

pub(crate) const CTX: CUcontext = 0x1000 as CUcontext;
pub(crate) const STREAM: CUstream = 0x2000 as CUstream;

pub(super) fn k(scalar: u32, ptr: u64) -> K {
    K {
        func: 0x10,
        grid: 4,
        scalar,
        ptr,
        ctx: CTX,
        tag: 0,
        programmatic: false,
        on: None,
        ptr_is_pointer: true,
    }
}

/// [`k`] of a kernel declared `#[programmatic]`.
fn pk(scalar: u32, ptr: u64) -> K {
    K { programmatic: true, ..k(scalar, ptr) }
}

fn copy(len: usize) -> MemcpyParams<'static> {
    MemcpyParams::recorded(Copy1d {
        src: Memory::Device(0x100),
        dst: Memory::Device(0x200),
        src_len: len,
        dst_len: len,
        elem_size: 4,
        src_ctx: CTX,
        dst_ctx: CTX,
        host_buffer: 0,
    })
}

fn memset(value: u32) -> MemsetParams<'static> {
    MemsetParams::recorded(Set1d { dst: 0x300, len: 8, elem_size: 4, value, ctx: CTX })
}

/// A node of a mock plan (label `n`, text `stmt`, at mock.rs:7:9), taken under the host
/// condition `condition` ("" for always).
pub(super) fn plan_node(
    kind: NodeKind,
    accesses: Vec<Access>,
    condition: &'static str,
) -> PlanNode {
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

/// A mock plan (mock.rs:5) of `nodes` over `places` places, each named `p`, with `conditions`
/// host conditions and no device bodies.
pub(super) fn leak_plan(nodes: Vec<PlanNode>, places: usize, conditions: u32) -> &'static Plan {
    let places: Vec<&'static str> = (0..places).map(|_| "p").collect();
    Box::leak(Box::new(Plan {
        file: "mock.rs",
        line: 5,
        places: Box::leak(places.into_boxed_slice()),
        nodes: Box::leak(nodes.into_boxed_slice()),
        conditions,
        bodies: &[],
    }))
}

/// Plan: n0 kernel writes place 0; n1 kernel reads 0 writes 1; n2 copy reads 1 writes 2;
/// n3 memset writes 3 (independent); n4 (conditional) kernel writes 2.
fn plan() -> &'static Plan {
    let node = plan_node;
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
        bodies: &[],
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
        Some(NodeParams::Memcpy(&c)),
        Some(NodeParams::Memset(&m)),
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
        Some(NodeParams::Memcpy(&copy(4))),
        Some(NodeParams::Memset(&memset(0))),
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

/// A copy statement made as a readback node (`copy_on`: device memory into pinned host
/// memory, at most 4 KiB) where the plan says `copy`: built as a kernel node; an unchanged call
/// sends nothing (the node's pinned side is not resolved when set, unlike a memcpy node's,
/// which is set again on every call); a new destination, a new length and a memcpy node in its
/// place are each what the driver needs.
#[test]
fn a_readback_node_is_a_kernel_node_that_an_unchanged_call_leaves_alone() {
    let (mock, mut cache, plan) = setup();
    let rb =
        |dst: u64, words: u64| crate::ReadbackNode::for_test(0x30 as _, 0x900, dst, words, CTX);
    let go = |cache: &mut GraphCache<Mock>, r: &crate::ReadbackNode<'static>| {
        let (k0, k1) = (k(1, 0xa0), k(2, 0xb0));
        let m = memset(0);
        let nodes = [
            Some(NodeParams::Kernel(&k0 as &dyn KernelNode)),
            Some(NodeParams::Kernel(&k1)),
            Some(NodeParams::Readback(r)),
            Some(NodeParams::Memset(&m)),
            None,
        ];
        cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes)
    };
    go(&mut cache, &rb(0x4000, 1)).unwrap();
    let calls = mock.calls();
    assert_eq!(calls.iter().filter(|c| c.starts_with("add_kernel")).count(), 3, "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("add_memcpy")), "{calls:?}");
    for _ in 0..3 {
        go(&mut cache, &rb(0x4000, 1)).unwrap();
        assert_eq!(mock.calls(), ["launch"], "unchanged: nothing set");
    }
    go(&mut cache, &rb(0x5000, 1)).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=1", "launch"], "another destination");
    go(&mut cache, &rb(0x5000, 512)).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=2", "launch"], "512 words: two blocks");
    let s = cache.stats();
    assert_eq!((s.builds, s.unchanged_calls, s.node_updates), (1, 3, 2), "{s:?}");
    // The same statement as a memcpy node (over the bound): another node type, which no
    // update can give the exec: it is dropped and built again.
    let (k0, k1) = (k(1, 0xa0), k(2, 0xb0));
    run(&mut cache, plan, &k0, &k1, copy(4), memset(0), None).unwrap();
    let calls = mock.calls();
    assert_eq!(calls[..3], ["exec_destroy", "graph_destroy", "graph_create"], "{calls:?}");
    assert!(calls.iter().any(|c| c == "add_memcpy deps=1"), "{calls:?}");
    assert_eq!(calls[calls.len() - 2..], ["instantiate", "launch"], "{calls:?}");
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
    cache.limits = Some(limits(true));
    let mut big = k(1, 0xa0);
    big.grid = u32::MAX;
    let e = run(&mut cache, plan, &big, &k(2, 0xb0), copy(4), memset(0), None).unwrap_err();
    assert!(matches!(e, Error::LaunchLimit { .. }), "{e}");
    assert!(e.to_string().contains("exceeds the device's maximum grid"), "{e}");
    let mut foreign = k(1, 0xa0);
    foreign.ctx = 0x9999 as CUcontext;
    let e = run(&mut cache, plan, &k(1, 0xa0), &foreign, copy(4), memset(0), None).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    // A copy with a pinned host side of another context (a device-to-device copy may cross
    // contexts: `peer_copies_…`).
    let mut c = copy(4);
    c.raw.dst = Memory::Host(0x4000 as *const core::ffi::c_void);
    c.raw.dst_ctx = 0x9999 as CUcontext;
    let e = run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), c, memset(0), None).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    assert!(e.to_string().contains("mock.rs:7:9"), "{e}");
    assert!(mock.calls().is_empty());
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert_eq!(cache.stats().launches, 1);
}

/// `check_handles` of every present node.
fn check_accesses(plan: &Plan, call: u64, nodes: &[Option<NodeParams<'_>>]) -> Result<()> {
    let mut ops = crate::operand::NO_ACCESSES;
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
        x.tag = crate::operand::tag(call, place);
        x
    };
    let mut c = copy(4);
    (c.src_tag, c.dst_tag) = (crate::operand::tag(call, 1), crate::operand::tag(call, 2));
    let mut m = memset(0);
    m.dst_tag = crate::operand::tag(call, 3);
    let check = |k0: &K, k1: &K, c: MemcpyParams<'_>| {
        let nodes = [
            Some(NodeParams::Kernel(k0)),
            Some(NodeParams::Kernel(k1)),
            Some(NodeParams::Memcpy(&c)),
            Some(NodeParams::Memset(&m)),
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
    other.tag = crate::operand::tag(call + 1, 0);
    refused(check(&other, &tagged(1), c).unwrap_err(), "n");
    other.tag = 0;
    refused(check(&other, &tagged(1), c).unwrap_err(), "n");
    // One written place passed twice to a node (through a method of the user's).
    let mut both = copy(4);
    (both.src_tag, both.dst_tag) = (crate::operand::tag(call, 2), crate::operand::tag(call, 2));
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
    let swapped = [g(0x200, 64, true), g(0x100, 64, false), g(0x300, 64, true), g(0x110, 8, false)];
    for _ in 0..3 {
        cache.check_aliasing(plan, &ok).unwrap();
        cache.check_aliasing(plan, &swapped).unwrap();
    }
    assert_eq!(cache.stats().alias_checks, 4);
    let empty = [g(0x100, 0, true), g(0x100, 64, true), g(0x300, 64, true), g(0x400, 8, false)];
    cache.check_aliasing(plan, &empty).unwrap();
}

#[test]
fn the_same_ranges_as_other_places_are_checked_again() {
    let (_, mut cache, plan) = setup();
    let g = |start, bytes, write| Guard::for_test(start, bytes, write);
    let parts = |gs: Vec<Guard<'static>>| Guard::of_parts(gs.into_boxed_slice(), true);
    // Place 0 holds two overlapping written buffers (a child graph's operands, ordered inside
    // it), place 1 one disjoint buffer: allowed.
    let first = [parts(vec![g(0x100, 64, true), g(0x120, 64, true)]), g(0x300, 64, true)];
    cache.check_aliasing(plan, &first).unwrap();
    assert_eq!(cache.stats().alias_checks, 1);
    // The same three ranges in the same order, but the second now belongs to place 1: two
    // places overlap where one is written. The memo must not hide it.
    let second = [g(0x100, 64, true), parts(vec![g(0x120, 64, true), g(0x300, 64, true)])];
    match cache.check_aliasing(plan, &second).unwrap_err() {
        Error::Aliasing { .. } => {}
        e => panic!("expected Aliasing, got {e:?}"),
    }
    assert_eq!(cache.stats().alias_checks, 2);
    // The first assignment is still remembered as checked.
    cache.check_aliasing(plan, &first).unwrap();
    assert_eq!(cache.stats().alias_checks, 2);
}

#[test]
fn block_and_shared_memory_limits() {
    let l = Limits {
        ctx: CTX,
        threads_per_block: 1024,
        block: (1024, 1024, 64),
        grid: (i32::MAX as u32, 65535, 65535),
        shared_bytes: 232_448,
        programmatic: true,
        programmatic_bodies: true,
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

/// Plan: n0 kernel writes place 0; n1 `device_while` whose body is n2 (reads 0, writes 1) and
/// n3 (writes 0); n4 reads 1. The conditional node carries its body's accesses.
fn conditional_plan() -> &'static Plan {
    let node = |kind, accesses| plan_node(kind, accesses, "");
    let (r, w) = (|p| Access { place: p, write: false }, |p| Access { place: p, write: true });
    let nodes = vec![
        node(NodeKind::Kernel("a"), vec![w(0)]),
        node(NodeKind::Conditional("device_while"), vec![w(0), w(1)]),
        node(NodeKind::Kernel("b"), vec![r(0), w(1)]),
        node(NodeKind::Kernel("c"), vec![w(0)]),
        node(NodeKind::Kernel("d"), vec![r(1)]),
    ];
    Box::leak(Box::new(Plan {
        file: "mock.rs",
        line: 5,
        places: &["a", "b"],
        nodes: Box::leak(nodes.into_boxed_slice()),
        conditions: 0,
        bodies: &[(2, 1, 0), (3, 1, 0)],
    }))
}

#[test]
fn a_device_while_gets_a_handle_its_body_nodes_and_edges_only_within_each_graph() {
    let (mock, mut cache, _) = setup();
    let plan = conditional_plan();
    assert_eq!(plan.edges(), [(0, 1), (2, 3), (1, 4)]);
    let call = |cache: &mut GraphCache<Mock>, default: u32, scalar: u32| {
        let (k0, k2, k3, k4) = (k(1, 0xa0), k(scalar, 0xb0), k(3, 0xc0), k(4, 0xd0));
        let cond =
            crate::kind::ConditionalParams::new(0, crate::ConditionalType::While, 1, default);
        let nodes = [
            Some(NodeParams::Kernel(&k0 as &dyn KernelNode)),
            Some(NodeParams::Conditional(cond)),
            Some(NodeParams::Kernel(&k2)),
            Some(NodeParams::Kernel(&k3)),
            Some(NodeParams::Kernel(&k4)),
        ];
        cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes)
    };
    call(&mut cache, 1, 2).unwrap();
    assert_eq!(
        mock.calls(),
        [
            "graph_create",
            "conditional_handle default=1",
            "add_kernel deps=0",
            "add_conditional deps=1",
            "add_kernel deps=0",
            "add_kernel deps=1",
            "add_kernel deps=1",
            "instantiate",
            "launch",
        ]
    );
    // A body node's scalar: a per-node update.
    call(&mut cache, 1, 5).unwrap();
    let s = cache.stats();
    assert_eq!((s.builds, s.node_updates, s.exec_updates, s.reinstantiations), (1, 1, 0, 0));
    // Another default: the conditional node cannot be set and its new handle cannot be updated
    // into the exec: re-instantiated, with no whole-exec update tried.
    call(&mut cache, 0, 5).unwrap();
    let s = cache.stats();
    assert_eq!((s.exec_updates, s.reinstantiations), (0, 1), "{s:?}");
}

#[test]
fn a_run_time_loop_beside_a_device_while_keeps_each_body_a_graph_of_its_own() {
    // `conditional_plan` with its node 0 the body of a run-time `for`, run 2 times: call nodes
    // a a while(b c) d. The body nodes hang from call node 2, edges stay within each graph.
    let (mock, mut cache, _) = setup();
    let plan = conditional_plan();
    let shape = super::looped::Looped::new(plan, &[(0, 1)], &[2]).expect("fits");
    assert_eq!(shape.len(), 6);
    assert_eq!((0..6).map(|i| shape.parent(i)).collect::<Vec<_>>(), {
        [None, None, None, Some((2, 0)), Some((2, 0)), None]
    });
    assert_eq!(shape.edges(&[true; 6]), [(0, 1), (1, 2), (3, 4), (2, 5)]);
    let (k0, k1, k3, k4, k5) = (k(1, 0xa0), k(2, 0xa0), k(3, 0xb0), k(4, 0xc0), k(5, 0xd0));
    let cond = crate::kind::ConditionalParams::new(0, crate::ConditionalType::While, 1, 1);
    let nodes = [
        Some(NodeParams::Kernel(&k0 as &dyn KernelNode)),
        Some(NodeParams::Kernel(&k1)),
        Some(NodeParams::Conditional(cond)),
        Some(NodeParams::Kernel(&k3)),
        Some(NodeParams::Kernel(&k4)),
        Some(NodeParams::Kernel(&k5)),
    ];
    let call = GraphCall { shape: &shape, site: Site::Plan(plan), key: 0, signature: &[2, 0] };
    cache.run_shape(call, (CTX, None), STREAM, &nodes).unwrap();
    assert_eq!(
        mock.calls(),
        [
            "graph_create",
            "conditional_handle default=1",
            "add_kernel deps=0",
            "add_kernel deps=1",
            "add_conditional deps=1",
            "add_kernel deps=0",
            "add_kernel deps=1",
            "add_kernel deps=1",
            "instantiate",
            "launch",
        ]
    );
    // A loop whose range would cut a device body out of its conditional node does not fit.
    assert!(super::looped::Looped::new(plan, &[(1, 2)], &[2]).is_none());
}

// Programmatic edges: the plan's n0 (kernel) -> n1 (kernel) edge, n1 -> n2 (memcpy) and
// n2 -> n4 (memcpy -> kernel).

/// Limits of a device with (or without) programmatic dependent launch (inside bodies too).
fn limits(programmatic: bool) -> Limits {
    Limits {
        ctx: CTX,
        threads_per_block: 1024,
        block: (1024, 1024, 64),
        grid: (i32::MAX as u32, 65535, 65535),
        shared_bytes: 232_448,
        programmatic,
        programmatic_bodies: programmatic,
    }
}

#[test]
fn only_edges_from_a_kernel_into_a_programmatic_kernel_are_programmatic() {
    let (mock, mut cache, plan) = setup();
    let k4 = pk(3, 0xc0);
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), Some(&k4)).unwrap();
    assert_eq!(
        mock.calls(),
        [
            "graph_create",
            "add_kernel deps=0",
            "add_kernel deps=1 programmatic=1",
            "add_memcpy deps=1",
            "add_memset deps=0",
            "add_kernel deps=1",
            "instantiate",
            "launch"
        ]
    );
    let (p, plain) = (EdgeKind::Programmatic, EdgeKind::Plain);
    assert_eq!(cache.edges(), [(0, 1, p), (1, 2, plain), (2, 4, plain)]);
    let s = cache.stats();
    assert_eq!((s.programmatic_edges, s.programmatic_fallbacks), (1, 0), "{s:?}");
    // The plan alone gives the same kinds, knowing which kernels are programmatic by name.
    let all = plan.edge_kinds(|name| name != "z");
    assert_eq!(all, [(0, 1, p), (1, 2, plain), (2, 4, plain)]);
    assert!(plan.edge_kinds(|_| false).iter().all(|e| e.2 == plain));
    // A plain kernel into a programmatic one: programmatic too (n0 is plain here).
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    run(&mut cache, plan, &k(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert!(mock.calls().contains(&"add_kernel deps=1 programmatic=1".to_string()));
    // A programmatic kernel into a plain one: plain.
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    run(&mut cache, plan, &pk(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert!(!mock.calls().iter().any(|c| c.contains("programmatic")));
    assert_eq!(cache.stats().programmatic_edges, 0);
}

/// `heat`'s step with its flag's memset beside the stencil (`fork`: n0 memset of place 3; n1
/// stencil reads 0, writes 1; n2 boundary writes 1; n3 check reads 1, writes 3), or first in
/// the chain (n1 also `.after(n0)`), every kernel programmatic.
fn heat_plan(chain: bool) -> &'static Plan {
    let (r, w) = (|p| Access { place: p, write: false }, |p| Access { place: p, write: true });
    let stencil = plan_node(NodeKind::Kernel("stencil"), vec![r(0), w(1)], "");
    let nodes = vec![
        plan_node(NodeKind::Memset, vec![w(3)], ""),
        if chain { PlanNode { after: &[0], ..stencil } } else { stencil },
        plan_node(NodeKind::Kernel("boundary"), vec![w(1)], ""),
        plan_node(NodeKind::Kernel("check"), vec![r(1), w(3)], ""),
    ];
    leak_plan(nodes, 4, 0)
}

#[test]
fn a_programmatic_kernel_joining_a_memset_s_branch_gets_plain_edges_only() {
    let (p, plain) = (EdgeKind::Programmatic, EdgeKind::Plain);
    let (m, s, b, c) = (memset(0), pk(1, 0xa0), pk(2, 0xb0), pk(3, 0xc0));
    let nodes = [
        Some(NodeParams::Memset(&m)),
        Some(NodeParams::Kernel(&s as &dyn KernelNode)),
        Some(NodeParams::Kernel(&b)),
        Some(NodeParams::Kernel(&c)),
    ];
    // The memset beside the stencil: the check joins its branch, so boundary -> check is plain
    // (made so by choice: neither made programmatic nor a fallback).
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let fork = heat_plan(false);
    let sorted = |mut e: Vec<(u32, u32, EdgeKind)>| {
        e.sort_unstable_by_key(|e| (e.0, e.1));
        e
    };
    cache.run_raw(fork, 0, (CTX, None), STREAM, &nodes).unwrap();
    assert_eq!(sorted(cache.edges()), [(0, 3, plain), (1, 2, p), (2, 3, plain)]);
    let calls = mock.calls();
    assert_eq!(calls.iter().filter(|c| c.contains("programmatic")).count(), 1, "{calls:?}");
    let st = cache.stats();
    assert_eq!((st.programmatic_edges, st.programmatic_fallbacks), (1, 0), "{st:?}");
    // The plan alone says the same.
    assert_eq!(sorted(fork.edge_kinds(|_| true)), sorted(cache.edges()));
    // The memset first in the chain: nothing joins, both kernel edges programmatic.
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let chain = heat_plan(true);
    cache.run_raw(chain, 0, (CTX, None), STREAM, &nodes).unwrap();
    assert_eq!(sorted(cache.edges()), [(0, 1, plain), (1, 2, p), (2, 3, p)]);
    let st = cache.stats();
    assert_eq!((st.programmatic_edges, st.programmatic_fallbacks), (2, 0), "{st:?}");
    assert_eq!(sorted(chain.edge_kinds(|_| true)), sorted(cache.edges()));
    // Without device support the fork's one declared programmatic edge is a fallback.
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    cache.limits = Some(limits(false));
    cache.run_raw(fork, 0, (CTX, None), STREAM, &nodes).unwrap();
    let st = cache.stats();
    assert_eq!((st.programmatic_edges, st.programmatic_fallbacks), (0, 1), "{st:?}");
}

#[test]
fn programmatic_nodes_update_in_place() {
    let (mock, mut cache, plan) = setup();
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    mock.calls();
    // A scalar, a pointer and a grid change: per-node set-params, no rebuild.
    let mut wide = pk(2, 0xb8);
    wide.grid = 8;
    run(&mut cache, plan, &pk(5, 0xa0), &wide, copy(4), memset(0), None).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "set_kernel grid=8", "launch"]);
    let s = cache.stats();
    assert_eq!((s.builds, s.node_updates, s.exec_updates, s.reinstantiations), (1, 2, 0, 0));
    // A refused set-params falls to the whole-exec update of a graph with the same edges.
    mock.0.borrow_mut().refuse_set = true;
    run(&mut cache, plan, &pk(6, 0xa0), &wide, copy(4), memset(0), None).unwrap();
    let c = mock.calls();
    assert!(c.contains(&"add_kernel deps=1 programmatic=1".to_string()), "{c:?}");
    assert!(c.contains(&"exec_update".to_string()), "{c:?}");
    let s = cache.stats();
    assert_eq!((s.builds, s.exec_updates, s.programmatic_edges), (1, 1, 1), "{s:?}");
}

#[test]
fn without_device_support_edges_are_plain_and_counted() {
    let (mock, mut cache, plan) = setup();
    cache.limits = Some(limits(false));
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    let calls = mock.calls();
    assert!(calls.contains(&"add_kernel deps=1".to_string()), "{calls:?}");
    assert!(!calls.iter().any(|c| c.contains("programmatic")), "{calls:?}");
    let s = cache.stats();
    assert_eq!((s.programmatic_edges, s.programmatic_fallbacks), (0, 1), "{s:?}");
    assert!(cache.edges().iter().all(|e| e.2 == EdgeKind::Plain));
    // With support: programmatic.
    cache.limits = Some(limits(true));
    cache.clear();
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert_eq!(cache.stats().programmatic_edges, 1);
}

#[test]
fn set_programmatic_false_gives_plain_edges_in_a_variant_of_its_own() {
    let (mock, mut cache, plan) = setup();
    cache.set_programmatic(false);
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert!(!mock.calls().iter().any(|c| c.contains("programmatic")));
    let s = cache.stats();
    assert_eq!((s.programmatic_edges, s.programmatic_fallbacks), (0, 0), "{s:?}");
    cache.set_programmatic(true);
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert!(mock.calls().contains(&"add_kernel deps=1 programmatic=1".to_string()));
    cache.set_programmatic(false);
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert_eq!(mock.calls(), ["launch"], "the plain variant is hit again");
    let s = cache.stats();
    assert_eq!((s.builds, s.hits, cache.len()), (2, 1, 2), "{s:?}");
}

#[test]
fn a_kernel_declared_otherwise_than_when_built_gets_another_graph() {
    // A method of the user's that returns a programmatic kernel in one call and a plain one in
    // the next: the edge into it changes kind, so the exec must not keep the programmatic edge
    // for a kernel that does not wait.
    let (mock, mut cache, plan) = setup();
    run(&mut cache, plan, &pk(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    mock.calls();
    run(&mut cache, plan, &pk(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
    let c = mock.calls();
    assert!(c.contains(&"add_kernel deps=1".to_string()), "{c:?}");
    assert!(!c.iter().any(|c| c.starts_with("set_") || c.contains("programmatic")), "{c:?}");
    let s = cache.stats();
    assert_eq!((s.builds, s.launches, cache.len()), (2, 2, 1), "{s:?}");
    assert!(cache.edges().iter().all(|e| e.2 == EdgeKind::Plain));
}

#[test]
fn edges_between_programmatic_kernels_inside_a_device_body_are_programmatic_those_around_it_plain()
{
    // n0 kernel -> n1 while (body: n2 -> n3, kernels) -> n4 kernel: every kernel programmatic.
    // No edge joins two kernel nodes of the top graph (the conditional node is between), so
    // those stay plain; the body's n2 -> n3 joins two kernels of one graph: programmatic.
    let (mock, mut cache, _) = setup();
    let plan = conditional_plan();
    let (k0, k2, k3, k4) = (pk(1, 0xa0), pk(2, 0xb0), pk(3, 0xc0), pk(4, 0xd0));
    let cond = crate::kind::ConditionalParams::new(0, crate::ConditionalType::While, 1, 1);
    let nodes = [
        Some(NodeParams::Kernel(&k0 as &dyn KernelNode)),
        Some(NodeParams::Conditional(cond)),
        Some(NodeParams::Kernel(&k2)),
        Some(NodeParams::Kernel(&k3)),
        Some(NodeParams::Kernel(&k4)),
    ];
    cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes).unwrap();
    let c = mock.calls();
    let programmatic: Vec<&String> = c.iter().filter(|c| c.contains("programmatic")).collect();
    assert_eq!(programmatic.len(), 1, "{c:?}");
    let (p, plain) = (EdgeKind::Programmatic, EdgeKind::Plain);
    let want = [(0, 1, plain), (1, 4, plain), (2, 3, p)];
    let mut got = cache.edges();
    got.sort_unstable_by_key(|e| (e.0, e.1));
    assert_eq!(got, want);
    let mut planned = plan.edge_kinds(|_| true);
    planned.sort_unstable_by_key(|e| (e.0, e.1));
    assert_eq!(planned, want);
    assert_eq!(cache.stats().programmatic_edges, 1);
    // With programmatic edges off, the body's edge is plain too.
    let (mock, mut cache, _) = setup();
    cache.set_programmatic(false);
    cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes).unwrap();
    assert!(!mock.calls().iter().any(|c| c.contains("programmatic")));
    assert!(cache.edges().iter().all(|e| e.2 == plain));
    assert_eq!((cache.stats().programmatic_edges, cache.stats().programmatic_fallbacks), (0, 0));
    // A driver before CUDA 13.0 (programmatic edges, but not measured inside bodies): the
    // body's edge is plain and counted as a fallback.
    let (mock, mut cache, _) = setup();
    cache.limits = Some(Limits { programmatic_bodies: false, ..limits(true) });
    cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes).unwrap();
    assert!(!mock.calls().iter().any(|c| c.contains("programmatic")));
    assert!(cache.edges().iter().all(|e| e.2 == plain));
    let s = cache.stats();
    assert_eq!((s.programmatic_edges, s.programmatic_fallbacks), (0, 1), "{s:?}");
}

/// Plan of a graph-owned buffer (place 0): n0 alloc, n1 kernel writing it, n2 memset of it,
/// n3 free.
fn memory_plan() -> &'static Plan {
    static PLAN: std::sync::OnceLock<&'static Plan> = std::sync::OnceLock::new();
    PLAN.get_or_init(new_memory_plan)
}

fn new_memory_plan() -> &'static Plan {
    let w = |p| Access { place: p, write: true };
    let node = |kind, accesses: Vec<Access>| PlanNode {
        label: "n",
        text: "stmt",
        kind,
        line: 3,
        column: 5,
        accesses: Box::leak(accesses.into_boxed_slice()),
        after: &[],
        condition: "",
    };
    let nodes = vec![
        node(NodeKind::MemAlloc, vec![w(0)]),
        node(NodeKind::Kernel("a"), vec![w(0)]),
        node(NodeKind::Memset, vec![w(0)]),
        node(NodeKind::MemFree, vec![w(0)]),
    ];
    Box::leak(Box::new(Plan {
        file: "mock.rs",
        line: 1,
        places: &["tmp"],
        nodes: Box::leak(nodes.into_boxed_slice()),
        conditions: 0,
        bodies: &[],
    }))
}

fn run_memory(cache: &mut GraphCache<Mock>, bytes: usize, scalar: u32) -> Result<()> {
    let slot = 0;
    let ph = crate::kind::alloc::placeholder(slot);
    let kernel = k(scalar, ph);
    let set = MemsetParams::recorded(Set1d { dst: ph, len: 8, elem_size: 4, value: 0, ctx: CTX });
    let nodes = [
        Some(NodeParams::MemAlloc(&crate::kind::AllocParams::for_test(slot, bytes, CTX))),
        Some(NodeParams::Kernel(&kernel as &dyn KernelNode)),
        Some(NodeParams::Memset(&set)),
        Some(NodeParams::MemFree(&crate::kind::FreeParams::for_test(slot, CTX))),
    ];
    cache.run_raw(memory_plan(), 0, (CTX, None), STREAM, &nodes)
}

fn dptr_of(call: &str) -> u64 {
    let d = call.split("dptr=0x").nth(1).expect("a dptr").split(' ').next().unwrap();
    u64::from_str_radix(d, 16).unwrap()
}

#[test]
fn graph_owned_memory_nodes_get_the_alloc_address_and_are_never_exec_updated() {
    let (mock, mut cache, _) = setup();
    mock.0.borrow_mut().read_args = true;
    run_memory(&mut cache, 256, 1).unwrap();
    let calls = mock.calls();
    assert_eq!(calls[0], "graph_create");
    assert!(calls[1].starts_with("add_mem_alloc bytes=256 ") && calls[1].ends_with("deps=0"));
    assert_eq!(calls[2], "add_kernel deps=1");
    assert_eq!(calls[3], "add_memset deps=1");
    assert!(calls[4].starts_with("add_mem_free ") && calls[4].ends_with("deps=1"));
    assert_eq!(calls[5..], ["instantiate", "launch"]);
    // The kernel and the free node got the driver's address, not the placeholder.
    let dptr = dptr_of(&calls[1]);
    assert_eq!(dptr_of(&calls[4]), dptr);
    let added = mock.0.borrow().add_args.clone();
    assert_eq!(added[0][1], dptr.to_ne_bytes());
    assert_eq!(cache.graph_owned_bytes(), 256);

    // A changed scalar: a per-node update of the kernel, with the same address.
    run_memory(&mut cache, 256, 2).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
    let sent = mock.0.borrow().set_args.last().cloned().unwrap();
    assert_eq!(sent[1], dptr.to_ne_bytes(), "the placeholder was resolved");
    // Unchanged: nothing sent.
    run_memory(&mut cache, 256, 2).unwrap();
    assert_eq!(mock.calls(), ["launch"]);

    // A changed size: no per-node set of the alloc node, no whole-exec update: a new graph
    // and a new instantiation, whose nodes use its new address.
    run_memory(&mut cache, 512, 2).unwrap();
    let calls = mock.calls();
    assert!(!calls.iter().any(|c| c == "exec_update" || c.starts_with("set_")), "{calls:?}");
    assert!(calls[1].starts_with("add_mem_alloc bytes=512 "), "{calls:?}");
    let new = dptr_of(&calls[1]);
    assert_ne!(new, dptr);
    assert_eq!(dptr_of(&calls[4]), new);
    assert_eq!(calls[5..], ["instantiate", "exec_destroy", "graph_destroy", "launch"]);
    assert_eq!(mock.0.borrow().add_args.last().unwrap()[1], new.to_ne_bytes());
    let s = cache.stats();
    assert_eq!((s.builds, s.reinstantiations, s.exec_updates), (1, 1, 0), "{s:?}");
    assert_eq!(cache.graph_owned_bytes(), 512);
    assert!(matches!(cache.last_refusal(), Some(Error::UpdateRefused { .. })));

    // Later per-node updates use the re-instantiated graph's address.
    run_memory(&mut cache, 512, 3).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
    assert_eq!(mock.0.borrow().set_args.last().unwrap()[1], new.to_ne_bytes());
}

/// A plain `u64` scalar whose value happens to equal a graph-owned buffer's placeholder reaches
/// the kernel as it is: only arguments that carry a device address are resolved.
#[test]
fn a_scalar_equal_to_a_placeholder_is_never_rewritten() {
    let (mock, mut cache, _) = setup();
    mock.0.borrow_mut().read_args = true;
    let slot = 0;
    let ph = crate::kind::alloc::placeholder(slot);
    let run = |cache: &mut GraphCache<Mock>, scalar: u32| {
        let user = k(scalar, ph + 8);
        let scalar_only = K { ptr_is_pointer: false, ..k(scalar, ph + 8) };
        let nodes = [
            Some(NodeParams::MemAlloc(&crate::kind::AllocParams::for_test(slot, 64, CTX))),
            Some(NodeParams::Kernel(&user as &dyn KernelNode)),
            Some(NodeParams::Kernel(&scalar_only as &dyn KernelNode)),
            Some(NodeParams::MemFree(&crate::kind::FreeParams::for_test(slot, CTX))),
        ];
        cache.run_raw(scalar_plan(), 0, (CTX, None), STREAM, &nodes)
    };
    run(&mut cache, 1).unwrap();
    let calls = mock.calls();
    let dptr = dptr_of(&calls[1]);
    let added = mock.0.borrow().add_args.clone();
    assert_eq!(added[0][1], (dptr + 8).to_ne_bytes(), "the pointer argument is resolved");
    assert_eq!(added[1][1], (ph + 8).to_ne_bytes(), "the scalar argument is sent as it is");
    // And on a per-node update.
    run(&mut cache, 2).unwrap();
    let sets = mock.0.borrow().set_args.clone();
    assert_eq!(sets.len(), 2, "{:?}", mock.calls());
    assert_eq!(sets[0][1], (dptr + 8).to_ne_bytes());
    assert_eq!(sets[1][1], (ph + 8).to_ne_bytes());
}

/// [`memory_plan`] with a second kernel between the alloc and the free.
fn scalar_plan() -> &'static Plan {
    static PLAN: std::sync::OnceLock<&'static Plan> = std::sync::OnceLock::new();
    PLAN.get_or_init(|| {
        let base = new_memory_plan();
        let mut nodes = base.nodes.to_vec();
        nodes[2] = nodes[1];
        Box::leak(Box::new(Plan { nodes: Box::leak(nodes.into_boxed_slice()), ..*base }))
    })
}

#[test]
fn a_graph_owned_buffer_of_zero_bytes_is_refused_before_any_driver_call() {
    let (mock, mut cache, _) = setup();
    let e = run_memory(&mut cache, 0, 1).unwrap_err();
    assert!(matches!(e, Error::Empty { .. }), "{e}");
    assert!(mock.calls().is_empty());
    run_memory(&mut cache, 64, 1).unwrap();
}

#[test]
fn placeholders_resolve_only_while_bound_and_never_to_another_value() {
    use crate::kind::alloc::{placeholder, resolve, with_scratch};
    let p = placeholder(3);
    assert_eq!(resolve(p), p, "unbound: left as is (an invalid address)");
    assert_eq!(resolve(0x7f00_1234), 0x7f00_1234, "a real address is never touched");
    let mut table = vec![0, 0, 0, 0x9000_0000];
    with_scratch(&mut table, || {
        assert_eq!(resolve(p), 0x9000_0000);
        assert_eq!(resolve(p + 40), 0x9000_0028);
        assert_eq!(resolve(placeholder(2)), placeholder(2));
    });
    assert_eq!(resolve(p), p, "unbound again after the build or update");
}

#[test]
fn device_launch_with_auto_free_is_refused_without_instantiating() {
    let (mock, mut cache, plan) = setup();
    cache.set_instantiate_flags(crate::InstantiateFlags {
        device_launch: true,
        auto_free_on_launch: true,
        ..Default::default()
    });
    for _ in 0..2 {
        let e = run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None)
            .expect_err("the driver refuses the pair");
        let text = e.to_string();
        assert!(text.contains("device_launch and auto_free_on_launch"), "{text}");
        assert!(!mock.calls().iter().any(|c| c.starts_with("instantiate")), "{:?}", mock.calls());
        assert!(!mock.calls().iter().any(|c| c.starts_with("launch")), "nothing launched");
    }
    assert_eq!(cache.stats().launches, 0);
    assert!(matches!(
        run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None),
        Err(crate::Error::InstantiateFlags { .. })
    ));
    // Usable after: one of the two flags dropped.
    cache.set_instantiate_flags(crate::InstantiateFlags {
        device_launch: true,
        ..Default::default()
    });
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert_eq!(cache.stats().launches, 1);
    // The pair again: calls whose parameters come back (which would get an exec of their own)
    // update the existing exec instead, and run.
    cache.set_instantiate_flags(crate::InstantiateFlags {
        device_launch: true,
        auto_free_on_launch: true,
        ..Default::default()
    });
    for call in 0..6u32 {
        let b = 0xb0 + 0x10 * u64::from(call % 2);
        run(&mut cache, plan, &k(1, 0xa0), &k(2, b), copy(4), memset(0), None).unwrap();
    }
    let st = cache.stats();
    assert_eq!((st.launches, st.instantiations, st.memo_builds), (7, 1, 0), "{st:?}");
    assert!(st.node_updates >= 5, "{st:?}");
}

#[test]
fn instantiate_flags_reach_every_instantiation_with_the_calls_stream() {
    let (mock, mut cache, plan) = setup();
    assert_eq!(cache.instantiate_flags(), crate::InstantiateFlags::default());
    cache.set_instantiate_flags(crate::InstantiateFlags {
        upload: true,
        auto_free_on_launch: true,
        node_priority: true,
        device_launch: false,
    });
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
    let want = format!("instantiate flags=11 upload={}", STREAM as usize);
    assert!(mock.calls().contains(&want), "{want}");
    // A re-instantiation uses them too.
    mock.0.borrow_mut().refuse_set = true;
    mock.0.borrow_mut().refuse_update = true;
    run(&mut cache, plan, &k(1, 0xa0), &k(9, 0xb0), copy(4), memset(0), None).unwrap();
    assert!(mock.calls().contains(&want));
    // Off again: plain `cuGraphInstantiateWithFlags(graph, 0)` for the next variant.
    cache.set_instantiate_flags(crate::InstantiateFlags::default());
    run(&mut cache, plan, &k(1, 0xa0), &k(9, 0xb0), copy(4), memset(0), Some(&k(3, 0xc0))).unwrap();
    assert!(mock.calls().contains(&"instantiate".to_string()));
}

/// Plan of a 2-D copy (reads place 0, writes place 1) and a 2-D memset of place 1.
fn pitched_plan() -> &'static Plan {
    static PLAN: std::sync::OnceLock<&'static Plan> = std::sync::OnceLock::new();
    PLAN.get_or_init(|| {
        let node = |kind, accesses: Vec<Access>| PlanNode {
            label: "n",
            text: "stmt",
            kind,
            line: 2,
            column: 5,
            accesses: Box::leak(accesses.into_boxed_slice()),
            after: &[],
            condition: "",
        };
        let nodes = vec![
            node(
                NodeKind::Memcpy,
                vec![Access { place: 0, write: false }, Access { place: 1, write: true }],
            ),
            node(NodeKind::Memset, vec![Access { place: 1, write: true }]),
        ];
        Box::leak(Box::new(Plan {
            file: "mock.rs",
            line: 1,
            places: &["a", "b"],
            nodes: Box::leak(nodes.into_boxed_slice()),
            conditions: 0,
            bodies: &[],
        }))
    })
}

fn run_pitched(
    cache: &mut GraphCache<Mock>,
    src: crate::Rows,
    dst: crate::Rows,
    set: crate::Rows,
    value: u32,
) -> Result<()> {
    use crate::kind::pitched::{Copy2d, Set2d};
    let base = Copy1d {
        src: Memory::Device(0x1000),
        dst: Memory::Device(0x9000),
        src_len: 100,
        dst_len: 60,
        elem_size: 4,
        src_ctx: CTX,
        dst_ctx: CTX,
        host_buffer: 0,
    };
    let c = Copy2d { base, src_rows: src, dst_rows: dst };
    let s = Set2d { dst: 0x9000, len: 60, rows: set, elem_size: 2, value, ctx: CTX };
    let nodes = [
        Some(NodeParams::Memcpy2d(&crate::kind::Copy2dParams::recorded(c))),
        Some(NodeParams::Memset2d(&crate::kind::Memset2dParams::recorded(s))),
    ];
    cache.run_raw(pitched_plan(), 0, (CTX, None), STREAM, &nodes)
}

#[test]
fn pitched_copies_and_memsets_reach_the_driver_in_bytes_and_misfits_are_refused_first() {
    use crate::Rows;
    let (mock, mut cache, _) = setup();
    run_pitched(&mut cache, Rows::new(3, 5, 7), Rows::new(3, 5, 11), Rows::new(4, 6, 9), 1)
        .unwrap();
    assert_eq!(
        mock.calls(),
        ["graph_create", "add_memcpy deps=0", "add_memset deps=1", "instantiate", "launch"]
    );
    assert_eq!(mock.0.borrow().add_copies, [(12, 5, 28, 44)]);
    assert_eq!(mock.0.borrow().add_sets, [(2, 4, 6, 18)]);
    // A changed value: a per-node update of the memset only.
    run_pitched(&mut cache, Rows::new(3, 5, 7), Rows::new(3, 5, 11), Rows::new(4, 6, 9), 2)
        .unwrap();
    assert_eq!(mock.calls(), ["set_memset value=2", "launch"]);
    // Rows that do not fit, are wider than their pitch, or differ between the sides.
    for (src, dst, set, want) in [
        (Rows::new(3, 15, 7), Rows::new(3, 15, 4), Rows::new(1, 1, 1), "do not fit"),
        (Rows::new(3, 5, 7), Rows::new(3, 5, 2), Rows::new(1, 1, 1), "wider than its pitch"),
        (Rows::new(3, 5, 7), Rows::new(4, 5, 11), Rows::new(1, 1, 1), "must match"),
        (Rows::new(3, 5, 7), Rows::new(3, 5, 11), Rows::new(9, 7, 9), "do not fit in its 60"),
    ] {
        let e = run_pitched(&mut cache, src, dst, set, 2).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
        assert!(mock.calls().is_empty(), "nothing sent for {want}");
    }
    let e = run_pitched(&mut cache, Rows::new(0, 5, 7), Rows::new(0, 5, 11), Rows::new(1, 1, 1), 2);
    assert!(matches!(e, Err(Error::Empty { .. })));
}

/// Another context than [`CTX`]: a second device's.
const CTX1: CUcontext = 0x1100 as CUcontext;

#[test]
fn peer_copies_cross_contexts_and_enable_peer_access_once_per_pair() {
    let (mock, mut cache, plan) = setup();
    // n2 copies a buffer of CTX into one of CTX1: a peer copy.
    let mut c = copy(4);
    c.raw.dst_ctx = CTX1;
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), c, memset(0), None).unwrap();
    let calls = mock.calls();
    let peers: Vec<_> = calls.iter().filter(|c| c.starts_with("enable_peer_access")).collect();
    assert_eq!(peers, ["enable_peer_access 0x1000->0x1100", "enable_peer_access 0x1100->0x1000"]);
    // Enabled before the graph is built: nothing is added before peer access works.
    assert!(
        calls.iter().position(|c| c.starts_with("enable"))
            < calls.iter().position(|c| c.starts_with("add"))
    );
    // The copy runs in the launch stream's context (a side is of it).
    assert!(mock.0.borrow().add_ctx.contains(&("memcpy", CTX as usize)));
    assert_eq!(cache.stats().peer_enables, 1);
    // Later calls, and the pair the other way round, enable nothing again.
    let mut back = copy(4);
    back.raw.src_ctx = CTX1;
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), c, memset(0), None).unwrap();
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), back, memset(0), None).unwrap();
    assert!(!mock.calls().iter().any(|c| c.starts_with("enable_peer_access")));
    assert_eq!(cache.stats().peer_enables, 1);
    // A copy between two other devices runs in its source's context.
    let other = 0x1200 as CUcontext;
    let (mock, mut cache, plan) = setup();
    let mut c = copy(4);
    (c.raw.src_ctx, c.raw.dst_ctx) = (CTX1, other);
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), c, memset(0), None).unwrap();
    assert!(mock.0.borrow().add_ctx.contains(&("memcpy", CTX1 as usize)));
    assert_eq!(cache.stats().peer_enables, 1);
}

#[test]
fn a_kernel_runs_on_its_own_context_and_its_buffers_must_be_of_it() {
    let (mock, mut cache, plan) = setup();
    // n1's kernel was loaded in CTX1 (another device) and writes a buffer of CTX1: its node
    // names CTX1; n0's kernel of the stream's context names none (null: the current one).
    let mut k1 = k(2, 0xb0);
    (k1.on, k1.ctx) = (Some(CTX1), CTX1);
    run(&mut cache, plan, &k(1, 0xa0), &k1, copy(4), memset(0), None).unwrap();
    let kernels: Vec<usize> =
        mock.0.borrow().add_ctx.iter().filter(|c| c.0 == "kernel").map(|c| c.1).collect();
    assert_eq!(kernels, [0, CTX1 as usize]);
    // A buffer of the stream's context passed to the kernel of CTX1: no node of that device
    // reads it there, refused before any driver call, naming the statement.
    mock.calls();
    let mut wrong = k(2, 0xb0);
    wrong.on = Some(CTX1);
    let e = run(&mut cache, plan, &k(1, 0xa0), &wrong, copy(4), memset(0), None).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    assert!(e.to_string().contains("mock.rs:7:9"), "{e}");
    // And a buffer of CTX1 passed to a kernel of the stream's context.
    let mut foreign = k(1, 0xa0);
    foreign.ctx = CTX1;
    let e = run(&mut cache, plan, &foreign, &k1, copy(4), memset(0), None).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    assert!(mock.calls().is_empty());
}

#[test]
fn edges_between_kernels_of_two_devices_are_plain_and_a_moved_kernel_is_not_set_per_node() {
    let (mock, mut cache, plan) = setup();
    // n0 -> n1, n1 programmatic: a programmatic edge on one device...
    run(&mut cache, plan, &k(1, 0xa0), &pk(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert!(cache.edges().iter().any(|e| e.2 == EdgeKind::Programmatic));
    // ... but plain when n1's kernel runs on another device.
    let (mock2, mut other, plan2) = setup();
    let mut p1 = pk(2, 0xb0);
    (p1.on, p1.ctx) = (Some(CTX1), CTX1);
    run(&mut other, plan2, &k(1, 0xa0), &p1, copy(4), memset(0), None).unwrap();
    assert!(other.edges().iter().all(|e| e.2 == EdgeKind::Plain), "{:?}", other.edges());
    assert!(!mock2.calls().iter().any(|c| c.contains("programmatic=")));
    // The same node's kernel moved to another device between calls: its edges change kind,
    // and the driver's rule for such a per-node set is not measured: another graph.
    mock.calls();
    let mut moved = pk(2, 0xb0);
    (moved.on, moved.ctx) = (Some(CTX1), CTX1);
    run(&mut cache, plan, &k(1, 0xa0), &moved, copy(4), memset(0), None).unwrap();
    let calls = mock.calls();
    assert!(!calls.iter().any(|c| c.starts_with("set_kernel")), "{calls:?}");
    assert!(calls.iter().any(|c| c == "instantiate"), "{calls:?}");
    assert!(cache.edges().iter().all(|e| e.2 == EdgeKind::Plain), "{:?}", cache.edges());
}

/// A plan of `n` kernel nodes, node `i` reading place 0 and writing place `i + 1` (a fan).
pub(super) fn kernel_plan(n: usize) -> &'static Plan {
    let (r, w) = (|p| Access { place: p, write: false }, |p| Access { place: p, write: true });
    let nodes = (0..n as u32)
        .map(|i| plan_node(NodeKind::Kernel("acc"), vec![r(0), w(i + 1)], ""))
        .collect();
    leak_plan(nodes, n + 1, 0)
}

/// Runs the kernels `ks` as the nodes of `plan` (a [`kernel_plan`]).
pub(super) fn run_kernels(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    ks: &[&K],
) -> Result<()> {
    let nodes: Vec<_> =
        ks.iter().map(|&k| Some(NodeParams::Kernel(k as &dyn KernelNode))).collect();
    cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes)
}

#[test]
fn a_call_equal_to_the_last_launches_at_once_and_any_change_takes_the_ladder() {
    let (mock, plan) = (Mock::default(), kernel_plan(2));
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    // The update ladder in place: one exec per variant (no memo of parameter sets).
    cache.set_execs_per_variant(1);
    let (a, b) = (k(1, 0xa0), k(2, 0xb0));
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    mock.calls();
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
    let s = cache.stats();
    assert_eq!((s.unchanged_calls, s.nodes_unchanged, s.hits), (1, 2, 1), "{s:?}");
    // Each change of one field of node 1 is sent (or rebuilt), then the same call again is
    // unchanged: the exec always holds the last call's parameters.
    // `sent`: the change reaches the exec. (A kernel whose arguments are declared otherwise,
    // with the same bytes, is not an unchanged call but has nothing to send either.)
    let mut changes: Vec<(&str, K, bool)> = Vec::new();
    let mut c = k(3, 0xb0);
    changes.push(("scalar", c.clone(), true));
    c.ptr = 0xc0;
    changes.push(("pointer", c.clone(), true));
    c.grid = 8;
    changes.push(("grid", c.clone(), true));
    c.func = 0x20;
    changes.push(("function", c.clone(), true));
    c.programmatic = true;
    changes.push(("programmatic", c.clone(), true));
    c.ptr_is_pointer = false;
    changes.push(("pointer arguments", c.clone(), false));
    for (what, c, must_send) in &changes {
        let before = cache.stats();
        run_kernels(&mut cache, plan, &[&a, c]).unwrap();
        let calls = mock.calls();
        let after = cache.stats();
        assert_eq!(after.unchanged_calls, before.unchanged_calls, "{what}: {calls:?}");
        let sent = after.node_updates + after.builds + after.exec_updates + after.reinstantiations
            > before.node_updates + before.builds + before.exec_updates + before.reinstantiations;
        assert_eq!(sent, *must_send, "{what}: {calls:?}");
        run_kernels(&mut cache, plan, &[&a, c]).unwrap();
        assert_eq!(mock.calls(), ["launch"], "{what}, then the same call");
        assert_eq!(cache.stats().unchanged_calls, before.unchanged_calls + 1, "{what}");
    }
    // Back to the first call's parameters: sent again, not taken for unchanged.
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    assert_ne!(mock.calls(), ["launch"]);
}

#[test]
fn a_call_equal_to_the_last_is_still_refused_when_its_buffers_or_limits_say_so() {
    let (mock, plan) = (Mock::default(), kernel_plan(2));
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    cache.limits = Some(limits(true));
    let (a, b) = (k(1, 0xa0), k(2, 0xb0));
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    mock.calls();
    // The same parameters but a buffer of another context: refused, nothing enqueued.
    let mut foreign = k(2, 0xb0);
    foreign.ctx = CTX1;
    let e = run_kernels(&mut cache, plan, &[&a, &foreign]).unwrap_err();
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    // A grid over the device's limit, after calls that were within it.
    let mut big = k(2, 0xb0);
    big.grid = u32::MAX;
    let e = run_kernels(&mut cache, plan, &[&a, &big]).unwrap_err();
    assert!(matches!(e, Error::LaunchLimit { .. }), "{e}");
    assert!(mock.calls().is_empty());
    // The exec still holds the last launched call's parameters.
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
    assert_eq!(cache.stats().unchanged_calls, 2);
}

#[test]
fn after_a_reinstantiation_the_kept_parameters_are_the_new_ones() {
    let (mock, plan) = (Mock::default(), kernel_plan(2));
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    // The update ladder in place: one exec per variant (no memo of parameter sets).
    cache.set_execs_per_variant(1);
    let (a, b, c) = (k(1, 0xa0), k(2, 0xb0), k(5, 0xd0));
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    {
        let mut l = mock.0.borrow_mut();
        l.refuse_set = true;
        l.refuse_update = true;
    }
    run_kernels(&mut cache, plan, &[&a, &c]).unwrap();
    assert_eq!(cache.stats().reinstantiations, 1);
    mock.0.borrow_mut().refuse_set = false;
    mock.calls();
    // The old parameters are a change now; the new ones are unchanged.
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
    run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
    assert_eq!(cache.stats().unchanged_calls, 1);
}

/// Unchanged calls of a 1000-node fan send nothing but the launch; also the loop to profile
/// the cache's part of an unchanged call's host cost (`CUDAGRAPH_PROFILE_CALLS=20000 perf
/// record cargo test --release -p cudagraph --lib unchanged_fan -- --nocapture`).
#[test]
fn unchanged_fan_of_1000_nodes_sends_only_launches() {
    const N: usize = 1000;
    let plan = kernel_plan(N);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let ks: Vec<K> = (0..N).map(|i| k(1, 0x1000 + 0x100 * i as u64)).collect();
    let params = || -> Vec<Option<NodeParams<'_>>> {
        ks.iter().map(|k| Some(NodeParams::Kernel(k as &dyn KernelNode))).collect()
    };
    cache.run_raw(plan, 0, (CTX, None), STREAM, &params()).unwrap();
    assert_eq!(mock.calls().len(), N + 3, "graph_create, {N} nodes, instantiate, launch");
    let calls: u32 =
        std::env::var("CUDAGRAPH_PROFILE_CALLS").ok().and_then(|c| c.parse().ok()).unwrap_or(3);
    let t = std::time::Instant::now();
    for _ in 0..calls {
        cache.run_raw(plan, 0, (CTX, None), STREAM, &params()).unwrap();
        assert_eq!(mock.calls(), ["launch"]);
    }
    let ns = t.elapsed().as_nanos() as f64 / (f64::from(calls) * N as f64);
    let s = cache.stats();
    assert_eq!((s.builds, s.hits, s.node_updates), (1, u64::from(calls), 0), "{s:?}");
    println!("{ns:.1} ns per node per unchanged call (mock driver)");
}

/// Ping-pong buffers (issue 31): a step whose kernels' pointers alternate between two (three)
/// sets updates the exec for the sets it has not seen, builds an exec for each set that comes
/// back, then launches the exec holding the call's pointers with nothing sent; each exec's
/// launches are those of its own set.
#[test]
fn alternating_pointer_sets_get_an_exec_each_and_send_nothing_after_the_first_round() {
    for sets in [2u64, 3] {
        let (mock, plan) = (Mock::default(), kernel_plan(2));
        let mut cache = GraphCache::with_driver(mock.clone(), 8);
        for i in 0..100u64 {
            let s = i % sets;
            let (a, b) = (k(1, 0xa0 + s * 0x100), k(2, 0xb0 + s * 0x100));
            run_kernels(&mut cache, plan, &[&a, &b]).unwrap();
        }
        let st = cache.stats();
        let what = format!("{sets} sets: {st:?}");
        // First round: set 0 builds, sets 1.. update its exec (2 nodes each); second round: set
        // 0, .., sets-2 come back and build; set sets-1 is held. Then nothing but launches.
        let first = 2 * sets - 1;
        assert_eq!(
            (st.builds, st.memo_builds, st.node_updates),
            (sets, sets - 1, 2 * (sets - 1)),
            "{what}"
        );
        assert_eq!((st.launches, cache.len() as u64), (100, sets), "{what}");
        assert_eq!(st.unchanged_calls, 100 - first, "{what}");
        assert_eq!(
            st.memo_hits, st.unchanged_calls,
            "{what}: each launch another exec than the last"
        );
        let calls = mock.calls();
        let sets_after: usize = calls
            .iter()
            .skip_while(|c| !c.starts_with("instantiate"))
            .filter(|c| c.starts_with("set_"))
            .count();
        assert!(sets_after <= 2 * (sets as usize - 1), "{what}: {calls:?}");
    }
}

/// More pointer sets than execs per variant: a set not seen lately updates the least recently
/// used exec (the ladder), a set coming back gets an exec while there is room, and an exec is
/// never launched for a call it does not hold.
#[test]
fn more_sets_than_execs_update_the_least_recently_used_exec() {
    let (mock, plan) = (Mock::default(), kernel_plan(1));
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    assert_eq!(cache.execs_per_variant(), GraphCache::DEFAULT_EXECS_PER_VARIANT);
    cache.set_execs_per_variant(2);
    let call = |cache: &mut GraphCache<Mock>, s: u64| {
        run_kernels(cache, plan, &[&k(1, 0xa0 + s * 0x100)]).unwrap();
    };
    call(&mut cache, 0);
    call(&mut cache, 1);
    assert_eq!(mock.calls()[4..], ["set_kernel grid=4", "launch"], "set 1: not seen, updated");
    call(&mut cache, 0);
    assert_eq!(mock.calls(), ["graph_create", "add_kernel deps=0", "instantiate", "launch"]);
    // Set 2, not seen: the least recently used exec (set 1's) takes it.
    call(&mut cache, 2);
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
    // Set 0 is held by its exec: nothing sent.
    call(&mut cache, 0);
    assert_eq!(mock.calls(), ["launch"]);
    // Set 1 came before, but the variant has its two execs: the least recently used (set 2's)
    // is updated with set 1's pointer.
    call(&mut cache, 1);
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
    let args = mock.0.borrow().set_args.clone();
    assert_eq!(args.last().expect("set args")[1], 0x1a0u64.to_ne_bytes(), "set 1's pointer");
    let st = cache.stats();
    assert_eq!((st.builds, st.memo_builds, st.memo_hits, st.node_updates), (2, 1, 1, 3), "{st:?}");
}

/// One exec per variant (`set_execs_per_variant(1)`): every change updates in place, as before
/// the memo; and no exec is built for the memo when the cache is at its variant bound.
#[test]
fn the_memo_is_bounded_by_its_setting_and_by_the_caches_variant_bound() {
    let plan = kernel_plan(1);
    for (execs, max, builds) in [(1usize, 8usize, 1u64), (3, 1, 1), (3, 2, 2)] {
        let mock = Mock::default();
        let mut cache = GraphCache::with_driver(mock.clone(), max);
        cache.set_execs_per_variant(execs);
        for i in 0..12u64 {
            run_kernels(&mut cache, plan, &[&k(1, 0xa0 + (i % 3) * 0x100)]).unwrap();
        }
        let st = cache.stats();
        assert_eq!((st.builds, st.evictions), (builds, 0), "execs {execs}, max {max}: {st:?}");
        assert!(cache.len() <= max);
        assert_eq!(mock.0.borrow().live_execs.len(), builds as usize);
    }
}

/// Execs of one variant are evicted like variants (least recently used first) when another
/// variant needs room; a full cache updates an exec instead of building one for the memo.
#[test]
fn memoized_execs_are_evicted_least_recently_used_first() {
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 2);
    let plan = kernel_plan(1);
    let one = |cache: &mut GraphCache<Mock>, s: u64| {
        run_kernels(cache, plan, &[&k(1, 0xa0 + s * 0x100)]).unwrap();
    };
    one(&mut cache, 0);
    one(&mut cache, 1);
    one(&mut cache, 0);
    assert_eq!((cache.len(), cache.stats().memo_builds), (2, 1));
    // Another variant (key 1): the cache is full, so the least recently used exec (the first,
    // holding set 1) is evicted.
    let nine = k(9, 0x900);
    cache.run_raw(plan, 1, (CTX, None), STREAM, &[Some(NodeParams::Kernel(&nine))]).unwrap();
    assert_eq!((cache.len(), cache.stats().evictions), (2, 1));
    mock.calls();
    one(&mut cache, 0);
    assert_eq!(mock.calls(), ["launch"], "set 0's exec was kept");
    // Set 1 came before, but the cache is full: set 0's exec is updated, nothing evicted.
    one(&mut cache, 1);
    assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
    assert_eq!(mock.0.borrow().live_execs.len(), 2);
}

#[test]
fn instantiate_mode_builds_and_uploads_then_graph_mode_launches_it_unchanged() {
    let (mock, mut cache, plan) = setup();
    cache.set_mode(Mode::Instantiate);
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
            "upload"
        ]
    );
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches, s.uploads), (1, 1, 0, 1), "{s:?}");
    assert_eq!(cache.len(), 1, "the exec is cached");
    // The same parameters in graph mode: nothing built, nothing sent, one launch.
    cache.set_mode(Mode::Graph);
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches, s.uploads), (1, 1, 1, 1), "{s:?}");
    assert_eq!((s.node_updates, s.exec_updates, s.reinstantiations), (0, 0, 0), "{s:?}");
}

#[test]
fn instantiate_mode_updates_a_cached_exec_and_builds_a_new_variant_without_launching() {
    let (mock, mut cache, plan) = setup();
    run(&mut cache, plan, &k(1, 0xa0), &k(2, 0xb0), copy(4), memset(0), None).unwrap();
    mock.calls();
    cache.set_mode(Mode::Instantiate);
    // Changed scalar: the per-node update of a launch, then the upload.
    run(&mut cache, plan, &k(1, 0xa0), &k(3, 0xb0), copy(4), memset(0), None).unwrap();
    assert_eq!(mock.calls(), ["set_kernel grid=4", "upload"]);
    // The other variant (node 4 present): built and instantiated, not launched.
    let k4 = k(5, 0xc0);
    run(&mut cache, plan, &k(1, 0xa0), &k(3, 0xb0), copy(4), memset(0), Some(&k4)).unwrap();
    let calls = mock.calls();
    assert_eq!(calls.first().map(String::as_str), Some("graph_create"), "{calls:?}");
    assert_eq!(calls[calls.len() - 2..], ["instantiate", "upload"]);
    assert!(!calls.iter().any(|c| c == "launch"), "{calls:?}");
    let s = cache.stats();
    assert_eq!((s.launches, s.uploads, s.builds, cache.len()), (1, 2, 2, 2), "{s:?}");
    // Both variants launch as uploaded: no update sent.
    cache.set_mode(Mode::Graph);
    run(&mut cache, plan, &k(1, 0xa0), &k(3, 0xb0), copy(4), memset(0), Some(&k4)).unwrap();
    run(&mut cache, plan, &k(1, 0xa0), &k(3, 0xb0), copy(4), memset(0), None).unwrap();
    assert_eq!(mock.calls(), ["launch", "launch"]);
    assert_eq!(cache.stats().node_updates, 1);
}

#[test]
fn instantiate_mode_hands_no_work_to_host_nodes() {
    let (r, w) = (|p| Access { place: p, write: false }, |p| Access { place: p, write: true });
    let plan = leak_plan(
        vec![
            plan_node(NodeKind::Kernel("a"), vec![w(0)], ""),
            plan_node(NodeKind::Host, vec![r(0)], ""),
        ],
        1,
        0,
    );
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let step = |cache: &mut GraphCache<Mock>, mode| {
        cache.set_mode(mode);
        let k0 = k(1, 0xa0);
        let host = crate::kind::HostParams::new((), (|()| {}) as fn(()));
        let nodes =
            [Some(NodeParams::Kernel(&k0 as &dyn KernelNode)), Some(NodeParams::Host(&host))];
        cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes).unwrap();
        // SAFETY: the job is dropped without running.
        unsafe { crate::kind::HostWork::take_job(&host) }.is_some()
    };
    assert!(step(&mut cache, Mode::Instantiate), "the closure was taken without a launch");
    let calls = mock.calls();
    assert_eq!(calls.last().map(String::as_str), Some("upload"), "{calls:?}");
    assert!(!step(&mut cache, Mode::Graph), "a launch takes the closure");
    assert_eq!(mock.calls(), ["launch"]);
    let s = cache.stats();
    assert_eq!((s.launches, s.uploads, s.builds), (1, 1, 1), "{s:?}");
}

#[test]
fn instantiate_mode_keeps_an_all_kernel_calls_words_for_the_next_launch() {
    let w = |p| Access { place: p, write: true };
    let plan = leak_plan(vec![plan_node(NodeKind::Kernel("a"), vec![w(0)], "")], 1, 0);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let call = |cache: &mut GraphCache<Mock>, mode, scalar| {
        cache.set_mode(mode);
        let k0 = k(scalar, 0xa0);
        cache.run_raw(plan, 0, (CTX, None), STREAM, &[Some(NodeParams::Kernel(&k0))])
    };
    call(&mut cache, Mode::Instantiate, 1).unwrap();
    call(&mut cache, Mode::Instantiate, 1).unwrap();
    assert_eq!(mock.calls()[2..], ["instantiate", "upload", "upload"]);
    // Equal to the uploaded call: an unchanged call, nothing compared or sent.
    call(&mut cache, Mode::Graph, 1).unwrap();
    assert_eq!(mock.calls(), ["launch"]);
    let s = cache.stats();
    assert_eq!((s.unchanged_calls, s.uploads, s.launches, s.node_updates), (2, 2, 1, 0), "{s:?}");
}

/// Memset nodes pack (issue 31): a kernel and a memset whose destination alternates between two
/// buffers (heat's step) get an exec per set after the first round and then launch with
/// nothing sent; an unchanged call is an unchanged call; a changed value takes the ladder.
#[test]
fn memset_nodes_are_memoized_and_unchanged_like_kernels() {
    let (r, w) = (|p| Access { place: p, write: false }, |p| Access { place: p, write: true });
    let plan = leak_plan(
        vec![
            plan_node(NodeKind::Memset, vec![w(0)], ""),
            plan_node(NodeKind::Kernel("acc"), vec![r(0), w(1)], ""),
        ],
        2,
        0,
    );
    let mut cache = GraphCache::with_driver(Mock::default(), 8);
    let set =
        |dst, value| MemsetParams::recorded(Set1d { dst, len: 8, elem_size: 4, value, ctx: CTX });
    let call = |cache: &mut GraphCache<Mock>, s: u64, value: u32| {
        let (m, kk) = (set(0x300 + s * 0x100, value), k(1, 0xa0 + s * 0x100));
        let nodes =
            [Some(NodeParams::Memset(&m)), Some(NodeParams::Kernel(&kk as &dyn KernelNode))];
        cache.run_raw(plan, 0, (CTX, None), STREAM, &nodes).unwrap();
    };
    for i in 0..20u64 {
        call(&mut cache, i % 2, 0);
    }
    let st = cache.stats();
    // Set 0 builds; set 1 updates its exec (2 nodes); set 0 comes back: hashed; set 1 hashed;
    // set 0 again: an exec of its own. Then nothing is sent.
    assert_eq!((st.builds, st.memo_builds), (2, 1), "{st:?}");
    assert!(st.memo_hits >= 14 && st.unchanged_calls >= 14, "{st:?}");
    let updates = st.node_updates;
    call(&mut cache, 0, 0);
    call(&mut cache, 0, 0);
    assert_eq!(cache.stats().node_updates, updates, "unchanged");
    // Another value: the ladder updates the least recently used exec (set 1's) to set 0's
    // pointers and the new value, memset and kernel.
    call(&mut cache, 0, 7);
    assert_eq!(cache.stats().node_updates, updates + 2);
}

/// `may_capture`: a `graph!` plan with a `capture` statement's node (anywhere in its node list)
/// walks the node list for kept recordings and unlisted work, one without does not, and the
/// answer follows the plan when the call site changes; a builder's call always walks it.
#[test]
fn only_plans_with_a_capture_statement_walk_the_nodes_for_captures() {
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock, 8);
    let kernels = leak_plan(vec![plan_node(NodeKind::Kernel("k"), vec![], ""); 3], 0, 0);
    let mut with = vec![plan_node(NodeKind::Kernel("k"), vec![], ""); 3];
    with[2] = plan_node(NodeKind::Captured, vec![], "");
    let captured = leak_plan(with, 0, 0);
    for _ in 0..2 {
        assert!(!cache.may_capture(Site::Plan(kernels)));
        assert!(cache.may_capture(Site::Plan(captured)));
    }
    assert!(cache.may_capture(Site::Builder));
}

#[test]
fn an_edge_into_a_run_time_loop_orders_after_every_iteration_and_captures_chain() {
    // Review 19d: nodes 0 (a kernel) and 1 (a capture) are the body of a run-time `for`; node 2
    // (a capture, no shared buffer) is after it with `.after` edges to both (as `graph!`'s
    // device-statement and capture orderings make), node 3 after an edge to node 0 only.
    // Run 3 times: call nodes 0..6 are the iterations, 6 and 7 the nodes after the loop.
    let node = |kind, after: &'static [u32]| PlanNode { after, ..plan_node(kind, vec![], "") };
    let nodes = vec![
        node(NodeKind::Kernel("set"), &[]),
        node(NodeKind::Captured, &[]),
        node(NodeKind::Captured, &[0, 1]),
        node(NodeKind::Kernel("after"), &[0]),
    ];
    let plan: &'static Plan = Box::leak(Box::new(Plan {
        file: "mock.rs",
        line: 5,
        places: &[],
        nodes: Box::leak(nodes.into_boxed_slice()),
        conditions: 0,
        bodies: &[],
    }));
    let shape = super::looped::Looped::new(plan, &[(0, 2)], &[3]).expect("fits");
    assert_eq!(shape.len(), 8);
    let edges = shape.edges(&[true; 8]);
    // Every copy of the loop's nodes before the nodes after it (none dropped), and each
    // iteration's capture after the previous iteration's.
    for e in
        [(0, 6), (2, 6), (4, 6), (1, 6), (3, 6), (5, 6), (0, 7), (2, 7), (4, 7), (1, 3), (3, 5)]
    {
        let reach = |from: u32, to: u32| {
            let mut seen = vec![from];
            let mut i = 0;
            while i < seen.len() {
                let x = seen[i];
                for &(a, b) in &edges {
                    if a == x && !seen.contains(&b) {
                        seen.push(b);
                    }
                }
                i += 1;
            }
            seen.contains(&to)
        };
        assert!(reach(e.0, e.1), "call node {} is ordered before {}: edges {edges:?}", e.0, e.1);
    }
    // A loop run 0 times: the nodes after it have no edge into it.
    let shape = super::looped::Looped::new(plan, &[(0, 2)], &[0]).expect("fits");
    assert_eq!((shape.len(), shape.edges(&[true; 2])), (2, vec![]));
}

/// A changed call validates and compares only the nodes whose words differ from the exec's
/// (`clean_nodes`): one scalar changed in a 100-node call sends one set-params, and the other
/// 99 nodes are clean; a pointer set coming back to an exec of the memo is compared with that
/// exec's nodes, not with the last launched exec's.
#[test]
fn a_changed_call_walks_only_the_nodes_that_differ_from_the_exec() {
    const N: usize = 100;
    let (mock, plan) = (Mock::default(), kernel_plan(N));
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    let mut ks: Vec<K> = (0..N).map(|i| k(1, 0x1000 + 0x100 * i as u64)).collect();
    let run = |cache: &mut GraphCache<Mock>, ks: &[K]| {
        let refs: Vec<&K> = ks.iter().collect();
        run_kernels(cache, plan, &refs)
    };
    run(&mut cache, &ks).unwrap();
    mock.calls();
    for (call, scalar) in [7u32, 8, 9].into_iter().enumerate() {
        ks[37].scalar = scalar;
        let (before, seen) = (cache.stats(), cache.clean_seen);
        run(&mut cache, &ks).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"], "call {call}");
        let after = cache.stats();
        assert_eq!(after.node_updates - before.node_updates, 1, "call {call}");
        assert_eq!(after.nodes_unchanged - before.nodes_unchanged, N as u64 - 1, "call {call}");
        assert_eq!(cache.clean_seen - seen, N as u64 - 1, "call {call}: clean nodes");
    }
    let args = mock.0.borrow().set_args.clone();
    assert_eq!(args.last().expect("set args")[0], 9u32.to_ne_bytes(), "the last call's scalar");
    // A node made invalid among clean ones is still refused, naming it, with nothing sent.
    ks[60].grid = 0;
    let e = run(&mut cache, &ks).unwrap_err();
    assert!(matches!(e, Error::ZeroDims { .. }), "{e}");
    assert!(mock.calls().is_empty());
    ks[60].grid = 4;
    run(&mut cache, &ks).unwrap();
    assert_eq!(mock.calls(), ["launch"], "the exec still holds the last launched call");
    // Ping-pong: node 0's buffer alternates between two (an exec each, after the first
    // round) while node 99's scalar changes every call. A call's changed words go to the
    // least recently used exec, which holds this call's buffer: compared with that exec's
    // nodes, only node 99 differs.
    for call in 0..4u64 {
        ks[0].ptr = 0xa0 + call % 2;
        run(&mut cache, &ks).unwrap();
    }
    assert_eq!(cache.len(), 2, "two execs: {:?}", cache.stats());
    for call in 0..6u32 {
        ks[0].ptr = 0xa0 + u64::from(call % 2);
        ks[99].scalar = 100 + call;
        let seen = cache.clean_seen;
        mock.calls();
        run(&mut cache, &ks).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"], "ping-pong call {call}");
        assert_eq!(cache.clean_seen - seen, N as u64 - 1, "ping-pong call {call}: clean nodes");
    }
}

/// One step of [`changed_calls_send_what_the_full_walk_sends`]: what the call changes.
#[derive(Clone, Debug)]
enum Step {
    /// Node `.0`'s scalar, pointer (one of a few), grid (0 or over the limit: refused) or
    /// buffer context (another: refused) for this call and the ones after.
    Scalar(usize, u32),
    Pointer(usize, u64),
    Grid(usize, u32),
    Context(usize, bool),
    /// The mock driver refuses per-node set-params (`.0`) and whole-exec updates (`.1`).
    Refuse(bool, bool),
}

impl Step {
    /// The step on the kernels `ks` of the next calls, or on both mock drivers (`Refuse`).
    fn apply(&self, ks: &mut [K], mocks: [&Mock; 2]) {
        match *self {
            Step::Scalar(n, v) => ks[n].scalar = v,
            Step::Pointer(n, p) => ks[n].ptr = p,
            Step::Grid(n, g) => ks[n].grid = g,
            Step::Context(n, f) => ks[n].ctx = if f { CTX1 } else { CTX },
            Step::Refuse(set, update) => refuse(mocks, (set, update)),
        }
    }
}

/// A cache on the mock driver for the clean-node proptests: `execs` execs per variant, at most
/// `max` variants, and with `no_clean` every node of a changed call validated and compared (the
/// full walk the others are checked against).
pub(super) fn walk_cache(no_clean: bool, execs: usize, max: usize) -> (Mock, GraphCache<Mock>) {
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), max);
    cache.set_execs_per_variant(execs);
    cache.limits = Some(limits(false));
    cache.no_clean = no_clean;
    (mock, cache)
}

/// Both mock drivers refuse per-node set-params (`set`) and whole-exec updates (`update`).
pub(super) fn refuse(mocks: [&Mock; 2], (set, update): (bool, bool)) {
    for m in mocks {
        let mut l = m.0.borrow_mut();
        (l.refuse_set, l.refuse_update) = (set, update);
    }
}

/// One call of a cache that skips clean nodes (`a`) against the same call of the full walk
/// (`b`): the same result, the same driver calls with the same arguments, the same counts.
pub(super) fn same_as_full_walk(
    what: &str,
    (ra, rb): (&std::result::Result<(), String>, &std::result::Result<(), String>),
    (ma, a): (&Mock, &GraphCache<Mock>),
    (mb, b): (&Mock, &GraphCache<Mock>),
) -> std::result::Result<(), proptest::test_runner::TestCaseError> {
    proptest::prop_assert_eq!(ra, rb, "{}", what);
    proptest::prop_assert_eq!(ma.calls(), mb.calls(), "{}", what);
    let (la, lb) = (ma.0.borrow(), mb.0.borrow());
    proptest::prop_assert_eq!(&la.set_args, &lb.set_args, "{}", what);
    proptest::prop_assert_eq!(&la.add_args, &lb.add_args, "{}", what);
    proptest::prop_assert_eq!(format!("{:?}", a.stats()), format!("{:?}", b.stats()), "{}", what);
    Ok(())
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..10usize, 1..4u32).prop_map(|(n, v)| Step::Scalar(n, v)),
        4 => (0..10usize, 0..3u64).prop_map(|(n, p)| Step::Pointer(n, 0xa000 + 0x100 * p)),
        1 => (0..10usize, prop::sample::select(vec![0u32, 4, u32::MAX]))
            .prop_map(|(n, g)| Step::Grid(n, g)),
        1 => (0..10usize, any::<bool>()).prop_map(|(n, f)| Step::Context(n, f)),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(s, u)| Step::Refuse(s, u)),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// Against the full walk (`no_clean`: every node validated and compared on a changed
    /// call), random sequences of changes to a 10-kernel call, with 1 to 3 execs per variant,
    /// refused inputs and refused updates: the same results, the same driver calls with the
    /// same arguments, the same counts. A node taken for clean that had changed would send
    /// nothing (or accept an invalid input) where the full walk sends (or refuses).
    #[test]
    fn changed_calls_send_what_the_full_walk_sends(
        execs in 1..4usize,
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let plan = kernel_plan(10);
        let (ma, mut a) = walk_cache(false, execs, 8);
        let (mb, mut b) = walk_cache(true, execs, 8);
        let mut ks: Vec<K> = (0..10).map(|i| k(1, 0xa000 + 0x100 * (i % 3) as u64)).collect();
        for (i, s) in steps.iter().enumerate() {
            s.apply(&mut ks, [&ma, &mb]);
            let refs: Vec<&K> = ks.iter().collect();
            let ra = run_kernels(&mut a, plan, &refs).map_err(|e| e.to_string());
            let rb = run_kernels(&mut b, plan, &refs).map_err(|e| e.to_string());
            same_as_full_walk(&format!("step {i} {s:?}"), (&ra, &rb), (&ma, &a), (&mb, &b))?;
        }
        proptest::prop_assert_eq!(b.clean_seen, 0);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// Calls of one 10-kernel plan through the node list (`GraphCache::run`'s path: words that
    /// `unchanged` packs, with each node's span, copied by `clean_nodes`) and with words made
    /// as statements are evaluated (`run_words`: no spans), in random order, with random
    /// changes: against the full walk, the same results, driver calls, arguments and counts;
    /// after each call that succeeded, the exec launched holds the call's parameters. Spans
    /// left from a node-list call and read with a words call's words would mark the wrong
    /// nodes clean.
    #[test]
    fn node_list_and_words_calls_of_one_plan_send_what_the_full_walk_sends(
        execs in 1..4usize,
        steps in proptest::collection::vec((step(), proptest::prelude::any::<bool>()), 1..40),
    ) {
        let plan = kernel_plan(10);
        let (ma, mut a) = walk_cache(false, execs, 8);
        let (mb, mut b) = walk_cache(true, execs, 8);
        ma.track();
        mb.track();
        let mut ks: Vec<K> = (0..10).map(|i| wk(i, 1, 0xa000 + 0x100 * (i % 3) as u64)).collect();
        for (i, (s, words)) in steps.iter().enumerate() {
            s.apply(&mut ks, [&ma, &mb]);
            let refs: Vec<&K> = ks.iter().collect();
            let (ra, rb) = if *words {
                let guards: Vec<(u64, u64)> = ks.iter().map(|k| (k.ptr, 4)).collect();
                (
                    run_words_kernels(&mut a, plan, &refs, &guards, None).map_err(|e| e.to_string()),
                    run_words_kernels(&mut b, plan, &refs, &guards, None).map_err(|e| e.to_string()),
                )
            } else {
                (
                    run_kernels(&mut a, plan, &refs).map_err(|e| e.to_string()),
                    run_kernels(&mut b, plan, &refs).map_err(|e| e.to_string()),
                )
            };
            let what = format!("step {i} {s:?} words {words}");
            same_as_full_walk(&what, (&ra, &rb), (&ma, &a), (&mb, &b))?;
            if ra.is_ok() {
                proptest::prop_assert_eq!(ma.launched_kernels(), kernel_args(&ks), "{}: the exec launched", what);
            }
        }
        proptest::prop_assert_eq!(b.clean_seen, 0);
    }
}

proptest::proptest! {
    /// `hash_words` (the memo's recent-words hint) and `hash_u32s` (the builder signature's
    /// key) depend on the words only: equal words, in two allocations, hash alike (on both
    /// sides of the four-lane threshold and whatever the remainder); and one word changed
    /// changes the hash (each step is a bijection of the word and of the hash so far).
    #[test]
    fn the_word_hashes_are_functions_of_the_words_and_see_each_one(
        words in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..48),
        seed in proptest::prelude::any::<u64>(),
        at in proptest::prelude::any::<usize>(),
        flip in 1..u64::MAX,
    ) {
        let again = words.clone();
        proptest::prop_assert_eq!(hash_words(seed, &words), hash_words(seed, &again));
        let small: Vec<u32> = words.iter().map(|&w| w as u32).collect();
        let small_again = small.clone();
        proptest::prop_assert_eq!(hash_u32s(seed, &small), hash_u32s(seed, &small_again));
        if !words.is_empty() {
            let i = at % words.len();
            let mut other = words.clone();
            other[i] ^= flip;
            proptest::prop_assert_ne!(hash_words(seed, &words), hash_words(seed, &other));
            let mut other = small.clone();
            other[i] ^= (flip as u32).max(1);
            proptest::prop_assert_ne!(hash_u32s(seed, &small), hash_u32s(seed, &other));
        }
    }
}

/// One step of [`node_list_calls_with_absent_nodes_send_what_the_full_walk_sends`]: changes
/// `(node, what, value)` to the nodes of the next calls (`what`: 0 a kernel's scalar, 1 its
/// buffer, 2 its grid, 0 refused, 3 a memset's value), which optional nodes are present (a
/// mask), or refused set-params (`.0`) and updates (`.1`) from now on.
#[derive(Clone, Debug)]
enum AbsentStep {
    Change(Vec<(usize, u8, u32)>),
    Present(u16),
    Refuse(bool, bool),
}

fn absent_step() -> impl proptest::strategy::Strategy<Value = AbsentStep> {
    use proptest::prelude::*;
    let change = prop_oneof![
        4 => (0..12usize, Just(0u8), 1..4u32),
        4 => (0..12usize, Just(1u8), 0..3u32),
        1 => (0..12usize, Just(2u8), prop::sample::select(vec![0u32, 4, 8])),
        1 => (0..12usize, Just(3u8), 0..2u32),
    ];
    prop_oneof![
        8 => prop::collection::vec(change, 0..4).prop_map(AbsentStep::Change),
        2 => any::<u16>().prop_map(AbsentStep::Present),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(s, u)| AbsentStep::Refuse(s, u)),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    /// Node-list calls (`GraphCache::run`'s path, whose words `unchanged` packs node by node
    /// and `clean_nodes` copies by span) of 8 to 12 nodes, kernels and memsets, some of them
    /// optional (absent, `None`, in calls whose key leaves them out; the first node too), each
    /// call changing none, one or several nodes: against the full walk (`no_clean`), the same
    /// results, driver calls, arguments and counts; and after each call that succeeded, the
    /// exec launched holds the call's present kernels' parameters, node for node.
    #[test]
    fn node_list_calls_with_absent_nodes_send_what_the_full_walk_sends(
        execs in 1..4usize,
        kinds in proptest::collection::vec((proptest::bool::weighted(0.8), proptest::bool::weighted(0.3)), 8..13),
        steps in proptest::collection::vec(absent_step(), 1..30),
    ) {
        let w = |p| Access { place: p, write: true };
        let nodes: Vec<PlanNode> = kinds
            .iter()
            .enumerate()
            .map(|(i, &(kernel, optional))| {
                let kind = if kernel { NodeKind::Kernel("k") } else { NodeKind::Memset };
                plan_node(kind, vec![w(i as u32)], if optional { "flag" } else { "" })
            })
            .collect();
        let n = kinds.len();
        let plan = leak_plan(nodes, n, 1);
        let (ma, mut a) = walk_cache(false, execs, 8);
        let (mb, mut b) = walk_cache(true, execs, 8);
        ma.track();
        mb.track();
        let mut ks: Vec<K> = (0..n).map(|i| k(1, 0xa000 + 0x100 * i as u64)).collect();
        let mut ms: Vec<MemsetParams<'static>> = (0..n).map(|_| memset(0)).collect();
        let mut present = u16::MAX;
        for (i, s) in steps.iter().enumerate() {
            match s {
                AbsentStep::Change(cs) => {
                    for &(j, what, v) in cs {
                        let j = j % n;
                        match what {
                            0 => ks[j].scalar = v,
                            1 => ks[j].ptr = 0xa000 + 0x100 * j as u64 + 0x1_0000 * u64::from(v),
                            2 => ks[j].grid = v,
                            _ => ms[j] = memset(v),
                        }
                    }
                }
                AbsentStep::Present(m) => present = *m,
                AbsentStep::Refuse(set, update) => refuse([&ma, &mb], (*set, *update)),
            }
            // The key: which optional nodes are present.
            let here = |j: usize| !kinds[j].1 || present >> j & 1 == 1;
            let key = (0..n).filter(|&j| kinds[j].1 && here(j)).fold(0u64, |m, j| m | 1 << j);
            let list: Vec<Option<NodeParams<'_>>> = (0..n)
                .map(|j| {
                    here(j).then(|| {
                        if kinds[j].0 {
                            NodeParams::Kernel(&ks[j] as &dyn KernelNode)
                        } else {
                            NodeParams::Memset(&ms[j])
                        }
                    })
                })
                .collect();
            let ra = a.run_raw(plan, key, (CTX, None), STREAM, &list).map_err(|e| e.to_string());
            let rb = b.run_raw(plan, key, (CTX, None), STREAM, &list).map_err(|e| e.to_string());
            let what = format!("step {i} {s:?}");
            same_as_full_walk(&what, (&ra, &rb), (&ma, &a), (&mb, &b))?;
            if ra.is_ok() {
                let want: Vec<Vec<Vec<u8>>> = (0..n)
                    .filter(|&j| kinds[j].0 && here(j))
                    .map(|j| vec![ks[j].scalar.to_ne_bytes().to_vec(), ks[j].ptr.to_ne_bytes().to_vec()])
                    .collect();
                proptest::prop_assert_eq!(ma.launched_kernels(), want, "{}: the exec launched", what);
            }
        }
        proptest::prop_assert_eq!(b.clean_seen, 0);
    }
}

/// The call id of [`run_words_kernels`]' calls, whose handles name its places.
const WORDS_CALL: u64 = 7;

/// Runs the kernels `ks` as the nodes of `plan` (a [`kernel_plan`]) as a `graph!` call does
/// with words made as its statements are evaluated ([`GraphCache::words`]): the guard of each
/// place in `guards` first (address, bytes), then each node's words, except that with
/// `run = Some(n)` the last `n` nodes are a run's later iterations of the one before them
/// (their words one [`CallWords::repeat`], their buffers only in the guards, as
/// `word_repeat` puts them); then the cache's steps of `run_checked` (no ledger or aliasing
/// check).
pub(super) fn run_words_kernels(
    cache: &mut GraphCache<Mock>,
    plan: &'static Plan,
    ks: &[&K],
    guards: &[(u64, u64)],
    run: Option<usize>,
) -> Result<()> {
    let nodes: Vec<_> =
        ks.iter().map(|&k| Some(NodeParams::Kernel(k as &dyn KernelNode))).collect();
    let mut w = cache.words(plan, &crate::operand::CallId(WORDS_CALL));
    for &g in guards {
        w.guard((g.0, g.1, true));
    }
    let plain = ks.len() - run.unwrap_or(0);
    for n in nodes[..plain].iter().flatten() {
        w.node(&|p: &mut crate::kind::kernel::Pack<'_>| n.pack(p));
    }
    if let Some(r) = run {
        w.repeat(r as u64, 1);
    }
    w.guarded = true;
    let w = cache.take_back(w);
    let call = GraphCall { shape: plan, site: Site::Plan(plan), key: 0, signature: &[] };
    let handles = Some((plan, WORDS_CALL));
    let (same, _) = cache.unchanged_words(&call, CTX, w, handles);
    let mut nodes = super::Nodes::Ready(&nodes);
    if same.is_none() {
        cache.validate_changed_call(&call, CTX, &mut nodes, handles)?;
    }
    cache.enable_peers(call.shape)?;
    cache.run_validated(call, (CTX, None), STREAM, &mut nodes, same)
}

/// Buffer sets taking turns on a 4-kernel `graph!` call with three execs per variant:
/// ping-pong, a cycle of three, sets repeated, and orders the guess gets wrong. After the first
/// rounds every call launches the exec holding its set's parameters (the tracking mock's
/// launched exec) and sends nothing: a set that differs from the last call's is a memo hit, one
/// equal to it an unchanged call. In ping-pong and the cycle, each exec is followed by the
/// same one every time, so their memo hits are found by the guess (words compared in place
/// with the exec that followed last time), all but the first turn after the order changed.
#[test]
fn buffer_sets_taking_turns_launch_their_execs_whatever_the_order() {
    let plan = kernel_plan(4);
    let (mock, mut cache) = walk_cache(false, 3, 8);
    mock.track();
    let set = |j: u64| -> Vec<K> {
        (0..4).map(|i| wk(i, 1, 0xa000 + 0x1000 * j + 0x100 * i as u64)).collect()
    };
    let call = |cache: &mut GraphCache<Mock>, j: u64| {
        let ks = set(j);
        let refs: Vec<&K> = ks.iter().collect();
        let guards: Vec<(u64, u64)> = ks.iter().map(|k| (k.ptr, 4)).collect();
        run_words_kernels(cache, plan, &refs, &guards, None).expect("a call");
        assert_eq!(mock.launched_kernels(), kernel_args(&ks), "set {j}: the exec launched");
    };
    // First rounds: each set comes back, so each gets an exec.
    for j in [0, 1, 0, 1, 2, 0, 1, 2, 0, 1, 2] {
        call(&mut cache, j);
    }
    assert_eq!(cache.len(), 3, "{:?}", cache.stats());
    mock.take_set_args();
    let phases: [(&str, &[u64], bool); 4] = [
        ("ping-pong", &[0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1], true),
        ("cycle of three", &[2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1], true),
        ("sets repeated", &[1, 1, 2, 2, 0, 0, 2, 2, 1, 1], false),
        ("guess wrong", &[2, 1, 2, 0, 2, 1, 0, 1, 1, 2], false),
    ];
    let mut prev = 2;
    for (name, order, all_guessed) in phases {
        let (before, guessed) = (cache.stats(), cache.guessed);
        let changes = order
            .iter()
            .scan(prev, |p, &j| {
                let changed = *p != j;
                *p = j;
                Some(u64::from(changed))
            })
            .sum::<u64>();
        for &j in order {
            call(&mut cache, j);
        }
        prev = *order.last().expect("an order");
        let s = cache.stats();
        let n = order.len() as u64;
        assert_eq!(s.memo_hits - before.memo_hits, changes, "{name}: memo hits, {s:?}");
        assert_eq!(s.unchanged_calls - before.unchanged_calls, n, "{name}: {s:?}");
        assert_eq!(s.node_updates, before.node_updates, "{name}: nothing set, {s:?}");
        assert_eq!(s.instantiations, before.instantiations, "{name}: nothing built, {s:?}");
        assert!(mock.take_set_args().is_empty(), "{name}: no set-params");
        if all_guessed {
            let found = cache.guessed - guessed;
            assert!(found + 1 >= changes && found <= changes, "{name}: {found} guessed");
        }
    }
    assert!(cache.guessed > 0);
}

/// Kernel `i` of a [`kernel_plan`] call of [`run_words_kernels`]: writing its place `i + 1`.
pub(super) fn wk(i: usize, scalar: u32, ptr: u64) -> K {
    K { tag: crate::operand::tag(WORDS_CALL, i as u32 + 1), ..k(scalar, ptr) }
}

/// The arguments (scalar, pointer) of each of `ks`, as [`Mock::launched_kernels`] reads an
/// exec's: what the exec launched for a call of `ks` must hold.
pub(super) fn kernel_args(ks: &[K]) -> Vec<Vec<Vec<u8>>> {
    ks.iter().map(|k| vec![k.scalar.to_ne_bytes().to_vec(), k.ptr.to_ne_bytes().to_vec()]).collect()
}

#[test]
fn a_changed_call_s_words_mark_the_nodes_equal_to_the_exec_s_clean_without_packing_them() {
    let plan = kernel_plan(10);
    let mock = Mock::default();
    let mut cache = GraphCache::with_driver(mock.clone(), 8);
    cache.limits = Some(limits(false));
    let mut ks: Vec<K> = (0..10).map(|i| wk(i, 1, 0xa000 + 0x100 * i as u64)).collect();
    let guards: Vec<(u64, u64)> = (0..10).map(|i| (0xa000 + 0x100 * i, 4)).collect();
    let refs = |ks: &[K]| -> Vec<K> { ks.to_vec() };
    let go = |cache: &mut GraphCache<Mock>, ks: &[K]| {
        let r: Vec<&K> = ks.iter().collect();
        run_words_kernels(cache, plan, &r, &guards, None)
    };
    go(&mut cache, &refs(&ks)).unwrap();
    // One scalar changed per call, never the same twice: node 4 is sent, the 9 others are
    // clean, found from the words (no node packed again: no kept node words either).
    for v in 2..6 {
        mock.calls();
        ks[4].scalar = v;
        let seen = cache.clean_seen;
        go(&mut cache, &refs(&ks)).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"], "scalar {v}");
        assert_eq!(cache.clean_seen - seen, 9, "scalar {v}");
        assert!(cache.variants.iter().all(|v| v.node_words.spans.is_empty()));
        assert!(cache.variants.iter().all(|v| v.items.len() == 10 && v.items_of == v.pack.len()));
    }
    // An invalid node among clean ones is still refused, naming it, and nothing is sent.
    ks[7].grid = 0;
    mock.calls();
    let e = go(&mut cache, &refs(&ks)).unwrap_err().to_string();
    assert!(e.contains("node 7") || e.contains("grid"), "{e}");
    assert!(mock.calls().is_empty());
    ks[7].grid = 4;
    // A call through the node list (no items) in between: its exec's words carry none, so
    // the next call's nodes are packed (the node-list call's handles are not packed by place:
    // none is clean), and that call's words bring the items back for the one after.
    ks[2].scalar = 9;
    run_kernels(&mut cache, plan, &ks.iter().collect::<Vec<_>>()).unwrap();
    assert!(cache.variants.iter().all(|v| v.items.is_empty()), "a node-list pack has no items");
    for (n, want) in [(3, 0), (5, 9)] {
        ks[n].scalar = 9;
        let seen = cache.clean_seen;
        go(&mut cache, &refs(&ks)).unwrap();
        assert_eq!(cache.clean_seen - seen, want, "node {n}");
        assert!(cache.variants.iter().all(|v| v.items.len() == 10));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// As `changed_calls_send_what_the_full_walk_sends`, through a `graph!` call's words
    /// ([`run_words_kernels`]): clean nodes found from the words' items. With `run`, nodes 2
    /// to 9 are a run's later iterations of node 1 (its scalar, grid, context and function,
    /// their buffers their own, in the guards only), so a change of node 1 or of a later
    /// node's buffer must reach them.
    #[test]
    fn changed_calls_by_words_send_what_the_full_walk_sends(
        execs in 1..4usize,
        run in proptest::prelude::any::<bool>(),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let plan = kernel_plan(10);
        let (ma, mut a) = walk_cache(false, execs, 8);
        let (mb, mut b) = walk_cache(true, execs, 8);
        let mut ks: Vec<K> = (0..10).map(|i| wk(i, 1, 0xa000 + 0x100 * (i % 3) as u64)).collect();
        let later = if run { Some(8) } else { None };
        for (i, s) in steps.iter().enumerate() {
            s.apply(&mut ks, [&ma, &mb]);
            if run {
                // A run's later iterations make the first one's call on other elements.
                let first = ks[1].clone();
                for (j, kj) in ks.iter_mut().enumerate().skip(2) {
                    *kj = K { ptr: kj.ptr, tag: kj.tag, ..first.clone() };
                    kj.tag = crate::operand::tag(WORDS_CALL, j as u32 + 1);
                }
            }
            let guards: Vec<(u64, u64)> = ks.iter().map(|k| (k.ptr, 4)).collect();
            let refs: Vec<&K> = ks.iter().collect();
            let ra = run_words_kernels(&mut a, plan, &refs, &guards, later).map_err(|e| e.to_string());
            let rb = run_words_kernels(&mut b, plan, &refs, &guards, later).map_err(|e| e.to_string());
            same_as_full_walk(&format!("step {i} {s:?}"), (&ra, &rb), (&ma, &a), (&mb, &b))?;
        }
        proptest::prop_assert_eq!(b.clean_seen, 0);
    }
}

// Review 25 (brief 1, commit be78a2e): a changed `graph!` call's clean nodes found from its
// words item by item (`clean_by_items`), for bodies of many shapes: host `if`s (absent nodes),
// memsets among kernels, runs of one to three statements an iteration (a memset among them),
// runs whose later iterations are put in one by one (not `made_by`), adjacent runs, runs after
// other nodes; and between calls: a call through the node list (no items), words lent and
// never given back (a panic in the body), `clear`, `Mode::Instantiate`, refused updates, one to
// three execs per variant, a bound of two variants (eviction). Against the full walk.

/// A statement of a [`body_nodes`] body.
#[derive(Clone, Debug)]
enum Stmt25 {
    /// A kernel statement, inside a host `if` on key bit `.0` (`None`: always present).
    Kernel(Option<u32>),
    /// A memset statement, likewise.
    Memset(Option<u32>),
    /// A run of iterations of an unrolled `for`: `per` statements an iteration (statement
    /// `memset` of them a memset), the first iteration put in statement by statement, then
    /// `later` more iterations: as one item when `made` (their nodes the first iteration's
    /// calls on their own buffers: [`CallWords::repeat`]), else each node put in by itself (a
    /// helper's statements, `put_words`: every parameter its own).
    Run { per: usize, later: usize, memset: Option<usize>, made: bool },
}

fn stmt25() -> impl proptest::strategy::Strategy<Value = Stmt25> {
    use proptest::prelude::*;
    prop_oneof![
        3 => proptest::option::of(0..2u32).prop_map(Stmt25::Kernel),
        1 => proptest::option::of(0..2u32).prop_map(Stmt25::Memset),
        3 => (1..4usize, 1..4usize, proptest::option::of(0..3usize), any::<bool>()).prop_map(
            |(per, later, m, made)| Stmt25::Run { per, later, memset: m.filter(|&m| m < per), made }
        ),
    ]
}

/// One node of a [`Stmt25`] body: a memset or a kernel, its host condition bit, and for a
/// later iteration of a `made` run the first iteration's node it repeats.
#[derive(Clone, Copy, Debug)]
struct Node25 {
    memset: bool,
    cond: Option<u32>,
    template: Option<usize>,
}

/// The nodes of `body`, in node order, padded with plain kernels to at least 12 (above
/// `CLEAN_MIN_NODES`).
fn body_nodes(body: &mut Vec<Stmt25>) -> Vec<Node25> {
    let count = |body: &[Stmt25]| -> usize {
        body.iter()
            .map(|s| match s {
                Stmt25::Run { per, later, .. } => per * (1 + later),
                _ => 1,
            })
            .sum()
    };
    while count(body) < 12 {
        body.push(Stmt25::Kernel(None));
    }
    let mut out = Vec::new();
    for s in body.iter() {
        match *s {
            Stmt25::Kernel(c) => out.push(Node25 { memset: false, cond: c, template: None }),
            Stmt25::Memset(c) => out.push(Node25 { memset: true, cond: c, template: None }),
            Stmt25::Run { per, later, memset, made } => {
                let first = out.len();
                for j in 0..per * (1 + later) {
                    let at = j % per;
                    let template = (made && j >= per).then_some(first + at);
                    out.push(Node25 { memset: memset == Some(at), cond: None, template });
                }
            }
        }
    }
    out
}

/// The plan of `nodes`: node `j` reads place 0 (a kernel) and writes place `j + 1`.
fn body_plan(nodes: &[Node25]) -> &'static Plan {
    let (r, w) = (|p| Access { place: p, write: false }, |p| Access { place: p, write: true });
    let plan_nodes = nodes
        .iter()
        .enumerate()
        .map(|(j, n)| {
            let (kind, access) = if n.memset {
                (NodeKind::Memset, vec![w(j as u32 + 1)])
            } else {
                (NodeKind::Kernel("acc"), vec![r(0), w(j as u32 + 1)])
            };
            plan_node(kind, access, if n.cond.is_some() { "flag" } else { "" })
        })
        .collect();
    leak_plan(plan_nodes, nodes.len() + 1, 2)
}

/// What a call sets of one node (of a later iteration of a `made` run: only `ptr` and `ctx`,
/// its buffer's; the rest is its first iteration's node's).
#[derive(Clone, Copy, Debug)]
struct Params25 {
    scalar: u32,
    ptr: u64,
    grid: u32,
    other_ctx: bool,
    other_func: bool,
    /// Declared `#[programmatic]` (review 29b: its edges change kind, the exec is dropped).
    programmatic: bool,
}

/// One step of [`changed_calls_of_any_body_send_what_the_full_walk_sends`]: a change for this
/// call and the ones after, or something done between calls; then a call.
#[derive(Clone, Debug)]
enum Step25 {
    Scalar(usize, u32),
    Pointer(usize, u64),
    /// Two nodes' buffers swapped (review 29b: an array's elements swapped keep its span's
    /// addresses but not their order).
    Swap(usize, usize),
    Grid(usize, u32),
    Context(usize, bool),
    Function(usize, bool),
    /// Node `.0` declared `#[programmatic]` or not (review 29b).
    Programmatic(usize, bool),
    /// The host `if`s taken (key bits).
    Key(u64),
    Refuse(bool, bool),
    /// A call's words lent and never given back (the body panicked), before this call.
    Lend,
    /// `clear` before this call.
    Clear,
    /// This call in `Mode::Instantiate`.
    Instantiate,
    /// This call in `Mode::Eager` (validated, then nothing of the cache's: eager work only).
    Eager,
    /// This call through its node list (`unchanged`: words without items).
    List,
}

fn step25() -> impl proptest::strategy::Strategy<Value = Step25> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0..64usize, 1..4u32).prop_map(|(n, v)| Step25::Scalar(n, v)),
        5 => (0..64usize, 0..3u64).prop_map(|(n, p)| Step25::Pointer(n, 0xa000 + 0x100 * p)),
        1 => (0..64usize, prop::sample::select(vec![0u32, 4, 8, u32::MAX]))
            .prop_map(|(n, g)| Step25::Grid(n, g)),
        1 => (0..64usize, any::<bool>()).prop_map(|(n, f)| Step25::Context(n, f)),
        1 => (0..64usize, any::<bool>()).prop_map(|(n, f)| Step25::Function(n, f)),
        2 => (0..4u64).prop_map(Step25::Key),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(s, u)| Step25::Refuse(s, u)),
        1 => Just(Step25::Lend),
        1 => Just(Step25::Clear),
        1 => Just(Step25::Instantiate),
        1 => Just(Step25::Eager),
        1 => Just(Step25::List),
    ]
}

/// One call of a [`Stmt25`] body (`nodes`, `plan`) with parameters `params` and host `if`s
/// `key`, as `graph!` makes it: every place's guard and its context's word first, then each
/// present statement's words, a `made` run's later iterations as one [`CallWords::repeat`]
/// (or, with `list`, packed from the node list by `unchanged`); then the cache's steps of
/// `run_checked` (no ledger or aliasing check) in its mode (in `Mode::Eager`, up to the eager
/// launches, which the mock does not see).
fn run_body25(
    cache: &mut GraphCache<Mock>,
    (plan, body, nodes): (&'static Plan, &[Stmt25], &[Node25]),
    params: &[Params25],
    key: u64,
    list: bool,
) -> Result<()> {
    let present = |n: &Node25| n.cond.is_none_or(|b| key & (1 << b) != 0);
    // Each node's parameters: a `made` run's later node takes its first iteration's.
    let eff: Vec<Params25> = nodes
        .iter()
        .enumerate()
        .map(|(j, n)| match n.template {
            Some(t) => Params25 { ptr: params[j].ptr, other_ctx: params[j].other_ctx, ..params[t] },
            None => params[j],
        })
        .collect();
    let ctx_of = |p: &Params25| if p.other_ctx { CTX1 } else { CTX };
    let ks: Vec<K> = eff
        .iter()
        .enumerate()
        .map(|(j, p)| K {
            func: if p.other_func { 0x20 } else { 0x10 },
            grid: p.grid,
            ctx: ctx_of(p),
            tag: crate::operand::tag(WORDS_CALL, j as u32 + 1),
            programmatic: p.programmatic,
            ..k(p.scalar, p.ptr)
        })
        .collect();
    let ms: Vec<MemsetParams<'static>> = eff
        .iter()
        .enumerate()
        .map(|(j, p)| {
            let set = Set1d { dst: p.ptr, len: 8, elem_size: 4, value: p.scalar, ctx: ctx_of(p) };
            let mut m = MemsetParams::recorded(set);
            m.dst_tag = crate::operand::tag(WORDS_CALL, j as u32 + 1);
            m
        })
        .collect();
    let list_nodes: Vec<Option<NodeParams<'_>>> = nodes
        .iter()
        .enumerate()
        .map(|(j, n)| {
            present(n).then(|| {
                if n.memset {
                    NodeParams::Memset(&ms[j])
                } else {
                    NodeParams::Kernel(&ks[j] as &dyn KernelNode)
                }
            })
        })
        .collect();
    let call = GraphCall { shape: plan, site: Site::Plan(plan), key, signature: &[] };
    let handles = Some((plan, WORDS_CALL));
    let same = if list {
        cache.unchanged(&call, CTX, &list_nodes, handles)?
    } else {
        let mut w = cache.words(plan, &crate::operand::CallId(WORDS_CALL));
        w.word(crate::kind::kernel::GUARDS_TAG);
        w.guard((0x9000, 4, false));
        w.word(CTX as u64);
        // A `made` run's nodes' places are the elements of one array acquired in one loop:
        // their words one span ([`CallWords::elements`], as `acquire_mut_each` marks them).
        let mut array = vec![None; nodes.len()];
        let mut at = 0;
        for (r, s) in body.iter().enumerate() {
            let n = match *s {
                Stmt25::Run { per, later, .. } => per * (1 + later),
                _ => 1,
            };
            if let Stmt25::Run { made: true, .. } = s {
                array[at..at + n].fill(Some(r));
            }
            at += n;
        }
        let mut begin = None;
        for (j, p) in eff.iter().enumerate() {
            if array[j].is_some() && (j == 0 || array[j - 1] != array[j]) {
                begin = Some(w.at());
            }
            w.guard((p.ptr, 4, true));
            w.word(ctx_of(p) as u64);
            if array[j].is_some() && array.get(j + 1).copied().flatten() != array[j] {
                w.elements(begin.take().expect("the array's first element began it"));
            }
        }
        let put = |w: &mut CallWords, j: usize| {
            if let Some(n) = &list_nodes[j] {
                w.node(&|p: &mut crate::kind::kernel::Pack<'_>| n.pack(p));
            }
        };
        let mut j = 0;
        for s in body {
            match *s {
                Stmt25::Kernel(_) | Stmt25::Memset(_) => {
                    put(&mut w, j);
                    j += 1;
                }
                Stmt25::Run { per, later, made, .. } => {
                    for i in j..j + per {
                        put(&mut w, i);
                    }
                    if made {
                        w.repeat((per * later) as u64, per as u32);
                    } else {
                        for i in j + per..j + per * (1 + later) {
                            put(&mut w, i);
                        }
                    }
                    j += per * (1 + later);
                }
            }
        }
        assert_eq!(j, nodes.len());
        w.guarded = true;
        let w = cache.take_back(w);
        cache.unchanged_words(&call, CTX, w, handles).0
    };
    // The node list as `run_words_in` gives it: a segment per statement, but each made run's
    // later iterations one segment, deferrable where they are all kernel nodes (as a
    // `LazyChunk` of `kernels!` launches), left unmade by a changed call whose words show
    // them clean.
    let mut segs: Vec<Seg25<'_>> = Vec::new();
    let mut j = 0;
    for s in body {
        let (first, later) = match *s {
            Stmt25::Run { per, later, made: true, .. } => (per, per * later),
            Stmt25::Run { per, later, made: false, .. } => (per * (1 + later), 0),
            _ => (1, 0),
        };
        for i in j..j + first {
            segs.push(Seg25::new(&list_nodes[i..i + 1], false));
        }
        // In chunks of at most `CHUNK25` entries (a `LazyChunk` holds up to 16 statements,
        // whatever the iterations' boundaries): each deferrable where all its nodes are kernels.
        let chunk = CHUNK25.get().max(1);
        let mut from = j + first;
        while from < j + first + later {
            let to = from.saturating_add(chunk).min(j + first + later);
            let kernels = nodes[from..to].iter().all(|n| !n.memset);
            segs.push(Seg25::new(&list_nodes[from..to], kernels));
            from = to;
        }
        j += first + later;
    }
    let refs: Vec<&dyn crate::kind::list::Segment<'_>> =
        segs.iter().map(|s| s as &dyn crate::kind::list::Segment<'_>).collect();
    let mut storage = vec![core::mem::MaybeUninit::uninit(); list_nodes.len()];
    let mut list_of = Nodes::Lazy(&mut storage, &refs);
    // As `run_checked` makes it.
    if same.is_none() && cache.mode != Mode::Eager {
        list_of.get_partial(&mut cache.deferred);
    } else {
        list_of.get();
    }
    if same.is_none() {
        cache.validate_changed_call(&call, CTX, &mut list_of, handles)?;
    }
    cache.enable_peers(call.shape)?;
    if cache.mode == Mode::Eager {
        // `run_checked` launches the statements one by one (nothing the mock sees).
        return Ok(());
    }
    let r = cache.run_validated(call, (CTX, None), STREAM, &mut list_of, same);
    let unmade = segs.iter().filter(|s| s.deferrable && !s.filled.get()).count() as u64;
    DEFERRED25.set(DEFERRED25.get() + unmade);
    r
}

thread_local! {
    /// Segments of [`run_body25`]'s calls left unmade (their nodes never needed).
    static DEFERRED25: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    /// Entries of one segment of a made run's later iterations in [`run_body25`] (review
    /// 29b: several segments a run, as `LazyChunk`s of 16 statements make; some deferrable,
    /// some holding a memset).
    static CHUNK25: core::cell::Cell<usize> = const { core::cell::Cell::new(usize::MAX) };
}

/// A segment of [`run_body25`]'s node list: entries made already, `fill` copies them; a
/// deferrable one until filled.
struct Seg25<'a> {
    nodes: &'a [Option<NodeParams<'a>>],
    deferrable: bool,
    filled: core::cell::Cell<bool>,
}

impl<'a> Seg25<'a> {
    fn new(nodes: &'a [Option<NodeParams<'a>>], deferrable: bool) -> Self {
        Seg25 { nodes, deferrable, filled: core::cell::Cell::new(false) }
    }
}

impl<'a> crate::kind::list::Segment<'a> for Seg25<'a> {
    fn statements(&self) -> usize {
        self.nodes.len()
    }
    fn fill(&self, out: &mut [Option<NodeParams<'a>>]) {
        out.copy_from_slice(self.nodes);
        self.filled.set(true);
    }
    fn deferrable(&self) -> bool {
        self.deferrable && !self.filled.get()
    }
}

/// A cache of [`changed_calls_of_any_body_send_what_the_full_walk_sends`], its clean-node skip
/// off with `no_clean`.
fn cache25(no_clean: bool, execs: usize, max: usize) -> (Mock, GraphCache<Mock>) {
    let (mock, cache) = walk_cache(no_clean, execs, max);
    mock.0.borrow_mut().read_args = true;
    (mock, cache)
}

/// The first parameters of a [`Stmt25`] body's nodes.
fn params25(n: usize) -> Vec<Params25> {
    (0..n)
        .map(|j| Params25 {
            scalar: 1,
            ptr: 0xa000 + 0x100 * (j % 3) as u64,
            grid: 4,
            other_ctx: false,
            other_func: false,
            programmatic: false,
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
    /// As `changed_calls_by_words_send_what_the_full_walk_sends`, for bodies of any shape
    /// ([`Stmt25`]) and with calls through the node list, lent words, `clear`,
    /// `Mode::Instantiate` and a bound of 2 or 8 variants between changed calls: the same
    /// results, driver calls (with the kernel arguments and grids each set-params and added
    /// node got), and counts as the full walk. A node taken for clean whose parameters differ
    /// from the exec's would show as a set-params the full walk makes and this cache does not.
    #[test]
    fn changed_calls_of_any_body_send_what_the_full_walk_sends(
        execs in 1..4usize,
        max in proptest::sample::select(vec![2usize, 8]),
        body in proptest::collection::vec(stmt25(), 1..7),
        steps in proptest::collection::vec(step25(), 1..40),
    ) {
        any_body_against_the_full_walk((execs, max), body, &steps)?;
    }
}

/// [`changed_calls_of_any_body_send_what_the_full_walk_sends`]' body: `steps` on a cache
/// that skips clean nodes and on the full walk, each call compared.
fn any_body_against_the_full_walk(
    (execs, max): (usize, usize),
    body: Vec<Stmt25>,
    steps: &[Step25],
) -> std::result::Result<(), proptest::test_runner::TestCaseError> {
    let mut body = body;
    let nodes = body_nodes(&mut body);
    let plan = body_plan(&nodes);
    let (ma, mut a) = cache25(false, execs, max);
    let (mb, mut b) = cache25(true, execs, max);
    let mut params = params25(nodes.len());
    let mut key = 3u64;
    let n = nodes.len();
    for (i, s) in steps.iter().enumerate() {
        let mut list = false;
        let mut mode = Mode::Graph;
        match *s {
            Step25::Scalar(j, v) => params[j % n].scalar = v,
            Step25::Pointer(j, p) => params[j % n].ptr = p,
            Step25::Swap(j, k) => {
                let (j, k) = (j % n, k % n);
                (params[j].ptr, params[k].ptr) = (params[k].ptr, params[j].ptr);
            }
            Step25::Grid(j, g) => params[j % n].grid = g,
            Step25::Context(j, f) => params[j % n].other_ctx = f,
            Step25::Function(j, f) => params[j % n].other_func = f,
            Step25::Programmatic(j, f) => params[j % n].programmatic = f,
            Step25::Key(k) => key = k,
            Step25::Refuse(set, update) => refuse([&ma, &mb], (set, update)),
            Step25::Lend => {
                for c in [&mut a, &mut b] {
                    drop(c.words(plan, &crate::operand::CallId(WORDS_CALL)));
                }
            }
            Step25::Clear => {
                a.clear();
                b.clear();
            }
            Step25::Instantiate => mode = Mode::Instantiate,
            Step25::Eager => mode = Mode::Eager,
            Step25::List => list = true,
        }
        a.set_mode(mode);
        b.set_mode(mode);
        let ra = run_body25(&mut a, (plan, &body, &nodes), &params, key, list)
            .map_err(|e| e.to_string());
        let rb = run_body25(&mut b, (plan, &body, &nodes), &params, key, list)
            .map_err(|e| e.to_string());
        same_as_full_walk(&format!("step {i} {s:?}"), (&ra, &rb), (&ma, &a), (&mb, &b))?;
    }
    proptest::prop_assert_eq!(b.clean_seen, 0);
    Ok(())
}

/// Review 25: in a body with a host `if`, a run of two statements an iteration (a memset and a
/// kernel) made once, a memset, a run put in node by node and another run made once, a changed
/// call finds its clean nodes from its words (no node words kept): one node changed, the other
/// kernels are clean; the first iteration of a run changed, its later nodes are not; a later
/// node's buffer changed (its guard, in its array's span), no made run's later node is (the
/// spans are compared together); a buffer outside the arrays changed, every run's later node
/// is; the other variant (the `if` not taken) in between changes nothing of that.
#[test]
fn a_changed_call_s_items_follow_ifs_runs_and_memsets() {
    let mut body = vec![
        Stmt25::Kernel(None),
        Stmt25::Kernel(Some(0)),
        Stmt25::Run { per: 2, later: 3, memset: Some(1), made: true },
        Stmt25::Memset(None),
        Stmt25::Run { per: 1, later: 2, memset: None, made: false },
        Stmt25::Run { per: 1, later: 3, memset: None, made: true },
        Stmt25::Kernel(None),
    ];
    let nodes = body_nodes(&mut body);
    assert_eq!(nodes.len(), 19);
    let kernels = nodes.iter().filter(|n| !n.memset).count() as u64;
    assert_eq!(kernels, 14);
    let plan = body_plan(&nodes);
    let (mock, mut cache) = cache25(false, 1, 8);
    let mut params = params25(nodes.len());
    // Distinct buffers: every node's own.
    for (j, p) in params.iter_mut().enumerate() {
        p.ptr = 0xa000 + 0x100 * j as u64;
    }
    // Of the last call: the made runs' later iterations left unmade (the second made run's,
    // all kernels; the first's hold memsets, so they are always made).
    let unmade = core::cell::Cell::new(0u64);
    let go = |cache: &mut GraphCache<Mock>, params: &[Params25], key: u64| {
        let seen = cache.clean_seen;
        let before = DEFERRED25.get();
        run_body25(cache, (plan, &body, &nodes), params, key, false).unwrap();
        unmade.set(DEFERRED25.get() - before);
        let calls = mock.calls();
        if !calls.iter().any(|c| c == "instantiate") {
            // Brought up to date with items: no node words made.
            let mine: Vec<&Variant> = cache.variants.iter().filter(|v| v.key == key).collect();
            assert!(mine.len() == 1 && mine[0].node_words.spans.is_empty(), "node words");
        }
        (cache.clean_seen - seen, calls)
    };
    go(&mut cache, &params, 1);
    let set = |n: usize| {
        let mut v = vec!["set_kernel grid=4".to_string(); n];
        v.push("launch".to_string());
        v
    };
    for call in 0..3u32 {
        params[0].scalar = 10 + call;
        assert_eq!(go(&mut cache, &params, 1), (kernels - 1, set(1)), "node 0, call {call}");
        assert_eq!(unmade.get(), 1, "node 0, call {call}: the clean run's nodes never made");
    }
    // The run's first kernel (node 2): it and the run's 3 later kernels are sent.
    params[2].scalar = 7;
    assert_eq!(go(&mut cache, &params, 1), (kernels - 4, set(4)), "the first iteration");
    assert_eq!(unmade.get(), 1, "the other made run stays unmade");
    // A later kernel's buffer (node 4): both made runs' 6 later kernels are not clean; only
    // node 4 differs from the exec.
    params[4].ptr = 0xf000;
    assert_eq!(go(&mut cache, &params, 1), (kernels - 6, set(1)), "a later buffer");
    assert_eq!(unmade.get(), 0, "no run clean: every node made");
    // A buffer outside the arrays (node 0's, not an element of a made run's array): its node
    // alone; both made runs' later kernels stay clean (their arrays' spans are unchanged;
    // before session 28 every place's guards were compared for them: 7 not clean).
    params[0].ptr = 0xe000;
    assert_eq!(go(&mut cache, &params, 1), (kernels - 1, set(1)), "a buffer outside the arrays");
    assert_eq!(unmade.get(), 1, "a buffer outside the arrays");
    params[18].ptr = 0xe100;
    assert_eq!(go(&mut cache, &params, 1), (kernels - 1, set(1)), "the last node's buffer");
    // The other variant (node 1 absent), built; then this one again, changed.
    params[0].scalar = 20;
    let (_, calls) = go(&mut cache, &params, 0);
    assert!(calls.iter().any(|c| c == "instantiate"), "{calls:?}");
    assert_eq!(unmade.get(), 0, "a new graph: every node made");
    params[0].scalar = 21;
    assert_eq!(go(&mut cache, &params, 1), (kernels - 1, set(1)), "back to key 1");
    // A run put in node by node (node 11, later nodes 12 and 13): node 12 alone.
    params[12].scalar = 5;
    assert_eq!(go(&mut cache, &params, 1), (kernels - 1, set(1)), "a helper's later node");
}

// Review 29b (brief 1, commit 79f3968): a changed call leaves the kernel-only later
// iterations of its runs unmade (`Nodes::get_partial`) while its words show them clean. The
// list must be made before anything that needs every node: a memoized exec (`insert`), a
// rebuild after refused set-params, an exec dropped because a node's edges change kind
// (`#[programmatic]`), another variant, `clear`, eager mode; and a run cut into several lazy
// chunks (some holding a memset) must line up with its one item.

fn step29b() -> impl proptest::strategy::Strategy<Value = Step25> {
    use proptest::prelude::*;
    prop_oneof![
        8 => step25(),
        2 => (0..64usize, 0..64usize).prop_map(|(j, k)| Step25::Swap(j, k)),
        1 => (0..64usize, any::<bool>()).prop_map(|(j, f)| Step25::Programmatic(j, f)),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    /// [`changed_calls_of_any_body_send_what_the_full_walk_sends`] with each made run's later
    /// iterations in lazy chunks of `chunk` entries (a run item over several deferred ranges,
    /// and over deferred and made ones), elements swapped and kernels made `#[programmatic]`.
    #[test]
    fn runs_in_several_lazy_chunks_send_what_the_full_walk_sends(
        chunk in 1..5usize,
        execs in 1..4usize,
        max in proptest::sample::select(vec![2usize, 8]),
        body in proptest::collection::vec(stmt25(), 1..7),
        steps in proptest::collection::vec(step29b(), 1..40),
    ) {
        CHUNK25.set(chunk);
        let r = any_body_against_the_full_walk((execs, max), body, &steps);
        CHUNK25.set(usize::MAX);
        r?;
    }
}

/// A body of a kernel, a run of one kernel an iteration (12 iterations) and a kernel: its
/// nodes, plan, and a cache against the full walk, the run's later nodes in 3 lazy chunks.
#[allow(clippy::type_complexity)]
fn body29b(
    execs: usize,
) -> (Vec<Stmt25>, Vec<Node25>, &'static Plan, [(Mock, GraphCache<Mock>); 2]) {
    let mut body = vec![
        Stmt25::Kernel(None),
        Stmt25::Run { per: 1, later: 11, memset: None, made: true },
        Stmt25::Kernel(None),
    ];
    let nodes = body_nodes(&mut body);
    assert_eq!(nodes.len(), 14);
    let plan = body_plan(&nodes);
    (body, nodes, plan, [cache25(false, execs, 8), cache25(true, execs, 8)])
}

/// Review 29b: a sequence where each call that needs every node comes after a call that left
/// the run unmade, against the full walk, with how many of the run's 3 chunks each call of the
/// skipping cache left unmade.
#[test]
fn a_partial_list_is_made_wherever_every_node_is_needed() {
    CHUNK25.set(4);
    let (body, nodes, plan, [(ma, mut a), (mb, mut b)]) = body29b(3);
    let mut params = params25(nodes.len());
    for (j, p) in params.iter_mut().enumerate() {
        p.ptr = 0xa000 + 0x100 * j as u64;
    }
    type C = GraphCache<Mock>;
    let step = |(a, b): (&mut C, &mut C), what: &str, params: &[Params25], mode: Mode| {
        a.set_mode(mode);
        b.set_mode(mode);
        let before = DEFERRED25.get();
        let ra = run_body25(a, (plan, &body, &nodes), params, 1, false);
        let unmade = DEFERRED25.get() - before;
        let rb = run_body25(b, (plan, &body, &nodes), params, 1, false);
        let (ra, rb) = (ra.map_err(|e| e.to_string()), rb.map_err(|e| e.to_string()));
        let calls = mb.calls();
        mb.0.borrow_mut().calls = calls.clone();
        same_as_full_walk(what, (&ra, &rb), (&ma, a), (&mb, b)).unwrap();
        (unmade, calls)
    };
    let set1 = || vec!["set_kernel grid=4".to_string(), "launch".to_string()];
    step((&mut a, &mut b), "build", &params, Mode::Graph);
    // A buffer outside the array (node 0's): the run's chunks stay unmade.
    let first = params[0].ptr;
    params[0].ptr = 0xe000;
    assert_eq!(step((&mut a, &mut b), "outside", &params, Mode::Graph), (3, set1()), "outside");
    // Back to the first buffer: words seen before, a memoized exec built (every node made).
    params[0].ptr = first;
    let (unmade, calls) = step((&mut a, &mut b), "memo build", &params, Mode::Graph);
    assert_eq!(unmade, 0, "a new exec needs every node: {calls:?}");
    assert!(calls.iter().any(|c| c == "instantiate"), "{calls:?}");
    assert_eq!(a.stats().memo_builds, 1);
    // Set-params refused: the exec is updated from a rebuilt graph (every node made).
    refuse([&ma, &mb], (true, false));
    params[13].scalar = 9;
    let (unmade, calls) = step((&mut a, &mut b), "rebuild", &params, Mode::Graph);
    assert_eq!(unmade, 0, "a rebuild needs every node: {calls:?}");
    assert!(calls.iter().any(|c| c == "exec_update"), "{calls:?}");
    refuse([&ma, &mb], (false, false));
    // A node's edges change kind: the exec dropped and built anew (every node made).
    params[13].programmatic = true;
    let (unmade, calls) = step((&mut a, &mut b), "programmatic", &params, Mode::Graph);
    assert_eq!(unmade, 0, "a new exec needs every node: {calls:?}");
    assert!(calls.iter().any(|c| c == "instantiate"), "{calls:?}");
    // Uploaded, not launched: the least recently used exec (the first, node 13 not
    // programmatic there) is dropped too, built anew.
    params[0].scalar = 3;
    let (unmade, calls) = step((&mut a, &mut b), "instantiate", &params, Mode::Instantiate);
    assert_eq!(unmade, 0, "a new exec needs every node: {calls:?}");
    assert!(calls.iter().any(|c| c.starts_with("upload")), "{calls:?}");
    // Eager (validated, every node); then graph mode again, updating the exec built by the
    // programmatic step: the run's chunks stay unmade.
    params[0].scalar = 4;
    step((&mut a, &mut b), "eager", &params, Mode::Eager);
    params[0].scalar = 5;
    assert_eq!(step((&mut a, &mut b), "graph again", &params, Mode::Graph), (3, set1()));
    // A later element swapped with another: its chunks are made; the exec updated (the one
    // of the instantiate step) gets nodes 0, 3 and 9.
    (params[3].ptr, params[9].ptr) = (params[9].ptr, params[3].ptr);
    let (unmade, calls) = step((&mut a, &mut b), "swap", &params, Mode::Graph);
    assert_eq!(unmade, 0, "a changed element makes the run: {calls:?}");
    assert_eq!(calls.iter().filter(|c| c.starts_with("set_kernel")).count(), 3, "{calls:?}");
    a.clear();
    b.clear();
    assert_eq!(step((&mut a, &mut b), "clear", &params, Mode::Graph).0, 0, "built anew");
    CHUNK25.set(usize::MAX);
}

/// Review 29b: the update ladder, handed a partial list without a `clean` of every node (any
/// caller but the changed call's own `bring_up` of the exec `clean` is for), makes it before
/// walking: a changed later node is sent, not taken for absent (which `NodeState::update`
/// answers with `Mismatch`, dropping the exec).
#[test]
fn the_ladder_makes_a_partial_list_it_walks_without_clean() {
    let (body, nodes, plan, [(mock, mut cache), _]) = body29b(1);
    let params = params25(nodes.len());
    run_body25(&mut cache, (plan, &body, &nodes), &params, 1, false).unwrap();
    mock.calls();
    // Node 5, a later iteration's, writes another buffer.
    let ks: Vec<K> = params
        .iter()
        .enumerate()
        .map(|(j, p)| K {
            tag: crate::operand::tag(WORDS_CALL, j as u32 + 1),
            ..k(p.scalar, if j == 5 { 0xf000 } else { p.ptr })
        })
        .collect();
    let list: Vec<Option<NodeParams<'_>>> =
        ks.iter().map(|k| Some(NodeParams::Kernel(k as &dyn KernelNode))).collect();
    let segs = [
        Seg25::new(&list[..2], false),
        Seg25::new(&list[2..13], true),
        Seg25::new(&list[13..], false),
    ];
    let refs: Vec<&dyn crate::kind::list::Segment<'_>> =
        segs.iter().map(|s| s as &dyn crate::kind::list::Segment<'_>).collect();
    let mut storage = vec![core::mem::MaybeUninit::uninit(); list.len()];
    let mut of = Nodes::Lazy(&mut storage, &refs);
    let mut deferred = Vec::new();
    of.get_partial(&mut deferred);
    assert!(of.partial() && deferred == [(2, 11)], "{deferred:?}");
    assert!(cache.update(0, plan, &mut of, (&[], &[])).unwrap(), "not dropped");
    assert!(!of.partial(), "made");
    assert_eq!(mock.calls(), ["set_kernel grid=4"]);
    assert_eq!(mock.0.borrow().set_args.last().unwrap()[1], 0xf000u64.to_ne_bytes());
}

/// Review 29b: a changed call whose first node's edges change kind (its kernel made
/// `#[programmatic]`) drops the exec at that node (`Update::Mismatch`) and builds anew: the
/// ladder counts no node after it as unchanged, as the full walk, which stops there.
#[test]
fn an_exec_dropped_at_its_first_node_counts_the_nodes_after_it_as_the_full_walk() {
    let (body, nodes, plan, [(ma, mut a), (mb, mut b)]) = body29b(1);
    let mut params = params25(nodes.len());
    for call in 0..2 {
        let ra = run_body25(&mut a, (plan, &body, &nodes), &params, 1, false);
        let rb = run_body25(&mut b, (plan, &body, &nodes), &params, 1, false);
        let (ra, rb) = (ra.map_err(|e| e.to_string()), rb.map_err(|e| e.to_string()));
        same_as_full_walk(&format!("call {call}"), (&ra, &rb), (&ma, &a), (&mb, &b)).unwrap();
        params[0].programmatic = true;
    }
    assert_eq!(a.stats().instantiations, 2);
}
