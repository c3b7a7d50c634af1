use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaSlice, CudaStream};
use cudagraph::__private::AcquireMut;

// Even through the hidden acquisition trait, a handle cannot outlive the buffer it points to.
fn escape(stream: &Arc<CudaStream>) -> cudagraph::DevWrite<'static, f32> {
    let mut tmp: CudaSlice<f32> = stream.alloc_zeros(16).unwrap();
    let (_r, w, _g) = tmp.acquire_mut(stream);
    w
}

fn main() {}
