use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let mut cache = GraphCache::new();
    let mut y = stream.alloc_zeros::<u32>(16)?;
    let flag = true;
    graph!(&mut cache, &stream, {
        if flag {
            let tmp = alloc::<u32>(16);
            zero(&mut tmp);
            copy(&tmp, &mut y);
        }
    })
}
