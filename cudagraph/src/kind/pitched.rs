//! 2-D (pitched) copies and memsets: `copy_2d(&src, src_rows, &mut dst, dst_rows)` and
//! `memset_2d(&mut dst, rows, value)` in `graph!` (and [`GraphBuilder::copy_2d`] /
//! [`GraphBuilder::memset_2d`](crate::GraphBuilder::memset_2d)), on buffers seen as rows with a
//! row pitch ([`Rows`]). Memcpy nodes (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_MEMCPY`, a
//! `CUDA_MEMCPY3D` of depth 1) and memset nodes (`CU_GRAPH_NODE_TYPE_MEMSET` with `height` and
//! `pitch`); eagerly `cuMemcpy3DAsync_v2` and `cuMemsetD2D{8,16,32}Async`.
//!
//! [`GraphBuilder::copy_2d`]: crate::GraphBuilder::copy_2d

use core::marker::PhantomData;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUgraphNodeParams, CUgraphNodeType};

use super::memcpy::{Copy1d, CopyTo, Memory, memcpy3d};
use super::memset::MemsetValueOf;
use super::{NodeKind, Reports};
use crate::error::{Call, Error, NodeSite};
use crate::operand::{Accesses, WriteArg};

/// A buffer seen as `height` rows of `width` elements, row `r` starting at element
/// `(first + r) * pitch` (all in elements of the buffer's type): a view with a row pitch,
/// starting at row `first` of the buffer. The rows must lie within the buffer
/// (`(first + height - 1) * pitch + width <= len`) and `width <= pitch`; checked when the call
/// runs ([`Error::InvalidNode`], nothing enqueued).
///
/// `first` lets one statement address rows inside a buffer the other statements use whole,
/// such as the halo rows of a field that a stencil kernel reads whole (`Rows::dense(nx,
/// 1).from_row(ny - 1)`: the last row), without a view of the buffer (which would be another
/// place, borrowed apart from the whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Rows {
    /// Elements per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Elements from the start of one row to the start of the next.
    pub pitch: usize,
    /// The buffer's row where the first row starts (its element `first * pitch`); 0 by
    /// default.
    pub first: usize,
}

impl Rows {
    /// `height` rows of `width` elements, `pitch` elements apart, from the buffer's start.
    pub const fn new(width: usize, height: usize, pitch: usize) -> Self {
        Rows { width, height, pitch, first: 0 }
    }

    /// The rows of a dense `width × height` array (`pitch == width`), from the buffer's start.
    pub const fn dense(width: usize, height: usize) -> Self {
        Rows { width, height, pitch: width, first: 0 }
    }

    /// The same rows starting at the buffer's row `first` (element `first * pitch`).
    pub const fn from_row(self, first: usize) -> Self {
        Rows { first, ..self }
    }

    /// Elements before the first row.
    pub(crate) fn offset(&self) -> usize {
        self.first * self.pitch
    }

    /// Why these rows do not fit a buffer of `len` elements of `elem_size` bytes, if they do
    /// not.
    pub(crate) fn misfit(&self, len: usize, elem_size: usize, side: &str) -> Option<String> {
        let Rows { width, height, pitch, first } = *self;
        if width > pitch {
            return Some(format!(
                "{side}: a row of {width} elements is wider than its pitch {pitch}"
            ));
        }
        // The driver gets the pitch in bytes. One row from the buffer's start fits whatever
        // the pitch, so the checks below do not bound it: an overflowing byte pitch would
        // panic (debug) or wrap (release) when the node's parameters are made.
        if pitch.checked_mul(elem_size).is_none() {
            return Some(format!(
                "{side}: a pitch of {pitch} elements of {elem_size} bytes overflows a byte count"
            ));
        }
        let end = (height - 1)
            .checked_add(first)
            .and_then(|r| r.checked_mul(pitch))
            .and_then(|x| x.checked_add(width));
        match end {
            Some(end) if end <= len => None,
            _ if first > 0 => Some(format!(
                "{side}: {height} rows of {width} elements, {pitch} apart, from row {first}, do not fit in its {len} elements"
            )),
            _ => Some(format!(
                "{side}: {height} rows of {width} elements, {pitch} apart, do not fit in its {len} elements"
            )),
        }
    }
}

