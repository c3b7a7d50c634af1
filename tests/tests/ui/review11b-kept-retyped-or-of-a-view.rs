// Review 11b: a `Kept<T>` cannot change its element type (the exec's view is a `CudaSlice` of
// the kept buffer's own type), and only a whole `CudaSlice` the recording allocated can be
// kept, never a view of one (whose length and address would not be an allocation's).
use cudagraph::cudarc::driver::CudaSlice;
use cudagraph::{Capture, Kept};

fn retype(k: Kept<u8>) -> Kept<u32> {
    k
}

fn keep_a_view(c: &Capture, buf: &CudaSlice<u32>) -> cudagraph::Result<Kept<u32>> {
    c.keep(buf.slice(..))
}

fn main() {
    let _ = (retype, keep_a_view);
}
