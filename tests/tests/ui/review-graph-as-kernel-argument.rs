// Review (issue 13): a captured `Graph` is a place of `graph!` only for `child(&mut g)`: it is no
// kernel argument, copy source or capture operand.
use cudagraph::cudarc::driver::{CudaContext, DriverError, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn mix(n: u32, x: &[u32], y: &mut [u32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let mut cache = GraphCache::new();
    let mut x = stream.alloc_zeros::<u32>(1024)?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let mut g = cudagraph::capture(&stream, (&mut x,), |s, (mut x,)| {
        s.stream().memset_zeros(&mut x)?;
        Ok::<(), DriverError>(())
    })?;
    graph!(&mut cache, &stream, {
        k.mix(1024, &g, &mut y).launch(LaunchConfig::for_num_elems(1024));
        capture(&g, &mut y, |_, (_g, _y)| -> Result<(), DriverError> { Ok(()) });
    })?;
    Ok(())
}
