//! Captured nodes: the stream work of a `capture(&a, &mut b, |s, (a, b)| { … })` statement of
//! `graph!`, recorded by stream capture into a graph that becomes a child-graph node
//! (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_GRAPH`).
//!
//! When it is recorded, before anything of the call is enqueued ([`NodeKind::prepare`]):
//! - a statement without a key, on every graph call: its closure may depend on anything it
//!   captured (a cuBLAS handle's settings, scalars, which function it calls), so replaying an
//!   older recording could be stale;
//! - a keyed statement (`capture(&a, &mut b, key = k, |s, k, (a, b)| …)`, whose closure is a
//!   `fn` and so captures nothing: everything it uses is the key, its views, or a static), only
//!   when no recording kept by the cache ([`Recordings`]) was made with equal operands (address,
//!   length, context, written, element type) and an equal key ([`CaptureKey::same`]) on a stream of the same
//!   context. An unchanged call takes the node's recording again and sends nothing; a call
//!   back to a kept set (ping-pong buffers) takes that one.
//!
//! A recording needs no GPU work, only host time. The new recording is sent to the exec with
//! `cuGraphExecNodeSetParams` (the child graph's parameters updated in place, which the driver
//! accepts when the recording has the same topology); a recording of another topology is refused
//! there and the ladder falls to a whole-exec update or a new instantiation. In
//! [`Mode::Eager`](crate::Mode::Eager) the closure runs directly on the stream, not captured.

use core::cell::{Cell, RefCell};
use std::any::{Any, TypeId};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cudarc::driver::sys::{self, CUcontext, CUgraph, CUgraphNodeParams, CUgraphNodeType};
use cudarc::driver::{CudaFunction, CudaStream, DriverError};

use super::NodeKind;
use crate::error::{CudaError, Error, NodeSite};
use crate::operand::{Accesses, DevRead, DevWrite, sealed};
use crate::raw;
use crate::session::imp::{Alias, Listed};
use crate::session::{
    Capture, CaptureOrigin, CaptureSlice, CaptureSliceMut, RecordingMemory, next_capture_id,
    order_streams, origin_stream,
};

/// A `CUgraph` this crate owns (destroyed on drop): one recording of a captured statement.
#[doc(hidden)]
pub struct OwnedGraph {
    raw: CUgraph,
    /// Unique in the process (never reused, unlike the address): what a captured node's words
    /// name in the cache's unchanged-call check.
    serial: u64,
    ctx: Arc<cudarc::driver::CudaContext>,
    /// The functions of the recording's explicit kernel nodes: their modules stay loaded while
    /// the recording (and so the cache's node that holds it) exists. Dropped after the graph.
    #[allow(dead_code)] // held for its drop only
    functions: Vec<CudaFunction>,
    /// Its graph memory (what the closure allocated while captured).
    memory: RecordingMemory,
    /// Set when the graph was moved into a child-graph node (a recording with memory nodes,
    /// `CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`): the parent graph owns and destroys it, and `raw`
    /// is never used again (a later node needs a new recording: see [`CapturedWork::fresh`]).
    moved: AtomicBool,
}

// SAFETY: the graph is only read (as the child graph of a node being added or set, which the
// driver copies) while the cache, which is not `Sync`, holds it behind `&mut self`.
unsafe impl Send for OwnedGraph {}
unsafe impl Sync for OwnedGraph {}

impl OwnedGraph {
    fn new(
        raw: CUgraph,
        ctx: Arc<cudarc::driver::CudaContext>,
        functions: Vec<CudaFunction>,
    ) -> Self {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let (memory, moved) = (RecordingMemory::default(), AtomicBool::new(false));
        OwnedGraph { raw, serial, ctx, functions, memory, moved }
    }

    /// Unique in the process for as long as it runs.
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// Its graph memory.
    pub(crate) fn memory(&self) -> RecordingMemory {
        self.memory
    }

    /// Whether its graph was moved into a node (and so may not be used again).
    pub(crate) fn moved(&self) -> bool {
        self.moved.load(Ordering::Relaxed)
    }
}

impl Drop for OwnedGraph {
    fn drop(&mut self) {
        if self.moved() {
            // Owned (and destroyed) by the graph it was moved into.
            return;
        }
        let _ = self.ctx.bind_to_thread();
        // SAFETY: made by a capture of this crate, owned here, used by nothing after this.
        self.ctx.record_err(unsafe { raw::graph_destroy(self.raw) });
    }
}

/// One operand of a `capture` statement: a `&place` ([`DevRead`], the closure gets a
/// `CaptureSlice`) or `&mut place` ([`DevWrite`], a `CaptureSliceMut`) handle of device memory,
/// or of pinned host memory (`HostRead` / `HostWrite`, a `CaptureHostSlice` /
/// `CaptureHostSliceMut`: `capture_host.rs`). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an operand of `capture`",
    label = "not `&buffer` or `&mut buffer` of device or pinned host memory",
    note = "`capture` operands are device buffers or pinned host buffers (`PinnedHostSlice`) marked `&` (read) or `&mut` (written)"
)]
pub trait CaptureOperand: sealed::Sealed {
    /// The element type.
    type Elem: 'static;
    /// What the closure gets for it.
    type View<'s>;
    /// What the view is made of while the closure runs: an [`Alias`] of device memory, or the
    /// address of pinned host memory.
    #[doc(hidden)]
    type Alias;
    /// `(pointer, length, context, tag, written)`.
    #[doc(hidden)]
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool);
    /// The stream the buffer was allocated on (set by `graph!`).
    #[doc(hidden)]
    fn own(&self) -> Option<&CudaStream>;
    /// Whether the operand is device memory (pinned host memory needs no helper stream of its
    /// context, and is no device operand of the [`Capture`]).
    #[doc(hidden)]
    fn device(&self) -> bool {
        true
    }
    /// What a kept recording depends on besides the address: for pinned host memory, its
    /// allocation's id (the driver resolves a host address when a memcpy node is set and keeps
    /// what it resolved, so a recording's host copies must not be replayed on another buffer
    /// allocated at the same address: `kind/memcpy.rs`, `host_side`); 0 for device memory.
    #[doc(hidden)]
    fn buffer(&self) -> u64 {
        0
    }
    /// The operand's alias: on `stream` for device memory of its context, else on the stream of
    /// `helpers` of the operand's context.
    ///
    /// # Safety
    /// As [`CaptureOperands::aliases`], for this operand.
    #[doc(hidden)]
    unsafe fn alias(
        &self,
        stream: &Arc<CudaStream>,
        helpers: &[Arc<CudaStream>],
        eager: bool,
    ) -> Self::Alias;
    /// What the [`Capture`] knows of a device operand, from its alias (`None` for pinned host
    /// memory: its views carry their capture, see `capture_host.rs`).
    #[doc(hidden)]
    fn listed(&self, alias: &mut Self::Alias, stream: &CudaStream) -> Option<Listed>;
    /// The closure's view of the operand's alias.
    #[doc(hidden)]
    fn view<'s>(alias: &'s mut Self::Alias, cap: &'s Capture) -> Self::View<'s>;
}