/// A 2-D copy: the 1-D copy of the two handles (pointers, lengths, types) and the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copy2d {
    pub(crate) base: Copy1d,
    pub(crate) src_rows: Rows,
    pub(crate) dst_rows: Rows,
}

/// A 2-D copy node's parameters, made by `copy_2d(&src, src_rows, &mut dst, dst_rows)`;
/// borrows both sides like [`MemcpyParams`](crate::MemcpyParams).
#[derive(Clone, Copy, Debug)]
pub struct Copy2dParams<'a> {
    pub(crate) raw: Copy2d,
    pub(crate) src_tag: u64,
    pub(crate) dst_tag: u64,
    _borrow: PhantomData<&'a ()>,
}

impl Copy2dParams<'_> {
    /// See [`MemcpyParams::recorded`](crate::MemcpyParams).
    pub(crate) fn recorded(raw: Copy2d) -> Self {
        Copy2dParams { raw, src_tag: 0, dst_tag: 0, _borrow: PhantomData }
    }
}

/// `copy_2d(&src, src_rows, &mut dst, dst_rows)`: row `r` of `src` (its first `width`
/// elements) to row `r` of `dst`, for every row; the same directions and element types as
/// `copy`, the same `width` and `height` on both sides.
pub fn copy_2d<'x, S: CopyTo<D> + 'x, D: 'x>(
    src: S,
    src_rows: Rows,
    dst: D,
    dst_rows: Rows,
) -> Copy2dParams<'x> {
    let mut c = copy_2d_unresolved(src, src_rows, dst, dst_rows);
    c.raw.base.resolve_host_buffer();
    c
}

/// [`copy_2d`] with the pinned side's allocation id only where its handle knows it
/// (`Copy1d::resolve_host_buffer` asks the driver for the rest).
pub(crate) fn copy_2d_unresolved<'x, S: CopyTo<D> + 'x, D: 'x>(
    src: S,
    src_rows: Rows,
    dst: D,
    dst_rows: Rows,
) -> Copy2dParams<'x> {
    let m = src.memcpy(dst);
    let raw = Copy2d { base: m.raw, src_rows, dst_rows };
    Copy2dParams { raw, src_tag: m.src_tag, dst_tag: m.dst_tag, _borrow: PhantomData }
}

/// A 2-D memset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Set2d {
    pub(crate) dst: CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) rows: Rows,
    pub(crate) elem_size: u32,
    pub(crate) value: u32,
    pub(crate) ctx: CUcontext,
}

/// A 2-D memset node's parameters, made by `memset_2d(&mut dst, rows, value)`.
#[derive(Clone, Copy, Debug)]
pub struct Memset2dParams<'a> {
    pub(crate) raw: Set2d,
    pub(crate) dst_tag: u64,
    _borrow: PhantomData<&'a ()>,
}

impl Memset2dParams<'_> {
    /// See [`MemcpyParams::recorded`](crate::MemcpyParams).
    pub(crate) fn recorded(raw: Set2d) -> Self {
        Memset2dParams { raw, dst_tag: 0, _borrow: PhantomData }
    }
}

/// `memset_2d(&mut dst, rows, value)`: the first `width` elements of each of the `height`
/// rows set to `value` (of the buffer's element type, 1, 2 or 4 bytes); the gaps between rows
/// are left as they are.
pub fn memset_2d<'a, T, V: MemsetValueOf<T>>(
    dst: impl WriteArg<'a, T>,
    rows: Rows,
    value: V,
) -> Memset2dParams<'a> {
    let dst = dst.into_write();
    let raw = Set2d {
        dst: dst.ptr,
        len: dst.len,
        rows,
        elem_size: size_of::<T>() as u32,
        value: value.bits_of(),
        ctx: dst.ctx,
    };
    Memset2dParams { raw, dst_tag: dst.tag, _borrow: PhantomData }
}

