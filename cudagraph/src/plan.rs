//! The static plan of a `graph!` invocation: its nodes, their buffer accesses and explicit
//! `.after` edges, as the macro saw them at compile time. Needs no GPU.
//!
//! Edges are the transitive reduction of the data hazards between nodes (read after write, write
//! after read, write after write on the same place) plus the explicit `.after` edges. The same
//! function ([`infer_edges`]) gives the edges of the plan and of every graph the cache builds.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

mod variants;

/// What a node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A kernel launch (`cuGraphAddNode_v2`, kernel); the kernel's name.
    Kernel(&'static str),
    /// A memory copy (`cuGraphAddNode_v2`, memcpy; a small copy from device memory into pinned
    /// host memory is a kernel node of the crate's readback kernel in the driver's graph,
    /// [`ReadbackNode`](crate::ReadbackNode)).
    Memcpy,
    /// A memory set (`cuGraphAddNode_v2`, memset), also used by `zero`.
    Memset,
    /// Stream work recorded by a `capture` statement, as a child graph (`cuGraphAddNode_v2`,
    /// child graph).
    Captured,
    /// A captured [`Graph`](crate::Graph) embedded by `child(&mut g)`, as a child graph
    /// (`cuGraphAddNode_v2`, child graph).
    Child,
    /// A Rust closure run on the host by every launch, `host(…)` (`cuGraphAddNode_v2`, host).
    Host,
    /// A node without work, a join point, `empty()` (`cuGraphAddNode_v2`, empty).
    Empty,
    /// A graph-owned buffer's memory allocation node, `let tmp = alloc::<T>(n);`
    /// (`cuGraphAddNode_v2`, memory allocation).
    MemAlloc,
    /// A graph-owned buffer's memory free node, after its last use or `free(&mut tmp);`
    /// (`cuGraphAddNode_v2`, memory free).
    MemFree,
    /// Records a cudarc `CudaEvent`, `event_record(&e)` (`cuGraphAddNode_v2`, event record).
    EventRecord,
    /// Waits for a cudarc `CudaEvent`, `event_wait(&e)` (`cuGraphAddNode_v2`, wait event).
    EventWait,
    /// A conditional node (`cuGraphAddNode_v2`, conditional): `device_while`, `device_if` or
    /// `device_switch`, by that word; its body statements are the nodes whose parent it is
    /// ([`Plan::bodies`]).
    Conditional(&'static str),
}

/// The kind of an edge `(from, to)` of a graph.
///
/// An edge is [`Programmatic`](Self::Programmatic) when it goes from a kernel node into the node
/// of a kernel declared `#[programmatic]` in [`kernels!`](crate::kernels) (an inferred hazard
/// edge or an `.after` edge alike), on a device and driver that support programmatic dependent
/// launch (compute capability 9.0 and CUDA 12.3 or later; elsewhere it is added plain and
/// counted in [`Stats::programmatic_fallbacks`](crate::Stats::programmatic_fallbacks)). This
/// holds inside the body of a device `while`, `if` or `switch` too (both ends of an edge are
/// always in the same graph, the top graph or one body), with a driver of CUDA 13.0 or later,
/// where it was measured; with older drivers those edges are plain, and counted as fallbacks.
/// Every other edge is [`Plain`](Self::Plain): the driver allows programmatic edges between
/// kernel nodes only. A
/// conditional node is not a kernel node, so the edges into and out of it are plain, and so the
/// first kernel of a body starts only after everything before the conditional node finished.
///
/// One exception: a programmatic kernel that also has an edge from a node that is not a kernel
/// (a memset, a copy, a host function, an event or empty node, a conditional node) or from a
/// kernel of another device, a join of branches of both kinds, gets plain edges from its
/// kernels too (counted in neither [`Stats::programmatic_edges`](crate::Stats::programmatic_edges)
/// nor the fallbacks). On the H200 (driver 580), `heat`'s step with its flag's memset beside the
/// stencil, joined at the check, ran 1.12–1.26× slower with programmatic edges than with plain
/// ones, and 0.99–1.03× with that join's edge plain (`examples/probes/heat_floor.cu`, modes
/// pexecs, execs and pjoin).
///
/// # What a programmatic edge orders
///
/// It is added with edge type `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC` from port
/// `CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER` (the fastest port measured, see DESIGN.md): the
/// dependent kernel may start as soon as every thread block of the kernel before it has started,
/// instead of once it finished; its `griddepcontrol.wait` (`cudaGridDependencySynchronize()`)
/// then waits until that kernel finished and its writes are visible. A `.after(a)` into a
/// programmatic kernel therefore orders its *memory accesses* after `a`, not its start.
///
/// # Why transitive reduction stays sound
///
/// Edges are the transitive reduction of the hazards and `.after` edges ([`infer_edges`]): an
/// edge `i → j` is dropped when a path `i → … → k → j` exists. With plain edges only, `j` starts
/// after `k` finished, which finished after `i` finished. With programmatic edges the same
/// conclusion rests on one invariant: **a node finishes only after all of its predecessors
/// finished.** For a node entered by plain edges only, this is CUDA's rule (it does not even
/// start before them). For a programmatic kernel it is `load`'s contract: every thread executes
/// `griddepcontrol.wait` before it touches any buffer *and before it returns*, so the grid
/// cannot finish before the kernels it waits for. By induction along the path, `k` finishes
/// after `i`; and `j` touches memory only after `k` finished (a plain edge: `j` starts after it;
/// a programmatic edge: every thread of `j` waits for it first). So `j`'s accesses come after
/// `i` finished, which is all the dropped edge `i → j` ordered, whatever the kinds of the edges
/// on the path and whatever `i` and `j` are. This is why the contract asks a thread that returns
/// early (`if (i >= n) return;`) to wait first: a block that finished without waiting would let
/// the grid finish before its predecessor, and a node ordered after it only through the dropped
/// edge would see unfinished data.
///
/// Kinds are given after the reduction, from the two ends of each kept edge, so the reduced
/// edges are the same with and without programmatic edges, and the graph's topology (and its
/// variants) does not depend on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// The dependent node starts after the node before it finished.
    Plain,
    /// From a kernel node into a `#[programmatic]` kernel's node: the dependent kernel starts
    /// early and waits in its code (`griddepcontrol.wait`).
    Programmatic,
}

