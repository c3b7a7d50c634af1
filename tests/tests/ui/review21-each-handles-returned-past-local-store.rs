// Review 21: a function that fills a local store and returns its `EachHandles` (`Copy`), so
// that the caller makes handles from a store that is gone.
use cudagraph::__private::{DisjointMut as _, DistinctIndices, EachHandles, EachStore, Guards, PlaceIndices, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn fill<'a>(
    v: &'a mut Vec<CudaSlice<u32>>,
    s: &'a CudaStream,
    g: &mut Guards<'a, 2>,
) -> EachHandles<'a, CudaSlice<u32>, 2> {
    let call = begin_call();
    let mut store = EachStore::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    acquire_mut_each(&mut store, e, s, &call, &const { PlaceIndices::new([0, 1]) }, g)
}

fn main() {}
