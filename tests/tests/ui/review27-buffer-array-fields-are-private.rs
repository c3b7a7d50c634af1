// Review 27: a `BufferArray`'s elements cannot be reached as a field (which would change them
// without forgetting the memo), nor an array built with a memo of one's choosing.
use cudagraph::BufferArray;
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut a: BufferArray<u32> = vec![s.alloc_zeros::<u32>(16)?].into();
    a.slices[0] = s.alloc_zeros::<u32>(16)?;
    Ok(())
}
