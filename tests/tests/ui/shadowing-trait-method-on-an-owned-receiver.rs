// Review 17b. With an owned `kernels!` struct as receiver, `graph!` calls the method on `&K`, and
// the inherent (generated) method is found there before any trait method of the same name: a
// user trait's `scale` with another signature is not taken (an arity error), so `made_by` sees
// the real call. (With a receiver of type `&K` the trait method below, implemented for `&K`,
// *is* taken: GPU tests in `review_session17b.rs`.)
use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{DevWrite, GraphCache, KernelCall, graph, kernels};

kernels! {
    struct K {
        fn scale(n: u32, a: u32, x: &mut [u32]);
    }
}

trait Shadow {
    fn scale<'k, 'b>(
        &'k self,
        n: u32,
        x: DevWrite<'b, u32>,
    ) -> KernelCall<'k, (u32, u32, DevWrite<'b, u32>)>;
}
impl Shadow for K {
    fn scale<'k, 'b>(
        &'k self,
        n: u32,
        x: DevWrite<'b, u32>,
    ) -> KernelCall<'k, (u32, u32, DevWrite<'b, u32>)> {
        K::scale(self, n, 1, x)
    }
}
impl Shadow for &K {
    fn scale<'k, 'b>(
        &'k self,
        n: u32,
        x: DevWrite<'b, u32>,
    ) -> KernelCall<'k, (u32, u32, DevWrite<'b, u32>)> {
        K::scale(self, n, 1, x)
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut bufs = [stream.alloc_zeros::<u32>(1024)?, stream.alloc_zeros::<u32>(1024)?];
    graph!(&mut cache, &stream, {
        for i in 0..2 {
            k.scale(1024, &mut bufs[i]).launch(cfg);
        }
    })
}
