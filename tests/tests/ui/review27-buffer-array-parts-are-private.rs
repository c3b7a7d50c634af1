// Review 27: the elements of a `BufferArray` are reachable mutably only through methods that
// forget its memo (`DerefMut`, `as_mut_slice`, `push`) or through `graph!`'s one-loop
// acquisition: `parts` (elements and memo together, unforgotten) is not public.
use cudagraph::BufferArray;
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut a: BufferArray<u32> = vec![s.alloc_zeros::<u32>(16)?].into();
    let (elements, _memo) = a.parts();
    elements[0] = s.alloc_zeros::<u32>(16)?;
    Ok(())
}
