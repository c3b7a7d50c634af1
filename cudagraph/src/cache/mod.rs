//! The graph cache: one instantiated exec per structural variant of a call site, chosen by
//! the variant key, evicted least recently used, updated in place by the ladder ([`ladder`]),
//! ordered with its buffers' own streams ([`ledger`]), after every call was checked
//! ([`validate`]). [`GraphCache`] owns every driver object it creates.

use core::ptr;
use std::path::Path;

use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUgraph, CUgraphExec, CUstream};
use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{Call, CudaError, Error, NodeSite, Result};
use crate::introspect::{ClonedGraph, GraphInfo, GraphNode};
use crate::kind::kernel::{WORDS_TAG, WordItem, compare_node};
use crate::kind::{CallWords, CapturedWork, Limits, NodeParams, NodeState, Reports};
use crate::operand::Guard;
use crate::plan::{EdgeKind, Plan};
use crate::raw::{self, Cuda, Driver};

#[cfg(test)]
mod faults;
mod ladder;
pub(crate) mod ledger;
mod looped;
pub(crate) mod phases;
pub(crate) mod recording;
#[cfg(test)]
mod review12;
#[cfg(test)]
mod review16;
#[cfg(test)]
mod review32;
#[cfg(test)]
mod review_unchanged;
#[cfg(test)]
pub(crate) mod tests;
mod validate;

use ladder::{Built, build};
use validate::validate_changed;

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
    /// Edges `(from, to)` among the `present` nodes, ordered by `to`.
    fn edges(&self, present: &[bool]) -> Vec<(u32, u32)>;
    /// The first node that accesses place `place` (for errors about that place).
    fn place_site(&self, place: usize) -> NodeSite;
    /// The `graph!` plan's node that call node `i` is (an iteration of a run-time `for` repeats
    /// its body's plan nodes).
    fn plan_index(&self, i: usize) -> usize {
        i
    }
    /// The body node `i` belongs to, `(conditional node, body)`; `None` for the top graph.
    fn parent(&self, _i: usize) -> Option<(usize, u32)> {
        None
    }
}

