// Review 21: a filled `__private::EachStore` keeps either the handles or the elements
// (`lazy`); safe code cannot switch it to the other (reading uninitialized handles, or making
// handles from elements it does not hold).
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = Guards::<2>::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let h = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    store.lazy = None;
    let _ = h.at(0);
    Ok(())
}
