use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};

// A node bound inside a device body belongs to the body's graph: it is not in scope after it.
kernels! {
    struct K {
        fn set(c: Condition, v: &[u32]);
        fn scale(n: u32, a: f32, x: &mut [f32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let flag = std::env::args().count() > 1;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let v = stream.alloc_zeros::<u32>(1)?;
    let _ = flag;
    graph!(&mut cache, &stream, {
        let c = condition(1);
        device_while(c, {
            let inner = k.scale(1024, 2.0, &mut x).launch(cfg);
            k.set(c, &v).launch((1, 1));
        });
        k.scale(1024, 3.0, &mut x).launch(cfg).after(inner);
    })
}