/// The driver's view of a 2-D copy: `CUDA_MEMCPY3D` of depth 1, pitches and sizes in bytes.
fn memcpy2d(c: &Copy2d) -> sys::CUDA_MEMCPY3D {
    let es = c.base.elem_size;
    let mut p = memcpy3d(&c.base);
    p.WidthInBytes = c.src_rows.width * es;
    p.Height = c.src_rows.height;
    p.srcPitch = c.src_rows.pitch * es;
    p.dstPitch = c.dst_rows.pitch * es;
    p.srcHeight = c.src_rows.height;
    p.dstHeight = c.dst_rows.height;
    // The first rows are folded into each side's address, not given as `srcY`/`dstY`: the
    // driver refuses (`CUDA_ERROR_INVALID_VALUE`, from `cuGraphAddNode_v2` and from
    // `cuMemcpy3DAsync` alike) a side whose `Y + Height` exceeds its `srcHeight`/`dstHeight`
    // when that is not 0, one row or several, host or device memory (H200, driver 580,
    // `examples/probes/memcpy2d_rows.cu`, 2026-12-05). `Y = 0` with the address moved by
    // `first * pitch` copies the same bytes, and was accepted in every case there.
    let (src_at, dst_at) = (c.src_rows.offset() * es, c.dst_rows.offset() * es);
    advance(&mut p.srcHost, &mut p.srcDevice, p.srcMemoryType, src_at);
    let mut dst_host = p.dstHost.cast_const();
    advance(&mut dst_host, &mut p.dstDevice, p.dstMemoryType, dst_at);
    p.dstHost = dst_host.cast_mut();
    p
}

/// Moves one side of a `CUDA_MEMCPY3D` `bytes` into its memory (host or device address).
fn advance(
    host: &mut *const core::ffi::c_void,
    device: &mut CUdeviceptr,
    kind: sys::CUmemorytype,
    bytes: usize,
) {
    if kind == sys::CUmemorytype::CU_MEMORYTYPE_HOST {
        *host = host.cast::<u8>().wrapping_add(bytes).cast();
    } else {
        *device += bytes as CUdeviceptr;
    }
}

/// Whether a 2-D copy has a pinned host side and more than one row (see `Memcpy2d::settable`).
fn host_rows(c: &Copy2d) -> bool {
    super::memcpy::host_side(&c.base) && c.src_rows.height > 1
}

fn invalid(site: NodeSite, why: String) -> Error {
    Error::InvalidNode { site, why }
}

/// The 2-D copy node kind.
pub(crate) struct Memcpy2d;

impl NodeKind for Memcpy2d {
    type Params<'a> = &'a Copy2dParams<'a>;
    type State = Copy2d;
    const ADD: &'static str = "cuGraphAddNode_v2 (memcpy, 2-D)";
    const SET: &'static str = "cuGraphExecNodeSetParams (memcpy, 2-D)";
    const EAGER: &'static str = "cuMemcpy3DAsync_v2";

    fn validate(
        c: &&Copy2dParams<'_>,
        _: Option<&super::Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let c = &c.raw;
        let (s, d) = (c.src_rows, c.dst_rows);
        if s.width == 0 || s.height == 0 {
            return Err(Error::Empty { site: site(), what: "2-D memcpy" });
        }
        if (s.width, s.height) != (d.width, d.height) {
            let why = format!(
                "copy_2d of {}×{} source rows into {}×{} destination rows: width and height must match",
                s.width, s.height, d.width, d.height
            );
            return Err(invalid(site(), why));
        }
        if let Some(why) = s
            .misfit(c.base.src_len, c.base.elem_size, "source")
            .or_else(|| d.misfit(c.base.dst_len, c.base.elem_size, "destination"))
        {
            return Err(invalid(site(), why));
        }
        Ok(())
    }

