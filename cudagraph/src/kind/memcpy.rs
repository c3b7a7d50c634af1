//! Memcpy nodes (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_MEMCPY`): 1-D copies between
//! device memory and pinned host memory, made by `copy(&src, &mut dst)`.

use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{
    self, CUDA_MEMCPY3D, CUcontext, CUdeviceptr, CUgraphNodeParams, CUgraphNodeType, CUmemorytype,
};

use super::NodeKind;
use crate::error::{Call, Error, NodeSite};
use crate::operand::{Accesses, DevRead, DevWrite, Handle, HostRead, HostWrite};
use crate::raw;

/// One side of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Device memory at this address.
    Device(CUdeviceptr),
    /// Pinned host memory at this address.
    Host(*const c_void),
}

/// A 1-D copy of `len` elements of `elem_size` bytes: what the cache stores and compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copy1d {
    pub(crate) src: Memory,
    pub(crate) dst: Memory,
    pub(crate) src_len: usize,
    pub(crate) dst_len: usize,
    pub(crate) elem_size: usize,
    pub(crate) src_ctx: CUcontext,
    pub(crate) dst_ctx: CUcontext,
    /// The id of the pinned host side's allocation, 0 for none or unknown: a
    /// [`PinnedBuffer`](crate::PinnedBuffer)'s own (`operand::pinned_id`), else the driver's
    /// ([`raw::buffer_id`], one query per call); see [`host_unresolved`].
    pub(crate) host_buffer: u64,
}

/// A memcpy node's parameters, made by `copy(&src, &mut dst)` in `graph!` ([`CopyTo::memcpy`]
/// of two handles).
///
/// Built only from handles, with private fields, and it borrows them (`'a`): it cannot outlive
/// the buffers it points into, and safe code cannot aim it at an address no handle vouches for.
#[derive(Clone, Copy, Debug)]
pub struct MemcpyParams<'a> {
    pub(crate) raw: Copy1d,
    /// The handles' tags ([`Handle`]): which place of which call each side is.
    pub(crate) src_tag: u64,
    pub(crate) dst_tag: u64,
    _borrow: PhantomData<&'a ()>,
}

impl MemcpyParams<'_> {
    /// Parameters recorded earlier (by a [`GraphBuilder`](crate::GraphBuilder)), whose
    /// accesses the recording already holds.
    pub(crate) fn recorded(raw: Copy1d) -> Self {
        MemcpyParams { raw, src_tag: 0, dst_tag: 0, _borrow: PhantomData }
    }
}

/// A copy direction the DSL allows: device→device, pinned host→device, device→pinned host,
/// with the same element type on both sides.
#[diagnostic::on_unimplemented(
    message = "cannot copy from `{Self}` to `{D}`",
    label = "not a valid copy",
    note = "`copy(&src, &mut dst)` needs the same element type on both sides and one of: device to device, pinned host to device, device to pinned host"
)]
pub trait CopyTo<D> {
    /// The memcpy parameters, borrowing both sides.
    fn memcpy<'x>(self, dst: D) -> MemcpyParams<'x>
    where
        Self: 'x,
        D: 'x;
}

macro_rules! copy_to {
    ($src:ident => $dst:ident, $s:ident, $d:ident) => {
        impl<'a, 'b, T> CopyTo<$dst<'b, T>> for $src<'a, T> {
            fn memcpy<'x>(self, dst: $dst<'b, T>) -> MemcpyParams<'x>
            where
                Self: 'x,
                $dst<'b, T>: 'x,
            {
                let mut raw = Copy1d {
                    src: Memory::$s(self.ptr as _),
                    dst: Memory::$d(dst.ptr as _),
                    src_len: self.len,
                    dst_len: dst.len,
                    elem_size: size_of::<T>(),
                    src_ctx: self.ctx,
                    dst_ctx: dst.ctx,
                    host_buffer: 0,
                };
                // The pinned side's allocation id where the buffer knows it (`PinnedBuffer`),
                // else 0 until `Copy1d::resolve_host_buffer` asks the driver (not needed when
                // the copy becomes a readback node); 0 for device to device.
                raw.host_buffer = if <$src<'a, T> as Handle>::HOST {
                    self.host_buffer_known()
                } else {
                    dst.host_buffer_known()
                };
                MemcpyParams { raw, src_tag: self.tag, dst_tag: dst.tag, _borrow: PhantomData }
            }
        }
    };
}
/// Never constructed: a second `CopyTo` impl for each source type, so rustc reports an invalid
/// copy as "cannot copy from … to …" instead of guessing the one valid destination type.
#[doc(hidden)]
pub enum NoCopy<T> {
    #[doc(hidden)]
    _Never(core::convert::Infallible, PhantomData<T>),
}
macro_rules! no_copy {
    ($($src:ident),*) => {$(
        #[diagnostic::do_not_recommend]
        impl<T> CopyTo<NoCopy<T>> for $src<'_, T> {
            fn memcpy<'x>(self, dst: NoCopy<T>) -> MemcpyParams<'x>
            where
                Self: 'x,
                NoCopy<T>: 'x,
            {
                match dst {
                    NoCopy::_Never(never, _) => match never {},
                }
            }
        }
    )*};
}
no_copy!(DevRead, HostRead);

