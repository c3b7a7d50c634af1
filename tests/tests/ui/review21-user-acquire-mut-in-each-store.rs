// Review 21: a user type with its own `AcquireMut` (unsealed, its `inert_write` overridden)
// but no `PlaceMut`, as the element type of a store and of `acquire_mut_each`.
use cudagraph::__private::{
    Acquire, AcquireMut, CudaStream, DisjointMut as _, DistinctIndices, EachStore, Guard, Guards,
    PlaceIndices, acquire_mut_each, begin_call,
};
use cudagraph::{DevRead, DevWrite};

struct Mine;
impl Acquire for Mine {
    type Read<'a> = DevRead<'a, u32>;
    fn acquire<'a>(&'a self, _: &'a CudaStream) -> (DevRead<'a, u32>, Guard<'a>) {
        unimplemented!()
    }
}
impl AcquireMut for Mine {
    type Write<'a> = DevWrite<'a, u32>;
    fn acquire_mut<'a>(&'a mut self, _: &'a CudaStream) -> (DevRead<'a, u32>, DevWrite<'a, u32>, Guard<'a>) {
        unimplemented!()
    }
    unsafe fn inert_write<'a>(&'a self) -> Option<DevWrite<'a, u32>> {
        unimplemented!()
    }
}

fn go(s: &CudaStream) {
    let mut v = vec![Mine, Mine];
    let call = begin_call();
    let mut store = EachStore::new();
    let mut g = Guards::<2>::new();
    let e = v.__cudagraph_each_mut(&const { DistinctIndices::new([0, 1]) });
    let _ = acquire_mut_each(&mut store, e, s, &call, &const { PlaceIndices::new([0, 1]) }, &mut g);
}

fn main() {}
