//! Graphs assembled at run time: [`GraphBuilder`], the safe API below `graph!` for graphs whose
//! shape is only known when the program runs (generated workloads, graphs of thousands of nodes,
//! randomized tests).

use core::panic::Location;
use std::sync::Arc;

use cudarc::driver::{CudaStream, ValidAsZeroBits};

use crate::cache::recording::{KernelView, RecKind, Recording, site};
use crate::cache::{GraphCache, GraphCall, Nodes, Shape, Site};
use crate::error::{NodeSite, Result};
use crate::kind::{
    CaptureOperands, CaptureParams, CapturedWork, CopyTo, HostOperands, HostParams, HostWork,
    KernelArgs, KernelLaunch, MemsetValueOf,
};
use crate::operand::{DevWrite, Handle, Place, PlaceMut, next_id, place_of, sealed::Token};
use crate::plan::EdgeKind;
use crate::session::Capture;

// For the docs' links (`Error::InvalidNode`, …): the recording, which makes the errors, moved
// to `cache::recording`.
#[cfg(doc)]
use crate::error::Error;

pub use crate::cache::recording::Node;

/// Builds one call's graph at run time, node by node, with the same meaning, checks, caching and
/// update ladder as [`graph!`](crate::graph): edges are the transitive reduction of the data
/// hazards between nodes in the order they were added (read after write, write after read,
/// write after write on the same buffer) plus [`after`](Self::after) edges, so the graph computes
/// what the nodes compute in order on one stream.
///
/// ```no_run
/// # use cudagraph::cudarc::driver::LaunchConfig;
/// # use cudagraph::{kernels, GraphCache};
/// # kernels! { pub struct Heat { fn stencil(n: u32, src: &[f32], dst: &mut [f32]); } }
/// # fn main() -> cudagraph::Result<()> {
/// # let ctx = cudagraph::context(0)?; let stream = ctx.default_stream();
/// # let k: Heat = todo!();
/// let (mut u, mut v) = (stream.alloc_zeros::<f32>(1024)?, stream.alloc_zeros::<f32>(1024)?);
/// let mut cache = GraphCache::new();
/// for step in 0..100 {
///     let mut g = cache.builder(&stream);
///     let (ur, vw) = (g.read(&u), g.write(&mut v)); // borrows u and v until `launch`
///     for _ in 0..step % 3 {
///         g.kernel(k.stencil(1024, ur, vw).launch(LaunchConfig::for_num_elems(1024)));
///     }
///     g.memset(vw, 0.0f32); // after the stencils: it writes what they write
///     g.launch()?;          // 3 cached variants, one per number of stencils
///     std::mem::swap(&mut u, &mut v);
/// }
/// # Ok(()) }
/// ```
///
/// Past [`MAX_REDUCED_NODES`](crate::MAX_REDUCED_NODES) nodes the edges are every direct
/// hazard, not reduced (the reduction's memory grows with the square of the node count).
///
/// Buffers are registered once per builder with [`read`](Self::read) or [`write`](Self::write),
/// which borrow them until the builder is launched or dropped (so nothing can free or touch them
/// while the graph may run) and make the stream wait for earlier work on them (cudarc's events);
/// the returned handles ([`DevRead`](crate::DevRead), [`DevWrite`], …) are the node operands.
/// Handles are `Copy`; [`DevWrite::read`](crate::DevWrite::read) is a read handle of the same
/// buffer; a handle of a one-element buffer is also a device scalar argument (`&T` / `&mut T`
/// in `kernels!`).
/// A kernel launch takes them through the typed methods of a [`kernels!`](crate::kernels) struct;
/// stream work that is not a node of its own (cudarc launches and copies, cuBLAS, cuFFT) is a
/// [`capture`](Self::capture) node, recorded on every launch into a child graph.
/// Handles belong to their builder: to use a buffer in the next builder, register it again
/// (`g2.read(&buf)`); a handle of another builder is refused.
///
/// [`launch`](Self::launch) checks everything, then builds, updates or reuses the cache's graph
/// for this topology and launches it with `cuGraphLaunch`. A [`GraphCache`] holds the graphs of
/// one kind of call: builder graphs are variants told apart by their topology (node kinds,
/// kernels' parameter sizes, operands, `after` edges), compared in full, so any two calls with the same topology share one exec and the
/// second only updates changed parameters. Operands are places numbered by first registration,
/// so buffers swapped between calls stay one variant. Every call is recorded and its handles
/// checked; then, as for `graph!`, when every node is a kernel, a copy or a 1-D memset, the
/// call's parameters are compared as words with the variant's last call: an equal call is an
/// unchanged call (no node checked or sent again, only `cuGraphLaunch`;
/// [`Stats::unchanged_calls`](crate::Stats::unchanged_calls)), and a call equal to another
/// exec the variant keeps (buffers swapped back and forth) launches that exec
/// ([`GraphCache::set_execs_per_variant`], [`Stats::memo_hits`](crate::Stats::memo_hits)).
/// A call with any other node (`capture`, `host`, `alloc`/`free`, device statements, events,
/// child graphs, `memset_2d`, `empty`) compares each node with the exec it updates and sets
/// what changed in place (`cuGraphExecKernelNodeSetParams`, …). A cache used by `graph!` and
/// then by a builder (or the reverse) drops its graphs first.
///
/// Errors (from `launch`; nothing was enqueued, except in [`Mode::Eager`](crate::Mode::Eager)
/// the nodes before a driver error or a `capture` closure's error): [`Error::InvalidNode`] for a
/// handle or node of another builder, an `after` node that is not earlier, one buffer passed
/// twice to a node with a write, or a `capture` given another stream than the builder's; then
/// every error of [`graph!`](crate::graph), including a captured closure's
/// ([`Error::Capture`], [`Error::CaptureInvalidated`]). Each names the node by its label (the
/// kernel's name, `copy`, `memset`, `zero`, `capture`) and the source location of the call that
/// added it.
///
/// Why one buffer passed twice to a node with a write is an error at `launch` here, while
/// `graph!` rejects it at compile time: `graph!` sees the places (`&mut x` and `&x` name the same
/// place `x`), but a builder's handles are `Copy` values made at run time (`let w = g.write(&mut
/// x);` then `k.axpy(n, w.read(), w)`), and which place a handle stands for is a run-time value,
/// so no type can tell two of them apart. The borrow checker still keeps every registered buffer
/// alive and unaliased by other code until `launch`.
///
/// Thread safety: not `Send`; it holds the cache and the buffers' borrows for one call.
pub struct GraphBuilder<'a> {
    cache: &'a mut GraphCache,
    stream: &'a CudaStream,
    rec: Recording,
    /// Record each buffer's use on the stream when dropped, after the launch.
    guards: Vec<crate::operand::Guard<'a>>,
    /// The [`capture`](Self::capture) nodes' operands and closures, in the order they were
    /// added (a captured node of the recording holds its index here), kept until `launch`.
    captures: Vec<Box<dyn CapturedWork + 'a>>,
    /// The closures of `host` nodes, by index.
    hosts: Vec<Box<dyn HostWork + 'a>>,
    /// The events of event nodes, by index.
    events: Vec<&'a Arc<cudarc::driver::CudaEvent>>,
}

