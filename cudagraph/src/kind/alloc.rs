//! Graph-owned memory: memory allocation and free nodes (`cuGraphAddNode_v2` with
//! `CU_GRAPH_NODE_TYPE_MEM_ALLOC` / `CU_GRAPH_NODE_TYPE_MEM_FREE`), made by
//! `let tmp = alloc::<f32>(n);` in `graph!` (freed by a free node after its last use, or by an
//! explicit `free(&mut tmp);`) and by [`GraphBuilder::alloc`](crate::GraphBuilder::alloc).
//!
//! What the CUDA driver documents about these nodes, and what this crate does with it:
//! - `cuGraphAddMemAllocNode` (here through `cuGraphAddNode_v2`) returns the allocation's
//!   address in `dptr` when the node is *added*; "the allocation's address remains fixed across
//!   instantiations and launches" of that graph. A statement's operands are made before the cache
//!   knows which variant (which `CUgraph`) the call runs, so a graph-owned buffer's handles carry a
//!   *placeholder* address ([`placeholder`]: the top four bits set, which no device address has)
//!   naming its place; the placeholder is what node states store and compare (so unchanged
//!   parameters stay unchanged between calls), and it is replaced by the variant's real address
//!   only in the driver's view of a node ([`resolve`]), while a build, an update or an eager call
//!   has its variant's addresses bound ([`with_scratch`]). A placeholder that reaches a kernel
//!   unresolved is an invalid address (a fault), never another buffer's memory.
//! - Nodes may access the allocation only when "ordered after the allocation node but before
//!   the free node" (`cuGraphAddMemFreeNode`); an allocation freed in its own graph "cannot be
//!   freed outside the owning graph, and can only be freed once". The alloc node *writes* its
//!   place and the free node *writes* it too, so the usual hazard rules give every use an edge
//!   from the alloc node and one to the free node; the macro puts the free node after the last
//!   use and refuses any use after it, or outside the body, at compile time.
//! - "If the graph contains memory allocation or free nodes, there can be at most one
//!   executable graph in existence for that graph at a time" (`cuGraphInstantiateWithFlags`):
//!   each variant has its own `CUgraph` and one exec of it.
//! - Whole-exec update (`cuGraphExecUpdate`) of graphs with memory nodes is refused by the
//!   driver, and alloc/free nodes have no per-node set-params: the ladder re-instantiates such a
//!   graph instead of trying a whole-exec update (counted in `Stats::reinstantiations`), and an
//!   alloc node whose size changed is never sent per node. Other nodes of the graph (kernels
//!   using the buffer, say) are still updated per node.
//! - Memory nodes are not allowed in child graphs or conditional bodies: `alloc` is a top-level
//!   statement only (a compile error elsewhere).
//! - The physical memory behind graph allocations comes from the device's graph memory pool,
//!   kept by the driver between launches and reused by later graphs; read its size with
//!   `cuDeviceGetGraphMemAttribute` ([`graph_mem_usage`](crate::graph_mem_usage)) and give it
//!   back with `cuDeviceGraphMemTrim`.
//!
//! Eagerly ([`Mode::Eager`](crate::Mode::Eager), `eager!`), the same statements are a
//! stream-ordered `cuMemAllocAsync` / `cuMemFreeAsync` pair on the call's stream.

use core::cell::RefCell;
use core::marker::PhantomData;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUgraphNodeParams, CUgraphNodeType};

use super::{NodeKind, Reports};
use crate::error::{Call, Error, NodeSite};
use crate::operand::{Accesses, DevRead, DevWrite};
use crate::raw;

/// The bits every placeholder address has (no device address has them: device virtual
/// addresses are below 2^57 on every architecture CUDA supports).
const TAG: u64 = 0xF000_0000_0000_0000;
/// A place index lives in bits 40..60; the low 40 bits are an offset into the buffer.
const SLOT_SHIFT: u32 = 40;
const OFFSET_MASK: u64 = (1 << SLOT_SHIFT) - 1;
/// Graph-owned places per call (the slot field's size).
pub(crate) const MAX_SLOTS: u32 = 1 << 20;
/// The largest graph-owned buffer, in bytes (the offset field's size: 1 TiB).
pub const MAX_ALLOC_BYTES: usize = 1 << SLOT_SHIFT;

