// Review 20b: a function fills Guards from its own local store and returns them.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::__private::EachStore;
fn fill<'a>(v: &'a mut Vec<cudagraph::cudarc::driver::CudaSlice<u32>>, s: &'a cudagraph::cudarc::driver::CudaStream) -> Guards<'a, 2> {
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = Guards::<2>::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store, e, s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    g
}
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let mut g = fill(&mut v, &s);
    let _ = g.made();
    Ok(())
}
