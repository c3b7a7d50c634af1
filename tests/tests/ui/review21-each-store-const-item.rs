// Review 21: a store from a `const` item (a fresh temporary at each use, no local to
// outlive): its handles used after the statement that filled it.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice};

const STORE: EachStore<'static, CudaSlice<u32>, 2> = EachStore::new();

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?, s.null::<u32>()?];
    let call = begin_call();
    let mut g = Guards::<2>::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let h = acquire_mut_each(&mut STORE, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    let _ = h.at(0);
    Ok(())
}