/// The placeholder address of graph-owned place `slot`.
pub(crate) fn placeholder(slot: u32) -> CUdeviceptr {
    TAG | (u64::from(slot % MAX_SLOTS) << SLOT_SHIFT)
}

/// `(slot, offset)` of a placeholder address, `None` for any other value.
fn slot_of(p: u64) -> Option<(u32, u64)> {
    (p & TAG == TAG).then_some((((p & !TAG) >> SLOT_SHIFT) as u32, p & OFFSET_MASK))
}

thread_local! {
    /// The addresses of the graph-owned places of the graph being built, the exec being
    /// updated or the eager call running, by slot (0: none bound).
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with `table` (addresses by slot) bound for [`resolve`]; what `f` binds (an alloc
/// node added, an eager allocation) is written back into `table`.
pub(crate) fn with_scratch<R>(table: &mut Vec<u64>, f: impl FnOnce() -> R) -> R {
    /// Puts the thread's table back, also when `f` unwinds (review 33d: hardening; no safe
    /// code unwinds out of `f` today).
    struct Restore<'t> {
        table: &'t mut Vec<u64>,
        old: Vec<u64>,
    }
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let old = core::mem::take(&mut self.old);
            *self.table = SCRATCH.with(|s| core::mem::replace(&mut *s.borrow_mut(), old));
        }
    }
    let old = SCRATCH.with(|s| core::mem::replace(&mut *s.borrow_mut(), core::mem::take(table)));
    let _restore = Restore { table, old };
    f()
}

fn bind(slot: u32, addr: u64) {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() <= slot as usize {
            s.resize(slot as usize + 1, 0);
        }
        s[slot as usize] = addr;
    });
}

fn bound(slot: u32) -> u64 {
    SCRATCH.with(|s| s.borrow().get(slot as usize).copied().unwrap_or(0))
}

/// The real address of `p` when it is a placeholder whose place has an address bound;
/// otherwise `p` itself (a placeholder left unresolved faults on use; it is never another
/// buffer's address).
pub(crate) fn resolve(p: u64) -> u64 {
    match slot_of(p) {
        Some((slot, offset)) => match bound(slot) {
            0 => p,
            base => base + offset,
        },
        None => p,
    }
}

/// Whether `p` is a placeholder address (a graph-owned buffer's handle).
pub(crate) fn is_placeholder(p: u64) -> bool {
    slot_of(p).is_some()
}

/// A graph-owned buffer of `len` elements of `T`, made by `alloc::<T>(len)` in `graph!` or
/// [`GraphBuilder::alloc`](crate::GraphBuilder::alloc): its alloc node's parameters, and the
/// handles statements use it through. It borrows the call (`'a`), and its handles are refused
/// by any other call (they carry the call's tag).
///
/// What the driver documents, and how this crate follows it:
/// - `cuGraphAddMemAllocNode` (here `cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_MEM_ALLOC`)
///   returns the allocation's address when the node is added, "fixed across instantiations and
///   launches" of that graph. Each cached variant is a graph of its own with its own address,
///   so the handles carry a placeholder that the cache replaces with the variant's address when
///   it adds or updates nodes using the buffer.
/// - An allocation freed in its graph (`cuGraphAddMemFreeNode`, here `cuGraphAddNode_v2` with
///   `CU_GRAPH_NODE_TYPE_MEM_FREE`) "can be accessed by nodes ordered after the allocation node
///   but before the free node", "cannot be freed outside the owning graph, and can only be freed
///   once": both nodes write the buffer's place, so the hazard rules put every use between them.
/// - `cuGraphInstantiateWithFlags`: a graph with allocation or free nodes may have "at most one
///   executable graph in existence" at a time: each variant has one exec of its own graph.
/// - `cuGraphExecUpdate` refuses graphs with memory nodes, and these nodes have no per-node
///   set-params: a changed size re-instantiates the variant (`Stats::reinstantiations`).
/// - Memory nodes are not allowed in child graphs or conditional bodies: `alloc` is a top-level
///   statement only.
/// - Graph allocations come from the device's graph memory pool, kept between launches:
///   `cuDeviceGetGraphMemAttribute` ([`graph_mem_usage`](crate::graph_mem_usage)),
///   `cuDeviceGraphMemTrim`.
///
/// Its memory starts with whatever the device's graph memory pool (or, eagerly, its stream-ordered
/// pool) held: the driver does not clear it, so a statement that reads it before one writes it
/// reads stale bytes. The element type is therefore [`ScratchElem`]: valid for any bytes
/// (`bytemuck::AnyBitPattern`), so such a read gives arbitrary values, never an invalid one
/// (`alloc::<bool>` then `copy` to a `CudaSlice<bool>` read back on the host would be undefined
/// behaviour; it does not compile).
pub struct Scratch<'a, T> {
    read: DevRead<'a, T>,
    write: DevWrite<'a, T>,
    device: i32,
}