/// The alias of a device operand of `ctx`: on `stream`, or on the helper stream of `ctx`.
///
/// # Safety
/// As [`Alias::new`], with the stream chosen here.
unsafe fn device_alias<T: 'static>(
    (ptr, len, ctx): (sys::CUdeviceptr, usize, CUcontext),
    stream: &Arc<CudaStream>,
    helpers: &[Arc<CudaStream>],
    eager: bool,
) -> Alias<T> {
    let on = helpers.iter().find(|h| h.context().cu_ctx() == ctx).unwrap_or(stream);
    // SAFETY: the caller's contract.
    if eager { unsafe { Alias::pooled(on, ptr, len) } } else { unsafe { Alias::new(on, ptr, len) } }
}

impl<T: 'static> CaptureOperand for DevRead<'_, T> {
    type Elem = T;
    type View<'s> = CaptureSlice<'s, T>;
    type Alias = Alias<T>;
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool) {
        (self.ptr, self.len, self.ctx, self.tag, false)
    }
    fn own(&self) -> Option<&CudaStream> {
        self.own
    }
    unsafe fn alias(
        &self,
        stream: &Arc<CudaStream>,
        helpers: &[Arc<CudaStream>],
        eager: bool,
    ) -> Alias<T> {
        // SAFETY: the caller's contract.
        unsafe { device_alias((self.ptr, self.len, self.ctx), stream, helpers, eager) }
    }
    fn listed(&self, alias: &mut Alias<T>, stream: &CudaStream) -> Option<Listed> {
        Some(alias.listed(stream, false))
    }
    fn view<'s>(alias: &'s mut Alias<T>, cap: &'s Capture) -> CaptureSlice<'s, T> {
        alias.view(cap)
    }
}

impl<T: 'static> CaptureOperand for DevWrite<'_, T> {
    type Elem = T;
    type View<'s> = CaptureSliceMut<'s, T>;
    type Alias = Alias<T>;
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool) {
        (self.ptr, self.len, self.ctx, self.tag, true)
    }
    fn own(&self) -> Option<&CudaStream> {
        self.own
    }
    unsafe fn alias(
        &self,
        stream: &Arc<CudaStream>,
        helpers: &[Arc<CudaStream>],
        eager: bool,
    ) -> Alias<T> {
        // SAFETY: the caller's contract.
        unsafe { device_alias((self.ptr, self.len, self.ctx), stream, helpers, eager) }
    }
    fn listed(&self, alias: &mut Alias<T>, stream: &CudaStream) -> Option<Listed> {
        Some(alias.listed(stream, true))
    }
    fn view<'s>(alias: &'s mut Alias<T>, cap: &'s Capture) -> CaptureSliceMut<'s, T> {
        alias.view_mut(cap)
    }
}

/// The operands of a `capture` statement: a tuple of 1 to 6 [`CaptureOperand`]s. Sealed.
pub trait CaptureOperands: sealed::Sealed {
    /// The closure's views, in order.
    type Views<'s>;
    /// One alias per operand.
    #[doc(hidden)]
    type Aliases;
    /// Each operand's `(tag, written, context)` into `out`; returns how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// Each operand's `(address, length in elements, context, written, element type)` into
    /// `out`; returns how many: what a recording of the statement depends on besides its key.
    /// The element type is part of it because one statement can have operands of several
    /// element types: in a generic function, whose `graph!` plan (a `static`) is one item for
    /// every instantiation, a recording of `n` `u32` replayed on `n` `u8` at the same address
    /// would write four times the view's bytes.
    #[doc(hidden)]
    fn ranges(&self, out: &mut Ranges) -> usize;
    /// The own stream of each operand of another context than `ctx` (`None` for such an
    /// operand without one, and for pinned host memory of another context, which is refused:
    /// [`Error::WrongContext`]), into `out`.
    #[doc(hidden)]
    fn foreign<'x>(&'x self, ctx: CUcontext, out: &mut Vec<Option<&'x CudaStream>>);
    /// One alias per operand, over its memory: on `stream` for an operand of its context, else
    /// on the stream of `helpers` of the operand's context.
    ///
    /// # Safety
    /// The handles' memory stays borrowed (allocated) while the aliases live, and is of
    /// `stream`'s context or of the context of a stream in `helpers`.
    #[doc(hidden)]
    unsafe fn aliases(
        &self,
        stream: &Arc<CudaStream>,
        helpers: &[Arc<CudaStream>],
        eager: bool,
    ) -> Self::Aliases;
    /// The closure's views of the aliases.
    #[doc(hidden)]
    fn views<'s>(aliases: &'s mut Self::Aliases, cap: &'s Capture) -> Self::Views<'s>;
    /// What the [`Capture`] knows of each device operand, from its alias, in order (pinned host
    /// operands are left out).
    #[doc(hidden)]
    fn listed(&self, aliases: &mut Self::Aliases, stream: &CudaStream) -> Vec<Listed>;
}

