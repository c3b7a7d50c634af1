//! Review 7: `CapturedWork::run_eager` is `unsafe`: run outside the cache, a capture closure's
//! work would not be ordered with a buffer whose guard safe code dropped first.
use std::sync::Arc;

use cudagraph::__private::NodeParams;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream};

cudagraph::kernels! {
    pub struct Ops {
        fn slow_iota(n: u32, spins: u32, a: u32, b: u32, x: &mut [u32]);
    }
}
mod common {
    pub use super::Ops;
}

pub fn captured_work_run_eagerly_after_its_guard_was_dropped(
    stream: &Arc<CudaStream>,
    k: &common::Ops,
    buf: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let n = buf.len() as u32;
    let call = cudagraph::__private::begin_call();
    let (_, w, guard) = cudagraph::__private::acquire_mut(buf, stream, &call, 0);
    drop(guard);
    let params = cudagraph::__private::capture(stream, (w,), |cap, (mut v,)| {
        cap.kernel(
            k.slow_iota(n, 1 << 22, 1, 0, cap.write(&mut v)?)
                .launch(cudagraph::cudarc::driver::LaunchConfig::for_num_elems(n)),
        )?;
        Ok::<(), cudagraph::Error>(())
    });
    let site = cudagraph::NodeSite { label: "x", text: "x", file: "x", line: 1, column: 1 };
    match cudagraph::__private::node(&params) {
        Some(NodeParams::Captured(c)) => c.run_eager(&|| site.clone()),
        _ => Ok(()),
    }
}

fn main() {}
