//! The update ladder: building a variant's `CUgraph`, and bringing its exec up to date with a
//! call's parameters by the cheapest rung the driver accepts.

use core::ptr;

use cudarc::driver::sys::{CUcontext, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode};

use super::{GraphCache, Shape};
use crate::error::{Call, CudaError, Error, Result};
use crate::kind::{NodeParams, NodeState, Update, alloc, conditional};
use crate::plan::{EdgeKind, edge_kind};
use crate::raw::{self, Driver};

impl<D: Driver> GraphCache<D> {
    pub(super) fn instantiate(&mut self, shape: &dyn Shape, graph: CUgraph) -> Result<CUgraphExec> {
        // SAFETY: graph is live and its context current.
        let (flags, upload) = (self.flags.bits(), self.stream);
        let call =
            if flags == 0 { "cuGraphInstantiateWithFlags" } else { "cuGraphInstantiateWithParams" };
        if self.flags.refused() {
            // The driver refuses the pair (`CUDA_ERROR_INVALID_VALUE`) for every graph: said
            // here, with the flags' names, without asking it.
            let (file, line) = shape.location();
            let why = "InstantiateFlags::device_launch and auto_free_on_launch together, which \
                       the driver refuses for every graph: nothing instantiated";
            return Err(Error::InstantiateFlags { file, line, why });
        }
        // SAFETY: graph is live and its context current; `upload` is the call's stream (of
        // that context), used only with the upload flag.
        let exec = unsafe { self.driver.instantiate(graph, flags, upload) }
            .call(call)
            .map_err(|source| shape.graph_error(source))?;
        self.stats.instantiations += 1;
        Ok(exec)
    }

