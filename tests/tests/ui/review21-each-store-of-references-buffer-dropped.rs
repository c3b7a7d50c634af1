// Review 21: an array of `&mut` buffers kept by a lazy store (its elements are the references):
// a referenced buffer freed, then a handle made from its reference.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let (mut a, mut b) = (s.null::<u32>()?, s.null::<u32>()?);
    let mut refs = [&mut a, &mut b];
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = Guards::<2>::new();
    let e = refs.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let h = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    drop(a);
    let _ = h.at(0).len();
    std::mem::forget(g);
    Ok(())
}
