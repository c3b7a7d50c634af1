// Review 17b: with a receiver of type `&K` (how kernels are usually passed to a function),
// `graph!` called the kernel method on `&&K`, where a trait method named like the kernel and
// implemented for `&K` was found before the generated one: a helper could pass for the
// `kernels!` method (and a run of iterations compare only its first iteration). The receiver
// is now the struct itself (`__private::kernels` returns `&Kernels::Struct`), so the generated
// `scale` is taken and the helper's other arity is an error.
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
    let owned = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let k = &owned;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut bufs = [stream.alloc_zeros::<u32>(1024)?, stream.alloc_zeros::<u32>(1024)?];
    graph!(&mut cache, &stream, {
        for i in 0..2 {
            k.scale(1024, &mut bufs[i]).launch(cfg);
        }
    })
}
