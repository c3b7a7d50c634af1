// Review (host work in captures): one half of `split_at_mut` and the whole view both given to
// one host function as `&mut`: two `&mut [u32]` of overlapping memory in one run.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, PinnedHostSlice};

fn alias(s: &Arc<CudaStream>, h: &mut PinnedHostSlice<u32>) {
    let _ = cudagraph::capture(s, (h,), |c, (mut h,)| {
        let (mut a, _b) = h.split_at_mut(2);
        c.host((&mut a, &mut h), |(a, h)| {
            a[0] = 1;
            h[0] = 2;
        })
    });
}

fn main() {}
