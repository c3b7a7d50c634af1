// Review 33c: as `review33c-capture-error-carries-a-view`, for the `capture` statement of
// `graph!`: the error is kept in `Error::Capture` and returned by the call.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{CaptureSliceMut, GraphCache, graph};

#[derive(Debug)]
struct Carry<'s>(CaptureSliceMut<'s, f32>);
impl std::fmt::Display for Carry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("carry")
    }
}
impl std::error::Error for Carry<'_> {}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    graph!(&mut cache, &stream, {
        capture(&mut y, |_, (y,)| Err(Carry(y)));
    })?;
    Ok(())
}
