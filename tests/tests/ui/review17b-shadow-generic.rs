// Review 17b: a generic receiver bounded on the hidden `__private::Kernels` and a helper trait:
// the helper named like a kernel is not found on the receiver's struct (the generated method
// is the only one a statement reaches), so it cannot pass for the `kernels!` method.
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{DevWrite, GraphCache, KernelCall, graph};

trait Shadow {
    fn scale<'k, 'b>(
        &'k self,
        n: u32,
        x: DevWrite<'b, u32>,
    ) -> KernelCall<'k, (u32, u32, DevWrite<'b, u32>)>;
}

fn run<K: cudagraph::__private::Kernels + Shadow>(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &K,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let cfg = LaunchConfig::for_num_elems(1024);
    graph!(cache, stream, {
        for i in 0..2 {
            k.scale(1024, &mut bufs[i]).launch(cfg);
        }
    })
}

fn main() {
    let _ = run::<u8>;
}
