// Review 15: one `out` store given to `__private::acquire_mut_each` twice: the second call
// cannot overwrite the handles while the first call's array is still used.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(32)?];
    let mut w = vec![s.alloc_zeros::<u32>(64)?, s.alloc_zeros::<u32>(128)?];
    let call = begin_call();
    let mut store = cudagraph::__private::EachStore::new();
    let mut g = Guards::<4>::new();
    let ab = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let first = acquire_mut_each(&mut store, ab, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    let cd = w.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let second = acquire_mut_each(&mut store, cd, &s, &call, &const { PlaceIndices::new([2, 3]) }, &mut g);
    let _ = (first.at(0).len(), second.at(0).len());
    Ok(())
}
