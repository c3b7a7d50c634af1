use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{KernelLaunch, kernels};

kernels! {
    struct K {
        fn count(n: u32);
    }
}

// A launch of a scalar-only kernel borrows nothing but its struct: it still cannot leave the
// function that owns the struct (to be added to a graph after the module is unloaded).
fn stale() -> KernelLaunch<'static, (u32,)> {
    let ctx = CudaContext::new(0).unwrap();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }.unwrap();
    k.count(7).launch(LaunchConfig::for_num_elems(7))
}

fn main() {
    let _ = stale();
}
