use cudagraph::__private::Functions;
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::kernels;

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [u32]);
    }
}

// A `kernels!` struct is made by its `unsafe fn load` only: its one field cannot be made
// without `unsafe` (binding functions of any signature to the declarations).
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let _forged = K { __cudagraph: Functions::load(&ctx, Ptx::from_src(""), "K", &["fill"])? };
    Ok(())
}
