// Review 21: the `EachMut` borrow of an array's elements, cloned, would give two stores (one
// of them lazy, making handles from the elements) two exclusive borrows of one buffer.
use cudagraph::__private::{DisjointMut as _, DistinctIndices};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.null::<u32>()?];
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0]) });
    let again = e.clone();
    drop((e, again));
    Ok(())
}
