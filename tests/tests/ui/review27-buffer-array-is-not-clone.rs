// Review 27: a `BufferArray` is not `Clone`. A clone would copy the memo (the last call's
// element addresses) next to elements that are copies at other addresses (cudarc's
// `CudaSlice: Clone` allocates): the clone's first call would hit the memo with the graph of
// the originals and launch it on their memory, not the clone's.
use cudagraph::BufferArray;
use cudagraph::cudarc::driver::CudaContext;

fn needs_clone<T: Clone>(_: &T) {}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let a: BufferArray<u32> = vec![s.alloc_zeros::<u32>(16)?].into();
    needs_clone(&a);
    Ok(())
}
