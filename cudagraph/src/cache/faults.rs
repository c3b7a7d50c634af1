//! Fault injection through the [`Driver`] trait: every driver call that a build, an update
//! (per node, whole exec, re-instantiation), a launch, an upload, an eviction and a drop makes is
//! made to fail once, in every position, over plans with every node kind. After each injected
//! failure the call returns a typed error (or recovers, where the ladder has a next rung), has
//! enqueued nothing, the same call succeeds again, and after the cache is dropped the strict
//! mock counts no live graph, exec or node; it also flags any use of a handle it did not hand
//! out or already destroyed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::DriverError;
use cudarc::driver::sys::{
    self, CUfunction, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUgraphNodeParams,
    CUresult, CUstream,
};

use super::tests::{CTX, STREAM};
use super::*;
use crate::kind::captured::OwnedGraph;
use crate::kind::memcpy::Copy1d;
use crate::kind::memset::Set1d;
use crate::kind::{
    CapturedWork, FillNode, GraphRef, KernelNode, LaunchDims, MemcpyParams, Memory, MemsetParams,
};
use crate::plan::{Access, NodeKind, PlanNode};

/// The error an injected failure returns.
const INJECTED: DriverError = DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY);

#[derive(Default)]
struct State {
    /// Driver calls made so far (each counts once, failing or not).
    calls: usize,
    /// The call (by number) that fails.
    fail_at: Option<usize>,
    /// The name of the call that failed, once it did.
    failed: Option<&'static str>,
    /// Every call's name, in order.
    names: Vec<&'static str>,
    next: usize,
    /// Live graphs and the nodes added to each.
    graphs: HashMap<usize, Vec<usize>>,
    /// Live execs and the graph each was instantiated from.
    execs: HashMap<usize, usize>,
    /// Successful launches.
    launches: usize,
    /// Handles used that were not live: must stay empty.
    misuse: Vec<String>,
}

/// A strict mock driver that fails call number `fail_at` once.
#[derive(Clone, Default)]
struct Strict(Rc<RefCell<State>>);

impl Strict {
    /// Counts the call; `true` when it is the one to fail.
    fn fails(&self, name: &'static str) -> bool {
        let mut s = self.0.borrow_mut();
        let n = s.calls;
        s.calls += 1;
        s.names.push(name);
        if s.fail_at == Some(n) {
            s.failed = Some(name);
            true
        } else {
            false
        }
    }
    fn handle(&self) -> usize {
        let mut s = self.0.borrow_mut();
        s.next += 1;
        s.next * 16
    }
    fn misuse(&self, what: String) {
        self.0.borrow_mut().misuse.push(what);
    }
    fn live_graph(&self, g: CUgraph, call: &str) {
        if !self.0.borrow().graphs.contains_key(&(g as usize)) {
            self.misuse(format!("{call}: graph {g:?} is not live"));
        }
    }
    fn live_exec(&self, e: CUgraphExec, call: &str) {
        if !self.0.borrow().execs.contains_key(&(e as usize)) {
            self.misuse(format!("{call}: exec {e:?} is not live"));
        }
    }
    /// Live graphs, execs and nodes.
    fn live(&self) -> (usize, usize, usize) {
        let s = self.0.borrow();
        (s.graphs.len(), s.execs.len(), s.graphs.values().map(Vec::len).sum())
    }
}