impl<T> Clone for Scratch<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Scratch<'_, T> {}

/// The element type of a graph-owned buffer (`alloc::<T>(n)`, [`GraphBuilder::alloc`]):
/// a `DeviceRepr` type for which every bit pattern is a valid value (`bytemuck::AnyBitPattern`:
/// integers, floats, arrays of them, `#[derive(AnyBitPattern)]` structs), since the buffer
/// starts with whatever its memory held. Not `bool`, `char` or enums.
///
/// [`GraphBuilder::alloc`]: crate::GraphBuilder::alloc
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the element type of a graph-owned buffer",
    label = "not valid for every bit pattern",
    note = "a graph-owned buffer starts with whatever its memory held (the driver does not clear it): its element type must be valid for any bytes (`DeviceRepr` + `bytemuck::AnyBitPattern`: integers, floats, `#[derive(AnyBitPattern)]` structs), not `bool`, `char` or an enum"
)]
pub trait ScratchElem: cudarc::driver::DeviceRepr + bytemuck::AnyBitPattern {}
impl<T: cudarc::driver::DeviceRepr + bytemuck::AnyBitPattern> ScratchElem for T {}

impl<'a, T: ScratchElem> Scratch<'a, T> {
    /// Graph-owned place `slot` (its place index) of `len` elements on `stream`'s device.
    pub(crate) fn new(stream: &'a CudaStream, slot: u32, len: usize, tag: u64) -> Self {
        let ctx = stream.context();
        let ptr = placeholder(slot);
        let mut read = DevRead::new(ptr, len, ctx.cu_ctx());
        read.tag = tag;
        let mut write = DevWrite::new(ptr, len, ctx.cu_ctx());
        write.tag = tag;
        Scratch { read, write, device: ctx.ordinal() as i32 }
    }
}

impl<'a, T> Scratch<'a, T> {
    /// The buffer, read by a node.
    pub fn read(&self) -> DevRead<'a, T> {
        self.read
    }

    /// The buffer, written by a node.
    pub fn write(&self) -> DevWrite<'a, T> {
        self.write
    }

    /// Length in elements.
    pub fn len(&self) -> usize {
        self.write.len
    }

    /// `true` when the buffer has no elements (refused when the call runs).
    pub fn is_empty(&self) -> bool {
        self.write.len == 0
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.write.len.saturating_mul(core::mem::size_of::<T>())
    }

    /// The alloc node's parameters.
    pub fn alloc_node(&self) -> AllocParams<'a> {
        AllocParams {
            slot: slot_of(self.write.ptr).map_or(0, |s| s.0),
            bytes: self.bytes(),
            tag: self.write.tag,
            ctx: self.write.ctx,
            device: self.device,
            _call: PhantomData,
        }
    }

    /// The free node's parameters.
    pub fn free_node(&self) -> FreeParams<'a> {
        FreeParams {
            slot: slot_of(self.write.ptr).map_or(0, |s| s.0),
            tag: self.write.tag,
            ctx: self.write.ctx,
            _call: PhantomData,
        }
    }
}

