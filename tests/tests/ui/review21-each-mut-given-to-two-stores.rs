// Review 21: one `EachMut` handed to two `acquire_mut_each` calls (two stores, two guard
// lists): the elements would be taken twice, and a lazy store would make handles from
// elements another call wrote handles of.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let (mut one, mut two) = (EachStore::new(), EachStore::new());
    let (mut g1, mut g2) = (Guards::<2>::new(), Guards::<2>::new());
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let a = acquire_mut_each(&mut one, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g1);
    let b = acquire_mut_each(&mut two, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g2);
    let _ = (a.at(0), b.at(0));
    Ok(())
}