    /// The update ladder: unchanged nodes send nothing; changed nodes get per-node set-params
    /// (`cuGraphExecNodeSetParams`) where the kind's rule allows; if the driver refuses one, or
    /// the rule forbids it, `cuGraphExecUpdate` from a rebuilt graph; if that is refused, a new
    /// instantiation. Returns `false`, part way, when `nodes` does not have the variant's node
    /// kinds (the variant must then be dropped). `clean[j]`: node `j` equals the exec's, word
    /// for word ([`GraphCache::clean_nodes`]), so it is not compared (empty: none is).
    pub(super) fn update(
        &mut self,
        i: usize,
        shape: &dyn Shape,
        all: &mut super::Nodes<'_, '_>,
        (clean, dirty): (&[bool], &[(u32, u32)]),
    ) -> Result<bool> {
        // A partial list (its unmade entries clean, `clean_nodes`) is walked only with its
        // `clean`; anything else needs every entry.
        if all.partial() && clean.len() != all.len() {
            all.get();
        }
        let nodes = all.list();
        if self.variants[i].nodes.len() != nodes.len() {
            return Ok(false);
        }
        let v = &mut self.variants[i];
        // Set once a node is not sent; later changed nodes are recorded but not sent, since
        // the rebuild below sends everything.
        let mut rebuild = false;
        let mut refusal: Option<(usize, &'static str, cudarc::driver::DriverError)> = None;
        let handles = core::mem::take(&mut v.handles);
        // The graph-owned buffers' addresses in this variant's graph, for the nodes using them.
        let mut scratch = if v.memory { scratch_table(&v.nodes) } else { Vec::new() };
        let plain = handles.is_empty() && scratch.is_empty();
        // With a `clean` of every node, only the `dirty` ranges are walked; the others count
        // as unchanged, in order as the walk passes them (as the full walk counts them: a walk
        // that stops at a node whose edges change kind counts none after it).
        // The first node not passed yet.
        let mut passed = 0usize;
        let mut walk = || {
            for r in super::walked_ranges(nodes.len(), clean, dirty) {
                self.stats.nodes_unchanged += (r.start - passed) as u64;
                passed = r.end;
                let span = v.nodes[r.clone()].iter_mut().zip(&nodes[r.clone()]);
                for (j, (state, new)) in r.zip(span) {
                    if clean.get(j) == Some(&true) {
                        self.stats.nodes_unchanged += 1;
                        continue;
                    }
                    // SAFETY: the state's node belongs to the graph v.exec was instantiated from,
                    // in context v.ctx (current); `new` was validated.
                    let sent = unsafe {
                        state.update(new.as_ref(), &mut self.driver, v.exec, v.ctx, !rebuild)
                    };
                    match sent {
                        Update::Absent => {}
                        Update::Unchanged => self.stats.nodes_unchanged += 1,
                        Update::Sent => self.stats.node_updates += 1,
                        Update::NotSent => rebuild = true,
                        Update::Refused(call, error) => {
                            refusal = Some((j, call, error));
                            rebuild = true;
                        }
                        Update::Mismatch => return false,
                    }
                }
            }
            self.stats.nodes_unchanged += (nodes.len() - passed) as u64;
            true
        };
        // Nothing to bind (no conditional handles, no graph-owned buffers): the walk runs as
        // it is, since outside a binding both are empty (each `with_*` puts back what it
        // replaced, and no call of a cache runs inside one: the walk runs no user code).
        let bound = if plain {
            walk()
        } else {
            conditional::with_handles(&handles, || alloc::with_scratch(&mut scratch, walk))
        };
        v.handles = handles;
        if !bound {
            return Ok(false);
        }
        if let Some((j, call, error)) = refusal {
            let site = shape.site(j);
            self.last_refusal = Some(Error::Node { site, source: CudaError { call, error } });
        }
        if rebuild {
            self.rebuild(i, shape, all.get())?;
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
        let (ctx, pdl) = (self.variants[i].ctx, self.variants[i].programmatic);
        let Built { graph, states, handles, edges, .. } =
            match build(&mut self.driver, shape, nodes, ctx, pdl) {
                Ok(b) => b,
                Err(e) => {
                    self.remove(i);
                    return Err(e);
                }
            };
        // Same topology as the variant's graph (same key and node kinds, `same_edges`).
        debug_assert!(edges == self.variants[i].edges);
        let exec = self.variants[i].exec;
        // A graph with conditional nodes has new handles, which the exec's conditional nodes
        // do not use: it is instantiated anew rather than updated into the exec. So is a graph
        // with memory allocation or free nodes, whose whole-exec update the driver refuses (and
        // whose new allocations have new addresses, which the exec's nodes do not use).
        let memory_nodes = super::has_memory_nodes(&states);
        let updated = if handles.is_empty() && !memory_nodes {
            // SAFETY: both live, same context, same topology (same variant key).
            unsafe { self.driver.exec_update(exec, graph) }
        } else {
            let error = cudarc::driver::DriverError(
                cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
            );
            // SAFETY: all-zero is a valid result info (null node, success-valued enum).
            Err((error, unsafe { core::mem::zeroed() }))
        };
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
                if let Some(h) = old.handle() {
                    new.set_handle(h);
                }
                NodeState::carry(old, &mut new);
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
                v.handles = handles;
                v.memory = super::has_memory_nodes(&v.nodes);
                let done = v.done;
                // SAFETY: the old exec and graph are ours and replaced; an exec in flight is
                // freed by the driver once its launches complete; one whose graph has memory
                // nodes is waited for first (its event stays the variant's).
                unsafe {
                    self.driver.wait_done(done, false);
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
}

/// A variant's graph as [`build`] made it.
pub(super) struct Built {
    pub(super) graph: CUgraph,
    pub(super) states: Vec<NodeState>,
    /// The conditional handles by slot (empty without device control flow).
    pub(super) handles: Vec<u64>,
    /// Its edges `(from, to, kind)`, ordered by `to` ([`Shape::edges`]), with the kinds they
    /// were added with: those the nodes declare ([`edge_kind`]) where the [`Pdl`] passed to
    /// [`build`] allows programmatic edges, else plain.
    pub(super) edges: Vec<(u32, u32, EdgeKind)>,
    /// How many edges the nodes declare programmatic, less those made plain into a join with a
    /// plain edge (see `EdgeKind`): added so, or plain where the device or driver lacks it.
    pub(super) declared: u64,
}

/// Where the graph being built may have programmatic edges: in the top graph, and inside the
/// bodies of conditional nodes (only where [`Limits::programmatic_bodies`] says so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pdl {
    pub(crate) top: bool,
    pub(crate) bodies: bool,
}

/// Builds a `CUgraph` of the present nodes with explicit `cuGraphAddNode_v2` calls in plan
/// order, with the plan's edges; nodes inside a conditional node's body go into that body's
/// graph. Each edge from a kernel node into a programmatic kernel's node of the same device is
/// a programmatic edge ([`raw::PROGRAMMATIC_EDGE`]) where `pdl` allows (the device supports it
/// and the cache uses it; inside bodies, the driver too): in the top graph and inside bodies
/// alike (an edge never joins two graphs), unless that kernel also has a plain edge into it
/// (then all its edges are plain, see [`EdgeKind`]). Every other edge is plain. First creates one
/// conditional handle per
/// condition slot of the present conditional nodes (`cuGraphConditionalHandleCreate`),
/// returned by slot. On error the partial graph is destroyed.
pub(super) fn build(
    driver: &mut impl Driver,
    shape: &dyn Shape,
    nodes: &[Option<NodeParams<'_>>],
    ctx: CUcontext,
    pdl: Pdl,
) -> Result<Built> {
    let present: Vec<bool> = nodes.iter().map(Option::is_some).collect();
    // The kinds come from the ends of each edge of the reduction (see `EdgeKind` for why the
    // reduction stays sound with programmatic edges).
    let end = |i: u32| nodes[i as usize].as_ref().and_then(NodeParams::kernel);
    // Where each node runs: an edge between kernels of two devices is plain (programmatic
    // dependent launch is within one device).
    let on = |i: u32| nodes[i as usize].as_ref().and_then(NodeParams::context).unwrap_or(ctx);
    let declared = |a: u32, b: u32| {
        debug_assert_eq!(shape.parent(a as usize), shape.parent(b as usize), "edge across graphs");
        if on(a) == on(b) { edge_kind(end(a), end(b)) } else { EdgeKind::Plain }
    };
    let allowed = |b: u32| if shape.parent(b as usize).is_none() { pdl.top } else { pdl.bodies };
    // A programmatic kernel that joins a plain edge gets plain edges only (see `EdgeKind`):
    // decided on the declared kinds, so that a device without programmatic edges counts as
    // fallbacks only the edges one with them would have made.
    let mut kinds: Vec<(u32, u32, EdgeKind)> =
        shape.edges(&present).into_iter().map(|(a, b)| (a, b, declared(a, b))).collect();
    crate::plan::plain_into_mixed_joins(&mut kinds);
    let mut count = 0;
    let edges: Vec<(u32, u32, EdgeKind)> = kinds
        .into_iter()
        .map(|(a, b, kind)| match kind {
            EdgeKind::Programmatic => {
                count += 1;
                (a, b, if allowed(b) { EdgeKind::Programmatic } else { EdgeKind::Plain })
            }
            EdgeKind::Plain => (a, b, EdgeKind::Plain),
        })
        .collect();
    // SAFETY: the context is current (bound by `run`).
    let graph = unsafe { driver.graph_create() }
        .call("cuGraphCreate")
        .map_err(|source| shape.graph_error(source))?;
    let mut handles: Vec<u64> = Vec::new();
    for (j, n) in nodes.iter().enumerate() {
        let Some((slot, default)) = n.as_ref().and_then(|n| n.conditional()) else { continue };
        // SAFETY: graph live, ctx its context and current.
        match unsafe { driver.conditional_handle(graph, ctx, default) } {
            Ok(h) => {
                if handles.len() <= slot as usize {
                    handles.resize(slot as usize + 1, 0);
                }
                handles[slot as usize] = h;
            }
            Err(error) => {
                // SAFETY: the graph is ours and unused.
                unsafe { driver.graph_destroy(graph) };
                let source = CudaError { call: "cuGraphConditionalHandleCreate", error };
                return Err(Error::Node { site: shape.site(j), source });
            }
        }
    }
    // Each alloc node binds its address as it is added, for the nodes after it.
    let mut scratch = Vec::new();
    let built = conditional::with_handles(&handles, || {
        alloc::with_scratch(&mut scratch, || add_nodes(driver, shape, nodes, (ctx, graph), &edges))
    });
    match built {
        Ok(states) => Ok(Built { graph, states, handles, edges, declared: count }),
        Err(e) => {
            // SAFETY: the graph is ours and unused.
            unsafe { driver.graph_destroy(graph) };
            Err(e)
        }
    }
}

/// The nodes of [`build`], each into its graph (the top graph or a body of an earlier
/// conditional node), after its predecessors, each edge of the kind `edges` gives.
fn add_nodes(
    driver: &mut impl Driver,
    shape: &dyn Shape,
    nodes: &[Option<NodeParams<'_>>],
    (ctx, graph): (CUcontext, CUgraph),
    edges: &[(u32, u32, EdgeKind)],
) -> Result<Vec<NodeState>> {
    let mut states: Vec<NodeState> = Vec::with_capacity(nodes.len());
    let mut handles: Vec<CUgraphNode> = vec![ptr::null_mut(); nodes.len()];
    let mut deps: Vec<CUgraphNode> = Vec::new();
    let mut data: Vec<CUgraphEdgeData> = Vec::new();
    let mut e = 0;
    for (j, n) in nodes.iter().enumerate() {
        deps.clear();
        data.clear();
        while e < edges.len() && edges[e].1 as usize == j {
            let (from, _, kind) = edges[e];
            deps.push(handles[from as usize]);
            data.push(match kind {
                EdgeKind::Programmatic => raw::PROGRAMMATIC_EDGE,
                EdgeKind::Plain => raw::PLAIN_EDGE,
            });
            e += 1;
        }
        // All plain: no edge data (the driver's default), as before programmatic edges.
        if data.iter().all(|d| *d == raw::PLAIN_EDGE) {
            data.clear();
        }
        // The plan puts a body node after its conditional node, which is present when it is.
        let target = match shape.parent(j) {
            None => Some(graph),
            Some((c, b)) => states.get(c).and_then(|s| s.bodies().get(b as usize).copied()),
        };
        let added = match (n, target) {
            (None, _) => Ok(NodeState::Absent),
            // SAFETY: target graph live, deps are its nodes, ctx current, parameters validated; a
            // programmatic edge comes from a kernel node into this programmatic kernel's node.
            (Some(n), Some(target)) => unsafe { n.add(driver, target, (&deps, &data), ctx) },
            (Some(_), None) => {
                let error = cudarc::driver::DriverError(
                    cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                );
                Err(CudaError {
                    call: "cuGraphAddNode_v2 (body of an absent conditional node)",
                    error,
                })
            }
        };
        match added {
            Ok(s) => {
                if let Some(h) = s.handle() {
                    handles[j] = h;
                }
                states.push(s);
            }
            Err(source) => return Err(Error::Node { site: shape.site(j), source }),
        }
    }
    Ok(states)
}

/// The addresses of the graph-owned buffers of a variant's graph, by place slot.
pub(super) fn scratch_table(nodes: &[NodeState]) -> Vec<u64> {
    let mut table = Vec::new();
    for (slot, addr, _) in nodes.iter().filter_map(NodeState::scratch) {
        if table.len() <= slot as usize {
            table.resize(slot as usize + 1, 0);
        }
        table[slot as usize] = addr;
    }
    table
}
