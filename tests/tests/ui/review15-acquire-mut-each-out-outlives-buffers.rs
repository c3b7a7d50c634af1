// Review 15: an `out` store declared before the buffers (and the `Guards` dropped with them):
// the array `__private::acquire_mut_each` returns still borrows the buffers, so it cannot be
// used once they are freed, however long the store lives.
use cudagraph::__private::{
    DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call,
};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let call = begin_call();
    let mut store = cudagraph::__private::EachStore::new();
    let hs;
    {
        let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
        let mut g = Guards::<2>::new();
        const IDX: DistinctIndices<2> = DistinctIndices::new([0, 1]);
        const PLACES: PlaceIndices<2, 2> = PlaceIndices::new([0, 1]);
        let elements = v.__cudagraph_each_mut(&IDX);
        hs = acquire_mut_each(&mut store, elements, &s, &call, &PLACES, &mut g);
    }
    let _ = hs.at(0).len();
    Ok(())
}
