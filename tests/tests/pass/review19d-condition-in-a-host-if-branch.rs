// Review 19d (held): a device condition declared in a host `if` branch beside an outer one of
// the same name, and a node named like a condition (`let c = …launch`) between a condition's
// declaration and its statement. `graph!` resolves `c` by text (latest declaration in scope);
// both compile, with rustc's `c` the one `graph!` resolved (the per-condition marker types
// check it): the outer `c` after the `if`, the condition (not the node) in `device_if(c, …)`.
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{Condition, GraphCache, graph, kernels};
use std::sync::Arc;

kernels! {
    struct K {
        fn set_nonzero(c: Condition, v: &[u32]);
        fn add(n: u32, a: u32, x: &mut [u32]);
    }
}

fn in_a_branch(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    flag: bool,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let cfg = LaunchConfig::for_num_elems(1);
    graph!(cache, s, {
        let c = condition(0);
        if flag {
            let c = condition(1);
            device_if(c, { k.add(1, 1, &mut *x).launch(cfg); });
        }
        device_if(c, { k.add(1, 2, &mut *y).launch(cfg); });
    })
}

fn node_named_like_the_condition(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    v: &CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let cfg = LaunchConfig::for_num_elems(1);
    graph!(cache, s, {
        let c = condition(0);
        let c = k.set_nonzero(c, &*v).launch(cfg);
        device_if(c, { k.add(1, 2, &mut *y).launch(cfg); });
    })
}

fn main() {}
