//! Review 33d: `eager!`'s `capture` statement hands its closure views for `'s` only, as
//! `graph!`'s: storing one outside the closure is a compile error.

use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut y = stream.alloc_zeros::<u32>(4)?;
    let mut kept = None;
    cudagraph::eager!(&stream, {
        capture(&mut y, |_s, (y,)| {
            kept = Some(y);
            Ok::<(), cudagraph::Error>(())
        });
    })?;
    drop(kept);
    Ok(())
}
