// Review 27: after `acquire_mut_each` of a `BufferArray` (its store keeping the elements, the
// memo remembered or hit), an element cannot be replaced through `IndexMut` while the handles
// are still to be made from the store: the store's borrow of the array lasts as long.
use cudagraph::BufferArray;
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut a: BufferArray<u32> = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?].into();
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = Guards::<2>::new();
    let e = a.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let h = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    a[0] = s.alloc_zeros::<u32>(16)?;
    let _ = h.at(0);
    Ok(())
}
