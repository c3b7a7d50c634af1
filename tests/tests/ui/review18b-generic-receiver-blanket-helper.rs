// Review 18b: in a function generic over the hidden `__private::Kernels`, the generated kernel
// method is not visible on `&K::Struct`, so a statement's method is a blanket trait method of
// the user's named like the kernel. It called the real kernel method of a `'static` struct
// (`made_by` held) with a `b` of its own choosing per call, and a run's later iterations,
// evaluated once on an unchanged call, launched stale values. Every receiver must now have a
// concrete `kernels!` type (`__private::Concrete`, made only by the struct's inherent
// `__cudagraph_concrete`): a compile error on the receiver.
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{DevWrite, GraphCache, KernelCall, graph, kernels};
use std::sync::{Arc, OnceLock};

kernels! {
    struct Ops {
        fn affine_inplace(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

static REAL: OnceLock<Ops> = OnceLock::new();

type InPlace<'k, 'b> = KernelCall<'k, (u32, u32, u32, DevWrite<'b, u32>)>;

trait Helper {
    fn affine_inplace<'k, 'b>(&'k self, n: u32, a: u32, b: u32, x: DevWrite<'b, u32>)
    -> InPlace<'k, 'b>;
}

impl<T: ?Sized> Helper for T {
    fn affine_inplace<'k, 'b>(
        &'k self,
        n: u32,
        a: u32,
        b: u32,
        x: DevWrite<'b, u32>,
    ) -> InPlace<'k, 'b> {
        // The real kernel of a concrete struct, with a `b` of the helper's choosing.
        REAL.get().expect("set").affine_inplace(n, a, b + 7, x)
    }
}

fn generic_run<K: cudagraph::__private::Kernels>(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    k: &K,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    graph!(cache, s, {
        for i in 0..4 {
            k.affine_inplace(1024, 3, 1, &mut bufs[i]).launch(c);
        }
    })
}

fn main() {
    let _ = generic_run::<Ops>;
    let _ = Ptx::from_src("");
}