    fn accesses(c: &&Copy2dParams<'_>, out: &mut Accesses) -> usize {
        out[0] = (c.src_tag, false, c.raw.base.src_ctx);
        out[1] = (c.dst_tag, true, c.raw.base.dst_ctx);
        2
    }

    /// As for 1-D copies: device to device may cross contexts (a peer copy).
    fn contexts_ok(c: &&Copy2dParams<'_>, call: CUcontext, _: &[(u64, bool, CUcontext)]) -> bool {
        super::memcpy::contexts_ok(&c.raw.base, call)
    }

    fn peer(c: &&Copy2dParams<'_>) -> Option<(CUcontext, CUcontext)> {
        super::memcpy::peer(&c.raw.base)
    }

    fn state(c: &&Copy2dParams<'_>) -> Copy2d {
        c.raw
    }

    /// As for 1-D copies ([`host_unresolved`](super::memcpy::host_unresolved)): a pinned host
    /// side whose allocation is not known by its id is set again on every call.
    fn record(s: &mut Copy2d, c: &&Copy2dParams<'_>) -> bool {
        super::record_value(s, c.raw) | super::memcpy::host_unresolved(&c.raw.base)
    }

    /// As for 1-D copies: the driver refuses to turn a copy's memory types by set-params. It
    /// also refused (`CUDA_ERROR_INVALID_VALUE`) the update of a device→pinned-host copy of 256
    /// rows into a new `PinnedBuffer` (H200, driver 580, review 23 under memcheck; the
    /// whole-exec update that followed was accepted and correct), while it accepted a one-row
    /// copy into a new pinned buffer (`bench` row `re`) and device→device copies changing their
    /// rows (`pitched.rs`). So a copy with a pinned host side and more than one row, before or
    /// after, is never updated node by node: it goes straight to the whole-exec update.
    fn settable(old: &Copy2d, new: &&Copy2dParams<'_>) -> bool {
        let kind = |m: Memory| matches!(m, Memory::Device(_));
        let same_kinds = kind(old.base.src) == kind(new.raw.base.src)
            && kind(old.base.dst) == kind(new.raw.base.dst);
        same_kinds && !(host_rows(old) || host_rows(&new.raw))
    }

    fn with_params<R>(
        s: &mut Copy2d,
        ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY);
        p.__bindgen_anon_1.memcpy = sys::CUDA_MEMCPY_NODE_PARAMS {
            flags: 0,
            reserved: 0,
            copyCtx: super::memcpy::copy_ctx(&s.base, ctx),
            copyParams: memcpy2d(s),
        };
        f(&mut p)
    }

    unsafe fn eager(
        c: &&Copy2dParams<'_>,
        stream: &CudaStream,
        _: &std::sync::Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        if super::memcpy::peer(&c.raw.base).is_some() {
            // Between devices: one `cuMemcpyAsync` per row (a peer copy with unified
            // addressing, as for 1-D copies), rather than relying on `cuMemcpy3DAsync` across
            // devices.
            let (b, es) = (&c.raw.base, c.raw.base.elem_size);
            let addr = |m: Memory| match m {
                Memory::Device(p) => super::alloc::resolve(p),
                Memory::Host(p) => p as CUdeviceptr,
            };
            let (s, d) = (c.raw.src_rows, c.raw.dst_rows);
            for r in 0..s.height {
                let from = addr(b.src) + ((s.first + r) * s.pitch * es) as CUdeviceptr;
                let to = addr(b.dst) + ((d.first + r) * d.pitch * es) as CUdeviceptr;
                // SAFETY: validated: every row lies within both sides' buffers, which stay
                // borrowed until the copy ran (the caller's contract).
                unsafe { crate::raw::memcpy_async(to, from, s.width * es, stream.cu_stream()) }
                    .call("cuMemcpyAsync (a row of a 2-D copy between devices)")
                    .map_err(|source| Error::Node { site: site(), source })?;
            }
            return Ok(());
        }
        let p = memcpy2d(&c.raw);
        // SAFETY: validated: every row lies within both sides' buffers, which stay borrowed
        // until the copy ran (the caller's contract).
        unsafe { sys::cuMemcpy3DAsync_v2(&p, stream.cu_stream()) }
            .result()
            .call(Self::EAGER)
            .map_err(|source| Error::Node { site: site(), source })
    }
}

