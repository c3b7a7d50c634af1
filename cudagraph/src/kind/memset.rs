//! Memset nodes (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_MEMSET`): 1-D sets of 1, 2 or
//! 4-byte elements, made by `memset(&mut dst, value)` and `zero(&mut dst)`.

use core::marker::PhantomData;

use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUgraphNodeParams, CUgraphNodeType};
use cudarc::driver::{CudaStream, ValidAsZeroBits};

use super::NodeKind;
use crate::error::{Call, Error, NodeSite};
use crate::operand::{Accesses, WriteArg, sealed};
use crate::raw;

/// A 1-D memset of `len` elements of `elem_size` (1, 2 or 4) bytes to `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Set1d {
    pub(crate) dst: CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) elem_size: u32,
    pub(crate) value: u32,
    pub(crate) ctx: CUcontext,
}

/// A memset node's parameters, made by `memset(&mut dst, value)` or `zero(&mut dst)` in
/// `graph!`; borrows its buffer like [`MemcpyParams`](crate::MemcpyParams).
#[derive(Clone, Copy, Debug)]
pub struct MemsetParams<'a> {
    pub(crate) raw: Set1d,
    pub(crate) dst_tag: u64,
    _borrow: PhantomData<&'a ()>,
}

impl MemsetParams<'_> {
    /// See [`MemcpyParams::recorded`].
    pub(crate) fn recorded(raw: Set1d) -> Self {
        MemsetParams { raw, dst_tag: 0, _borrow: PhantomData }
    }
}

/// The value of a `memset`: a type of 1, 2 or 4 bytes.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a memset value",
    label = "not a 1, 2 or 4-byte value",
    note = "memset values are u8, i8, u16, i16, u32, i32 or f32 (the driver sets 1, 2 or 4-byte elements); use `fill(&mut buf, value)` for elements of any size (u64, f64, `[f32; 3]`, …, 1 to 64 bytes), or `zero(&mut buf)` to clear any type"
)]
pub trait MemsetValue: sealed::Sealed + Copy {
    /// The value's bits, zero-extended to 32 bits.
    fn bits(self) -> u32;
}
macro_rules! memset_value {
    ($($t:ty => $u:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl MemsetValue for $t {
            fn bits(self) -> u32 {
                <$u>::from_ne_bytes(self.to_ne_bytes()) as u32
            }
        }
    )*};
}
memset_value!(u8 => u8, i8 => u8, u16 => u16, i16 => u16, u32 => u32, i32 => u32, f32 => u32);

/// A `memset` value for a buffer of `T` elements: a value of type `T` itself, where `T` is a
/// [`MemsetValue`] (sealed). Separate from [`MemsetValue`] so that a value of another type than
/// the buffer's elements is reported as that, on the value.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a memset value for a buffer of `{T}` elements",
    label = "a memset value has the buffer's element type, of 1, 2 or 4 bytes",
    note = "memset sets every element of the buffer to the value: the value's type must be the buffer's element type, and one of u8, i8, u16, i16, u32, i32, f32 (the driver sets 1, 2 or 4-byte elements); use `fill(&mut buf, value)` for elements of any size (u64, f64, `[f32; 3]`, …, 1 to 64 bytes), or `zero(&mut buf)` to clear any type"
)]
pub trait MemsetValueOf<T>: sealed::Sealed + Copy {
    /// The value's bits, zero-extended to 32 bits.
    fn bits_of(self) -> u32;
}
impl<T: MemsetValue> MemsetValueOf<T> for T {
    fn bits_of(self) -> u32 {
        self.bits()
    }
}

/// `memset(&mut dst, value)`: every element of `dst` set to `value`.
pub fn memset<'a, T, V: MemsetValueOf<T>>(dst: impl WriteArg<'a, T>, value: V) -> MemsetParams<'a> {
    let dst = dst.into_write();
    let raw = Set1d {
        dst: dst.ptr,
        len: dst.len,
        elem_size: size_of::<T>() as u32,
        value: value.bits_of(),
        ctx: dst.ctx,
    };
    MemsetParams { raw, dst_tag: dst.tag, _borrow: PhantomData }
}

/// `zero(&mut dst)`: every byte of `dst` set to 0, whatever its element type.
pub fn zero<'a, T: ValidAsZeroBits>(dst: impl WriteArg<'a, T>) -> MemsetParams<'a> {
    let dst = dst.into_write();
    let bytes = dst.len * size_of::<T>();
    let elem_size = [4u32, 2, 1]
        .into_iter()
        .find(|&w| bytes.is_multiple_of(w as usize) && dst.ptr.is_multiple_of(u64::from(w)))
        .unwrap_or(1);
    let raw =
        Set1d { dst: dst.ptr, len: bytes / elem_size as usize, elem_size, value: 0, ctx: dst.ctx };
    MemsetParams { raw, dst_tag: dst.tag, _borrow: PhantomData }
}

/// The driver's view of a memset node: `height` rows of `width` elements of `elem_size` bytes
/// set to `value`, rows `pitch` elements apart (a 1-D set is one row), at `dst` (a graph-owned
/// buffer's placeholder resolved to the variant's address).
pub(crate) fn memset_node(
    dst: CUdeviceptr,
    value: u32,
    elem_size: u32,
    (width, height, pitch): (usize, usize, usize),
    ctx: CUcontext,
) -> CUgraphNodeParams {
    let mut p = super::node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET);
    p.__bindgen_anon_1.memset = sys::CUDA_MEMSET_NODE_PARAMS_v2 {
        dst: super::alloc::resolve(dst),
        pitch: pitch * elem_size as usize,
        value,
        elementSize: elem_size,
        width,
        height,
        ctx,
    };
    p
}

/// The memset node kind.
pub(crate) struct Memset;

impl NodeKind for Memset {
    type Params<'a> = &'a MemsetParams<'a>;
    type State = Set1d;
    const ADD: &'static str = "cuGraphAddNode_v2 (memset)";
    const SET: &'static str = "cuGraphExecNodeSetParams (memset)";
    const EAGER: &'static str = "cuMemsetD32Async";

    fn validate(
        m: &&MemsetParams<'_>,
        _: Option<&super::Limits>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        if m.raw.len == 0 {
            return Err(Error::Empty { site: site(), what: "memset" });
        }
        Ok(())
    }

    fn accesses(m: &&MemsetParams<'_>, out: &mut Accesses) -> usize {
        out[0] = (m.dst_tag, true, m.raw.ctx);
        1
    }

    fn state(m: &&MemsetParams<'_>) -> Set1d {
        m.raw
    }

    fn record(s: &mut Set1d, m: &&MemsetParams<'_>) -> bool {
        super::record_value(s, m.raw)
    }

    fn with_params<R>(
        s: &mut Set1d,
        ctx: CUcontext,
        f: impl FnOnce(&mut CUgraphNodeParams) -> R,
    ) -> R {
        f(&mut memset_node(s.dst, s.value, s.elem_size, (s.len, 1, s.len), ctx))
    }

    unsafe fn eager(
        m: &&MemsetParams<'_>,
        stream: &CudaStream,
        _: &std::sync::Arc<super::Reports>,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<(), Error> {
        let m = &m.raw;
        // SAFETY: the caller's contract: `dst` valid for the set until it ran.
        unsafe {
            raw::memset_async(
                super::alloc::resolve(m.dst),
                m.value,
                m.elem_size,
                m.len,
                stream.cu_stream(),
            )
        }
        .call(Self::EAGER)
        .map_err(|source| Error::Node { site: site(), source })
    }
}
