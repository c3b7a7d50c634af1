// Review 20b: two arrays into one Guards, the first store in a block that ends before the second call.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::__private::EachStore;
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let mut w = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let mut g = std::mem::ManuallyDrop::new(Guards::<4>::new());
    {
        let mut store = EachStore::new();
        let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
        let _ = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    }
    let mut store2 = EachStore::new();
    let e = w.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store2, e, &s, &call, &const { PlaceIndices::new([2, 3]) }, &mut g);
    let _ = g.made();
    Ok(())
}