/// A memory allocation node's parameters (`alloc::<T>(n)` in `graph!`).
#[derive(Clone, Copy, Debug)]
pub struct AllocParams<'a> {
    slot: u32,
    bytes: usize,
    tag: u64,
    ctx: CUcontext,
    device: i32,
    _call: PhantomData<&'a ()>,
}

impl AllocParams<'static> {
    /// An alloc node of `bytes` bytes for graph-owned place `slot`, for the mock driver's tests.
    #[cfg(test)]
    pub(crate) fn for_test(slot: u32, bytes: usize, ctx: CUcontext) -> Self {
        Self::for_test_tagged(slot, bytes, 0, ctx)
    }

    /// The same with a handle tag.
    #[cfg(test)]
    pub(crate) fn for_test_tagged(slot: u32, bytes: usize, tag: u64, ctx: CUcontext) -> Self {
        AllocParams { slot, bytes, tag, ctx, device: 0, _call: PhantomData }
    }
}

impl FreeParams<'static> {
    /// The free node of graph-owned place `slot`, for the mock driver's tests.
    #[cfg(test)]
    pub(crate) fn for_test(slot: u32, ctx: CUcontext) -> Self {
        Self::for_test_tagged(slot, 0, ctx)
    }

    /// The same with a handle tag.
    #[cfg(test)]
    pub(crate) fn for_test_tagged(slot: u32, tag: u64, ctx: CUcontext) -> Self {
        FreeParams { slot, tag, ctx, _call: PhantomData }
    }
}

impl AllocParams<'_> {
    /// The same parameters without the call's lifetime (a builder's recording: the builder
    /// holds the lifetime).
    pub(crate) fn erased(self) -> AllocParams<'static> {
        AllocParams { _call: PhantomData, ..self }
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// A memory free node's parameters (the free of a graph-owned buffer).
#[derive(Clone, Copy, Debug)]
pub struct FreeParams<'a> {
    slot: u32,
    tag: u64,
    ctx: CUcontext,
    _call: PhantomData<&'a ()>,
}

impl FreeParams<'_> {
    /// See [`AllocParams::erased`].
    pub(crate) fn erased(self) -> FreeParams<'static> {
        FreeParams { _call: PhantomData, ..self }
    }

    /// The buffer's place tag.
    pub(crate) fn tag(&self) -> u64 {
        self.tag
    }
}

/// An alloc node of an exec: its size, and the address the driver gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AllocState {
    slot: u32,
    bytes: usize,
    device: i32,
    /// The allocation's address, fixed for the graph's lifetime (0 until added).
    dptr: CUdeviceptr,
}

impl AllocState {
    /// `(slot, address, bytes)` of the allocation.
    pub(crate) fn scratch(&self) -> (u32, u64, usize) {
        (self.slot, self.dptr, self.bytes)
    }
}

/// The alloc node kind.
pub(crate) struct Alloc;

/// Writes the device ordinal into a `CUmemLocation` (a plain `id` field or, in newer headers,
/// a union whose `id` member is at the same offset).
fn set_location(loc: &mut sys::CUmemLocation, device: i32) {
    const _: () = assert!(core::mem::size_of::<sys::CUmemLocation>() == 8);
    loc.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    // SAFETY: `CUmemLocation` is `#[repr(C)] { type_: c_uint enum, id: c_int }` in every
    // header cudarc binds (in CUDA 13.2+ `id` is the first member of a `#[repr(C)]` union in
    // its place), 8 bytes (asserted above): bytes 4..8 are `id`, an `i32` with any value valid.
    unsafe { core::ptr::from_mut(loc).cast::<i32>().add(1).write(device) };
}

