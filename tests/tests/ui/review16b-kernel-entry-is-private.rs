use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{KernelFn, kernels};

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [u32]);
    }
}
kernels! {
    struct Other {
        fn fill(n: u32, x: &mut [f64]);
    }
}

// A `KernelFn` of one struct's kernel cannot be opened (its entry read) or made from another
// struct's entry: its field and constructor are the crate's, and `KernelEntry` is not nameable.
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let o = unsafe { Other::load(&ctx, Ptx::from_src("")) }?;
    let entry = o.__cudagraph.kernel(0).entry;
    let _forged = KernelFn { entry };
    let _made = KernelFn::new(entry);
    let _ = k;
    Ok(())
}