impl Driver for Strict {
    unsafe fn conditional_handle(
        &mut self,
        graph: CUgraph,
        _: cudarc::driver::sys::CUcontext,
        _: u32,
    ) -> Result<u64, DriverError> {
        self.live_graph(graph, "conditional_handle");
        if self.fails("conditional_handle") {
            return Err(INJECTED);
        }
        Ok(self.handle() as u64)
    }
    unsafe fn enable_peer_access(
        &mut self,
        _: cudarc::driver::sys::CUcontext,
        _: cudarc::driver::sys::CUcontext,
    ) -> Result<bool, DriverError> {
        if self.fails("enable_peer_access") {
            return Err(INJECTED);
        }
        Ok(true)
    }
    unsafe fn graph_create(&mut self) -> Result<CUgraph, DriverError> {
        if self.fails("graph_create") {
            return Err(INJECTED);
        }
        let g = self.handle();
        self.0.borrow_mut().graphs.insert(g, Vec::new());
        Ok(g as CUgraph)
    }
    /// A failed destroy is recorded as failed; the handle is gone either way (the driver's
    /// destroy fails only for a handle it no longer has, or in a context that is lost), and the
    /// cache must not use it again.
    unsafe fn graph_destroy(&mut self, graph: CUgraph) {
        self.fails("graph_destroy");
        self.live_graph(graph, "graph_destroy");
        let mut s = self.0.borrow_mut();
        s.graphs.remove(&(graph as usize));
    }
    unsafe fn add_node(
        &mut self,
        graph: CUgraph,
        deps: &[CUgraphNode],
        edges: &[CUgraphEdgeData],
        _: &mut CUgraphNodeParams,
    ) -> Result<CUgraphNode, DriverError> {
        self.live_graph(graph, "add_node");
        if !edges.is_empty() && edges.len() != deps.len() {
            self.misuse(format!(
                "add_node: {} edge data for {} dependencies",
                edges.len(),
                deps.len()
            ));
        }
        let nodes = self.0.borrow().graphs.get(&(graph as usize)).cloned().unwrap_or_default();
        if let Some(d) = deps.iter().find(|d| !nodes.contains(&(**d as usize))) {
            self.misuse(format!("add_node: dependency {d:?} is not a node of the graph"));
        }
        if self.fails("add_node") {
            return Err(INJECTED);
        }
        let n = self.handle();
        self.0.borrow_mut().graphs.entry(graph as usize).or_default().push(n);
        Ok(n as CUgraphNode)
    }
    unsafe fn instantiate(
        &mut self,
        graph: CUgraph,
        _: u64,
        _: CUstream,
    ) -> Result<CUgraphExec, DriverError> {
        self.live_graph(graph, "instantiate");
        if self.fails("instantiate") {
            return Err(INJECTED);
        }
        let e = self.handle();
        self.0.borrow_mut().execs.insert(e, graph as usize);
        Ok(e as CUgraphExec)
    }
    unsafe fn exec_destroy(&mut self, exec: CUgraphExec) {
        self.fails("exec_destroy");
        self.live_exec(exec, "exec_destroy");
        self.0.borrow_mut().execs.remove(&(exec as usize));
    }
    unsafe fn set_node(
        &mut self,
        exec: CUgraphExec,
        node: CUgraphNode,
        _: &mut CUgraphNodeParams,
    ) -> Result<(), DriverError> {
        self.live_exec(exec, "set_node");
        let known = {
            let s = self.0.borrow();
            let graph = s.execs.get(&(exec as usize)).copied().unwrap_or(0);
            s.graphs.get(&graph).is_some_and(|n| n.contains(&(node as usize)))
        };
        if !known {
            self.misuse(format!("set_node: {node:?} is not a node of the exec's graph"));
        }
        if self.fails("set_node") { Err(INJECTED) } else { Ok(()) }
    }
    unsafe fn exec_update(
        &mut self,
        exec: CUgraphExec,
        graph: CUgraph,
    ) -> Result<(), (DriverError, sys::CUgraphExecUpdateResultInfo)> {
        self.live_exec(exec, "exec_update");
        self.live_graph(graph, "exec_update");
        if self.fails("exec_update") {
            let info = sys::CUgraphExecUpdateResultInfo {
                result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR,
                errorNode: ptr::null_mut(),
                errorFromNode: ptr::null_mut(),
            };
            return Err((INJECTED, info));
        }
        Ok(())
    }
    unsafe fn launch(&mut self, exec: CUgraphExec, _: CUstream) -> Result<(), DriverError> {
        self.live_exec(exec, "launch");
        if self.fails("launch") {
            return Err(INJECTED);
        }
        self.0.borrow_mut().launches += 1;
        Ok(())
    }
    unsafe fn upload(&mut self, exec: CUgraphExec, _: CUstream) -> Result<(), DriverError> {
        self.live_exec(exec, "upload");
        if self.fails("upload") { Err(INJECTED) } else { Ok(()) }
    }
}