/// The 2-D memset node kind.
pub(crate) struct Memset2d;

impl NodeKind for Memset2d {
    type Params<'a> = &'a Memset2dParams<'a>;
    type State = Set2d;
    const ADD: &'static str = "cuGraphAddNode_v2 (memset, 2-D)";
    const SET: &'static str = "cuGraphExecNodeSetParams (memset, 2-D)";
    const EAGER: &'static str = "cuMemsetD2D32Async";

    fn validate(
        m: &&Memset2dParams<'_>,
        _: Option<&super::Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let m = &m.raw;
        if m.rows.width == 0 || m.rows.height == 0 {
            return Err(Error::Empty { site: site(), what: "2-D memset" });
        }
        if let Some(why) = m.rows.misfit(m.len, m.elem_size as usize, "destination") {
            return Err(invalid(site(), why));
        }
        Ok(())
    }

    fn accesses(m: &&Memset2dParams<'_>, out: &mut Accesses) -> usize {
        out[0] = (m.dst_tag, true, m.raw.ctx);
        1
    }

    fn state(m: &&Memset2dParams<'_>) -> Set2d {
        m.raw
    }

    fn record(s: &mut Set2d, m: &&Memset2dParams<'_>) -> bool {
        super::record_value(s, m.raw)
    }

    fn with_params<R>(
        s: &mut Set2d,
        ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        let r = s.rows;
        let mut p = super::memset::memset_node(
            s.dst,
            s.value,
            s.elem_size,
            (r.width, r.height, r.pitch),
            ctx,
        );
        // SAFETY: `memset_node` filled the `memset` member; the first row's offset is added to
        // the resolved address (a graph-owned buffer's placeholder resolves first).
        unsafe { p.__bindgen_anon_1.memset.dst += (r.offset() * s.elem_size as usize) as u64 };
        f(&mut p)
    }

