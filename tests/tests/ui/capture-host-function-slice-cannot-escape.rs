// The slices a capture's host function gets are valid only while it runs (issue 30, item 4):
// one stored for later is refused, as for the `host` statement.
use std::sync::{Arc, Mutex};

use cudagraph::cudarc::driver::{CudaStream, PinnedHostSlice};

fn keep(s: &Arc<CudaStream>, h: &mut PinnedHostSlice<u32>) {
    let kept: Arc<Mutex<Option<&'static mut [u32]>>> = Arc::new(Mutex::new(None));
    let _ = cudagraph::capture(s, (h,), move |c, (mut h,)| {
        c.host((&mut h,), move |(h,)| {
            *kept.lock().unwrap() = Some(h);
        })
    });
}

fn main() {}