impl NodeKind for Alloc {
    type Params<'a> = &'a AllocParams<'a>;
    type State = AllocState;
    const ADD: &'static str = "cuGraphAddNode_v2 (memory allocation)";
    const SET: &'static str = "cuGraphExecNodeSetParams (memory allocation: not supported)";
    const EAGER: &'static str = "cuMemAllocAsync";

    fn validate(
        p: &&AllocParams<'_>,
        _: Option<&super::Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        if p.bytes == 0 {
            return Err(Error::Empty { site: site(), what: "graph-owned allocation" });
        }
        if p.bytes > MAX_ALLOC_BYTES {
            return Err(Error::InvalidNode {
                site: site(),
                why: format!(
                    "a graph-owned buffer of {} bytes (at most {MAX_ALLOC_BYTES})",
                    p.bytes
                ),
            });
        }
        Ok(())
    }

    fn accesses(p: &&AllocParams<'_>, out: &mut Accesses) -> usize {
        out[0] = (p.tag, true, p.ctx);
        1
    }

    fn state(p: &&AllocParams<'_>) -> AllocState {
        AllocState { slot: p.slot, bytes: p.bytes, device: p.device, dptr: 0 }
    }

    fn record(s: &mut AllocState, p: &&AllocParams<'_>) -> bool {
        let changed = s.bytes != p.bytes || s.slot != p.slot || s.device != p.device;
        if changed {
            *s = Self::state(p);
        }
        changed
    }

    /// Alloc nodes have no per-node update: a changed size rebuilds the graph.
    fn settable(_: &AllocState, _: &&AllocParams<'_>) -> bool {
        false
    }

    /// Adds (or describes) the node; the driver's `dptr` is kept and bound for the nodes
    /// added after it.
    fn with_params<R>(
        s: &mut AllocState,
        _: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC);
        // SAFETY: writing plain-data fields of the union member this node type uses; the
        // zeroed rest (handle types none, no access descriptors, no maximum size) is what the
        // driver documents as the defaults.
        unsafe {
            let a = &mut p.__bindgen_anon_1.alloc;
            a.poolProps.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
            set_location(&mut a.poolProps.location, s.device);
            a.bytesize = s.bytes;
        }
        let r = f(&mut p);
        // SAFETY: the same union member, written by the driver (or left as set).
        let dptr = unsafe { p.__bindgen_anon_1.alloc.dptr };
        if dptr != 0 {
            s.dptr = dptr;
        }
        if s.dptr != 0 {
            bind(s.slot, s.dptr);
        }
        r
    }

    fn scratch(s: &AllocState) -> Option<(u32, u64, usize)> {
        Some(s.scratch())
    }

    /// `cuMemAllocAsync` on the call's stream; the address is bound for the call's later
    /// statements and freed by the free statement (or at the end of the call, see
    /// [`free_unfreed`]).
    unsafe fn eager(
        p: &&AllocParams<'_>,
        stream: &CudaStream,
        _: &std::sync::Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        // SAFETY: the stream is live and its context current (the caller's contract).
        let dptr = unsafe { raw::mem_alloc_async(p.bytes, stream.cu_stream()) }
            .call(Self::EAGER)
            .map_err(|source| Error::Node { site: site(), source })?;
        bind(p.slot, dptr);
        Ok(())
    }
}

/// The free node kind.
pub(crate) struct Free;

impl NodeKind for Free {
    type Params<'a> = &'a FreeParams<'a>;
    type State = u32;
    const ADD: &'static str = "cuGraphAddNode_v2 (memory free)";
    const SET: &'static str = "cuGraphExecNodeSetParams (memory free: not supported)";
    const EAGER: &'static str = "cuMemFreeAsync";

    fn validate(
        _: &&FreeParams<'_>,
        _: Option<&super::Limits>,
        _: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        Ok(())
    }

    fn accesses(p: &&FreeParams<'_>, out: &mut Accesses) -> usize {
        out[0] = (p.tag, true, p.ctx);
        1
    }

