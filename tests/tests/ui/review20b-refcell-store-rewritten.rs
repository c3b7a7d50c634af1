// Review 20b: store behind a RefCell: the RefMut dropped and the cell written again, then `made`.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::__private::EachStore;
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let cell = std::cell::RefCell::new(EachStore::new());
    let mut g = std::mem::ManuallyDrop::new(Guards::<2>::new());
    {
        let mut r = cell.borrow_mut();
        let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
        let _ = acquire_mut_each(&mut *r, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
    }
    *cell.borrow_mut() = EachStore::new();
    let _ = g.made();
    Ok(())
}