macro_rules! capture_operands {
    ($($o:ident $i:tt),*) => {
        impl<$($o: CaptureOperand),*> sealed::Sealed for ($($o,)*) {}
        impl<$($o: CaptureOperand),*> CaptureOperands for ($($o,)*) {
            type Views<'s> = ($($o::View<'s>,)*);
            type Aliases = ($($o::Alias,)*);
            fn accesses(&self, out: &mut Accesses) -> usize {
                let mut n = 0;
                $(let (_, _, ctx, tag, write) = self.$i.parts();
                out[n] = (tag, write, ctx);
                n += 1;)*
                n
            }
            fn ranges(&self, out: &mut Ranges) -> usize {
                let mut n = 0;
                $(let (ptr, len, ctx, _, write) = self.$i.parts();
                out[n] = (ptr, len, ctx, write, TypeId::of::<$o::Elem>(), self.$i.buffer());
                n += 1;)*
                n
            }
            fn foreign<'x>(&'x self, ctx: CUcontext, out: &mut Vec<Option<&'x CudaStream>>) {
                // A device operand of another context is used on a stream of its own context;
                // pinned host memory of another context was acquired without an address (null),
                // and is refused as `None` is (review 33).
                $(if self.$i.parts().2 != ctx {
                    out.push(if self.$i.device() { self.$i.own() } else { None });
                })*
            }
            unsafe fn aliases(
                &self,
                stream: &Arc<CudaStream>,
                helpers: &[Arc<CudaStream>],
                eager: bool,
            ) -> Self::Aliases {
                // SAFETY: the caller's contract, operand by operand.
                ($(unsafe { self.$i.alias(stream, helpers, eager) },)*)
            }
            fn views<'s>(aliases: &'s mut Self::Aliases, cap: &'s Capture) -> Self::Views<'s> {
                ($($o::view(&mut aliases.$i, cap),)*)
            }
            fn listed(&self, aliases: &mut Self::Aliases, stream: &CudaStream) -> Vec<Listed> {
                // One allocation of the operands' number, not a growth from empty.
                let mut listed = Vec::with_capacity([$($i),*].len());
                $(listed.extend(self.$i.listed(&mut aliases.$i, stream));)*
                listed
            }
        }
    };
}
capture_operands!(A 0);
capture_operands!(A 0, B 1);
capture_operands!(A 0, B 1, C 2);
capture_operands!(A 0, B 1, C 2, D 3);
capture_operands!(A 0, B 1, C 2, D 3, E 4);
capture_operands!(A 0, B 1, C 2, D 3, E 4, F 5);

/// Each operand of a `capture` statement as `(address, length in elements, context, written,
/// element type, allocation)`, the last [`CaptureOperand::buffer`].
#[doc(hidden)]
pub type Ranges = [(sys::CUdeviceptr, usize, CUcontext, bool, TypeId, u64); 6];

/// Object-safe view of a `capture` statement's value, used by the cache (sealed).
pub trait CapturedWork: sealed::Sealed {
    /// Each operand's `(tag, written, context)` into `out`; returns how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
    /// Runs the closure under stream capture and keeps the recording, or the error.
    ///
    /// # Safety
    /// Called by the cache only, while the operands' borrows and guards last and before the
    /// call's launch orders the recording's work with them.
    #[doc(hidden)]
    unsafe fn record(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error>;
    /// The last recording.
    #[doc(hidden)]
    fn recorded(&self) -> Option<Arc<OwnedGraph>>;
    /// Runs the closure directly on the stream (not captured).
    ///
    /// # Safety
    /// Called by the cache only, while the operands' guards last (their events are recorded
    /// after the work this enqueues).
    #[doc(hidden)]
    unsafe fn run_eager(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error>;
    /// The statement's key (`capture(…, key = k, |s, k, views| …)`); `None` for a statement
    /// whose closure may depend on anything, recorded on every call.
    #[doc(hidden)]
    fn key(&self) -> Option<&dyn DynKey> {
        None
    }
    /// Each operand's `(address, length, context, written, element type)` into `out`; returns
    /// how many.
    #[doc(hidden)]
    fn ranges(&self, _out: &mut Ranges) -> usize {
        0
    }
    /// The context of the call's stream (the recording's).
    #[doc(hidden)]
    fn context(&self) -> CUcontext {
        core::ptr::null_mut()
    }
    /// Takes `graph`, a recording kept for equal operands and key, instead of recording.
    #[doc(hidden)]
    fn reuse(&self, _graph: Arc<OwnedGraph>) {}
    /// The address of a keyed statement's closure (a `fn`).
    #[doc(hidden)]
    fn code(&self) -> usize {
        0
    }
    /// The recording for a node being added: the last one, unless its graph was moved into
    /// another node (a recording with memory nodes, kept and taken again for equal operands
    /// and key): a keyed statement's `fn` is then recorded again, once per call (see
    /// [`Self::rerecorded`]); an unkeyed statement, recorded once per call, has no other.
    ///
    /// # Safety
    /// As [`Self::record`].
    #[doc(hidden)]
    unsafe fn fresh(&self, site: &dyn Fn() -> NodeSite) -> Result<Option<Arc<OwnedGraph>>, Error> {
        // An unkeyed statement records once per call, and a call adds a node once.
        match self.recorded() {
            Some(g) if g.moved() => Err(unrecorded(site)),
            g => Ok(g),
        }
    }
    /// Whether [`Self::fresh`] recorded again in this call (the cache then keeps and counts
    /// that recording); cleared by the call.
    #[doc(hidden)]
    fn rerecorded(&self) -> bool {
        false
    }
}

/// The error of a node whose recording was moved into another graph and cannot be made again
/// (never: an unkeyed statement records once per call and a call adds its node once).
fn unrecorded(site: &dyn Fn() -> NodeSite) -> Error {
    let at = site();
    let source = "the capture statement has no recording to add".into();
    Error::Capture { file: at.file, line: at.line, source }
}

/// A value a keyed `capture` statement's recording depends on, compared with the value the
/// kept recordings were made with ([`CaptureKey::same`]) to decide whether the statement is
/// recorded again. Implemented for integers, `bool`, `char`, floats (compared bit for bit, so
/// `-0.0` and `0.0` differ and a NaN equals the same NaN), `()`, `&'static str`, `String`,
/// tuples of up to 8 keys, arrays, `Option`, `Vec` and `Box` of keys, cudarc's `CudaFunction`
/// (the same `CUfunction`; the kept copy keeps its module loaded), and `Arc<T>` for any `T`
/// (compared by identity: the same allocation; the recording's copy of the key keeps it alive,
/// so put a library handle or a `kernels!` module in an `Arc` to make it part of the key).
///
/// Implement it for a type of your own when the closure needs it: `same` must return `true`
/// only for values with which the closure records the same work. A wrong `true` replays a
/// recording made with the other value (stale scalars, never freed memory: the operands'
/// addresses are compared by the crate, and safe code records nothing else).
pub trait CaptureKey: Clone + Send + 'static {
    /// Whether a recording made with `other` is this key's.
    fn same(&self, other: &Self) -> bool;
}

macro_rules! key_by_eq {
    ($($t:ty),*) => {$(
        impl CaptureKey for $t {
            #[inline]
            fn same(&self, other: &Self) -> bool {
                self == other
            }
        }
    )*};
}
key_by_eq!(
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    bool,
    char,
    (),
    &'static str,
    String
);

impl CaptureKey for f32 {
    #[inline]
    fn same(&self, other: &Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}
impl CaptureKey for f64 {
    #[inline]
    fn same(&self, other: &Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}
impl<T: ?Sized + Send + Sync + 'static> CaptureKey for Arc<T> {
    /// The same allocation.
    #[inline]
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}
impl CaptureKey for CudaFunction {
    /// The same function (`CUfunction`); the kept copy keeps its module loaded.
    #[inline]
    fn same(&self, other: &Self) -> bool {
        self.cu_function() == other.cu_function()
    }
}
impl<T: CaptureKey> CaptureKey for Option<T> {
    fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Some(a), Some(b)) => a.same(b),
            (None, None) => true,
            _ => false,
        }
    }
}
impl<T: CaptureKey> CaptureKey for Vec<T> {
    fn same(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a.same(b))
    }
}
impl<T: CaptureKey> CaptureKey for Box<T> {
    fn same(&self, other: &Self) -> bool {
        (**self).same(other)
    }
}
impl<T: CaptureKey, const N: usize> CaptureKey for [T; N] {
    fn same(&self, other: &Self) -> bool {
        self.iter().zip(other).all(|(a, b)| a.same(b))
    }
}
macro_rules! key_tuple {
    ($($t:ident $i:tt),*) => {
        impl<$($t: CaptureKey),*> CaptureKey for ($($t,)*) {
            #[inline]
            fn same(&self, other: &Self) -> bool {
                $(self.$i.same(&other.$i))&&*
            }
        }
    };
}
key_tuple!(A 0);
key_tuple!(A 0, B 1);
key_tuple!(A 0, B 1, C 2);
key_tuple!(A 0, B 1, C 2, D 3);
key_tuple!(A 0, B 1, C 2, D 3, E 4);
key_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
key_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
key_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// A [`CaptureKey`] of any type, as the cache keeps it.
#[doc(hidden)]
pub trait DynKey {
    /// Whether `kept` (a [`Self::keep`] of an equal statement) is the same key.
    fn same_as(&self, kept: &(dyn Any + Send)) -> bool;
    /// A copy to keep with the recording.
    fn keep(&self) -> Box<dyn Any + Send>;
}
impl<K: CaptureKey> DynKey for K {
    fn same_as(&self, kept: &(dyn Any + Send)) -> bool {
        (kept as &dyn Any).downcast_ref::<K>().is_some_and(|k| k.same(self))
    }
    fn keep(&self) -> Box<dyn Any + Send> {
        Box::new(self.clone())
    }
}

