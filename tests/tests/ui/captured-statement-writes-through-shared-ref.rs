use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    // `x` is listed `&x`: the closure gets a read-only `CaptureSlice`, which `Capture::copy` cannot write.
    graph!(&mut cache, &stream, {
        capture(&x, &mut y, |s, (mut x, y)| -> cudagraph::Result<()> {
            s.copy(&y, &mut x)
        });
    })
}
