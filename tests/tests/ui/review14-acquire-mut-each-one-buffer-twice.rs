// Review 14: `__private::acquire_mut_each` is a safe `pub` function: safe code cannot hand it
// one buffer twice (two write handles and two guards of one buffer). Since session 18 it takes
// the elements of one slice (`EachMut`, from `__cudagraph_each_mut`): two of them over one
// vector at once are two mutable borrows of it.
use cudagraph::__private::{
    DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call,
};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    // (The stores outlive the guards, which may make a guard from a store.)
    let mut store = cudagraph::__private::EachStore::new();
    let mut store2 = cudagraph::__private::EachStore::new();
    let mut g = Guards::<2>::new();
    let first = v.__cudagraph_each_mut(&const { DistinctIndices::new([0]) });
    let again = v.__cudagraph_each_mut(&const { DistinctIndices::new([0]) });
    let _h = acquire_mut_each(&mut store, first, &s, &call, &const { PlaceIndices::new([0]) }, &mut g);
    let _k = acquire_mut_each(&mut store2, again, &s, &call, &const { PlaceIndices::new([1]) }, &mut g);
    Ok(())
}
