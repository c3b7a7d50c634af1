use cudagraph::cudarc::driver::{CudaContext, DriverError};
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let s: &cudagraph::cudarc::driver::CudaStream = &stream;
    graph!(&mut cache, s, {
        capture(&x, &mut y, |c, (x, mut y)| -> Result<(), DriverError> {
            c.stream().memcpy_dtod(&x, &mut y)
        });
    })
}
