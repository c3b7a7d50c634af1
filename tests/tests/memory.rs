//! Graph-owned memory (`let tmp = alloc::<T>(n);` in `graph!`, `GraphBuilder::alloc`): a
//! scratch buffer made by a memory allocation node and freed by a memory free node after its
//! last use. GPU tests compare every result with the same statements run eagerly (a
//! `cuMemAllocAsync` / `cuMemFreeAsync` pair), exactly (integer kernels); the plan tests need no
//! GPU.
//!
//! Written without a GPU at hand: the GPU tests were compiled but NOT yet run on a GPU.

mod common;

use common::{Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{GraphCache, Mode, NodeKind, eager, graph};

fn cfg(n: u32) -> LaunchConfig {
    LaunchConfig::for_num_elems(n)
}

/// A kernel chain through a scratch buffer: `tmp = iota(a, b)`, `out = affine(tmp)`,
/// `tmp2 = mix(out)`… in one `graph!`, `calls` times with changing scalars and sizes.
fn chain(
    cache: &mut GraphCache,
    s: &std::sync::Arc<CudaStream>,
    k: &common::Ops,
    n: u32,
    a: u32,
    out: &mut CudaSlice<u32>,
) -> Result {
    graph!(cache, s, {
        let tmp = alloc::<u32>(n as usize);
        k.iota(n, a, 7, &mut tmp).launch(cfg(n));
        k.affine_inplace(n, 3, a, &mut tmp).launch(cfg(n));
        k.mix(n, &tmp, &mut *out).launch(cfg(n));
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_scratch_buffer_carries_a_kernel_chain_like_a_user_buffer_eagerly() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 1000u32;
    let mut cache = GraphCache::new();
    let mut out = s.alloc_zeros::<u32>(n as usize)?;
    let mut held = s.alloc_zeros::<u32>(n as usize)?;
    let mut want = s.alloc_zeros::<u32>(n as usize)?;
    for (call, a) in [5u32, 5, 9, 11].into_iter().enumerate() {
        chain(&mut cache, &s, &k, n, a, &mut out)?;
        // The same statements eagerly, on a buffer the test holds.
        eager!(&s, {
            k.iota(n, a, 7, &mut held).launch(cfg(n));
            k.affine_inplace(n, 3, a, &mut held).launch(cfg(n));
            k.mix(n, &held, &mut want).launch(cfg(n));
        })?;
        let mut model = host::iota(n, a, 7);
        host::affine_inplace(&mut model, 3, a);
        let got = s.clone_dtoh(&out)?;
        assert_same(&got, &s.clone_dtoh(&want)?, &format!("call {call}: graph vs eager"));
        assert_same(&got, &host::mix(&model), &format!("call {call}: graph vs host model"));
    }
    let st = cache.stats();
    assert_eq!(st.builds, 1, "one variant");
    assert_eq!(st.exec_updates, 0, "never a whole-exec update of a graph with memory nodes");
    assert!(st.node_updates > 0, "the changed scalars went per node: {st:?}");
    assert_eq!(cache.graph_owned_bytes(), n as usize * 4);
    let usage = cudagraph::graph_mem_usage(s.context())?;
    assert!(usage.reserved_high >= u64::from(n) * 4, "{usage:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_changed_scratch_size_is_a_reinstantiation_not_a_whole_exec_update() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut cache = GraphCache::new();
    for (call, n) in [256u32, 256, 512, 300, 300].into_iter().enumerate() {
        let mut out = s.alloc_zeros::<u32>(n as usize)?;
        chain(&mut cache, &s, &k, n, 3, &mut out)?;
        let mut model = host::iota(n, 3, 7);
        host::affine_inplace(&mut model, 3, 3);
        assert_same(&s.clone_dtoh(&out)?, &host::mix(&model), &format!("call {call}, n {n}"));
    }
    let st = cache.stats();
    assert_eq!(st.builds, 1);
    assert_eq!(st.exec_updates, 0);
    assert_eq!(st.reinstantiations, 2, "512 and 300: {st:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_explicit_free_and_two_scratch_buffers_with_an_if_and_a_copy_out() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 777u32;
    let mut out = s.alloc_zeros::<u32>(n as usize)?;
    let mut out_eager = s.alloc_zeros::<u32>(n as usize)?;
    let (mut h1, mut h2) = (s.alloc_zeros::<u32>(n as usize)?, s.alloc_zeros::<u32>(n as usize)?);
    let mut cache = GraphCache::new();
    for (call, twice) in [false, true, true, false].into_iter().enumerate() {
        graph!(&mut cache, &s, {
            let t1 = alloc::<u32>(n as usize);
            let t2 = alloc::<u32>(n as usize);
            k.iota(n, 2, 1, &mut t1).launch(cfg(n));
            if twice {
                k.affine(n, 5, 1, &t1, &mut t2).launch(cfg(n));
                copy(&t2, &mut t1);
            }
            free(&mut t2);
            copy(&t1, &mut out);
        })?;
        eager!(&s, {
            k.iota(n, 2, 1, &mut h1).launch(cfg(n));
            if twice {
                k.affine(n, 5, 1, &h1, &mut h2).launch(cfg(n));
                copy(&h2, &mut h1);
            }
            copy(&h1, &mut out_eager);
        })?;
        let got = s.clone_dtoh(&out)?;
        assert_same(&got, &s.clone_dtoh(&out_eager)?, &format!("call {call}"));
    }
    assert_eq!(cache.len(), 2, "two variants");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn scratch_in_eager_mode_is_a_stream_ordered_pair_and_matches_the_graph() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 4096u32;
    let mut graph_out = s.alloc_zeros::<u32>(n as usize)?;
    let mut eager_out = s.alloc_zeros::<u32>(n as usize)?;
    let mut g = GraphCache::new();
    let mut e = GraphCache::new();
    e.set_mode(Mode::Eager);
    for a in [1u32, 2, 3] {
        chain(&mut g, &s, &k, n, a, &mut graph_out)?;
        chain(&mut e, &s, &k, n, a, &mut eager_out)?;
        assert_same(&s.clone_dtoh(&graph_out)?, &s.clone_dtoh(&eager_out)?, "graph vs eager");
    }
    assert_eq!(e.stats().eager_calls, 3);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_scratch_with_auto_free_and_explicit_free() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 513u32;
    let mut cache = GraphCache::new();
    for a in [4u32, 4, 6] {
        let mut out = s.alloc_zeros::<u32>(n as usize)?;
        let mut out2 = s.alloc_zeros::<u32>(n as usize)?;
        let mut g = cache.builder(&s);
        let (ow, ow2) = (g.write(&mut out), g.write(&mut out2));
        let t = g.alloc::<u32>(n as usize);
        let u = g.alloc::<u32>(n as usize);
        g.kernel(k.iota(n, a, 0, t.write()).launch(cfg(n)));
        g.kernel(k.affine(n, 2, 3, t.read(), u.write()).launch(cfg(n)));
        g.free(t);
        g.kernel(k.mix(n, u.read(), ow).launch(cfg(n)));
        g.copy(u.read(), ow2);
        g.launch()?; // `u` is freed here, after its last use
        let model = host::affine(&host::iota(n, a, 0), 2, 3);
        assert_same(&s.clone_dtoh(&out)?, &host::mix(&model), "builder: mix");
        assert_same(&s.clone_dtoh(&out2)?, &model, "builder: copy");
    }
    assert_eq!(cache.stats().builds, 1);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_use_after_free_is_an_error_and_nothing_runs() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 64u32;
    let mut out = s.alloc_zeros::<u32>(n as usize)?;
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&s);
    let ow = g.write(&mut out);
    let t = g.alloc::<u32>(n as usize);
    g.kernel(k.iota(n, 1, 1, t.write()).launch(cfg(n)));
    g.free(t);
    g.kernel(k.mix(n, t.read(), ow).launch(cfg(n)));
    let e = g.launch().expect_err("a use after free");
    assert!(e.to_string().contains("after its free node"), "{e}");
    assert_eq!(cache.stats().launches, 0);
    assert_same(&s.clone_dtoh(&out)?, &vec![0; n as usize], "nothing ran");
    Ok(())
}

/// The plan (no GPU): the alloc node first, the free node after the last use, every use
/// between them by the hazard edges.
#[test]
fn the_plan_orders_every_use_between_the_alloc_and_the_free_node() {
    let plan = cudagraph::plans()
        .find(|p| p.file.ends_with("memory.rs") && p.nodes.iter().any(|n| n.label == "t2"))
        .expect("the explicit-free plan is registered");
    let kinds: Vec<(&str, NodeKind)> = plan.nodes.iter().map(|n| (n.label, n.kind)).collect();
    assert_eq!(kinds[0], ("t1", NodeKind::MemAlloc));
    assert_eq!(kinds[1], ("t2", NodeKind::MemAlloc));
    assert!(kinds.iter().filter(|k| k.1 == NodeKind::MemFree).count() == 2, "{kinds:?}");
    // The explicit free of t2 comes before the copy out; t1's free was added at the end.
    let free_t2 = plan.nodes.iter().position(|n| n.text.starts_with("free(&mut t2)")).unwrap();
    let last = plan.nodes.len() - 1;
    assert_eq!(plan.nodes[last].kind, NodeKind::MemFree);
    assert!(free_t2 < last);
    let edges = plan.edges();
    // Every node touching t2 (place of t2) reaches the free of t2.
    let reaches = |from: usize, to: usize| {
        let mut seen = vec![false; plan.nodes.len()];
        let mut stack = vec![from];
        while let Some(i) = stack.pop() {
            if i == to {
                return true;
            }
            for &(a, b) in &edges {
                if a as usize == i && !seen[b as usize] {
                    seen[b as usize] = true;
                    stack.push(b as usize);
                }
            }
        }
        false
    };
    for (i, n) in plan.nodes.iter().enumerate() {
        if i != free_t2 && n.text.contains("t2") {
            assert!(reaches(i, free_t2), "node {i} ({}) is not ordered before t2's free", n.text);
            assert!(reaches(1, i), "node {i} ({}) is not ordered after t2's alloc", n.text);
        }
        if i != last && i != 0 && n.text.contains("t1") {
            assert!(reaches(i, last), "node {i} ({}) is not ordered before t1's free", n.text);
        }
    }
}