/// A kernel node with one `u32` argument.
struct K {
    grid: u32,
    scalar: u32,
}
impl KernelNode for K {
    fn function(&self) -> CUfunction {
        0x10 as CUfunction
    }
    fn dims(&self) -> LaunchDims {
        LaunchDims { grid: (self.grid, 1, 1), block: (32, 1, 1), shared_bytes: 0 }
    }
    fn arg_count(&self) -> usize {
        1
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        f(&self.scalar.to_ne_bytes());
    }
    fn accesses(&self, _: &mut crate::operand::Accesses) -> usize {
        0
    }
}
impl crate::operand::sealed::Sealed for K {}

/// A `capture` statement's work whose recording is always new (null: the mock reads nothing).
struct Captured;
impl crate::operand::sealed::Sealed for Captured {}
impl CapturedWork for Captured {
    fn accesses(&self, _: &mut crate::operand::Accesses) -> usize {
        0
    }
    unsafe fn record(&self, _: &dyn Fn() -> NodeSite) -> Result<()> {
        Ok(())
    }
    fn recorded(&self) -> Option<Arc<OwnedGraph>> {
        None
    }
    unsafe fn run_eager(&self, _: &dyn Fn() -> NodeSite) -> Result<()> {
        Ok(())
    }
}

/// Every node kind there is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Kernel,
    Memcpy,
    Memset,
    Captured,
    Child,
    Fill,
    Host,
    Empty,
    MemAlloc,
    MemFree,
    Memcpy2d,
    Memset2d,
    Readback,
}
const KINDS: [Kind; 13] = [
    Kind::Kernel,
    Kind::Memcpy,
    Kind::Memset,
    Kind::Captured,
    Kind::Child,
    Kind::Fill,
    Kind::Host,
    Kind::Empty,
    Kind::MemAlloc,
    Kind::Memcpy2d,
    Kind::Memset2d,
    Kind::MemFree,
    Kind::Readback,
];

/// One node's parameters in version `v` (each version changes what the kind can change).
struct Params {
    k: K,
    fill: FillNode<'static>,
    readback: crate::ReadbackNode<'static>,
    copy: MemcpyParams<'static>,
    set: MemsetParams<'static>,
    child: GraphRef<'static>,
    host: crate::kind::HostParams<'static, (), fn(())>,
    alloc: crate::AllocParams<'static>,
    free: crate::FreeParams<'static>,
    copy2d: crate::Copy2dParams<'static>,
    set2d: crate::Memset2dParams<'static>,
}