/// A `capture` statement without a key: its closure may depend on anything it captured, so it
/// is recorded on every call.
#[doc(hidden)]
pub struct Unkeyed;

/// A keyed `capture` statement's key, and its closure's address (a `fn` chosen at run time
/// is part of what a recording depends on).
#[doc(hidden)]
pub struct Keyed<K>(K, usize);

/// A keyed `capture` statement's closure, a `fn` (it captures nothing).
#[doc(hidden)]
pub struct KeyedFn<H: CaptureOperands, K, E>(
    for<'s> fn(&'s Capture, &K, H::Views<'s>) -> Result<(), E>,
);

impl<H: CaptureOperands, K, E> Clone for KeyedFn<H, K, E> {
    fn clone(&self) -> Self {
        *self
    }
}

// A `fn` pointer: a keyed statement may be recorded again in its call (see
// [`CapturedWork::fresh`]).
impl<H: CaptureOperands, K, E> Copy for KeyedFn<H, K, E> {}

/// The recordings a [`GraphCache`](crate::GraphCache) keeps for one keyed `capture` statement:
/// at most `max`, least recently used dropped first. A call whose operands (address, length,
/// context, written, element type) and key equal a kept recording's takes it instead of recording.
pub(crate) struct Recordings {
    kept: Vec<Kept>,
    clock: u64,
}

/// What a keyed statement's recording depends on besides its key: the call's context, the
/// closure's address ([`CapturedWork::code`]) and the operands ([`CapturedWork::ranges`]; the
/// entries past the operands stay [`EMPTY_RANGES`]'s, so equal arrays mean equal operands).
#[derive(PartialEq)]
struct Depends {
    ctx: CUcontext,
    code: usize,
    ranges: Ranges,
}

impl Depends {
    fn of(w: &dyn CapturedWork) -> Self {
        let mut ranges = EMPTY_RANGES;
        w.ranges(&mut ranges);
        Depends { ctx: w.context(), code: w.code(), ranges }
    }
}

struct Kept {
    depends: Depends,
    key: Box<dyn Any + Send>,
    graph: Arc<OwnedGraph>,
    used: u64,
}

// SAFETY: `ctx` and the ranges' contexts are only compared, never dereferenced.
unsafe impl Send for Kept {}

impl Recordings {
    pub(crate) fn new() -> Self {
        Recordings { kept: Vec::new(), clock: 0 }
    }