impl Shape for Plan {
    fn location(&self) -> (&'static str, u32) {
        (self.file, self.line)
    }
    fn site(&self, i: usize) -> NodeSite {
        NodeSite::of(self, &self.nodes[i])
    }
    fn edges(&self, present: &[bool]) -> Vec<(u32, u32)> {
        crate::plan::scoped_edges(self.nodes, self.bodies, present)
    }
    fn parent(&self, i: usize) -> Option<(usize, u32)> {
        Plan::parent(self, i)
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

/// Whether two builder signatures are equal, element by element: `==` on `[u32]` calls libc's
/// `memcmp` even for the empty signatures of every `graph!` call, which was a third of an
/// unchanged one-kernel call's host time (`.ci/host-profile`, perf).
#[inline]
fn same_signature(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A quick hash of `words` (not cryptographic; a filter before a full comparison, or a hint):
/// FxHash's rotate-xor-multiply step in four independent lanes over the words in fours, so the
/// multiplies do not wait on each other (one dependent chain over a 1000-node call's words was
/// about 5 cycles a word), then the lanes, the length and the rest folded together.
pub(crate) fn hash_words(seed: u64, words: &[u64]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    if words.len() < 16 {
        // A one-kernel call's words: one chain is shorter than setting up the lanes.
        return words.iter().fold(seed, |h, &w| step(h, w));
    }
    let mut lanes = [seed, seed ^ 0x9e37_79b9_7f4a_7c15, seed.rotate_left(21), !seed];
    let mut fours = words.chunks_exact(4);
    for w in &mut fours {
        for (l, &x) in lanes.iter_mut().zip(w) {
            *l = step(*l, x);
        }
    }
    let h = lanes.into_iter().fold(step(seed, words.len() as u64), step);
    fours.remainder().iter().fold(h, |h, &w| step(h, w))
}

/// [`hash_words`] of 32-bit words, taken two at a time.
pub(crate) fn hash_u32s(seed: u64, words: &[u32]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let mut lanes = [seed, seed ^ 0x9e37_79b9_7f4a_7c15, seed.rotate_left(21), !seed];
    let mut eights = words.chunks_exact(8);
    for w in &mut eights {
        for (l, p) in lanes.iter_mut().zip(w.chunks_exact(2)) {
            *l = step(*l, u64::from(p[0]) | u64::from(p[1]) << 32);
        }
    }
    let h = lanes.into_iter().fold(step(seed, words.len() as u64), step);
    eights.remainder().iter().fold(h, |h, &w| step(h, u64::from(w)))
}

/// Flags of the cache's instantiations (`cuGraphInstantiateWithParams` with
/// `CUgraphInstantiate_flags`; all off by default, which is `cuGraphInstantiateWithFlags(graph, 0)`).
/// Set with [`GraphCache::set_instantiate_flags`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstantiateFlags {
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD`: upload the exec to the device on the call's stream
    /// as part of the instantiation, so that its first launch does not pay for it (as
    /// [`GraphCache::upload`] does afterwards).
    pub upload: bool,
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`: before each launch, the driver frees
    /// allocations of the graph's alloc nodes that are still live. `graph!`'s and the builder's
    /// graph-owned buffers are always freed in their graph, so this changes nothing for them; it
    /// is there for graphs whose allocations outlive the launch.
    pub auto_free_on_launch: bool,
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY`: kernel nodes run with the priority of
    /// their per-node launch attribute (`CU_LAUNCH_ATTRIBUTE_PRIORITY`, copied from the stream's
    /// priority when captured) instead of the launch stream's priority. (A whole-exec update
    /// then may not change a node's priority.)
    pub node_priority: bool,
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`: the exec is made launchable from the
    /// device too; the crate still launches it from the host (`cuGraphLaunch`). Off by default:
    /// it helps wide graphs and hurts small ones. `bench --device-launch` on the H200 (one run,
    /// its paired table, graph ÷ raw default-flag launch; without the flag in the same call):
    /// a step that waits for its result and reads it (rows `rd` ÷ `rc`) 0.900 for a fan of
    /// 1000 kernels (1.022 without), 0.950 for 100 (1.027), 0.983 for 10 (1.060), but 1.457
    /// for one kernel (1.046) and 1.222 for a chain of 10 (1.111); steps enqueued back to back
    /// (`d` ÷ `c`) 0.969 for the 1000-kernel fan (1.011) but 1.155 for 100, 1.584 for 10 and
    /// 2.736 for one kernel (1.000–1.203). Measure your step with and without it.
    ///
    /// The CUDA programming guide lists kernel, memcpy, memset and child-graph nodes as what a
    /// device graph may hold; the driver refuses the flag (the call's error, from
    /// `cuGraphInstantiateWithParams`, nothing enqueued) for graphs with other nodes: `host`
    /// statements, graph-owned `alloc` buffers (allocation and free nodes), `capture`
    /// statements whose recording allocates or holds host functions or events, nodes of several
    /// devices, event record and wait nodes (`event_record`/`event_wait` statements; shown on
    /// the H200 by GPU test `review_session27b`), and possibly empty and conditional
    /// (`device while`/`if`/`switch`) nodes;
    /// and together with `auto_free_on_launch` (that pair the crate refuses itself, as
    /// [`Error::InstantiateFlags`](crate::Error::InstantiateFlags), without calling the driver,
    /// and builds no memoized exec under it: a call an existing exec can take by an update
    /// still runs); the cache stays usable, and each call that needs such an instantiation
    /// fails the same way. A `copy` into a
    /// [`PinnedBuffer`](crate::PinnedBuffer) is held (GPU test `device_launch`, on the H200:
    /// its memory is page-locked host memory, addressable by the device under unified
    /// addressing). As every flag, it applies to later
    /// instantiations: a variant instantiated before it was set keeps its exec, and a change
    /// that needs a new instantiation of that variant (a whole-exec update refused, a graph-owned
    /// buffer resized) is made with the flag, so it may be refused then (the variant is
    /// dropped). Each memoized exec of a variant is its own device-launch instantiation.
    pub device_launch: bool,
}

impl InstantiateFlags {
    /// Whether the driver refuses these flags for every graph (`device_launch` with
    /// `auto_free_on_launch`): the crate refuses each instantiation itself
    /// ([`Error::InstantiateFlags`]).
    pub(crate) fn refused(self) -> bool {
        self.device_launch && self.auto_free_on_launch
    }

    /// The `CUgraphInstantiate_flags` bits.
    pub(crate) fn bits(self) -> u64 {
        use sys::CUgraphInstantiate_flags as F;
        let mut b = 0;
        if self.auto_free_on_launch {
            b |= F::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64;
        }
        if self.upload {
            b |= F::CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD.0 as u64;
        }
        if self.node_priority {
            b |= F::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0 as u64;
        }
        if self.device_launch {
            b |= F::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64;
        }
        b
    }
}

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
    /// Recordings of `capture` statements (stream capture of their closures): one per
    /// statement without a key per graph call; for a keyed statement, one per call whose
    /// operands and key no kept recording has (see [`GraphCache::set_recordings_per_capture`]).
    pub captures: u64,
    /// Calls of keyed `capture` statements that took a kept recording instead of recording
    /// (see [`GraphCache::set_recordings_per_capture`]).
    pub capture_reuses: u64,
    /// Memory allocation nodes in the recordings of [`Stats::captures`]: what closures (the
    /// libraries they call) allocated while captured. Each is graph memory that exists only
    /// inside each launch of its recording, freed there by the closure's drop or at the end of
    /// the recording (see `docs/capture.md`, "Libraries that allocate";
    /// [`GraphCache::graph_owned_bytes`] sums their sizes).
    pub capture_allocations: u64,
    /// Programmatic edges (from a kernel node into a `#[programmatic]` kernel's node, see
    /// [`EdgeKind`]) in the graphs built for new variants.
    pub programmatic_edges: u64,
    /// Edges that would have been programmatic but were added plain, in the graphs built for
    /// new variants, because the device (compute capability before 9.0) or the driver (before
    /// CUDA 12.3) has no programmatic dependent launch, or, for edges inside the body of a
    /// `device_while`/`device_if`/`device_switch`, the driver is older than CUDA 13.0 (the
    /// driver they were measured with). Not an error: the graph computes the
    /// same, with plain edges' launch cost. (Edges made plain by
    /// [`GraphCache::set_programmatic`]`(false)`, or because a plain edge joins their kernel,
    /// see [`EdgeKind`], are not counted.)
    pub programmatic_fallbacks: u64,
    /// Pairs of contexts (devices) whose peer access the cache enabled, both ways
    /// (`cuCtxEnablePeerAccess`), for copies between them: once per pair and cache.
    pub peer_enables: u64,
    /// Hits whose nodes are all kernel nodes (the crate's fill and readback nodes included),
    /// memset nodes, memcpy nodes (1-D, 2-D) or keyed `capture`
    /// statements with exactly the parameters of the variant's last call (a kernel's function,
    /// context, launch dimensions, argument bytes, buffer contexts, device scalar lengths; a
    /// memset's address, length, element size, value and context; a copy's addresses, lengths,
    /// element size, contexts and pinned host allocation (its driver id); a captured
    /// statement's recording; the places
    /// their buffer handles name): such a call launches with no per-node validation or
    /// comparison (its nodes count in [`Stats::nodes_unchanged`] too).
    pub unchanged_calls: u64,
    /// Calls whose parameters equal the last call of another exec of the same variant (kept
    /// for an earlier set of pointers and scalars, e.g. the other half of ping-pong buffers):
    /// that exec was launched with nothing sent (counted in [`Stats::unchanged_calls`] and
    /// [`Stats::hits`] too). See [`GraphCache::set_execs_per_variant`].
    pub memo_hits: u64,
    /// Execs built for a variant that had one already, for a new set of parameters, instead
    /// of updating the existing one (counted in [`Stats::builds`] too).
    pub memo_builds: u64,
    /// Calls run in [`Mode::Instantiate`]: the exec brought up to date as for a launch, then
    /// uploaded (`cuGraphUpload`) instead of launched (not counted in [`Stats::launches`]).
    pub uploads: u64,
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
    /// Build or update and instantiate the call's exec, then upload it instead of launching
    /// it: a call validates and checks exactly as in [`Mode::Graph`], builds the variant's
    /// graph (`cuGraphCreate`, `cuGraphAddNode_v2`) and instantiates it
    /// (`cuGraphInstantiateWithFlags`, or `cuGraphInstantiateWithParams` with
    /// [`InstantiateFlags`]), or brings a cached exec up to date (`cuGraphExec*NodeSetParams`,
    /// `cuGraphExecUpdate`, re-instantiation), and then calls `cuGraphUpload` on the call's
    /// stream: no `cuGraphLaunch`. Counted in [`Stats::uploads`], not in [`Stats::launches`].
    ///
    /// For a program that wants a step's graph before it runs it: to print its nodes
    /// ([`GraphCache::nodes`], [`GraphCache::graph_info`] then describe the uploaded variant),
    /// or to pay for building, instantiating and uploading before the first timed step. The
    /// next [`Mode::Graph`] call with the same parameters finds the exec up to date and only
    /// launches it (nothing to build or send).
    ///
    /// Nothing runs on the device: host nodes' closures are not run (nor handed to the
    /// worker; each call's closure is dropped with the call), the buffers' own streams are not
    /// ordered with the call's stream (the stream ledger's `cuEventRecord`/`cuStreamWaitEvent`
    /// pairs: no buffer is used, [`Stats::stream_waits`] does not grow), and `capture`
    /// statements are recorded (stream capture, no work run) as in [`Mode::Graph`]. The
    /// call's borrows still record cudarc's buffer events on the stream, after the upload, so
    /// later users of those buffers wait for the upload only. In [`eager!`](crate::eager) the
    /// mode is always [`Mode::Eager`]; a [`GraphBuilder`](crate::GraphBuilder)'s `launch` on a
    /// cache in this mode uploads too.
    Instantiate,
}

/// Owns the instantiated graphs of one `graph!` call site, one per structural variant (each
/// combination of taken host `if` branches), and updates them in place between calls.
///
/// Use one cache per call site: a call at another site than the cache's last one first drops
/// every variant (two sites' graphs have nothing in common), so a cache alternated between two
/// sites builds and instantiates on every call. The first call of a variant builds a `CUgraph`
/// with explicit `cuGraphAdd*Node` calls and instantiates it; later calls compare every node's
/// parameters with the last ones and send only the changed nodes
/// (`cuGraphExec*NodeSetParams`), then `cuGraphLaunch`. At most [`GraphCache::DEFAULT_MAX_VARIANTS`] variants are kept (least
/// recently used evicted; the driver frees an evicted exec only after its launches complete).
///
/// Thread safety: CUDA graph objects are not internally synchronized; a `GraphCache` is `Send`
/// (it can move to another thread) but not `Sync`, and every use takes `&mut self`.
pub struct GraphCache<D: Driver = Cuda> {
    driver: D,
    mode: Mode,
    /// [`GraphCache::set_programmatic`].
    programmatic: bool,
    /// How variants are instantiated ([`GraphCache::set_instantiate_flags`]).
    flags: InstantiateFlags,
    /// The stream of the call being run (the upload stream of [`InstantiateFlags::upload`]).
    stream: CUstream,
    last_refusal: Option<Error>,
    limits: Option<Limits>,
    site: Option<Site>,
    /// `Error::Graph` of the last call site, for `upload`.
    location: (&'static str, u32),
    variants: Vec<Variant>,
    max_variants: usize,
    /// Execs kept per variant, one per set of kernel parameters ([`Self::set_execs_per_variant`]).
    execs_per_variant: usize,
    clock: u64,
    stats: Stats,
    /// The last [`GraphBuilder`](crate::GraphBuilder)'s emptied vectors, reused by the next.
    pub(crate) recording: recording::Recording,
    /// Buffer ranges `(place, start, bytes, written)` of the last two calls whose aliasing was
    /// checked (two: buffers swapped between calls alternate between two sets), the older first.
    /// The place is part of the key: the check's outcome depends on which ranges are one place's.
    checked: [Vec<(usize, u64, u64, bool)>; 2],
    /// The same two checks by the words of their calls before the first node (every place's
    /// guard, in the order the body acquired them: a `graph!` call whose words were
    /// `guarded`), with the plan's address: a changed call whose words up to there equal one of
    /// these passes without making its guards ([`Self::checked_by_words`]).
    checked_words: [(usize, Vec<u64>); 2],
    /// Scratch of the aliasing check and of the ledger, kept so that calls allocate nothing.
    scratch: Vec<(u64, u64, bool, usize)>,
    /// The stream ledger of the calls' launches.
    ledger: crate::ledger::Ledger,
    /// Panics of host nodes' closures run by this cache's launches, returned by the next call.
    reports: Arc<Reports>,
    /// The pairs of contexts whose peer access this cache enabled for its peer copies.
    peers: validate::Peers,
    /// The call being run's nodes as [`NodeParams::pack`] words, and whether every node packed
    /// (only then is it compared with, and kept as, a variant's [`Variant::pack`]).
    packed: Vec<u64>,
    packed_ok: bool,
    /// [`CallWords::items`] of `packed` when it holds a `graph!` call's words; else empty.
    packed_items: Vec<WordItem>,
    /// Where each node's words are in `packed` when [`Self::unchanged`] packed the whole node
    /// list (a builder's call, with `packed_ok`); else empty. [`Self::clean_or_make`] copies
    /// the kernels' words from there instead of packing every node a second time.
    packed_spans: Vec<(u32, u32)>,
    /// [`clean_by_items`]'s scratch: which items equal the exec's.
    item_equal: Vec<bool>,
    /// Hashes of the words of the last few calls that changed parameters (with their variant
    /// key): a call whose words came before gets an exec of its own
    /// ([`Self::set_execs_per_variant`]); parameters that never repeat (a time step) do not.
    recent: [u64; 4],
    recent_next: usize,
    /// Whether this call's words are among [`Self::recent`] (set by [`Self::unchanged`]).
    packed_seen: bool,
    /// After a memo hit: the exec (index and serial) that followed the exec just launched the
    /// last time it ran ([`Variant::followed_by`]), whose words the next `graph!` call's are
    /// compared with in place ([`Self::words`]). Buffer sets taking turns in a fixed order
    /// (ping-pong, a cycle of a few) then find their exec without packing the call's words and
    /// searching for them.
    guess: Option<(usize, u64)>,
    /// The recordings kept for the keyed `capture` statements of call site `recordings_site`,
    /// by node index ([`Self::set_recordings_per_capture`]).
    recordings: Vec<Option<crate::kind::captured::Recordings>>,
    recordings_site: Option<&'static Plan>,
    recordings_per_capture: usize,
    /// The `graph!` plan last asked about by [`Self::may_capture`], and whether it has a
    /// `capture` statement.
    plan_captures: Option<(&'static Plan, bool)>,
    /// The nodes present in the call [`Self::unchanged`] last packed to the end.
    present_nodes: u64,
    /// The changed call being run's kernel nodes as words ([`Self::clean_nodes`]), for the
    /// variant it brings up to date to keep; `next_made`: made for this call.
    next_words: NodeWords,
    next_made: bool,
    /// Of the changed call being run: `clean[j]`, node `j`'s words equal those of node `j` of
    /// the exec of the variant whose serial is `clean_for` ([`Self::clean_nodes`]).
    clean: Vec<bool>,
    clean_for: Option<u64>,
    /// Of the changed call being run: the ranges of entries (first, count) its node list left
    /// unmade ([`Nodes::get_partial`]), each entry clean when the list is still partial after
    /// [`Self::clean_nodes`].
    deferred: Vec<(u32, u32)>,
    /// Of the changed call being run: the ranges of entries (first, count) that are not clean,
    /// in order ([`dirty_ranges`] of `clean`; empty with `clean`).
    dirty: Vec<(u32, u32)>,
    /// Tests: no node is ever clean ([`Self::clean_nodes`] off), to compare with; and how
    /// many clean nodes the calls had.
    #[cfg(test)]
    no_clean: bool,
    #[cfg(test)]
    clean_seen: u64,
    /// Tests: memo hits found by [`Self::guess`] (words compared in place).
    #[cfg(test)]
    guessed: u64,
    /// A number no other cache has: the [`CallWords`] it makes name it.
    id: u64,
}

// SAFETY: the raw driver handles inside (graphs, execs, the variants' launch events) are only
// used through `&mut self` (or `Drop`), so every driver call on them is serialized, which is all
// CUDA asks of graph objects; the driver accepts calls on them from any thread once the context
// is current, which `run` ensures.
// `recording` holds no pointer between calls (a builder empties it before handing it back).
unsafe impl<D: Driver + Send> Send for GraphCache<D> {}

struct Variant {
    /// Of the call's host `if` branches (one bit each); with `ctx`, `signature` and
    /// `programmatic`, which calls this exec can run ([`Variant::same_variant`]).
    key: u64,
    /// A builder variant's topology ([`crate::builder`]), compared in full; empty for `graph!`.
    signature: Box<[u32]>,
    ctx: CUcontext,
    /// Keeps `ctx` alive while the exec exists (`None` only under the test driver).
    _ctx_owner: Option<Arc<CudaContext>>,
    graph: CUgraph,
    exec: CUgraphExec,
    nodes: Vec<NodeState>,
    /// The nodes with work at launch ([`NodeState::launch_work`]), in node order.
    launch_work: Vec<u32>,
    /// The exec's conditional handles by slot (empty without device control flow).
    handles: Vec<u64>,
    /// Where its edges from kernel nodes into programmatic kernels were added programmatic.
    programmatic: ladder::Pdl,
    /// Its edges with the kinds they were added with (see [`ladder::Built::edges`]).
    edges: Vec<(u32, u32, EdgeKind)>,
    last_use: u64,
    hits: u64,
    /// A number no other variant has (its index changes as variants are removed): the
    /// [`CallWords`] compared with its words name it.
    serial: u64,
    /// The exec of the same variant (index and serial) a memo hit launched right after this
    /// one last time: the guess for the call after this exec's next launch
    /// ([`GraphCache::guess`]).
    followed_by: Option<(usize, u64)>,
    /// The [`NodeParams::pack`] words of the last call that brought the exec up to date, when
    /// every node of it packed; empty otherwise, and emptied before any change to the exec, so
    /// that a call equal to it needs nothing sent.
    pack: Vec<u64>,
    /// Where each node's words begin in `pack` when those are a `graph!` call's words made
    /// with its statements ([`CallWords::items`]); empty otherwise. Set and emptied with
    /// `pack` (whose length `items_of` is), and kept while `pack` is lent.
    items: Vec<WordItem>,
    /// The length of the `pack` that `items` describe.
    items_of: usize,
    /// The words of its exec's kernel nodes, node by node ([`GraphCache::clean_nodes`]): those
    /// of the call that last brought it up to date. Empty when unknown.
    node_words: NodeWords,
    /// Whether its graph has memory nodes (graph-owned buffers, recordings that allocate).
    memory: bool,
    /// For a graph with memory nodes: an event recorded after each launch (null until the
    /// first), waited for before the exec and its graph are destroyed. The driver frees an exec
    /// in flight once its launches complete, but a graph's allocations live at addresses the
    /// graph holds: destroyed under a running launch, they were lost to it (measured on the
    /// H200 under compute-sanitizer racecheck, whose slow kernels keep launches running: an
    /// evicted variant's launch read its scratch buffer as zeros).
    done: sys::CUevent,
}

impl Variant {
    /// Whether `other` runs the same calls (same key, context, edge kinds and builder
    /// signature): another exec of the same variant, kept for other parameters.
    fn same_variant(&self, other: &Variant) -> bool {
        self.key == other.key
            && self.ctx == other.ctx
            && self.programmatic == other.programmatic
            && same_signature(&self.signature, &other.signature)
    }

    /// Takes back the work handed at launch to the first `count` of its launch-work nodes (the
    /// launch did not happen): every node's work is taken back before any of it is dropped,
    /// since dropping it runs user code, which may panic.
    fn take_back(&mut self, count: usize) {
        let taken: Vec<_> = self.launch_work[..count]
            .iter()
            .map(|&m| self.nodes[m as usize].unlaunched())
            .collect();
        drop(taken);
    }
}

/// A call's kernel nodes as [`NodeParams::pack`] words, node by node: node `j`'s are
/// `words[spans[j].0..spans[j].1]`, or it is not kept ([`NOT_KEPT`]: any other kind of node, a
/// kernel node that does not pack, an absent one).
#[derive(Default)]
struct NodeWords {
    words: Vec<u64>,
    spans: Vec<(u32, u32)>,
}

/// [`NodeWords::spans`] of a node not kept.
const NOT_KEPT: (u32, u32) = (0, u32::MAX);

/// The fewest nodes of a call for which [`GraphCache::clean_nodes`] keeps words: below, a
/// changed call walks every node as before (on the stub driver, a one-kernel changed call took
/// 0.237 µs with the words and 0.201 µs without; `host_cost --only chain1-scalar`).
const CLEAN_MIN_NODES: usize = 8;

impl NodeWords {
    fn clear(&mut self) {
        self.words.clear();
        self.spans.clear();
    }

    /// Node `j`'s words, if kept.
    fn of(&self, j: usize) -> Option<&[u64]> {
        let &(s, e) = self.spans.get(j)?;
        if (s, e) == NOT_KEPT {
            return None;
        }
        self.words.get(s as usize..e as usize)
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

/// A call's node list: made, or made from its statements' segments when first needed
/// ([`GraphCache::run_words_in`]), possibly in two steps: a changed call first makes all but
/// the deferrable segments' entries ([`Nodes::get_partial`], `None` until made), whose nodes
/// a changed call whose words show them clean never needs (`clean_by_items`).
pub(crate) enum Nodes<'n, 'a> {
    Ready(&'n [Option<NodeParams<'a>>]),
    /// Not made yet: the list's storage, uninitialized, and what makes it.
    Lazy(
        &'n mut [core::mem::MaybeUninit<Option<NodeParams<'a>>>],
        &'n [&'n dyn crate::kind::list::Segment<'a>],
    ),
    /// Made but for the entries of the segments still deferrable, which are `None`.
    Partial(&'n mut [Option<NodeParams<'a>>], &'n [&'n dyn crate::kind::list::Segment<'a>]),
}

impl<'n, 'a> Nodes<'n, 'a> {
    /// Statements in the list.
    fn len(&self) -> usize {
        match self {
            Nodes::Ready(n) => n.len(),
            Nodes::Lazy(n, _) => n.len(),
            Nodes::Partial(n, _) => n.len(),
        }
    }

    /// The list's storage with every entry `None`.
    fn init(
        list: &'n mut [core::mem::MaybeUninit<Option<NodeParams<'a>>>],
    ) -> &'n mut [Option<NodeParams<'a>>] {
        // Every entry `None` first, so that the list is initialized whatever the segments
        // write (`NodeParams` is `Copy`: nothing to drop, before or after).
        const _: () = assert!(!core::mem::needs_drop::<Option<NodeParams<'static>>>());
        for e in list.iter_mut() {
            e.write(None);
        }
        // SAFETY: every element was just initialized; `MaybeUninit<T>` has `T`'s layout.
        unsafe { &mut *(core::ptr::from_mut(list) as *mut [Option<NodeParams<'a>>]) }
    }

    /// The list, made now (all of it) if it was not yet.
    fn get(&mut self) -> &[Option<NodeParams<'a>>] {
        match core::mem::replace(self, Nodes::Ready(&[])) {
            Nodes::Lazy(list, segments) => {
                let list = Self::init(list);
                crate::kind::list::fill_entries(list, segments);
                *self = Nodes::Ready(list);
            }
            Nodes::Partial(list, segments) => {
                crate::kind::list::fill_deferred(list, segments);
                *self = Nodes::Ready(list);
            }
            ready => *self = ready,
        }
        self.list()
    }

    /// The list made but for the deferrable segments' entries (`None`), whose ranges
    /// (first entry, count) go into `deferred` (emptied first; none for a list made before).
    fn get_partial(&mut self, deferred: &mut Vec<(u32, u32)>) -> &[Option<NodeParams<'a>>] {
        deferred.clear();
        if let Nodes::Lazy(..) = self {
            let Nodes::Lazy(list, segments) = core::mem::replace(self, Nodes::Ready(&[])) else {
                unreachable!()
            };
            let list = Self::init(list);
            crate::kind::list::fill_partial(list, segments, deferred);
            *self = if deferred.is_empty() {
                Nodes::Ready(list)
            } else {
                Nodes::Partial(list, segments)
            };
        }
        self.list()
    }

    /// The list as it is now: made ([`Self::get`]), partly made ([`Self::get_partial`]: the
    /// deferred entries `None`), or not made (empty).
    fn list(&self) -> &[Option<NodeParams<'a>>] {
        match self {
            Nodes::Ready(n) => n,
            Nodes::Partial(n, _) => n,
            Nodes::Lazy(..) => &[],
        }
    }

    /// Whether entries are left unmade ([`Self::get_partial`]).
    fn partial(&self) -> bool {
        matches!(self, Nodes::Partial(..))
    }
}

/// A call's [`CallWords`] after [`GraphCache::take_back`]: what the unchanged-call check needs.
pub(crate) struct Words {
    /// The variant they were compared with, given back its words.
    from: Option<usize>,
    plan: &'static Plan,
    call: u64,
    out: Vec<u64>,
    pos: usize,
    diverged: bool,
    ok: bool,
    present: u64,
    /// See [`CallWords`]'s fields of these names.
    guarded: bool,
    foreign: bool,
    guards_same: bool,
    items: Vec<WordItem>,
}

impl Words {
    /// Whether they are the words of `call`: of its plan and its call id (`handles`), whose
    /// handles they packed by place.
    fn of(&self, call: &GraphCall<'_>, handles: Option<(&Plan, u64)>) -> bool {
        matches!(call.site, Site::Plan(p) if ptr::eq(p, self.plan))
            && handles.is_some_and(|(p, h)| ptr::eq(p, self.plan) && h == self.call)
    }
}

/// The ranges (first, count) of `clean`'s `false` entries, in order, into `dirty` (emptied
/// first): the nodes a changed call validates and compares, found in one pass so that those
/// walks skip the clean ones by range, not one by one.
fn dirty_ranges(clean: &[bool], dirty: &mut Vec<(u32, u32)>) {
    dirty.clear();
    let mut j = 0;
    while j < clean.len() {
        let Some(a) = clean[j..].iter().position(|&c| !c) else { break };
        let from = j + a;
        let n = clean[from..].iter().position(|&c| c).unwrap_or(clean.len() - from);
        dirty.push((from as u32, n as u32));
        j = from + n;
    }
}

/// The ranges of entries a changed call's walks visit ([`validate_changed`], the ladder's):
/// the `dirty` ones ([`dirty_ranges`]) where `clean` flags all `len` entries, else all of them.
pub(super) fn walked_ranges<'d>(
    len: usize,
    clean: &[bool],
    dirty: &'d [(u32, u32)],
) -> impl Iterator<Item = core::ops::Range<usize>> + 'd {
    let by_ranges = clean.len() == len;
    let whole = (!by_ranges).then_some(0..len);
    let dirty = if by_ranges { dirty } else { &[] };
    whole.into_iter().chain(dirty.iter().map(|&(a, k)| a as usize..(a + k) as usize))
}

/// Which of a changed `graph!` call's nodes equal the exec's it updates, from the call's words
/// and the words of the call that last brought the exec up to date, both made with their
/// statements ([`CallWords`]), and where each item's words begin in them ([`WordItem`]):
/// into `clean`, one entry per node-list entry, `true` for a kernel node whose words are equal.
/// A node's words hold its parameters (each buffer handle as its place number, address and
/// context: what [`GraphCache::clean_nodes`] packs for it); a run's later nodes are decided by
/// its own words (its tag and the handles of its operands that name no array element), its
/// first iteration's nodes (the `template` items before it) and its array elements' words
/// among those before the first node item (which hold every place's address range): the
/// spans that `acquire_mut_each` marked ([`WordItem`], items of no nodes, first), compared
/// alone where both calls have the same spans, else all of those words. So a place outside
/// the arrays that changed (a pinned destination swapped beside a fan over a `BufferArray`)
/// leaves the runs clean, and an element that changed does not. A clean node's
/// parameters, and everything validation reads of it, are those the exec already has: the
/// argument of an unchanged call ([`GraphCache::unchanged`]), node by node. `false` (and
/// `clean` empty) when the words do not line up with `nodes` item for item: the caller then
/// packs the nodes. The ranges `deferred` (first entry, count; in order) of `nodes` are not
/// made (`None`): present kernel nodes of runs' later iterations
/// ([`Segment::deferrable`](crate::kind::list::Segment::deferrable)), which must line up with
/// run items.
fn clean_by_items(
    (words, items): (&[u64], &[WordItem]),
    (old, old_items): (&[u64], &[WordItem]),
    (nodes, deferred): (&[Option<NodeParams<'_>>], &[(u32, u32)]),
    (equal, clean): (&mut Vec<bool>, &mut Vec<bool>),
) -> bool {
    clean.clear();
    equal.clear();
    if items.len() != old_items.len() {
        return false;
    }
    // The arrays' spans first (items of no nodes), then the node items.
    let arrays = items.iter().take_while(|i| i.nodes == 0).count();
    let ((spans, items), (old_spans, old_items)) =
        (items.split_at(arrays), old_items.split_at(arrays));
    let (Some(first), Some(old_first)) = (items.first(), old_items.first()) else {
        return false;
    };
    // What a run's later nodes depend on of the words before the first node (its elements'
    // guards and contexts): the arrays' spans, where the two calls have the same ones within
    // those words, else all of those words (every place's). (No span: no array acquired in one
    // loop marked its words, so all of them count.)
    fn span_words<'w>(w: &'w [u64], s: &WordItem, end: usize) -> Option<&'w [u64]> {
        let to = s.start.checked_add(s.template as usize).filter(|&t| t <= end);
        to.filter(|_| s.template != crate::kind::kernel::UNKNOWN_SPAN)
            .and_then(|t| w.get(s.start..t))
    }
    let end = first.start;
    let by_spans = || {
        let mut eq = true;
        for s in spans {
            eq &= span_words(words, s, end)? == span_words(old, s, end)?;
        }
        Some(eq)
    };
    let same_spans = !spans.is_empty() && spans == old_spans && end == old_first.start;
    let places_equal = same_spans
        .then(by_spans)
        .flatten()
        .unwrap_or_else(|| words.get(..end) == old.get(..old_first.start));
    /// Item `i`'s words.
    fn span<'w>(w: &'w [u64], its: &[WordItem], i: usize) -> Option<&'w [u64]> {
        let end = its.get(i + 1).map_or(w.len(), |n| n.start);
        w.get(its[i].start..end)
    }
    for (i, (a, b)) in items.iter().zip(old_items).enumerate() {
        let (x, y) = (span(words, items, i), span(old, old_items, i));
        // (A span among the nodes is not what `acquire_mut_each` makes.)
        if x.is_none() || y.is_none() || a.nodes == 0 || b.nodes == 0 {
            return false;
        }
        equal.push(a.nodes == b.nodes && a.template == b.template && x == y);
    }
    // A run's nodes (`template` at least 1) also depend on its first iteration's (at most
    // `template` items before it; all of them when there are fewer), whose own entries are
    // final by then, and on its elements' address ranges.
    for i in 0..items.len() {
        let t = items[i].template as usize;
        if t > 0 {
            let from = i.saturating_sub(t);
            let first_equal = equal[from..i].iter().all(|&e| e);
            equal[i] &= first_equal && places_equal;
        }
    }
    // The items stand for the present node-list entries, in order.
    let lined_up = clean_by_entries(words, items, equal, (nodes, deferred), clean);
    if lined_up.is_none() {
        clean.clear();
    }
    lined_up.is_some()
}

/// Where [`clean_by_entries`] stands in a call's node items: the current item's entries not
/// walked yet, whether it is equal, where its words begin, and the next item.
struct ItemCursor<'i> {
    items: &'i [WordItem],
    equal: &'i [bool],
    next: usize,
    left: u64,
    eq: bool,
    start: usize,
}

