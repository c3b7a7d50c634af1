// Review (host work in captures): the host writes a pinned buffer (`as_mut_slice`) while a
// standalone exec whose host function writes it holds it; and drops a buffer bound with
// `Released::bind` while the exec is alive. Both must be borrow errors: a launch's host
// function would race the host's write, or write freed memory.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaStream, PinnedHostSlice};

fn race(s: &Arc<CudaStream>, mut h: PinnedHostSlice<u32>, mut h2: PinnedHostSlice<u32>) {
    let mut exec = cudagraph::capture(s, (&mut h,), |c, (mut h,)| {
        c.host((&mut h,), |(h,)| h[0] += 1)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    exec.launch(s).unwrap();
    h.as_mut_slice().unwrap()[0] = 5;
    exec.launch(s).unwrap();
    let mut exec = exec.release().bind((&mut h2,));
    drop(h2);
    exec.launch(s).unwrap();
}

fn main() {}
