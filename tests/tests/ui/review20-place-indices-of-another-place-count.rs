// Review 20: place numbers checked against one place count cannot index a smaller `Guards`:
// `PlaceIndices<M, N>` and `Guards<N>` share `N`.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0]) });
    let mut out = cudagraph::__private::EachStore::new();
    let mut g = Guards::<1>::new();
    static BIG: PlaceIndices<1, 8> = PlaceIndices::new([7]);
    let _h = acquire_mut_each(&mut out, e, &s, &call, &BIG, &mut g);
    Ok(())
}
