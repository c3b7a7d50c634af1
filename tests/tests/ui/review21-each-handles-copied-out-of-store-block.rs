// Review 21: an `EachHandles` copied out of the block its store lives in, then asked for a
// handle (a lazy store's `at` reads the store's kept elements).
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let mut g = std::mem::ManuallyDrop::new(Guards::<2>::new());
    let kept;
    {
        let mut store = EachStore::new();
        let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
        kept = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    }
    let _ = kept.at(1);
    Ok(())
}
