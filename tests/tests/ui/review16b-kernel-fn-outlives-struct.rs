use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::kernels;

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [u32]);
    }
}

// The `KernelFn` that `Functions::kernel` hands out (reachable from the struct's own module
// through its field) borrows the `Functions`: it cannot outlive the struct.
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let f = k.__cudagraph.kernel(0);
    drop(k);
    let _keep = f;
    Ok(())
}
