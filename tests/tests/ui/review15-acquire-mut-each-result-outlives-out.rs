// Review 15: the array `__private::acquire_mut_each` returns is a borrow of the caller's `out`
// store (written in place, then `assume_init_ref`): it cannot outlive the store.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let mut g = Guards::<2>::new();
    let elements = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let hs;
    {
        let mut store = cudagraph::__private::EachStore::new();
        hs = acquire_mut_each(&mut store, elements, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    }
    let _ = hs.at(0).len();
    Ok(())
}