impl ItemCursor<'_> {
    /// Moves on to the next item while the current one has no entry left; `None` past the
    /// last item.
    fn ready(&mut self) -> Option<()> {
        while self.left == 0 {
            let item = self.items.get(self.next)?;
            (self.left, self.eq, self.start) = (item.nodes, self.equal[self.next], item.start);
            self.next += 1;
        }
        Some(())
    }
}

/// The walk of [`clean_by_items`] over the node-list entries (the unmade ranges `deferred`
/// taken as a whole), pushing each entry's flag into `clean`; `None` where the items do not
/// line up with the entries.
fn clean_by_entries(
    words: &[u64],
    items: &[WordItem],
    equal: &[bool],
    (nodes, deferred): (&[Option<NodeParams<'_>>], &[(u32, u32)]),
    clean: &mut Vec<bool>,
) -> Option<()> {
    let mut at = ItemCursor { items, equal, next: 0, left: 0, eq: false, start: 0 };
    let mut deferred = deferred.iter().peekable();
    let mut j = 0;
    while j < nodes.len() {
        // A range left unmade: kernel nodes of runs' later iterations, taken as a whole (the
        // items they line up with must be runs').
        if let Some(&&(first, count)) = deferred.peek()
            && first as usize == j
        {
            deferred.next();
            let mut m = u64::from(count);
            while m > 0 {
                at.ready()?;
                if words.get(at.start).copied() != Some(crate::kind::kernel::RUN_TAG) {
                    return None;
                }
                let k = m.min(at.left);
                clean.extend(core::iter::repeat_n(at.eq, k as usize));
                (at.left, m) = (at.left - k, m - k);
            }
            j += count as usize;
            continue;
        }
        let n = &nodes[j];
        j += 1;
        let Some(n) = n else {
            clean.push(false);
            continue;
        };
        at.ready()?;
        // A node item of a kernel begins with its kernel word and its function: a node list
        // that the items did not follow would show here (a run's begins with its tag).
        let kernel = match n {
            NodeParams::Kernel(k) => {
                let word = |i: usize| words.get(at.start + i).copied();
                let run = word(0) == Some(crate::kind::kernel::RUN_TAG);
                if !run && word(1) != Some(k.function() as u64) {
                    return None;
                }
                true
            }
            _ => false,
        };
        at.left -= 1;
        clean.push(at.eq && kernel);
    }
    (at.next == items.len() && at.left == 0 && deferred.next().is_none()).then_some(())
}

impl Default for GraphCache {
    fn default() -> Self {
        Self::new()
    }
}

impl GraphCache {
    /// Variants kept by [`GraphCache::new`].
    pub const DEFAULT_MAX_VARIANTS: usize = 8;
    /// Execs kept per variant by default ([`GraphCache::set_execs_per_variant`]).
    pub const DEFAULT_EXECS_PER_VARIANT: usize = 3;
    /// Recordings kept per keyed `capture` statement by default
    /// ([`GraphCache::set_recordings_per_capture`]).
    pub const DEFAULT_RECORDINGS_PER_CAPTURE: usize = 4;

    /// An empty cache keeping at most [`Self::DEFAULT_MAX_VARIANTS`] variants. Touches no driver.
    pub fn new() -> Self {
        Self::with_max_variants(Self::DEFAULT_MAX_VARIANTS)
    }

    /// An empty cache in [`Mode::Eager`], as [`eager!`](crate::eager) makes for each call.
    /// Touches no driver.
    pub fn eager() -> Self {
        let mut c = Self::with_max_variants(1);
        c.mode = Mode::Eager;
        c
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
        call_id: &crate::operand::CallId,
        key: u64,
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
        guards: &[Guard<'_>],
    ) -> Result<()> {
        self.run_plan(plan, call_id, key, stream, Nodes::Ready(nodes), &mut { guards }, None)
    }

    /// [`Self::run`] with the call's words made as its statements were evaluated
    /// ([`Self::words`], then [`word_node`](crate::__private::word_node) of each node): the
    /// unchanged-call check compares those instead of packing `nodes` again. Called by
    /// generated code for bodies without `capture` statements or run-time loops.
    ///
    /// # Safety
    /// As [`Self::run`]; and `words` was made by this cache's `words(plan, call_id)`, then
    /// given each node present in `nodes`, once, in an order that only `key` decides (the
    /// order the body's statements made them), and nothing else.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_words(
        &mut self,
        plan: &'static Plan,
        call_id: &crate::operand::CallId,
        key: u64,
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
        guards: &[Guard<'_>],
        words: CallWords,
    ) -> Result<()> {
        // The variant's words go back first, whatever happens next.
        let words = self.take_back(words);
        let mut guards = guards;
        self.run_plan(plan, call_id, key, stream, Nodes::Ready(nodes), &mut guards, Some(words))
    }

    /// [`Self::run_words`] with the node list made only when the call needs it: `nodes`
    /// (uninitialized storage of one entry per statement) is set to `None` and filled from
    /// `segments` ([`entries`](crate::__private::entries)) unless the words find the call
    /// unchanged and no node hands work out at launch (host statements). An unchanged call of
    /// a kernel-only body then never touches its node list. Called by generated code.
    ///
    /// # Safety
    /// As [`Self::run_words`], for the node list `segments` make; `guards.made()` returns the
    /// places' guards, `guards.places()` of them, in place order.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_words_in<'a>(
        &mut self,
        plan: &'static Plan,
        call_id: &crate::operand::CallId,
        key: u64,
        stream: &CudaStream,
        nodes: &mut [core::mem::MaybeUninit<Option<NodeParams<'a>>>],
        segments: &[&dyn crate::kind::list::Segment<'a>],
        guards: &mut dyn crate::operand::GuardList<'_>,
        words: CallWords,
    ) -> Result<()> {
        let words = self.take_back(words);
        let nodes = Nodes::Lazy(nodes, segments);
        self.run_plan(plan, call_id, key, stream, nodes, guards, Some(words))
    }

    /// [`Self::run`] and [`Self::run_words`]: a node list and guards of another plan are
    /// refused (the words' buffer kept for the next call), else the call is run.
    #[allow(clippy::too_many_arguments)]
    fn run_plan(
        &mut self,
        plan: &'static Plan,
        call_id: &crate::operand::CallId,
        key: u64,
        stream: &CudaStream,
        nodes: Nodes<'_, '_>,
        guards: &mut dyn crate::operand::GuardList<'_>,
        words: Option<Words>,
    ) -> Result<()> {
        if nodes.len() != plan.nodes.len() || guards.places() != plan.places.len() {
            if let Some(w) = words {
                self.packed = w.out;
            }
            let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
            let source = CudaError { call: "GraphCache::run (node list of another plan)", error };
            return Err(plan.graph_error(source));
        }
        let call = GraphCall { shape: plan, site: Site::Plan(plan), key, signature: &[] };
        self.run_call(call, stream, nodes, guards, Some(call_id.0), words)
    }

    /// Binds the stream's context, reads the device's launch limits once per context,
    /// validates the call and checks its buffers for aliasing, then runs it eagerly
    /// ([`Mode::Eager`]) or as a graph, ordered with its buffers' own streams. A sticky driver
    /// error (a kernel faulted earlier in the context) is [`Error::ContextFault`] at the call.
    pub(crate) fn run_call(
        &mut self,
        call: GraphCall<'_>,
        stream: &CudaStream,
        nodes: Nodes<'_, '_>,
        guards: &mut dyn crate::operand::GuardList<'_>,
        call_id: Option<u64>,
        words: Option<Words>,
    ) -> Result<()> {
        let location = call.shape.location();
        // Host functions recorded by this call's captures report their panics to this cache.
        let reports = Arc::as_ptr(&self.reports);
        // SAFETY: `self.reports` is never replaced (only made in the constructor), so the cache
        // holds that `Arc` for the whole call.
        unsafe {
            crate::kind::host::with_call_reports(reports, || {
                self.run_checked(call, stream, nodes, guards, call_id, words)
            })
        }
        .map_err(|e| e.or_context_fault(location))
    }

    fn run_checked(
        &mut self,
        call: GraphCall<'_>,
        stream: &CudaStream,
        mut nodes: Nodes<'_, '_>,
        guards: &mut dyn crate::operand::GuardList<'_>,
        call_id: Option<u64>,
        words: Option<Words>,
    ) -> Result<()> {
        let graph_err = |source| call.shape.graph_error(source);
        if let Some(panicked) = self.reports.take() {
            return Err(panicked);
        }
        let mut clock = phases::Clock::start();
        stream.context().bind_to_thread().call("cuCtxSetCurrent").map_err(graph_err)?;
        let ctx = stream.context().cu_ctx();
        if self.limits.is_none_or(|l| l.ctx != ctx) {
            self.limits = Some(Limits::of(stream).map_err(graph_err)?);
        }
        clock.lap(phases::BIND);
        let handles = match (call.site, call_id) {
            // `handles` checks against the plan's node `shape.plan_index(i)`.
            (Site::Plan(plan), Some(id)) => Some((plan, id)),
            _ => None,
        };
        // A call equal to its variant's last one passes everything `validate` checked then: its
        // words hold the places its buffer handles name in this call, so equal words mean
        // handles that `check_handles` accepts too.
        // Only a `capture` statement keeps recordings or may do unlisted work: a `graph!` plan
        // without one skips both walks of the node list (a builder's call always walks them).
        let captures = self.may_capture(call.site);
        if self.mode != Mode::Eager && captures {
            self.reuse_recordings(call.site, nodes.get());
        }
        // Words with every place's guard (`Guards::with_words`): of an unchanged call, they
        // equal the words of an earlier call that passed the aliasing check with the same
        // address ranges; with no buffer on another stream the ledger has nothing to order.
        let (guarded, foreign) = words.as_ref().map_or((false, true), |w| (w.guarded, w.foreign));
        // `guards_same`: a changed call whose buffers all have the address ranges of the
        // variant's last call (it changed scalars, or which nodes use them): that call's
        // aliasing check holds.
        let (same, guards_same) = match words {
            Some(w) => self.unchanged_words(&call, ctx, w, handles),
            None => (self.unchanged(&call, ctx, nodes.get(), handles)?, false),
        };
        // An unchanged call needs its node list only for work handed out at launch (host
        // statements) and for kept recordings; an eager call always.
        let needed = match same {
            Some(i) => captures || !self.variants[i].launch_work.is_empty(),
            None => true,
        };
        // A changed call in graph mode without captures makes the runs' later nodes only if
        // its words do not show them clean (`clean_nodes`, which makes them otherwise).
        if same.is_none() && !captures && self.mode != Mode::Eager {
            nodes.get_partial(&mut self.deferred);
        } else if needed {
            nodes.get();
        }
        if same.is_none() {
            self.validate_changed_call(&call, ctx, &mut nodes, handles)?;
        }
        let list = nodes.list();
        clock.lap(phases::VALIDATE);
        if !(guarded && (same.is_some() || guards_same)) {
            self.check_call_aliasing(&call, guarded, guards)?;
        }
        clock.lap(phases::ALIASING);
        self.enable_peers(call.shape)?;
        if self.mode == Mode::Eager
            && let Some(i) = list.iter().position(|n| n.is_some_and(|n| n.conditional().is_some()))
        {
            return Err(crate::kind::conditional::eager_refused(call.shape.site(i)));
        }
        if self.mode == Mode::Eager {
            // Eager work enqueued on a capturing stream would be recorded into a graph that
            // borrows nothing (a graph launch there is refused by the driver itself).
            // SAFETY: the stream is alive and its context current.
            let status = unsafe { raw::stream_capture_status(stream.cu_stream()) }
                .call("cuStreamIsCapturing")
                .map_err(graph_err)?;
            if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
                let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_ILLEGAL_STATE);
                let call = "GraphCache::run in Mode::Eager (the stream is capturing)";
                return Err(graph_err(CudaError { call, error }));
            }
        }
        // Only captured statements prepare anything (a plan without one has none).
        if self.mode != Mode::Eager && same.is_none() && captures {
            for (i, n) in list.iter().enumerate() {
                if let Some(n) = n
                    && n.prepare(&|| call.shape.site(i))?
                {
                    match n {
                        NodeParams::Captured(c) => self.new_recording(call.site, i, *c),
                        _ => self.stats.captures += 1,
                    }
                }
            }
        }
        clock.lap(phases::PREPARE);
        // Uploaded, not launched: no buffer is used, nothing to order with their streams.
        let ordered = self.mode != Mode::Instantiate;
        if ordered {
            let owns = if guarded && !foreign { &[][..] } else { guards.made() };
            self.order_before(stream, owns).map_err(graph_err)?;
        }
        let unlisted = captures && list.iter().flatten().any(|n| n.unlisted_work());
        clock.lap(phases::LEDGER);
        let site = call.site;
        let r = if self.mode == Mode::Eager {
            // A panic in a statement (a capture statement's closure) still orders the buffers'
            // own streams after what the call enqueued before it, then continues.
            let eager = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.run_eager(call.shape, stream, list)
            }));
            match eager {
                Ok(r) => r,
                Err(panic) => {
                    let _ = self.order_after(stream, unlisted);
                    std::panic::resume_unwind(panic)
                }
            }
        } else {
            let owner = Some(stream.context());
            self.run_validated(call, (ctx, owner), stream.cu_stream(), &mut nodes, same)
        };
        clock.lap(phases::LADDER_LAUNCH);
        // After an error part way through an eager call, its earlier nodes are enqueued.
        if ordered && (r.is_ok() || self.mode == Mode::Eager) {
            self.order_after(stream, unlisted).map_err(graph_err)?;
        }
        // Keyed statements recorded again while a graph was built (their kept recording's
        // graph, with memory nodes, had been moved into another graph): kept in its place.
        // (Only a cache that recorded has any.) After the ledger's step: keeping runs the
        // user's `CaptureKey` code (`Clone`, `same`, a dropped key's `Drop`), and a panic there
        // must not skip it (review 33).
        if self.mode != Mode::Eager && self.stats.captures > 0 {
            for (i, n) in nodes.list().iter().enumerate() {
                if let Some(NodeParams::Captured(c)) = n
                    && c.rerecorded()
                {
                    self.new_recording(site, i, *c);
                }
            }
        }
        clock.lap(phases::LEDGER);
        r
    }

    /// The eager oracle (see [`Mode::Eager`]), on a validated call: a driver error part way
    /// names the node and leaves the earlier statements enqueued, as eager launches do.
    fn run_eager(
        &mut self,
        shape: &dyn Shape,
        stream: &CudaStream,
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<()> {
        // Graph-owned buffers: `cuMemAllocAsync`'s addresses by place slot, bound for the
        // statements after each `alloc`; any that an error (or a panic) part way left unfreed
        // is freed on the stream after what was enqueued.
        let mut scratch = Vec::new();
        let r = crate::kind::alloc::with_scratch(&mut scratch, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for (i, n) in nodes.iter().enumerate() {
                    let Some(n) = n else { continue };
                    // SAFETY: parameters validated; pointers come from places the caller keeps
                    // borrowed until after this call, with guards recording these uses on
                    // `stream`, or from this call's allocations, freed after their last use.
                    unsafe { n.eager(stream, &self.reports, &|| shape.site(i)) }?;
                }
                Ok::<(), Error>(())
            }))
        });
        crate::kind::alloc::free_unfreed(&mut scratch, stream);
        let r = r.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        r?;
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
        let graph_err = |source| Error::Graph { file, line, source }.or_context_fault((file, line));
        stream.context().bind_to_thread().call("cuCtxSetCurrent").map_err(graph_err)?;
        // SAFETY: exec and stream are live and of the same context (checked when built).
        unsafe { self.driver.upload(v.exec, stream.cu_stream()) }
            .call("cuGraphUpload")
            .map_err(graph_err)
    }

    /// The edges `(from, to, kind)` of the most recently used variant's graph as the driver holds
    /// them (`cuGraphGetEdges_v2` on the top graph and on every body graph of its conditional
    /// nodes), by node index as in [`Self::edges`], sorted by `(to, from)`:
    /// [`EdgeKind::Programmatic`] for an edge of type `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`.
    /// For debugging and tests: it holds the edges of [`Self::edges`]. Empty on an empty cache.
    ///
    /// # Errors
    /// [`Error::Graph`] if the driver call fails, or names a node this cache did not add.
    pub fn driver_edges(&self) -> Result<Vec<(u32, u32, EdgeKind)>> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(Vec::new());
        };
        let (file, line) = self.location;
        let err = |call, error| Error::Graph { file, line, source: CudaError { call, error } };
        let mut edges = Vec::new();
        let bodies = v.nodes.iter().flat_map(|s| s.bodies().iter().copied());
        for g in core::iter::once(v.graph).chain(bodies) {
            // SAFETY: the graph and its conditional nodes' body graphs live while `self` does.
            let e = unsafe { raw::graph_edges(g) }.map_err(|e| err("cuGraphGetEdges_v2", e))?;
            edges.extend(e);
        }
        let index = |n| {
            let i = v.nodes.iter().position(|s| s.handle() == Some(n));
            let unknown = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_UNKNOWN);
            i.map(|i| i as u32).ok_or_else(|| err("cuGraphGetEdges_v2 (a node not added)", unknown))
        };
        let programmatic = sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8;
        let mut out = edges
            .into_iter()
            .map(|(a, b, d)| {
                let kind =
                    if d.type_ == programmatic { EdgeKind::Programmatic } else { EdgeKind::Plain };
                Ok((index(a)?, index(b)?, kind))
            })
            .collect::<Result<Vec<_>>>()?;
        out.sort_unstable_by_key(|&(a, b, _)| (b, a));
        Ok(out)
    }

    /// The nodes (kind and main parameters) and edges of the most recently used variant's
    /// graph, as the driver reports them (`cuGraphGetNodes`, `cuGraphGetEdges_v2`,
    /// `cuGraphNodeGetType`, `cuGraph*NodeGetParams`; see [`GraphInfo`]): for `graph!`, the
    /// variant the last call ran; for a [`GraphBuilder`](crate::GraphBuilder), its last launch.
    /// `None` on an empty cache. Parameters are those of the graph as built (or last rebuilt):
    /// per-node updates change the exec only.
    ///
    /// # Errors
    /// [`Error::Graph`] naming the cache's call site if a driver call fails.
    pub fn graph_info(&self) -> Result<Option<GraphInfo>> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(None);
        };
        let (file, line) = self.location;
        // SAFETY: the graph is live while `self` is.
        let (_, info) =
            unsafe { crate::introspect::describe(v.graph) }.map_err(|(call, error)| {
                Error::Graph { file, line, source: CudaError { call, error } }
            })?;
        Ok(Some(info))
    }

    /// The nodes of [`graph_info`](Self::graph_info) (empty on an empty cache).
    ///
    /// # Errors
    /// As [`graph_info`](Self::graph_info).
    pub fn nodes(&self) -> Result<Vec<GraphNode>> {
        Ok(self.graph_info()?.map(|i| i.nodes).unwrap_or_default())
    }

    /// A copy (`cuGraphClone`) of the most recently used variant's graph, for introspection
    /// and node lookup ([`ClonedGraph::find`], `cuGraphNodeFindInClone`); it borrows the cache,
    /// so the original stays alive. `None` on an empty cache.
    ///
    /// # Errors
    /// [`Error::Graph`] if the driver refuses: it does not clone a graph with memory (alloc or
    /// free) nodes (`CUDA_ERROR_NOT_SUPPORTED`, measured on the H200 with driver 580).
    pub fn clone_graph(&self) -> Result<Option<ClonedGraph<'_>>> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(None);
        };
        // SAFETY: the graph is live while `self` is borrowed by the clone.
        unsafe { ClonedGraph::of(v.graph, self.location) }.map(Some)
    }

    /// Writes the driver's own Graphviz DOT (`cuGraphDebugDotPrint`, verbose) of the most recently
    /// used variant to `path`. Returns `false` on an empty cache.
    pub fn debug_dot_print(&self, path: &Path) -> Result<bool> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(false);
        };
        let c = raw::dot_path(path).map_err(|call| {
            let error = cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
            CudaError { call, error }
        })?;
        // SAFETY: the graph is live while `self` is.
        unsafe { raw::debug_dot_print(v.graph, c.as_ptr()) }.call("cuGraphDebugDotPrint")?;
        Ok(true)
    }
}