/// The kind of an edge from a node to a node, each given as `None` (not a kernel node) or
/// `Some(programmatic)`: programmatic exactly from a kernel into a programmatic kernel.
pub(crate) fn edge_kind(from: Option<bool>, to: Option<bool>) -> EdgeKind {
    if from.is_some() && to == Some(true) { EdgeKind::Programmatic } else { EdgeKind::Plain }
}

/// Makes plain every programmatic edge into a node that also has a plain edge into it (a
/// programmatic kernel joining a branch of a memset, copy or other node that is not a kernel,
/// or of another device: see [`EdgeKind`]). Returns how many it made plain.
pub(crate) fn plain_into_mixed_joins(edges: &mut [(u32, u32, EdgeKind)]) -> u64 {
    let Some(last) = edges.iter().map(|e| e.1 as usize).max() else { return 0 };
    // Per target: bit 0 a plain edge into it, bit 1 a programmatic one.
    let mut into = vec![0u8; last + 1];
    for &(_, b, kind) in edges.iter() {
        into[b as usize] |= if kind == EdgeKind::Programmatic { 2 } else { 1 };
    }
    let mut made_plain = 0;
    for e in edges.iter_mut() {
        if e.2 == EdgeKind::Programmatic && into[e.1 as usize] == 3 {
            e.2 = EdgeKind::Plain;
            made_plain += 1;
        }
    }
    made_plain
}

/// One buffer access of a node: an index into [`Plan::places`], and whether it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// Index into [`Plan::places`].
    pub place: u32,
    /// `true` for `&mut place`, `false` for `&place`.
    pub write: bool,
}

/// One statement of the body, in source order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanNode {
    /// The `let` name, or the kernel name / `copy` / `memset` / `zero`.
    pub label: &'static str,
    /// The statement's source text.
    pub text: &'static str,
    /// What the node does.
    pub kind: NodeKind,
    /// Line of the statement (1-based).
    pub line: u32,
    /// Column of the statement (1-based).
    pub column: u32,
    /// Buffer accesses, one per distinct place of the statement.
    pub accesses: &'static [Access],
    /// Indices of earlier nodes named in `.after(…)`.
    pub after: &'static [u32],
    /// Host condition under which the node is part of the graph (`""` when always), e.g.
    /// `step % 100 == 0` or `!(flag)`, nested conditions joined by `&&`.
    pub condition: &'static str,
}

/// The static plan of one `graph!` call site.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// Source file of the `graph!` call.
    pub file: &'static str,
    /// Line of the `graph!` call.
    pub line: u32,
    /// The distinct places (buffers) the body names, as written (`u`, `self.v`, `bufs[0]`).
    pub places: &'static [&'static str],
    /// The nodes in source order.
    pub nodes: &'static [PlanNode],
    /// Number of host `if` conditions (each a bit of the variant key).
    pub conditions: u32,
    /// The nodes inside bodies of device control flow, as `(node, conditional node, body)`:
    /// such a node belongs to body `body` (0 for a `while`, `if` or the first `switch` case) of
    /// that conditional node's, not to the graph around it. Sorted by node.
    pub bodies: &'static [(u32, u32, u32)],
}

#[doc(hidden)]
pub struct Registered(pub &'static Plan);
inventory::collect!(Registered);

/// Every `graph!` plan linked into this program, in no particular order.
///
/// Lets a program print its graphs (e.g. a `--plan` flag) without a GPU and without running them.
pub fn plans() -> impl Iterator<Item = &'static Plan> {
    inventory::iter::<Registered>.into_iter().map(|r| r.0)
}

impl Plan {
    /// Edges `(from, to)` between node indices when every node is present.
    ///
    /// With host `if`s this is no graph the cache builds: it has edges between the two branches
    /// of an `if` (which are never present together) and lacks the edges that a hazard passes
    /// on past an absent node. [`Self::edge_conditions`] gives each variant's edges.
    pub fn edges(&self) -> Vec<(u32, u32)> {
        let present = vec![true; self.nodes.len()];
        scoped_edges(self.nodes, self.bodies, &present)
    }

    /// Every edge of some structural variant (each combination of taken host `if` branches), as
    /// `(from, to, condition)`, sorted by `to`: `condition` is `""` when the edge is in
    /// every variant that has node `to`, else the host condition (in the nodes' own spelling,
    /// e.g. `!(flag)`, `a && !(b)`) under which it is, given that `to` is present. Plans without
    /// host `if`s give [`Self::edges`] with `""` everywhere. Needs no GPU.
    ///
    /// For example `if flag { copy(&x, &mut y); } else { memset(&mut y, 7u32); } copy(&y, &mut
    /// z);` gives the last copy an edge from the first copy if `flag` and one from the memset if
    /// `!(flag)`, and no edge between the two branches.
    ///
    /// Variants are found from the nodes' [`condition`](PlanNode::condition) texts: each text is
    /// split at top-level `&&` into atoms, `!(…)` negates, atoms with the same text are the same
    /// value (a run-time `for` is always present). With more than 12 distinct atoms (4096
    /// variants) this gives [`Self::edges`] with `""` everywhere, as if every node were present.
    pub fn edge_conditions(&self) -> Vec<(u32, u32, String)> {
        variants::edge_conditions(self).unwrap_or_else(|| {
            self.edges().into_iter().map(|(a, b)| (a, b, String::new())).collect()
        })
    }

    /// Whether [`Self::edge_conditions`] tells the variants apart (at most 12 distinct condition
    /// atoms), rather than giving every node present.
    fn variants_known(&self) -> bool {
        variants::enumerable(self)
    }

    /// The body that node `i` belongs to, as `(conditional node, body)`; `None` at the top.
    pub fn parent(&self, i: usize) -> Option<(usize, u32)> {
        let b = self.bodies.binary_search_by_key(&(i as u32), |b| b.0).ok()?;
        let (_, c, k) = self.bodies[b];
        Some((c as usize, k))
    }

