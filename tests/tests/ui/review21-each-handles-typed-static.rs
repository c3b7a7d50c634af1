// Review 21: the `EachHandles` of a local store and local buffers typed `'static` (to keep
// making handles, or guards, after both are gone).
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachHandles, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = Guards::<2>::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let h: EachHandles<'static, CudaSlice<u32>, 2> =
        acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    let _ = h.at(0);
    Ok(())
}
