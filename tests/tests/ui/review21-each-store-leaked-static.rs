// Review 21: a store leaked (`Box::leak`, never freed), filled from local buffers, its handles
// asked after the buffers are freed: the leak's lifetime is the buffers' borrow, not `'static`.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let store = Box::leak(Box::new(EachStore::new()));
    let mut g = Guards::<2>::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let h = acquire_mut_each(store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    drop(v);
    let _ = h.at(0);
    Ok(())
}