    /// How many are kept.
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }

    /// Drops the least recently used ones beyond `max`.
    pub(crate) fn shrink(&mut self, max: usize) {
        while self.kept.len() > max {
            if let Some(i) = (0..self.kept.len()).min_by_key(|&i| self.kept[i].used) {
                self.kept.swap_remove(i);
            }
        }
    }

    /// The kept recording for `w`'s operands and key, if any (marked used).
    pub(crate) fn find(&mut self, w: &dyn CapturedWork) -> Option<Arc<OwnedGraph>> {
        let key = w.key()?;
        let depends = Depends::of(w);
        self.clock += 1;
        let k = self.kept.iter_mut().find(|k| k.depends == depends && key.same_as(&*k.key))?;
        k.used = self.clock;
        Some(k.graph.clone())
    }

    /// Keeps `w`'s new recording (a keyed statement's), in place of a kept one for equal
    /// operands and key (recorded again: see [`CapturedWork::fresh`]), else dropping the least
    /// recently used one beyond `max`.
    pub(crate) fn keep(&mut self, w: &dyn CapturedWork, max: usize) {
        let (Some(key), Some(graph)) = (w.key(), w.recorded()) else { return };
        if max == 0 {
            return;
        }
        self.clock += 1;
        let depends = Depends::of(w);
        if let Some(k) = self.kept.iter_mut().find(|k| k.depends == depends && key.same_as(&*k.key))
        {
            (k.graph, k.used) = (graph, self.clock);
            return;
        }
        let key = key.keep();
        self.kept.push(Kept { depends, key, graph, used: self.clock });
        self.shrink(max);
    }
}

const EMPTY_RANGES: Ranges = [(0, 0, core::ptr::null_mut(), false, TypeId::of::<()>(), 0); 6];

/// What a `capture(&a, &mut b, |s, (a, b)| …)` statement of `graph!` evaluates to: the graph
/// call's stream, the operands' handles (borrowing the buffers for the call) and the closure,
/// run once per call. Made only by `graph!`.
pub struct CaptureParams<'a, H, F, K = Unkeyed> {
    stream: &'a Arc<CudaStream>,
    handles: H,
    f: Cell<Option<F>>,
    key: K,
    recorded: RefCell<Option<Arc<OwnedGraph>>>,
    /// Set when [`CapturedWork::fresh`] recorded again.
    rerecorded: Cell<bool>,
}

impl<'a, H: CaptureOperands, F> CaptureParams<'a, H, F> {
    pub(crate) fn new(stream: &'a Arc<CudaStream>, handles: H, f: F) -> Self {
        let (f, recorded, rerecorded) = (Cell::new(Some(f)), RefCell::new(None), Cell::new(false));
        CaptureParams { stream, handles, f, key: Unkeyed, recorded, rerecorded }
    }
}

impl<'a, H: CaptureOperands, K: CaptureKey, E> CaptureParams<'a, H, KeyedFn<H, K, E>, Keyed<K>> {
    pub(crate) fn keyed(
        stream: &'a Arc<CudaStream>,
        handles: H,
        key: K,
        f: for<'s> fn(&'s Capture, &K, H::Views<'s>) -> Result<(), E>,
    ) -> Self {
        let code = f as usize;
        let (f, recorded) = (Cell::new(Some(KeyedFn(f))), RefCell::new(None));
        let rerecorded = Cell::new(false);
        CaptureParams { stream, handles, f, key: Keyed(key, code), recorded, rerecorded }
    }
}

impl<'a, H: CaptureOperands, F, K> CaptureParams<'a, H, F, K> {
    /// Runs `f` on aliases of the operands: capturing on `origin` (this thread's private
    /// stream, whose capture has begun), or eagerly on the call's stream when `origin` is
    /// `None`. Returns the closure's result, or the panic; the driver error that made the
    /// recording unusable (an explicit node of [`Capture::kernel`] whose successors could not
    /// be set), if any; whether the closure joined the call's stream into the capture
    /// ([`Capture::stream`]); and the functions of its explicit kernel nodes.
    ///
    /// Operands of other devices (`helpers`: the thread's stream of each of their contexts)
    /// have their aliases on those streams, which first join the capture (eagerly: wait for
    /// the stream's work so far) and are joined back after the aliases were dropped (whose
    /// `leak` makes them wait for the views' last uses on any stream of their device).
    #[allow(clippy::type_complexity)]
    fn call<G, E>(
        &self,
        f: G,
        origin: Option<&CaptureOrigin>,
        helpers: &[CaptureOrigin],
    ) -> (std::thread::Result<Result<(), E>>, Option<CudaError>, bool, Vec<CudaFunction>)
    where
        G: for<'s> FnOnce(&'s Capture, H::Views<'s>) -> Result<(), E>,
    {
        let work: &Arc<CudaStream> = origin.map_or(self.stream, |o| o.stream());
        let mut forked = None;
        if let Some(here) = helpers.first().map(|_| origin_stream(work.context())) {
            let fork = |here: &CaptureOrigin| {
                helpers.iter().try_for_each(|h| order_streams(work, here.fork_event(), h.stream()))
            };
            if let Err(error) = here.and_then(|here| fork(&here)) {
                forked = Some(CudaError { call: Self::FORK, error });
            }
            let _ = work.context().bind_to_thread();
        }
        // SAFETY: the handles borrow their buffers for the whole graph call, which outlives
        // the aliases (dropped below); `validate` and `helpers` made sure that each is of the
        // stream's context or of a helper's. An alias is never freed (its drop leaks it), and
        // the closure gets only views of it, for a lifetime it must accept for any `'s`: they
        // cannot escape the closure.
        let streams: Vec<Arc<CudaStream>> = helpers.iter().map(|h| h.stream().clone()).collect();
        // Eagerly, on the call's stream alone, from this thread's pool (see `Alias::pooled`).
        let eager = origin.is_none() && helpers.is_empty();
        let mut aliases = unsafe { self.handles.aliases(work, &streams, eager) };
        let listed = self.handles.listed(&mut aliases, work);
        let on: Vec<(sys::CUstream, sys::CUcontext)> =
            streams.iter().map(|h| crate::session::stream_id(h)).collect();
        let (id, capturing) = (next_capture_id(), origin.is_some());
        let cap = Capture::new(work.clone(), self.stream.clone(), capturing, listed, id, &on);
        let result = catch_unwind(AssertUnwindSafe(|| f(&cap, H::views(&mut aliases, &cap))));
        let broken = cap.broken();
        let joined = cap.joined_user();
        let functions = cap.take_functions();
        // Pooled eager aliases wait on their events at their drop only when the closure's work
        // may be on other streams than the call's (a fork): as a leaked alias always does.
        crate::session::imp::eager_join(cap.forked());
        drop(cap);
        // Still capturing when `capturing`, so their `leak` waits only on events recorded
        // inside this capture.
        drop(aliases);
        crate::session::imp::eager_join(false);
        // An alias dropped from the pool (beyond its bound) may be of another device: its
        // `leak` made that context current (review 11c).
        let _ = work.context().bind_to_thread();
        let mut back = None;
        for h in helpers {
            if let Err(error) = order_streams(h.stream(), h.join_event(), work) {
                back.get_or_insert(CudaError { call: Self::JOIN, error });
            }
        }
        if !helpers.is_empty() {
            let _ = work.context().bind_to_thread();
        }
        (result, broken.or(forked).or(back), joined, functions)
    }

