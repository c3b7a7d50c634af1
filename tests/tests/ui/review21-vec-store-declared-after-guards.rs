// Review 21: the store inside a `Vec` (`#[may_dangle]` drop) declared after the guards, so
// that it drops first at the end of the scope, the guards (whose drop may read their array's
// store) after it.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let mut g = Guards::<2>::new();
    let mut stores = vec![EachStore::new()];
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut stores[0], e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    Ok(())
}