impl<D: Driver> GraphCache<D> {
    /// How later calls run: [`Mode::Graph`] (default), the eager oracle [`Mode::Eager`], or
    /// [`Mode::Instantiate`] (built or updated, instantiated and uploaded, not launched).
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

    /// How many execs one variant (one combination of host `if` branches) may keep, each
    /// instantiated for its own set of kernel parameters, so that a step alternating between a
    /// few buffer sets (ping-pong buffers swapped with `std::mem::swap` every step) launches
    /// the exec already holding this call's pointers and sends nothing (counted in
    /// [`Stats::memo_hits`]). Default [`Self::DEFAULT_EXECS_PER_VARIANT`]; 1 turns it off.
    ///
    /// Only calls whose nodes are all kernel nodes (the crate's fill and readback nodes
    /// included), memset nodes, memcpy nodes (1-D, 2-D) and keyed
    /// `capture` statements with a kept recording are memoized (the calls that
    /// [`Stats::unchanged_calls`] can count). When such a call equals no kept exec's last call
    /// but equals one of the last four calls that changed parameters (a buffer set coming back),
    /// a new exec is built for it (`cuGraphInstantiate`, counted in [`Stats::memo_builds`])
    /// while the variant has fewer than `n` and the cache has room within its variant bound (an
    /// exec never evicts another for this); otherwise the least recently used of them is
    /// updated in place, as before. Parameters that never repeat (a time step) build nothing.
    /// Each exec remembers the exec a memo hit launched after it; a `graph!` call's words are
    /// compared first with that one's, so buffer sets taking turns in a fixed order find their
    /// exec with one comparison.
    /// Ping-pong buffers cost one update and one build in their first round, then nothing. Each exec holds its kernel nodes' device memory for parameters (a few hundred
    /// bytes per node) and counts against [`Self::with_max_variants`]'s bound.
    pub fn set_execs_per_variant(&mut self, n: usize) {
        self.execs_per_variant = n.max(1);
    }

