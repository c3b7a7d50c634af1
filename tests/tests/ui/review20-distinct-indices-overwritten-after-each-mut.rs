// Review 20: `EachMut` keeps `&'static` indices, bounds-checked when it is made: a leaked
// `&'static mut DistinctIndices` cannot be overwritten with an index out of range afterwards
// (the `'static` shared borrow lasts for ever).
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?];
    let idx: &'static mut DistinctIndices<1> = Box::leak(Box::new(DistinctIndices::new([0])));
    let e = v.__cudagraph_each_mut(idx);
    *idx = DistinctIndices::new([1000]);
    let call = begin_call();
    let mut out = cudagraph::__private::EachStore::new();
    let mut g = Guards::<1>::new();
    let _h = acquire_mut_each(&mut out, e, &s, &call, &const { PlaceIndices::new([0]) }, &mut g);
    Ok(())
}
