// Review 21: an element replaced (the old buffer freed) while the lazy store keeps it, then
// `made` (whose guards are made from the kept elements): the freed buffer would be read.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = std::mem::ManuallyDrop::new(Guards::<2>::new());
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    v[0] = s.null::<u32>()?;
    let _ = g.made();
    Ok(())
}
