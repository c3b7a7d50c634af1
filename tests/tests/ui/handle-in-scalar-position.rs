use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{GraphCache, graph, kernels};

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [u32]);
        fn scale(n: u32, a: u32, x: &[u32], y: &mut [u32]);
    }
}

// Only `&place` / `&mut place` operands are buffers; every other argument position takes plain
// values, never a handle, view or guard (the graph would not know the buffer).
fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let mut cache = GraphCache::new();
    let mut other = GraphCache::new();
    let mut x = stream.alloc_zeros::<u32>(1024)?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let z = stream.alloc_zeros::<u32>(1024)?;
    // SAFETY: only its address is used (never read).
    let pinned = unsafe { ctx.alloc_pinned::<u32>(1024) }?;
    let (_, guard) = cudagraph::__private::acquire(&z, &stream, &cudagraph::__private::begin_call(), 0);
    let mut g = other.builder(&stream);
    let xw = g.write(&mut x);
    let hr = g.read(&pinned);
    let view = z.as_view();
    let launch = k.fill(1024, xw).launch(cfg);
    graph!(&mut cache, &stream, {
        k.fill(1024, xw).launch(cfg);
        k.scale(1024, 1, view, &mut y).launch(cfg);
        k.scale(hr, 1, &z, &mut y).launch(cfg);
        k.scale(1024, guard, &z, &mut y).launch(cfg);
        k.scale(1024, launch, &z, &mut y).launch(cfg);
    })?;
    g.launch()
}
