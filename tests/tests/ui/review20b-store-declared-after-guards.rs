// Review 20b: store declared after the guards: dropped first, while the guards (read by `made`/Drop) live on.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::__private::EachStore;
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let mut g = Guards::<2>::new();
    let mut store = EachStore::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    Ok(())
}
