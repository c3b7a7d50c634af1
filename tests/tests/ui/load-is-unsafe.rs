use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::kernels;

kernels! {
    struct K {
        fn scale(n: u32, a: f32, x: &mut [f32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let _k = K::load(&ctx, Ptx::from_src(""))?;
    Ok(())
}
