use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Condition, GraphCache, graph, kernels};

// The driver refuses host and event nodes in a conditional node's body graph.
kernels! {
    struct K {
        fn set(c: Condition, v: &[u32]);
    }
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let _ = LaunchConfig::for_num_elems(1);
    let mut cache = GraphCache::new();
    let v = stream.alloc_zeros::<u32>(1)?;
    let e = Arc::new(ctx.new_event(None)?);
    graph!(&mut cache, &stream, {
        let c = condition(1);
        device_while(c, {
            host(move |()| println!("iteration"));
            event_record(&e);
            k.set(c, &v).launch((1, 1));
        });
    })
}
