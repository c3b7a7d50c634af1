use cudagraph::cudarc::driver::{CudaContext, DriverError};
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let _ = (&x, &mut y);
    graph!(&mut cache, &stream, {
        capture(|s, ()| -> Result<(), DriverError> { s.stream().synchronize() });
    })
}
