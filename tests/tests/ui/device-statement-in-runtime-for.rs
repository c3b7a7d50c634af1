use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};

// A device condition and its statement cannot be inside a graph `for` with a run-time count:
// its body is a graph of its own, built once.
kernels! {
    struct K {
        fn set(c: Condition, v: &[u32]);
        fn scale(n: u32, a: f32, x: &mut [f32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let v = stream.alloc_zeros::<u32>(1)?;
    let n = 2;
    graph!(&mut cache, &stream, {
        for _ in 0..n {
            let c = condition(1);
            device_while(c, {
                k.scale(1024, 0.5, &mut x).launch(cfg);
                k.set(c, &v).launch((1, 1));
            });
        }
    })
}
