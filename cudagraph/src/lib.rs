//! CUDA graphs from Rust-syntax kernel launches.
//!
//! [`graph!`] turns a block of kernel launches, copies and memsets, with their data dependencies
//! marked by `&` (read) and `&mut` (write), into code that builds a CUDA graph once, caches the
//! instantiated `CUgraphExec` in a [`GraphCache`], and on every later call sends the driver only
//! the node parameters that changed before `cuGraphLaunch`.
//!
//! ```no_run
//! use cudagraph::cudarc::driver::LaunchConfig;
//! use cudagraph::{graph, kernels, GraphCache};
//!
//! kernels! {
//!     /// Kernels of `saxpy.cu`.
//!     pub struct Saxpy {
//!         fn scale(n: u32, a: f32, x: &mut [f32]);
//!         fn axpy(n: u32, a: f32, x: &[f32], y: &mut [f32]);
//!     }
//! }
//!
//! # fn main() -> cudagraph::Result<()> {
//! # let src = "";
//! let ctx = cudagraph::context(0)?; // Error::NoDriver without a GPU
//! let stream = ctx.default_stream();
//! // SAFETY: `scale` and `axpy` in `src` have these signatures and stay within `n` elements.
//! let k = unsafe { Saxpy::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx(src)?) }?;
//! let (mut x, mut y) = (stream.alloc_zeros::<f32>(1024)?, stream.alloc_zeros::<f32>(1024)?);
//! let cfg = LaunchConfig::for_num_elems(1024);
//! let mut cache = GraphCache::new();
//! for step in 0..100 {
//!     graph!(&mut cache, &stream, {
//!         k.scale(1024, 0.5, &mut x).launch(cfg);
//!         k.axpy(1024, step as f32, &x, &mut y).launch(cfg); // runs after `scale`: reads x
//!         memset(&mut x, 0.0f32);                            // runs after `axpy`: writes x
//!     })?;
//! }
//! assert_eq!(cache.stats().builds, 1); // one build; 99 calls updated `axpy`'s scalar only
//! # Ok(()) }
//! ```
//!
//! Statements (see the `graph!` docs): `KERNELS.name(args…).launch(cfg)`, `copy(&src, &mut dst)`,
//! `copy_2d`, `memset(&mut dst, value)`, `memset_2d`, `zero(&mut dst)`, `fill(&mut dst, value)`,
//! `capture(&a, &mut b, |s, (a, mut b)| …)`, `child(&mut g)`, `host(&a, &mut b, |(a, b)| …)`,
//! `empty()`, `event_record(&e)`, `event_wait(&e)`, `let tmp = alloc::<T>(n);`, `free(&mut tmp)`,
//! `let name = …;`, `.after(name, …)`, host `if`/`else`, `for` (unrolled, or a run-time count),
//! and `device_while`/`device_if`/`device_switch` on conditions kernels set. Edges are the
//! transitive reduction of the read/write hazards between statements on the same place plus
//! `.after`, so the graph computes what the statements compute in order on one stream.
//! (`default_stream()` above is fine for one stream without `capture`; with several streams, or a
//! `capture` statement (the legacy default stream cannot capture), use `ctx.new_stream()` as in
//! the README.)
//!
//! For graphs whose shape is only known at run time, [`GraphBuilder`] (from
//! [`GraphCache::builder`]) adds the same nodes one call at a time, with the same edges, checks,
//! cache and update ladder.
//!
//! For stream work that is not a `graph!` statement (cudarc launches and copies, cuBLAS, cuFFT),
//! [`capture`] records a closure's work on listed device buffers into a [`Graph`] that borrows
//! them, which instantiates into an [`Exec`] that launches ordered with every other use of those
//! buffers and can be updated from another capture.
//!
//! Inside a capture, [`Capture::kernel`] adds a `kernels!` launch as an explicit, typed kernel
//! node, after the work captured before it and before the work captured after it (PyCUDA's
//! `add_kernel_node` with `update_capture_dependencies`). Its buffers are handles of the listed
//! operands ([`Capture::read`], [`Capture::write`]: a view of anything else is refused, so no
//! unlisted buffer enters a node), and the [`CapturedKernel`] it returns names the node, whose
//! arguments and launch dimensions [`Exec::set_kernel`] then sets on the exec between launches,
//! with handles of the operands the exec holds ([`Exec::read`], [`Exec::write`]):
//!
//! ```no_run
//! # use cudagraph::cudarc::driver::LaunchConfig;
//! # cudagraph::kernels! { struct Ops { fn affine(n: u32, a: u32, b: u32, x: &[u32], y: &mut [u32]); } }
//! # fn main() -> cudagraph::Result<()> {
//! # let ctx = cudagraph::context(0)?;
//! # let stream = ctx.new_stream()?;
//! # let k = unsafe { Ops::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx("")?) }?;
//! # let (n, cfg) = (1024u32, LaunchConfig::for_num_elems(1024));
//! let x = stream.clone_htod(&vec![1u32; n as usize])?;
//! let (mut y, mut out) = (stream.alloc_zeros::<u32>(n as usize)?, stream.alloc_zeros(n as usize)?);
//! // The graph holds what its closure borrows for as long as it lives: the handle goes out
//! // through a shared cell.
//! let node = std::cell::OnceCell::new();
//! let graph = cudagraph::capture(&stream, (&x, &mut y, &mut out), |s, (x, mut y, mut out)| {
//!     let _ = node.set(s.kernel(k.affine(n, 2, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg))?);
//!     s.copy(&y, &mut out)?; // captured after the node
//!     Ok::<(), cudagraph::Error>(())
//! })?;
//! let (node, mut exec) = (node.get().expect("recorded"), graph.instantiate()?);
//! for a in 2..10 {
//!     // Operands 0 (x) and 1 (y) of the capture, as the exec holds them.
//!     exec.set_kernel(node, k.affine(n, a, 1, exec.read(0)?, exec.write(1)?).launch(cfg))?;
//!     exec.launch(&stream)?;
//! }
//! # Ok(()) }
//! ```
//!
//! Inside `graph!`, `capture(&a, &mut b, |s, (a, mut b)| { … })` makes such work one child-graph node
//! of the step, ordered by its listed buffers and recorded again on every call.
//!
//! Without a GPU, [`plans`] lists every `graph!` of the program with its nodes and edges, and
//! [`Plan::to_dot`] renders Graphviz DOT.
//!
//! # Kernel methods and their argument traits
//!
//! For `fn axpy(n: u32, a: f32, x: &[f32], y: &mut [f32]);` in [`kernels!`], the struct gets
//!
//! ```text
//! fn axpy<'b>(&'b self, n: u32, a: f32, x: impl ReadArg<'b, f32>, y: impl WriteArg<'b, f32>)
//!     -> KernelCall<'b, …>;          // then `.launch(cfg)`
//! ```
//!
//! Scalars are taken by value (any `DeviceRepr + bytemuck::NoUninit` type of the declared
//! type). [`ReadArg`] and [`WriteArg`] are the handles of a buffer borrowed for one call, not
//! the buffer itself: in [`graph!`] and [`eager!`] you write `&x` and `&mut y` and the macro
//! makes them; with a [`GraphBuilder`] you pass `g.read(&x)` and `g.write(&mut y)`; inside a
//! [`capture`], `s.read(&x)?` and `s.write(&mut y)?`. Only `cudagraph` makes handles, so every
//! buffer a kernel node touches is one the graph borrowed, ordered and checked. Passing the
//! `CudaSlice` itself is a compile error that says which form to use.
//!
//! # Pinned host memory
//!
//! `copy(&src, &mut dst)` between the host and the device needs page-locked (pinned) host
//! memory (pageable `Vec`s are refused at compile time: nothing would keep them alive and in
//! place until the graph ran). For results the host reads after a call, use
//! [`PinnedBuffer`] (`cuMemHostAlloc`, flags 0: cached) and read it right after the call,
//! without synchronizing first: `as_slice` waits for the call's uses of it with one
//! `cuEventSynchronize`, which costs what the raw driver's `cuStreamSynchronize` costs.
//!
//! ```no_run
//! # fn main() -> cudagraph::Result<()> {
//! let ctx = cudagraph::context(0)?;
//! let stream = ctx.new_stream()?;
//! let residual = stream.alloc_zeros::<f32>(1)?;
//! let mut host = cudagraph::PinnedBuffer::<f32>::zeros(&stream, 1)?;
//! let mut cache = cudagraph::GraphCache::new();
//! cudagraph::graph!(&mut cache, &stream, {
//!     copy(&residual, &mut host);
//! })?;
//! let r: f32 = host.as_slice()?[0]; // waits for the copy; no `stream.synchronize()` first
//! assert_eq!(r, 0.0);
//! # Ok(()) }
//! ```
//!
//! A copy from device memory into pinned memory of at most [`MAX_READBACK_BYTES`] (4 KiB) is
//! a kernel node of the crate's readback kernel ([`ReadbackNode`]), a few µs faster per step
//! than a memcpy node on the H200; the kernel is compiled by NVRTC at the first such copy of
//! the process and loaded once per context. Where it cannot be had (no NVRTC library, no
//! unified addressing) the copy is a memcpy node; `cache.nodes()` shows which
//! ([`GraphNodeKind::Kernel`] or [`GraphNodeKind::Memcpy`]).
//!
//! cudarc's `PinnedHostSlice` works too (`CudaContext::alloc_pinned_with_flags(len, flags)`;
//! `len` in elements), with two things to mind:
//! - **the flags:** cudarc's `CudaContext::alloc_pinned` passes
//!   `CU_MEMHOSTALLOC_WRITECOMBINED`, which makes host→device copies from it fast but every
//!   host *read* of it slow (write-combined memory is not cached by the CPU). For a buffer the
//!   host reads, pass flags `0`.
//! - **the wait:** its `as_slice()` waits on cudarc's blocking-sync event, which sleeps until
//!   the driver wakes the thread (tens of µs per read): call `stream.synchronize()` first, then
//!   read.
//!
//! ```no_run
//! # fn main() -> cudagraph::Result<()> {
//! let ctx = cudagraph::context(0)?;
//! let stream = ctx.new_stream()?;
//! let n = 1 << 20;
//! // SAFETY: cuMemHostAlloc leaves the memory uninitialized; it is written before it is read
//! // (here by the copy below).
//! let mut results = unsafe { ctx.alloc_pinned_with_flags::<f32>(n, 0) }?; // cached: host reads
//! // let upload = unsafe { ctx.alloc_pinned::<f32>(n) }?;  // write-combined: host writes only
//! let device = stream.alloc_zeros::<f32>(n)?;
//! let mut cache = cudagraph::GraphCache::new();
//! cudagraph::graph!(&mut cache, &stream, {
//!     copy(&device, &mut results);
//! })?;
//! stream.synchronize()?;
//! let host: &[f32] = results.as_slice()?;
//! assert_eq!(host[0], 0.0);
//! # Ok(()) }
//! ```
//!
//! # Coming from another graph API
//!
//! | PyCUDA (graph pull request) | cuda.core | cudarc | cudagraph |
//! |---|---|---|---|
//! | `stream.begin_capture()` … `stream.end_capture()` | `stream.create_graph_builder().begin_building()` … `end_building()` | `stream.begin_capture(mode)` … `stream.end_capture(flags)` | [`capture`]`(&stream, (&x, &mut y), \|s, (x, y)\| …)` → [`Graph`]; or `capture(…)` inside `graph!` |
//! | `graph.add_kernel_node(args…, func=, dependencies=)` + `stream.update_capture_dependencies` | builder `launch(…)` | — | inside a capture: [`Capture::kernel`] (typed by the `kernels!` signature); outside: a `graph!` statement or [`GraphBuilder::kernel`] |
//! | `graph.instantiate()` | `builder.complete()` | part of `end_capture` | [`Graph::instantiate`] → [`Exec`]; `graph!` instantiates and caches by itself |
//! | `instance.kernel_node_set_params(…, kernel_node=)` | — | — | [`Exec::set_kernel`]; in `graph!`, changed arguments are sent by themselves (per-node update ladder) |
//! | `instance.launch()` | `graph.launch(stream)` | `graph.launch()` | [`Exec::launch`]`(&stream)`; `graph!(…)` launches on every call |
//! | `graph.debug_dot_print(path)` | `graph.debug_dot_print(path)` | — | [`Graph::debug_dot_print`], [`GraphCache::debug_dot_print`]; [`Plan::to_dot`] without a GPU |
//! | `cuGraphExecUpdate` (via the driver) | `graph.update(builder)` | — | [`Exec::update`]`(graph)` (the refusal's reason and the graph come back) |
//! | explicit `Graph()` + `add_*_node` | `Graph` nodes | — | [`GraphBuilder`] (run-time shape) or `graph!` (compile-time shape) |

