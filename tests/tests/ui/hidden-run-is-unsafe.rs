use cudagraph::GraphCache;
use cudagraph::__private::{CudaStream, NodeParams, acquire_mut, begin_call, memset};
use cudagraph::cudarc::driver::CudaSlice;

// The hidden `GraphCache::run` that `graph!` expands to trusts its plan to describe every node's
// accesses (the edges come from the plan, so a wrong plan lets nodes race): it is an `unsafe fn`.
fn step(cache: &mut GraphCache, stream: &CudaStream, x: &mut CudaSlice<u32>) {
    let call = begin_call();
    let (_, w, guard) = acquire_mut(x, stream, &call, 0);
    let p = memset(w, 0xffu32);
    let plan = Box::leak(Box::new(cudagraph::Plan {
        file: "f",
        line: 1,
        places: &[],
        nodes: &[],
        conditions: 0,
        bodies: &[],
    }));
    let _ = cache.run(plan, &call, 0, stream, &[Some(NodeParams::Memset(&p))], &[guard]);
}

fn main() {}
