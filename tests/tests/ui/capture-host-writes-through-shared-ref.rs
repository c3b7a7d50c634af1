// A pinned host operand listed `&h` gives the closure a read-only `CaptureHostSlice`: a D2H copy
// into it, and a host function taking it `&mut`, are refused (issue 30, item 4).
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    // SAFETY: plain u32s.
    let h = unsafe { ctx.alloc_pinned_with_flags::<u32>(16, 0)? };
    let x = stream.alloc_zeros::<u32>(16)?;
    graph!(&mut cache, &stream, {
        capture(&h, &x, |s, (mut h, x)| -> cudagraph::Result<()> {
            s.copy_dtoh(&x, &mut h)?;
            s.host((&mut h,), |(h,)| h[0] = 1)
        });
    })
}
