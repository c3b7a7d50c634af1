// Review 23: a `GraphBuilder` handle of a `PinnedBuffer` carries the buffer's address and its
// allocation id, taken from one borrow. Swapping the buffer with another (`std::mem::swap`)
// while the handle lives would leave the handle naming memory the place no longer owns (and
// the other buffer's successor could reuse it): the borrow checker refuses it.
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(
    cache: &mut GraphCache,
    s: &CudaStream,
    y: &mut CudaSlice<u32>,
    mut a: PinnedBuffer<u32>,
    mut b: PinnedBuffer<u32>,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(s);
    let (yw, aw) = (g.write(y), g.write(&mut a));
    std::mem::swap(&mut a, &mut b);
    drop(b);
    g.copy(yw.read(), aw);
    g.launch()
}

fn main() {}
