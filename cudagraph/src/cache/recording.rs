//! What a [`GraphBuilder`](crate::GraphBuilder) records: its nodes, their accesses and
//! kernel arguments, as plain data, so that its checks and topology are testable without a GPU.
//! The cache keeps the last builder's recording, emptied, for the next one to reuse.

use core::ops::Range;
use core::panic::Location;
use std::sync::Arc;

use cudarc::driver::CudaFunction;
use cudarc::driver::sys::{CUcontext, CUfunction};

use super::Shape;
use crate::error::{Error, NodeSite, Result};
use crate::kind::kernel::{Pack, pack_head};
use crate::kind::memcpy::Copy1d;
use crate::kind::memset::Set1d;
use crate::kind::{
    CaptureOperands, CapturedWork, HostWork, KernelArgs, KernelNode, LaunchDims, MemcpyParams,
    Memory, MemsetParams, NodeParams,
};
use crate::operand::{PLACE_BITS, place_of, tag};
use crate::plan::{Access, EdgeKind, edge_kind, infer_edges_by};

/// A node added to a [`GraphBuilder`](crate::GraphBuilder), for
/// [`GraphBuilder::after`](crate::GraphBuilder::after).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    builder: u64,
    index: u32,
}

impl Node {
    /// Position of the node in its builder (0-based, in the order nodes were added).
    pub fn index(self) -> usize {
        self.index as usize
    }
}

/// Why a builder is refused when a device statement's body did not return into it.
pub(crate) const UNFINISHED: &str = "this device statement's body did not return normally into this \
                          GraphBuilder (it panicked and the panic was caught, or the builder was \
                          swapped out inside it): its conditional node would lack the body's \
                          accesses";

pub(crate) fn site(
    label: &'static str,
    text: &'static str,
    at: &'static Location<'static>,
) -> NodeSite {
    NodeSite { label, text, file: at.file(), line: at.line(), column: at.column() }
}

