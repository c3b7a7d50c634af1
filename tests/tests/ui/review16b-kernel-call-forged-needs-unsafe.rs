use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{KernelCall, kernels};

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [u32]);
        fn count(n: u32);
    }
}

// Safe code reaches `Functions::kernel` of its own struct's field, but making a call of kernel
// 0 (`fill`, which writes a buffer) with the arguments of kernel 1 (`count`), under another name,
// needs `KernelCall::new`, which is `unsafe`: both constructors.
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let _a = KernelCall::new(k.__cudagraph.kernel(0), "count", (7u32,));
    let _b = KernelCall::new_programmatic(k.__cudagraph.kernel(0), "count", (7u32,));
    Ok(())
}
