// Review 14: the handles `__private::acquire_mut_into` and `acquire_mut_each` return borrow the
// buffer: it cannot be freed while a handle (or the `Guards` holding its guard) is alive.
use cudagraph::__private::{
    DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, acquire_mut_into, begin_call,
};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut a = s.alloc_zeros::<u32>(16)?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    // (The store outlives the guards, which may make a guard from it.)
    let mut store = cudagraph::__private::EachStore::new();
    let mut g = Guards::<3>::new();
    let (_r, w) = acquire_mut_into(&mut a, &s, &call, 0, &mut g);
    let elements = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let hs = acquire_mut_each(&mut store, elements, &s, &call, &const { PlaceIndices::new([1, 2]) }, &mut g);
    drop(a);
    drop(v);
    let _ = (w.len(), hs.at(0).len());
    Ok(())
}
