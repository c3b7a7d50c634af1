use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let mut count = 0u32;
    // The closure runs after the call returns (when the launch reaches it): it cannot borrow
    // a local.
    graph!(&mut cache, &stream, {
        host(|()| count += 1);
    })?;
    println!("{count}");
    Ok(())
}
