use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::kernels;

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

// The functions of a `kernels!` struct are branded by it: taken out of one (the struct loaded
// by its `unsafe fn load`), they cannot be moved into a struct with other signatures.
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let K { __cudagraph: functions } = k;
    let _other = Other { __cudagraph: functions };
    Ok(())
}
