use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, kernels};

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [u32]);
    }
}

// A launch borrows its struct's kernel entry (`&KernelEntry` inside `Functions`): the struct
// cannot be dropped (its module unloaded, its entries freed) while the launch is alive.
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<u32>(1024)?;
    let mut g = cache.builder(&stream);
    let w = g.write(&mut x);
    let launch = k.fill(1024, w).launch(LaunchConfig::for_num_elems(1024));
    drop(k);
    g.kernel(launch);
    g.launch()
}
