use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [u32]);
    }
}

// A method of the user's on a `kernels!` struct, whose value has a `launch` method, is not a
// kernel statement: only a launch made by a declared kernel is.
struct Stale(u32);
impl Stale {
    fn launch(self, _: LaunchConfig) -> u32 {
        self.0
    }
}
impl K {
    fn stale(&self, n: u32) -> Stale {
        Stale(n)
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<u32>(1024)?;
    graph!(&mut cache, &stream, {
        k.fill(1024, &mut x).launch(cfg);
        k.stale(7).launch(cfg);
    })
}
