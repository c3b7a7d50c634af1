use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};

// A run-time `for` beside a device statement, and `fill` and an unrolled `for` inside its body.
kernels! {
    struct K {
        fn set(c: Condition, v: &[u32]);
        fn scale(n: u32, a: f32, x: &mut [f32]);
    }
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let v = stream.alloc_zeros::<u32>(1)?;
    let n = 3;
    graph!(&mut cache, &stream, {
        for _ in 0..n {
            k.scale(1024, 2.0, &mut x).launch(cfg);
        }
        let c = condition(1);
        device_while(c, {
            fill(&mut y, 1.0f32);
            for _ in 0..2 {
                k.scale(1024, 0.5, &mut y).launch(cfg);
            }
            k.set(c, &v).launch((1, 1));
        });
    })
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