/// What a builder recorded: plain data, so its checks and topology are testable without a GPU.
pub(crate) struct Recording {
    pub(crate) id: u64,
    /// The topology of [`Self::signature`].
    pub(crate) sig: Vec<u32>,
    /// Scratch of [`Self::signature`]: each place's number by first use.
    canon: Vec<u32>,
    places: u32,
    pub(crate) nodes: Vec<RecNode>,
    /// Every node's accesses, `nodes[j].accesses` indexing into it.
    accesses: Vec<Access>,
    /// Explicit edges `(from, to)` of `after`.
    after: Vec<(u32, u32)>,
    /// Kernel argument bytes, each argument at an 8-byte-aligned offset.
    bytes: Vec<u8>,
    arg_lens: Vec<u32>,
    ctxs: Vec<CUcontext>,
    /// The first invalid node's error, returned by `launch`.
    error: Option<Error>,
    pub(crate) location: &'static Location<'static>,
    /// Kernels' [`Condition`](crate::Condition) arguments `(index, slot)`.
    conds: Vec<(u32, u32)>,
    /// Kernels' [`DeviceScalar`](crate::DeviceScalar) arguments `(index, buffer length)`.
    scalars: Vec<(u32, u32)>,
    /// Device conditions made so far (the next one's slot), and whether each drives a node.
    pub(crate) slots: Vec<bool>,
    /// The body that nodes are being added to: `(conditional node, body)`.
    scope: Option<(u32, u32)>,
    /// The device statements whose body is running, innermost last: pushed before a body runs,
    /// popped when it returns normally into this recording's builder. One left at `launch` (or
    /// below a body that returned) is a body that unwound (a panic the caller caught) or whose
    /// builder was swapped out: its conditional node lacks the body's accesses, so the builder
    /// is refused ([`Self::finish`]).
    open: Vec<NodeSite>,
    /// Graph-owned buffers: `(place, freed, free node)`.
    scratch: Vec<(u32, bool, crate::FreeParams<'static>)>,
}

pub(crate) struct RecNode {
    site: NodeSite,
    kind: RecKind,
    accesses: Range<usize>,
    /// The body it is in, `(conditional node, body)`; `None` at the top.
    parent: Option<(u32, u32)>,
}

pub(crate) enum RecKind {
    Kernel(KernelRec),
    /// A copy, with no handles (the recording holds its accesses); `'static`: the builder's
    /// guards and `'a` hold the borrows.
    Memcpy(MemcpyParams<'static>),
    /// A memset, as [`RecKind::Memcpy`].
    Memset(MemsetParams<'static>),
    /// Index of the node's closure in the builder's `captures`.
    Captured(usize),
    /// An embedded captured graph (the borrow is held as for [`RecKind::Memcpy`]).
    Child(crate::kind::GraphRef<'static>),
    /// Index of the node's closure in the builder's `hosts`.
    Host(usize),
    /// A join point.
    Empty,
    /// An event record node: index of the event in the builder's `events`.
    EventRecord(usize),
    /// An event wait node: index of the event in the builder's `events`.
    EventWait(usize),
    /// A 2-D copy, as [`RecKind::Memcpy`].
    Memcpy2d(crate::kind::Copy2dParams<'static>),
    /// A 2-D memset, as [`RecKind::Memcpy`].
    Memset2d(crate::kind::Memset2dParams<'static>),
    /// A graph-owned buffer's memory allocation node.
    MemAlloc(crate::AllocParams<'static>),
    /// A graph-owned buffer's memory free node.
    MemFree(crate::FreeParams<'static>),
    /// A device `while`, `if` or `switch`; its bodies' nodes follow it.
    Conditional(crate::kind::ConditionalParams),
}

pub(crate) struct KernelRec {
    func: CUfunction,
    owner: Option<CudaFunction>,
    /// Declared `#[programmatic]`.
    programmatic: bool,
    dims: LaunchDims,
    bytes: Range<usize>,
    args: Range<usize>,
    ctxs: Range<usize>,
    conds: Range<usize>,
    scalars: Range<usize>,
    /// [`KernelArgs::pointers`]: which arguments carry a device address.
    pointers: u16,
}

/// A recorded kernel node as the cache reads it.
pub(crate) struct KernelView<'r> {
    k: &'r KernelRec,
    bytes: &'r [u8],
    lens: &'r [u32],
    ctxs: &'r [CUcontext],
    conds: &'r [(u32, u32)],
    scalars: &'r [(u32, u32)],
}

impl crate::operand::sealed::Sealed for KernelView<'_> {}
impl KernelNode for KernelView<'_> {
    fn function(&self) -> CUfunction {
        self.k.func
    }
    fn function_owner(&self) -> Option<&CudaFunction> {
        self.k.owner.as_ref()
    }
    fn dims(&self) -> LaunchDims {
        self.k.dims
    }
    fn programmatic(&self) -> bool {
        self.k.programmatic
    }
    fn arg_count(&self) -> usize {
        self.lens.len()
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        let mut off = 0;
        for &len in self.lens {
            f(&self.bytes[off..off + len as usize]);
            off += (len as usize).next_multiple_of(8);
        }
    }
    /// The owner is not kept: `Recording::kernel` refused a condition of another builder.
    fn for_each_condition(&self, f: &mut dyn FnMut(usize, u32, u64)) {
        for &(i, slot) in self.conds {
            f(i as usize, slot, 0);
        }
    }
    fn for_each_device_scalar(&self, f: &mut dyn FnMut(usize, usize)) {
        for &(i, len) in self.scalars {
            f(i as usize, len as usize);
        }
    }
    fn pointer_args(&self) -> u16 {
        self.k.pointers
    }
    /// The contexts; the recording holds the places (checked when the node was added).
    fn accesses(&self, out: &mut crate::operand::Accesses) -> usize {
        for (o, &c) in out.iter_mut().zip(self.ctxs) {
            *o = (0, false, c);
        }
        self.ctxs.len()
    }
    /// Everything of the node that its exec node and `validate` depend on, one-to-one: the
    /// head of a kernel's words ([`pack_head`]: function, dimensions, `#[programmatic]`,
    /// argument count and each argument's length where it is 1 to 14 bytes, `0xf` else), then
    /// per argument its length when the head does not give it and its bytes in 8-byte words;
    /// then the pointer mask with the number of contexts, conditions and device scalars, and
    /// those: each context, each condition's `(index, slot)`, each device scalar's `(index,
    /// length)`. No context word: the node runs in the call's context (the stream's), which
    /// the variant holds (`find`), and the function handle names one function while the exec's
    /// node keeps it loaded.
    /// No handles: the recording checked them when the node was added, and the variant's
    /// signature holds the places (so two calls of one variant with equal words have the same
    /// parameters and pass `validate` alike: the second is an unchanged call, or a memo hit).
    fn pack(&self, out: &mut Pack<'_>) -> bool {
        let form = |len: u32| if (1..=14).contains(&len) { u64::from(len) } else { 0xf };
        let layout =
            self.lens.iter().enumerate().fold(0u64, |l, (i, &len)| l | form(len) << (4 * i));
        let k = self.k;
        pack_head(out, k.func, None, &k.dims, k.programmatic, self.lens.len(), layout);
        let mut off = 0;
        for &len in self.lens {
            if form(len) == 0xf {
                out.push(u64::from(len));
            }
            out.push_bytes(&self.bytes[off..off + len as usize]);
            off += (len as usize).next_multiple_of(8);
        }
        let counts = |n: usize| n as u64 & 0xff;
        out.push(
            u64::from(k.pointers)
                | counts(self.ctxs.len()) << 16
                | counts(self.conds.len()) << 24
                | counts(self.scalars.len()) << 32,
        );
        for &c in self.ctxs {
            out.push(c as u64);
        }
        for &(i, x) in self.conds.iter().chain(self.scalars) {
            out.push(u64::from(i) | u64::from(x) << 32);
        }
        true
    }
}

impl Recording {
    pub(crate) fn new(id: u64) -> Self {
        Recording {
            id,
            sig: Vec::new(),
            canon: Vec::new(),
            places: 0,
            nodes: Vec::new(),
            accesses: Vec::new(),
            after: Vec::new(),
            bytes: Vec::new(),
            arg_lens: Vec::new(),
            ctxs: Vec::new(),
            error: None,
            location: Location::caller(),
            conds: Vec::new(),
            scalars: Vec::new(),
            slots: Vec::new(),
            scope: None,
            open: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Empties every vector, keeping its capacity, and drops the kernels' functions.
    pub(crate) fn clear(&mut self) {
        self.places = 0;
        self.nodes.clear();
        self.accesses.clear();
        self.after.clear();
        self.bytes.clear();
        self.arg_lens.clear();
        self.ctxs.clear();
        self.sig.clear();
        self.error = None;
        self.conds.clear();
        self.scalars.clear();
        self.slots.clear();
        self.scope = None;
        self.open.clear();
        self.scratch.clear();
    }

    /// A new place's tag: the builder's number above [`PLACE_BITS`], the place's number (from
    /// 1) below. Past 2^24 - 1 places every further tag is 0, which no node accepts.
    pub(crate) fn new_place(&mut self) -> u64 {
        if self.places_full() {
            return 0;
        }
        self.places += 1;
        tag(self.id, self.places - 1)
    }

    /// Whether every place number (1 to 2^24 - 1) is taken.
    fn places_full(&self) -> bool {
        self.places + 1 >= 1 << PLACE_BITS
    }

    fn fail(&mut self, site: NodeSite, why: String) {
        if self.error.is_none() {
            self.error = Some(Error::InvalidNode { site, why });
        }
    }

    /// Refuses the call at `launch` for the node at `site` (the first such error is kept).
    pub(crate) fn refuse(&mut self, site: NodeSite, why: &str) {
        self.fail(site, why.into());
    }

    /// Appends node `kind` with its buffer accesses `(tag, write)`, checking that each is a
    /// place of this builder and that no place is both written and used again by the node.
    pub(crate) fn push(&mut self, site: NodeSite, kind: RecKind, operands: &[(u64, bool)]) -> Node {
        let start = self.accesses.len();
        for &(t, write) in operands {
            let Some(place) = place_of(t, self.id) else {
                let why = if t >> PLACE_BITS == self.id || self.places_full() {
                    "more than 2^24 - 1 buffers registered with one GraphBuilder"
                } else {
                    "a buffer handle that was not registered with this GraphBuilder's `read` or \
                     `write`"
                };
                self.fail(site, why.into());
                continue;
            };
            if self.scratch.iter().any(|s| s.0 == place && s.1) {
                self.fail(site, "a graph-owned buffer used after its free node".into());
            }
            match self.accesses[start..].iter_mut().find(|a| a.place == place) {
                Some(a) if a.write || write => self.fail(
                    site,
                    format!(
                        "buffer #{place} of this builder is passed twice to one node, and written: \
                         the operands would alias"
                    ),
                ),
                Some(_) => {}
                None => self.accesses.push(Access { place, write }),
            }
        }
        let parent = self.scope;
        self.nodes.push(RecNode { site, kind, accesses: start..self.accesses.len(), parent });
        Node { builder: self.id, index: self.nodes.len() as u32 - 1 }
    }

    /// A readback node ([`ReadbackNode`](crate::ReadbackNode): a small copy into pinned host
    /// memory as a kernel node of the crate's readback kernel), recorded as the kernel node it
    /// is: its function (kept loaded), dimensions, argument bytes and the contexts of its two
    /// addresses; its accesses are the copy's (source read, destination written).
    pub(crate) fn readback(&mut self, site: NodeSite, r: &crate::ReadbackNode<'_>) -> Node {
        let (b0, a0, c0) = (self.bytes.len(), self.arg_lens.len(), self.ctxs.len());
        r.for_each_arg(&mut |b| {
            self.bytes.extend_from_slice(b);
            self.bytes.resize(self.bytes.len().next_multiple_of(8), 0);
            self.arg_lens.push(b.len() as u32);
        });
        let mut all = crate::operand::NO_ACCESSES;
        let len = KernelNode::accesses(r, &mut all);
        let mut operands = [(0u64, false); 2];
        for (o, a) in operands.iter_mut().zip(&all[..len]) {
            self.ctxs.push(a.2);
            *o = (a.0, a.1);
        }
        let (q, sc) = (self.conds.len(), self.scalars.len());
        let k = KernelRec {
            func: r.function(),
            owner: r.function_owner().cloned(),
            programmatic: false,
            dims: r.dims(),
            bytes: b0..self.bytes.len(),
            args: a0..self.arg_lens.len(),
            ctxs: c0..self.ctxs.len(),
            conds: q..q,
            scalars: sc..sc,
            pointers: r.pointer_args(),
        };
        self.push(site, RecKind::Kernel(k), &operands[..len])
    }

    /// A kernel node of function `func` (kept loaded by `owner`), declared `#[programmatic]`
    /// or not.
    pub(crate) fn kernel<A: KernelArgs>(
        &mut self,
        site: NodeSite,
        (func, owner, programmatic): (CUfunction, Option<CudaFunction>, bool),
        dims: LaunchDims,
        args: &A,
    ) -> Node {
        let (b0, a0, c0) = (self.bytes.len(), self.arg_lens.len(), self.ctxs.len());
        args.for_each(&mut |b| {
            self.bytes.extend_from_slice(b);
            self.bytes.resize(self.bytes.len().next_multiple_of(8), 0);
            self.arg_lens.push(b.len() as u32);
        });
        args.for_each_context(&mut |c| self.ctxs.push(c));
        let (q0, s0) = (self.conds.len(), self.scalars.len());
        let (id, mut foreign) = (self.id, false);
        args.conditions(&mut |i, slot, owner| {
            foreign |= owner != id;
            self.conds.push((i as u32, slot));
        });
        if foreign {
            let why = "a condition argument that this GraphBuilder's `condition` did not make \
                       (of another builder or `graph!` call): no device statement of this graph \
                       gives it a handle";
            self.fail(site, why.into());
        }
        args.device_scalars(&mut |i, len| self.scalars.push((i as u32, len as u32)));
        // At most 16 parameters (`KernelArgs` is implemented up to 16-tuples).
        let mut all = crate::operand::NO_ACCESSES;
        let len = args.accesses(&mut all);
        let mut operands = [(0u64, false); 16];
        for (o, a) in operands.iter_mut().zip(&all[..len]) {
            *o = (a.0, a.1);
        }
        let k = KernelRec {
            func,
            owner,
            programmatic,
            dims,
            bytes: b0..self.bytes.len(),
            args: a0..self.arg_lens.len(),
            ctxs: c0..self.ctxs.len(),
            conds: q0..self.conds.len(),
            scalars: s0..self.scalars.len(),
            pointers: args.pointers(),
        };
        let node = self.push(site, RecKind::Kernel(k), &operands[..len]);
        // A kernel taking the condition of a device statement made earlier: ordered after it
        // (review 19d; see `condition_edge`).
        let me = node.index;
        let slots: Vec<u32> = self.conds[q0..self.conds.len()].iter().map(|&(_, s)| s).collect();
        for s in slots {
            let cond = self.nodes[..me as usize]
                .iter()
                .position(|n| matches!(&n.kind, RecKind::Conditional(p) if p.slot == s));
            if let Some(c) = cond {
                self.condition_edge(c as u32, me);
            }
        }
        node
    }

    /// The scopes of node `i`, outermost first: `(conditional node, body)` of each device
    /// statement whose body holds it.
    fn scopes(&self, i: u32) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut at = self.nodes[i as usize].parent;
        while let Some((c, b)) = at {
            out.push((c, b));
            at = self.nodes[c as usize].parent;
        }
        out.reverse();
        out
    }

    /// Orders a kernel that takes a condition with the conditional node of that condition, as
    /// `graph!` does (`check::setter_edges`): the two nodes' ancestors in their innermost common
    /// scope (each node itself, or the device statement whose body holds it) get an edge from
    /// the earlier to the later, so the kernel setting the condition never runs while the node
    /// reading it does; nothing when one holds the other (a kernel in the statement's own
    /// body sets the condition for its next iteration).
    fn condition_edge(&mut self, a: u32, b: u32) {
        let (sa, sb) = (self.scopes(a), self.scopes(b));
        let common = sa.iter().zip(&sb).take_while(|(x, y)| x == y).count();
        let up = |s: &[(u32, u32)], n: u32| s.get(common).map_or(n, |&(c, _)| c);
        let (x, y) = (up(&sa, a), up(&sb, b));
        if x != y {
            let e = (x.min(y), x.max(y));
            if !self.after.contains(&e) {
                self.after.push(e);
            }
        }
    }

    /// A graph-owned buffer's alloc node (see
    /// [`GraphBuilder::alloc`](crate::GraphBuilder::alloc)); `free` is its free node's
    /// parameters, added by [`Self::free`] or [`Self::free_remaining`].
    pub(crate) fn alloc(
        &mut self,
        site: NodeSite,
        alloc: crate::AllocParams<'static>,
        free: crate::FreeParams<'static>,
    ) -> Node {
        let tag = free.tag();
        let slot = place_of(tag, self.id).unwrap_or(u32::MAX);
        if self.scope.is_some() {
            let why = "a graph-owned buffer allocated inside a device body (memory nodes are \
                       allowed in the top graph only)";
            self.fail(site, why.into());
        } else if slot >= crate::kind::alloc::MAX_SLOTS {
            self.fail(site, "more than 2^20 buffers registered with one GraphBuilder".into());
        }
        self.scratch.push((slot, false, free));
        self.push(site, RecKind::MemAlloc(alloc), &[(tag, true)])
    }

    /// A graph-owned buffer's free node, after every earlier use of it.
    pub(crate) fn free(&mut self, site: NodeSite, free: crate::FreeParams<'static>) -> Node {
        let place = place_of(free.tag(), self.id);
        let found = self.scratch.iter().position(|s| place == Some(s.0));
        let node = self.push(site, RecKind::MemFree(free), &[(free.tag(), true)]);
        if self.scope.is_some() {
            // A body runs any number of times (a `while`, an `if` not taken): its free node
            // would free the buffer never or more than once; and the driver allows memory
            // nodes in the top graph only.
            let why = "a graph-owned buffer freed inside a device body (memory nodes are \
                       allowed in the top graph only)";
            self.fail(site, why.into());
        }
        match found {
            Some(i) if !self.scratch[i].1 => self.scratch[i].1 = true,
            _ => {
                let why = "a graph-owned buffer freed twice, or not this builder's";
                self.fail(site, why.into())
            }
        }
        node
    }

    /// At `launch`: the free node of every graph-owned buffer not freed yet, at the top level
    /// after every node (so after every use).
    pub(crate) fn free_remaining(&mut self) {
        self.scope = None;
        for i in 0..self.scratch.len() {
            let (_, freed, free) = self.scratch[i];
            if !freed {
                let text = "GraphBuilder::launch (free of a graph-owned buffer)";
                let site = site("free", text, self.location);
                self.push(site, RecKind::MemFree(free), &[(free.tag(), true)]);
                self.scratch[i].1 = true;
            }
        }
    }

    pub(crate) fn memcpy(&mut self, site: NodeSite, p: Copy1d, src: u64, dst: u64) -> Node {
        self.push(site, RecKind::Memcpy(MemcpyParams::recorded(p)), &[(src, false), (dst, true)])
    }

    pub(crate) fn memset(&mut self, site: NodeSite, p: Set1d, dst: u64) -> Node {
        self.push(site, RecKind::Memset(MemsetParams::recorded(p)), &[(dst, true)])
    }

    /// A captured node: `index` in the builder's closures; `same_stream`, whether the stream
    /// given is the builder's; its accesses are `operands`'.
    pub(crate) fn captured(
        &mut self,
        site: NodeSite,
        index: usize,
        same_stream: bool,
        operands: &impl CaptureOperands,
    ) -> Node {
        if !same_stream {
            let why = "the stream given to `capture` is not this GraphBuilder's stream (the one \
                       given to `GraphCache::builder`)";
            self.fail(site, why.into());
        }
        // At most 6 operands (`CaptureOperands` is implemented up to 6-tuples).
        let mut all = crate::operand::NO_ACCESSES;
        let len = operands.accesses(&mut all);
        let mut ops = [(0u64, false); 16];
        for (o, a) in ops.iter_mut().zip(&all[..len]) {
            *o = (a.0, a.1);
        }
        // Captured stream work cannot use a graph-owned buffer: it is recorded into a graph of
        // its own, outside the alloc and free nodes, where the buffer has no address.
        let scratch = ops[..len]
            .iter()
            .any(|o| self.scratch.iter().any(|s| Some(s.0) == place_of(o.0, self.id)));
        if scratch {
            let why = "a graph-owned buffer (`GraphBuilder::alloc`) passed to `capture`: captured                        work is recorded outside the graph's alloc and free nodes";
            self.fail(site, why.into());
        }
        self.push(site, RecKind::Captured(index), &ops[..len])
    }

    /// A conditional node of condition `c` with `size` bodies, each recorded by `body(self, b)`
    /// into body `b`: [`Self::device`] on a bare recording.
    #[cfg(test)]
    pub(crate) fn conditional(
        &mut self,
        site: NodeSite,
        c: crate::Condition,
        shape: (crate::ConditionalType, u32),
        body: impl FnMut(&mut Self, u32),
    ) -> Node {
        Recording::device(self, |r| r, (site, c, shape), body)
    }

    /// A conditional node of condition `c` with `size` bodies, each recorded by `body(s, b)`
    /// into body `b` of the recording `rec(s)` (`s` a builder: the bodies are the user's
    /// closures). Edges from earlier kernels of the same graph that take `c` (they set the
    /// value the node reads); its accesses are its bodies', gathered when the last body
    /// returns.
    ///
    /// A body that does not return normally into the same builder leaves the node without its
    /// body's accesses, so the builder is refused instead (`Error::InvalidNode` naming the
    /// statement): one that unwinds (a panic the caller catches) leaves its statement in
    /// [`Self::open`], which `finish` refuses; one after which `rec(s)` is another builder's
    /// recording (`*s` swapped or replaced inside the body: builder numbers are unique) marks
    /// that recording failed here, while the builder's own, moved away with its statement
    /// still open, is refused by its own `finish`.
    pub(crate) fn device<S: ?Sized>(
        s: &mut S,
        rec: impl Fn(&mut S) -> &mut Recording,
        (site, c, (ty, size)): (NodeSite, crate::Condition, (crate::ConditionalType, u32)),
        mut body: impl FnMut(&mut S, u32),
    ) -> Node {
        let r = rec(s);
        let id = r.id;
        let node = r.conditional_node(site, c, ty, size);
        for b in 0..size {
            let r = rec(s);
            let depth = r.open.len();
            r.open.push(site);
            r.scope = Some((node.index, b));
            body(s, b);
            let r = rec(s);
            if r.id != id {
                let why = "the GraphBuilder was swapped with (or replaced by) another inside this \
                           device statement's body: neither builder's recording is whole";
                r.fail(site, why.into());
                return node;
            }
            if let Some(&inner) = r.open.get(depth + 1) {
                // A body nested in this one unwound, and this body caught the panic.
                r.fail(inner, UNFINISHED.into());
            }
            r.open.truncate(depth);
            r.scope = r.nodes[node.index()].parent;
        }
        rec(s).conditional_accesses(node.index);
        node
    }

    /// The first error of the recording, or a device statement whose body did not return
    /// normally into this builder (see [`Self::device`]).
    pub(crate) fn finish(&mut self) -> Result<()> {
        if let Some(&site) = self.open.last() {
            return Err(Error::InvalidNode { site, why: UNFINISHED.into() });
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        // A kernel's condition must drive a device statement of this graph: only then does the
        // exec have a handle for its slot (else the kernel would get handle 0).
        for n in &self.nodes {
            if let RecKind::Kernel(k) = &n.kind
                && self.conds[k.conds.clone()]
                    .iter()
                    .any(|&(_, s)| !self.slots.get(s as usize).copied().unwrap_or(false))
            {
                let why = "a condition argument that drives no device statement of this \
                           GraphBuilder (`device_while`, `device_if`, `device_switch`): the \
                           kernel would get no conditional handle";
                return Err(Error::InvalidNode { site: n.site, why: why.into() });
            }
        }
        Ok(())
    }

    /// The node of [`Self::device`], with its edges from the kernels made so far that take `c`.
    fn conditional_node(
        &mut self,
        site: NodeSite,
        c: crate::Condition,
        ty: crate::ConditionalType,
        size: u32,
    ) -> Node {
        match self.slots.get_mut(c.slot() as usize) {
            _ if c.owner() != self.id => self.fail(site, "a condition that this GraphBuilder's `condition` did not make".into()),
            Some(used) if !*used => *used = true,
            Some(_) => self.fail(site, "this condition already drives another device statement: make one condition per statement".into()),
            None => self.fail(site, "a condition that this GraphBuilder's `condition` did not make".into()),
        }
        let p = crate::kind::ConditionalParams::new(c.slot(), ty, size, c.default());
        let node = self.push(site, RecKind::Conditional(p), &[]);
        let me = node.index;
        // Every earlier kernel that takes `c`, in any scope (review 19d: only those of this
        // scope were ordered); a later one is ordered when it is made.
        let setters: Vec<u32> = (0..me)
            .filter(|&j| match &self.nodes[j as usize].kind {
                RecKind::Kernel(k) => {
                    self.conds[k.conds.clone()].iter().any(|&(_, s)| s == c.slot())
                }
                _ => false,
            })
            .collect();
        for j in setters {
            self.condition_edge(j, me);
        }
        node
    }

    /// Conditional node `me`'s accesses: the union of its bodies' (nested bodies' are in their
    /// conditional nodes).
    fn conditional_accesses(&mut self, me: u32) {
        let start = self.accesses.len();
        for j in me as usize + 1..self.nodes.len() {
            if self.nodes[j].parent.is_some_and(|(p, _)| p == me) {
                for k in self.nodes[j].accesses.clone() {
                    let a = self.accesses[k];
                    match self.accesses[start..].iter_mut().find(|x| x.place == a.place) {
                        Some(x) => x.write |= a.write,
                        None => self.accesses.push(a),
                    }
                }
            }
        }
        self.nodes[me as usize].accesses = start..self.accesses.len();
    }

    pub(crate) fn after(&mut self, node: Node, earlier: &[Node], at: &'static Location<'static>) {
        if node.builder != self.id || node.index() >= self.nodes.len() {
            let why = "`after` on a node of another GraphBuilder".to_string();
            return self.fail(site("after", "GraphBuilder::after", at), why);
        }
        // Errors name the node and the `after` call.
        let site = site(self.nodes[node.index()].site.label, "GraphBuilder::after", at);
        for e in earlier {
            if e.builder != self.id {
                self.fail(site, "`after` names a node of another GraphBuilder".into());
            } else if e.index < node.index
                && self.nodes[e.index()].parent != self.nodes[node.index()].parent
            {
                let why = format!(
                    "`after` names node {} (`{}`), which is in another graph: a device body is a \
                     graph of its own",
                    e.index,
                    self.nodes[e.index()].site.label
                );
                self.fail(site, why);
            } else if e.index >= node.index {
                let why = format!(
                    "`after` names node {} (`{}`), which is not earlier than this node ({})",
                    e.index,
                    self.nodes[e.index()].site.label,
                    node.index
                );
                self.fail(site, why);
            } else {
                self.after.push((e.index, node.index));
            }
        }
    }

    /// The variant of this recording: fills `self.sig` with its topology, per node its kind
    /// (memcpy by direction; captured, whatever its closure records; a kernel declared
    /// `#[programmatic]` apart from others, as the kinds of its edges differ), a kernel's
    /// parameter sizes, its accesses with places numbered by first use, and its `after` nodes;
    /// returns
    /// the hash of that, a quick filter before the full comparison. Equal signatures give equal
    /// edges, node kinds and parameter layouts, so one exec serves both.
    pub(crate) fn signature(&mut self) -> u64 {
        let mut canon = core::mem::take(&mut self.canon);
        canon.clear();
        canon.resize(self.places as usize, u32::MAX);
        let mut next = 0;
        self.after.sort_unstable_by_key(|&(from, to)| (to, from));
        let after = &self.after;
        let mut e = 0;
        let mut sig = core::mem::take(&mut self.sig);
        sig.clear();
        for (j, n) in self.nodes.iter().enumerate() {
            // Kind first, then (kernels) the parameter sizes: an unambiguous encoding, so equal
            // signatures mean equal recordings' topologies.
            sig.push(match &n.kind {
                RecKind::Kernel(k) if k.programmatic => 12,
                RecKind::Kernel(_) => 0,
                RecKind::Memcpy(c) => match (c.raw.src, c.raw.dst) {
                    (Memory::Device(_), Memory::Device(_)) => 1,
                    (Memory::Host(_), _) => 2,
                    (_, Memory::Host(_)) => 3,
                },
                RecKind::Memset(_) => 4,
                RecKind::Captured(_) => 5,
                RecKind::Child(_) => 6,
                RecKind::Host(_) => 7,
                RecKind::Empty => 8,
                RecKind::EventRecord(_) => 9,
                RecKind::EventWait(_) => 10,
                RecKind::Conditional(_) => 11,
                RecKind::Memcpy2d(c) => match (c.raw.base.src, c.raw.base.dst) {
                    (Memory::Device(_), Memory::Device(_)) => 14,
                    (Memory::Host(_), _) => 15,
                    (_, Memory::Host(_)) => 16,
                },
                RecKind::Memset2d(_) => 17,
                RecKind::MemAlloc(_) => 18,
                RecKind::MemFree(_) => 13,
            });
            // The body it is in, and a conditional node's type and number of bodies.
            match n.parent {
                Some((c, b)) => sig.extend([c, b]),
                None => sig.push(u32::MAX),
            }
            if let RecKind::Conditional(p) = &n.kind {
                sig.extend([p.ty as u32, p.size]);
            }
            if let RecKind::Kernel(k) = &n.kind {
                // The parameter sizes: a node of another parameter list is another variant.
                let lens = &self.arg_lens[k.args.clone()];
                sig.push(lens.len() as u32);
                sig.extend_from_slice(lens);
            }
            sig.push(n.accesses.len() as u32);
            for a in &self.accesses[n.accesses.clone()] {
                let c = &mut canon[a.place as usize];
                if *c == u32::MAX {
                    *c = next;
                    next += 1;
                }
                sig.push(*c << 1 | u32::from(a.write));
            }
            let first = e;
            while e < after.len() && after[e].1 as usize == j {
                e += 1;
            }
            sig.push((e - first) as u32);
            sig.extend(after[first..e].iter().map(|x| x.0));
        }
        // A quick filter before the full comparison.
        let key = super::hash_u32s(0xcbf2_9ce4_8422_2325, &sig);
        self.sig = sig;
        self.canon = canon;
        key
    }

    /// [`GraphBuilder::edge_kinds`](crate::GraphBuilder::edge_kinds): in the top graph and inside
    /// device control flow bodies alike.
    pub(crate) fn edge_kinds(&self) -> Vec<(u32, u32, EdgeKind)> {
        let end = |i: u32| match &self.nodes[i as usize].kind {
            RecKind::Kernel(k) => Some(k.programmatic),
            _ => None,
        };
        let kind = |a: u32, b: u32| edge_kind(end(a), end(b));
        let edges = self.edges(&vec![true; self.nodes.len()]);
        let mut edges: Vec<_> = edges.into_iter().map(|(a, b)| (a, b, kind(a, b))).collect();
        crate::plan::plain_into_mixed_joins(&mut edges);
        edges
    }

    pub(crate) fn kernel_views(&self) -> impl Iterator<Item = KernelView<'_>> {
        self.nodes.iter().filter_map(|n| match &n.kind {
            RecKind::Kernel(k) => Some(KernelView {
                k,
                bytes: &self.bytes[k.bytes.clone()],
                lens: &self.arg_lens[k.args.clone()],
                ctxs: &self.ctxs[k.ctxs.clone()],
                conds: &self.conds[k.conds.clone()],
                scalars: &self.scalars[k.scalars.clone()],
            }),
            _ => None,
        })
    }

    /// Every node's parameters; `views` are [`Self::kernel_views`], in order, and `captures`
    /// the builder's captured closures.
    pub(crate) fn params<'r>(
        &'r self,
        views: &'r [KernelView<'r>],
        captures: &'r [Box<dyn CapturedWork + '_>],
        hosts: &'r [Box<dyn HostWork + '_>],
        events: &'r [&'r Arc<cudarc::driver::CudaEvent>],
    ) -> Vec<Option<NodeParams<'r>>> {
        let mut views = views.iter();
        let view = |v: Option<&'r KernelView<'r>>| -> &'r dyn KernelNode {
            v.expect("one view per kernel node")
        };
        self.nodes
            .iter()
            .map(|n| {
                Some(match &n.kind {
                    RecKind::Kernel(_) => NodeParams::Kernel(view(views.next())),
                    RecKind::Memcpy(c) => NodeParams::Memcpy(c),
                    RecKind::Memset(m) => NodeParams::Memset(m),
                    RecKind::Captured(i) => NodeParams::Captured(&*captures[*i]),
                    RecKind::Host(i) => NodeParams::Host(&*hosts[*i]),
                    RecKind::Empty => NodeParams::Empty(crate::kind::empty()),
                    RecKind::EventRecord(i) => {
                        NodeParams::EventRecord(crate::kind::event_record(events[*i]))
                    }
                    RecKind::EventWait(i) => {
                        NodeParams::EventWait(crate::kind::event_wait(events[*i]))
                    }
                    RecKind::Child(c) => NodeParams::Child(c),
                    RecKind::Conditional(p) => NodeParams::Conditional(*p),
                    RecKind::Memcpy2d(c) => NodeParams::Memcpy2d(c),
                    RecKind::Memset2d(m) => NodeParams::Memset2d(m),
                    RecKind::MemAlloc(p) => NodeParams::MemAlloc(p),
                    RecKind::MemFree(p) => NodeParams::MemFree(p),
                })
            })
            .collect()
    }
}

