// Review (host work in captures): a capture's host function hands its `&mut [u32]` to a
// thread that outlives the run (it would write the pinned buffer after the launch went on).
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, PinnedHostSlice};

fn escape(s: &Arc<CudaStream>, h: &mut PinnedHostSlice<u32>) {
    let _ = cudagraph::capture(s, (h,), |c, (mut h,)| {
        c.host((&mut h,), |(h,)| {
            std::thread::spawn(move || h[0] = 1);
        })
    });
}

fn main() {}
