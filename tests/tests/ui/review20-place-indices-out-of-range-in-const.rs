// Review 20: a place number not below the call's place count is refused when the `const`
// `PlaceIndices` is evaluated (`acquire_mut_each` indexes its `Guards<N>` unchecked).
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0]) });
    let mut out = cudagraph::__private::EachStore::new();
    let mut g = Guards::<2>::new();
    const PLACES: PlaceIndices<1, 2> = PlaceIndices::new([2]);
    let _h = acquire_mut_each(&mut out, e, &s, &call, &PLACES, &mut g);
    Ok(())
}
