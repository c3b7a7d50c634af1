//! Empty nodes (`empty()` in `graph!`, `GraphBuilder::empty`) as join points, on the GPU: a
//! kernel after an empty node that joins a slow and a fast kernel starts only after the slow one
//! ended (its timestamp), graph and eager alike, and the plan has the edges.

mod common;

use common::{Result, gpu};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::{GraphCache, Mode, graph};

/// `(slow kernel's end, fast kernel's end, the joined kernel's start)`, ns.
fn stamps(cache: &mut GraphCache, builder: bool) -> Result<(u64, u64, u64)> {
    let (_ctx, s, k) = gpu()?;
    let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
    let (mut a, mut b, mut c) =
        (s.alloc_zeros::<u64>(1)?, s.alloc_zeros::<u64>(1)?, s.alloc_zeros::<u64>(1)?);
    let spins = 1 << 20;
    if builder {
        let mut g = cache.builder(&s);
        let (aw, bw, cw) = (g.write(&mut a), g.write(&mut b), g.write(&mut c));
        let slow = g.kernel(k.slow_stamp(spins, aw).launch(one));
        let fast = g.kernel(k.stamp(bw).launch(one));
        let joined = g.empty();
        g.after(joined, &[slow, fast]);
        let last = g.kernel(k.stamp(cw).launch(one));
        g.after(last, &[joined]);
        g.launch()?;
    } else {
        graph!(cache, &s, {
            let slow = k.slow_stamp(spins, &mut a).launch(one);
            let fast = k.stamp(&mut b).launch(one);
            let joined = empty().after(slow, fast);
            k.stamp(&mut c).launch(one).after(joined);
        })?;
    }
    Ok((s.clone_dtoh(&a)?[0], s.clone_dtoh(&b)?[0], s.clone_dtoh(&c)?[0]))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_after_an_empty_join_starts_after_both_joined_kernels() -> Result {
    let _serial = common::serial();
    for builder in [false, true] {
        for mode in [Mode::Graph, Mode::Eager] {
            let mut cache = GraphCache::new();
            cache.set_mode(mode);
            for round in 0..3 {
                let (slow_end, fast_end, last_start) = stamps(&mut cache, builder)?;
                assert!(
                    last_start >= slow_end && last_start >= fast_end,
                    "builder {builder}, {mode:?}, round {round}: the joined kernel started at \
                     {last_start} ns, before the slow one ended at {slow_end} or the fast one at \
                     {fast_end}"
                );
            }
        }
    }
    Ok(())
}

/// The plan (no GPU needed): slow and fast into the empty node, the empty node into the last
/// kernel, and no other edge (the two stamps share no buffer).
#[test]
fn the_plan_joins_through_the_empty_node() {
    let plan = cudagraph::plans()
        .find(|p| p.file.ends_with("empty.rs"))
        .expect("the graph! of this file is registered");
    assert_eq!(plan.nodes[2].kind, cudagraph::NodeKind::Empty);
    let mut edges = plan.edges();
    edges.sort_unstable();
    assert_eq!(edges, [(0, 2), (1, 2), (2, 3)], "slow, fast -> empty -> last");
}
