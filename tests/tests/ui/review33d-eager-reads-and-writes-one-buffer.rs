//! Review 33d: `eager!` checks what `graph!` checks: one buffer read and written by one
//! statement is a borrow error there too.

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::kernels;

kernels! {
    struct K {
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    cudagraph::eager!(&stream, k.axpy(1024, &x, &mut x).launch(cfg))
}
