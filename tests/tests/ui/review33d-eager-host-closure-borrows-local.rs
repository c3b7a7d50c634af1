//! Review 33d: `eager!`'s `host` closure runs on a worker when the stream reaches it, after the
//! macro returned: as in `graph!`, it cannot borrow a local.

use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut count = 0u32;
    cudagraph::eager!(&stream, {
        host(|()| count += 1);
    })?;
    println!("{count}");
    Ok(())
}