    /// See [`Self::set_execs_per_variant`].
    pub fn execs_per_variant(&self) -> usize {
        self.execs_per_variant
    }

    /// How many recordings the cache keeps for each keyed `capture` statement
    /// (`capture(&a, &mut b, key = k, |s, k, (a, b)| …)`), least recently used dropped first.
    /// A call whose operands (address, length, context, written, element type) and key equal a kept
    /// recording's takes it (counted in [`Stats::capture_reuses`]) and records nothing; so
    /// buffers alternating between two sets record twice, then never. Default
    /// [`Self::DEFAULT_RECORDINGS_PER_CAPTURE`]; 0 records every call, as for a statement
    /// without a key. A recording is a `CUgraph` (host memory only: no device memory until an
    /// exec is instantiated from it, which holds its own copy), kept with its key's copy (an
    /// `Arc` in the key stays alive while the recording is kept). [`Self::clear`] and a call at
    /// another site drop them.
    pub fn set_recordings_per_capture(&mut self, n: usize) {
        self.recordings_per_capture = n;
        for r in self.recordings.iter_mut().flatten() {
            r.shrink(n);
        }
    }

    /// See [`Self::set_recordings_per_capture`].
    pub fn recordings_per_capture(&self) -> usize {
        self.recordings_per_capture
    }

    /// Recordings kept for the keyed `capture` statements of the last call site, in all.
    pub fn recordings_kept(&self) -> usize {
        self.recordings.iter().flatten().map(|r| r.len()).sum()
    }

    /// Whether a call of `site` may have a `capture` statement's node ([`NodeParams::Captured`],
    /// the only kind with kept recordings or unlisted work): for a `graph!` plan, whether it has
    /// a node of kind [`NodeKind::Captured`](crate::NodeKind::Captured) (device bodies and
    /// run-time loop bodies included: the plan lists their nodes), remembered for the last plan;
    /// `true` for a builder's call.
    fn may_capture(&mut self, site: Site) -> bool {
        let Site::Plan(plan) = site else { return true };
        if let Some((p, c)) = self.plan_captures
            && ptr::eq(p, plan)
        {
            return c;
        }
        let c = plan.nodes.iter().any(|n| n.kind == crate::NodeKind::Captured);
        self.plan_captures = Some((plan, c));
        c
    }

