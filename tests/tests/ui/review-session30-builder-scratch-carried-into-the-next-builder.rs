// Review of session 30: a graph-owned buffer (`GraphBuilder::alloc`) exists only while its
// launch runs between its alloc and free nodes. Its handle cannot be carried past `launch` into
// the cache's next builder (whose first graph-owned buffer has the same slot), where a readback
// would read graph memory freed by the first launch: it borrows the cache.
use std::sync::Arc;

use cudagraph::cudarc::driver::CudaStream;
use cudagraph::{GraphCache, PinnedBuffer};

fn attempt(cache: &mut GraphCache, s: &Arc<CudaStream>) -> cudagraph::Result<()> {
    let mut out = PinnedBuffer::<u32>::zeros(s, 16)?;
    let kept = {
        let mut g = cache.builder(s);
        let t = g.alloc::<u32>(16);
        g.memset(t.write(), 7u32);
        g.launch()?;
        t
    };
    let mut g = cache.builder(s);
    let w = g.write(&mut out);
    let _fresh = g.alloc::<u32>(16);
    g.copy(kept.read(), w);
    g.launch()
}

fn main() {}
