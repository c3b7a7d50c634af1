//! Review 33d: `eager!`'s `host` statement takes pinned host memory only, as `graph!`'s: a
//! device buffer given to the closure is a compile error.

use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut d = stream.alloc_zeros::<u32>(4)?;
    cudagraph::eager!(&stream, {
        host(&mut d, move |(d,)| d[0] = 1);
    })?;
    Ok(())
}