    unsafe fn eager(
        m: &&Memset2dParams<'_>,
        stream: &CudaStream,
        _: &std::sync::Arc<Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let m = &m.raw;
        let (d, pitch) = (super::alloc::resolve(m.dst), m.rows.pitch * m.elem_size as usize);
        let d = d + (m.rows.offset() * m.elem_size as usize) as CUdeviceptr;
        let (w, h, s) = (m.rows.width, m.rows.height, stream.cu_stream());
        // SAFETY: validated: every row lies within the buffer, borrowed until the set ran.
        let r = unsafe {
            match m.elem_size {
                1 => sys::cuMemsetD2D8Async(d, pitch, m.value as u8, w, h, s),
                2 => sys::cuMemsetD2D16Async(d, pitch, m.value as u16, w, h, s),
                _ => sys::cuMemsetD2D32Async(d, pitch, m.value, w, h, s),
            }
        };
        r.result().call(Self::EAGER).map_err(|source| Error::Node { site: site(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_fit_or_say_why_not() {
        assert_eq!(Rows::new(3, 4, 5).misfit(18, 4, "x"), None);
        assert!(Rows::new(3, 4, 5).misfit(17, 4, "x").unwrap().contains("do not fit in its 17"));
        assert!(Rows::new(6, 1, 5).misfit(100, 4, "x").unwrap().contains("wider than its pitch 5"));
        assert!(Rows::new(1, usize::MAX, usize::MAX).misfit(usize::MAX, 1, "x").is_some());
        // One row fits whatever its pitch; a byte pitch that overflows is refused all the same
        // (it would panic, or wrap, when the driver's parameters are made).
        assert_eq!(Rows::new(1, 1, usize::MAX).misfit(1, 1, "x"), None);
        let huge = Rows::new(1, 1, usize::MAX / 2);
        assert!(huge.misfit(1, 4, "x").unwrap().contains("overflows"));
        assert!(huge.from_row(0).misfit(8, 8, "x").unwrap().contains("overflows"));
        assert_eq!(Rows::dense(4, 2), Rows::new(4, 2, 4));
    }

    /// A copy with a pinned host side and more than one row is never updated node by node
    /// (the driver refused it); one row, or device memory on both sides, is.
    #[test]
    fn multi_row_copies_with_a_host_side_are_not_settable() {
        let copy = |dst: Memory, dst_len: usize, height: usize| Copy2d {
            base: Copy1d {
                src: Memory::Device(0x1000),
                dst,
                src_len: 1024,
                dst_len,
                elem_size: 4,
                src_ctx: core::ptr::null_mut(),
                dst_ctx: core::ptr::null_mut(),
                host_buffer: 0,
            },
            src_rows: Rows::dense(8, height),
            dst_rows: Rows::dense(8, height),
        };
        let host = |a: usize| Memory::Host(a as *const core::ffi::c_void);
        let settable = |old: Copy2d, new: Copy2d| {
            <Memcpy2d as NodeKind>::settable(&old, &&Copy2dParams::recorded(new))
        };
        // Device to device: any rows.
        assert!(settable(
            copy(Memory::Device(0x9000), 1024, 4),
            copy(Memory::Device(0xa000), 1024, 8)
        ));
        // To pinned memory, one row: settable.
        assert!(settable(copy(host(0x5000), 8, 1), copy(host(0x6000), 8, 1)));
        // To pinned memory, more rows before or after: not.
        assert!(!settable(copy(host(0x5000), 1024, 4), copy(host(0x6000), 1024, 4)));
        assert!(!settable(copy(host(0x5000), 8, 1), copy(host(0x6000), 1024, 4)));
        assert!(!settable(copy(host(0x5000), 1024, 4), copy(host(0x6000), 8, 1)));
        // Device to device turned device to host: never (the memory type changed).
        assert!(!settable(copy(Memory::Device(0x9000), 8, 1), copy(host(0x6000), 8, 1)));
    }

    #[test]
    fn the_drivers_view_has_byte_pitches_and_rows() {
        let base = Copy1d {
            src: Memory::Device(0x1000),
            dst: Memory::Device(0x9000),
            src_len: 100,
            dst_len: 100,
            elem_size: 4,
            src_ctx: core::ptr::null_mut(),
            dst_ctx: core::ptr::null_mut(),
            host_buffer: 0,
        };
        let c = Copy2d { base, src_rows: Rows::new(3, 5, 7), dst_rows: Rows::new(3, 5, 11) };
        let p = memcpy2d(&c);
        assert_eq!((p.WidthInBytes, p.Height, p.Depth), (12, 5, 1));
        assert_eq!((p.srcPitch, p.dstPitch, p.srcDevice, p.dstDevice), (28, 44, 0x1000, 0x9000));
        assert_eq!((p.srcY, p.dstY, p.srcHeight, p.dstHeight), (0, 0, 5, 5));
        // First rows move each side's address by `first * pitch` elements; `Y` stays 0.
        let c = Copy2d {
            src_rows: Rows::new(3, 5, 7).from_row(2),
            dst_rows: Rows::new(3, 5, 11).from_row(3),
            ..c
        };
        let p = memcpy2d(&c);
        assert_eq!((p.srcY, p.dstY), (0, 0));
        assert_eq!((p.srcDevice, p.dstDevice), (0x1000 + 2 * 28, 0x9000 + 3 * 44));
        // A pinned host side moves its host pointer, and its device field stays 0.
        let host = 0x5000usize as *const core::ffi::c_void;
        let c = Copy2d { base: Copy1d { dst: Memory::Host(host), ..base }, ..c };
        let p = memcpy2d(&c);
        assert_eq!((p.dstHost as usize, p.dstDevice, p.dstY), (0x5000 + 3 * 44, 0, 0));
        assert_eq!((p.srcDevice, p.srcHost as usize), (0x1000 + 2 * 28, 0));
    }

    /// Review 32: any rows that validate stay inside both buffers, byte for byte, as the
    /// driver reads the node's parameters (`first` folded into the address, `Y` 0), and the
    /// eager copy between devices (one `cuMemcpyAsync` per row) copies the same rows. Lengths,
    /// pitches and first rows up to near `usize::MAX` (a buffer's bytes fit in an `isize`):
    /// nothing that validates overflows (debug builds would panic) or reaches outside.
    fn any_size() -> impl proptest::strategy::Strategy<Value = usize> {
        use proptest::prelude::*;
        prop_oneof![
            4 => 0..9usize,
            1 => prop::sample::select(vec![
                usize::MAX,
                usize::MAX / 2,
                usize::MAX / 4 + 1,
                usize::MAX / 8,
                1 << 40,
                (1 << 40) + 1,
            ]),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        #[test]
        fn rows_that_validate_stay_inside_both_buffers(
            (width, height) in (any_size(), any_size()),
            (sp, sf, dp, df) in (any_size(), any_size(), any_size(), any_size()),
            (src_len, dst_len) in (0..80usize, 0..80usize),
            big in proptest::prelude::any::<bool>(),
            es in proptest::sample::select(vec![1usize, 2, 4, 8]),
            (src_host, dst_host) in (proptest::prelude::any::<bool>(), proptest::prelude::any::<bool>()),
        ) {
            // Large buffers too (their bytes still fit in an `isize`).
            let scale = |l: usize| if big { (isize::MAX as usize / es).saturating_sub(l) } else { l };
            let (src_len, dst_len) = (scale(src_len), scale(dst_len));
            let (sb, db) = (0x1000_0000u64, 0x9000_0000u64);
            let side = |host: bool, at: u64| {
                if host { Memory::Host(at as usize as *const core::ffi::c_void) } else { Memory::Device(at) }
            };
            let base = Copy1d {
                src: side(src_host, sb),
                dst: side(dst_host, db),
                src_len,
                dst_len,
                elem_size: es,
                src_ctx: core::ptr::null_mut(),
                dst_ctx: core::ptr::null_mut(),
                host_buffer: 0,
            };
            let c = Copy2d {
                base,
                src_rows: Rows::new(width, height, sp).from_row(sf),
                dst_rows: Rows::new(width, height, dp).from_row(df),
            };
            let params = Copy2dParams::recorded(c);
            let site = || NodeSite { label: "copy_2d", text: "", file: "", line: 1, column: 1 };
            if <Memcpy2d as NodeKind>::validate(&&params, None, &site).is_err() {
                return Ok(());
            }
            let p = memcpy2d(&c);
            proptest::prop_assert_eq!((p.srcY, p.dstY, p.srcXInBytes, p.dstXInBytes), (0, 0, 0, 0));
            proptest::prop_assert_eq!((p.Depth, p.Height), (1, height));
            let addr = |host: bool, h: *const core::ffi::c_void, d: u64| if host { h as u64 } else { d };
            let sides = [
                (addr(src_host, p.srcHost, p.srcDevice), p.srcPitch, sb, src_len, c.src_rows),
                (addr(dst_host, p.dstHost.cast_const(), p.dstDevice), p.dstPitch, db, dst_len, c.dst_rows),
            ];
            for (at, pitch, b, len, rows) in sides {
                // The last row's end, in bytes from the buffer's start (u128: no overflow here).
                let first = u128::from(at) - u128::from(b);
                let end = first + (height as u128 - 1) * pitch as u128 + p.WidthInBytes as u128;
                proptest::prop_assert!(u128::from(at) >= u128::from(b));
                proptest::prop_assert!(end <= (len * es) as u128, "{rows:?} ends at byte {end} of {}", len * es);
                proptest::prop_assert_eq!(first, (rows.first as u128) * (rows.pitch * es) as u128);
                proptest::prop_assert_eq!(pitch, rows.pitch * es);
            }
            proptest::prop_assert_eq!(p.WidthInBytes, width * es);
        }
    }
}