impl Params {
    fn new(v: u32) -> Self {
        let copy = MemcpyParams::recorded(Copy1d {
            src: Memory::Device(0x100),
            // Device to pinned host in version 2: another direction, which the memcpy rule
            // does not set per node (a whole-exec update).
            dst: if v == 2 { Memory::Host(0x900 as *const _) } else { Memory::Device(0x200) },
            // A longer copy every other version: the memcpy rule decides settable or rebuild.
            src_len: 4 + (v as usize % 2) * 4,
            dst_len: 4 + (v as usize % 2) * 4,
            elem_size: 4,
            src_ctx: CTX,
            dst_ctx: CTX,
            host_buffer: 0,
        });
        Params {
            k: K { grid: 4 + v % 3, scalar: v },
            fill: FillNode::for_test(0x20 as CUfunction, 0x400, 8, u64::from(v), CTX),
            // Another pinned destination and length every version.
            readback: crate::ReadbackNode::for_test(
                0x21 as CUfunction,
                0x100,
                0x900 + 64 * u64::from(v),
                1 + u64::from(v % 2),
                CTX,
            ),
            copy,
            set: MemsetParams::recorded(Set1d {
                dst: 0x300,
                len: 8,
                elem_size: 4,
                value: v,
                ctx: CTX,
            }),
            child: GraphRef {
                raw: (0x5000 + 16 * v as usize) as CUgraph,
                id: u64::from(v),
                ctx: CTX,
                refused: None,
                tag: 0,
                _borrow: core::marker::PhantomData,
            },
            host: crate::kind::HostParams::new((), (|()| {}) as fn(())),
            // Another size every other version: no per-node update, a re-instantiation.
            alloc: crate::AllocParams::for_test(0, 64 + (v as usize % 2) * 64, CTX),
            free: crate::FreeParams::for_test(0, CTX),
            copy2d: crate::Copy2dParams::recorded(crate::kind::pitched::Copy2d {
                base: copy.raw,
                src_rows: crate::Rows::new(1, 2 + v as usize % 2, 2),
                dst_rows: crate::Rows::new(1, 2 + v as usize % 2, 2),
            }),
            set2d: crate::Memset2dParams::recorded(crate::kind::pitched::Set2d {
                dst: 0x300,
                len: 8,
                rows: crate::Rows::new(2, 2, 4),
                elem_size: 4,
                value: v,
                ctx: CTX,
            }),
        }
    }
    fn node(&self, kind: Kind) -> NodeParams<'_> {
        match kind {
            Kind::Kernel => NodeParams::Kernel(&self.k),
            Kind::Memcpy => NodeParams::Memcpy(&self.copy),
            Kind::Memset => NodeParams::Memset(&self.set),
            Kind::Captured => NodeParams::Captured(&Captured),
            Kind::Child => NodeParams::Child(&self.child),
            Kind::Fill => NodeParams::Fill(&self.fill),
            Kind::Readback => NodeParams::Readback(&self.readback),
            Kind::Host => NodeParams::Host(&self.host),
            Kind::Empty => NodeParams::Empty(crate::kind::empty()),
            Kind::MemAlloc => NodeParams::MemAlloc(&self.alloc),
            Kind::MemFree => NodeParams::MemFree(&self.free),
            Kind::Memcpy2d => NodeParams::Memcpy2d(&self.copy2d),
            Kind::Memset2d => NodeParams::Memset2d(&self.set2d),
        }
    }
}

/// A plan of `kinds` in a chain (node `i` reads place `i` and writes place `i + 1`), whose last
/// node is conditional (host `if`: variant key bit 0).
fn plan(kinds: &[Kind]) -> &'static Plan {
    let nodes: Vec<PlanNode> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| PlanNode {
            label: "n",
            text: "stmt",
            kind: match k {
                Kind::Memcpy => NodeKind::Memcpy,
                Kind::Memset => NodeKind::Memset,
                _ => NodeKind::Kernel("k"),
            },
            line: 10 + i as u32,
            column: 5,
            accesses: Box::leak(Box::new([
                Access { place: i as u32, write: false },
                Access { place: i as u32 + 1, write: true },
            ])),
            after: &[],
            condition: if i + 1 == kinds.len() && i > 0 { "flag" } else { "" },
        })
        .collect();
    let places: Vec<&'static str> = (0..=kinds.len()).map(|_| "p").collect();
    Box::leak(Box::new(Plan {
        file: "faults.rs",
        line: 3,
        places: Box::leak(places.into_boxed_slice()),
        nodes: Box::leak(nodes.into_boxed_slice()),
        conditions: 1,
        bodies: &[],
    }))
}

/// One call: the plan's nodes in version `v`, the conditional node present when `flag`.
fn call(
    cache: &mut GraphCache<Strict>,
    plan: &'static Plan,
    kinds: &[Kind],
    v: u32,
    flag: bool,
) -> Result<()> {
    let p: Vec<Params> = kinds.iter().map(|_| Params::new(v)).collect();
    let n = kinds.len();
    let nodes: Vec<Option<NodeParams<'_>>> = kinds
        .iter()
        .enumerate()
        .map(|(i, &k)| (flag || i + 1 < n || n == 1).then(|| p[i].node(k)))
        .collect();
    cache.run_raw(plan, u64::from(flag && n > 1), (CTX, None), STREAM, &nodes)
}

/// The script: build, unchanged, every node changed (per-node updates and the memcpy rule's
/// rebuild), the other variant (an eviction with one variant kept), changed there, back (another
/// eviction and build), an upload; then the drop.
const SCRIPT: [(u32, bool); 6] =
    [(1, false), (1, false), (2, false), (3, true), (4, true), (5, false)];

