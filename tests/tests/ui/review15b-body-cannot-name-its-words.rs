// Review 15b: a `graph!` body cannot reach the call's words (`__cudagraph_words`, hygienic):
// swapping them for words made by hand, or dropping them, from an argument would hand
// `run_words` words that do not describe the call's nodes.
use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
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
    let mut other = GraphCache::new();
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let plan = cudagraph::plans().next().expect("a plan");
    graph!(&mut cache, &stream, {
        k.scale(1024, 2.0, &mut x).launch(cfg);
        k.scale(
            1024,
            {
                let mine = other.words(plan, &cudagraph::__private::begin_call());
                drop(std::mem::replace(&mut __cudagraph_words, mine));
                1.0
            },
            &mut x,
        )
        .launch(cfg);
    })
}