    fn state(p: &&FreeParams<'_>) -> u32 {
        p.slot
    }

    fn record(s: &mut u32, p: &&FreeParams<'_>) -> bool {
        super::record_value(s, p.slot)
    }

    fn settable(_: &u32, _: &&FreeParams<'_>) -> bool {
        false
    }

    fn with_params<R>(s: &mut u32, _: CUcontext, f: impl FnOnce(&mut CUgraphNodeParams) -> R) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE);
        p.__bindgen_anon_1.free = sys::CUDA_MEM_FREE_NODE_PARAMS { dptr: resolve(placeholder(*s)) };
        f(&mut p)
    }

    /// `cuMemFreeAsync` on the call's stream, after the statements before it.
    unsafe fn eager(
        p: &&FreeParams<'_>,
        stream: &CudaStream,
        _: &std::sync::Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let dptr = bound(p.slot);
        if dptr == 0 {
            return Ok(());
        }
        bind(p.slot, 0);
        // SAFETY: `dptr` came from `cuMemAllocAsync` of this call and is freed once (unbound
        // above); every earlier use was enqueued on this stream before.
        unsafe { raw::mem_free_async(dptr, stream.cu_stream()) }
            .call(Self::EAGER)
            .map_err(|source| Error::Node { site: site(), source })
    }
}

/// After an eager call that stopped part way: frees (`cuMemFreeAsync`, on `stream`, after what
/// was enqueued) every allocation of `table` that its free statement did not reach.
pub(crate) fn free_unfreed(table: &mut [u64], stream: &CudaStream) {
    for a in table.iter_mut().filter(|a| **a != 0) {
        // SAFETY: allocated by this call's `cuMemAllocAsync` on `stream`, not freed yet.
        let r = unsafe { raw::mem_free_async(*a, stream.cu_stream()) };
        stream.context().record_err(r);
        *a = 0;
    }
}

/// The device's graph memory pool (`cuDeviceGetGraphMemAttribute`), in bytes: what graph
/// allocations (alloc nodes of every graph of the device) use now and at most since the last
/// reset, and what the pool holds reserved from the device now and at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphMemUsage {
    /// `CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT`: physical memory of live graph allocations (during
    /// a launch; 0 between launches when every allocation is freed in its graph).
    pub used_current: u64,
    /// `CU_GRAPH_MEM_ATTR_USED_MEM_HIGH`: the highest `used_current` since the last reset.
    pub used_high: u64,
    /// `CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`: physical memory the pool holds for graphs
    /// (kept between launches, reused by every graph of the device; `cuDeviceGraphMemTrim`
    /// gives the unused part back).
    pub reserved_current: u64,
    /// `CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH`: the highest `reserved_current` since the last
    /// reset.
    pub reserved_high: u64,
}

/// Review 33d (hardening): the thread's tables of graph-owned addresses and conditional handles
/// are put back when the closure inside them unwinds.
#[cfg(test)]
mod restore_tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    #[test]
    fn the_scratch_table_is_put_back_after_a_panic() {
        let mut outer = vec![0x1000, 0x2000];
        let mut inner = vec![0x9000];
        super::with_scratch(&mut outer, || {
            let r = catch_unwind(AssertUnwindSafe(|| {
                super::with_scratch(&mut inner, || panic!("inside"));
            }));
            assert!(r.is_err());
            assert_eq!(super::bound(1), 0x2000, "the outer table is bound again");
        });
        assert_eq!(inner, [0x9000], "the inner table came back to its owner");
        assert_eq!(outer, [0x1000, 0x2000]);
    }

    #[test]
    fn the_conditional_handles_are_put_back_after_a_panic() {
        use crate::kind::conditional::{handle, with_handles};
        with_handles(&[7, 8], || {
            let r = catch_unwind(|| with_handles(&[9], || panic!("inside")));
            assert!(r.is_err());
            assert_eq!(handle(1), 8, "the outer handles are bound again");
        });
        assert_eq!(handle(0), 0);
    }
}