/// Runs the script with call `fail_at` failing (none: `None`); returns the names of the driver
/// calls made, in order, including the drop's.
fn run_script(kinds: &[Kind], fail_at: Option<usize>) -> Vec<&'static str> {
    let plan = plan(kinds);
    let mock = Strict::default();
    mock.0.borrow_mut().fail_at = fail_at;
    let mut cache = GraphCache::with_driver(mock.clone(), 1);
    let ctx = |step: usize| format!("kinds {kinds:?}, failing call {fail_at:?}, step {step}");
    for (step, &(v, flag)) in SCRIPT.iter().enumerate() {
        let (before, launches) = (mock.0.borrow().calls, mock.0.borrow().launches);
        let r = call(&mut cache, plan, kinds, v, flag);
        let failed_here = fail_at.is_some_and(|f| (before..mock.0.borrow().calls).contains(&f));
        match r {
            Ok(()) => assert_eq!(mock.0.borrow().launches, launches + 1, "{}", ctx(step)),
            Err(e) => {
                assert!(failed_here, "{}: an error without an injected failure: {e}", ctx(step));
                // Typed, naming the graph (file:line) or the node (file:line:column).
                match &e {
                    Error::Graph { file, line, source } => {
                        assert_eq!((*file, *line), ("faults.rs", 3), "{e}");
                        assert_eq!(source.error, INJECTED, "{e}");
                    }
                    Error::Node { site, source } => {
                        assert_eq!(site.file, "faults.rs", "{e}");
                        assert_eq!(source.error, INJECTED, "{e}");
                    }
                    e => panic!("{}: untyped error {e:?}", ctx(step)),
                }
                assert_eq!(mock.0.borrow().launches, launches, "{}: enqueued after {e}", ctx(step));
                // The cache keeps working: the same call again succeeds and launches.
                call(&mut cache, plan, kinds, v, flag)
                    .unwrap_or_else(|e| panic!("{}: retry failed: {e}", ctx(step)));
                assert_eq!(mock.0.borrow().launches, launches + 1, "{}", ctx(step));
            }
        }
        let (graphs, execs, _) = mock.live();
        // Only the cached variant (max 1) and its graph are alive between calls.
        assert!(graphs <= 1 && execs <= 1, "{}: {graphs} graphs, {execs} execs live", ctx(step));
    }
    let before = mock.0.borrow().calls;
    let upload = cache.upload_raw(STREAM);
    if let Err(e) = &upload {
        assert!(fail_at.is_some_and(|f| f >= before), "{e}");
        assert!(matches!(e, Error::Graph { .. }), "{e:?}");
        cache.upload_raw(STREAM).expect("an upload after a failed one");
    }
    drop(cache);
    let s = mock.0.borrow();
    assert_eq!(mock.live(), (0, 0, 0), "{}: live after drop", ctx(SCRIPT.len()));
    assert!(s.misuse.is_empty(), "{}: {:#?}", ctx(SCRIPT.len()), s.misuse);
    if let Some(f) = fail_at {
        assert!(s.failed.is_some() || f >= s.calls, "call {f} was not made");
    }
    s.names.clone()
}

/// The plans: every kind alone, every kind followed by a conditional kernel, and all kinds in
/// one chain (conditional fill last).
fn plans() -> Vec<Vec<Kind>> {
    let mut p: Vec<Vec<Kind>> = KINDS.iter().map(|&k| vec![k]).collect();
    p.extend(KINDS.iter().map(|&k| vec![k, Kind::Kernel]));
    p.push(KINDS.to_vec());
    p
}

#[test]
fn every_driver_call_failing_once_leaves_a_typed_error_a_working_cache_and_no_leak() {
    let mut injected = 0;
    let mut covered: Vec<&'static str> = Vec::new();
    for kinds in plans() {
        let names = run_script(&kinds, None);
        for (at, name) in names.iter().enumerate() {
            run_script(&kinds, Some(at));
            injected += 1;
            if !covered.contains(name) {
                covered.push(name);
            }
        }
    }
    covered.sort_unstable();
    let every = [
        "add_node",
        "exec_destroy",
        "exec_update",
        "graph_create",
        "graph_destroy",
        "instantiate",
        "launch",
        "set_node",
        "upload",
    ];
    assert_eq!(covered, every, "calls injected ({injected} injections)");
}
