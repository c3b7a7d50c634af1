// A graph-owned buffer starts with whatever its memory held: `alloc::<bool>` then a `copy` into
// a user's `CudaSlice<bool>`, read back on the host, would hand safe code `bool`s that are
// neither 0 nor 1. Its element type must be valid for every bit pattern.
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let mut cache = GraphCache::new();
    let mut flags = stream.alloc_zeros::<bool>(16)?;
    graph!(&mut cache, &stream, {
        let tmp = alloc::<bool>(16);
        copy(&tmp, &mut flags);
    })?;
    let host: Vec<bool> = stream.clone_dtoh(&flags)?;
    assert_eq!(host.len(), 16);
    // The builder's `alloc` has the same bound.
    let mut g = cache.builder(&stream);
    let _t = g.alloc::<bool>(4);
    Ok(())
}