impl Shape for Recording {
    fn location(&self) -> (&'static str, u32) {
        (self.location.file(), self.location.line())
    }
    fn site(&self, i: usize) -> NodeSite {
        self.nodes[i].site
    }
    fn place_site(&self, place: usize) -> NodeSite {
        let uses = |n: &&RecNode| {
            self.accesses[n.accesses.clone()].iter().any(|a| a.place as usize == place)
        };
        match self.nodes.iter().find(uses) {
            Some(n) => n.site,
            None => site("read/write", "GraphBuilder::read/write", self.location),
        }
    }
    fn edges(&self, present: &[bool]) -> Vec<(u32, u32)> {
        let mut after = self.after.clone();
        after.sort_unstable_by_key(|&(from, to)| (to, from));
        let mut starts = vec![0usize; self.nodes.len() + 1];
        for &(_, to) in &after {
            starts[to as usize + 1] += 1;
        }
        for j in 0..self.nodes.len() {
            starts[j + 1] += starts[j];
        }
        let from: Vec<u32> = after.iter().map(|x| x.0).collect();
        let node = |j: usize| {
            (&self.accesses[self.nodes[j].accesses.clone()], &from[starts[j]..starts[j + 1]])
        };
        if self.nodes.iter().all(|n| n.parent.is_none()) {
            return infer_edges_by(self.nodes.len(), node, present);
        }
        // Device bodies: the edges within each graph (the top one and every body).
        let mut scopes: Vec<Option<(u32, u32)>> = self.nodes.iter().map(|n| n.parent).collect();
        scopes.sort_unstable();
        scopes.dedup();
        let mut edges = Vec::new();
        for s in scopes {
            let mine: Vec<bool> = (0..self.nodes.len())
                .map(|j| present.get(j).copied().unwrap_or(false) && self.nodes[j].parent == s)
                .collect();
            edges.extend(infer_edges_by(self.nodes.len(), node, &mine));
        }
        edges.sort_unstable_by_key(|&(from, to)| (to, from));
        edges
    }
    fn parent(&self, i: usize) -> Option<(usize, u32)> {
        self.nodes[i].parent.map(|(c, b)| (c as usize, b))
    }
}