copy_to!(DevRead => DevWrite, Device, Device);
copy_to!(HostRead => DevWrite, Host, Device);
copy_to!(DevRead => HostWrite, Device, Host);

/// `copy(&src, &mut dst)`.
pub fn copy<'x, S: CopyTo<D> + 'x, D: 'x>(src: S, dst: D) -> MemcpyParams<'x> {
    let mut c = src.memcpy(dst);
    c.raw.resolve_host_buffer();
    c
}

/// Where a copy runs (the memcpy node's `copyCtx`) in a graph of context `exec`: `exec` when a
/// side is of it (every copy of a single-device graph; a peer copy to or from the launch
/// stream's device, as measured on the 2-GPU H200 machine), else the source's context (a copy
/// between two other devices).
pub(crate) fn copy_ctx(c: &Copy1d, exec: CUcontext) -> CUcontext {
    if exec.is_null() || c.src_ctx == exec || c.dst_ctx == exec { exec } else { c.src_ctx }
}

/// The contexts a copy's sides may be of, in a call on context `call`: a copy between device
/// buffers may cross contexts (a peer copy, on any devices); a copy with a pinned host side
/// is of the call's context on both sides.
pub(crate) fn contexts_ok(c: &Copy1d, call: CUcontext) -> bool {
    let device = matches!(c.src, Memory::Device(_)) && matches!(c.dst, Memory::Device(_));
    device || (c.src_ctx == call && c.dst_ctx == call)
}

/// A peer copy's `(source, destination)` contexts: device memory on both sides, of two
/// contexts.
pub(crate) fn peer(c: &Copy1d) -> Option<(CUcontext, CUcontext)> {
    let device = matches!(c.src, Memory::Device(_)) && matches!(c.dst, Memory::Device(_));
    (device && c.src_ctx != c.dst_ctx).then_some((c.src_ctx, c.dst_ctx))
}

/// Whether a copy has a pinned host side. The driver resolves a host address when a memcpy
/// node's parameters are set, and keeps what it resolved: if that pinned buffer is freed and a
/// new one is allocated at the same address (the allocator often hands the address back), a
/// launch with unchanged parameters crashes inside `cuGraphLaunch` (measured on the H200,
/// driver 580). So such a node's parameters are set again on every call, which costs one
/// `cuGraphExecNodeSetParams` per host copy per call.
pub(crate) fn host_side(c: &Copy1d) -> bool {
    matches!(c.src, Memory::Host(_)) || matches!(c.dst, Memory::Host(_))
}

/// Whether a copy's node must be set again on every call ([`host_side`]): a pinned host side
/// whose allocation's id is unknown. With the id known, it is part of the copy's parameters:
/// a pinned buffer freed and another allocated at the same address has another id, so the copy
/// counts as changed exactly then, and an unchanged copy sends nothing (and packs: see
/// `NodeParams::pack`).
pub(crate) fn host_unresolved(c: &Copy1d) -> bool {
    host_side(c) && c.host_buffer == 0
}

impl Copy1d {
    /// The pinned side's allocation id, asked of the driver (`raw::buffer_id`, one
    /// `cuPointerGetAttribute`) where the handle did not know it: a copy left unresolved is
    /// only set again on every call ([`host_unresolved`]), never taken as unchanged.
    pub(crate) fn resolve_host_buffer(&mut self) {
        if host_unresolved(self) {
            let host = match (self.src, self.dst) {
                (Memory::Host(p), _) | (_, Memory::Host(p)) => p,
                _ => return,
            };
            if !host.is_null() {
                self.host_buffer = crate::raw::buffer_id(host as CUdeviceptr);
            }
        }
    }
}

