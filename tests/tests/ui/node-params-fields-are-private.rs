use cudagraph::GraphCache;
use cudagraph::__private::{CudaStream, NodeParams, acquire_mut, begin_call, memset};
use cudagraph::cudarc::driver::CudaSlice;

// Safe code cannot aim a node at an arbitrary device address through the hidden items `graph!`
// expands to: node parameters are built from handles only, and their fields are private.
fn step(cache: &mut GraphCache, stream: &CudaStream, x: &mut CudaSlice<u32>) {
    let (_, w, _guard) = acquire_mut(x, stream, &begin_call(), 0);
    let mut p = memset(w, 0xffu32);
    p.raw.dst = 0xdead_0000;
    p.dst_tag = 0;
    let _ = (cache, NodeParams::Memset(&p));
}

fn main() {}