#![warn(missing_docs)]

mod array;
mod builder;
mod cache;
mod capture;
mod capture_host;
mod error;
mod flags;
mod introspect;
mod kind;
mod ledger;
mod operand;
mod pinned;
mod plan;
pub mod raw;
mod session;

pub use array::BufferArray;
pub use builder::{GraphBuilder, Node};
pub use cache::{GraphCache, InstantiateFlags, Mode, Stats};
pub use capture::{
    CapturedKernel, DeviceBuffer, DeviceBufferMut, Exec, Graph, KeptOutput, Operand, Operands,
    Released, ReleasedUpdateRefused, UpdateRefused, capture,
};
pub use capture_host::{
    CaptureHostSlice, CaptureHostSliceMut, CaptureHostView, HostFnArg, HostFnArgs,
};
pub use cudarc;
pub use error::{CudaError, Error, NodeSite, Refusal, Result};
pub use introspect::{ClonedGraph, GraphInfo, GraphNode, GraphNodeKind, NodeDetails};
pub use kind::kernel::MAX_KERNEL_PARAMS;
pub use kind::{
    AllocParams, CaptureKey, CaptureOperand, CaptureOperands, CopyTo, EmptyParams, EventParams,
    EventRecordParams, EventWaitParams, FillNode, FreeParams, GraphMemUsage, HostOperand,
    HostOperands, HostParams, HostWork, KernelArgs, KernelCall, KernelFn, KernelLaunch, LaunchCfg,
    LaunchDims, MAX_ALLOC_BYTES, MAX_FILL_BYTES, MemcpyParams, Memory, MemsetParams, MemsetValue,
    MemsetValueOf, Scratch, ScratchElem,
};
pub use kind::{Condition, ConditionalType, Copy2dParams, Memset2dParams, Rows};
pub use kind::{MAX_READBACK_BYTES, ReadbackNode};
pub use operand::{
    DevRead, DevWrite, DeviceScalar, Handle, HostRead, HostWrite, KernelArg, Place, PlaceMut,
    ReadArg, WriteArg,
};
pub use pinned::PinnedBuffer;
pub use plan::{Access, EdgeKind, MAX_REDUCED_NODES, NodeKind, Plan, PlanNode, infer_edges, plans};
pub use session::{Capture, CaptureSlice, CaptureSliceMut, CaptureView, Kept};

/// Builds, caches, updates and launches a CUDA graph from a block of statements.
///
/// `graph!(&mut cache, &stream, { statements })` evaluates to `cudagraph::Result<()>`.
///
/// Statements:
/// - `KERNELS.name(args…).launch(cfg)`: a kernel node. `KERNELS` is a struct made by
///   [`kernels!`]; arguments are checked against its signature by rustc. Buffer arguments are
///   places (`u`, `self.u`, `bufs[0]`) marked `&` (read) or `&mut` (write). `cfg` is a
///   `LaunchConfig`, `(grid, block)`, `((gx, gy, gz), (bx, by, bz))` or
///   `LaunchDims::new(grid, block).shared(bytes)` (a tuple of three `u32`s is a compile error:
///   it reads as a 3-D grid as easily as `(grid, block, shared_bytes)`).
/// - `copy(&src, &mut dst)`: a memcpy node, device↔device, pinned host→device or
///   device→pinned host, same element type; lengths must match (else [`Error::CopyLength`]).
///   A copy from device memory into pinned host memory of at most [`MAX_READBACK_BYTES`] is a
///   kernel node of the crate's readback kernel instead ([`ReadbackNode`]; the plan's node is
///   still the `copy` statement, of kind [`NodeKind::Memcpy`]); see the crate docs, "Pinned
///   host memory".
/// - `memset(&mut dst, value)` with a 1, 2 or 4-byte value of `dst`'s element type;
///   `zero(&mut dst)` for any element type.
/// - `capture(&a, &mut b, |s, (a, mut b)| { … })`: a child-graph node of the closure's stream work
///   (`s.copy`, `s.zero`, `s.kernel` on the listed views; cuBLAS, cuFFT, NCCL and cudarc
///   launches on the call's stream joined by the `unsafe` `s.stream()`), recorded by stream
///   capture on a private stream on every call before anything is enqueued
///   ([`Stats::captures`]) and sent to the exec as a per-node update. The closure gets a
///   [`CaptureSlice`] of each `&` operand and a [`CaptureSliceMut`] of each `&mut` operand;
///   pinned host operands may be listed too (a [`CaptureHostSlice`] / [`CaptureHostSliceMut`]),
///   for [`Capture::copy_htod`], [`Capture::copy_dtoh`] and host functions ([`Capture::host`])
///   recorded as nodes of the capture. Keyed: `capture(&a, &mut b, key = k, |s, k, (a, mut b)| { … })`, a closure that captures
///   nothing (it must coerce to a `fn`; a captured local is rustc's E0308 "expected fn pointer,
///   found closure" naming it: move it into the key) and takes `&k`; recorded only when the
///   operands or the key change ([`CaptureKey`], [`GraphCache::set_recordings_per_capture`]).
///   The stream argument must then be a `&Arc<CudaStream>` made with `ctx.new_stream()` (the
///   legacy default stream cannot capture); cudarc's event tracking may be on (its default) or
///   off, except for [`Capture::fork`], which needs it.
///   Errors: [`Error::Graph`] (a recording that kept memory it allocated past the closure),
///   [`Error::Capture`] (the closure's own),
///   [`Error::CaptureInvalidated`], both naming the statement; a panic in the closure continues
///   after the capture ended. In [`Mode::Eager`] the closure runs directly on the stream. The
///   closure's error type is any `Error + Send + Sync + 'static` (`DriverError`, `CublasError`,
///   [`Error`], …): see [`capture()`]'s docs for why, and for mixing several with `?`.
/// - `child(&mut g)`: a child-graph node replaying the [`Graph`] `g` (made once by
///   [`capture`]), its buffers acquired for the call.
/// - `let name = statement;` names a node; `statement.after(a, b)` adds edges from earlier nodes.
///   A name is in scope as in Rust: after its `let`, in the block that binds it and the blocks
///   nested there; a name bound inside an `if`/`else` branch or a `for` body cannot be named after
///   that branch or loop (a compile error: when the branch is not taken the node does not exist).
///   So every `.after` of a present node names a present node, and each variant's edges are the
///   transitive reduction of the hazards and `.after` edges among its present nodes: no ordering
///   that the body writes is lost in any variant.
/// - `if cond { … } else { … }`: evaluated on the host at each call; each combination of taken
///   branches is its own cached graph (`if let` is rejected).
/// - `for i in 0..N { … }` with integer literal bounds: unrolled at compile time. A run of
///   consecutive iterations with the same statements, whose expressions are only literals,
///   names, casts and tuples or struct literals of them, or the same but for the element of one
///   array each argument names (`&mut bufs[i]`, every element written), costs an unchanged call
///   about one iteration (the graph is the same): the call compares the first iteration and the
///   later iterations' elements, and evaluates the later iterations only when it changed. A
///   kernel statement calling a method of the user's (not one `kernels!` generated, checked at
///   every call) is compared iteration by iteration. See `docs/performance.md`, "Host-path
///   notes".
/// - `for i in a..b { … }` (or `a..=b`) with other `usize` bounds: a run-time count. The body is
///   checked once; each call adds its nodes once per iteration, and the count is part of the
///   variant key (each distinct count is one cached topology). No host `if`, no run-time `for`
///   and no place using `i` inside (compile errors).
/// - `fill(&mut dst, value)`: every element set to `value` of any `bytemuck::NoUninit` type of 1
///   to 64 bytes (`u64`, `f64`, …), by a kernel node of the crate's fill kernel
///   ([`FillNode`]).
/// - `host(&a, &mut b, move |(a, b)| { … })`: a host function node. The closure (`FnMut +
///   Send + 'static`, a new one every call, called once) runs once per launch when the launch
///   reaches the node, on a worker thread of the crate's (not the driver's callback thread, where CUDA
///   forbids CUDA calls), with the listed **pinned host** buffers as `&[T]` / `&mut [T]`
///   (`host(move |()| …)` lists none); the node's successors wait for it to return. What it owns
///   (device or pinned buffers, a cache) is dropped after the node completed, on that thread: an
///   ordinary free. Calls to CUDA in its body run while the stream waits for it: they must not
///   wait for that stream or the device (`synchronize`, a blocking copy on it), and a thread
///   blocked in such a call on that stream (a pageable `clone_dtoh`) holds a driver lock they
///   wait for: synchronize before reading back when the body calls CUDA. A panic inside is caught and
///   returned as [`Error::HostFunction`] by the cache's next call. Not allowed in device bodies.
/// - `empty()`: an empty node, a join point: `let j = empty().after(a, b);`.
/// - `event_record(&e)` / `event_wait(&e)` with an `Arc<CudaEvent>`: event record / wait nodes,
///   ordered only by `.after` (they touch no buffer); the exec keeps the event alive. Timing
///   needs events made with `CU_EVENT_DEFAULT` (cudarc's `new_event(None)` has no timing).
/// - `let c = condition(default);` then `device_while(c, { … })`, `device_if(c, { … })`,
///   `device_if(c, { … }, { … })` or `device_switch(c, { … }, …)`: conditional nodes whose
///   bodies are graphs of ordinary statements, looping or branching on the device on the value
///   that a kernel taking `c: Condition` sets (`use cudagraph::Condition;` for the `kernels!`
///   declaration); see the README's "Device control flow". Refused by [`Mode::Eager`] and
///   [`eager!`] (the condition means nothing outside a graph). A device statement is ordered
///   with every kernel, capture, child graph and device statement of its block (before it: done
///   before it starts; after it: started after it ends), whichever of them set its condition.
///
/// Names are compared by their text: a place (`x`, `bufs[j]`), a receiver (`k`), a condition
/// (`c`) and a node name are one thing wherever the body writes them, so each must name one
/// variable throughout the body, which rustc checks (a compile error on the other spelling). In
/// a body that a `macro_rules!` builds from its caller's tokens and its own, give the macro's
/// own variables names of their own (under hygiene a macro's `x` and its caller's `x` are two
/// variables). A receiver must have the concrete type of a [`kernels!`] struct (not a type
/// parameter).
///
/// Edges from a kernel node into the node of a kernel declared `#[programmatic]` in
/// [`kernels!`] are programmatic edges ([`EdgeKind`]): that kernel may start before the kernel
/// it depends on finished, and waits for it in its own code (unless a plain edge, from a node
/// that is not a kernel, joins it too: then its edges are all plain).
///
/// Every place of the body is borrowed (and synchronized with cudarc's events) once per call,
/// including places used only in branches not taken. Limits: 16 kernel parameters, 64 host `if`s,
/// 4096 iterations per `for` and 16 384 unrolled statements per body, 384 levels of nesting.
///
/// Errors: those of [`GraphCache`]'s driver calls, each naming the node and its source location;
/// [`Error::Aliasing`] when two places overlap in memory and one is written (views of one
/// allocation); [`Error::InvalidNode`] when a statement's node carries a buffer handle that its own
/// operands did not borrow in this call (a handle kept elsewhere, passed through a method of
/// yours). After an error nothing was enqueued (except part way through a call in
/// [`Mode::Eager`]). See `SAFETY.md` for what is checked and how buffers are ordered with their
/// own streams.
pub use cudagraph_macros::graph;

