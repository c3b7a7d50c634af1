//! Fill nodes: `fill(&mut dst, value)` sets every element of `dst` to `value`, for any element
//! type without padding (`bytemuck::NoUninit`) of 1 to 64 bytes — in particular the 8-byte types
//! (`u64`, `i64`, `f64`) that the driver's memset cannot set. A fill node is a kernel node
//! (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_KERNEL`) of the crate's own kernel
//! (`fill.cu`), so it has the kernel kind's update rules: a new value, pointer or length is a
//! per-node `cuGraphExecNodeSetParams` through the same ladder; only loading the kernel is its
//! own.
//!
//! The kernel is compiled by NVRTC once per process (the first fill), and its module loaded
//! (`cuModuleLoadData`) once per context; the module stays loaded, and keeps its context alive,
//! until the process ends. A compile or load failure is [`Error::InvalidNode`] naming the
//! statement, before anything is enqueued.

use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUfunction};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use super::kernel::{KernelNode, LaunchDims};
use super::own_kernel::own_kernel_kind;
use crate::operand::{Accesses, WriteArg, sealed};

/// The kernel's CUDA C++ source.
const SOURCE: &str = include_str!("fill.cu");
/// The kernel's name in the module.
const NAME: &str = "cudagraph_fill";
/// Threads per block of a fill launch.
const BLOCK: u32 = 256;
/// Most blocks of a fill launch (the kernel loops over the rest).
const MAX_GRID: u64 = 4096;
/// Largest element a fill sets, bytes.
pub const MAX_FILL_BYTES: usize = 64;

/// The fill kernel (see [`OwnKernel`](super::own_kernel::OwnKernel)); a failed load is tried
/// again at the next call (a fill has no other node to fall back to: its call fails).
static KERNEL: super::own_kernel::OwnKernel =
    super::own_kernel::OwnKernel::new(SOURCE, NAME, false);

/// The fill kernel of `ctx`: compiled once per process, loaded once per context.
fn function(ctx: &Arc<CudaContext>) -> Result<CudaFunction, Arc<str>> {
    KERNEL.function(ctx, |_| Ok(()))
}

/// A fill node's parameters: made by `fill(&mut dst, value)` in `graph!`; borrows its buffer.
pub struct FillNode<'a> {
    function: FillFunction,
    dst: u64,
    words: u64,
    word_bytes: u32,
    period: u32,
    pattern: [u64; 8],
    dims: LaunchDims,
    dst_tag: u64,
    ctx: CUcontext,
    _borrow: core::marker::PhantomData<&'a ()>,
}

/// The fill kernel of a node's context, or why it could not be had.
enum FillFunction {
    Loaded(CudaFunction),
    Failed(Arc<str>),
    /// A function handle of the mock driver's tests (no module behind it).
    #[cfg(test)]
    StandIn(CUfunction),
}

impl<'a> FillNode<'a> {
    /// Every element of `dst` set to `value`, by the fill kernel of `stream`'s context.
    pub(crate) fn new<T: bytemuck::NoUninit>(
        stream: &CudaStream,
        dst: impl WriteArg<'a, T>,
        value: T,
    ) -> Self {
        const {
            assert!(
                size_of::<T>() > 0 && size_of::<T>() <= MAX_FILL_BYTES,
                "a fill value has 1 to 64 bytes"
            )
        };
        let dst = dst.into_write();
        let size = size_of::<T>();
        let word = [8usize, 4, 2, 1]
            .into_iter()
            .find(|&w| size.is_multiple_of(w) && dst.ptr.is_multiple_of(w as u64))
            .unwrap_or(1);
        let mut pattern = [0u64; 8];
        bytemuck::cast_slice_mut::<u64, u8>(&mut pattern)[..size]
            .copy_from_slice(bytemuck::bytes_of(&value));
        let words = (dst.len * (size / word)) as u64;
        let grid = words.div_ceil(u64::from(BLOCK)).clamp(1, MAX_GRID) as u32;
        let function = match function(stream.context()) {
            Ok(f) => FillFunction::Loaded(f),
            Err(why) => FillFunction::Failed(why),
        };
        FillNode {
            function,
            dst: dst.ptr,
            words,
            word_bytes: word as u32,
            period: (size / word) as u32,
            pattern,
            dims: LaunchDims::new(grid, BLOCK),
            dst_tag: dst.tag,
            ctx: dst.ctx,
            _borrow: core::marker::PhantomData,
        }
    }
}

#[cfg(test)]
impl FillNode<'static> {
    /// A fill of `len` 8-byte elements at `dst` with `value`, for the mock driver's tests: the
    /// function is the stand-in handle `func`.
    pub(crate) fn for_test(
        func: CUfunction,
        dst: u64,
        len: u64,
        value: u64,
        ctx: CUcontext,
    ) -> Self {
        let mut pattern = [0u64; 8];
        pattern[0] = value;
        FillNode {
            function: FillFunction::StandIn(func),
            dst,
            words: len,
            word_bytes: 8,
            period: 1,
            pattern,
            dims: LaunchDims::new(len.div_ceil(u64::from(BLOCK)) as u32, BLOCK),
            dst_tag: 0,
            ctx,
            _borrow: core::marker::PhantomData,
        }
    }
}

impl sealed::Sealed for FillNode<'_> {}

impl KernelNode for FillNode<'_> {
    fn function(&self) -> CUfunction {
        match &self.function {
            FillFunction::Loaded(f) => f.cu_function(),
            FillFunction::Failed(_) => core::ptr::null_mut(),
            #[cfg(test)]
            FillFunction::StandIn(f) => *f,
        }
    }
    fn function_owner(&self) -> Option<&CudaFunction> {
        match &self.function {
            FillFunction::Loaded(f) => Some(f),
            _ => None,
        }
    }
    fn dims(&self) -> LaunchDims {
        self.dims
    }
    fn arg_count(&self) -> usize {
        5
    }
    /// Only `dst` is an address.
    fn pointer_args(&self) -> u16 {
        1
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        f(&self.dst.to_ne_bytes());
        f(&self.words.to_ne_bytes());
        f(&self.word_bytes.to_ne_bytes());
        f(&self.period.to_ne_bytes());
        f(bytemuck::cast_slice(&self.pattern));
    }
    fn accesses(&self, out: &mut Accesses) -> usize {
        out[0] = (self.dst_tag, true, self.ctx);
        1
    }
}

/// The fill node kind: a kernel node of the crate's fill kernel.
pub(crate) struct Fill;

own_kernel_kind!(Fill, FillNode, |p, site| {
    if p.words == 0 {
        return Err(Error::Empty { site: site(), what: "fill" });
    }
    if let FillFunction::Failed(why) = &p.function {
        let why = format!("the fill kernel could not be compiled or loaded: {why}");
        return Err(Error::InvalidNode { site: site(), why });
    }
    Ok(())
});
