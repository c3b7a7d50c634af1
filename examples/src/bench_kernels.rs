//! The tiny kernels of `kernels/bench.cu` and their launch shape, shared by `bench` and
//! `host_cost`. Included with `#[path]`.

use cudagraph::kernels;

/// The source, compiled with NVRTC at run time.
pub const SOURCE: &str = include_str!("../kernels/bench.cu");

kernels! {
    /// Kernels of `kernels/bench.cu`.
    pub struct Bench {
        /// `x[i] += v` for `i < n`.
        fn add(n: u32, v: u32, x: &mut [u32]);
        /// `dst[i] += src[i]` for `i < n`.
        fn acc(n: u32, src: &[u32], dst: &mut [u32]);
    }
}

/// Elements of every buffer; each kernel is one block of 32 threads over them.
pub const ELEMS: u32 = 32;
/// `(grid, block)` of every kernel.
pub const CFG: (u32, u32) = (1, 32);
