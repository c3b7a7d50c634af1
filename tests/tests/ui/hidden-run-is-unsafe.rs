use cudagraph::GraphCache;
use cudagraph::__private::{CudaStream, NodeParams, acquire_mut, memset};
use cudagraph::cudarc::driver::CudaSlice;

// The hidden `GraphCache::run` that `graph!` expands to trusts its plan to describe every node's
// accesses (the edges come from the plan, so a wrong plan lets nodes race): it is an `unsafe fn`.
fn step(cache: &mut GraphCache, stream: &CudaStream, x: &mut CudaSlice<u32>) {
    let (_, w, _guard) = acquire_mut(x, stream);
    let p = memset(w, 0xffu32);
    let plan = Box::leak(Box::new(cudagraph::Plan {
        file: "f",
        line: 1,
        places: &[],
        nodes: &[],
        conditions: 0,
    }));
    let _ = cache.run(plan, 0, stream, &[Some(NodeParams::Memset(p))]);
}

fn main() {}
