use cudagraph::cudarc::driver::{CudaContext, DriverError};
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let mut kept = None;
    graph!(&mut cache, &stream, {
        capture(&x, &mut y, |_, (x, _y)| -> Result<(), DriverError> {
            kept = Some(x);
            Ok(())
        });
    })?;
    drop(kept);
    Ok(())
}
