use cudagraph::__private::{CopyNode, CudaStream, acquire, acquire_mut, begin_call, copy_on};
use cudagraph::cudarc::driver::{CudaSlice, PinnedHostSlice};

// Safe code cannot aim a readback kernel node (a small device-to-pinned copy) at another
// address, length or word size through the hidden `copy_on` that `graph!` expands to: its
// fields are private.
fn aim(stream: &CudaStream, x: &CudaSlice<u8>, out: &mut PinnedHostSlice<u8>) {
    let call = begin_call();
    let (r, _g1) = acquire(x, stream, &call, 0);
    let (_, w, _g2) = acquire_mut(out, stream, &call, 1);
    if let CopyNode::Readback(mut n) = copy_on(stream, r, w) {
        n.dst = 0xdead_0000;
        n.words = 1 << 40;
        n.word_bytes = 8;
    }
}

fn main() {}
