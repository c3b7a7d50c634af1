// Review 27: the `EachMut` of a `BufferArray` holds a raw pointer to the array's memo (and to
// its elements): the array cannot be moved (or dropped) while it is alive, so
// `acquire_mut_each` cannot write a memo at the old place nor remember elements of an array
// that is no longer there.
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
    let moved = a;
    let h = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    let _ = (h.at(0), moved);
    Ok(())
}
