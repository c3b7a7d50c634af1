use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, kernels};

kernels! {
    struct K {
        fn axpy(n: u32, x: &[f32], y: &mut [f32]);
    }
}

// With a builder, kernel arguments are handles of `read`/`write`, not the buffers themselves.
fn step(cache: &mut GraphCache, stream: &Arc<CudaStream>) -> cudagraph::Result<()> {
    // SAFETY: the declaration matches the kernel.
    let k = unsafe { K::load(stream.context(), Ptx::from_src("")) }?;
    let x = stream.alloc_zeros::<f32>(16)?;
    let mut y = stream.alloc_zeros::<f32>(16)?;
    let mut g = cache.builder(stream);
    let yw = g.write(&mut y);
    g.kernel(k.axpy(16, &x, yw).launch(LaunchConfig::for_num_elems(16)));
    g.launch()
}

fn main() {}
