// `x` and `*x` are one place only where both are graph buffers (`x` a reference): with `x` a
// `Box`, the spelling `&x` is refused as it would be on its own, not merged into `*x`.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice};
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let mut x: Box<CudaSlice<f32>> = Box::new(stream.alloc_zeros::<f32>(16)?);
    let mut y = stream.alloc_zeros::<f32>(16)?;
    graph!(&mut GraphCache::new(), &stream, {
        zero(&mut *x);
        copy(&x, &mut y);
    })
}