impl GraphCache {
    /// A [`GraphBuilder`] for one graph launched on `stream`, cached in this cache.
    pub fn builder<'a>(&'a mut self, stream: &'a CudaStream) -> GraphBuilder<'a> {
        let id = next_id();
        // The last builder's vectors, emptied, so that steady calls reuse their capacity.
        let mut rec = core::mem::replace(&mut self.recording, Recording::new(0));
        rec.id = id;
        GraphBuilder {
            cache: self,
            stream,
            rec,
            guards: Vec::new(),
            captures: Vec::new(),
            hosts: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl<'a> GraphBuilder<'a> {
    /// Registers a buffer the graph reads: device memory (`CudaSlice`, `CudaView`,
    /// `CudaViewMut`) or pinned host memory, borrowed until the builder is launched or dropped.
    /// The stream waits for the buffer's earlier writers (cudarc's events; `cuStreamWaitEvent`).
    pub fn read<P: Place + ?Sized>(&mut self, place: &'a P) -> P::Read<'a> {
        let (handle, guard) = place.acquire(self.stream);
        self.guards.push(guard);
        handle.with_tag(self.rec.new_place(), Token(()))
    }

    /// Registers a buffer the graph writes (and may read, through
    /// [`DevWrite::read`](crate::DevWrite::read)), borrowed exclusively until the builder is
    /// launched or dropped. The stream waits for the buffer's earlier readers and writers.
    pub fn write<P: PlaceMut + ?Sized>(&mut self, place: &'a mut P) -> P::Write<'a> {
        let (_, handle, guard) = place.acquire_mut(self.stream);
        self.guards.push(guard);
        handle.with_tag(self.rec.new_place(), Token(()))
    }

    /// Adds a kernel node (`cuGraphAddNode_v2`, kernel): a launch made by a
    /// [`kernels!`](crate::kernels) method, `k.name(args…).launch(cfg)`, whose buffer arguments
    /// are this builder's handles. Its label is the kernel's name. The node runs in the
    /// builder's stream's context: a `kernels!` struct loaded in another context (another
    /// device) is [`Error::InvalidNode`] at [`launch`](Self::launch) (use `graph!` for a step
    /// whose kernels run on several devices).
    #[track_caller]
    pub fn kernel<A: KernelArgs + 'a>(&mut self, launch: KernelLaunch<'_, A>) -> Node {
        let (function, args) = launch.parts();
        let site = site(launch.name(), "GraphBuilder::kernel", Location::caller());
        let own = self.stream.context().cu_ctx();
        let same = crate::kind::KernelNode::context(&launch).is_none_or(|c| c.cu_ctx() == own);
        let f = (function.cu_function(), Some(function.clone()), launch.programmatic());
        let node = self.rec.kernel(site, f, launch.dims(), args);
        if !same {
            let why = "a kernel of a `kernels!` struct loaded in another context than the \
                       GraphBuilder's stream's (another device): a builder's kernels run in its \
                       stream's context";
            self.rec.refuse(site, why);
        }
        node
    }

    /// Adds a memcpy node (`cuGraphAddNode_v2`, memcpy) from `src` to `dst`: device to device, pinned
    /// host to device, or device to pinned host, same element type; the lengths must match
    /// (else [`Error::CopyLength`] at launch).
    ///
    /// A copy from device memory into pinned host memory of at most
    /// [`MAX_READBACK_BYTES`](crate::MAX_READBACK_BYTES), both in the builder's stream's
    /// context, is a kernel node of the crate's readback kernel instead, as `graph!`'s `copy`
    /// ([`ReadbackNode`](crate::ReadbackNode): same bytes, cheaper for a step that reads them
    /// right after; an unchanged launch sends nothing for it). Where the kernel cannot be had
    /// (no NVRTC, no unified addressing) it stays a memcpy node. Its label is `copy` either way;
    /// [`GraphCache::nodes`] shows the kind.
    #[track_caller]
    pub fn copy<S: CopyTo<D> + Handle + 'a, D: Handle + 'a>(&mut self, src: S, dst: D) -> Node {
        let (s, d) = (src.tag(), dst.tag());
        let site = site("copy", "GraphBuilder::copy", Location::caller());
        let mut p = src.memcpy(dst);
        if let Some(r) = crate::ReadbackNode::try_new(self.stream, &p) {
            return self.rec.readback(site, &r);
        }
        p.raw.resolve_host_buffer();
        self.rec.memcpy(site, p.raw, s, d)
    }

    /// Adds a memset node (`cuGraphAddNode_v2`, memset): every element of `dst` set to `value`, a
    /// 1, 2 or 4-byte value.
    #[track_caller]
    pub fn memset<T, V: MemsetValueOf<T>>(&mut self, dst: DevWrite<'a, T>, value: V) -> Node {
        let site = site("memset", "GraphBuilder::memset", Location::caller());
        self.rec.memset(site, crate::kind::memset(dst, value).raw, dst.tag)
    }

    /// Adds a memset node setting every byte of `dst` to 0, whatever its element type.
    #[track_caller]
    pub fn zero<T: ValidAsZeroBits>(&mut self, dst: DevWrite<'a, T>) -> Node {
        let site = site("zero", "GraphBuilder::zero", Location::caller());
        self.rec.memset(site, crate::kind::zero(dst).raw, dst.tag)
    }

    /// Adds a captured node: the stream work that `f` enqueues, recorded by stream capture
    /// (`cuStreamBeginCapture` … `cuStreamEndCapture`) into a child graph
    /// (`cuGraphAddNode_v2`, child graph), like `graph!`'s `capture` statement. Its label is
    /// `capture`.
    ///
    /// `operands` is a tuple of 1 to 6 of this builder's handles, `(x,)`, `(x, y)`, …:
    /// a [`DevRead`](crate::DevRead) from [`read`](Self::read) (the closure gets a `CaptureSlice`)
    /// or a [`DevWrite`] from [`write`](Self::write) (a `CaptureSliceMut`) of device memory, or
    /// a `HostRead` / `HostWrite` of pinned host memory (a `CaptureHostSlice` /
    /// `CaptureHostSliceMut`, for [`Capture::copy_htod`], [`Capture::copy_dtoh`] and
    /// [`Capture::host`]). They are the node's
    /// accesses: edges follow from the data hazards with the other nodes, as for any node. `f`
    /// gets the [`Capture`] (safe work on the listed views: `copy`, `zero`, `kernel`, the host
    /// copies and host functions; library
    /// calls on the builder's stream joined by the `unsafe` [`stream`](Capture::stream)) and the
    /// views in order; views cannot escape the closure (see [`capture`](crate::capture)'s
    /// docs).
    ///
    /// `stream` is the builder's stream (the one given to [`GraphCache::builder`]) as an `Arc`,
    /// which cudarc's stream calls need; another stream (another `CUstream` or context) is
    /// [`Error::InvalidNode`] at launch.
    ///
    /// When it runs: `f` is kept (with the borrows it holds) until [`launch`](Self::launch),
    /// which records it on every launch, after every node was checked and before anything is
    /// enqueued; the recording replaces the node's child graph in the exec
    /// (`cuGraphExecNodeSetParams`), or, when its topology changed, the update ladder falls to a
    /// whole-exec update or a new instantiation. The builder's variant does not depend on what
    /// the closure records. In [`Mode::Eager`](crate::Mode::Eager), `f` runs directly on the
    /// stream, not captured ([`Capture::is_capturing`] is `false`). A builder dropped without
    /// `launch` never runs `f`.
    ///
    /// Errors, from `launch` (nothing enqueued; in eager mode, the nodes before this one stay
    /// enqueued): [`Error::Capture`] with `f`'s own error,
    /// [`Error::CaptureInvalidated`] when the driver invalidated the capture (a synchronize
    /// inside it, a wait on an event recorded outside it), each naming this call's location;
    /// a panic of `f` ends the capture and continues out of `launch`. `f`'s error type is any
    /// `Error + Send + Sync + 'static` (cudarc's `DriverError`, `CublasError`, this crate's
    /// [`Error`], …); why it must be `Send + Sync`, and how to mix several with `?`: see
    /// [`capture`](crate::capture).
    ///
    /// ```no_run
    /// # use cudagraph::cudarc::driver::LaunchConfig;
    /// # use cudagraph::{kernels, GraphCache};
    /// # kernels! { pub struct K { fn fill(n: u32, x: &mut [f32]); } }
    /// # fn main() -> cudagraph::Result<()> {
    /// # let ctx = cudagraph::context(0)?;
    /// # let k: K = todo!();
    /// let stream = ctx.new_stream()?;
    /// let (mut x, mut y) = (stream.alloc_zeros::<f32>(1024)?, stream.alloc_zeros::<f32>(1024)?);
    /// let mut cache = GraphCache::new();
    /// let mut g = cache.builder(&stream);
    /// let (xw, yw) = (g.write(&mut x), g.write(&mut y));
    /// g.kernel(k.fill(1024, xw).launch(LaunchConfig::for_num_elems(1024)));
    /// // After the kernel (it reads what the kernel writes); recorded by `launch`.
    /// g.capture(&stream, (xw.read(), yw), |s, (x, mut y)| s.copy(&x, &mut y));
    /// g.launch()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn capture<H, F, E>(&mut self, stream: &'a Arc<CudaStream>, operands: H, f: F) -> Node
    where
        H: CaptureOperands + 'a,
        F: for<'s> FnOnce(&'s Capture, H::Views<'s>) -> core::result::Result<(), E> + 'a,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let site = site("capture", "GraphBuilder::capture", Location::caller());
        let same = stream.cu_stream() == self.stream.cu_stream()
            && stream.context().cu_ctx() == self.stream.context().cu_ctx();
        let node = self.rec.captured(site, self.captures.len(), same, &operands);
        self.captures.push(Box::new(CaptureParams::new(stream, operands, f)));
        node
    }

    /// Adds a host function node (`cuGraphAddNode_v2`: a child graph of a host function node
    /// and a wait for `f`'s end) that runs `f` on the host when the launch reaches it, as `host(&a, &mut b, |(a, b)| …)` does in `graph!`: `operands` is
    /// a tuple of pinned host buffer handles from [`read`](Self::read)/[`write`](Self::write)
    /// (`HostRead`, `HostWrite`), which `f` gets as `&[T]` / `&mut [T]` while it runs, ordered
    /// with the other nodes by their data hazards. `f` runs once, on a worker thread of the
    /// crate's (not the driver's callback thread), by this builder's launch (also when the cache
    /// evicts the variant before the launch reached it), and the graph's later nodes wait for it
    /// to return; what it owns is dropped after the node completed (an ordinary free). CUDA calls
    /// in its body run while the stream waits for it: they must not wait for that stream or the
    /// device, nor race a thread blocked in a CUDA call on that stream (as `graph!`'s `host`).
    /// A panic in `f` is caught and returned as
    /// [`Error::HostFunction`] by the cache's next call. In [`Mode::Eager`](crate::Mode::Eager)
    /// it runs through `cuLaunchHostFunc` and `cuStreamWaitValue32_v2` on the stream. Label:
    /// `host`.
    ///
    /// ```no_run
    /// # use cudagraph::GraphCache;
    /// # fn main() -> cudagraph::Result<()> {
    /// # let ctx = cudagraph::context(0)?;
    /// let stream = ctx.new_stream()?;
    /// let x = stream.alloc_zeros::<u32>(1024)?;
    /// // SAFETY: plain u32s, written by the copy before they are read. Flags 0: not
    /// // write-combined, since the host reads it (see the crate docs on pinned memory).
    /// let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u32>(1024, 0)? };
    /// let mut cache = GraphCache::new();
    /// let mut g = cache.builder(&stream);
    /// let (xr, p) = (g.read(&x), g.write(&mut pinned));
    /// g.copy(xr, p);
    /// g.host((p.read(),), move |(p,)| println!("sum {}", p.iter().sum::<u32>()));
    /// g.launch()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn host<H, F>(&mut self, operands: H, f: F) -> Node
    where
        H: HostOperands + 'a,
        F: for<'s> FnMut(H::Views<'s>) + Send + 'static,
    {
        let site = site("host", "GraphBuilder::host", Location::caller());
        let mut all = crate::operand::NO_ACCESSES;
        let len = operands.accesses(&mut all);
        let mut ops = [(0u64, false); 16];
        for (o, a) in ops.iter_mut().zip(&all[..len]) {
            *o = (a.0, a.1);
        }
        let node = self.rec.push(site, RecKind::Host(self.hosts.len()), &ops[..len]);
        self.hosts.push(Box::new(HostParams::new(operands, f)));
        node
    }

    /// Adds a 2-D memcpy node (`cuGraphAddNode_v2`, memcpy with rows and pitches), as
    /// `copy_2d(&src, src_rows, &mut dst, dst_rows)` does in `graph!`: row `r` of `src` to row
    /// `r` of `dst` ([`Rows`](crate::Rows), in elements). Rows that do not fit their buffer, or
    /// differ in width or height, are [`Error::InvalidNode`] at launch. Label: `copy_2d`.
    /// Contiguous rows (dense, or one row) from device memory into pinned host memory of at
    /// most [`MAX_READBACK_BYTES`](crate::MAX_READBACK_BYTES) are a readback kernel node, as
    /// for [`copy`](Self::copy).
    #[track_caller]
    pub fn copy_2d<S: CopyTo<D> + Handle + 'a, D: Handle + 'a>(
        &mut self,
        src: S,
        src_rows: crate::Rows,
        dst: D,
        dst_rows: crate::Rows,
    ) -> Node {
        let (s, d) = (src.tag(), dst.tag());
        let mut p = crate::kind::pitched::copy_2d_unresolved(src, src_rows, dst, dst_rows);
        let site = site("copy_2d", "GraphBuilder::copy_2d", Location::caller());
        if let Some(r) = crate::ReadbackNode::try_new_2d(self.stream, &p) {
            return self.rec.readback(site, &r);
        }
        p.raw.base.resolve_host_buffer();
        let p = crate::kind::Copy2dParams::recorded(p.raw);
        self.rec.push(site, RecKind::Memcpy2d(p), &[(s, false), (d, true)])
    }

    /// Adds a 2-D memset node (`cuGraphAddNode_v2`, memset with height and pitch), as
    /// `memset_2d(&mut dst, rows, value)` does in `graph!`. Label: `memset_2d`.
    #[track_caller]
    pub fn memset_2d<T, V: MemsetValueOf<T>>(
        &mut self,
        dst: DevWrite<'a, T>,
        rows: crate::Rows,
        value: V,
    ) -> Node {
        let t = dst.tag;
        let p = crate::kind::memset_2d(dst, rows, value);
        let site = site("memset_2d", "GraphBuilder::memset_2d", Location::caller());
        let p = crate::kind::Memset2dParams::recorded(p.raw);
        self.rec.push(site, RecKind::Memset2d(p), &[(t, true)])
    }

    /// A graph-owned buffer of `len` elements of `T` (a memory allocation node,
    /// `cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_MEM_ALLOC`), as `let tmp = alloc::<T>(len);`
    /// does in `graph!`: later nodes use it through [`Scratch::read`](crate::Scratch::read) and
    /// [`Scratch::write`](crate::Scratch::write) with the usual hazard rules (every use is
    /// ordered after the alloc node), and it is freed by a memory free node after its last use:
    /// [`free`](Self::free), or at [`launch`](Self::launch) for one not freed before. It exists
    /// only while the launch runs between those two nodes: nothing outside the graph can reach
    /// it. A use after [`free`](Self::free), or an `alloc` inside a device body (the driver
    /// allows memory nodes only in the top graph), is [`Error::InvalidNode`] at `launch`; a
    /// buffer of 0 elements is [`Error::Empty`] at `launch`, as a 0-byte copy or memset is (the
    /// driver refuses 0-byte nodes). In [`Mode::Eager`](crate::Mode::Eager): a
    /// `cuMemAllocAsync` / `cuMemFreeAsync` pair on the stream. Label: `alloc`.
    /// See [`Scratch`](crate::Scratch) for the driver's rules and how updates behave
    /// (re-instantiation instead of whole-exec update), and
    /// [`GraphCache::graph_owned_bytes`] for the memory it saves.
    #[track_caller]
    pub fn alloc<T: crate::ScratchElem>(&mut self, len: usize) -> crate::Scratch<'a, T> {
        let site = site("alloc", "GraphBuilder::alloc", Location::caller());
        let tag = self.rec.new_place();
        let slot = place_of(tag, self.rec.id).unwrap_or(u32::MAX);
        let scratch = crate::Scratch::<T>::new(self.stream, slot, len, tag);
        self.guards.push(crate::operand::scratch_guard());
        self.rec.alloc(site, scratch.alloc_node().erased(), scratch.free_node().erased());
        scratch
    }

    /// Frees a graph-owned buffer of [`alloc`](Self::alloc): a memory free node
    /// (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_MEM_FREE`) ordered after every earlier use
    /// of it. A later node using it, a second `free`, or a `free` inside a device body (which
    /// would run never or many times; the driver allows memory nodes in the top graph only) is
    /// [`Error::InvalidNode`] at `launch`. Label: `free`.
    #[track_caller]
    pub fn free<T>(&mut self, buffer: crate::Scratch<'a, T>) -> Node {
        let site = site("free", "GraphBuilder::free", Location::caller());
        self.rec.free(site, buffer.free_node().erased())
    }

    /// Adds an empty node (`cuGraphAddNode_v2`, empty): no work, a join point for
    /// [`after`](Self::after) edges, as `empty()` does in `graph!`. Label: `empty`.
    #[track_caller]
    pub fn empty(&mut self) -> Node {
        let site = site("empty", "GraphBuilder::empty", Location::caller());
        self.rec.push(site, RecKind::Empty, &[])
    }

    /// Adds an event record node (`cuGraphAddNode_v2`, event record), as `event_record(&e)`
    /// does in `graph!`: it records `event` once the nodes it is [`after`](Self::after) are
    /// done; it touches no buffer, so only `after` edges order it. The exec keeps `event` alive.
    /// Label: `event_record`. Errors, from `launch`:
    /// [`Error::WrongContext`](crate::Error::WrongContext) for an event of another context.
    #[track_caller]
    pub fn event_record(&mut self, event: &'a Arc<cudarc::driver::CudaEvent>) -> Node {
        let site = site("event_record", "GraphBuilder::event_record", Location::caller());
        self.events.push(event);
        self.rec.push(site, RecKind::EventRecord(self.events.len() - 1), &[])
    }

    /// Adds an event wait node (`cuGraphAddNode_v2`, wait event), as `event_wait(&e)` does in
    /// `graph!`: the nodes [`after`](Self::after) it wait for the last record of `event`.
    /// Label: `event_wait`. Errors as [`event_record`](Self::event_record).
    #[track_caller]
    pub fn event_wait(&mut self, event: &'a Arc<cudarc::driver::CudaEvent>) -> Node {
        let site = site("event_wait", "GraphBuilder::event_wait", Location::caller());
        self.events.push(event);
        self.rec.push(site, RecKind::EventWait(self.events.len() - 1), &[])
    }

    /// Adds a child-graph node (`cuGraphAddNode_v2`, child graph) replaying `graph`, a
    /// [`Graph`](crate::Graph) recorded once by [`capture`](crate::capture), as `child(&mut g)`
    /// does in `graph!`: its operands are acquired on the builder's stream now (the stream waits
    /// for their earlier users) and their use recorded after the launch; the node is ordered
    /// with the builder's other nodes through the graph as one written place. Another graph of
    /// the same topology in a later builder of the cache is a per-node update. Label: `child`.
    ///
    /// Errors, from `launch`: [`Error::InvalidNode`] if the graph's operands are not the memory
    /// it was captured with; [`Error::WrongContext`](crate::Error::WrongContext) for a graph of
    /// another context than the stream's.
    #[track_caller]
    pub fn child(&mut self, graph: &'a mut crate::Graph<'_>) -> Node {
        let site = site("child", "GraphBuilder::child", Location::caller());
        let (_, g, guard) = crate::operand::AcquireMut::acquire_mut(graph, self.stream);
        self.guards.push(guard);
        let g = g.with_tag(self.rec.new_place(), Token(()));
        self.rec.push(site, RecKind::Child(g.recorded()), &[(g.tag, true)])
    }

    /// Adds edges from each of `earlier` to `node`, beyond those of data hazards: `node` then
    /// runs after them. Each must be an earlier node of this builder (else
    /// [`Error::InvalidNode`] at launch, naming `node`'s label and this call's location). The
    /// scope rule of `graph!`'s `.after` holds trivially here: every node added to a builder is
    /// present in its graph, and a [`Node`] of another builder is refused, so no `after` edge is
    /// ever dropped.
    #[track_caller]
    pub fn after(&mut self, node: Node, earlier: &[Node]) {
        self.rec.after(node, earlier, Location::caller());
    }

    /// A device condition of this builder's graph: a kernel argument (a `c: Condition`
    /// parameter in [`kernels!`](crate::kernels)) that kernels set with
    /// `cudaGraphSetConditional`, read by one [`device_while`](Self::device_while),
    /// [`device_if`](Self::device_if), [`device_if_else`](Self::device_if_else) or
    /// [`device_switch`](Self::device_switch). Its value is `default` at the start of every
    /// launch (`cuGraphConditionalHandleCreate` with `CU_GRAPH_COND_ASSIGN_DEFAULT`, one handle
    /// per exec).
    pub fn condition(&mut self, default: u32) -> crate::Condition {
        self.rec.slots.push(false);
        crate::Condition::new(self.rec.slots.len() as u32 - 1, default, self.rec.id)
    }

    /// Adds a conditional node (`cuGraphAddNode_v2`, conditional, `CU_GRAPH_COND_TYPE_WHILE`):
    /// the nodes that `body` adds to the builder form the body graph, run while `c` is non-zero
    /// (checked before each iteration). As in `graph!`: the node is ordered after earlier
    /// kernels of the same graph that take `c`, and with the other nodes by its body's
    /// accesses; `after` edges stay within one graph. Label: `device_while`. Errors, from
    /// `launch`: [`Error::InvalidNode`] for a condition of another builder or one that drives
    /// two statements, or when `body` did not return normally into this builder (it panicked
    /// and the panic was caught, or the builder was swapped with another inside it: both are
    /// then refused); a run in [`Mode::Eager`](crate::Mode::Eager) is refused.
    #[track_caller]
    pub fn device_while(&mut self, c: crate::Condition, mut body: impl FnMut(&mut Self)) -> Node {
        let site = site("device_while", "GraphBuilder::device_while", Location::caller());
        self.device(site, c, (crate::ConditionalType::While, 1), |g, _| body(g))
    }

    /// A conditional node of type `if` (`CU_GRAPH_COND_TYPE_IF`, one body): `then` runs when
    /// `c` is non-zero. See [`device_while`](Self::device_while). Label: `device_if`.
    #[track_caller]
    pub fn device_if(&mut self, c: crate::Condition, mut then: impl FnMut(&mut Self)) -> Node {
        let site = site("device_if", "GraphBuilder::device_if", Location::caller());
        self.device(site, c, (crate::ConditionalType::If, 1), |g, _| then(g))
    }

    /// A conditional node of type `if` with two bodies (CUDA 12.8+): `then` runs when `c` is
    /// non-zero, else `els`. Label: `device_if`.
    #[track_caller]
    pub fn device_if_else(
        &mut self,
        c: crate::Condition,
        mut then: impl FnMut(&mut Self),
        mut els: impl FnMut(&mut Self),
    ) -> Node {
        let site = site("device_if", "GraphBuilder::device_if_else", Location::caller());
        self.device(
            site,
            c,
            (crate::ConditionalType::If, 2),
            |g, b| {
                if b == 0 { then(g) } else { els(g) }
            },
        )
    }

    /// A conditional node of type `switch` (`CU_GRAPH_COND_TYPE_SWITCH`, CUDA 12.8+) with
    /// `cases` bodies, body `i` recorded by `case(g, i)`: body `c` runs, none when `c >= cases`.
    /// Label: `device_switch`.
    #[track_caller]
    pub fn device_switch(
        &mut self,
        c: crate::Condition,
        cases: u32,
        mut case: impl FnMut(&mut Self, u32),
    ) -> Node {
        let site = site("device_switch", "GraphBuilder::device_switch", Location::caller());
        self.device(site, c, (crate::ConditionalType::Switch, cases), |g, i| case(g, i))
    }

    /// The bodies add to `self` as the user's closures; [`Recording::device`] refuses the
    /// builder at `launch` unless each body returned normally into this same builder.
    fn device(
        &mut self,
        site: NodeSite,
        c: crate::Condition,
        shape: (crate::ConditionalType, u32),
        body: impl FnMut(&mut Self, u32),
    ) -> Node {
        Recording::device(self, |g| &mut g.rec, (site, c, shape), body)
    }

    /// Number of nodes added so far.
    pub fn len(&self) -> usize {
        self.rec.nodes.len()
    }

    /// `true` when no node has been added.
    pub fn is_empty(&self) -> bool {
        self.rec.nodes.is_empty()
    }

    /// Edges `(from, to)` between node indices, as the graph will have them: the transitive
    /// reduction of the data hazards plus [`after`](Self::after) edges. Needs no driver call
    /// (but a builder needs a stream, so without a GPU only `graph!`'s plans can be printed:
    /// [`plans`](crate::plans)).
    pub fn edges(&self) -> Vec<(u32, u32)> {
        self.rec.edges(&vec![true; self.rec.nodes.len()])
    }

    /// [`Self::edges`] with their kinds: [`EdgeKind::Programmatic`] from a kernel node into a
    /// node of a kernel declared `#[programmatic]` (in the top graph and inside device control
    /// flow bodies), the kind it gets on a device that supports programmatic dependent launch
    /// (inside bodies: with a driver of CUDA 13.0 or later; between kernels of two devices the
    /// edge is built plain whatever this says; where it does not,
    /// or with [`GraphCache::set_programmatic`]`(false)`, every edge is plain; after `launch`,
    /// [`GraphCache::edges`] has the kinds as built). Needs no driver call.
    pub fn edge_kinds(&self) -> Vec<(u32, u32, EdgeKind)> {
        self.rec.edge_kinds()
    }

    /// Checks every node, records each [`capture`](Self::capture) node's work (stream capture),
    /// then builds and instantiates the graph of this topology
    /// (`cuGraphCreate`, `cuGraphAdd*Node`, `cuGraphInstantiateWithFlags`) or updates the cached
    /// one (`cuGraphExec*NodeSetParams`, the ladder of [`GraphCache`]), and launches it on the
    /// stream (`cuGraphLaunch`); in [`Mode::Eager`](crate::Mode::Eager) the nodes are launched
    /// one by one instead. Then releases the buffers, recording their use on the stream.
    ///
    /// On error nothing was enqueued (but the waits of `read`/`write`; in
    /// [`Mode::Eager`](crate::Mode::Eager), the nodes before a driver error or a closure's
    /// error) and the cache is usable.
    #[track_caller]
    pub fn launch(mut self) -> Result<()> {
        self.rec.location = Location::caller();
        self.rec.finish()?;
        self.rec.free_remaining();
        let key = self.rec.signature();
        let rec = &self.rec;
        let views: Vec<KernelView<'_>> = rec.kernel_views().collect();
        let nodes = rec.params(&views, &self.captures, &self.hosts, &self.events);
        let call = GraphCall { shape: rec, site: Site::Builder, key, signature: &rec.sig };
        let mut guards = &self.guards[..];
        self.cache.run_call(call, self.stream, Nodes::Ready(&nodes), &mut guards, None, None)
        // `self` drops here: the guards record the buffers' use after the launch was enqueued.
    }
}

impl Drop for GraphBuilder<'_> {
    fn drop(&mut self) {
        // Hands the vectors back for the next builder; allocates nothing.
        self.rec.clear();
        core::mem::swap(&mut self.rec, &mut self.cache.recording);
    }
}
