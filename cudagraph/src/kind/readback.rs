//! Readback nodes: a small `copy(&dev, &mut pinned)` (device memory into pinned host memory, at
//! most [`MAX_READBACK_BYTES`]) made as a kernel node of the crate's own copy kernel
//! (`readback.cu`) instead of a memcpy node. The kernel stores through the pinned memory's
//! device address, which is its host address under unified addressing (memory of
//! `cuMemHostAlloc` / `cuMemAllocHost`: [`PinnedBuffer`](crate::PinnedBuffer) and cudarc's
//! pinned slices). On the H200 a memcpy node of 8 bytes into pinned memory made a graph step
//! that waits for its result 1.7–5.5 µs slower than this kernel node, and steps enqueued back
//! to back 1.1–9.2 µs slower; up to 4 KiB the kernel node won in both patterns, at 64 KiB it lost
//! in the first (`examples/probes/copy_kernel.cu`, 2026-12-04).
//!
//! The node has the kernel kind's update rules (a new address or length is a per-node
//! `cuGraphExecKernelNodeSetParams`), as `fill`'s. The kernel is compiled by NVRTC once per
//! process (the first such copy), and its module loaded once per context and kept while the
//! context is used ([`OwnKernel`]). Where it cannot be had (no NVRTC, no unified addressing)
//! the copy stays a memcpy node (the same choice for every call in that context).

use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUfunction};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use super::kernel::{KernelNode, LaunchDims, Pack, pack_head};
use super::own_kernel::OwnKernel;
use super::own_kernel::own_kernel_kind;
use crate::operand::{Accesses, sealed};

/// The kernel's CUDA C++ source.
const SOURCE: &str = include_str!("readback.cu");
/// The kernel's name in the module.
const NAME: &str = "cudagraph_readback";
/// Threads per block of a readback launch.
const BLOCK: u32 = 256;
/// Largest copy made as a readback node, bytes: above it, a memcpy node.
pub const MAX_READBACK_BYTES: usize = 4096;

/// The readback kernel (see [`OwnKernel`]); a failure is kept: every call in that context
/// makes its copies memcpy nodes.
static KERNEL: OwnKernel = OwnKernel::new(SOURCE, NAME, true);

