// Review 20: two elements of one array at one place number (one `Guards` slot written twice
// unchecked) are refused when the `const` `PlaceIndices` is evaluated.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let mut out = cudagraph::__private::EachStore::new();
    let mut g = Guards::<2>::new();
    const PLACES: PlaceIndices<2, 2> = PlaceIndices::new([1, 1]);
    let _h = acquire_mut_each(&mut out, e, &s, &call, &PLACES, &mut g);
    Ok(())
}