    /// The edges of [`Self::edge_conditions`] (every edge of some variant) as `(from, to, kind)`,
    /// with the kind each edge has on a device that supports programmatic dependent launch: [`EdgeKind::Programmatic`] from a
    /// kernel node into a kernel `programmatic(name)` says is declared `#[programmatic]` (the
    /// plan knows kernels by name only, e.g. `|k| Heat::PROGRAMMATIC.contains(&k)`), inside
    /// device control flow bodies too (there with a driver of CUDA 13.0 or later). The plan
    /// does not know devices: an edge between kernels of two devices, which this marks
    /// programmatic, is built plain, and so are the other edges into its kernel. A programmatic
    /// kernel with an edge from a node that is not a kernel gets plain edges only
    /// ([`EdgeKind`]), decided here over the edges of every variant: a variant without that
    /// node's edge builds the others programmatic. Needs no
    /// GPU. The kinds of the edges a cache built are
    /// [`GraphCache::edges`](crate::GraphCache::edges).
    pub fn edge_kinds(&self, programmatic: impl Fn(&str) -> bool) -> Vec<(u32, u32, EdgeKind)> {
        let end = |i: u32| match self.nodes[i as usize].kind {
            NodeKind::Kernel(name) => Some(programmatic(name)),
            _ => None,
        };
        let kind = |a: u32, b: u32| edge_kind(end(a), end(b));
        let mut edges: Vec<_> =
            self.edge_conditions().into_iter().map(|(a, b, _)| (a, b, kind(a, b))).collect();
        plain_into_mixed_joins(&mut edges);
        edges
    }

    /// Where the `graph!` call is, as `file:line`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// Graphviz DOT of the plan: one box per node (kernels, copies and memsets in different
    /// shapes; conditional nodes dashed, labelled with their condition), one arrow per edge of
    /// some variant ([`Self::edge_conditions`]; an edge that exists only under a host condition
    /// beyond its target node's own is dashed and labelled `if …`), every edge drawn plain: the
    /// plan alone does not know which kernels are programmatic; see [`Self::to_dot_with`].
    pub fn to_dot(&self) -> String {
        let edges: Vec<_> =
            self.edge_conditions().into_iter().map(|(a, b, _)| (a, b, EdgeKind::Plain)).collect();
        self.to_dot_with(&edges)
    }

    /// Graphviz DOT of the plan with these edges `(from, to, kind)`: [`Self::to_dot`]'s nodes,
    /// and programmatic edges drawn bold blue, labelled `programmatic`; an edge with a host
    /// condition in [`Self::edge_conditions`] is dashed and labelled `if …`. The edges come from
    /// [`Self::edge_kinds`] (no GPU needed) or from [`GraphCache::edges`](crate::GraphCache::edges)
    /// (as a cache built them: one variant's present nodes, after any fallback to plain edges).
    pub fn to_dot_with(&self, edges: &[(u32, u32, EdgeKind)]) -> String {
        let conditions: HashMap<(u32, u32), String> = self
            .edge_conditions()
            .into_iter()
            .filter(|e| !e.2.is_empty())
            .map(|(a, b, c)| ((a, b), c))
            .collect();
        let mut s = String::new();
        let _ = writeln!(s, "digraph \"{}\" {{", escape(&self.location()));
        if !self.variants_known() {
            let _ =
                writeln!(s, "  // edges as if every node were present: too many host conditions");
        }
        let _ = writeln!(s, "  rankdir=TB; node [fontname=\"monospace\"];");
        for (i, n) in self.nodes.iter().enumerate() {
            let (shape, what) = match n.kind {
                NodeKind::Kernel(k) => ("box", format!("kernel {k}")),
                NodeKind::Memcpy => ("parallelogram", "memcpy".to_string()),
                NodeKind::Memset => ("hexagon", "memset".to_string()),
                NodeKind::Captured => ("component", "captured".to_string()),
                NodeKind::Child => ("component", "child graph".to_string()),
                NodeKind::Host => ("cds", "host function".to_string()),
                NodeKind::Empty => ("point", "empty".to_string()),
                NodeKind::MemAlloc => ("invhouse", "mem alloc".to_string()),
                NodeKind::MemFree => ("house", "mem free".to_string()),
                NodeKind::EventRecord => ("triangle", "event record".to_string()),
                NodeKind::EventWait => ("invtriangle", "event wait".to_string()),
                NodeKind::Conditional(w) => ("diamond", w.to_string()),
            };
            let accesses: Vec<String> = n
                .accesses
                .iter()
                .map(|a| {
                    let p = self.places.get(a.place as usize).copied().unwrap_or("?");
                    if a.write { format!("&mut {p}") } else { format!("&{p}") }
                })
                .collect();
            // Each piece escaped on its own: the `\n` between them are DOT line breaks.
            let mut label =
                format!("n{i} {}\\n{} (line {})", escape(n.label), escape(&what), n.line);
            if !accesses.is_empty() {
                let _ = write!(label, "\\n{}", escape(&accesses.join(", ")));
            }
            let style = if n.condition.is_empty() {
                String::new()
            } else {
                let word = if n.condition.starts_with("for ") { "in" } else { "if" };
                let _ = write!(label, "\\n{word} {}", escape(n.condition));
                ", style=dashed".to_string()
            };
            let _ = writeln!(s, "  n{i} [shape={shape}{style}, label=\"{label}\"];");
        }
        for &(a, b, kind) in edges {
            let condition = conditions.get(&(a, b));
            let attrs = match (kind, condition) {
                (EdgeKind::Plain, None) => String::new(),
                (EdgeKind::Plain, Some(c)) => {
                    format!(" [style=dashed, label=\"if {}\"]", escape(c))
                }
                (EdgeKind::Programmatic, None) => {
                    " [style=bold, color=blue, fontcolor=blue, label=\"programmatic\"]".to_string()
                }
                (EdgeKind::Programmatic, Some(c)) => format!(
                    " [style=\"bold,dashed\", color=blue, fontcolor=blue, label=\"programmatic\\nif {}\"]",
                    escape(c)
                ),
            };
            let _ = writeln!(s, "  n{a} -> n{b}{attrs};");
        }
        // A body node hangs from its conditional node, dotted, labelled with its body.
        for &(j, c, b) in self.bodies {
            let _ = writeln!(s, "  n{c} -> n{j} [style=dotted, label=\"body {b}\"];");
        }
        s.push_str("}\n");
        s
    }
}

