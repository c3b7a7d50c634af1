// Review 19c: legitimate receivers must still compile with the `Concrete` check (2f4a346):
// a field (`self.k`, `w.k`), a dereference (`(*k)`, `*b` of a `Box`), a reference to a
// reference (`(&k)`, a temporary, is refused with E0515 as before 2f4a346: `kernels`' result
// borrows the temporary), and a function generic over `K: Kernels<Struct = K2>` whose struct is
// concrete.
use cudagraph::__private::Kernels;
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K2 {
        fn bump(n: u32, b: u32, x: &mut [u32]);
    }
}

struct Holder {
    k: K2,
}

impl Holder {
    fn run(&self, s: &Arc<CudaStream>, x: &mut CudaSlice<u32>) -> cudagraph::Result<()> {
        let c = LaunchConfig::for_num_elems(1024);
        graph!(&mut GraphCache::new(), s, {
            self.k.bump(1024, 1, &mut *x).launch(c);
        })
    }
}

fn forms(
    k: &K2,
    kk: &&K2,
    b: Box<K2>,
    w: &Holder,
    s: &Arc<CudaStream>,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    graph!(&mut GraphCache::new(), s, {
        (*k).bump(1024, 1, &mut *x).launch(c);
        kk.bump(1024, 3, &mut *x).launch(c);
        (*b).bump(1024, 4, &mut *x).launch(c);
        w.k.bump(1024, 5, &mut *x).launch(c);
    })
}

fn generic<K: Kernels<Struct = K2>>(
    k: &K,
    s: &Arc<CudaStream>,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = LaunchConfig::for_num_elems(1024);
    graph!(&mut GraphCache::new(), s, {
        for _i in 0..2 {
            k.bump(1024, 1, &mut *x).launch(c);
        }
    })
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K2::load(&ctx, Ptx::from_src("")) }?;
    let mut x = s.alloc_zeros::<u32>(1024)?;
    let _ = (Holder::run, forms, generic::<K2>);
    generic(&&k, &s, &mut x)
}

fn main() {
    // Compiled, not run (no GPU needed).
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
