// Review 14: two rows of an array of arrays written in nested unrolled `for`s: each row is a
// group acquired in one loop (`grid[0]`, `grid[1]`), both borrowing `grid` mutably; the borrow
// checker refuses the second (it does not split an array by constant index), rather than two
// `&mut` to `grid` coexisting.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn iota(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let z = || s.alloc_zeros::<u32>(4);
    let mut grid: [[CudaSlice<u32>; 2]; 2] = [[z()?, z()?], [z()?, z()?]];
    let mut cache = GraphCache::new();
    graph!(&mut cache, &s, {
        for i in 0..2 {
            for j in 0..2 {
                k.iota(4, 1, 0, &mut grid[i][j]).launch(LaunchConfig::for_num_elems(4));
            }
        }
    })
}