/// The readback kernel of `ctx`, or `None` where it cannot be had (then the copy is a memcpy
/// node): only where the device has unified addressing and maps host memory, since the kernel
/// stores through the pinned memory's host address (`cuDeviceGetAttribute`, asked once per
/// context).
fn function(ctx: &Arc<CudaContext>) -> Option<CudaFunction> {
    let usable = |ctx: &Arc<CudaContext>| {
        use cudarc::driver::sys::CUdevice_attribute as A;
        let has = |a: A| ctx.attribute(a).is_ok_and(|v| v != 0);
        let mapped = has(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
            && has(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
        if mapped { Ok(()) } else { Err("no unified addressing or mapped host memory".into()) }
    };
    KERNEL.function(ctx, usable).ok()
}

/// A readback node's parameters: made by `copy(&src, &mut dst)` in `graph!` (and by
/// [`GraphBuilder::copy`](crate::GraphBuilder::copy)) for a small copy from device memory into
/// pinned host memory (`ReadbackNode::try_new`); borrows both.
pub struct ReadbackNode<'a> {
    function: ReadbackFunction,
    /// The context the function was loaded in (the call's stream's).
    fctx: CUcontext,
    src: u64,
    dst: u64,
    words: u64,
    word_bytes: u32,
    dims: LaunchDims,
    src_tag: u64,
    dst_tag: u64,
    src_ctx: CUcontext,
    dst_ctx: CUcontext,
    _borrow: core::marker::PhantomData<&'a ()>,
}

enum ReadbackFunction {
    Loaded(CudaFunction),
    /// A function handle of the mock driver's tests (no module behind it).
    #[cfg(test)]
    StandIn(CUfunction),
}

impl<'a> ReadbackNode<'a> {
    /// The copy `c` (device memory to pinned host memory, checked by its handles) as a
    /// readback node on `stream`'s context, or `None`: another direction, more than
    /// [`MAX_READBACK_BYTES`], no kernel to be had, or a host address of 0.
    pub(crate) fn try_new(stream: &CudaStream, c: &super::MemcpyParams<'a>) -> Option<Self> {
        use super::memcpy::Memory;
        let r = &c.raw;
        let (Memory::Device(src), Memory::Host(dst)) = (r.src, r.dst) else {
            return None;
        };
        // (Lengths that differ stay a memcpy node, which refuses them: `Error::CopyLength`.)
        if r.src_len != r.dst_len {
            return None;
        }
        let bytes = r.src_len.checked_mul(r.elem_size)?;
        Self::make(stream, (src, dst as u64, bytes), (c.src_tag, c.dst_tag), (r.src_ctx, r.dst_ctx))
    }

    /// As [`Self::try_new`] for a `copy_2d` whose rows are contiguous on both sides (dense, or
    /// one row) and fit: the same bytes as one 1-D copy. Rows that do not fit, differ in
    /// shape or have gaps stay a 2-D memcpy node (which refuses the first two).
    pub(crate) fn try_new_2d(stream: &CudaStream, c: &super::Copy2dParams<'a>) -> Option<Self> {
        use super::memcpy::Memory;
        let r = &c.raw;
        let b = &r.base;
        let (Memory::Device(src), Memory::Host(dst)) = (b.src, b.dst) else {
            return None;
        };
        let (s, d) = (r.src_rows, r.dst_rows);
        let dense = |x: crate::Rows| x.height == 1 || x.pitch == x.width;
        if (s.width, s.height) != (d.width, d.height)
            || s.width == 0
            || s.height == 0
            || !dense(s)
            || !dense(d)
            || s.misfit(b.src_len, b.elem_size, "source").is_some()
            || d.misfit(b.dst_len, b.elem_size, "destination").is_some()
        {
            return None;
        }
        let at = |base: u64, rows: crate::Rows| {
            base.checked_add(
                u64::try_from(rows.first.checked_mul(rows.pitch)?.checked_mul(b.elem_size)?)
                    .ok()?,
            )
        };
        let (src, dst) = (at(src, s)?, at(dst as u64, d)?);
        let bytes = s.width.checked_mul(s.height)?.checked_mul(b.elem_size)?;
        Self::make(stream, (src, dst, bytes), (c.src_tag, c.dst_tag), (b.src_ctx, b.dst_ctx))
    }

    /// The node for `bytes` from `src` to `dst`, if small enough and the kernel can be had.
    fn make(
        stream: &CudaStream,
        (src, dst, bytes): (u64, u64, usize),
        (src_tag, dst_tag): (u64, u64),
        (src_ctx, dst_ctx): (CUcontext, CUcontext),
    ) -> Option<Self> {
        let (words, word) = words_of(src, dst, bytes)?;
        // Both sides in the call's context, as a memcpy node with a host side must be: anything
        // else stays a memcpy node, which the validation refuses (`Error::WrongContext`).
        let fctx = stream.context().cu_ctx();
        if src_ctx != fctx || dst_ctx != fctx {
            return None;
        }
        let function = ReadbackFunction::Loaded(function(stream.context())?);
        Some(ReadbackNode {
            function,
            fctx,
            src,
            dst,
            words,
            word_bytes: word,
            dims: LaunchDims::new(words.div_ceil(u64::from(BLOCK)).max(1) as u32, BLOCK),
            src_tag,
            dst_tag,
            src_ctx,
            dst_ctx,
            _borrow: core::marker::PhantomData,
        })
    }
}

/// A copy of `bytes` from `src` to `dst` as the kernel's words: their count and size (the
/// largest of 8, 4, 2, 1 that divides both addresses and the length); `None` for an empty copy,
/// one over [`MAX_READBACK_BYTES`] or a null address.
fn words_of(src: u64, dst: u64, bytes: usize) -> Option<(u64, u32)> {
    if bytes == 0 || bytes > MAX_READBACK_BYTES || src == 0 || dst == 0 {
        return None;
    }
    let word = [8usize, 4, 2, 1]
        .into_iter()
        .find(|&w| {
            bytes.is_multiple_of(w) && src.is_multiple_of(w as u64) && dst.is_multiple_of(w as u64)
        })
        .unwrap_or(1);
    Some(((bytes / word) as u64, word as u32))
}

#[cfg(test)]
#[test]
fn words_follow_the_alignment_and_the_size_bound() {
    assert_eq!(words_of(0x1000, 0x2000, 8), Some((1, 8)));
    assert_eq!(words_of(0x1000, 0x2004, 8), Some((2, 4)));
    assert_eq!(words_of(0x1002, 0x2000, 12), Some((6, 2)));
    assert_eq!(words_of(0x1001, 0x2000, 8), Some((8, 1)));
    assert_eq!(words_of(0x1000, 0x2000, 6), Some((3, 2)));
    assert_eq!(words_of(0x1000, 0x2000, MAX_READBACK_BYTES), Some((512, 8)));
    assert_eq!(words_of(0x1000, 0x2000, MAX_READBACK_BYTES + 8), None);
    assert_eq!(words_of(0x1000, 0x2000, 0), None);
    assert_eq!(words_of(0x1000, 0, 8), None);
}

#[cfg(test)]
impl ReadbackNode<'static> {
    /// A readback of `words` 8-byte words from `src` to `dst`, for the mock driver's tests: the
    /// function is the stand-in handle `func`.
    pub(crate) fn for_test(
        func: CUfunction,
        src: u64,
        dst: u64,
        words: u64,
        ctx: CUcontext,
    ) -> Self {
        ReadbackNode {
            function: ReadbackFunction::StandIn(func),
            fctx: ctx,
            src,
            dst,
            words,
            word_bytes: 8,
            dims: LaunchDims::new(words.div_ceil(u64::from(BLOCK)).max(1) as u32, BLOCK),
            src_tag: 0,
            dst_tag: 0,
            src_ctx: ctx,
            dst_ctx: ctx,
            _borrow: core::marker::PhantomData,
        }
    }

    /// The same node with the handles' tags `src_tag` and `dst_tag`.
    pub(crate) fn with_tags(mut self, src_tag: u64, dst_tag: u64) -> Self {
        (self.src_tag, self.dst_tag) = (src_tag, dst_tag);
        self
    }
}

