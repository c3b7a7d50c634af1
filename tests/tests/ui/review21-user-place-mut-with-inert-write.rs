// Review 21: a user type that is a `PlaceMut` with its own `inert_write` (the hidden trait
// method a lazy store makes handles with), which could return a handle of another buffer
// than the one acquired. `AcquireMut` is nameable and unsealed, `Place` is sealed.
use cudagraph::__private::{Acquire, AcquireMut, CudaStream, Guard};
use cudagraph::{DevRead, DevWrite, Place, PlaceMut};

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
impl Place for Mine {}
impl PlaceMut for Mine {}

fn main() {}
