// Review 21: a store filled by one call and given to a second call once the first call's
// `EachHandles` is no longer used; the first call's guards (whose `Remade` entry points at the
// store) are made after the second call rewrote it.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let mut w = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g1 = std::mem::ManuallyDrop::new(Guards::<2>::new());
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g1);
    let mut g2 = std::mem::ManuallyDrop::new(Guards::<2>::new());
    let f = w.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store, f, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g2);
    let _ = g1.made();
    Ok(())
}