    const FORK: &'static str =
        "cuEventRecord / cuStreamWaitEvent (another device's stream into the capture)";
    const JOIN: &'static str =
        "cuEventRecord / cuStreamWaitEvent (another device's stream back from the capture)";

    /// The thread's stream of each other context (device) of the operands, once per context
    /// (made on the operand's own context object the first time: `ctx.new_stream()`). Refused
    /// ([`Error::WrongContext`]) for an operand of another context without an own stream (not
    /// made by `graph!`), and ([`Error::Node`]) unless cudarc manages stream synchronization
    /// for that context object, as for the call's stream (see `require_tracking`).
    fn helpers(&self, site: &dyn Fn() -> NodeSite) -> Result<Vec<CaptureOrigin>, Error> {
        let mut owns = Vec::new();
        self.handles.foreign(self.stream.context().cu_ctx(), &mut owns);
        let mut helpers: Vec<CaptureOrigin> = Vec::new();
        for own in owns {
            let Some(own) = own else { return Err(Error::WrongContext { site: site() }) };
            let ctx = own.context();
            if helpers.iter().any(|h| h.stream().context().cu_ctx() == ctx.cu_ctx()) {
                continue;
            }
            let err = |call, error| Error::Node { site: site(), source: CudaError { call, error } };
            let h = crate::session::idle_origin(ctx).map_err(|e| {
                err("cuStreamCreate / cuStreamIsCapturing (another device's helper stream)", e)
            })?;
            crate::session::require_tracking(h.stream())
                .map_err(|why| err(why, DriverError(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED)))?;
            helpers.push(h);
        }
        Ok(helpers)
    }

    /// The closure, taken: each statement value runs it once (the cache records or runs it
    /// once per call); a second run is an error rather than an empty recording.
    fn take(&self, site: &dyn Fn() -> NodeSite) -> Result<F, Error> {
        self.f.take().ok_or_else(|| {
            let at = site();
            let source = "the closure of this capture statement already ran in this call".into();
            Error::Capture { file: at.file, line: at.line, source }
        })
    }
}

impl<H: CaptureOperands, F, K> CaptureParams<'_, H, F, K> {
    /// Records `f` (the statement's closure, taken) under stream capture and keeps the
    /// recording, or returns the error. `serial`: the serial the recording takes over (one made
    /// again by [`CapturedWork::fresh`]); `None` for a new one.
    ///
    /// # Safety
    /// As [`CapturedWork::record`].
    unsafe fn record_with<G, E>(
        &self,
        f: G,
        site: &dyn Fn() -> NodeSite,
        serial: Option<u64>,
    ) -> Result<(), Error>
    where
        G: for<'s> FnOnce(&'s Capture, H::Views<'s>) -> Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let at = site();
        let graph_err =
            |call, error| Error::Node { site: site(), source: CudaError { call, error } };
        // SAFETY: the stream is alive (borrowed by the call) and its context current (bound by
        // `run_call`).
        unsafe { crate::session::can_capture(self.stream) }
            .map_err(|(call, e)| graph_err(call, e))?;
        let helpers = self.helpers(site)?;
        let origin = crate::session::idle_origin(self.stream.context()).map_err(|e| {
            graph_err("cuStreamCreate / cuStreamIsCapturing (capture origin; a capture inside another capture's closure on this thread is refused)", e)
        })?;
        // SAFETY: the origin is this thread's own, alive and not capturing; its context is the
        // stream's, current.
        unsafe { crate::session::begin_origin(&origin) }
            .map_err(|e| graph_err("cuStreamBeginCapture", e))?;
        let (result, broken, joined, functions) = self.call(f, Some(&origin), &helpers);
        let ctx = self.stream.context();
        let _ = ctx.bind_to_thread();
        // SAFETY: this thread began the capture on `origin` (and the closure joined the stream
        // when `joined`), both alive; it ends whatever the closure did.
        let end = unsafe { crate::session::end_origin(&origin, joined.then_some(&**self.stream)) };
        let end = end.map(|raw| OwnedGraph::new(raw, ctx.clone(), functions));
        let (file, line) = (at.file, at.line);
        if end.is_err() {
            // An invalidated capture: work the closure enqueued on another stream may still be
            // queued on the buffers; it must finish before their borrows end.
            let _ = ctx.synchronize();
        }

        match result {
            Err(panic) => {
                drop(end);
                resume_unwind(panic)
            }
            Ok(Err(e)) => {
                let source = e.into();
                Err(match end {
                    Ok(_) => Error::Capture { file, line, source },
                    Err(error) => {
                        let source = CudaError { call: "cuStreamEndCapture", error };
                        Error::CaptureInvalidated { file, line, source }
                    }
                })
            }
            Ok(Ok(())) => match (end, broken) {
                // An explicit node whose successors could not be set: unusable.
                (Ok(_), Some(source)) => Err(Error::CaptureInvalidated { file, line, source }),
                (Ok(mut graph), None) => match crate::session::check_recording(graph.raw, &[]) {
                    Err(why) => {
                        let error = DriverError(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED);
                        Err(graph_err(why, error))
                    }
                    Ok(memory) => {
                        graph.memory = memory;
                        if let Some(serial) = serial {
                            graph.serial = serial;
                        }
                        *self.recorded.borrow_mut() = Some(Arc::new(graph));
                        Ok(())
                    }
                },
                (Err(error), _) => {
                    let source = CudaError { call: "cuStreamEndCapture", error };
                    Err(Error::CaptureInvalidated { file, line, source })
                }
            },
        }
    }

    /// Runs `f` (the statement's closure, taken) directly on the stream.
    ///
    /// # Safety
    /// As [`CapturedWork::run_eager`].
    unsafe fn eager_with<G, E>(&self, f: G, site: &dyn Fn() -> NodeSite) -> Result<(), Error>
    where
        G: for<'s> FnOnce(&'s Capture, H::Views<'s>) -> Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let helpers = self.helpers(site)?;
        match self.call(f, None, &helpers) {
            (Err(panic), ..) => resume_unwind(panic),
            (Ok(Err(e)), ..) => {
                let at = site();
                Err(Error::Capture { file: at.file, line: at.line, source: e.into() })
            }
            (Ok(Ok(())), Some(source), ..) => Err(Error::Node { site: site(), source }),
            (Ok(Ok(())), None, ..) => Ok(()),
        }
    }
}

