// Review 15: the `out` store of `__private::acquire_mut_each` is an `EachStore` of the
// buffers' handles; copied out after the buffers are freed (to read it later), it still
// carries their borrow.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let mut store = cudagraph::__private::EachStore::new();
    {
        let mut g = Guards::<2>::new();
        let elements = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
        let _ = acquire_mut_each(&mut store, elements, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    }
    drop(v);
    let kept = store;
    std::mem::forget(kept);
    Ok(())
}