impl sealed::Sealed for ReadbackNode<'_> {}

impl KernelNode for ReadbackNode<'_> {
    fn function(&self) -> CUfunction {
        match &self.function {
            ReadbackFunction::Loaded(f) => f.cu_function(),
            #[cfg(test)]
            ReadbackFunction::StandIn(f) => *f,
        }
    }
    fn function_owner(&self) -> Option<&CudaFunction> {
        match &self.function {
            ReadbackFunction::Loaded(f) => Some(f),
            #[cfg(test)]
            ReadbackFunction::StandIn(_) => None,
        }
    }
    fn dims(&self) -> LaunchDims {
        self.dims
    }
    fn arg_count(&self) -> usize {
        4
    }
    /// `src` and `dst` are addresses.
    fn pointer_args(&self) -> u16 {
        0b11
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        f(&self.src.to_ne_bytes());
        f(&self.dst.to_ne_bytes());
        f(&self.words.to_ne_bytes());
        f(&self.word_bytes.to_ne_bytes());
    }
    fn accesses(&self, out: &mut Accesses) -> usize {
        out[0] = (self.src_tag, false, self.src_ctx);
        out[1] = (self.dst_tag, true, self.dst_ctx);
        2
    }
    /// As a `kernels!` launch packs: the function (loaded once per context and kept, so its
    /// handle decides the context), the dimensions, then the two addresses with their
    /// contexts and handles, the word count and the word size.
    fn pack(&self, out: &mut Pack<'_>) -> bool {
        // Argument forms: two addresses (a context and a handle each), 8 and 4 plain bytes.
        const LAYOUT: u64 = 0xf | 0xf << 4 | 8 << 8 | 4 << 12;
        pack_head(out, self.function(), None, &self.dims, false, 4, LAYOUT);
        let sides = [
            (self.src, self.src_ctx, self.src_tag, false),
            (self.dst, self.dst_ctx, self.dst_tag, true),
        ];
        for (addr, ctx, tag, write) in sides {
            let other = out.push_arg(8, None, Some(ctx), Some(self.fctx), Some((tag, write)));
            out.push_bytes(&addr.to_ne_bytes());
            if let Some(c) = other {
                out.push(c as u64);
            }
        }
        out.push_bytes(&self.words.to_ne_bytes());
        out.push_bytes(&self.word_bytes.to_ne_bytes());
        true
    }
}

/// The readback node kind: a kernel node of the crate's readback kernel.
pub(crate) struct Readback;

own_kernel_kind!(Readback, ReadbackNode, |_, _| Ok(()));