fn memory_fields(m: Memory) -> (CUmemorytype, *const c_void, CUdeviceptr) {
    match m {
        Memory::Device(p) => {
            (CUmemorytype::CU_MEMORYTYPE_DEVICE, ptr::null(), super::alloc::resolve(p))
        }
        Memory::Host(p) => (CUmemorytype::CU_MEMORYTYPE_HOST, p, 0),
    }
}

/// A 1-D `CUDA_MEMCPY3D`, built field by field (`mem::zeroed` is invalid for it: its memory
/// type enum has no zero value).
pub(crate) fn memcpy3d(p: &Copy1d) -> CUDA_MEMCPY3D {
    let bytes = p.src_len * p.elem_size;
    let (src_type, src_host, src_dev) = memory_fields(p.src);
    let (dst_type, dst_host, dst_dev) = memory_fields(p.dst);
    CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: src_host,
        srcDevice: src_dev,
        srcArray: ptr::null_mut(),
        reserved0: ptr::null_mut(),
        srcPitch: bytes,
        srcHeight: 1,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: dst_host.cast_mut(),
        dstDevice: dst_dev,
        dstArray: ptr::null_mut(),
        reserved1: ptr::null_mut(),
        dstPitch: bytes,
        dstHeight: 1,
        WidthInBytes: bytes,
        Height: 1,
        Depth: 1,
    }
}

/// The memcpy node kind.
pub(crate) struct Memcpy;

impl NodeKind for Memcpy {
    type Params<'a> = &'a MemcpyParams<'a>;
    type State = Copy1d;
    const ADD: &'static str = "cuGraphAddNode_v2 (memcpy)";
    const SET: &'static str = "cuGraphExecNodeSetParams (memcpy)";
    const EAGER: &'static str = "cuMemcpyAsync";

    fn validate(
        c: &&MemcpyParams<'_>,
        _: Option<&super::Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let c = &c.raw;
        if c.src_len != c.dst_len {
            return Err(Error::CopyLength { site: site(), src: c.src_len, dst: c.dst_len });
        }
        if c.src_len == 0 || c.elem_size == 0 {
            return Err(Error::Empty { site: site(), what: "memcpy" });
        }
        Ok(())
    }

    fn accesses(c: &&MemcpyParams<'_>, out: &mut Accesses) -> usize {
        out[0] = (c.src_tag, false, c.raw.src_ctx);
        out[1] = (c.dst_tag, true, c.raw.dst_ctx);
        2
    }

    fn contexts_ok(c: &&MemcpyParams<'_>, call: CUcontext, _: &[(u64, bool, CUcontext)]) -> bool {
        contexts_ok(&c.raw, call)
    }

    fn peer(c: &&MemcpyParams<'_>) -> Option<(CUcontext, CUcontext)> {
        peer(&c.raw)
    }

    fn state(c: &&MemcpyParams<'_>) -> Copy1d {
        c.raw
    }

    /// A copy whose pinned host allocation is not known by its id counts as changed on every
    /// call: see [`host_unresolved`].
    fn record(s: &mut Copy1d, c: &&MemcpyParams<'_>) -> bool {
        super::record_value(s, c.raw) | host_unresolved(&c.raw)
    }

    /// The driver refuses to turn a copy's memory types (device↔host) by set-params.
    fn settable(old: &Copy1d, new: &&MemcpyParams<'_>) -> bool {
        let kind = |m: Memory| matches!(m, Memory::Device(_));
        kind(old.src) == kind(new.raw.src) && kind(old.dst) == kind(new.raw.dst)
    }

    fn with_params<R>(
        s: &mut Copy1d,
        ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY);
        p.__bindgen_anon_1.memcpy = sys::CUDA_MEMCPY_NODE_PARAMS {
            flags: 0,
            reserved: 0,
            copyCtx: copy_ctx(s, ctx),
            copyParams: memcpy3d(s),
        };
        f(&mut p)
    }

    unsafe fn eager(
        c: &&MemcpyParams<'_>,
        stream: &CudaStream,
        _: &std::sync::Arc<super::Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let c = &c.raw;
        let addr = |m: Memory| match m {
            Memory::Device(p) => super::alloc::resolve(p),
            Memory::Host(p) => p as CUdeviceptr,
        };
        let bytes = c.src_len * c.elem_size;
        // SAFETY: the caller's contract: both sides valid for `bytes` until the copy ran. With
        // unified addressing `cuMemcpyAsync` copies between any devices' memory (a peer copy),
        // on the call's stream.
        unsafe { raw::memcpy_async(addr(c.dst), addr(c.src), bytes, stream.cu_stream()) }
            .call(Self::EAGER)
            .map_err(|source| Error::Node { site: site(), source })
    }
}