impl<H, F, E> CapturedWork for CaptureParams<'_, H, F>
where
    H: CaptureOperands,
    F: for<'s> FnOnce(&'s Capture, H::Views<'s>) -> Result<(), E>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn accesses(&self, out: &mut Accesses) -> usize {
        self.handles.accesses(out)
    }

    unsafe fn record(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error> {
        let f = self.take(site)?;
        // SAFETY: the caller's contract.
        unsafe { self.record_with(f, site, None) }
    }

    fn recorded(&self) -> Option<Arc<OwnedGraph>> {
        self.recorded.borrow().clone()
    }

    unsafe fn run_eager(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error> {
        let f = self.take(site)?;
        // SAFETY: the caller's contract.
        unsafe { self.eager_with(f, site) }
    }
}

impl<H, K, E> CaptureParams<'_, H, KeyedFn<H, K, E>, Keyed<K>>
where
    H: CaptureOperands,
    K: CaptureKey,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// Records the statement's `fn` with its key (copied: recorded again in the same call when
    /// [`CapturedWork::fresh`] needs to), the recording taking over `serial` if given.
    ///
    /// # Safety
    /// As [`CapturedWork::record`].
    unsafe fn record_keyed(
        &self,
        site: &dyn Fn() -> NodeSite,
        serial: Option<u64>,
    ) -> Result<(), Error> {
        let f = self.f.get().ok_or_else(|| unrecorded(site))?.0;
        let key = &self.key.0;
        // SAFETY: the caller's contract.
        unsafe { self.record_with(|s, views| f(s, key, views), site, serial) }
    }
}

impl<H, K, E> CapturedWork for CaptureParams<'_, H, KeyedFn<H, K, E>, Keyed<K>>
where
    H: CaptureOperands,
    K: CaptureKey,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn accesses(&self, out: &mut Accesses) -> usize {
        self.handles.accesses(out)
    }

    unsafe fn record(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe { self.record_keyed(site, None) }
    }

    fn recorded(&self) -> Option<Arc<OwnedGraph>> {
        self.recorded.borrow().clone()
    }

    unsafe fn run_eager(&self, site: &dyn Fn() -> NodeSite) -> Result<(), Error> {
        let f = self.take(site)?.0;
        let key = &self.key.0;
        // SAFETY: the caller's contract.
        unsafe { self.eager_with(|s, views| f(s, key, views), site) }
    }

    fn key(&self) -> Option<&dyn DynKey> {
        Some(&self.key.0)
    }

    fn ranges(&self, out: &mut Ranges) -> usize {
        self.handles.ranges(out)
    }

    fn context(&self) -> CUcontext {
        self.stream.context().cu_ctx()
    }

    fn reuse(&self, graph: Arc<OwnedGraph>) {
        *self.recorded.borrow_mut() = Some(graph);
    }

    fn code(&self) -> usize {
        self.key.1
    }

    unsafe fn fresh(&self, site: &dyn Fn() -> NodeSite) -> Result<Option<Arc<OwnedGraph>>, Error> {
        let serial = match self.recorded() {
            Some(g) if g.moved() => g.serial,
            g => return Ok(g),
        };
        // The same `fn`, key and operands record the same work: the new recording keeps the
        // moved one's serial, so that the execs and variants holding the moved one still count
        // as holding it (an unchanged call, a memo twin) and nothing is recorded again for them.
        // The kept recording's graph was moved into another node: record again (same `fn`,
        // key and operands, so the same work). A panic is this node's error: the cache is part
        // way through a build, which the error unwinds cleanly.
        // SAFETY: the caller's contract.
        let again =
            catch_unwind(AssertUnwindSafe(|| unsafe { self.record_keyed(site, Some(serial)) }));
        match again {
            Ok(r) => r?,
            Err(_) => {
                let at = site();
                let source = "the closure panicked when recorded again for a new graph".into();
                return Err(Error::Capture { file: at.file, line: at.line, source });
            }
        }
        self.rerecorded.set(true);
        self.recorded().map(Some).ok_or_else(|| unrecorded(site))
    }

    fn rerecorded(&self) -> bool {
        self.rerecorded.replace(false)
    }
}

/// A recording with memory nodes goes into its child-graph node by moving its graph there
/// (`CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`, CUDA 12.9: a child graph with memory nodes must be
/// moved, not cloned): the parent graph owns it from then on, so the recording is marked moved
/// and never used again (marked before the add, and unmarked by [`Captured::unadded`] if the
/// driver refuses it, e.g. inside the body of a conditional node, where memory nodes are not
/// allowed: the crate then destroys it). Only [`Captured::with_params`] of an add gets here
/// ([`Captured::settable`]). Returns whether it marked the recording.
#[cfg(any(
    feature = "cuda-12090",
    feature = "cuda-13000",
    feature = "cuda-13010",
    feature = "cuda-13020"
))]
fn move_child(p: &mut CUgraphNodeParams, g: &OwnedGraph) -> bool {
    p.__bindgen_anon_1.graph.ownership =
        sys::CUgraphChildGraphNodeOwnership::CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    g.moved.store(true, Ordering::Relaxed);
    true
}

/// Before CUDA 12.9 a child graph cannot hold memory nodes: the driver refuses the add
/// ([`Captured::ADD`] says why).
#[cfg(not(any(
    feature = "cuda-12090",
    feature = "cuda-13000",
    feature = "cuda-13010",
    feature = "cuda-13020"
)))]
fn move_child(_: &mut CUgraphNodeParams, _: &OwnedGraph) -> bool {
    false
}