#[cfg(test)]
mod tests {
    //! The builder's checks, topology and variants, without a GPU: recordings run on the mock
    //! driver of `exec`'s tests.
    use super::*;
    use crate::cache::tests::{CTX, Mock, STREAM};
    use crate::cache::{GraphCache, GraphCall, Site};
    use crate::kind::copy;
    use crate::operand::DevRead;
    use crate::operand::{DevWrite, Handle, sealed::Token};

    #[track_caller]
    fn at() -> NodeSite {
        site("k", "GraphBuilder::kernel", Location::caller())
    }

    /// A device buffer at `ptr` registered with `rec`, as `(read, write)` handles.
    fn buf(rec: &mut Recording, ptr: u64) -> (DevRead<'static, u32>, DevWrite<'static, u32>) {
        let w = DevWrite::new(ptr, 16, CTX).with_tag(rec.new_place(), Token(()));
        (w.read(), w)
    }

    const F: (CUfunction, Option<CudaFunction>, bool) = (0x10 as CUfunction, None, false);
    const DIMS: LaunchDims = LaunchDims { grid: (4, 1, 1), block: (32, 1, 1), shared_bytes: 0 };

    /// n0 writes a; n1 reads a, writes b; n2 copies b to c; n3 zeroes d, after n0.
    fn chain(rec: &mut Recording, bufs: [u64; 4], scalar: u32) {
        let [a, b, c, d] = bufs.map(|p| buf(rec, p));
        let n0 = rec.kernel(at(), F, DIMS, &(scalar, a.1));
        rec.kernel(at(), F, DIMS, &(scalar, a.0, b.1));
        rec.memcpy(at(), copy(b.0, c.1).raw, b.0.tag, c.1.tag);
        let n3 = rec.memset(at(), crate::kind::zero(d.1).raw, d.1.tag);
        rec.after(n3, &[n0], Location::caller());
    }

    #[test]
    fn device_bodies_are_graphs_of_their_own_and_part_of_the_variant() {
        let sig = |bodies: bool| {
            let mut rec = Recording::new(1);
            let [a, b] = [0xa0, 0xb0].map(|p| buf(&mut rec, p));
            rec.slots.push(false);
            let c = crate::Condition::new(0, 1, rec.id);
            rec.kernel(at(), F, DIMS, &(c, a.0));
            let w = rec.conditional(at(), c, (crate::ConditionalType::While, 1), |r, _| {
                if bodies {
                    r.kernel(at(), F, DIMS, &(1u32, a.1));
                    r.kernel(at(), F, DIMS, &(1u32, a.0, b.1));
                }
            });
            let after = rec.kernel(at(), F, DIMS, &(1u32, b.0));
            assert!(rec.error.is_none());
            let edges = rec.edges(&vec![true; rec.nodes.len()]);
            (rec.signature(), edges, w, after)
        };
        let (with, edges, w, after) = sig(true);
        // n0 (sets the condition, reads a) -> n1 the while; inside: n2 -> n3; n1 -> n4 (b).
        assert_eq!(edges, [(0, 1), (2, 3), (1, 4)]);
        assert_eq!((w.index, after.index), (1, 4));
        let (without, edges, _, _) = sig(false);
        // An empty body: only the setter's edge, and another variant.
        assert_eq!(edges, [(0, 1)]);
        assert_ne!(with, without);
    }

    /// `rec` with a buffer `a` written by n0, then a `device_while` at `dev` whose body writes
    /// `a`, reads `b`, then runs `body`.
    fn while_writing(
        rec: &mut Recording,
        dev: NodeSite,
        mut body: impl FnMut(&mut Recording, (DevRead<'static, u32>, DevWrite<'static, u32>)),
    ) {
        let [a, b] = [0xa0, 0xb0].map(|p| buf(rec, p));
        rec.kernel(at(), F, DIMS, &(1u32, a.1));
        rec.slots.push(false);
        let c = crate::Condition::new(rec.slots.len() as u32 - 1, 1, rec.id);
        Recording::device(
            rec,
            |r| r,
            (dev, c, (crate::ConditionalType::While, 1)),
            |r, _| {
                r.kernel(at(), F, DIMS, &(1u32, a.1, b.0));
                body(r, b);
            },
        );
    }

    #[track_caller]
    fn dev_site() -> NodeSite {
        site("device_while", "GraphBuilder::device_while", Location::caller())
    }

    fn refused_unfinished(rec: &mut Recording, line: u32) {
        match rec.finish() {
            Err(Error::InvalidNode { site, why }) => {
                assert_eq!((site.label, site.line), ("device_while", line));
                assert!(why.contains("did not return normally"), "{why}");
            }
            r => panic!("expected InvalidNode, got {r:?}"),
        }
    }