    /// Takes, for each keyed `capture` statement of a `graph!` call, the recording kept for its
    /// operands and key, if any (before the unchanged-call check, which compares recordings).
    fn reuse_recordings(&mut self, site: Site, nodes: &[Option<NodeParams<'_>>]) {
        let Site::Plan(plan) = site else { return };
        if !self.recordings_site.is_some_and(|p| ptr::eq(p, plan)) {
            self.recordings.clear();
            self.recordings_site = Some(plan);
        }
        for (i, n) in nodes.iter().enumerate() {
            let Some(NodeParams::Captured(c)) = n else { continue };
            if c.key().is_none() {
                continue;
            }
            if let Some(Some(r)) = self.recordings.get_mut(i)
                && let Some(g) = r.find(*c)
            {
                c.reuse(g);
                self.stats.capture_reuses += 1;
            }
        }
    }

    /// Counts a statement's new recording (node `i` of a `graph!` call) and its allocation
    /// nodes, and keeps it if the statement is keyed.
    fn new_recording(&mut self, site: Site, i: usize, c: &dyn CapturedWork) {
        self.stats.captures += 1;
        let allocations = c.recorded().map_or(0, |g| g.memory().allocations);
        self.stats.capture_allocations += u64::from(allocations);
        self.keep_recording(site, i, c);
    }

    /// Keeps a keyed statement's new recording (node `i` of a `graph!` call).
    fn keep_recording(&mut self, site: Site, i: usize, c: &dyn CapturedWork) {
        let Site::Plan(plan) = site else { return };
        if c.key().is_none() || !self.recordings_site.is_some_and(|p| ptr::eq(p, plan)) {
            return;
        }
        if self.recordings.len() <= i {
            self.recordings.resize_with(i + 1, || None);
        }
        let r = self.recordings[i].get_or_insert_with(crate::kind::captured::Recordings::new);
        r.keep(c, self.recordings_per_capture);
    }

    /// Whether edges from kernel nodes into `#[programmatic]` kernels' nodes are programmatic
    /// edges (`true`, the default) or plain ones (`false`: for comparisons, or to rule them out
    /// while debugging). Takes effect at the next call; variants built with the other setting
    /// are not reused (a new one is built, the old ones are evicted as usual). Where the device
    /// or driver has no programmatic dependent launch, edges are plain whatever this says (see
    /// [`Stats::programmatic_fallbacks`]). Eager launches ([`Mode::Eager`]) of programmatic
    /// kernels use programmatic stream serialization wherever the device supports it.
    pub fn set_programmatic(&mut self, programmatic: bool) {
        self.programmatic = programmatic;
    }

    /// See [`Self::set_programmatic`].
    pub fn programmatic(&self) -> bool {
        self.programmatic
    }

    /// Where the next graph built gets programmatic edges: asked for, and supported by the
    /// device of the last call's context (assumed so before its limits are read: only the mock
    /// driver of the tests builds without them); inside bodies, by its driver too.
    fn programmatic_edges(&self) -> ladder::Pdl {
        let top = self.programmatic && self.limits.is_none_or(|l| l.programmatic);
        ladder::Pdl { top, bodies: top && self.limits.is_none_or(|l| l.programmatic_bodies) }
    }

    /// The edges `(from, to, kind)` of the most recently used variant's graph (launched, or
    /// uploaded in [`Mode::Instantiate`]), as built:
    /// node indices of the `graph!` plan or the builder (present nodes only), ordered by `to`,
    /// with [`EdgeKind::Programmatic`] for each edge added programmatic (none
    /// after a fallback to plain edges). Empty on an empty cache. Draw them with the plan's
    /// nodes with [`Plan::to_dot_with`]`(&cache.edges())`.
    pub fn edges(&self) -> Vec<(u32, u32, EdgeKind)> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Vec::new();
        };
        v.edges.clone()
    }

    /// How later instantiations are made (new variants, re-instantiations): see
    /// [`InstantiateFlags`]. Variants already instantiated keep theirs ([`clear`](Self::clear)
    /// to re-instantiate them all).
    pub fn set_instantiate_flags(&mut self, flags: InstantiateFlags) {
        self.flags = flags;
    }

    /// The current [`InstantiateFlags`].
    pub fn instantiate_flags(&self) -> InstantiateFlags {
        self.flags
    }

    pub(crate) fn with_driver(driver: D, max: usize) -> Self {
        GraphCache {
            driver,
            mode: Mode::Graph,
            programmatic: true,
            flags: InstantiateFlags::default(),
            stream: ptr::null_mut(),
            last_refusal: None,
            limits: None,
            site: None,
            location: ("", 0),
            variants: Vec::new(),
            max_variants: max.max(1),
            execs_per_variant: GraphCache::DEFAULT_EXECS_PER_VARIANT,
            clock: 0,
            stats: Stats::default(),
            recording: recording::Recording::new(0),
            checked: [Vec::new(), Vec::new()],
            checked_words: [(0, Vec::new()), (0, Vec::new())],
            scratch: Vec::new(),
            ledger: crate::ledger::Ledger::default(),
            reports: Arc::default(),
            peers: validate::Peers::default(),
            packed: Vec::new(),
            packed_ok: false,
            packed_items: Vec::new(),
            packed_spans: Vec::new(),
            item_equal: Vec::new(),
            recent: [0; 4],
            recent_next: 0,
            packed_seen: false,
            guess: None,
            recordings: Vec::new(),
            recordings_site: None,
            plan_captures: None,
            present_nodes: 0,
            next_words: NodeWords::default(),
            next_made: false,
            clean: Vec::new(),
            deferred: Vec::new(),
            dirty: Vec::new(),
            clean_for: None,
            #[cfg(test)]
            no_clean: false,
            #[cfg(test)]
            clean_seen: 0,
            #[cfg(test)]
            guessed: 0,
            id: crate::operand::next_id(),
            recordings_per_capture: GraphCache::DEFAULT_RECORDINGS_PER_CAPTURE,
        }
    }

    /// Bytes of graph-owned buffers (`alloc` statements,
    /// [`GraphBuilder::alloc`](crate::GraphBuilder::alloc), and what `capture` statements'
    /// closures allocated while captured) allocated by each launch of the most
    /// recently used variant: the sum of its alloc nodes' sizes, memory that user-held buffers
    /// would occupy between calls too, and that graph allocations occupy only while a launch runs (see [`graph_mem_usage`](crate::graph_mem_usage) for
    /// what the device's graph memory pool holds). 0 on an empty cache.
    pub fn graph_owned_bytes(&self) -> usize {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return 0;
        };
        let scratch: usize = v.nodes.iter().filter_map(NodeState::scratch).map(|(_, _, b)| b).sum();
        let recorded: u64 = v.nodes.iter().map(NodeState::recorded_memory).sum();
        scratch + recorded as usize
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

    /// [`GraphCache::upload`]'s driver call, for the mock driver.
    #[cfg(test)]
    pub(crate) fn upload_raw(&mut self, stream: CUstream) -> Result<()> {
        let Some(v) = self.variants.iter().max_by_key(|v| v.last_use) else {
            return Ok(());
        };
        let (file, line) = self.location;
        // SAFETY: the mock driver's handles.
        unsafe { self.driver.upload(v.exec, stream) }
            .call("cuGraphUpload")
            .map_err(|source| Error::Graph { file, line, source })
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
        let same = self.unchanged(&call, ctx.0, nodes, None)?;
        let mut nodes = Nodes::Ready(nodes);
        if same.is_none() {
            self.validate_changed_call(&call, ctx.0, &mut nodes, None)?;
        }
        self.enable_peers(call.shape)?;
        self.run_validated(call, ctx, stream, &mut nodes, same)
    }

    /// The variant this call would use, when the call is equal to that variant's last call
    /// ([`Variant::pack`]: every node a kernel node with the same parameters, and for a
    /// `graph!` call (`handles`: its plan and call id) buffer handles of this call for the same
    /// places, which [`validate::check_handles`] then accepts as it did for the last call).
    /// Otherwise `None`, with the call's words in `packed` (when every node packs, in graph
    /// mode) for [`Self::run_validated`] to keep.
    fn unchanged(
        &mut self,
        call: &GraphCall<'_>,
        ctx: CUcontext,
        nodes: &[Option<NodeParams<'_>>],
        handles: Option<(&Plan, u64)>,
    ) -> Result<Option<usize>> {
        self.packed_ok = false;
        // Words packed from the node list: no items; each node's span, once all packed.
        self.packed_items.clear();
        self.packed_spans.clear();
        // Pairs a refused earlier call noted are not this call's: `validate` notes this call's
        // (an unchanged call has no copies).
        self.peers.pending.clear();
        if self.mode == Mode::Eager {
            return Ok(None);
        }
        let site = self.site.is_some_and(|s| s.same(call.site));
        let found = if site { self.find(call, ctx) } else { None };
        let last = found.map_or(&[][..], |i| &self.variants[i].pack[..]);
        let id = handles.map(|h| h.1);
        let mut pack = crate::kind::kernel::Compare::new(last, &mut self.packed, id);
        let spans = &mut self.packed_spans;
        let mut present = 0;
        for n in nodes {
            let start = pack.len() as u32;
            match n {
                None => {
                    pack.node(&|p: &mut crate::kind::kernel::Pack<'_>| {
                        p.push(0);
                        true
                    });
                }
                Some(n) => {
                    if !pack.node(&|p: &mut crate::kind::kernel::Pack<'_>| n.pack(p)) {
                        spans.clear();
                        return Ok(None);
                    }
                    present += 1;
                }
            }
            spans.push((start, pack.len() as u32));
        }
        let equal = pack.finish();
        Ok(self.settle(call, found, equal, present, nodes.is_empty()))
    }

    /// Validates a changed call ([`validate_changed`]): its nodes that are not clean
    /// ([`Self::clean_nodes`], which this makes first). Out of line: an unchanged call's path
    /// stays as it was.
    #[inline(never)]
    fn validate_changed_call(
        &mut self,
        call: &GraphCall<'_>,
        ctx: CUcontext,
        nodes: &mut Nodes<'_, '_>,
        handles: Option<(&Plan, u64)>,
    ) -> Result<()> {
        self.clean_nodes(call, ctx, nodes, handles.map(|h| h.1));
        let nodes = nodes.list();
        let clean = core::mem::take(&mut self.clean);
        let (limits, peers) = (self.limits.as_ref(), &mut self.peers);
        let dirty = &self.dirty;
        let r = validate_changed(call.shape, (nodes, &clean), dirty, ctx, limits, handles, peers);
        self.clean = clean;
        r
    }

    /// A changed call's kernel nodes as words, node by node ([`NodeParams::pack`], with a
    /// `graph!` call's buffer handles by place: `id` is its call id), into `next_words` for the
    /// variant the call brings up to date to keep; and which of them equal, word for word, the
    /// same node of the exec of its variant that the call would update (the least recently
    /// used of the variant's execs, [`Self::bring_up_to_date`]; `clean`, for that exec's serial
    /// in `clean_for`). A clean node passed `validate` in this context and is in that exec as it
    /// is now, so the call validates and compares only the others: a call that changes one
    /// node of a large graph does the per-node work of one node, not of every node.
    ///
    /// Only where every node's state is its parameters: an exec without conditional handles
    /// (a kernel's condition argument is checked against the other nodes), memory nodes
    /// (addresses bound at build) or work at launch; and for calls of at least
    /// [`CLEAN_MIN_NODES`] nodes. Else, as in [`Mode::Eager`], no node is clean, and nothing
    /// is kept.
    ///
    /// A partial node list ([`Nodes::get_partial`]) stays partial only where every entry it
    /// left unmade is clean; else it is made here, before anything reads it.
    fn clean_nodes(
        &mut self,
        call: &GraphCall<'_>,
        ctx: CUcontext,
        nodes: &mut Nodes<'_, '_>,
        id: Option<u64>,
    ) {
        self.clean_or_make(call, ctx, nodes, id);
        dirty_ranges(&self.clean, &mut self.dirty);
        if nodes.partial() {
            let clean = &self.clean;
            let all_clean = clean.len() == nodes.len()
                && self
                    .deferred
                    .iter()
                    .all(|&(at, n)| clean[at as usize..(at + n) as usize].iter().all(|&c| c));
            if !all_clean {
                nodes.get();
            }
        }
    }

    /// [`Self::clean_nodes`], but for the partial list's check.
    fn clean_or_make(
        &mut self,
        call: &GraphCall<'_>,
        ctx: CUcontext,
        nodes: &mut Nodes<'_, '_>,
        id: Option<u64>,
    ) {
        self.forget_clean();
        self.next_words.clear();
        self.clean.clear();
        #[cfg(test)]
        if self.no_clean {
            return;
        }
        if self.mode == Mode::Eager || nodes.len() < CLEAN_MIN_NODES {
            return;
        }
        let site = self.site.is_some_and(|s| s.same(call.site));
        let found = if site { self.find(call, ctx) } else { None };
        let keeps = |v: &Variant| v.handles.is_empty() && !v.memory && v.launch_work.is_empty();
        // The exec the ladder will update.
        let target = found.map(|i| self.execs_of(i).1).map(|i| &self.variants[i]);
        if target.is_some_and(|v| !keeps(v)) {
            // Not kept by this variant's exec, so not worth making for it.
            return;
        }
        // A `graph!` call's words, made with its statements, against the exec's: the nodes
        // whose words are equal, with nothing packed again.
        if let Some(t) = target
            && self.packed_ok
            && t.items_of == t.pack.len()
            && clean_by_items(
                (&self.packed, &self.packed_items),
                (&t.pack, &t.items),
                (nodes.list(), if nodes.partial() { &self.deferred[..] } else { &[] }),
                (&mut self.item_equal, &mut self.clean),
            )
        {
            self.clean_for = Some(t.serial);
            #[cfg(test)]
            {
                self.clean_seen += self.clean.iter().filter(|&&c| c).count() as u64;
            }
            return;
        }
        // Every node packed: the list made first.
        let nodes = nodes.get();
        let old = target.filter(|v| v.node_words.spans.len() == nodes.len());
        // The words `unchanged` packed from this very list, node by node (a builder's call):
        // copied, not packed again.
        let made = (self.packed_ok && self.packed_spans.len() == nodes.len())
            .then_some((&self.packed, &self.packed_spans));
        let (next, clean) = (&mut self.next_words, &mut self.clean);
        for (j, n) in nodes.iter().enumerate() {
            let start = next.words.len();
            let packed = match (n, made) {
                (Some(NodeParams::Kernel(_)), Some((words, spans))) => {
                    let (a, b) = spans[j];
                    next.words.extend_from_slice(&words[a as usize..b as usize]);
                    true
                }
                (Some(n @ NodeParams::Kernel(_)), None) => crate::kind::kernel::write_node(
                    id,
                    &mut next.words,
                    &|p: &mut crate::kind::kernel::Pack<'_>| n.pack(p),
                ),
                _ => false,
            };
            if !packed {
                next.words.truncate(start);
                next.spans.push(NOT_KEPT);
                clean.push(false);
                continue;
            }
            let end = next.words.len();
            next.spans.push((start as u32, end as u32));
            let words = &next.words[start..end];
            clean.push(old.and_then(|v| v.node_words.of(j)).is_some_and(|w| w == words));
        }
        self.next_made = true;
        self.clean_for = old.map(|v| v.serial);
        #[cfg(test)]
        {
            self.clean_seen += self.clean.iter().filter(|&&c| c).count() as u64;
        }
    }

    /// No node words made, none clean ([`Self::clean_nodes`]); the vectors are emptied by the
    /// next `clean_nodes`. What `clean_nodes` made is used only by the [`Self::run_validated`]
    /// of the same changed call, which forgets it (an unchanged call never reads it, and the
    /// next changed call makes its own): callers of `run_validated` without `clean_nodes`
    /// forget first.
    pub(super) fn forget_clean(&mut self) {
        self.next_made = false;
        self.clean_for = None;
    }

    /// The end of [`Self::unchanged`] and [`Self::unchanged_words`], with the call's words in
    /// `packed` (`equal`: equal to `found`'s, the variant of the call's key).
    fn settle(
        &mut self,
        call: &GraphCall<'_>,
        found: Option<usize>,
        equal: bool,
        present: u64,
        no_nodes: bool,
    ) -> Option<usize> {
        self.present_nodes = present;
        self.packed_ok = !equal;
        // (An empty pack is a variant's whose last call did not pack, unless it has no nodes.)
        let kept = |i: usize| !self.variants[i].pack.is_empty() || no_nodes;
        if equal {
            return found.filter(|&i| kept(i));
        }
        self.packed_seen = false;
        // Another exec of the variant kept for this call's parameters (ping-pong buffers).
        if let Some(i) = found.filter(|_| self.execs_per_variant > 1) {
            let v = &self.variants[i];
            let packed = &self.packed;
            let twin = self
                .variants
                .iter()
                .position(|w| !w.pack.is_empty() && w.pack == *packed && v.same_variant(w));
            if let Some(t) = twin {
                self.memo_hit(found, t, present);
                return twin;
            }
        }
        // Words no kept exec has: whether they came recently (memoizing them pays). Hashed
        // only here, not on a memo hit (one chain of dependent multiplies over the words was
        // 2.5 us of a 1000-node fan's memo hit on the CPU stub driver; `hash_words` has four).
        if self.execs_per_variant > 1 && self.packed_ok {
            // Over the words and the key; 0 is "none yet".
            let h = hash_words(call.key ^ 0x9e37_79b9_7f4a_7c15, &self.packed) | 1;
            self.packed_seen = self.recent.contains(&h);
            self.recent[self.recent_next] = h;
            self.recent_next = (self.recent_next + 1) % self.recent.len();
        }
        None
    }

    /// The words of a `graph!` call of `plan` to be made as its statements are evaluated
    /// ([`CallWords`], [`word_node`](crate::__private::word_node)), compared as they are made
    /// with the words of the variant this cache launched last, which are lent to them until
    /// [`Self::run_words`] gives them back (a call that never gets there, because its body
    /// panicked, leaves that variant without words: its next call is compared node by node).
    /// In [`Mode::Eager`] no words are made. Touches no driver.
    #[doc(hidden)]
    pub fn words(&mut self, plan: &'static Plan, call: &crate::operand::CallId) -> CallWords {
        let mut out = core::mem::take(&mut self.packed);
        out.clear();
        let mut items = core::mem::take(&mut self.packed_items);
        items.clear();
        let ok = self.mode != Mode::Eager;
        let mut w = CallWords {
            cache: self.id,
            from: crate::kind::kernel::NO_VARIANT,
            from_serial: 0,
            plan,
            call: call.0,
            last: Vec::new(),
            out,
            pos: 0,
            diverged: false,
            ok,
            present: 0,
            guarded: false,
            foreign: true,
            guards_same: false,
            items,
        };
        let guess = self.guess.take();
        if ok && self.site.is_some_and(|s| s.same(Site::Plan(plan))) {
            // The exec a memo hit expects next (its words kept), else the last one launched.
            let guessed = guess.filter(|&(i, serial)| {
                self.variants.get(i).is_some_and(|v| v.serial == serial && !v.pack.is_empty())
            });
            let last = guessed
                .map(|(i, _)| i)
                .or_else(|| (0..self.variants.len()).max_by_key(|&i| self.variants[i].last_use));
            if let Some(i) = last {
                w.last = core::mem::take(&mut self.variants[i].pack);
                // Variants are at most `max_variants` (a `usize`, but a `u32` index does for
                // any cache that fits in memory); one past it compares with none.
                w.from = u32::try_from(i).unwrap_or(crate::kind::kernel::NO_VARIANT);
                w.from_serial = self.variants[i].serial;
            }
        }
        if ok {
            // The tag, compared as a node's words are (not counted as a node).
            let CallWords { call, last, pos, diverged, out, .. } = &mut w;
            let tag = |p: &mut crate::kind::kernel::Pack<'_>| {
                p.push(WORDS_TAG);
                true
            };
            compare_node(Some(*call), last, pos, diverged, out, &tag);
        }
        w
    }

    /// Gives the variant a call's words were compared with its words back ([`Self::words`])
    /// and returns the rest. Words made by another cache, or compared with a variant that is
    /// gone or whose words changed since, give nothing back (what they were compared with is
    /// dropped), and count as not made unless they diverged (then `out` holds them all).
    fn take_back(&mut self, w: CallWords) -> Words {
        let CallWords {
            cache,
            from,
            from_serial,
            plan,
            call,
            last,
            out,
            pos,
            diverged,
            ok,
            present,
            guarded,
            foreign,
            guards_same,
            items,
        } = w;
        let lent = |&(i, serial): &(usize, u64)| {
            cache == self.id
                && self.variants.get(i).is_some_and(|v| v.serial == serial && v.pack.is_empty())
        };
        let from = (from != crate::kind::kernel::NO_VARIANT)
            .then_some((from as usize, from_serial))
            .filter(lent)
            .map(|(i, _)| i);
        if let Some(i) = from {
            self.variants[i].pack = last;
        }
        let ok = ok && (diverged || from.is_some());
        // The guards' words were compared with a variant's that is still there, unchanged.
        let guards_same = guards_same && from.is_some();
        Words {
            from,
            plan,
            call,
            out,
            pos,
            diverged,
            ok,
            present: u64::from(present),
            guarded,
            foreign,
            guards_same,
            items,
        }
    }

    /// [`Self::unchanged`] of a call whose words were made with its statements ([`CallWords`],
    /// given back by [`Self::take_back`]): the variant whose last call this one equals, else
    /// `None` with the call's words in `packed` (when every node packed); and whether they are
    /// this call's words with guards equal to the last launched variant's
    /// ([`CallWords::guards_same`]).
    fn unchanged_words(
        &mut self,
        call: &GraphCall<'_>,
        ctx: CUcontext,
        w: Words,
        handles: Option<(&Plan, u64)>,
    ) -> (Option<usize>, bool) {
        // `packed` will hold a `graph!` call's words, not a node list's.
        self.packed_spans.clear();
        let ours = w.of(call, handles);
        let guards_same = ours && w.guards_same;
        (self.variant_of_words(call, ctx, w, ours), guards_same)
    }

    /// [`Self::unchanged_words`]' variant, for words that are `ours` (this call's).
    fn variant_of_words(
        &mut self,
        call: &GraphCall<'_>,
        ctx: CUcontext,
        w: Words,
        ours: bool,
    ) -> Option<usize> {
        self.packed_ok = false;
        // As in `unchanged`: pairs a refused earlier call noted are not this call's.
        self.peers.pending.clear();
        let Words { from, mut out, pos, diverged, ok, present, mut items, .. } = w;
        if self.mode == Mode::Eager || !ok || !ours {
            out.clear();
            self.packed = out;
            items.clear();
            self.packed_items = items;
            return None;
        }
        // Where each node's words begin in `out` (positions counted the same while the words
        // were compared in place): kept with them.
        self.packed_items = items;
        let site = self.site.is_some_and(|s| s.same(call.site));
        let found = if site { self.find(call, ctx) } else { None };
        if !diverged {
            // Every word equal to the first `pos` of `from`'s (`take_back` keeps `ok` only
            // with `from` here).
            let Some(i) = from else {
                self.packed = out;
                return None;
            };
            if pos == self.variants[i].pack.len() {
                if found == Some(i) {
                    self.packed = out;
                    self.present_nodes = present;
                    return Some(i);
                }
                // Equal to another exec of the found variant (the one `words` guessed): the
                // memo hit `settle` would find, without copying and searching the words. Unless
                // the found exec holds the same words (execs updated while memo hits were off,
                // `set_execs_per_variant(1)`, can hold equal ones): then, as `settle` does, it is
                // an unchanged call of the found exec, with no switch of exec.
                if self.execs_per_variant > 1
                    && found.is_some_and(|f| {
                        let (v, g) = (&self.variants[f], &self.variants[i]);
                        v.same_variant(g) && v.pack != g.pack
                    })
                {
                    self.packed = out;
                    #[cfg(test)]
                    {
                        self.guessed += 1;
                    }
                    self.memo_hit(found, i, present);
                    return Some(i);
                }
            }
            out.clear();
            out.extend_from_slice(&self.variants[i].pack[..pos]);
        }
        self.packed = out;
        let equal = found.is_some_and(|i| self.variants[i].pack == self.packed);
        let same = self.settle(call, found, equal, present, false);
        if found.is_some_and(|i| self.variants[i].pack.is_empty()) {
            // Its words were lent to a call that never gave them back (its body panicked):
            // its exec is brought up to date node by node, not joined by another for words
            // that only look new.
            self.packed_seen = false;
        }
        same
    }

    /// A call whose `present` packed nodes equal exec `to`'s, another exec of the variant whose
    /// exec used last was `from` (found by [`Self::settle`]'s search or by [`Self::guess`]):
    /// counted, nothing to pack or hash, and the next guess made ([`Self::guess_after`]).
    fn memo_hit(&mut self, from: Option<usize>, to: usize, present: u64) {
        self.present_nodes = present;
        self.packed_ok = false;
        self.packed_seen = false;
        self.stats.memo_hits += 1;
        self.guess_after(from, to);
    }

    /// After a memo hit on exec `to` (of the variant whose exec used last was `from`): notes
    /// that `to` followed `from`, and guesses ([`Self::guess`]) that the exec which followed
    /// `to` last time comes next.
    fn guess_after(&mut self, from: Option<usize>, to: usize) {
        if let Some(f) = from.filter(|&f| f != to) {
            self.variants[f].followed_by = Some((to, self.variants[to].serial));
        }
        self.guess = self.variants[to].followed_by;
    }

    /// The cached variant of this call's key, context, edge kinds and builder signature: of
    /// its execs ([`Self::set_execs_per_variant`]), the most recently used.
    fn find(&self, call: &GraphCall<'_>, ctx: CUcontext) -> Option<usize> {
        let pdl = self.programmatic_edges();
        (0..self.variants.len())
            .filter(|&i| {
                let v = &self.variants[i];
                v.key == call.key
                    && v.ctx == ctx
                    && v.programmatic == pdl
                    && same_signature(&v.signature, call.signature)
            })
            .max_by_key(|&i| self.variants[i].last_use)
    }

    /// Builds or updates, and launches (uploads, in [`Mode::Instantiate`]), one validated call,
    /// with the context already current. `same`: the variant whose last call this one equals
    /// ([`Self::unchanged`]): nothing to compare or send.
    fn run_validated(
        &mut self,
        call: GraphCall<'_>,
        (ctx, owner): (CUcontext, Option<&Arc<CudaContext>>),
        stream: CUstream,
        nodes: &mut Nodes<'_, '_>,
        same: Option<usize>,
    ) -> Result<()> {
        self.stream = stream;
        if self.site.is_some_and(|s| !s.same(call.site)) {
            // Another call site: its graphs have nothing in common with ours.
            self.clear();
        }
        self.site = Some(call.site);
        self.location = call.shape.location();
        self.clock += 1;
        let idx = match same {
            Some(i) => {
                self.stats.hits += 1;
                self.stats.unchanged_calls += 1;
                // Counted by `unchanged`, which made `same`.
                self.stats.nodes_unchanged += self.present_nodes;
                self.variants[i].hits += 1;
                i
            }
            None => {
                let up = self.bring_up_to_date(&call, (ctx, owner), nodes);
                let made = core::mem::replace(&mut self.next_made, false);
                self.clean_for = None;
                let i = up?;
                let v = &mut self.variants[i];
                // Its exec now has this call's parameters.
                if made {
                    core::mem::swap(&mut v.node_words, &mut self.next_words);
                } else {
                    v.node_words.clear();
                }
                if self.packed_ok {
                    core::mem::swap(&mut v.pack, &mut self.packed);
                    core::mem::swap(&mut v.items, &mut self.packed_items);
                    v.items_of = v.pack.len();
                    self.packed_ok = false;
                } else {
                    v.pack.clear();
                    v.items.clear();
                }
                i
            }
        };
        let shape = call.shape;
        let v = &mut self.variants[idx];
        v.last_use = self.clock;
        if self.mode == Mode::Instantiate {
            // Up to date and instantiated: uploaded, not launched, so no work is handed out.
            // SAFETY: exec is live and was built in the stream's context.
            let uploaded = unsafe { self.driver.upload(v.exec, stream) }.call("cuGraphUpload");
            uploaded.map_err(|source| shape.graph_error(source))?;
            self.stats.uploads += 1;
            return Ok(());
        }
        // Work handed to nodes at launch (host closures), after everything else succeeded.
        for (j, &n) in v.launch_work.iter().enumerate() {
            let n = n as usize;
            let r =
                v.nodes[n].launching(nodes.list()[n].as_ref(), &self.reports, &|| shape.site(n));
            if let Err(e) = r {
                v.take_back(j);
                return Err(e);
            }
        }
        // SAFETY: exec is live and was built in the stream's context; every pointer in it was
        // acquired from a place that the caller keeps borrowed until after this launch, with a
        // guard that records the launch on the buffer's events.
        let clock = phases::Clock::start();
        let launched = unsafe { self.driver.launch(v.exec, stream) }.call("cuGraphLaunch");
        clock.charge(phases::LAUNCH, phases::LADDER_LAUNCH);
        if let Err(source) = launched {
            v.take_back(v.launch_work.len());
            return Err(shape.graph_error(source));
        }
        if v.memory {
            // SAFETY: the stream is live and of the current context; the event is the
            // variant's.
            unsafe { self.driver.record_done(&mut v.done, stream) }
                .call("cuEventCreate / cuEventRecord (after a launch of a graph with memory nodes)")
                .map_err(|source| shape.graph_error(source))?;
        }
        self.stats.launches += 1;
        Ok(())
    }

    /// The variant of a validated call with its exec brought up to date: the cached one
    /// through the update ladder, else a new one. The variant's pack is emptied before its exec
    /// changes.
    fn bring_up_to_date(
        &mut self,
        call: &GraphCall<'_>,
        (ctx, owner): (CUcontext, Option<&Arc<CudaContext>>),
        nodes: &mut Nodes<'_, '_>,
    ) -> Result<usize> {
        let (shape, key, signature) = (call.shape, call.key, call.signature);
        let found = self.find(call, ctx);
        if let Some(i) = found {
            // A call that packs (kernels, memsets, kept recordings), equals none of the variant's
            // execs, and whose
            // words came before in the last few changed calls (a set of buffers coming back): a
            // new exec for its parameters while the variant and the cache have room. Else the
            // least recently used exec of the variant is updated.
            let (twins, lru) = self.execs_of(i);
            // (Flags that refuse every instantiation: no new exec, the existing one updated.)
            if self.packed_ok
                && self.packed_seen
                && twins < self.execs_per_variant
                && self.variants.len() < self.max_variants
                && !self.flags.refused()
            {
                let j = self.insert(shape, (key, signature), (ctx, owner), nodes.get())?;
                self.stats.memo_builds += 1;
                return Ok(j);
            }
            return self.bring_up(lru, call, (ctx, owner), nodes);
        }
        self.insert(shape, (key, signature), (ctx, owner), nodes.get())
    }

    /// The execs of variant `i`'s variant: how many, and the least recently used, which a call
    /// that gets no exec of its own updates (no allocation: calls in a steady state allocate
    /// nothing).
    fn execs_of(&self, i: usize) -> (usize, usize) {
        let v = &self.variants[i];
        let (mut twins, mut lru) = (0, i);
        for (j, w) in self.variants.iter().enumerate() {
            if v.same_variant(w) {
                twins += 1;
                if w.last_use < self.variants[lru].last_use {
                    lru = j;
                }
            }
        }
        (twins, lru)
    }

    /// [`Self::bring_up_to_date`] of the cached exec `i`: through the update ladder, or a new
    /// variant when its edges would change kind.
    fn bring_up(
        &mut self,
        i: usize,
        call: &GraphCall<'_>,
        (ctx, owner): (CUcontext, Option<&Arc<CudaContext>>),
        nodes: &mut Nodes<'_, '_>,
    ) -> Result<usize> {
        let (shape, key, signature) = (call.shape, call.key, call.signature);
        self.stats.hits += 1;
        self.variants[i].hits += 1;
        self.variants[i].pack.clear();
        self.variants[i].items.clear();
        // Its kept node words go too until the update is through (`run_validated` puts this
        // call's back): an update cut short leaves none that could name a node it changed.
        self.variants[i].node_words.clear();
        // The nodes that equal this exec's need no comparison (`clean_nodes`: the mask was made
        // before, from the words just emptied).
        let clean = core::mem::take(&mut self.clean);
        let mine = self.clean_for == Some(self.variants[i].serial);
        if !mine {
            // The entries left unmade are clean only for the exec `clean` is of.
            nodes.get();
        }
        let dirty = core::mem::take(&mut self.dirty);
        let updated =
            self.update(i, shape, nodes, if mine { (&clean, &dirty) } else { (&[], &[]) });
        self.clean = clean;
        self.dirty = dirty;
        if updated? {
            return Ok(i);
        }
        // A node whose kernel is declared `#[programmatic]` where the variant's was not, or the
        // reverse (a method of the user's returning either kernel: its edges change kind), or a
        // misused hidden `GraphCache::run` (a key that does not fix the nodes' presence and
        // kinds): drop that exec, build anew.
        self.stats.hits -= 1;
        self.remove(i);
        self.insert(shape, (key, signature), (ctx, owner), nodes.get())
    }

    /// Enables peer access both ways (`cuCtxEnablePeerAccess`) for each pair of contexts that
    /// a copy of the call crosses and that this cache has not enabled yet ([`Peers`]), once per
    /// pair: a copy between devices then goes device to device (over NVLink where there is
    /// one) instead of through host memory. Pairs the devices cannot access
    /// (`cuDeviceCanAccessPeer`), or of one device, are left as they are: the copy still works.
    /// Counted in [`Stats::peer_enables`].
    fn enable_peers(&mut self, shape: &dyn Shape) -> Result<()> {
        while let Some((a, b, node)) = self.peers.pending.pop() {
            // SAFETY: both contexts are alive: each has a buffer borrowed by the call (a
            // copy's sides); the driver call restores the current context.
            let r = unsafe { self.driver.enable_peer_access(a, b) }
                .and_then(|_| unsafe { self.driver.enable_peer_access(b, a) });
            match r {
                Ok(_) => {
                    self.peers.enabled.push((a, b));
                    self.stats.peer_enables += 1;
                }
                Err(error) => {
                    self.peers.pending.clear();
                    let source = CudaError { call: "cuCtxEnablePeerAccess", error };
                    return Err(Error::Node { site: shape.site(node), source });
                }
            }
        }
        Ok(())
    }

    fn insert(
        &mut self,
        shape: &dyn Shape,
        (key, signature): (u64, &[u32]),
        (ctx, owner): (CUcontext, Option<&Arc<CudaContext>>),
        nodes: &[Option<NodeParams<'_>>],
    ) -> Result<usize> {
        let pdl = self.programmatic_edges();
        let Built { graph, states, handles, edges, declared } =
            build(&mut self.driver, shape, nodes, ctx, pdl)?;
        self.stats.builds += 1;
        let added = edges.iter().filter(|e| e.2 == EdgeKind::Programmatic).count() as u64;
        self.stats.programmatic_edges += added;
        if self.programmatic {
            self.stats.programmatic_fallbacks += declared - added;
        }
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
            launch_work: (0..states.len() as u32)
                .filter(|&j| states[j as usize].launch_work())
                .collect(),
            nodes: states,
            handles,
            programmatic: pdl,
            edges,
            last_use: self.clock,
            hits: 0,
            serial: crate::operand::next_id(),
            followed_by: None,
            pack: Vec::new(),
            items: Vec::new(),
            items_of: 0,
            node_words: NodeWords::default(),
            memory: false,
            done: core::ptr::null_mut(),
        };
        let v = Variant { memory: has_memory_nodes(&v.nodes), ..v };
        self.variants.push(v);
        Ok(self.variants.len() - 1)
    }

    /// Destroys variant `i`. The driver frees an exec still in flight once its launches complete
    /// (`cuGraphExecDestroy`), so this never waits and never cuts a launch short.
    fn remove(&mut self, i: usize) {
        let v = self.variants.swap_remove(i);
        // SAFETY: exec and graph are this variant's, used by nothing else from now on; `done`
        // is its event (or null), waited for first.
        unsafe {
            self.driver.wait_done(v.done, true);
            self.driver.exec_destroy(v.exec);
            self.driver.graph_destroy(v.graph);
        }
    }

    /// Destroys every variant (`cuGraphExecDestroy` and `cuGraphDestroy`; the driver frees an
    /// exec still in flight once its launches complete; a variant whose graph has memory nodes
    /// is first waited for, `cuEventSynchronize`). Dropping the cache does the same.
    pub fn clear(&mut self) {
        while !self.variants.is_empty() {
            self.remove(self.variants.len() - 1);
        }
        self.site = None;
        self.recordings.clear();
        self.recordings_site = None;
    }
}

impl<D: Driver> Drop for GraphCache<D> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Whether a variant's nodes include memory nodes (see [`Variant::memory`]).
fn has_memory_nodes(nodes: &[NodeState]) -> bool {
    nodes.iter().any(|s| s.scratch().is_some() || s.memory_nodes())
}