/// The captured node kind: a child-graph node holding one recording.
pub(crate) struct Captured;

/// A captured node's last recording.
pub(crate) struct ChildState {
    graph: Option<Arc<OwnedGraph>>,
    /// Why a node being added has no recording (see [`CapturedWork::fresh`]): the add fails
    /// with it.
    failed: Option<CudaError>,
    /// Set when [`Captured::with_params`] marked the recording moved for an add: undone if the
    /// driver refuses the add ([`Captured::unadded`]), so the recording is destroyed, not leaked.
    moving: bool,
}

/// The driver error an add reports for a recording made again that failed ([`CapturedWork::fresh`]):
/// the driver's when there is one, else `CUDA_ERROR_UNKNOWN` naming what failed.
fn as_cuda_error(e: Error) -> CudaError {
    match e {
        Error::Node { source, .. } | Error::CaptureInvalidated { source, .. } => source,
        _ => CudaError {
            call: "capture statement recorded again for a new graph (its closure failed; the \
                   kept recording's graph, with memory nodes, was moved into another graph)",
            error: DriverError(sys::CUresult::CUDA_ERROR_UNKNOWN),
        },
    }
}

impl NodeKind for Captured {
    type Params<'a> = &'a dyn CapturedWork;
    type State = ChildState;
    const ADD: &'static str = "cuGraphAddNode_v2 (child graph of the captured work; a recording \
                               that allocated memory is moved into its node, which needs CUDA 12.9 \
                               or newer, in the driver and in the crate's `cuda-*` feature)";
    const SET: &'static str = "cuGraphExecNodeSetParams (child graph)";
    const EAGER: &'static str = "captured work, run eagerly";

    fn validate(
        _: &&dyn CapturedWork,
        _: Option<&super::Limits>,
        _: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Ok(())
    }

    /// Captured work may use buffers of any context (collectives and send/recv of NCCL over
    /// the devices of the host, on streams of their devices).
    fn contexts_ok(_: &&dyn CapturedWork, _: CUcontext, _: &[(u64, bool, CUcontext)]) -> bool {
        true
    }

    /// A statement without a key: its closure may use buffers it did not list (values it
    /// owns). A keyed statement's closure owns nothing (it captures nothing): what its
    /// recording uses is its views, or (under `Capture::stream`'s contract) memory that outlives
    /// every graph and exec made from it.
    fn unlisted_work(p: &&dyn CapturedWork) -> bool {
        p.key().is_none()
    }

    /// Records, unless the call took a kept recording ([`CapturedWork::reuse`]).
    fn prepare(p: &&dyn CapturedWork, site: &dyn Fn() -> NodeSite) -> Result<bool, Error> {
        if p.key().is_some() && p.recorded().is_some() {
            return Ok(false);
        }
        // SAFETY: the cache's prepare step, inside the call, before its launch.
        unsafe { p.record(site) }.map(|()| true)
    }

    fn accesses(p: &&dyn CapturedWork, out: &mut Accesses) -> usize {
        p.accesses(out)
    }

    /// The state of a node being added: its recording, which must not have been moved into
    /// another node (see [`CapturedWork::fresh`]).
    fn state(p: &&dyn CapturedWork) -> ChildState {
        let site = || NodeSite { label: "capture", text: "", file: "", line: 0, column: 0 };
        // SAFETY: called when a node is added, by the cache's build inside the call, before
        // its launch.
        match unsafe { p.fresh(&site) } {
            Ok(graph) => ChildState { graph, failed: None, moving: false },
            Err(e) => ChildState { graph: None, failed: Some(as_cuda_error(e)), moving: false },
        }
    }

    unsafe fn setup(
        state: &mut ChildState,
        _driver: &mut impl crate::raw::Driver,
        _ctx: CUcontext,
    ) -> Result<(), CudaError> {
        state.failed.take().map_or(Ok(()), Err)
    }

    /// A recording with memory nodes is never set into an exec's node: its allocations have
    /// addresses of their own, which the exec's allocation nodes do not have; the ladder goes
    /// to a new graph (the driver refuses the whole-exec update of a graph with memory nodes).
    fn settable(old: &ChildState, new: &&dyn CapturedWork) -> bool {
        let memory = |g: Option<&Arc<OwnedGraph>>| g.is_some_and(|g| g.memory().any());
        !memory(old.graph.as_ref()) && !memory(new.recorded().as_ref())
    }

    fn recorded_memory(s: &ChildState) -> u64 {
        s.graph.as_ref().map_or(0, |g| g.memory().bytes)
    }

    fn memory_nodes(s: &ChildState) -> bool {
        s.graph.as_ref().is_some_and(|g| g.memory().any())
    }

    fn unadded(s: &mut ChildState) {
        if core::mem::take(&mut s.moving)
            && let Some(g) = &s.graph
        {
            g.moved.store(false, Ordering::Relaxed);
        }
    }

    /// Changed when the call's recording is another one than the node's (always, for an
    /// unkeyed statement: it records every call; for a keyed one, when its key or operands
    /// changed to a set no kept recording has).
    fn record(s: &mut ChildState, p: &&dyn CapturedWork) -> bool {
        let new = p.recorded();
        let serial = |g: &Option<Arc<OwnedGraph>>| g.as_ref().map(|g| g.serial);
        let changed = serial(&s.graph) != serial(&new) || new.is_none();
        s.graph = new;
        changed
    }

    fn with_params<R>(
        s: &mut ChildState,
        _ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH);
        // A null graph (no recording, or one moved into another node: never, since `prepare`
        // records and `state` records again) is refused by the driver with an error, not used.
        let g = s.graph.as_ref().filter(|g| !g.moved());
        p.__bindgen_anon_1.graph.graph = g.map_or(core::ptr::null_mut(), |g| g.raw);
        if let Some(g) = g.filter(|g| g.memory().any()) {
            s.moving = move_child(&mut p, g);
        }
        f(&mut p)
    }

    unsafe fn eager(
        p: &&dyn CapturedWork,
        _: &CudaStream,
        _: &std::sync::Arc<super::Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        // SAFETY: the cache's eager run, inside the call, guards alive.
        unsafe { p.run_eager(site) }
    }
}