impl fmt::Display for Plan {
    /// One line per node: index, label, kind, predecessors, and the host condition under which
    /// the node is present. The predecessors are those of every variant
    /// ([`Plan::edge_conditions`]); one that is a predecessor only under a further host
    /// condition is marked with it, e.g. `after [n1 if flag, n2 if !(flag)]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let edges = self.edge_conditions();
        writeln!(f, "graph at {} ({} nodes)", self.location(), self.nodes.len())?;
        if !self.variants_known() {
            writeln!(f, "  (edges as if every node were present: too many host conditions)")?;
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let preds: Vec<String> = edges
                .iter()
                .filter(|e| e.1 as usize == i)
                .map(
                    |(a, _, c)| if c.is_empty() { format!("n{a}") } else { format!("n{a} if {c}") },
                )
                .collect();
            write!(f, "  n{i} {:<12} {:?} after [{}]", n.label, n.kind, preds.join(", "))?;
            if n.condition.starts_with("for ") {
                // A run-time `for` body: repeated per iteration, edges across iterations made
                // per call.
                write!(f, " in {} (run-time count)", n.condition)?;
            } else if !n.condition.is_empty() {
                write!(f, " if {}", n.condition)?;
            }
            if let Some((c, b)) = self.parent(i) {
                write!(f, " in body {b} of n{c}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// A DOT string's body: backslashes and quotes escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Edges among the `present` nodes: the transitive reduction of their data hazards on the same
/// place (read after write, write after read, write after write) and their explicit `after`
/// edges (to present nodes). Node order is program order, so every edge goes from a lower to a
/// higher index: an `after` entry that is not an earlier node is ignored (`graph!` never makes
/// one), and a node beyond `present` counts as absent. Sorted by `(to, from)`.
///
/// Cost: O(n·a) to find hazards and O(n·e·n/64) time and n²/8 bytes for the reduction, with n
/// nodes, a accesses per node and e candidate edges per node. Over [`MAX_REDUCED_NODES`] nodes
/// there is no reduction: every direct hazard edge is kept.
pub fn infer_edges(nodes: &[PlanNode], present: &[bool]) -> Vec<(u32, u32)> {
    infer_edges_by(nodes.len(), |j| (nodes[j].accesses, nodes[j].after), present)
}

/// [`infer_edges`] within each graph of a plan with device control flow: the top-level graph
/// and each body of each conditional node (`bodies`: see [`Plan::bodies`]). Nodes of different
/// graphs get no edge (the driver has none between graphs); a conditional node's accesses, the
/// union of its bodies', order it in its own graph. Sorted by `(to, from)`.
pub fn scoped_edges(
    nodes: &[PlanNode],
    bodies: &[(u32, u32, u32)],
    present: &[bool],
) -> Vec<(u32, u32)> {
    if bodies.is_empty() {
        return infer_edges(nodes, present);
    }
    let scope = |j: usize| {
        bodies.binary_search_by_key(&(j as u32), |b| b.0).ok().map(|b| (bodies[b].1, bodies[b].2))
    };
    scoped_edges_by(nodes.len(), |j| (nodes[j].accesses, nodes[j].after), scope, present)
}

/// [`infer_edges_by`] within each graph: nodes `j` with the same `scope(j)` (`None`: the top
/// graph, else `(conditional node, body)`) get edges among themselves only. Sorted by
/// `(to, from)`.
pub(crate) fn scoped_edges_by<'n>(
    n: usize,
    node: impl Fn(usize) -> (&'n [Access], &'n [u32]),
    scope: impl Fn(usize) -> Option<(u32, u32)>,
    present: &[bool],
) -> Vec<(u32, u32)> {
    let mut all = Vec::new();
    let mut seen = Vec::new();
    for s in (0..n).map(&scope) {
        if seen.contains(&s) {
            continue;
        }
        seen.push(s);
        let mine: Vec<bool> =
            (0..n).map(|j| present.get(j).copied().unwrap_or(false) && scope(j) == s).collect();
        all.extend(infer_edges_by(n, &node, &mine));
    }
    all.sort_unstable_by_key(|&(from, to)| (to, from));
    all
}

/// Largest graph whose edges [`infer_edges`] reduces transitively (every `graph!` body: at most
/// 16 384 statements). Larger graphs, which only a [`GraphBuilder`](crate::GraphBuilder) makes,
/// get every direct hazard edge (the same order of execution, possibly some redundant edges).
pub const MAX_REDUCED_NODES: usize = 16_384;

/// [`infer_edges`] over `n` nodes given as `node(j) = (accesses, after)`.
pub(crate) fn infer_edges_by<'n>(
    n: usize,
    node: impl Fn(usize) -> (&'n [Access], &'n [u32]),
    present: &[bool],
) -> Vec<(u32, u32)> {
    // Per-place state is indexed by place. `graph!` and the builder number places densely from
    // 0; a hand-made plan may use any `u32`, so sparse indices are renumbered first (one slot
    // per distinct place, never more than the number of accesses).
    let (accesses, max) = (0..n)
        .flat_map(|j| node(j).0)
        .fold((0usize, 0usize), |(count, max), a| (count + 1, max.max(a.place as usize + 1)));
    let dense: Option<HashMap<u32, usize>> = (max > accesses).then(|| {
        let mut m = HashMap::new();
        for a in (0..n).flat_map(|j| node(j).0) {
            let k = m.len();
            m.entry(a.place).or_insert(k);
        }
        m
    });
    let places = dense.as_ref().map_or(max, HashMap::len);
    let slot = |p: u32| dense.as_ref().map_or(p as usize, |m| m[&p]);
    // Per place: the last writer and the readers since it. Edges to these imply (transitively)
    // every hazard with earlier accesses.
    let mut last_write: Vec<Option<u32>> = vec![None; places];
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); places];
    // Graphs over MAX_REDUCED_NODES keep every direct hazard edge (the reduction's bitsets would
    // take n²/8 bytes: 12.5 MB at 10 000 nodes, 1.25 GB at 100 000).
    let reduce = n <= MAX_REDUCED_NODES;
    let words = if reduce { n.div_ceil(64) } else { 0 };
    // reach[j] = set of nodes from which j is reachable.
    let mut reach = vec![0u64; n * words];
    let mut edges = Vec::new();
    let mut cand: Vec<u32> = Vec::new();
    let present = |j: usize| present.get(j).copied().unwrap_or(false);
    for j in 0..n {
        if !present(j) {
            continue;
        }
        let (accesses, after) = node(j);
        cand.clear();
        cand.extend(after.iter().copied().filter(|&a| (a as usize) < j && present(a as usize)));
        for a in accesses {
            let p = slot(a.place);
            cand.extend(last_write[p]);
            if a.write {
                cand.extend(readers[p].iter().copied());
            }
        }
        for a in accesses {
            let p = slot(a.place);
            if a.write {
                last_write[p] = Some(j as u32);
                readers[p].clear();
            } else {
                readers[p].push(j as u32);
            }
        }
        cand.sort_unstable_by(|a, b| b.cmp(a));
        cand.dedup();
        if !reduce {
            edges.extend(cand.iter().map(|&i| (i, j as u32)));
            continue;
        }
        let (done, rest) = reach.split_at_mut(j * words);
        let rj = &mut rest[..words];
        for &i in &cand {
            let i = i as usize;
            if rj[i / 64] >> (i % 64) & 1 == 1 {
                continue; // already implied by a later predecessor
            }
            edges.push((i as u32, j as u32));
            rj[i / 64] |= 1 << (i % 64);
            for (w, r) in rj.iter_mut().zip(&done[i * words..(i + 1) * words]) {
                *w |= r;
            }
        }
    }
    edges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test node (leaks its small slices to get the plan's `'static` lifetimes).
    fn node(accesses: &[Access], after: &[u32]) -> PlanNode {
        let accesses = Box::leak(accesses.to_vec().into_boxed_slice());
        let after = Box::leak(after.to_vec().into_boxed_slice());
        PlanNode {
            label: "n",
            text: "",
            kind: NodeKind::Memcpy,
            line: 1,
            column: 1,
            accesses,
            after,
            condition: "",
        }
    }
    const fn r(place: u32) -> Access {
        Access { place, write: false }
    }
    const fn w(place: u32) -> Access {
        Access { place, write: true }
    }
    fn all(nodes: &[PlanNode]) -> Vec<(u32, u32)> {
        infer_edges(nodes, &vec![true; nodes.len()])
    }

    #[test]
    fn graphs_over_the_reduction_limit_keep_direct_edges() {
        // n0 writes 0; n1 reads 0, writes 1; n2 reads 0 and 1: (0, 2) is implied by (0, 1), (1, 2).
        let head = [node(&[w(0)], &[]), node(&[r(0), w(1)], &[]), node(&[r(0), r(1)], &[])];
        assert_eq!(all(&head), [(0, 1), (1, 2)]);
        let mut big = head.to_vec();
        big.extend((0..MAX_REDUCED_NODES as u32).map(|p| node(&[w(p + 2)], &[])));
        assert_eq!(all(&big), [(0, 1), (1, 2), (0, 2)]);
    }

    #[test]
    fn hand_made_plans_with_bad_indices_do_not_panic() {
        // `after` naming a later node and a node itself, and a short `present`.
        let nodes = [node(&[w(0)], &[7, 1]), node(&[r(0)], &[1])];
        assert_eq!(infer_edges(&nodes, &[true, true]), [(0, 1)]);
        assert_eq!(infer_edges(&nodes, &[true]), []);
        let plan = Plan {
            file: "f",
            line: 1,
            places: &[],
            nodes: Box::leak(Box::new(nodes)),
            conditions: 0,
            bodies: &[],
        };
        assert!(plan.to_dot().contains("&mut ?"));
    }

    #[test]
    fn sparse_place_indices_are_renumbered_not_allocated() {
        // Places u32::MAX and 5 behave as two places (a dense plan's edges), with no 2³²-entry
        // tables.
        let sparse = [
            node(&[w(u32::MAX)], &[]),
            node(&[r(u32::MAX), w(5)], &[]),
            node(&[r(5)], &[]),
            node(&[w(u32::MAX)], &[]),
        ];
        let dense =
            [node(&[w(0)], &[]), node(&[r(0), w(1)], &[]), node(&[r(1)], &[]), node(&[w(0)], &[])];
        assert_eq!(all(&sparse), all(&dense));
        assert_eq!(all(&sparse), [(0, 1), (1, 2), (1, 3)]);
    }

    #[test]
    fn dot_escapes_quotes_and_backslashes_in_each_label_piece() {
        let mut n = node(&[w(0)], &[]);
        n.label = "a\\b";
        n.condition = "s == \"x\\\"y\"";
        let plan = Plan {
            file: "f",
            line: 1,
            places: &["p\"q"],
            nodes: Box::leak(Box::new([n])),
            conditions: 1,
            bodies: &[],
        };
        let dot = plan.to_dot();
        let line = dot.lines().find(|l| l.starts_with("  n0 [")).unwrap();
        assert_eq!(
            line,
            r#"  n0 [shape=parallelogram, style=dashed, label="n0 a\\b\nmemcpy (line 1)\n&mut p\"q\nif s == \"x\\\"y\""];"#
        );
    }

    #[test]
    fn read_after_write() {
        assert_eq!(all(&[node(&[w(0)], &[]), node(&[r(0)], &[])]), [(0, 1)]);
    }

    #[test]
    fn write_after_read() {
        assert_eq!(all(&[node(&[r(0)], &[]), node(&[w(0)], &[])]), [(0, 1)]);
    }

    #[test]
    fn write_after_write() {
        assert_eq!(all(&[node(&[w(0)], &[]), node(&[w(0)], &[])]), [(0, 1)]);
    }

    #[test]
    fn reads_are_independent() {
        assert!(all(&[node(&[r(0)], &[]), node(&[r(0)], &[])]).is_empty());
    }

    #[test]
    fn distinct_places_are_independent() {
        assert!(all(&[node(&[w(0)], &[]), node(&[w(1)], &[])]).is_empty());
    }

    #[test]
    fn chain_is_transitively_reduced() {
        // 0 writes a; 1 reads a writes b; 2 reads a and b: 0->2 is implied by 0->1->2.
        let nodes = [node(&[w(0)], &[]), node(&[r(0), w(1)], &[]), node(&[r(0), r(1)], &[])];
        assert_eq!(all(&nodes), [(0, 1), (1, 2)]);
    }

    #[test]
    fn fan_out_fan_in() {
        let nodes = [
            node(&[w(0)], &[]),
            node(&[r(0), w(1)], &[]),
            node(&[r(0), w(2)], &[]),
            node(&[r(1), r(2), w(3)], &[]),
        ];
        assert_eq!(all(&nodes), [(0, 1), (0, 2), (2, 3), (1, 3)]);
    }

    #[test]
    fn war_on_all_readers() {
        let nodes = [node(&[r(0)], &[]), node(&[r(0)], &[]), node(&[w(0)], &[])];
        assert_eq!(all(&nodes), [(1, 2), (0, 2)]);
    }

    #[test]
    fn explicit_after_edge() {
        let nodes = [node(&[w(0)], &[]), node(&[w(1)], &[0])];
        assert_eq!(all(&nodes), [(0, 1)]);
    }

    #[test]
    fn redundant_after_is_reduced() {
        let nodes = [node(&[w(0)], &[]), node(&[r(0), w(1)], &[]), node(&[r(1)], &[0])];
        assert_eq!(all(&nodes), [(0, 1), (1, 2)]);
    }

    #[test]
    fn absent_nodes_are_skipped_but_hazards_pass_through() {
        // 0 writes a, 1 (absent) reads a writes b, 2 reads a: 0 -> 2 directly.
        let nodes = [node(&[w(0)], &[]), node(&[r(0), w(1)], &[]), node(&[r(0)], &[])];
        assert_eq!(infer_edges(&nodes, &[true, false, true]), [(0, 2)]);
    }

    #[test]
    fn after_to_absent_node_is_dropped() {
        let nodes = [node(&[w(0)], &[]), node(&[w(1)], &[0])];
        assert!(infer_edges(&nodes, &[false, true]).is_empty());
    }

    #[test]
    fn many_nodes_reduce_to_a_chain() {
        // Every node reads and writes place 0: a chain of 200 nodes.
        static ACC: [Access; 1] = [Access { place: 0, write: true }];
        let nodes: Vec<PlanNode> = (0..200).map(|_| node(&ACC, &[])).collect();
        let e = all(&nodes);
        assert_eq!(e.len(), 199);
        assert!(e.iter().all(|&(a, b)| b == a + 1));
    }

    static PLAN_NODES: [PlanNode; 2] = [
        PlanNode {
            label: "s",
            text: "k.stencil(&u, &mut v).launch(cfg)",
            kind: NodeKind::Kernel("stencil"),
            line: 3,
            column: 9,
            accesses: &[Access { place: 0, write: false }, Access { place: 1, write: true }],
            after: &[],
            condition: "",
        },
        PlanNode {
            label: "memset",
            text: "memset(&mut v, 0u32)",
            kind: NodeKind::Memset,
            line: 4,
            column: 9,
            accesses: &[Access { place: 1, write: true }],
            after: &[],
            condition: "step % 2 == 0",
        },
    ];
    static PLAN: Plan = Plan {
        file: "x.rs",
        line: 2,
        places: &["u", "v"],
        nodes: &PLAN_NODES,
        conditions: 1,
        bodies: &[],
    };

    #[test]
    fn dot_has_nodes_edges_and_conditions() {
        let dot = PLAN.to_dot();
        assert!(dot.starts_with("digraph \"x.rs:2\" {"), "{dot}");
        assert!(
            dot.contains("n0 [shape=box, label=\"n0 s\\nkernel stencil (line 3)\\n&u, &mut v\"]"),
            "{dot}"
        );
        assert!(dot.contains("n1 [shape=hexagon, style=dashed"), "{dot}");
        assert!(dot.contains("if step % 2 == 0"), "{dot}");
        assert!(dot.contains("n0 -> n1;"), "{dot}");
        assert_eq!(dot.matches("->").count(), 1);
    }

    fn conditional(accesses: &[Access], condition: &'static str) -> PlanNode {
        PlanNode { condition, ..node(accesses, &[]) }
    }

    fn plan_of(nodes: Vec<PlanNode>) -> Plan {
        let nodes = Box::leak(nodes.into_boxed_slice());
        Plan { file: "f", line: 1, places: &["a", "b", "c"], nodes, conditions: 2, bodies: &[] }
    }

    fn owned(edges: &[(u32, u32, &str)]) -> Vec<(u32, u32, String)> {
        edges.iter().map(|&(a, b, c)| (a, b, c.to_string())).collect()
    }

    #[test]
    fn edge_conditions_pass_hazards_past_an_absent_node() {
        // n0 writes a; n1 rewrites a if c; n2 reads a: from n1 if c, else straight from n0.
        let plan = plan_of(vec![node(&[w(0)], &[]), conditional(&[w(0)], "c"), node(&[r(0)], &[])]);
        let want = [(0, 1, ""), (0, 2, "!(c)"), (1, 2, "c")];
        assert_eq!(plan.edge_conditions(), owned(&want));
        let text = plan.to_string();
        assert!(text.contains("after [n0 if !(c), n1 if c]"), "{text}");
        assert!(plan.to_dot().contains("n0 -> n2 [style=dashed, label=\"if !(c)\"];"));
    }

    #[test]
    fn edge_conditions_of_nested_branches_and_a_negated_conjunction() {
        // n0 writes a; n1 reads a, writes b if b; n2 reads b, writes c if c; n3 reads a and c.
        // n0 -> n3 is implied through n1 and n2 when both are present, and only then.
        let plan = plan_of(vec![
            node(&[w(0)], &[]),
            conditional(&[r(0), w(1)], "b"),
            conditional(&[r(1), w(2)], "c"),
            node(&[r(0), r(2)], &[]),
        ]);
        let want = [(0, 1, ""), (1, 2, "b"), (0, 3, "!(b && c)"), (2, 3, "c")];
        assert_eq!(plan.edge_conditions(), owned(&want));
        // Two branches of one `if` never get an edge between them; nested ones are conjoined.
        let plan = plan_of(vec![
            conditional(&[w(0)], "p && q"),
            conditional(&[w(0)], "p && !(q)"),
            conditional(&[w(0)], "!(p)"),
            node(&[r(0)], &[]),
        ]);
        let want = [(0, 3, "p && q"), (1, 3, "p && !(q)"), (2, 3, "!(p)")];
        assert_eq!(plan.edge_conditions(), owned(&want));
    }

    #[test]
    fn too_many_conditions_print_every_node_present_and_say_so() {
        static CONDS: [&str; 13] =
            ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11", "a12"];
        let plan = plan_of(CONDS.iter().map(|c| conditional(&[w(0)], c)).collect());
        let chain: Vec<(u32, u32, String)> = (0..12).map(|i| (i, i + 1, String::new())).collect();
        assert_eq!(plan.edge_conditions(), chain);
        assert!(plan.to_string().contains("edges as if every node were present"));
        assert!(plan.to_dot().contains("edges as if every node were present"));
    }

    /// n0 kernel `plain` writes 0; n1 kernel `pdl` reads 0, writes 1; n2 memcpy reads 1, writes
    /// 2; n3 kernel `pdl` reads 2, writes 3; n4 kernel `pdl` reads 3, `.after(n0)` (implied).
    fn mixed() -> Vec<PlanNode> {
        let kernel = |name, accesses: &[Access], after: &[u32]| PlanNode {
            kind: NodeKind::Kernel(name),
            ..node(accesses, after)
        };
        vec![
            kernel("plain", &[w(0)], &[]),
            kernel("pdl", &[r(0), w(1)], &[]),
            node(&[r(1), w(2)], &[]),
            kernel("pdl", &[r(2), w(3)], &[]),
            kernel("pdl", &[r(3)], &[0]),
        ]
    }

    #[test]
    fn edge_kinds_are_programmatic_from_a_kernel_into_a_programmatic_kernel_only() {
        let nodes = Box::leak(mixed().into_boxed_slice());
        let places = &["a", "b", "c", "d"];
        let plan = Plan { file: "f", line: 1, places, nodes, conditions: 0, bodies: &[] };
        let (p, plain) = (EdgeKind::Programmatic, EdgeKind::Plain);
        // kernel -> pdl, pdl -> memcpy, memcpy -> pdl, pdl -> pdl; the `.after(n0)` of n4 is
        // implied by the chain and reduced away, whatever the kinds on the path.
        let kinds = plan.edge_kinds(|k| k == "pdl");
        assert_eq!(kinds, [(0, 1, p), (1, 2, plain), (2, 3, plain), (3, 4, p)]);
        assert!(plan.edge_kinds(|_| false).iter().all(|e| e.2 == plain));
        let dot = plan.to_dot_with(&kinds);
        assert!(
            dot.contains(
                "n0 -> n1 [style=bold, color=blue, fontcolor=blue, label=\"programmatic\"];"
            ),
            "{dot}"
        );
        assert!(dot.contains("n1 -> n2;"), "{dot}");
        assert_eq!(dot.matches("programmatic").count(), 2, "{dot}");
        // `to_dot` draws the same edges, plain.
        assert_eq!(plan.to_dot(), plan.to_dot_with(&plan.edge_kinds(|_| false)));
    }
}

#[cfg(test)]
mod properties {
    //! The inferred edges equal the transitive reduction of all hazards, computed the slow,
    //! obvious way, for random statement sequences (and random subsets of present nodes).
    use super::*;
    use proptest::prelude::*;

    fn reference(nodes: &[PlanNode], present: &[bool]) -> Vec<(u32, u32)> {
        let n = nodes.len();
        let mut dep = vec![vec![false; n]; n]; // dep[i][j]: j must run after i
        for j in 0..n {
            for i in 0..j {
                if !(present[i] && present[j]) {
                    continue;
                }
                let hazard = nodes[i].accesses.iter().any(|a| {
                    nodes[j].accesses.iter().any(|b| a.place == b.place && (a.write || b.write))
                });
                dep[i][j] = hazard || nodes[j].after.contains(&(i as u32));
            }
        }
        // transitive closure (Floyd–Warshall), then drop every edge implied by a longer path
        let mut reach = dep.clone();
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    if reach[i][k] && reach[k][j] {
                        reach[i][j] = true;
                    }
                }
            }
        }
        let mut edges = Vec::new();
        for j in 0..n {
            for i in (0..j).rev() {
                if reach[i][j] && !(0..n).any(|k| reach[i][k] && reach[k][j]) {
                    edges.push((i as u32, j as u32));
                }
            }
        }
        edges
    }

    /// A test node with these accesses and `after` nodes.
    fn test_node(accesses: Vec<Access>, after: Vec<u32>) -> PlanNode {
        PlanNode {
            label: "n",
            text: "",
            kind: NodeKind::Memcpy,
            line: 1,
            column: 1,
            accesses: Box::leak(accesses.into_boxed_slice()),
            after: Box::leak(after.into_boxed_slice()),
            condition: "",
        }
    }

    fn arb_nodes() -> impl Strategy<Value = (Vec<PlanNode>, Vec<bool>)> {
        let access = (0u32..5, any::<bool>()).prop_map(|(place, write)| Access { place, write });
        let node = (
            proptest::collection::vec(access, 0..4),
            proptest::collection::vec(any::<u32>(), 0..3),
        );
        proptest::collection::vec((node, any::<bool>()), 0..24).prop_map(|v| {
            let mut nodes = Vec::new();
            let mut present = Vec::new();
            for (j, ((mut acc, after), p)) in v.into_iter().enumerate() {
                // one access per place, as the macro emits them (a write wins)
                acc.sort_by_key(|a| (a.place, !a.write));
                acc.dedup_by_key(|a| a.place);
                let after: Vec<u32> =
                    if j == 0 { vec![] } else { after.into_iter().map(|a| a % j as u32).collect() };
                nodes.push(test_node(acc, after));
                present.push(p || j % 3 == 0);
            }
            (nodes, present)
        })
    }

    /// A random `graph!` body with nested host `if`/`else` branches, as the checker admits it:
    /// `.after` names only earlier nodes bound in a scope that encloses the statement. Returns the
    /// plan's nodes and which are present for random taken branches.
    fn arb_scoped() -> impl Strategy<Value = (Vec<PlanNode>, Vec<bool>)> {
        let step =
            (0u8..10, (0u32..5, any::<bool>()), proptest::collection::vec(any::<u32>(), 0..3));
        (proptest::collection::vec(step, 0..40), proptest::collection::vec(any::<bool>(), 16))
            .prop_map(|(steps, taken)| {
                // Open scopes: (path of scope ids, present, is the then-branch of if number k).
                let mut stack: Vec<(Vec<u32>, bool, Option<usize>)> = vec![(vec![], true, None)];
                let (mut scopes, mut ifs) = (0u32, 0usize);
                let mut nodes = Vec::new();
                let (mut present, mut paths): (Vec<bool>, Vec<Vec<u32>>) = (vec![], vec![]);
                for (op, (place, write), after) in steps {
                    let (path, here, then) = stack.last().cloned().expect("root");
                    match op {
                        8 if stack.len() < 5 => {
                            scopes += 1;
                            let mut p = path.clone();
                            p.push(scopes);
                            stack.push((p, here && taken[ifs % taken.len()], Some(ifs)));
                            ifs += 1;
                        }
                        9 if stack.len() > 1 => {
                            stack.pop();
                            if let Some(k) = then {
                                // Close the then-branch, open the else-branch of the same if.
                                let (parent, up, _) = stack.last().cloned().expect("parent");
                                scopes += 1;
                                let mut p = parent;
                                p.push(scopes);
                                stack.push((p, up && !taken[k % taken.len()], None));
                            }
                        }
                        _ => {
                            let j = nodes.len();
                            let visible: Vec<u32> = (0..j)
                                .filter(|&i| path.starts_with(&paths[i]))
                                .map(|i| i as u32)
                                .collect();
                            let after: Vec<u32> = if visible.is_empty() {
                                vec![]
                            } else {
                                after
                                    .into_iter()
                                    .map(|a| visible[a as usize % visible.len()])
                                    .collect()
                            };
                            nodes.push(test_node(vec![Access { place, write }], after));
                            present.push(here);
                            paths.push(path);
                        }
                    }
                }
                (nodes, present)
            })
    }

    /// Whether `to` is reachable from `from` over `edges`.
    fn reaches(edges: &[(u32, u32)], from: u32, to: u32) -> bool {
        let mut seen = vec![from];
        let mut i = 0;
        while i < seen.len() {
            let at = seen[i];
            for &(a, b) in edges {
                if a == at && !seen.contains(&b) {
                    seen.push(b);
                }
            }
            i += 1;
        }
        seen.contains(&to)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn edges_are_the_transitive_reduction_of_the_hazards((nodes, present) in arb_nodes()) {
            let mut got = infer_edges(&nodes, &present);
            let mut want = reference(&nodes, &present);
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got, want);
        }

        /// Scoped `.after` is never lost: a present node's `.after` targets are present, and every
        /// one of them reaches it over the variant's edges, which equal the reference reduction.
        #[test]
        fn scoped_after_is_kept_in_every_variant((nodes, present) in arb_scoped()) {
            let got = infer_edges(&nodes, &present);
            for (j, n) in nodes.iter().enumerate() {
                if !present[j] {
                    continue;
                }
                for &i in n.after {
                    prop_assert!(present[i as usize], "node {j} names absent node {i}");
                    prop_assert!(reaches(&got, i, j as u32), "edge {i} -> {j} lost: {got:?}");
                }
            }
            let (mut got, mut want) = (got, reference(&nodes, &present));
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got, want);
        }

        /// The kinds leave the edges as they are and mark exactly the edges from a kernel node
        /// into a programmatic kernel's that has no edge from a node that is not a kernel.
        #[test]
        fn edge_kinds_mark_kernel_to_programmatic_kernel_edges(
            (nodes, _) in arb_nodes(),
            kinds in proptest::collection::vec(0u8..3, 24),
        ) {
            // Node j: 0 not a kernel, 1 a plain kernel, 2 a programmatic one.
            let names = ["", "plain", "pdl"];
            let nodes: Vec<PlanNode> = nodes
                .into_iter()
                .zip(&kinds)
                .map(|(n, &k)| match k {
                    0 => n,
                    k => PlanNode { kind: NodeKind::Kernel(names[k as usize]), ..n },
                })
                .collect();
            let nodes: &'static [PlanNode] = Box::leak(nodes.into_boxed_slice());
            let plan =
                Plan { file: "f", line: 1, places: &[], nodes, conditions: 0, bodies: &[] };
            let got = plan.edge_kinds(|k| k == "pdl");
            let edges: Vec<(u32, u32)> = got.iter().map(|e| (e.0, e.1)).collect();
            prop_assert_eq!(edges, plan.edges());
            for &(a, b, kind) in &got {
                // Every edge into `b` comes from a kernel (the slow, obvious way).
                let joins_plain = got.iter().any(|e| e.1 == b && kinds[e.0 as usize] == 0);
                let want = kinds[a as usize] > 0 && kinds[b as usize] == 2 && !joins_plain;
                prop_assert_eq!(kind == EdgeKind::Programmatic, want);
            }
        }

        #[test]
        fn every_node_present_gives_the_same_as_plan_edges((nodes, _) in arb_nodes()) {
            let all = vec![true; nodes.len()];
            let mut got = infer_edges(&nodes, &all);
            let mut want = reference(&nodes, &all);
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got, want);
        }
    }
}
