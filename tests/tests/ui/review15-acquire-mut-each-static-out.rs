// Review 15: an `out` store of `__private::acquire_mut_each` typed with `'static` handles
// (to keep them past the buffers) makes the buffers' borrow `'static`.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice};
use cudagraph::__private::EachStore;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let mut store: EachStore<'static, CudaSlice<u32>, 2> = EachStore::new();
    let mut g = Guards::<2>::new();
    let elements = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store, elements, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    Ok(())
}