    /// Runs `f`, whose panic is expected, catching it as a caller of the builder could.
    fn caught(f: impl FnOnce()) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        assert!(r.is_err(), "the body was to panic");
    }

    #[test]
    fn a_device_body_that_returns_gives_its_node_its_accesses() {
        let mut rec = Recording::new(1);
        while_writing(&mut rec, dev_site(), |_, _| {});
        assert!(rec.open.is_empty() && rec.scope.is_none());
        // n0 writes a -> the while (its body writes a); inside, the body's one kernel.
        assert_eq!(rec.edges(&[true; 3]), [(0, 1)]);
        rec.finish().unwrap();
    }

    #[test]
    fn a_device_body_that_panicked_is_refused_at_launch_naming_the_statement() {
        // The caller catches the panic around the whole statement.
        let mut rec = Recording::new(1);
        let line = line!() + 2;
        caught(|| {
            while_writing(&mut rec, dev_site(), |_, _| panic!("in the body"));
        });
        // Without the check, the while node would have no accesses, hence no edge from n0.
        assert_eq!(rec.nodes[1].accesses.len(), 0);
        // Later adds do not make it whole.
        let (_, w) = buf(&mut rec, 0xc0);
        rec.kernel(at(), F, DIMS, &(1u32, w));
        refused_unfinished(&mut rec, line);

        // The panic of a nested body caught inside the outer body, which then returns.
        let mut rec = Recording::new(2);
        let inner_line = line!() + 4;
        while_writing(&mut rec, dev_site(), |r, b| {
            r.slots.push(false);
            let c = crate::Condition::new(r.slots.len() as u32 - 1, 1, r.id);
            let inner = (dev_site(), c, (crate::ConditionalType::If, 1));
            caught(|| {
                Recording::device(
                    r,
                    |r| r,
                    inner,
                    |r, _| {
                        r.kernel(at(), F, DIMS, &(1u32, b.0));
                        panic!("in the inner body");
                    },
                );
            });
        });
        assert!(rec.open.is_empty());
        let (why, l) = invalid(&rec);
        assert_eq!(l, inner_line);
        assert!(why.contains("did not return normally"), "{why}");
    }

    #[test]
    fn a_builder_swapped_inside_a_device_body_is_refused_and_so_is_the_other() {
        // `*g` swapped with another builder inside the body: the state that returns is the
        // other builder's; the first one's went to the other and still has the statement open.
        let mut first = Recording::new(1);
        let mut other = Recording::new(2);
        let _ = buf(&mut other, 0xd0);
        let line = line!() + 1;
        while_writing(&mut first, dev_site(), |r, _| core::mem::swap(r, &mut other));
        // `first` now holds builder 2's recording, `other` builder 1's.
        assert_eq!((first.id, other.id), (2, 1));
        let (why, l) = invalid(&first);
        assert_eq!(l, line);
        assert!(why.contains("swapped"), "{why}");
        assert!(first.finish().is_err());
        refused_unfinished(&mut other, line);

        // Swapped and swapped back inside the body: the same builder returns, which is whole.
        let mut first = Recording::new(3);
        let mut other = Recording::new(4);
        while_writing(&mut first, dev_site(), |r, _| {
            core::mem::swap(r, &mut other);
            core::mem::swap(r, &mut other);
        });
        first.finish().unwrap();
        other.finish().unwrap();
    }

    #[test]
    fn edges_are_hazards_and_after() {
        let mut rec = Recording::new(1);
        chain(&mut rec, [0x100, 0x200, 0x300, 0x400], 7);
        assert!(rec.error.is_none());
        assert_eq!(rec.edges(&[true; 4]), [(0, 1), (1, 2), (0, 3)]);
    }

    #[test]
    fn signature_is_the_topology_not_the_registration_order_or_values() {
        let sig = |order: [usize; 4], scalar: u32| {
            let mut rec = Recording::new(9);
            let mut ptrs = [0u64; 4];
            // Register the places in another order: their numbers change, the topology not.
            for (i, &o) in order.iter().enumerate() {
                ptrs[o] = 0x100 * (i as u64 + 1);
            }
            let mut tags = [0u64; 4];
            for o in order {
                tags[o] = rec.new_place();
            }
            let h = |i: usize| DevWrite::<u32>::new(ptrs[i], 16, CTX).with_tag(tags[i], Token(()));
            rec.kernel(at(), F, DIMS, &(scalar, h(0)));
            rec.kernel(at(), F, DIMS, &(scalar, h(0).read(), h(1)));
            rec.memcpy(at(), copy(h(1).read(), h(2)).raw, tags[1], tags[2]);
            rec.memset(at(), crate::kind::zero(h(3)).raw, tags[3]);
            (rec.signature(), rec.sig)
        };
        assert_eq!(sig([0, 1, 2, 3], 1), sig([3, 1, 0, 2], 2));
        let mut other = Recording::new(9);
        chain(&mut other, [0x100, 0x200, 0x300, 0x400], 1);
        // `chain` adds an `after` edge: another topology.
        let key = other.signature();
        assert_ne!(sig([0, 1, 2, 3], 1), (key, other.sig));
    }

    #[test]
    fn signatures_are_unambiguous() {
        // Found by review: with the parameter count before the kind word, these two encoded the
        // same (a count of 1..=4 reads as a memcpy/memset kind).
        let mut a = Recording::new(30);
        let [p0, p1] = [0x100, 0x200].map(|p| buf(&mut a, p).1);
        a.memset(at(), crate::kind::zero(p0).raw, p0.tag);
        let n1 = a.memset(at(), crate::kind::zero(p1).raw, p1.tag);
        let n2 = a.memset(at(), crate::kind::zero(p0).raw, p0.tag);
        a.after(n2, &[n1], Location::caller());
        let n3 = a.kernel(at(), F, DIMS, &());
        a.after(n3, &[n2], Location::caller());
        a.memset(at(), crate::kind::zero(p0).raw, p0.tag);
        let mut b = Recording::new(31);
        let [q0, q1, q2] = [0x100, 0x200, 0x300].map(|p| buf(&mut b, p));
        let m0 = b.memset(at(), crate::kind::zero(q0.1).raw, q0.1.tag);
        b.memset(at(), crate::kind::zero(q1.1).raw, q1.1.tag);
        b.kernel(at(), F, DIMS, &(1u8, 1u8, 1u8, 1u8));
        let m3 = b.memcpy(at(), copy(q2.0, q0.1).raw, q2.0.tag, q0.1.tag);
        b.after(m3, &[m0], Location::caller());
        assert_ne!((a.signature(), a.sig), (b.signature(), b.sig));
    }

    /// The same kernel declared `#[programmatic]`.
    const P: (CUfunction, Option<CudaFunction>, bool) = (0x10 as CUfunction, None, true);

    #[test]
    fn a_programmatic_kernel_is_another_variant_with_programmatic_edges_from_kernels() {
        // n0 kernel writes a; n1 programmatic kernel reads a, writes b; n2 copies b to c; n3
        // programmatic kernel reads c (after the copy: plain); n4 programmatic kernel writes d,
        // `after` n0 (an `after` edge from a kernel: programmatic too).
        let record = |f1: (CUfunction, Option<CudaFunction>, bool)| {
            let mut rec = Recording::new(60);
            let [a, b, c, d] = [0x100, 0x200, 0x300, 0x400].map(|p| buf(&mut rec, p));
            let n0 = rec.kernel(at(), F, DIMS, &(1u32, a.1));
            rec.kernel(at(), f1, DIMS, &(a.0, b.1));
            rec.memcpy(at(), copy(b.0, c.1).raw, b.0.tag, c.1.tag);
            rec.kernel(at(), P, DIMS, &(c.0,));
            let n4 = rec.kernel(at(), P, DIMS, &(d.1,));
            rec.after(n4, &[n0], Location::caller());
            rec
        };
        let (p, plain) = (EdgeKind::Programmatic, EdgeKind::Plain);
        let rec = record(P);
        assert!(rec.error.is_none(), "{:?}", rec.error);
        assert_eq!(rec.edge_kinds(), [(0, 1, p), (1, 2, plain), (2, 3, plain), (0, 4, p)]);
        let mut plain_n1 = record(F);
        assert_eq!(plain_n1.edge_kinds()[0], (0, 1, plain));
        let mut rec = rec;
        assert_ne!((rec.signature(), &rec.sig), (plain_n1.signature(), &plain_n1.sig));
        let mock = Mock::default();
        let mut cache = GraphCache::with_driver(mock.clone(), 8);
        run(&mut cache, record(P)).unwrap();
        let c = mock.calls();
        let programmatic = c.iter().filter(|c| c.ends_with("programmatic=1")).count();
        assert_eq!(programmatic, 2, "{c:?}");
        assert_eq!(cache.edges(), record(P).edge_kinds());
        // The same topology with a plain n1 is another variant, with a plain edge into it.
        run(&mut cache, record(F)).unwrap();
        let c = mock.calls();
        assert_eq!(c.iter().filter(|c| c.ends_with("programmatic=1")).count(), 1, "{c:?}");
        let s = cache.stats();
        assert_eq!((s.builds, s.programmatic_edges, cache.len()), (2, 3, 2), "{s:?}");
    }

    #[test]
    fn another_parameter_list_is_another_variant() {
        let sig = |wide: bool| {
            let mut rec = Recording::new(20);
            let (_, w) = buf(&mut rec, 0x100);
            if wide {
                rec.kernel(at(), F, DIMS, &(1u64, w));
            } else {
                rec.kernel(at(), F, DIMS, &(1u32, w));
            }
            (rec.signature(), rec.sig)
        };
        assert_eq!(sig(true), sig(true));
        assert_ne!(sig(true), sig(false));
    }

    fn invalid(rec: &Recording) -> (String, u32) {
        match &rec.error {
            Some(Error::InvalidNode { site, why }) => (why.clone(), site.line),
            e => panic!("expected InvalidNode, got {e:?}"),
        }
    }

    #[test]
    fn a_handle_of_another_builder_is_refused_with_the_node_site() {
        let mut other = Recording::new(2);
        let (r, _) = buf(&mut other, 0x100);
        let mut rec = Recording::new(3);
        let (_, w) = buf(&mut rec, 0x200);
        let line = line!() + 1;
        rec.kernel(at(), F, DIMS, &(1u32, r, w));
        let (why, l) = invalid(&rec);
        assert!(why.contains("not registered with this GraphBuilder"), "{why}");
        assert_eq!(l, line);
        // A `graph!` handle (tag 0) is refused too.
        let mut rec = Recording::new(4);
        rec.memset(at(), crate::kind::zero(DevWrite::<u32>::new(0x300, 4, CTX)).raw, 0);
        assert!(invalid(&rec).0.contains("not registered"));
    }

    #[test]
    fn one_buffer_written_twice_in_a_node_is_refused_but_read_twice_is_not() {
        let mut rec = Recording::new(5);
        let (r, w) = buf(&mut rec, 0x100);
        rec.kernel(at(), F, DIMS, &(r, r));
        assert!(rec.error.is_none());
        assert_eq!(rec.accesses.len(), 1, "two reads of one place are one access");
        rec.kernel(at(), F, DIMS, &(r, w));
        assert!(invalid(&rec).0.contains("passed twice to one node, and written"));
        let mut rec = Recording::new(6);
        let (r, w) = buf(&mut rec, 0x100);
        rec.memcpy(at(), copy(r, w).raw, r.tag, w.tag);
        assert!(invalid(&rec).0.contains("passed twice"));
    }

    #[test]
    fn after_must_name_an_earlier_node_of_the_same_builder() {
        let mut rec = Recording::new(7);
        let (_, w) = buf(&mut rec, 0x100);
        let n0 = rec.memset(at(), crate::kind::zero(w).raw, w.tag);
        let n1 = rec.memset(at(), crate::kind::zero(w).raw, w.tag);
        rec.after(n0, &[n1], Location::caller());
        assert!(invalid(&rec).0.contains("not earlier"), "{:?}", rec.error);
        let mut rec = Recording::new(8);
        let (_, w) = buf(&mut rec, 0x100);
        rec.memset(at(), crate::kind::zero(w).raw, w.tag);
        rec.after(n1, &[], Location::caller());
        assert!(invalid(&rec).0.contains("another GraphBuilder"));
    }

    fn run(cache: &mut GraphCache<Mock>, rec: Recording) -> Result<()> {
        run_with(cache, rec, &[])
    }

    /// Runs `rec` on the mock driver, its captured nodes being `captures`.
    fn run_with(
        cache: &mut GraphCache<Mock>,
        mut rec: Recording,
        captures: &[Box<dyn CapturedWork + '_>],
    ) -> Result<()> {
        let key = rec.signature();
        let rec = &rec;
        let views: Vec<KernelView<'_>> = rec.kernel_views().collect();
        let nodes = rec.params(&views, captures, &[], &[]);
        let call = GraphCall { shape: rec, site: Site::Builder, key, signature: &rec.sig };
        cache.run_shape(call, (CTX, None), STREAM, &nodes)
    }

    #[test]
    fn one_topology_is_one_variant_updated_in_place() {
        let mock = Mock::default();
        let mut cache = GraphCache::with_driver(mock.clone(), 8);
        let rec = |id, bufs, scalar| {
            let mut r = Recording::new(id);
            chain(&mut r, bufs, scalar);
            r
        };
        run(&mut cache, rec(10, [0x100, 0x200, 0x300, 0x400], 1)).unwrap();
        let built = mock.calls();
        assert_eq!(built.iter().filter(|c| c.starts_with("add_")).count(), 4, "{built:?}");
        assert!(built.contains(&"add_memset deps=1".to_string()), "after edge: {built:?}");
        // Same topology, new builder, a scalar changed and two buffers swapped: set-params only.
        run(&mut cache, rec(11, [0x200, 0x100, 0x300, 0x400], 1)).unwrap();
        let c = mock.calls();
        assert_eq!(c.iter().filter(|c| c.starts_with("set_kernel")).count(), 2, "{c:?}");
        assert!(!c.iter().any(|c| c.starts_with("add_") || c == "instantiate"), "{c:?}");
        run(&mut cache, rec(12, [0x200, 0x100, 0x300, 0x400], 1)).unwrap();
        assert_eq!(mock.calls(), ["launch"]);
        // Another topology: a second variant; then the first is hit again.
        let mut r = Recording::new(13);
        let (_, w) = buf(&mut r, 0x100);
        r.memset(at(), crate::kind::zero(w).raw, w.tag);
        run(&mut cache, r).unwrap();
        run(&mut cache, rec(14, [0x200, 0x100, 0x300, 0x400], 1)).unwrap();
        let s = cache.stats();
        assert_eq!((s.builds, s.hits, s.launches, cache.len()), (2, 3, 5, 2), "{s:?}");
    }

    /// The words of a recording's kernel node of `func` and `dims` whose arguments `args`
    /// makes (see `KernelView::pack`).
    fn kernel_words<A: KernelArgs>(
        (func, programmatic): (CUfunction, bool),
        dims: LaunchDims,
        args: impl Fn(&mut Recording) -> A,
    ) -> Vec<u64> {
        let mut r = Recording::new(30);
        let a = args(&mut r);
        r.kernel(at(), (func, None, programmatic), dims, &a);
        assert!(r.error.is_none(), "{:?}", r.error);
        let view = r.kernel_views().next().expect("a kernel node");
        let mut out = Vec::new();
        let packed =
            crate::kind::kernel::write_node(None, &mut out, &|p: &mut Pack<'_>| view.pack(p));
        assert!(packed);
        out
    }

    /// A builder's kernel node packs everything its exec node and `validate` depend on: equal
    /// parameters give equal words, and a change to any one of them (a scalar, an address, a
    /// context, a device scalar's length, a condition's slot, the function, the dimensions,
    /// `#[programmatic]`, how the bytes split into arguments) other words.
    #[test]
    fn a_builder_kernel_s_words_change_with_every_parameter() {
        const OTHER: CUcontext = 0x2000 as CUcontext;
        let f = (F.0, false);
        let dims5 = LaunchDims { grid: (5, 1, 1), ..DIMS };
        let one = |r: &mut Recording, ptr: u64, len: usize, ctx: CUcontext| {
            DevWrite::<u32>::new(ptr, len, ctx).with_tag(r.new_place(), Token(()))
        };
        let base = |r: &mut Recording| (1u32, buf(r, 0x100).1);
        let cond = |slot: u32| {
            move |r: &mut Recording| {
                r.slots.resize(slot as usize + 1, false);
                (1u32, crate::Condition::new(slot, 1, r.id))
            }
        };
        let scalar = |len: usize| {
            move |r: &mut Recording| (1u32, crate::DeviceScalar::new(one(r, 0x100, len, CTX)))
        };
        let variants: Vec<(&str, Vec<u64>)> = vec![
            ("base", kernel_words(f, DIMS, base)),
            ("scalar", kernel_words(f, DIMS, |r| (2u32, buf(r, 0x100).1))),
            ("address", kernel_words(f, DIMS, |r| (1u32, buf(r, 0x200).1))),
            ("context", kernel_words(f, DIMS, |r| (1u32, one(r, 0x100, 16, OTHER)))),
            ("function", kernel_words((0x11 as CUfunction, false), DIMS, base)),
            ("programmatic", kernel_words((F.0, true), DIMS, base)),
            ("dims", kernel_words(f, dims5, base)),
            ("split", kernel_words(f, DIMS, |r| (1u16, 0u16, buf(r, 0x100).1))),
            ("device scalar", kernel_words(f, DIMS, scalar(1))),
            ("device scalar of 2", kernel_words(f, DIMS, scalar(2))),
            ("condition", kernel_words(f, DIMS, cond(0))),
            ("condition of slot 1", kernel_words(f, DIMS, cond(1))),
        ];
        assert_eq!(variants[0].1, kernel_words(f, DIMS, base), "equal parameters, equal words");
        for (i, (a, wa)) in variants.iter().enumerate() {
            for (b, wb) in &variants[i + 1..] {
                assert_ne!(wa, wb, "{a} and {b} packed alike");
            }
        }
    }

    /// A builder call equal to the last one is an unchanged call (nothing sent but the launch,
    /// no validation), and builders alternating between two or three sets of buffers launch
    /// memoized execs after the first round, as `graph!` calls do: no node set, no build.
    #[test]
    fn builder_calls_are_unchanged_calls_and_memo_hits() {
        for sets in [2usize, 3] {
            let mock = Mock::default();
            let mut cache = GraphCache::with_driver(mock.clone(), 8);
            let bufs = |k: usize| {
                let k = k as u64 % sets as u64;
                [0x1000 + k * 0x100, 0x2000 + k * 0x100, 0x3000, 0x4000 + k * 0x100]
            };
            let rec = |id: u64, k: usize| {
                let mut r = Recording::new(id);
                chain(&mut r, bufs(k), 7);
                r
            };
            run(&mut cache, rec(100, 0)).unwrap();
            mock.calls();
            run(&mut cache, rec(101, 0)).unwrap();
            assert_eq!(mock.calls(), ["launch"], "an equal builder");
            let s = cache.stats();
            assert_eq!(s.unchanged_calls, 1, "{s:?}");
            // Two rounds: a set gets an exec of its own when it comes back (its words were
            // among the last few changed calls'), until the variant has one per set.
            for k in 1..=2 * sets {
                run(&mut cache, rec(102 + k as u64, k)).unwrap();
            }
            mock.calls();
            let before = cache.stats();
            for k in 0..20 {
                run(&mut cache, rec(200 + k as u64, 2 * sets + 1 + k)).unwrap();
                assert_eq!(mock.calls(), ["launch"], "{sets} sets, call {k}");
            }
            let s = cache.stats();
            assert_eq!(s.memo_hits - before.memo_hits, 20, "{s:?}");
            let execs = (s.builds, s.memo_builds, cache.len());
            assert_eq!(execs, (sets as u64, sets as u64 - 1, sets), "{s:?}");
        }
    }

    /// A builder's readback node (`GraphBuilder::copy` into pinned memory) is recorded as the
    /// kernel node it is: the readback's function, dimensions, four arguments' bytes and the
    /// two addresses' contexts, reading its source and writing its destination (so it follows
    /// the kernel that writes the source). On the mock driver it is added as a kernel node; an
    /// equal builder sends nothing, a new destination is one kernel set-params.
    #[test]
    fn a_readback_node_is_recorded_as_its_kernel_node() {
        let mock = Mock::default();
        let mut cache = GraphCache::with_driver(mock.clone(), 8);
        let func = 0x30 as CUfunction;
        let rec = |id, dst: u64| {
            let mut r = Recording::new(id);
            let (a_read, a_write) = buf(&mut r, 0x100);
            let (_, out) = buf(&mut r, dst);
            r.kernel(at(), F, DIMS, &(1u32, a_write));
            let rb = crate::ReadbackNode::for_test(func, 0x100, dst, 2, CTX)
                .with_tags(a_read.tag, out.tag);
            r.readback(at(), &rb);
            (r, rb)
        };
        let (r, rb) = rec(10, 0x4000);
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.edges(&[true; 2]), [(0, 1)], "after the kernel writing its source");
        assert_eq!(r.accesses[r.nodes[1].accesses.clone()].len(), 2);
        let acc: Vec<_> =
            r.accesses[r.nodes[1].accesses.clone()].iter().map(|a| (a.place, a.write)).collect();
        assert_eq!(acc, [(0, false), (1, true)], "source read, destination written");
        let views: Vec<_> = r.kernel_views().collect();
        assert_eq!(views.len(), 2);
        let v = &views[1];
        assert_eq!((v.function(), v.dims(), v.arg_count()), (func, rb.dims(), 4));
        assert_eq!(v.pointer_args(), 0b11, "both addresses are pointers");
        let (mut got, mut want) = (Vec::new(), Vec::new());
        v.for_each_arg(&mut |b| got.push(b.to_vec()));
        rb.for_each_arg(&mut |b| want.push(b.to_vec()));
        assert_eq!(got, want, "the readback's argument bytes");
        let mut ctxs = crate::operand::NO_ACCESSES;
        assert_eq!(KernelNode::accesses(v, &mut ctxs), 2);
        assert_eq!((ctxs[0].2, ctxs[1].2), (CTX, CTX));
        run(&mut cache, r).unwrap();
        let built = mock.calls();
        assert_eq!(built.iter().filter(|c| c.starts_with("add_kernel")).count(), 2, "{built:?}");
        assert!(!built.iter().any(|c| c.starts_with("add_memcpy")), "{built:?}");
        run(&mut cache, rec(11, 0x4000).0).unwrap();
        assert_eq!(mock.calls(), ["launch"], "an equal builder");
        run(&mut cache, rec(12, 0x5000).0).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=1", "launch"], "another destination");
    }

    fn scratch(rec: &mut Recording, bytes: usize) -> (crate::FreeParams<'static>, u64) {
        let tag = rec.new_place();
        let slot = place_of(tag, rec.id).unwrap();
        let a = crate::AllocParams::for_test_tagged(slot, bytes, tag, CTX);
        let f = crate::FreeParams::for_test_tagged(slot, tag, CTX);
        rec.alloc(at(), a, f);
        (f, tag)
    }

    #[test]
    fn graph_owned_buffers_are_freed_once_after_their_last_use_and_never_used_after() {
        let mut rec = Recording::new(40);
        let (_, w) = buf(&mut rec, 0x100);
        let (_, t) = scratch(&mut rec, 64);
        let (f2, t2) = scratch(&mut rec, 32);
        let ph = DevWrite::<u32>::new(crate::kind::alloc::placeholder(1), 16, CTX);
        let tw = ph.with_tag(t, Token(()));
        rec.kernel(at(), F, DIMS, &(1u32, tw));
        let u = DevWrite::<u32>::new(crate::kind::alloc::placeholder(2), 8, CTX);
        let uw = u.with_tag(t2, Token(()));
        rec.kernel(at(), F, DIMS, &(tw.read(), uw));
        rec.free(at(), f2);
        rec.kernel(at(), F, DIMS, &(tw.read(), w));
        assert!(rec.error.is_none(), "{:?}", rec.error);
        rec.free_remaining();
        assert!(rec.error.is_none(), "{:?}", rec.error);
        let kinds: Vec<&str> = rec
            .nodes
            .iter()
            .map(|n| match n.kind {
                RecKind::MemAlloc(_) => "alloc",
                RecKind::MemFree(_) => "free",
                RecKind::Kernel(_) => "kernel",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["alloc", "alloc", "kernel", "kernel", "free", "kernel", "free"]);
        // Every use of `t` is ordered after its alloc (node 0) and before its free (node 6), the
        // use of `u` between its alloc (1) and free (4); the two reads of `t` are unordered.
        let mut edges = Shape::edges(&rec, &[true; 7]);
        edges.sort_unstable();
        assert_eq!(edges, [(0, 2), (1, 3), (2, 3), (2, 5), (3, 4), (3, 6), (5, 6)]);
        // A use after the free, and a second free, are refused.
        let mut bad = Recording::new(41);
        let (f, t) = scratch(&mut bad, 64);
        bad.free(at(), f);
        let tw = DevWrite::<u32>::new(crate::kind::alloc::placeholder(0), 16, CTX)
            .with_tag(t, Token(()));
        bad.kernel(at(), F, DIMS, &(1u32, tw));
        assert!(invalid(&bad).0.contains("used after its free node"), "{:?}", bad.error);
        let mut twice = Recording::new(42);
        let (f, _) = scratch(&mut twice, 64);
        twice.free(at(), f);
        twice.free(at(), f);
        assert!(twice.error.is_some());
        // Zero bytes is refused at launch by validation (the cache), not here.
        let mut body = Recording::new(43);
        body.scope = Some((0, 0));
        scratch(&mut body, 64);
        assert!(invalid(&body).0.contains("inside a device body"));
        // So is a free inside a device body (it would run never or many times).
        let mut freed_in_body = Recording::new(44);
        let (f, _) = scratch(&mut freed_in_body, 64);
        freed_in_body.scope = Some((0, 0));
        freed_in_body.free(at(), f);
        assert!(invalid(&freed_in_body).0.contains("freed inside a device body"));
    }

    #[test]
    fn a_graph_owned_buffer_of_zero_bytes_is_empty_at_launch() {
        // `GraphBuilder::alloc(0)`: recorded without error, refused by the cache's validation
        // with `Error::Empty` (as a 0-byte copy or memset) before any driver call.
        let mut rec = Recording::new(45);
        scratch(&mut rec, 0);
        rec.free_remaining();
        assert!(rec.error.is_none(), "{:?}", rec.error);
        let mock = Mock::default();
        let mut cache = GraphCache::with_driver(mock.clone(), 8);
        let e = run(&mut cache, rec).unwrap_err();
        assert!(matches!(e, Error::Empty { what: "graph-owned allocation", .. }), "{e}");
        assert!(mock.calls().is_empty(), "{:?}", mock.calls());
    }

    #[track_caller]
    fn cap_at() -> NodeSite {
        site("capture", "GraphBuilder::capture", Location::caller())
    }

    /// n0 kernel writes a; n1 captured reads a, writes b; n2 kernel reads b, writes c; n3 zeroes
    /// a (after n1's read of it).
    fn with_capture(rec: &mut Recording, bufs: [u64; 3]) {
        let [a, b, c] = bufs.map(|p| buf(rec, p));
        rec.kernel(at(), F, DIMS, &(1u32, a.1));
        rec.captured(cap_at(), 0, true, &(a.0, b.1));
        rec.kernel(at(), F, DIMS, &(1u32, b.0, c.1));
        rec.memset(at(), crate::kind::zero(a.1).raw, a.1.tag);
    }

    #[test]
    fn a_captured_node_accesses_its_operands_and_is_ordered_by_their_hazards() {
        let mut rec = Recording::new(40);
        with_capture(&mut rec, [0x100, 0x200, 0x300]);
        assert!(rec.error.is_none(), "{:?}", rec.error);
        let n = &rec.nodes[1];
        assert_eq!(n.site.label, "capture");
        assert!(matches!(n.kind, RecKind::Captured(0)));
        let acc: Vec<(u32, bool)> =
            rec.accesses[n.accesses.clone()].iter().map(|a| (a.place, a.write)).collect();
        assert_eq!(acc, [(0, false), (1, true)]);
        // Read after write of a, then of b; the memset of a waits for the captured read of a
        // (write after read), which already follows n0 (reduced away).
        assert_eq!(rec.edges(&[true; 4]), [(0, 1), (1, 2), (1, 3)]);
    }

    #[test]
    fn a_captured_node_is_its_own_kind_in_the_signature() {
        let sig = |captured: bool, order: [u64; 3]| {
            let mut rec = Recording::new(41);
            if captured {
                with_capture(&mut rec, order);
            } else {
                // The same accesses, with a kernel where the capture was.
                let [a, b, c] = order.map(|p| buf(&mut rec, p));
                rec.kernel(at(), F, DIMS, &(1u32, a.1));
                rec.kernel(at(), F, DIMS, &(a.0, b.1));
                rec.kernel(at(), F, DIMS, &(1u32, b.0, c.1));
                rec.memset(at(), crate::kind::zero(a.1).raw, a.1.tag);
            }
            (rec.signature(), rec.sig)
        };
        // Other buffers, same topology: one variant, whatever the closures record.
        assert_eq!(sig(true, [0x100, 0x200, 0x300]), sig(true, [0x300, 0x100, 0x200]));
        assert_ne!(sig(true, [0x100, 0x200, 0x300]), sig(false, [0x100, 0x200, 0x300]));
        // Another access mode of one operand: another topology.
        let mut rec = Recording::new(42);
        let [a, b] = [0x100, 0x200].map(|p| buf(&mut rec, p));
        rec.captured(cap_at(), 0, true, &(a.0, b.1));
        let mut other = Recording::new(43);
        let [a2, b2] = [0x100, 0x200].map(|p| buf(&mut other, p));
        other.captured(cap_at(), 0, true, &(a2.1, b2.1));
        assert_ne!((rec.signature(), rec.sig), (other.signature(), other.sig));
    }

    #[test]
    fn a_captured_node_refuses_foreign_handles_a_buffer_written_twice_and_another_stream() {
        let mut other = Recording::new(44);
        let (r, _) = buf(&mut other, 0x100);
        let mut rec = Recording::new(45);
        let (_, w) = buf(&mut rec, 0x200);
        let line = line!() + 1;
        rec.captured(cap_at(), 0, true, &(r, w));
        let (why, l) = invalid(&rec);
        assert!(why.contains("not registered with this GraphBuilder"), "{why}");
        assert_eq!(l, line);
        assert!(
            matches!(&rec.error, Some(Error::InvalidNode { site, .. }) if site.label == "capture")
        );
        let mut rec = Recording::new(46);
        let (r, w) = buf(&mut rec, 0x100);
        rec.captured(cap_at(), 0, true, &(r, w));
        assert!(invalid(&rec).0.contains("passed twice"));
        let mut rec = Recording::new(47);
        let (r, _) = buf(&mut rec, 0x100);
        let line = line!() + 1;
        rec.captured(cap_at(), 0, false, &(r,));
        let (why, l) = invalid(&rec);
        assert!(why.contains("not this GraphBuilder's stream"), "{why}");
        assert_eq!(l, line);
    }

    /// A captured node as the cache sees it, without a GPU: its operands' accesses and no
    /// recording (the mock driver reads no child graph).
    struct FakeCapture<H>(H);
    impl<H> crate::operand::sealed::Sealed for FakeCapture<H> {}
    impl<H: CaptureOperands> CapturedWork for FakeCapture<H> {
        fn accesses(&self, out: &mut crate::operand::Accesses) -> usize {
            self.0.accesses(out)
        }
        unsafe fn record(&self, _: &dyn Fn() -> NodeSite) -> Result<()> {
            Ok(())
        }
        fn recorded(&self) -> Option<Arc<crate::kind::captured::OwnedGraph>> {
            None
        }
        unsafe fn run_eager(&self, _: &dyn Fn() -> NodeSite) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_builder_graph_with_a_captured_node_is_one_variant_whose_child_graph_is_set_every_call() {
        let mock = Mock::default();
        let mut cache = GraphCache::with_driver(mock.clone(), 8);
        let call = |cache: &mut GraphCache<Mock>, id, bufs: [u64; 3]| {
            let mut rec = Recording::new(id);
            with_capture(&mut rec, bufs);
            let h = |i: u32| {
                DevWrite::<u32>::new(bufs[i as usize], 16, CTX).with_tag(tag(id, i), Token(()))
            };
            let captures: Vec<Box<dyn CapturedWork>> =
                vec![Box::new(FakeCapture((h(0).read(), h(1))))];
            run_with(cache, rec, &captures)
        };
        call(&mut cache, 50, [0x100, 0x200, 0x300]).unwrap();
        let built = mock.calls();
        assert!(built.contains(&"add_graph deps=1".to_string()), "{built:?}");
        // Buffers swapped: the kernels' pointers and the child graph are set; nothing rebuilt.
        call(&mut cache, 51, [0x200, 0x100, 0x300]).unwrap();
        let c = mock.calls();
        assert!(c.contains(&"set_graph".to_string()), "{c:?}");
        assert!(!c.iter().any(|c| c.starts_with("add_") || c == "instantiate"), "{c:?}");
        let s = cache.stats();
        assert_eq!((s.builds, s.hits, cache.len()), (1, 1, 1), "{s:?}");
    }

    /// A node of [`walk_recording`]'s recordings: a kernel `(u32, buffer)` writing its own
    /// buffer, a 1-D memset of its own buffer, a copy from its own buffer into another (all
    /// three pack words), or an empty node (none: a call with one takes no words).
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum WalkNode {
        Kernel,
        Memset,
        Copy,
        Empty,
    }

    /// A [`WalkNode`]'s parameters: a kernel's scalar, grid and buffer address, or a memset's or
    /// copy's buffer address.
    #[derive(Clone, Copy, Debug)]
    struct WalkParams {
        scalar: u32,
        ptr: u64,
        grid: u32,
    }

    /// Node `i`'s buffer address of set `set`.
    fn walk_ptr(i: usize, set: u32) -> u64 {
        0x10_0000 + 0x100 * i as u64 + 0x1_0000 * u64::from(set)
    }

    /// A builder of the nodes `topo` with the parameters `ps`.
    fn walk_recording(id: u64, topo: &[WalkNode], ps: &[WalkParams]) -> Recording {
        let mut r = Recording::new(id);
        for (i, (n, p)) in topo.iter().zip(ps).enumerate() {
            match n {
                WalkNode::Kernel => {
                    let (_, w) = buf(&mut r, p.ptr);
                    let dims = LaunchDims { grid: (p.grid, 1, 1), ..DIMS };
                    r.kernel(at(), F, dims, &(p.scalar, w));
                }
                WalkNode::Memset => {
                    let (_, w) = buf(&mut r, p.ptr);
                    r.memset(at(), crate::kind::zero(w).raw, w.tag);
                }
                WalkNode::Copy => {
                    let (s, _) = buf(&mut r, p.ptr);
                    let (_, d) = buf(&mut r, 0x90_0000 + 0x100 * i as u64);
                    r.memcpy(at(), copy(s, d).raw, s.tag, d.tag);
                }
                WalkNode::Empty => {
                    r.push(at(), RecKind::Empty, &[]);
                }
            }
        }
        assert!(r.error.is_none(), "{:?}", r.error);
        r
    }

    /// The arguments of [`walk_recording`]'s kernel nodes, in order, as the mock reads them.
    fn walk_kernels(topo: &[WalkNode], ps: &[WalkParams]) -> Vec<Vec<Vec<u8>>> {
        let kernels = topo.iter().zip(ps).filter(|(n, _)| **n == WalkNode::Kernel);
        kernels
            .map(|(_, p)| vec![p.scalar.to_ne_bytes().to_vec(), p.ptr.to_ne_bytes().to_vec()])
            .collect()
    }

    /// A builder call that changes kernels of a 10-node builder (8 kernels, a memset and a
    /// copy between them) sends exactly the changed ones, wherever they are (the first, the
    /// last, around the memset and the copy, several at once), and nothing for the kernels
    /// equal to the exec's (clean: their words copied from the call's, by span); a refused call
    /// sends nothing and leaves the exec as it was, so the next call sends what differs from
    /// that; after a `graph!` call on the same cache the builder's graph is built again, and
    /// changed calls go on sending only their changes. After every call the exec launched holds
    /// the call's kernel parameters.
    #[test]
    fn a_changed_builder_call_sends_exactly_its_changed_kernels() {
        use crate::cache::tests::{kernel_plan, run_words_kernels, walk_cache, wk};
        use WalkNode::{Copy as C, Kernel as K, Memset as M};
        let topo = [K, K, K, M, K, K, C, K, K, K];
        let (mock, mut cache) = walk_cache(false, 1, 8);
        mock.track();
        let mut ps: Vec<WalkParams> =
            (0..10).map(|i| WalkParams { scalar: 1, ptr: walk_ptr(i, 0), grid: 4 }).collect();
        let mut id = 500;
        let args =
            |p: &WalkParams| vec![p.scalar.to_ne_bytes().to_vec(), p.ptr.to_ne_bytes().to_vec()];
        let mut go = |cache: &mut GraphCache<Mock>, ps: &[WalkParams]| {
            id += 1;
            run(cache, walk_recording(id, &topo, ps))
        };
        go(&mut cache, &ps).unwrap();
        mock.calls();
        let kernels: Vec<usize> = (0..10).filter(|&i| topo[i] == K).collect();
        // Each kernel alone, then pairs: the first and last, around the memset, around the
        // copy, the memset's neighbours with a buffer, a scalar and a buffer of one node.
        let mut changes: Vec<Vec<(usize, u8, u32)>> =
            kernels.iter().map(|&j| vec![(j, 0, 10 + j as u32)]).collect();
        changes.extend([
            vec![(0, 0, 40), (9, 0, 41)],
            vec![(2, 1, 1), (4, 1, 1)],
            vec![(5, 0, 42), (7, 0, 43)],
            vec![(1, 1, 2), (2, 0, 44), (8, 1, 2)],
            vec![(4, 0, 45), (4, 1, 2)],
            vec![(9, 1, 1)],
            vec![(0, 1, 1)],
        ]);
        for (c, cs) in changes.iter().enumerate() {
            walk_apply(&mut ps, cs);
            let mut changed: Vec<usize> = cs.iter().map(|x| x.0).collect();
            changed.sort_unstable();
            changed.dedup();
            let seen = cache.clean_seen;
            go(&mut cache, &ps).unwrap();
            let mut want = vec!["set_kernel grid=4".to_string(); changed.len()];
            want.push("launch".into());
            assert_eq!(mock.calls(), want, "change {c}: {cs:?}");
            let sent: Vec<_> = changed.iter().map(|&j| args(&ps[j])).collect();
            assert_eq!(mock.take_set_args(), sent, "change {c}: {cs:?}");
            assert_eq!(cache.clean_seen - seen, (8 - changed.len()) as u64, "change {c}");
            assert_eq!(mock.launched_kernels(), walk_kernels(&topo, &ps), "change {c}");
            go(&mut cache, &ps).unwrap();
            assert_eq!(mock.calls(), ["launch"], "change {c} again: an unchanged call");
        }
        // The memset's buffer alone: the memset sent, every kernel clean.
        ps[3].ptr = walk_ptr(3, 1);
        let seen = cache.clean_seen;
        go(&mut cache, &ps).unwrap();
        assert_eq!(mock.calls(), ["set_memset value=0", "launch"]);
        assert_eq!(cache.clean_seen - seen, 8);
        // Refused (node 5's grid 0) with node 1 changed: nothing sent; node 5 fixed, node 1
        // still changed: node 1 sent, and node 6's copy buffer with it.
        ps[1].scalar = 77;
        ps[5].grid = 0;
        let e = go(&mut cache, &ps).unwrap_err();
        assert!(matches!(e, Error::ZeroDims { .. }), "{e}");
        assert!(mock.calls().is_empty());
        ps[5].grid = 4;
        ps[6].ptr = walk_ptr(6, 2);
        go(&mut cache, &ps).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "set_memcpy bytes=64", "launch"]);
        assert_eq!(mock.take_set_args(), [args(&ps[1])]);
        assert_eq!(mock.launched_kernels(), walk_kernels(&topo, &ps));
        // A `graph!` call on the same cache, then the builder: built again; then one change.
        let plan = kernel_plan(10);
        let ks: Vec<_> = (0..10).map(|n| wk(n, 3, 0xa000 + 0x100 * n as u64)).collect();
        let guards: Vec<(u64, u64)> = ks.iter().map(|k| (k.ptr, 4)).collect();
        run_words_kernels(&mut cache, plan, &ks.iter().collect::<Vec<_>>(), &guards, None).unwrap();
        go(&mut cache, &ps).unwrap();
        assert!(mock.calls().contains(&"instantiate".to_string()));
        assert_eq!(mock.launched_kernels(), walk_kernels(&topo, &ps));
        mock.take_set_args();
        ps[8].scalar = 88;
        go(&mut cache, &ps).unwrap();
        assert_eq!(mock.calls(), ["set_kernel grid=4", "launch"]);
        assert_eq!(mock.take_set_args(), [args(&ps[8])]);
        assert_eq!(mock.launched_kernels(), walk_kernels(&topo, &ps));
    }

    /// One step of [`builder_calls_send_what_the_full_walk_sends`].
    #[derive(Clone, Debug)]
    enum WalkStep {
        /// A builder call with these changes `(node, what, value)` (the node modulo the
        /// recording's; `what`: 0 a kernel's scalar, 1 a node's buffer set, 2 a kernel's grid,
        /// 0 refused) kept for the calls after; none: a call equal to the last.
        Change(Vec<(usize, u8, u32)>),
        /// A `graph!` call of 10 kernels of scalar `.0` on the same caches (another site: the
        /// builder's graphs go), through the node list or (`.1`) with words made as its
        /// statements are evaluated, then the builder call again.
        Graph(u32, bool),
        /// A builder call of another topology (one more kernel: another variant), then the
        /// builder call again.
        Other,
        /// The mock drivers refuse per-node set-params (`.0`) and whole-exec updates (`.1`) for
        /// this call and the ones after, and the call has changes `.2`.
        Refuse(bool, bool, Vec<(usize, u8, u32)>),
        /// `Mode::Instantiate` (uploads, no launch) or `Mode::Graph` from this call on.
        Instantiate(bool),
        /// Every node's buffer from set `.0` (ping-pong buffers: calls come back to memoized
        /// execs).
        Swap(u32),
    }

    fn walk_changes() -> impl proptest::strategy::Strategy<Value = Vec<(usize, u8, u32)>> {
        use proptest::prelude::*;
        let change = prop_oneof![
            4 => (0..16usize, Just(0u8), 1..4u32),
            4 => (0..16usize, Just(1u8), 0..3u32),
            1 => (0..16usize, Just(2u8), prop::sample::select(vec![0u32, 4, 8])),
        ];
        prop::collection::vec(change, 0..3)
    }

    fn walk_step() -> impl proptest::strategy::Strategy<Value = WalkStep> {
        use proptest::prelude::*;
        prop_oneof![
            8 => walk_changes().prop_map(WalkStep::Change),
            1 => (1..4u32, any::<bool>()).prop_map(|(v, w)| WalkStep::Graph(v, w)),
            1 => Just(WalkStep::Other),
            1 => (any::<bool>(), any::<bool>(), walk_changes())
                .prop_map(|(s, u, c)| WalkStep::Refuse(s, u, c)),
            1 => any::<bool>().prop_map(WalkStep::Instantiate),
            8 => (0..3u32).prop_map(WalkStep::Swap),
        ]
    }

    fn walk_topology() -> impl proptest::strategy::Strategy<Value = Vec<WalkNode>> {
        use proptest::prelude::*;
        let node = prop_oneof![
            8 => Just(WalkNode::Kernel),
            1 => Just(WalkNode::Memset),
            1 => Just(WalkNode::Copy),
        ];
        // An empty node in one place, in a quarter of the cases.
        let empty = prop_oneof![3 => Just(None), 1 => (0..16usize).prop_map(Some)];
        (prop::collection::vec(node, 8..13), empty).prop_map(|(mut t, e)| {
            if let Some(e) = e {
                let at = e % (t.len() + 1);
                t.insert(at, WalkNode::Empty);
            }
            t
        })
    }

    /// Applies the changes `cs` to `ps` (see [`WalkStep::Change`]).
    fn walk_apply(ps: &mut [WalkParams], cs: &[(usize, u8, u32)]) {
        for &(n, what, v) in cs {
            let i = n % ps.len();
            match what {
                0 => ps[i].scalar = v,
                1 => ps[i].ptr = walk_ptr(i, v),
                _ => ps[i].grid = v,
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Builder calls (8 to 13 nodes: kernels, memsets, copies, at times an empty node),
        /// each changing none, one or several nodes anywhere (scalars, buffers from three sets,
        /// so that calls come back to memoized execs, grids, some refused), between `graph!`
        /// calls and calls of another topology on the same cache, refused set-params and
        /// updates, and `Mode::Instantiate`: against the full walk (`no_clean`: every node of
        /// a changed call validated and compared), the same results, the same driver calls
        /// with the same arguments, the same counts; and after each call that succeeded, the
        /// exec launched holds that call's kernel parameters, node for node. A node taken for
        /// clean that had changed (words copied from the wrong node or an earlier call) would
        /// send nothing where the full walk sends, and leave the exec with the old parameters.
        #[test]
        fn builder_calls_send_what_the_full_walk_sends(
            execs in 1..4usize,
            max in proptest::sample::select(vec![2usize, 8]),
            topo in walk_topology(),
            steps in proptest::collection::vec(walk_step(), 1..30),
        ) {
            use crate::cache::tests::{kernel_plan, refuse, run_kernels, run_words_kernels};
            use crate::cache::tests::{kernel_args, same_as_full_walk, walk_cache, wk};
            use proptest::prelude::*;
            let (ma, mut a) = walk_cache(false, execs, max);
            let (mb, mut b) = walk_cache(true, execs, max);
            ma.track();
            mb.track();
            let plan = kernel_plan(10);
            let mut ps: Vec<WalkParams> = (0..topo.len())
                .map(|i| WalkParams { scalar: 1, ptr: walk_ptr(i, 0), grid: 4 })
                .collect();
            let mut other = topo.clone();
            other.push(WalkNode::Kernel);
            let mut id = 1000;
            for (i, s) in steps.iter().enumerate() {
                // Each call: a builder's nodes, or a `graph!` call's scalar and words.
                type Calls = Vec<(Vec<WalkNode>, Option<(u32, bool)>)>;
                let mut calls: Calls = Vec::new();
                match s {
                    WalkStep::Change(cs) => walk_apply(&mut ps, cs),
                    WalkStep::Graph(v, w) => calls.push((Vec::new(), Some((*v, *w)))),
                    WalkStep::Other => calls.push((other.clone(), None)),
                    WalkStep::Refuse(set, update, cs) => {
                        refuse([&ma, &mb], (*set, *update));
                        walk_apply(&mut ps, cs);
                    }
                    WalkStep::Swap(v) => {
                        for (j, p) in ps.iter_mut().enumerate() {
                            p.ptr = walk_ptr(j, *v);
                        }
                    }
                    WalkStep::Instantiate(on) => {
                        let m = if *on { crate::Mode::Instantiate } else { crate::Mode::Graph };
                        a.set_mode(m);
                        b.set_mode(m);
                    }
                }
                calls.push((topo.clone(), None));
                for (j, (t, graph)) in calls.iter().enumerate() {
                    let what = format!("step {i} {s:?}, call {j}");
                    let (ra, rb, want) = match graph {
                        Some((v, words)) => {
                            let ks: Vec<_> = (0..10).map(|n| wk(n, *v, 0xa000 + 0x100 * n as u64)).collect();
                            let refs: Vec<_> = ks.iter().collect();
                            let guards: Vec<(u64, u64)> = ks.iter().map(|k| (k.ptr, 4)).collect();
                            let go = |c: &mut GraphCache<Mock>| {
                                let r = if *words {
                                    run_words_kernels(c, plan, &refs, &guards, None)
                                } else {
                                    run_kernels(c, plan, &refs)
                                };
                                r.map_err(|e| e.to_string())
                            };
                            let (ra, rb) = (go(&mut a), go(&mut b));
                            let want = kernel_args(&ks);
                            (ra, rb, want)
                        }
                        None => {
                            let mut p = ps.clone();
                            p.resize(t.len(), WalkParams { scalar: 9, ptr: walk_ptr(t.len(), 0), grid: 4 });
                            id += 1;
                            let ra = run(&mut a, walk_recording(id, t, &p)).map_err(|e| e.to_string());
                            let rb = run(&mut b, walk_recording(id, t, &p)).map_err(|e| e.to_string());
                            (ra, rb, walk_kernels(t, &p))
                        }
                    };
                    same_as_full_walk(&what, (&ra, &rb), (&ma, &a), (&mb, &b))?;
                    if ra.is_ok() {
                        prop_assert_eq!(ma.launched_kernels(), want.clone(), "{}: the exec launched", what);
                        prop_assert_eq!(mb.launched_kernels(), want, "{}: the full walk's", what);
                    }
                }
            }
            prop_assert_eq!(b.clean_seen, 0);
        }
    }
}