/// Declares typed kernel signatures and a struct that loads them from one module.
///
/// ```ignore
/// kernels! {
///     pub struct Heat {
///         fn stencil(nx: u32, ny: u32, alpha: f32, src: &[f32], dst: &mut [f32]);
///     }
/// }
/// ```
/// generates `pub struct Heat` with `unsafe fn Heat::load(&ctx, ptx) -> Result<Heat>` (`cuModuleLoadData`,
/// then `cuModuleGetFunction` for every kernel; a missing one is [`Error::MissingFunction`]),
/// `heat.function("stencil") -> Option<&CudaFunction>`, and one method per kernel for use
/// inside [`graph!`] and [`eager!`], or with a [`GraphBuilder`]'s handles
/// (`g.kernel(k.stencil(n, ur, vw).launch(cfg))`). Scalar parameters take any `DeviceRepr` type without padding bytes
/// (`bytemuck::NoUninit`); `&[T]` parameters take a `&buffer` of device memory of `T`, `&mut [T]`
/// a `&mut buffer`; `&T` / `&mut T` parameters are device scalars, a `&buffer` / `&mut buffer` of
/// exactly one element of `T` (the kernel gets a `const T*` / `T*`: a solver's `alpha` or
/// residual that never leaves the device; another length is [`Error::InvalidNode`]); a
/// `c: Condition` parameter takes a device condition of the body (`let c = condition(default);`,
/// see [`graph!`]'s device statements), and needs `use cudagraph::Condition;` where the
/// `kernels!` block is. At most 16 parameters; `load`, `function`, `module`, `NAMES` and
/// `PROGRAMMATIC` are reserved.
///
/// The module stays loaded while the struct or any cached graph that launches one of its
/// kernels exists; dropping the last of them unloads it (`cuModuleUnload`), which waits until
/// the context's work is done (measured on the H200, driver 580: 300 ms behind a 300 ms kernel
/// of another module on another stream, `examples/probes/unload_probe.cu`). Load it once and
/// keep it across steps: a struct made and dropped per step waits for the device each step.
/// Inside a `host` closure that wait never ends (the device waits for the closure): a closure
/// that drops a module's last owner deadlocks (measured on the H200), as one that synchronizes
/// its stream does.
///
/// # Programmatic kernels
/// `#[programmatic]` on a kernel declaration says that the kernel waits for the kernels before
/// it in its own code (`griddepcontrol.wait`; CUDA C: `cudaGridDependencySynchronize()`):
///
/// ```ignore
/// kernels! {
///     pub struct Heat {
///         #[programmatic]
///         fn stencil(nx: u32, ny: u32, alpha: f32, src: &[f32], dst: &mut [f32]);
///     }
/// }
/// ```
/// ```cuda
/// extern "C" __global__ void stencil(unsigned nx, unsigned ny, float alpha, const float *src, float *dst) {
///     asm volatile("griddepcontrol.wait;" ::: "memory");   // first: before any access or return
///     ...
/// }
/// ```
/// Then every edge into its node from a kernel node, inferred or `.after`, in [`graph!`] and
/// [`GraphBuilder`], is a programmatic edge (programmatic dependent launch, [`EdgeKind`]): the
/// kernel may start while the kernel before it still runs, which cuts the launch latency of a
/// chain of dependent kernels (0.41 µs instead of 0.73 µs per node on an H200). Edges from other
/// nodes (copies, memsets, captured work, device control flow) stay plain, and a kernel that
/// such a plain edge joins gets plain edges only (a join of both kinds measured slower than
/// all plain, [`EdgeKind`]); inside the body of
/// a `device_while`/`device_if`/`device_switch` the same rule holds (with a driver of CUDA 13.0
/// or later; older ones get plain edges there). On devices before compute capability 9.0 or
/// drivers before CUDA 12.3 every edge is plain ([`Stats::programmatic_fallbacks`]), never an
/// error. In [`Mode::Eager`] such a kernel is launched with programmatic stream serialization.
/// `Heat::PROGRAMMATIC` lists the kernels declared so (for [`Plan::edge_kinds`]).
///
/// # Safety of `load`
/// `load` is the one `unsafe` step: like cudarc's `launch`, it trusts that each kernel has exactly
/// the declared parameter types and, for the launches `graph!` makes, reads only its `&[T]`
/// buffers and writes only its `&mut [T]` buffers, within their lengths. For a kernel declared
/// `#[programmatic]` it also trusts that, on a device of compute capability 9.0 or later, every
/// thread executes `griddepcontrol.wait` before it reads or writes any buffer and before it
/// returns (an early `return` waits first), with the module compiled for that architecture
/// (NVRTC `arch: sm_90`, or the device's own): see [`EdgeKind`] for why both halves matter.
/// Given that, `graph!` is safe: lifetimes, stream ordering, aliasing and copies are checked.
pub use cudagraph_macros::kernels;

/// Runs the statements of a [`graph!`] body eagerly on a stream: each kernel launch made by a
/// [`kernels!`] method, copy, memset, fill, zero and capture is enqueued at once, in source
/// order (`cuLaunchKernel`, `cuMemcpyAsync`, `cuMemsetD*Async`), without building a graph.
///
/// ```ignore
/// // one statement
/// cudagraph::eager!(&stream, k.stencil(n, n, alpha, &u, &mut v).launch(cfg2d))?;
/// // several, with `graph!`'s syntax (`let`, `.after`, `if`, `for`)
/// cudagraph::eager!(&stream, {
///     k.stencil(n, n, alpha, &u, &mut v).launch(cfg2d);
///     k.boundary(n, n, &mut v).launch(cfg1d);
/// })?;
/// ```
/// It is the typed, safe replacement for cudarc's untyped `unsafe` `.arg()` chains, and the way
/// to compare a graph against plain launches: the same statements in `graph!` and in `eager!`
/// compute the same result, one as a graph launch, the other as one launch per statement (write
/// the step once as a `macro_rules!` body or a function taking the stream, and time both).
///
/// The body is checked and borrowed exactly as in `graph!` (the same compile-time errors, one
/// borrow per place, [`Error::Aliasing`], [`Error::InvalidNode`], launch-dimension and copy-length
/// errors, each naming the statement and its source location, all before anything is enqueued),
/// and it runs through a fresh [`GraphCache`] in [`Mode::Eager`] (see [`GraphCache::eager`]), so the
/// buffers are ordered with their own streams as for a graph launch. A driver error part way
/// names the statement and leaves the earlier statements enqueued, as plain launches do. The
/// stream must not be capturing. Evaluates to `cudagraph::Result<()>`; no plan is registered
/// for [`plans`].
///
/// A `host` statement's closure runs after the call returned, when the stream reaches it; a
/// panic in it is caught, and with `graph!` it comes back as [`Error::HostFunction`] from the
/// cache's next call. `eager!`'s cache is dropped with the call, so such a panic is only printed
/// by the panic hook (found by review 33d): to get it as an error, run the body with `graph!`
/// on a [`GraphCache`] in [`Mode::Eager`] that you keep: its next call returns it.
pub use cudagraph_macros::eager;

/// Re-exported for scalar kernel arguments of your own types: `#[derive(NoUninit)]`.
pub use bytemuck;

/// The primary context of device `ordinal`, or [`Error::NoDriver`] on a machine without a CUDA
/// driver (where cudarc's `CudaContext::new` would panic).
pub fn context(ordinal: usize) -> Result<std::sync::Arc<cudarc::driver::CudaContext>> {
    if !driver_available() {
        return Err(Error::NoDriver);
    }
    Ok(cudarc::driver::CudaContext::new(ordinal)?)
}

#[cfg(not(any(
    feature = "cuda-12040",
    feature = "cuda-12050",
    feature = "cuda-12060",
    feature = "cuda-12080",
    feature = "cuda-12090",
    feature = "cuda-13000",
    feature = "cuda-13010",
    feature = "cuda-13020"
)))]
compile_error!(
    "cudagraph needs one CUDA version feature, e.g. `cuda-13000` (the default) or `cuda-12080` with `default-features = false`"
);

/// The device's graph memory pool (`cuDeviceGetGraphMemAttribute`): how much physical memory
/// graph-owned buffers (`alloc` statements, [`GraphBuilder::alloc`]) of every graph of the
/// device use and reserve, in bytes.
///
/// How to read it against a buffer held by the user: a `CudaSlice` of `n` bytes occupies its
/// `n` bytes from allocation to drop, between calls too. A graph-owned buffer occupies memory of
/// the pool only while a launch runs between its alloc and free nodes; the pool
/// (`reserved_current`) keeps the physical memory between launches and hands it to the next
/// launch of any graph of the device, so several graphs' (or several variants') scratch buffers
/// share it, and buffers whose lifetimes do not overlap within one graph may share it too.
/// What is saved against user-held buffers is then `sum of the alloc nodes' bytes` (of every
/// graph of the device: [`GraphCache::graph_owned_bytes`] per cache) minus
/// `reserved_high`; `used_high` is the peak actually used. `cuDeviceGraphMemTrim` gives the
/// unused reserve back to the device; `cuDeviceSetGraphMemAttribute` resets the high marks.
pub fn graph_mem_usage(ctx: &cudarc::driver::CudaContext) -> Result<GraphMemUsage> {
    use crate::error::Call;
    use cudarc::driver::sys::CUgraphMem_attribute as A;
    let device = ctx.cu_device();
    let get = |a| raw::graph_mem_attribute(device, a).call("cuDeviceGetGraphMemAttribute");
    Ok(GraphMemUsage {
        used_current: get(A::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)?,
        used_high: get(A::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)?,
        reserved_current: get(A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)?,
        reserved_high: get(A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)?,
    })
}

/// `true` when the CUDA driver library can be loaded on this machine (`libcuda.so` on Linux).
/// Nothing else touches the driver before a context is created, so a program can check this first
/// and exit with a clear message on machines without a GPU.
pub fn driver_available() -> bool {
    raw::driver_present()
}

#[doc(hidden)]
pub mod __private {
    pub use crate::kind::{
        CallWords, Copy2dNode, CopyNode, IntoNode, KernelArgs, LaunchNode, NodeParams, copy,
        copy_2d, copy_2d_on, copy_on, empty, event_record, event_wait, memset, memset_2d, zero,
    };
    pub use crate::operand::Guard;
    pub use crate::operand::{ReadArg, WriteArg};
    pub use crate::plan::Registered;
    pub use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
    pub use cudarc::nvrtc::Ptx;
    pub use inventory;

    pub use crate::operand::{Acquire, AcquireMut, Scalar};

    use crate::error::{Call, Error};
    use crate::operand::{Handle, Place, PlaceMut, sealed::Token};
    use std::sync::Arc;

    pub use crate::operand::CallId;

    /// A new [`CallId`].
    #[inline]
    pub fn begin_call() -> CallId {
        CallId(crate::operand::next_id())
    }

