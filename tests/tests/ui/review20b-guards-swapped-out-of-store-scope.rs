// Review 20b: an inner Guards filled from an inner store, swapped with an outer Guards; `made` after the
// inner store is gone.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::__private::EachStore;
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let mut outer = Guards::<2>::new();
    {
        let mut store = EachStore::new();
        let mut inner = Guards::<2>::new();
        let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
        let _ = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut inner);
        std::mem::swap(&mut outer, &mut inner);
        std::mem::forget(inner);
    }
    let _ = outer.made();
    std::mem::forget(outer);
    Ok(())
}
