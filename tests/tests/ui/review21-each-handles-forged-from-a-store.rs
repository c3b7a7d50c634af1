// Review 21: `__private::EachHandles` is what `acquire_mut_each` returns; made by hand around a
// fresh `EachStore` (no handle written, no element kept), its `at` would read uninitialized
// handles. Its field is private: only `acquire_mut_each` makes one.
use cudagraph::__private::{EachHandles, EachStore};
use cudagraph::cudarc::driver::CudaSlice;

fn main() {
    let store: EachStore<'_, CudaSlice<u32>, 2> = EachStore::new();
    let h = EachHandles(&store);
    let _ = h.at(0);
}
