// Review (issue 13): an `Exec` is `Send`, but it borrows its buffers: it cannot be moved to a
// thread that may outlive them.
use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

fn spawn(s: Arc<CudaStream>, mut y: CudaSlice<f32>) -> cudagraph::Result<()> {
    let mut exec = cudagraph::capture(&s, (&mut y,), |c, (mut v,)| {
        c.zero(&mut v)?;
        Ok::<(), cudagraph::Error>(())
    })?
    .instantiate()?;
    let t = std::thread::spawn(move || exec.launch(&s));
    drop(y);
    t.join().unwrap()
}

fn main() {}
