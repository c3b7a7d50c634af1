// Review 20b: the guards erased into a trait object without their lifetime in the trait.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::__private::EachStore;
trait Made { fn m(&mut self) -> usize; }
impl<const N: usize> Made for Guards<'_, N> { fn m(&mut self) -> usize { self.made().len() } }
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut v = vec![s.alloc_zeros::<u32>(16)?, s.alloc_zeros::<u32>(16)?];
    let call = begin_call();
    let mut b2: Option<Box<dyn Made + '_>> = None;
    {
        let mut store = EachStore::new();
        let mut g = Guards::<2>::new();
        let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
        let _ = acquire_mut_each(&mut store, e, &s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
        b2 = Some(Box::new(g));
    }
    let _ = b2.as_mut().unwrap().m();
    Ok(())
}
