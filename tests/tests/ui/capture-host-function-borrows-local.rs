// A capture's host function is kept with the recording and run by every launch, long after
// the closure returned (issue 30, item 4): it must own what it uses (`'static`), and be `Send`
// (it runs on a worker thread).
use std::rc::Rc;
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, PinnedHostSlice};

fn borrows(s: &Arc<CudaStream>, h: &PinnedHostSlice<u32>) {
    let total = std::sync::Mutex::new(0u32);
    let _ = cudagraph::capture(s, (h,), |c, (h,)| {
        c.host((&h,), |(h,)| *total.lock().unwrap() = h[0])
    });
}

fn not_send(s: &Arc<CudaStream>, h: &PinnedHostSlice<u32>) {
    let rc = Rc::new(0u32);
    let _ = cudagraph::capture(s, (h,), move |c, (h,)| {
        c.host((&h,), move |(h,)| drop((h, rc)))
    });
}

fn main() {}