    /// `&place`, place number `index` of `call`: one shared borrow for the whole `graph!` call.
    #[inline]
    pub fn acquire<'a, P: Place + ?Sized>(
        place: &'a P,
        stream: &'a CudaStream,
        call: &CallId,
        index: u32,
    ) -> (P::Read<'a>, Guard<'a>) {
        let (r, g) = place.acquire(stream);
        (r.with_tag(crate::operand::tag(call.0, index), Token(())), g)
    }

    /// Another spelling of a place the call borrows (`&x` beside `&mut *x`): `graph!` borrows
    /// the place once, through one spelling, and checks here that each other one is a [`Place`]
    /// too. Both then name one buffer: the only `Place`s that deref to another `Place` are `&P`
    /// and `&mut P` (no buffer type implements `Deref`; keep it so). Nothing happens at run time.
    #[inline(always)]
    pub fn same_place<P: Place + ?Sized>(_: &P) {}

    /// The binding an unrolled `for`'s variable gets in `graph!`'s hygiene probe (see
    /// [`loop_variable`]).
    pub struct LoopVariable;

    /// What each use of an unrolled `for`'s variable must name (see [`loop_variable`]).
    #[diagnostic::on_unimplemented(
        message = "this `{Self}` is not the graph `for`'s variable",
        label = "a name of another macro context than the `for`'s pattern",
        note = "`graph!` replaces every token spelled like an unrolled `for`'s variable by its value; under `macro_rules!` hygiene this one names another variable (a caller's): give the `for` a variable of another spelling, or pass the variable to the macro with the body"
    )]
    pub trait IsLoopVariable {}
    impl IsLoopVariable for LoopVariable {}

    /// `graph!`'s compile-time check that a token it replaces as an unrolled `for`'s variable
    /// names that variable: the probe binds the variable with the `for` pattern's span to a
    /// [`LoopVariable`] and passes each token here with its own span, so a token of another
    /// macro context (which hygiene resolves to another binding) does not compile. Nothing
    /// happens at run time.
    #[inline(always)]
    pub fn loop_variable<T: IsLoopVariable + ?Sized>(_: &T) {}

    /// `&mut place`, place number `index` of `call`: one exclusive borrow for the whole call.
    #[inline]
    pub fn acquire_mut<'a, P: PlaceMut + ?Sized>(
        place: &'a mut P,
        stream: &'a CudaStream,
        call: &CallId,
        index: u32,
    ) -> (P::Read<'a>, P::Write<'a>, Guard<'a>) {
        let (r, w, g) = place.acquire_mut(stream);
        let t = crate::operand::tag(call.0, index);
        (r.with_tag(t, Token(())), w.with_tag(t, Token(())), g)
    }

    /// A [`Guards`] slot with no guard.
    const EMPTY: u8 = 0;
    /// A [`Guards`] slot with its guard.
    const PUT: u8 = 1;
    /// A [`Guards`] slot of an array element acquired in one loop whose guard is inert and
    /// its buffer on the call's stream: not stored, made again from the element's handle
    /// ([`InertGuard`](crate::operand::InertGuard)), itself made from the element kept in the
    /// array's [`EachStore`], only if the call needs it ([`Guards::made`]).
    const REMADE: u8 = 2;
    /// Arrays of one call whose elements' guards may be [`REMADE`] (further arrays put theirs).
    const REMADE_ARRAYS: usize = 4;

    /// An array of [`REMADE`] elements: its store (the [`EachStore`] `out` of
    /// `acquire_mut_each`, borrowed for the `Guards`' lifetime `'a`), their place numbers, and
    /// what makes element `k`'s guard ([`remake`]).
    struct Remade<'a> {
        store: *const u8,
        index: &'static [u32],
        remake: unsafe fn(*const u8, usize) -> Guard<'a>,
    }

    /// Element `k`'s guard of an array's handles kept in the [`EachStore`] at `store`.
    ///
    /// # Safety
    /// `store` points to an `EachStore<'a, P, M>` that [`acquire_mut_each`] filled, alive and
    /// unchanged, whose handles make inert guards ([`InertGuard`](crate::operand::InertGuard)); `k < M`.
    unsafe fn remake<'a, P: PlaceMut + 'a, const M: usize>(store: *const u8, k: usize) -> Guard<'a>
    where
        P::Write<'a>: crate::operand::InertGuard<'a>,
    {
        use crate::operand::InertGuard;
        // SAFETY: the caller's contract.
        unsafe { (*store.cast::<EachStore<'a, P, M>>()).handle(k).inert_guard() }
    }

    /// The guards of one `graph!` call's `N` places, each put at its place's index as the place
    /// is acquired ([`acquire_into`], [`acquire_mut_into`], [`acquire_mut_each`],
    /// [`scratch`]), then handed to the cache in place order by [`Guards::all`]. Built in
    /// place instead of an array literal of the places' guards, which moved every guard once
    /// more, in straight-line code of about 8 instructions per place (a 1000-place body's call
    /// fetched about 300 KB of code, `.ci/host-profile`). Dropping it drops the guards put so
    /// far (after a panic part way through the acquisitions, too).
    ///
    /// Made [`with_words`](Self::with_words), it also puts each guard into the call's words as
    /// it is put (its address range: see [`CallWords`]), and notes whether any guard has
    /// something to record or a buffer on another stream than the call's, so that an unchanged
    /// call skips the aliasing check, the stream ledger and the guards' drops when none has.
    pub struct Guards<'a, const N: usize> {
        slots: [core::mem::MaybeUninit<Guard<'a>>; N],
        /// Each slot's state: [`EMPTY`], [`PUT`] (its guard written) or [`REMADE`] (an array
        /// element whose guard is made from its handle when wanted, see [`Remade`]).
        set: [u8; N],
        /// Arrays of [`REMADE`] elements ([`acquire_mut_each`]).
        remade: [Option<Remade<'a>>; REMADE_ARRAYS],
        /// The slots of the guards put so far that are not inert ([`Guard::is_inert`]) lie in
        /// `live.0..live.1` (empty when `live.0 >= live.1`): the drop walks that range only, not
        /// every place (a 1000-place call with one pinned copy walked 1000 slots: 4000
        /// instructions, `.ci/host-profile`). An array acquired in one loop with a guard that
        /// is not inert widens it to every slot.
        live: (usize, usize),
        /// A guard put so far has a buffer whose own stream is not `stream` (or several
        /// buffers): see [`CallWords`]'s `foreign`.
        foreign: bool,
        stream: Option<&'a CudaStream>,
        words: Option<CallWords>,
    }

    impl<const N: usize> Default for Guards<'_, N> {
        #[inline(always)]
        fn default() -> Self {
            Self::new()
        }
    }

    impl<'a, const N: usize> Guards<'a, N> {
        /// No guard yet.
        #[inline(always)]
        pub fn new() -> Self {
            Guards {
                slots: [const { core::mem::MaybeUninit::uninit() }; N],
                set: [EMPTY; N],
                remade: [const { None }; REMADE_ARRAYS],
                live: (N, 0),
                foreign: false,
                stream: None,
                words: None,
            }
        }

        /// No guard yet; each guard put goes into `words` too, and is compared with `stream`
        /// (the call's), until [`Self::take_words`].
        #[inline(always)]
        pub fn with_words(stream: &'a CudaStream, mut words: CallWords) -> Self {
            words.word(crate::kind::kernel::GUARDS_TAG);
            Guards {
                slots: [const { core::mem::MaybeUninit::uninit() }; N],
                set: [EMPTY; N],
                remade: [const { None }; REMADE_ARRAYS],
                live: (N, 0),
                foreign: false,
                stream: Some(stream),
                words: Some(words),
            }
        }

        /// The call's words, with every place's guard in them, once every place is acquired.
        ///
        /// # Panics
        /// If the guards were not made [`with_words`](Self::with_words) or a place's guard was
        /// not put (a bug of the macro).
        #[inline]
        pub fn take_words(&mut self) -> CallWords {
            assert!(self.set.iter().all(|&s| s != EMPTY), "graph!: a place was not acquired");
            let mut w = self.words.take().expect("graph!: guards made without words");
            w.guarded = true;
            w.foreign = self.foreign;
            w.guards_same = w.ok && !w.diverged;
            w
        }

        /// Puts place `index`'s guard.
        ///
        /// # Panics
        /// If `index` is not below `N` or its guard was put already (a bug of the macro).
        #[inline(always)]
        fn put(&mut self, index: u32, guard: Guard<'a>) {
            let i = self.vacant(index);
            self.fill(i, guard);
        }

        /// Place `index`'s slot, checked before its guard is made: nothing between the
        /// guard's making and [`Self::fill`] can panic, so it is written straight into its
        /// slot (a panic path in between kept each guard in a stack temporary, copied into
        /// the slot with loads wider than the stores that made it: a store-forwarding stall
        /// per place, most of the acquisition loop's time, `.ci/host-profile`).
        ///
        /// # Panics
        /// If `index` is not below `N` or its guard was put already (a bug of the macro).
        #[inline(always)]
        fn vacant(&self, index: u32) -> usize {
            let i = index as usize;
            assert!(self.set[i] == EMPTY, "graph!: place {i} acquired twice");
            i
        }

        /// Puts the guard of slot `i`, from [`Self::vacant`].
        #[inline(always)]
        fn fill(&mut self, i: usize, guard: Guard<'a>) {
            // What the words and flags need, read as values before the guard is stored: read
            // back from its slot, the 1-byte `write` was loaded wider than the store that had
            // just made it, and a reference to the guard before the store kept it in a stack
            // temporary copied with wider loads (store-forwarding stalls, each half of the
            // acquisition loop's time, `.ci/host-profile`).
            let words = (guard.start, guard.bytes, guard.write);
            let parts = !guard.children().is_empty();
            if !guard.is_inert() {
                self.live = (self.live.0.min(i), self.live.1.max(i + 1));
            }
            self.foreign |= parts || self.stream.is_none_or(|s| guard.foreign_to(s));
            let slot: &Guard<'a> = self.slots[i].write(guard);
            self.set[i] = PUT;
            if let Some(w) = &mut self.words {
                if parts {
                    w.guard_parts(slot.children());
                } else {
                    w.guard(words);
                }
            }
        }

        /// The words from `begin` (taken before an array's guards were put) to here are that
        /// array's elements' ([`CallWords::elements`]).
        #[inline(always)]
        fn elements(&mut self, begin: Option<usize>) {
            if let (Some(w), Some(b)) = (&mut self.words, begin) {
                w.elements(b);
            }
        }

        /// The contexts of the elements of an array acquired in one loop
        /// ([`acquire_mut_each`]), into the words: the first one's and `0` when all are the
        /// same, else the first one's, `1` and each one's; then, for pinned host memory, each
        /// one's allocation id. With each element's guard, the words then hold every field of
        /// its handle a node can depend on ([`word_repeat`]).
        #[inline]
        fn contexts<H: crate::operand::Handle>(&mut self, first: u64, mixed: bool, all: &[H]) {
            if let Some(w) = &mut self.words {
                w.word(first);
                w.word(u64::from(mixed));
                if mixed {
                    for h in all {
                        w.word(h.context_word());
                    }
                }
                if H::HOST {
                    // Pinned host memory: each element's allocation id too (one driver query
                    // each), as a copy's words hold it (`pack_copy`): the driver keeps the host
                    // address it resolved when a copy node was set, so an element freed and
                    // another allocated at the same address must make the call changed
                    // (review 18: the launch crashed).
                    for h in all {
                        w.word(h.host_buffer_word());
                    }
                }
            }
        }

        /// Every place's guard, in place order, the guards of [`REMADE`] elements made now.
        ///
        /// # Panics
        /// If a place's guard was not put (a bug of the macro).
        #[inline]
        pub fn made(&mut self) -> &[Guard<'a>] {
            if self.remade.iter().any(Option::is_some) {
                self.remake();
            }
            self.all()
        }

        /// The guards of the [`REMADE`] elements, made from their handles (a call that is not
        /// unchanged, or whose guards record or order something, needs them all).
        #[cold]
        #[inline(never)]
        fn remake(&mut self) {
            for r in &mut self.remade {
                let Some(r) = r.take() else { continue };
                for (k, &i) in r.index.iter().enumerate() {
                    let i = i as usize;
                    if self.set[i] == REMADE {
                        // SAFETY: `r` was made by `acquire_mut_each` when it returned, from its
                        // `EachStore`, filled then and borrowed for `'a` (so alive and
                        // unchanged), of `P` and `M` matching `r.remake`; `k` is below `M`
                        // (the length of `r.index`).
                        self.slots[i].write(unsafe { (r.remake)(r.store, k) });
                        self.set[i] = PUT;
                    }
                }
            }
        }

        /// Every place's guard, in place order.
        ///
        /// # Panics
        /// If a place's guard was not put, or is [`REMADE`] and not made yet ([`Self::made`]
        /// makes it).
        #[inline]
        pub fn all(&self) -> &[Guard<'a>] {
            assert!(
                self.set.iter().all(|&s| s == PUT),
                "graph!: a place was not acquired, or its guard not made yet (Guards::made)"
            );
            // SAFETY: every slot is initialized (checked above); `MaybeUninit<T>` has `T`'s
            // layout, and the slice borrows `self`, which drops the guards only when dropped.
            unsafe { core::slice::from_raw_parts(self.slots.as_ptr().cast::<Guard<'a>>(), N) }
        }
    }

    pub use crate::operand::GuardList;

    impl<'a, const N: usize> GuardList<'a> for Guards<'a, N> {
        fn places(&self) -> usize {
            N
        }
        fn made(&mut self) -> &[Guard<'a>] {
            Guards::made(self)
        }
    }

    impl<const N: usize> Drop for Guards<'_, N> {
        fn drop(&mut self) {
            let (from, to) = self.live;
            if from >= to {
                // Every guard put is inert (see below): nothing to drop.
                return;
            }
            for (slot, &set) in self.slots[from..to].iter_mut().zip(&self.set[from..to]) {
                // SAFETY (of the read): `PUT` slots were written by `put`. A guard that
                // records and owns nothing is left undropped: its drop does nothing, and the
                // call into it per place was 8 % of an unchanged 1000-place call
                // (`.ci/host-profile`). (A `REMADE` slot holds nothing: its guard would be
                // inert.)
                if set == PUT && !unsafe { slot.assume_init_ref() }.is_inert() {
                    // SAFETY: `set` slots were written by `put` and are dropped only here.
                    unsafe { slot.assume_init_drop() }
                }
            }
        }
    }

    /// [`acquire`], its guard put into `guards`.
    #[inline]
    pub fn acquire_into<'a, P: Place + ?Sized, const N: usize>(
        place: &'a P,
        stream: &'a CudaStream,
        call: &CallId,
        index: u32,
        guards: &mut Guards<'a, N>,
    ) -> P::Read<'a> {
        let i = guards.vacant(index);
        let (r, g) = acquire(place, stream, call, index);
        guards.fill(i, g);
        r
    }

    /// [`acquire_mut`], its guard put into `guards`.
    #[inline]
    pub fn acquire_mut_into<'a, P: PlaceMut + ?Sized, const N: usize>(
        place: &'a mut P,
        stream: &'a CudaStream,
        call: &CallId,
        index: u32,
        guards: &mut Guards<'a, N>,
    ) -> (P::Read<'a>, P::Write<'a>) {
        let i = guards.vacant(index);
        let (r, w, g) = acquire_mut(place, stream, call, index);
        guards.fill(i, g);
        (r, w)
    }

    /// Where [`acquire_mut_each`] keeps an array's write handles (`out`), declared by `graph!`
    /// before the call's [`Guards`], which may make the elements' guards from it
    /// ([`Guards::made`]). Either every handle is written as its element is acquired, or, on a
    /// call whose elements all have no events, live on the call's stream and have the
    /// addresses and lengths of the last call's words, none is: the elements stay borrowed
    /// here and a handle is made from its element when a statement asks for it
    /// ([`EachHandles::at`]), which an unchanged call does for the first iteration of a run
    /// only (40 bytes stored per element, most of an unchanged 1000-element call's time on the
    /// CPU stub driver).
    pub struct EachStore<'a, P: PlaceMut + 'a, const M: usize> {
        handles: core::mem::MaybeUninit<[P::Write<'a>; M]>,
        /// Set when no handle is written: the elements, borrowed for `'a`, their place numbers
        /// and the call's id (each handle's tag).
        lazy: Option<(EachMut<'a, P, M>, &'static [u32; M], u64)>,
    }

    impl<'a, P: PlaceMut + 'a, const M: usize> EachStore<'a, P, M> {
        /// Nothing kept yet.
        #[inline(always)]
        #[allow(clippy::new_without_default)]
        pub fn new() -> Self {
            // Only `lazy` written: a constant `EachStore { handles: uninit, lazy: None }` was
            // zeroed whole by its callers, 40 KB for 1000 elements per call.
            let mut s = core::mem::MaybeUninit::<Self>::uninit();
            // SAFETY: `lazy` is written in place; `handles` is a `MaybeUninit`, valid
            // uninitialized, so the whole is initialized after the write.
            unsafe {
                core::ptr::addr_of_mut!((*s.as_mut_ptr()).lazy).write(None);
                s.assume_init()
            }
        }

        /// Element `k`'s write handle.
        ///
        /// # Safety
        /// [`acquire_mut_each`] filled this store and returned.
        #[inline(always)]
        unsafe fn handle(&'a self, k: usize) -> P::Write<'a> {
            match &self.lazy {
                // SAFETY: `acquire_mut_each` wrote every handle when it did not set `lazy`
                // (the caller's contract).
                None => unsafe { self.handles.assume_init_ref()[k] },
                // SAFETY: `acquire_mut_each` set `lazy` only when `acquire_mut_element` gave
                // no guard for any element, in the borrow `places` holds for `'a`, which
                // nothing changes meanwhile (this store holds it, lends only shared access,
                // and never `take`s again).
                Some((places, index, call)) => unsafe { inert_handle(places, index, *call, k) },
            }
        }
    }

    /// Element `k`'s write handle, tagged as place `index[k]` of call `call`, made again from
    /// the element ([`AcquireMut::inert_write`]) without acquiring it.
    ///
    /// # Safety
    /// Element `k` was acquired with `acquire_mut_element` in the borrow `places` holds, which
    /// gave no guard; it is not borrowed mutably while the handle is made, and has not changed
    /// since.
    #[inline(always)]
    unsafe fn inert_handle<'a, P: PlaceMut + 'a, const M: usize>(
        places: &EachMut<'a, P, M>,
        index: &[u32; M],
        call: u64,
        k: usize,
    ) -> P::Write<'a> {
        // SAFETY: the caller's contract.
        let w = unsafe { places.get(k).inert_write() };
        let w = w.expect("graph!: an element without a remade handle made again");
        w.with_tag(crate::operand::tag(call, index[k]), Token(()))
    }

    /// The write handles of an array acquired in one loop, as [`acquire_mut_each`] returns
    /// them: element `k`'s is [`Self::at`]`(k)`.
    pub struct EachHandles<'a, P: PlaceMut + 'a, const M: usize>(&'a EachStore<'a, P, M>);

    impl<'a, P: PlaceMut + 'a, const M: usize> Clone for EachHandles<'a, P, M> {
        fn clone(&self) -> Self {
            *self
        }
    }
    impl<'a, P: PlaceMut + 'a, const M: usize> Copy for EachHandles<'a, P, M> {}

    impl<'a, P: PlaceMut + 'a, const M: usize> EachHandles<'a, P, M> {
        /// The number of elements, `M`.
        pub fn len(self) -> usize {
            M
        }

        /// Whether there is no element.
        pub fn is_empty(self) -> bool {
            M == 0
        }

        /// Element `k`'s write handle (made from the element if the store kept none).
        ///
        /// # Panics
        /// If `k` is not below `M`.
        #[inline(always)]
        pub fn at(self, k: usize) -> P::Write<'a> {
            // SAFETY: only `acquire_mut_each` makes an `EachHandles`, after it filled the store.
            unsafe { self.0.handle(k) }
        }
    }

    /// [`acquire_mut_into`] of `M` written elements of one array (`places`, from
    /// [`DisjointMut::__cudagraph_each_mut`]), element `k` being place number `index[k]`, in
    /// one loop: `graph!` uses
    /// it for the elements an unrolled `for` indexes with constants (`&mut bufs[i]`), which were
    /// one straight-line acquisition each (about 130 bytes of code per place).
    pub fn acquire_mut_each<'a, P: PlaceMut, const M: usize, const N: usize>(
        out: &'a mut EachStore<'a, P, M>,
        mut places: EachMut<'a, P, M>,
        stream: &'a CudaStream,
        call: &CallId,
        index: &'static PlaceIndices<M, N>,
        guards: &mut Guards<'a, N>,
    ) -> EachHandles<'a, P, M>
    where
        P::Write<'a>: crate::operand::InertGuard<'a>,
    {
        use crate::operand::InertGuard;
        let index = &index.0;
        // What `Guards::fill` does per place, done for the whole array: its flags and the
        // elements' contexts kept in registers and stored once, and the guards' words compared
        // with the `2 * M` words they must equal, bounds checked once and differences folded
        // into one word (about 20 instructions per element less than a `fill` per element,
        // `.ci/host-profile` under callgrind). Where the words are not compared in place, or
        // differ, or an element is a place of several buffers, each guard is put into the
        // words after the loop as `fill` would have, in the same order.
        //
        // On a call whose words are compared in one piece, an element whose guard is inert,
        // whose buffer lives on the call's stream and whose words are equal gets no guard
        // stored ([`REMADE`]), and no handle either: the first loop (`probe`) acquires the
        // elements while every one so far is such, storing nothing. If all are, the array is
        // listed in `guards.remade` and the store keeps the elements ([`EachStore`]): guards
        // and handles are made from them only if asked for. At the first element that is not,
        // the handles and guards of the ones before it are made and stored, and the second
        // loop goes on from it as `Guards::fill` would, storing each handle and guard.
        let Guards { slots: gslots, set, remade, live, foreign, stream: call_stream, words } =
            guards;
        let call_stream = *call_stream;
        let call_ctx = stream.context().cu_ctx() as u64;
        let ahead = words.as_ref().and_then(|w| w.guards_ahead::<M>());
        // Where this array's guards' and contexts' words begin ([`Guards::elements`]).
        let begin = words.as_ref().map(|w| w.at());
        let probe = <P::Write<'a> as InertGuard<'a>>::REMADE
            && !<P::Write<'a> as Handle>::HOST
            && remade.iter().any(Option::is_none);
        // Elements acquired by the first loop, and the one it stopped at (acquired too).
        let mut start = 0;
        let mut stopped = None;
        if let (true, Some(a), Some(s)) = (probe, ahead, call_stream) {
            // A `BufferArray` whose memo says what this loop would find of every element (each
            // without events, on `s`, with the words `a`): nothing to acquire. Its elements
            // were not reachable mutably since it was made (`BufferArray` forgets it
            // otherwise), so each one's acquisition would wait for no event and record none
            // (cudarc gives a buffer both events or neither), and give these words.
            // SAFETY: `memo` is null or borrowed mutably for `'a` (`EachMut`), and nothing
            // else uses it meanwhile.
            let mut memo = unsafe { places.memo.as_mut() };
            let hit = memo.as_deref().is_some_and(|m| m.hit(places.idx, s, a))
                // Left to the second loop, which panics.
                // SAFETY: `i < N` (`PlaceIndices`).
                && index.iter().all(|&i| unsafe { *set.get_unchecked(i as usize) } == EMPTY);
            if hit {
                start = M;
                if let Some(m) = memo.as_deref_mut() {
                    m.count_hit();
                }
            }
            while start < M {
                let i = index[start] as usize;
                // SAFETY: `i < N` (`PlaceIndices`).
                if unsafe { *set.get_unchecked(i) } != EMPTY {
                    // Left to the second loop, which panics.
                    break;
                }
                let (w, g) = AcquireMut::acquire_mut_element(places.take(start), stream);
                if g.is_none() {
                    let (own, from, bytes) = w.inert_range();
                    let d = crate::kind::kernel::guard_diff(a[start], (from, bytes, true));
                    if d == 0 && own.is_some_and(|o| core::ptr::eq(o, s)) {
                        start += 1;
                        continue;
                    }
                }
                stopped = Some((w, g));
                break;
            }
            if start == M {
                if !hit && let Some(m) = memo {
                    m.remember(places.idx, s, a);
                }
                // Every element inert, on the call's stream, its words equal: nothing stored.
                for &i in index {
                    // SAFETY: `i < N` (`PlaceIndices`).
                    unsafe { *set.get_unchecked_mut(i as usize) = REMADE };
                }
                if let Some(w) = words {
                    w.skip_guards::<M>();
                }
                // (The field alone: a whole `EachStore` written here was built on the stack
                // and copied, uninitialized handles and all, 40 KB for 1000 elements.)
                out.lazy = Some((places, index, call.0));
                let out: &'a EachStore<'a, P, M> = out;
                if M > 0 {
                    let r = Remade {
                        store: core::ptr::from_ref(out).cast(),
                        index,
                        remake: remake::<P, M>,
                    };
                    // A free entry: `probe` begins only with one.
                    if let Some(e) = remade.iter_mut().find(|e| e.is_none()) {
                        *e = Some(r);
                    }
                }
                // Every element's context is the call stream's; device memory (no pinned
                // allocation ids to put).
                guards.contexts::<P::Write<'a>>(if M == 0 { 0 } else { call_ctx }, false, &[]);
                guards.elements(begin);
                return EachHandles(out);
            }
        }
        // A plain loop writing into the caller's array (`array::map` moved each element
        // through its adapters, and an array returned by value was copied once more: 40 KB
        // for 1000 places). Only the write handle is kept (half the bytes stored per place): a
        // statement that reads the element uses its `read()`.
        out.lazy = None;
        // SAFETY: `MaybeUninit<[T; M]>` has the layout of `[MaybeUninit<T>; M]`, every bit
        // pattern of which is valid.
        let slots =
            unsafe { &mut *out.handles.as_mut_ptr().cast::<[core::mem::MaybeUninit<_>; M]>() };
        // The elements the first loop acquired (inert, on the call's stream, their words
        // equal): their handles and guards, made again from them.
        for k in 0..start {
            // SAFETY: the first loop acquired element `k` (its borrow no longer used) with no
            // guard, and nothing changed it since.
            let w = slots[k].write(unsafe { inert_handle(&places, index, call.0, k) });
            // SAFETY: `index[k] < N` (`PlaceIndices`); the first loop found its slot `EMPTY`.
            unsafe {
                gslots.get_unchecked_mut(index[k] as usize).write(w.inert_guard());
                *set.get_unchecked_mut(index[k] as usize) = PUT;
            }
        }
        // The flags of every element, or-ed into one register (the loop's values fill the
        // registers; each flag of its own was spilled and reloaded per element): bit 0 a
        // guard is not inert, bit 1 a buffer lives on another stream than the call's (or is
        // a place of several buffers), bit 2 a place of several buffers, bit 3 a buffer of
        // another context than the call's stream.
        let mut flags = 0u8;
        let mut diff = 0u64;
        for k in start..M {
            let i = index[k] as usize;
            let (w, g) = match stopped.take() {
                Some(wg) => wg,
                None => {
                    // SAFETY: `i < N` (`PlaceIndices`).
                    if unsafe { *set.get_unchecked(i) } != EMPTY {
                        // The guards put so far are dropped with `guards`, which must know
                        // first whether any records something (review 20).
                        if flags & 1 != 0 {
                            *live = (0, N);
                        }
                        *foreign |= flags & 2 != 0;
                        acquired_twice(i);
                    }
                    AcquireMut::acquire_mut_element(places.take(k), stream)
                }
            };
            let tag = crate::operand::tag(call.0, i as u32);
            let w = slots[k].write(w.with_tag(tag, Token(())));
            let ctx = Handle::context_word(w);
            let g = match g {
                None => {
                    // Inert, of device memory: made from the handle, here only for its
                    // words and stream (a value the loop need not keep).
                    let (own, start, bytes) = w.inert_range();
                    let other =
                        call_stream.is_none_or(|s| own.is_some_and(|o| !core::ptr::eq(o, s)));
                    flags |= u8::from(other) << 1 | u8::from(ctx != call_ctx) << 3;
                    if let Some(a) = ahead {
                        diff |= crate::kind::kernel::guard_diff(a[k], (start, bytes, true));
                    }
                    w.inert_guard()
                }
                Some(g) => {
                    let parts = !g.children().is_empty();
                    let other = parts || call_stream.is_none_or(|s| g.foreign_to(s));
                    flags |= u8::from(!g.is_inert())
                        | u8::from(other) << 1
                        | u8::from(parts) << 2
                        | u8::from(ctx != call_ctx) << 3;
                    if let Some(a) = ahead {
                        diff |= crate::kind::kernel::guard_diff(a[k], (g.start, g.bytes, g.write));
                    }
                    g
                }
            };
            // SAFETY: `i < N` (`PlaceIndices`).
            unsafe {
                gslots.get_unchecked_mut(i).write(g);
                *set.get_unchecked_mut(i) = PUT;
            }
        }
        if flags & 1 != 0 {
            // Some element's guard records something: every slot may hold one.
            *live = (0, N);
        }
        *foreign |= flags & 2 != 0;
        let compared = ahead.is_some();
        if let Some(w) = words {
            if compared && diff == 0 && flags & 4 == 0 {
                w.skip_guards::<M>();
            } else {
                put_guard_words(w, gslots, index);
            }
        }
        // SAFETY: the loops wrote all `M` elements (a panic part way returns nothing, and
        // leaves written handles, which own nothing, undropped in `out`).
        let out: &'a EachStore<'a, P, M> = out;
        let all: &'a [P::Write<'a>; M] = unsafe { out.handles.assume_init_ref() };
        let (first, mixed) = if flags & 8 == 0 {
            // Every element's context is the call stream's (or there is none).
            (if M == 0 { 0 } else { call_ctx }, false)
        } else {
            mixed_contexts(all)
        };
        guards.contexts(first, mixed, all);
        guards.elements(begin);
        EachHandles(out)
    }

    /// The panic of a place number given twice in one call (a bug of the macro).
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn acquired_twice(i: usize) -> ! {
        panic!("graph!: place {i} acquired twice")
    }

    /// The first handle's context word and whether any other differs from it.
    #[cold]
    #[inline(never)]
    fn mixed_contexts<H: crate::operand::Handle>(all: &[H]) -> (u64, bool) {
        let first = all.first().map_or(0, H::context_word);
        (first, all.iter().any(|h| h.context_word() != first))
    }

    /// The words of the guards of places `index` (put, in that order), as [`Guards::fill`]
    /// puts them: an array's ([`acquire_mut_each`]) when they were not compared in one piece.
    #[cold]
    #[inline(never)]
    fn put_guard_words(
        words: &mut CallWords,
        slots: &[core::mem::MaybeUninit<Guard<'_>>],
        index: &[u32],
    ) {
        for &i in index {
            // SAFETY: the caller put every guard of `index`.
            let g = unsafe { slots[i as usize].assume_init_ref() };
            if g.children().is_empty() {
                words.guard((g.start, g.bytes, g.write));
            } else {
                words.guard_parts(g.children());
            }
        }
    }

    /// `let name = alloc::<T>(len);`, place number `index` of `call`: a graph-owned buffer of
    /// `len` elements on `stream`'s device (see [`Scratch`](crate::Scratch)); its place's guard,
    /// put into `guards`, orders nothing (no one else can reach the buffer).
    #[inline]
    pub fn scratch<'a, T: crate::ScratchElem, const N: usize>(
        stream: &'a CudaStream,
        call: &CallId,
        index: u32,
        len: usize,
        guards: &mut Guards<'a, N>,
    ) -> crate::Scratch<'a, T> {
        let t = crate::operand::tag(call.0, index);
        guards.put(index, crate::operand::scratch_guard());
        crate::Scratch::new(stream, index, len, t)
    }

    /// Appends a statement's node to the call's words ([`CallWords`]), right after the
    /// statement made it (its parameters still in the processor's cache): one instance per
    /// statement type, out of line, with the node's own packing (no dynamic dispatch), instead
    /// of a second pass over every node through the node list (a third of an unchanged
    /// 1000-node call, `.ci/host-profile`).
    #[inline(never)]
    pub fn word_node<N: IntoNode>(words: &mut CallWords, node: &N) {
        words.node(&crate::kind::kernel::OfNode(node));
    }

    /// A scalar kernel argument of `graph!`: any argument not written `&place`/`&mut place`.
    #[inline(always)]
    pub fn scalar<T: Scalar>(value: T) -> T::Value {
        value.value()
    }

    /// A `capture(&a, &mut b, |s, (a, b)| …)` statement of `graph!`: the call's stream, the
    /// operands' handles and the closure.
    #[inline]
    pub fn capture<'a, H, F, E>(
        stream: &'a Arc<CudaStream>,
        handles: H,
        f: F,
    ) -> crate::kind::CaptureParams<'a, H, F>
    where
        H: crate::kind::CaptureOperands,
        F: for<'s> FnOnce(&'s crate::session::Capture, H::Views<'s>) -> Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        crate::kind::CaptureParams::new(stream, handles, f)
    }

    /// A keyed `capture(&a, &mut b, key = k, |s, k, (a, b)| …)` statement of `graph!`: the
    /// call's stream, the operands' handles, the key and the closure, which must capture
    /// nothing (it coerces to a `fn`).
    #[inline]
    #[allow(clippy::type_complexity)]
    pub fn capture_keyed<'a, H, K, E>(
        stream: &'a Arc<CudaStream>,
        handles: H,
        key: K,
        f: for<'s> fn(&'s crate::session::Capture, &K, H::Views<'s>) -> Result<(), E>,
    ) -> crate::kind::CaptureParams<'a, H, crate::kind::KeyedFn<H, K, E>, crate::kind::Keyed<K>>
    where
        H: crate::kind::CaptureOperands,
        K: crate::kind::CaptureKey,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        crate::kind::CaptureParams::keyed(stream, handles, key, f)
    }

    /// How many host-node wait flags are taken and not given back (see `flags.rs`):
    /// a graph or exec holding a host node, or a pending eager host statement, holds one.
    /// For tests.
    pub fn host_flags_in_use() -> usize {
        crate::flags::in_use()
    }

    /// How many host functions recorded by captures (`Capture::host`) are alive: a recording,
    /// a graph or an exec that may launch them holds them. For tests.
    pub fn captured_host_functions() -> usize {
        crate::capture_host::live()
    }

    /// A `host(&a, &mut b, |(a, b)| …)` statement of `graph!`: the operands' handles and the
    /// closure, run on the host by the call's launch.
    #[inline]
    pub fn host<'a, H, F>(handles: H, f: F) -> crate::kind::HostParams<'a, H, F>
    where
        H: crate::kind::HostOperands + 'a,
        F: for<'s> FnMut(H::Views<'s>) + Send + 'static,
    {
        crate::kind::HostParams::new(handles, f)
    }

    /// A `child(&mut g)` statement of `graph!`: the captured graph's handle.
    #[inline]
    /// The device condition of slot `slot` (`let c = condition(default);` in `graph!`).
    ///
    /// # Safety
    ///
    /// `slot` is the number `graph!` gave this `condition(..)` statement in the call's body
    /// (statements numbered from 0 in source order): the kernels that take the condition
    /// receive the exec's conditional handle of that slot and set it with
    /// `cudaGraphSetConditional`, and the device statement it drives reads it.
    pub unsafe fn condition(call: &CallId, slot: u32, default: u32) -> crate::Condition {
        crate::Condition::new(slot, default, call.0)
    }

    /// A conditional node of the condition of slot `slot` (`device_while`, `device_if`,
    /// `device_switch` in `graph!`).
    pub fn conditional(
        c: crate::Condition,
        ty: crate::ConditionalType,
        size: u32,
    ) -> crate::kind::ConditionalParams {
        crate::kind::ConditionalParams::new(c.slot(), ty, size, c.default())
    }

    pub fn child(g: crate::kind::GraphRef<'_>) -> crate::kind::GraphRef<'_> {
        g
    }

    /// A `fill(&mut dst, value)` statement of `graph!`: a kernel node of the crate's fill kernel
    /// (see [`FillNode`](crate::FillNode)).
    #[inline]
    pub fn fill<'a, T: crate::bytemuck::NoUninit>(
        stream: &CudaStream,
        dst: impl WriteArg<'a, T>,
        value: T,
    ) -> crate::kind::FillNode<'a> {
        crate::kind::FillNode::new(stream, dst, value)
    }

    /// A kernel statement of `graph!`: only a launch made by a `kernels!` method.
    #[inline(always)]
    pub fn kernel_node<L: LaunchNode>(launch: L) -> L::Launch {
        launch.into_statement()
    }

    /// The functions of a `kernels!` struct `K`, loaded from one module: the struct's only
    /// field. Private fields and an `unsafe` constructor, branded by `K`: safe code can neither
    /// make one nor move one into a struct with other signatures.
    pub struct Functions<K: ?Sized> {
        module: Arc<CudaModule>,
        /// The context the module was loaded in: the kernels' nodes run on its device.
        ctx: Arc<CudaContext>,
        /// One per name `load` resolved: the function, `ctx` and the name.
        functions: Box<[crate::kind::kernel::KernelEntry]>,
        _kernels: core::marker::PhantomData<fn() -> K>,
    }

    impl<K: ?Sized> Functions<K> {
        /// Loads the module (`cuModuleLoadData`) and resolves `names` in it
        /// (`cuModuleGetFunction`).
        ///
        /// # Safety
        /// The contract of `kernels!`'s `load`: each kernel `names[i]` of the module has exactly
        /// the parameter types that `K`'s `i`-th kernel method declares, and stays within its
        /// buffers.
        pub unsafe fn load(
            ctx: &Arc<CudaContext>,
            ptx: Ptx,
            kernels: &'static str,
            names: &[&'static str],
        ) -> Result<Self, Error> {
            let module = load_module(ctx, ptx, kernels)?;
            let entry = |&name: &&'static str| {
                let function = load_function(&module, name)?;
                Ok(crate::kind::kernel::KernelEntry { function, ctx: ctx.clone(), name })
            };
            let functions = names.iter().map(entry).collect::<Result<_, Error>>()?;
            let ctx = ctx.clone();
            Ok(Functions { module, ctx, functions, _kernels: core::marker::PhantomData })
        }

        /// Kernel `i`, in declaration order. Not inlined: its bounds check would otherwise be
        /// copied into every statement of a `graph!` body, which made a 1000-statement body take
        /// ten times longer to build in release (`examples/build_cost.rs`).
        #[inline(never)]
        pub fn get(&self, i: usize) -> &CudaFunction {
            &self.functions[i].function
        }

        /// Kernel `i` with the context it was loaded in, for a kernel call (its node runs on
        /// that context's device). Inlined into each statement (a call there spilled the
        /// statement's operands around it), with the bounds check's panic out of line (inlined,
        /// it made a 1000-statement body take ten times longer to build, [`Self::get`]).
        #[inline(always)]
        pub fn kernel(&self, i: usize) -> crate::kind::KernelFn<'_> {
            match self.functions.get(i) {
                Some(e) => crate::kind::KernelFn::new(e),
                None => no_kernel(i),
            }
        }

        /// The context the module was loaded in.
        pub fn context(&self) -> &Arc<CudaContext> {
            &self.ctx
        }

        /// Whether `entry` is the entry of the kernel named `name` (see
        /// [`Kernels::__cudagraph_makes`]).
        #[inline]
        pub fn makes(&self, entry: *const (), name: &str) -> bool {
            let at = |e: &crate::kind::kernel::KernelEntry| {
                (e as *const crate::kind::kernel::KernelEntry).cast::<()>()
            };
            self.functions.iter().any(|e| core::ptr::eq(at(e), entry) && e.name == name)
        }

        /// The loaded module.
        pub fn module(&self) -> &Arc<CudaModule> {
            &self.module
        }
    }

    /// [`Functions::kernel`] of an index past the last kernel (a bug of `kernels!`).
    #[cold]
    #[inline(never)]
    fn no_kernel(i: usize) -> ! {
        panic!("kernels!: no kernel {i} in the struct's module (a bug of the macro)")
    }

    /// Implemented by `kernels!` structs (and references to them): the only receivers `graph!`
    /// passes buffer handles to.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not a `kernels!` struct",
        label = "kernel launches in `graph!` call methods of a struct declared with `kernels!`",
        note = "for a struct behind an `Arc` (or another pointer), borrow the struct itself before `graph!`: `let k: &MyKernels = &arc;`, then `k.f(…)`"
    )]
    ///
    /// # Safety
    /// [`Self::__cudagraph_makes`] is true only of a kernel call made by the method of `Self`
    /// named `method` from its arguments alone (no other state), as the methods `kernels!`
    /// generates are: `graph!` then evaluates such a statement once for a run of iterations
    /// (see `graph!`'s `for`). `kernels!` implements it; nothing else needs to.
    pub unsafe trait Kernels {
        /// The `kernels!` struct itself (`Self` for one, the referent's for a reference).
        #[doc(hidden)]
        type Struct: ?Sized;
        /// The struct itself: kernel statements call their method on `&Self::Struct`, where
        /// the method `kernels!` generated (inherent) is picked before any trait method of the
        /// same name (on `&&Struct`, a trait method implemented for `&Struct` would be).
        #[doc(hidden)]
        fn __cudagraph_struct(&self) -> &Self::Struct;
        /// Whether `entry` (a kernel call's, [`made_by`]) is the entry of `Self`'s kernel
        /// `method`: a call of the method `kernels!` generated (an inherent method, which
        /// method-call syntax picks before any trait method of the same name).
        #[doc(hidden)]
        fn __cudagraph_makes(&self, entry: *const (), method: &str) -> bool;
    }
    // SAFETY: the referent's promise.
    unsafe impl<K: Kernels + ?Sized> Kernels for &K {
        type Struct = K::Struct;
        #[inline(always)]
        fn __cudagraph_struct(&self) -> &K::Struct {
            (**self).__cudagraph_struct()
        }
        #[inline]
        fn __cudagraph_makes(&self, entry: *const (), method: &str) -> bool {
            (**self).__cudagraph_makes(entry, method)
        }
    }

    /// Proof that a kernel statement's receiver is a `kernels!` struct whose type the statement
    /// knows, so that its method call reaches the method `kernels!` generated (an inherent
    /// method): made only by that struct's generated `__cudagraph_concrete`, an inherent method
    /// too. On a receiver of a generic type (`&K::Struct` of a `K` bounded on [`Kernels`]) no
    /// inherent method is visible, and a statement's method would be a trait method of the
    /// user's, which may pass other arguments at each call: a run of iterations of it
    /// evaluated once (see [`word_repeat`]) would then launch stale values (review 18b). The
    /// expansion calls `__cudagraph_concrete` on every receiver and hands the proof to
    /// [`concrete`]; a user trait method of that name cannot make a `Concrete` (its
    /// constructor is `unsafe`), so such a receiver does not compile (or, if the method never
    /// returns, the call never gets past it).
    pub struct Concrete<S: ?Sized>(core::marker::PhantomData<fn() -> *const S>);

    impl<S: ?Sized> Concrete<S> {
        /// The proof for `S`.
        ///
        /// # Safety
        /// Called only by the inherent method `__cudagraph_concrete` that `kernels!` generates
        /// for its struct `S`.
        #[inline(always)]
        pub const unsafe fn new() -> Self {
            Concrete(core::marker::PhantomData)
        }
    }

    /// `graph!`'s check that a kernel statement's receiver `k` has a concrete `kernels!` type
    /// (see [`Concrete`]): `proof` is `|r| r.__cudagraph_concrete()`, written in the
    /// expansion, where `r`'s type is the statement's. Returns `k`; nothing else happens at
    /// run time.
    #[inline(always)]
    pub fn concrete<S: ?Sized>(k: &S, proof: impl FnOnce(&S) -> Concrete<S>) -> &S {
        proof(k);
        k
    }

    /// Whether a kernel statement's node is a call of `k`'s kernel `method` made by the method
    /// `kernels!` generated for it (not a method of the user's that returns another kernel's
    /// call): a run of iterations of such statements is evaluated once per call (see
    /// [`word_repeat`]); any other statement evaluates every iteration.
    #[inline]
    pub fn made_by<K: Kernels + ?Sized, N: crate::kind::kernel::MadeBy>(
        k: &K,
        node: &N,
        method: &str,
    ) -> bool {
        k.__cudagraph_makes(node.entry(), method)
    }

    /// The receiver of a kernel launch, checked to be a `kernels!` struct: the struct itself,
    /// whatever references lead to it (see [`Kernels::__cudagraph_struct`]).
    #[inline(always)]
    pub fn kernels<K: Kernels + ?Sized>(k: &K) -> &K::Struct {
        k.__cudagraph_struct()
    }

    /// Disjoint `&mut` borrows of several elements of one array, slice or `Vec` of buffers.
    /// A method, so that autoref/autoderef accept owned arrays and `&mut` bindings alike.
    pub trait DisjointMut<T> {
        /// `[&mut self[idx[0]], …]`; `names[k]`: how the body spells element `k` (`bufs[i]`),
        /// for the panic.
        ///
        /// # Panics
        /// If two indices are equal or one is out of range: two `&mut` operands would alias.
        /// The panic names the first two operands that name one element, and its location is
        /// the caller's (`#[track_caller]`: `graph!` spans the call on the body's first
        /// operand of the array).
        #[track_caller]
        fn __cudagraph_disjoint_mut<const N: usize>(
            &mut self,
            idx: [usize; N],
            names: &[&str; N],
        ) -> [&mut T; N];

        /// `[&mut self[idx[0]], …]` for indices already known distinct: only bounds are checked.
        ///
        /// # Panics
        /// If an index is out of range.
        fn __cudagraph_disjoint_mut_distinct<const N: usize>(
            &mut self,
            idx: DistinctIndices<N>,
        ) -> [&mut T; N];

        /// The elements at `idx`, each to be borrowed mutably once, in turn
        /// ([`acquire_mut_each`]): only bounds are checked, here.
        ///
        /// # Panics
        /// If an index is out of range.
        fn __cudagraph_each_mut<const N: usize>(
            &mut self,
            idx: &'static DistinctIndices<N>,
        ) -> EachMut<'_, T, N>;
    }

    /// Elements of one slice at distinct indices, in bounds ([`DisjointMut::__cudagraph_each_mut`]),
    /// the slice borrowed mutably for `'a`: [`acquire_mut_each`] borrows each once, in turn,
    /// instead of an array of `N` references made and copied first (8 KB for 1000 elements).
    pub struct EachMut<'a, T, const N: usize> {
        base: *mut T,
        /// The indices (a `const` of `graph!`'s, promoted to a static: no 8 KB copy per call
        /// for 1000 elements).
        idx: &'static [usize; N],
        /// A [`BufferArray`](crate::BufferArray)'s memo of its elements, for the one-loop
        /// acquisition of these elements ([`acquire_mut_each`]), borrowed mutably for `'a`;
        /// null for a slice. (A raw pointer: an `Option<&mut _>` here made every caller zero
        /// its whole `EachStore`, 40 KB for 1000 elements, on every call.)
        memo: *mut crate::array::ArrayMemo,
        _slice: core::marker::PhantomData<&'a mut [T]>,
    }

    impl<'a, T, const N: usize> EachMut<'a, T, N> {
        /// Element `k`'s index and a mutable borrow of it for `'a`. `k` is consumed: the
        /// iterator over `0..N` that [`acquire_mut_each`] runs takes each once.
        #[inline(always)]
        fn take(&mut self, k: usize) -> &'a mut T {
            // SAFETY: `idx[k]` is in bounds of the slice (checked when made) and distinct from
            // every other index (`DistinctIndices`), and each `k` is taken once (the caller's
            // loop over `0..N`), so no two borrows alias; the slice stays borrowed for `'a`.
            unsafe { &mut *self.base.add(self.idx[k]) }
        }

        /// Element `k`, shared for `'a`.
        ///
        /// # Safety
        /// Element `k` is not borrowed mutably while the result is used: [`Self::take`] of
        /// it is not called after this, and a borrow it gave before is no longer used.
        #[inline(always)]
        unsafe fn get(&self, k: usize) -> &'a T {
            // SAFETY: in bounds and distinct (see `take`); the caller's contract.
            unsafe { &*self.base.add(self.idx[k]) }
        }
    }

    /// The place numbers of an array's elements ([`acquire_mut_each`]), element `k` being place
    /// `self.0[k]` of a call of `N` places: `new` checks that each is below `N` and that they
    /// are pairwise distinct, so a `const` made by `graph!` costs no bounds check per element
    /// at run time.
    pub struct PlaceIndices<const M: usize, const N: usize>([u32; M]);

    impl<const M: usize, const N: usize> PlaceIndices<M, N> {
        /// # Panics
        /// If an index is not below `N` or two are equal (at compile time, in a `const`).
        pub const fn new(idx: [u32; M]) -> Self {
            let mut seen = [false; N];
            let mut k = 0;
            while k < M {
                let i = idx[k] as usize;
                assert!(i < N, "graph!: a place number out of range");
                assert!(!seen[i], "graph!: a place number given twice");
                seen[i] = true;
                k += 1;
            }
            PlaceIndices(idx)
        }
    }

    /// Indices known to be pairwise distinct: `new` checks it, so a `const` made by `graph!` for
    /// constant indices costs nothing at run time.
    #[derive(Clone, Copy)]
    pub struct DistinctIndices<const N: usize>([usize; N], usize);

    impl<const N: usize> DistinctIndices<N> {
        /// # Panics
        /// If two indices are equal (at compile time, in a `const`).
        pub const fn new(idx: [usize; N]) -> Self {
            let (mut i, mut end) = (0, 0);
            while i < N {
                let mut j = i + 1;
                while j < N {
                    assert!(idx[i] != idx[j], "graph!: two operands name the same array element");
                    j += 1;
                }
                // (Saturating: an index of `usize::MAX`, only in a `DistinctIndices` made at
                // run time, is out of range of every slice, and must not wrap `end` to 0.)
                if idx[i] >= end {
                    end = idx[i].saturating_add(1);
                }
                i += 1;
            }
            // (`end`: one past the largest index, so one bounds check covers them all.)
            DistinctIndices(idx, end)
        }
    }

    /// The panic of [`DisjointMut::__cudagraph_disjoint_mut`]: the first index out of range,
    /// else the first two operands (in the body's order) that name one element.
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn not_disjoint(idx: &[usize], names: &[&str], len: usize) -> ! {
        if let Some(k) = idx.iter().position(|&i| i >= len) {
            panic!("graph!: `{}` is out of range: index {} of an array of {len}", names[k], idx[k]);
        }
        for (b, &i) in idx.iter().enumerate() {
            if let Some(a) = idx[..b].iter().position(|&j| j == i) {
                panic!(
                    "graph!: `{}` and `{}` name one element (index {i}) of the array, and one of \
                     them is written: two operands would alias (the indices of one array must be \
                     distinct at run time)",
                    names[a], names[b]
                );
            }
        }
        unreachable!("get_disjoint_mut refused distinct indices in range")
    }

    #[cfg(test)]
    #[test]
    fn disjoint_mut_names_the_operands_that_alias() {
        let text = |r: std::thread::Result<()>| {
            let p = r.expect_err("must panic");
            p.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        let mut v = vec![10u32, 11, 12, 13];
        let names = ["a[0]", "a[i]", "a[j]"];
        let [x, y, z] = v.as_mut_slice().__cudagraph_disjoint_mut([3, 0, 2], &names);
        assert_eq!((*x, *y, *z), (13, 10, 12));
        let dup = std::panic::catch_unwind(move || {
            let mut v = vec![0u32; 4];
            v.as_mut_slice().__cudagraph_disjoint_mut([0, 2, 0], &names);
        });
        let t = text(dup);
        assert!(t.contains("`a[0]` and `a[j]` name one element (index 0)"), "{t}");
        let out = std::panic::catch_unwind(move || {
            let mut v = vec![0u32; 4];
            v.as_mut_slice().__cudagraph_disjoint_mut([0, 4, 4], &names);
        });
        let t = text(out);
        assert!(t.contains("`a[i]` is out of range: index 4 of an array of 4"), "{t}");
    }

    /// The panic of [`DisjointMut::__cudagraph_disjoint_mut_distinct`].
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn out_of_range(i: usize, len: usize) -> ! {
        panic!("graph!: buffer index {i} out of range (len {len})")
    }

    impl<T> DisjointMut<T> for [T] {
        fn __cudagraph_disjoint_mut_distinct<const N: usize>(
            &mut self,
            idx: DistinctIndices<N>,
        ) -> [&mut T; N] {
            let len = self.len();
            let DistinctIndices(idx, end) = idx;
            if end > len {
                out_of_range(end - 1, len);
            }
            let base = self.as_mut_ptr();
            // SAFETY: every index is in bounds (checked above) and pairwise distinct
            // (`DistinctIndices`), so the references are to different elements of `self`, which
            // stays mutably borrowed for their lifetime.
            idx.map(|i| unsafe { &mut *base.add(i) })
        }

        fn __cudagraph_each_mut<const N: usize>(
            &mut self,
            idx: &'static DistinctIndices<N>,
        ) -> EachMut<'_, T, N> {
            let len = self.len();
            let DistinctIndices(idx, end) = idx;
            let end = *end;
            if end > len {
                out_of_range(end - 1, len);
            }
            EachMut {
                base: self.as_mut_ptr(),
                idx,
                memo: core::ptr::null_mut(),
                _slice: core::marker::PhantomData,
            }
        }

        #[track_caller]
        fn __cudagraph_disjoint_mut<const N: usize>(
            &mut self,
            idx: [usize; N],
            names: &[&str; N],
        ) -> [&mut T; N] {
            let len = self.len();
            match self.get_disjoint_mut(idx) {
                Ok(refs) => refs,
                Err(_) => not_disjoint(&idx, names, len),
            }
        }
    }

    /// A [`BufferArray`](crate::BufferArray): as its slice, but the one-loop acquisition
    /// ([`Self::__cudagraph_each_mut`]) gets the array's memo, and the borrows of elements
    /// made otherwise (which `graph!` may hand on, e.g. to a closure) forget it.
    impl<T> DisjointMut<cudarc::driver::CudaSlice<T>> for crate::BufferArray<T> {
        fn __cudagraph_disjoint_mut_distinct<const N: usize>(
            &mut self,
            idx: DistinctIndices<N>,
        ) -> [&mut cudarc::driver::CudaSlice<T>; N] {
            self.as_mut_slice().__cudagraph_disjoint_mut_distinct(idx)
        }

        fn __cudagraph_each_mut<const N: usize>(
            &mut self,
            idx: &'static DistinctIndices<N>,
        ) -> EachMut<'_, cudarc::driver::CudaSlice<T>, N> {
            let (slices, memo) = self.parts();
            let mut each = slices.__cudagraph_each_mut(idx);
            each.memo = memo;
            each
        }

        #[track_caller]
        fn __cudagraph_disjoint_mut<const N: usize>(
            &mut self,
            idx: [usize; N],
            names: &[&str; N],
        ) -> [&mut cudarc::driver::CudaSlice<T>; N] {
            self.as_mut_slice().__cudagraph_disjoint_mut(idx, names)
        }
    }

    /// Loads a module for `kernels!`.
    fn load_module(
        ctx: &Arc<CudaContext>,
        ptx: Ptx,
        kernels: &'static str,
    ) -> Result<Arc<CudaModule>, Error> {
        ctx.load_module(ptx)
            .call("cuModuleLoadData")
            .map_err(|source| Error::Module { kernels, source })
    }

    /// Resolves one function for `kernels!`.
    fn load_function(module: &Arc<CudaModule>, name: &'static str) -> Result<CudaFunction, Error> {
        module
            .load_function(name)
            .call("cuModuleGetFunction")
            .map_err(|source| Error::MissingFunction { name, source })
    }

    /// Node list entry for a present node.
    #[inline]
    pub fn node<N: IntoNode>(n: &N) -> Option<NodeParams<'_>> {
        Some(n.node())
    }

    /// Node list entry for a conditional node.
    #[inline]
    pub fn node_if<N: IntoNode>(n: &Option<N>) -> Option<NodeParams<'_>> {
        n.as_ref().map(IntoNode::node)
    }

    pub use crate::kind::list::{Entry, LazyChunk, Segment};

    /// Host time of each phase of the `graph!` calls made on this thread since the last read
    /// (names and nanoseconds; feature `phase-times`, for the `host_cost` diagnostic), and
    /// resets the totals.
    #[cfg(feature = "phase-times")]
    pub fn phase_times() -> [(&'static str, i64); 7] {
        crate::cache::phases::take()
    }

    /// Runs `f`, a chunk of a `graph!` body's statements, in a function of its own (LLVM's
    /// optimization time grows faster than linearly in the size of one function).
    #[inline(never)]
    pub fn chunk<R, F: FnOnce() -> R>(f: F) -> R {
        f()
    }

    /// Node list entry of a statement (see [`Entry`]).
    #[inline(always)]
    pub fn entry<N: IntoNode>(n: &N) -> &dyn Entry {
        n
    }

    /// Node list entry of a statement in a host `if` branch (see [`Entry`]).
    #[inline(always)]
    pub fn entry_if<N: IntoNode>(n: &Option<N>) -> &dyn Entry {
        n
    }

    /// One operand's handle in the call's words, for a run (see [`word_repeat`]): each
    /// operand of the later iterations' statements that names no array element is put in
    /// once (the same handle in every iteration), so that every buffer a later node may use is
    /// compared, whichever handles the statement's kernel call passes on.
    #[inline(never)]
    pub fn word_handle<H: crate::operand::ElementHandle>(
        words: &mut CallWords,
        handle: &H,
        write: bool,
    ) {
        words.handle(handle, write);
    }

    /// The later iterations of an indexed run of `graph!` in the call's words: iterations
    /// whose statements differ from the first iteration's only in which element of an array
    /// acquired in one loop they name (`&mut bufs[i]`, [`acquire_mut_each`]), and evaluate only
    /// literals, names and casts otherwise. When every kernel statement of the first iteration
    /// is a call of the `kernels!` method of its name ([`made_by`]), the later iterations make
    /// the same calls on other elements: `n` more nodes, counted, and marked by one word where
    /// the statements evaluated one by one would have put the first later node's words (so
    /// that the two never compare equal). Every field of an element's handle a node can depend
    /// on is in the words already (its address range with its place's guard,
    /// [`Guards::with_words`], and its context, and for pinned host memory its allocation's
    /// id, with its array's); each other operand of the
    /// later iterations follows with [`word_handle`]. Equal words then mean equal nodes: the
    /// later iterations' nodes are made only when the node list is needed ([`LazyChunk`]).
    /// `first`: the statements of the first iteration, whose nodes were put in last.
    #[inline]
    pub fn word_repeat(words: &mut CallWords, n: u64, first: u32) {
        words.repeat(n, first);
    }

    /// Each statement's node parameters into `out`, in one loop out of line (one instance per
    /// body size): the statements of `segments`, in order (`N` in all).
    #[inline(never)]
    pub fn entries<'a, const N: usize>(
        out: &mut [Option<NodeParams<'a>>; N],
        segments: &[&dyn Segment<'a>],
    ) {
        crate::kind::list::fill_entries(out, segments);
    }

    #[cfg(test)]
    mod tests {
        use super::{Entry, NodeParams, Segment, empty, entries, entry, entry_if};
        use crate::EmptyParams;
        use core::cell::Cell;

        /// [`entries`] into a new list.
        fn list<'a, const N: usize>(segments: &[&dyn Segment<'a>]) -> [Option<NodeParams<'a>>; N] {
            let mut out = [const { None }; N];
            entries(&mut out, segments);
            out
        }

        /// Which entries are present, in order.
        fn present<const N: usize>(list: &[Option<NodeParams<'_>>; N]) -> [bool; N] {
            list.each_ref().map(|e| matches!(e, Some(NodeParams::Empty(_))))
        }

        #[test]
        fn entries_keeps_the_statements_in_order() {
            let (a, b, c) = (Some(empty()), None::<EmptyParams>, empty());
            let (ea, eb): (&dyn Entry, &dyn Entry) = (entry_if(&a), entry_if(&b));
            let pair = (empty(), empty());
            let ec = entry(&c);
            let segments: [&dyn Segment<'_>; 4] = [&ea, &&pair, &eb, &ec];
            assert_eq!(present(&list::<5>(&segments)), [true, true, true, false, true]);
        }

        #[test]
        #[should_panic(expected = "fewer than 4 statements")]
        fn entries_refuses_too_few_statements() {
            let pair = (empty(), empty());
            let _ = list::<4>(&[&&pair]);
        }

        #[test]
        #[should_panic(expected = "more than 1 statements")]
        fn entries_refuses_too_many_statements() {
            let pair = (empty(), empty());
            let _ = list::<1>(&[&&pair]);
        }

        /// `Guards`: guards put in any order come back in place order; a place put twice or
        /// never panics; dropping it part way drops only what was put.
        #[test]
        fn guards_are_listed_in_place_order() {
            use super::Guards;
            use crate::operand::Guard;
            let mut g = Guards::<3>::new();
            for i in [2u32, 0, 1] {
                g.put(i, Guard::for_test(u64::from(i) * 16, 8, i == 1));
            }
            let starts: Vec<(u64, bool)> = g.all().iter().map(|g| (g.start, g.write)).collect();
            assert_eq!(starts, [(0, false), (16, true), (32, false)]);
            // Part way: dropped without `all`.
            let mut part = Guards::<2>::new();
            part.put(1, Guard::for_test(0, 8, false));
            drop(part);
        }

        /// `Guards`' drop drops every guard that is not inert, wherever its slot lies among
        /// inert ones (it walks only the range of those: a guard left out would not record its
        /// buffer's use), part way through the places too.
        #[test]
        fn guards_drop_every_guard_that_records() {
            use super::Guards;
            use crate::operand::Guard;
            use core::cell::Cell;
            for live in [&[][..], &[0], &[7], &[3], &[2, 5], &[0, 7], &[1, 2, 3, 4, 5, 6]] {
                for put_all in [true, false] {
                    let drops = Cell::new(0);
                    let mut g = Guards::<8>::new();
                    // Put in reverse order, leaving slot 4 empty when not `put_all`.
                    for i in (0..8u32).rev().filter(|&i| put_all || i != 4) {
                        let guard = if live.contains(&i) {
                            Guard::counted_for_test(&drops)
                        } else {
                            Guard::for_test(u64::from(i) * 8, 8, false)
                        };
                        g.put(i, guard);
                    }
                    drop(g);
                    let want = live.iter().filter(|&&i| put_all || i != 4).count();
                    assert_eq!(drops.get(), want, "live {live:?}, every place put: {put_all}");
                }
            }
        }

        /// `live` covers exactly the slots of the guards that record, whatever the order they
        /// are put in; inert guards never widen it; its end is at most `N` (review 23b).
        #[test]
        fn guards_live_range_covers_recording_guards_only() {
            use super::Guards;
            use crate::operand::Guard;
            let drops = core::cell::Cell::new(0);
            let mut g = Guards::<8>::new();
            assert_eq!(g.live, (8, 0));
            g.put(0, Guard::for_test(0, 8, false));
            assert_eq!(g.live, (8, 0), "an inert guard does not widen it");
            g.put(7, Guard::counted_for_test(&drops));
            assert_eq!(g.live, (7, 8), "the last slot: the end is N");
            g.put(3, Guard::counted_for_test(&drops));
            assert_eq!(g.live, (3, 8));
            g.put(5, Guard::for_test(40, 8, false));
            assert_eq!(g.live, (3, 8));
            drop(g);
            assert_eq!(drops.get(), 2);
        }

        /// A place number past the end panics before anything is written or widened.
        #[test]
        #[should_panic(expected = "index out of bounds")]
        fn guards_refuse_a_place_past_the_end() {
            use super::Guards;
            use crate::operand::Guard;
            let drops = core::cell::Cell::new(0);
            let mut g = Guards::<2>::new();
            g.put(2, Guard::counted_for_test(&drops));
        }

        #[test]
        #[should_panic(expected = "place 1 acquired twice")]
        fn guards_refuse_a_place_put_twice() {
            let mut g = super::Guards::<2>::new();
            g.put(1, crate::operand::Guard::for_test(0, 8, false));
            g.put(1, crate::operand::Guard::for_test(0, 8, false));
        }

        #[test]
        #[should_panic(expected = "a place was not acquired")]
        fn guards_refuse_a_place_never_put() {
            let mut g = super::Guards::<2>::new();
            g.put(0, crate::operand::Guard::for_test(0, 8, false));
            let _ = g.all();
        }

        /// A segment whose count grows each time it is asked (the trait is public): read once,
        /// so the list gets the count of the one read, and the total is checked against it.
        struct Growing(Cell<usize>);
        impl<'a> Segment<'a> for Growing {
            fn statements(&self) -> usize {
                self.0.replace(self.0.get() + 1)
            }
            fn fill(&self, _: &mut [Option<NodeParams<'a>>]) {}
        }

        #[test]
        fn entries_reads_each_count_once() {
            let g = Growing(Cell::new(2));
            assert_eq!(present(&list::<2>(&[&g])), [false, false]);
            assert_eq!(g.0.get(), 3);
        }
    }
}
