//! Introspection (`GraphCache::nodes`/`edges`/`graph_info`, `Graph::node_info`, `clone_graph`
//! with `ClonedGraph::find`) and instantiate flags, on the GPU: the driver's view of each kind
//! matches the statements, and flagged instantiations compute what eager launches compute
//! (exactly, integer kernels).
//!
//! Written without a GPU at hand: these tests were compiled but NOT yet run on a GPU.

mod common;

use common::{Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::{GraphCache, GraphNodeKind, InstantiateFlags, NodeDetails, capture, eager, graph};

fn cfg(n: u32) -> LaunchConfig {
    LaunchConfig::for_num_elems(n)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_nodes_report_each_kind_its_parameters_and_the_edges() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let n = 1000u32;
    let mut x = s.alloc_zeros::<u32>(n as usize)?;
    let mut y = s.alloc_zeros::<u32>(n as usize)?;
    let mut flags = s.alloc_zeros::<u16>(10)?;
    let mut back = unsafe { ctx.alloc_pinned_with_flags::<u32>(n as usize, 0) }?;
    let mut cache = GraphCache::new();
    assert!(cache.nodes()?.is_empty());
    let run = |cache: &mut GraphCache, x: &mut _, y: &mut _, f: &mut _, b: &mut _| {
        graph!(cache, &s, {
            let tmp = alloc::<u32>(n as usize);
            k.iota(n, 3, 1, &mut tmp).launch(cfg(n));
            k.affine(n, 2, 0, &tmp, &mut *x).launch(cfg(n));
            copy(&*x, &mut *y);
            memset(&mut *f, 7u16);
            copy(&*y, &mut *b);
            empty();
        })
    };
    run(&mut cache, &mut x, &mut y, &mut flags, &mut back)?;
    let info = cache.graph_info()?.expect("a variant");
    let kinds: Vec<GraphNodeKind> = info.nodes.iter().map(|n| n.kind).collect();
    let count = |k: GraphNodeKind| kinds.iter().filter(|&&x| x == k).count();
    // The copy of 4000 bytes into pinned memory is a readback node (a kernel node of the
    // crate's kernel, at most `MAX_READBACK_BYTES`); the device-to-device copy a memcpy node.
    assert_eq!(count(GraphNodeKind::Kernel), 3, "{kinds:?}");
    assert_eq!(count(GraphNodeKind::Memcpy), 1);
    assert_eq!(count(GraphNodeKind::Memset), 1);
    assert_eq!(count(GraphNodeKind::MemAlloc), 1);
    assert_eq!(count(GraphNodeKind::MemFree), 1);
    assert_eq!(count(GraphNodeKind::Empty), 1);
    let grid = cfg(n).grid_dim;
    assert!(info.nodes.iter().any(
        |g| g.details == NodeDetails::Kernel { grid, block: cfg(n).block_dim, shared_bytes: 0 }
    ));
    assert!(info.nodes.iter().any(|g| matches!(
        g.details,
        NodeDetails::Memset { element_size: 2, width: 10, height: 1, value: 7, .. }
    )));
    assert!(info.nodes.iter().any(|g| g.details
        == NodeDetails::Memcpy {
            width_bytes: 4000,
            height: 1,
            src_device: true,
            dst_device: true
        }));
    // 500 words of 8 bytes, 256 threads a block.
    let readback = NodeDetails::Kernel { grid: (2, 1, 1), block: (256, 1, 1), shared_bytes: 0 };
    assert!(info.nodes.iter().any(|g| g.details == readback), "{:?}", info.nodes);
    let alloc = info.nodes.iter().find_map(|g| match g.details {
        NodeDetails::MemAlloc { bytes, address } => Some((bytes, address)),
        _ => None,
    });
    let freed = info.nodes.iter().find_map(|g| match g.details {
        NodeDetails::MemFree { address } => Some(address),
        _ => None,
    });
    let (bytes, address) = alloc.expect("an alloc node");
    assert_eq!(bytes, 4000);
    assert_eq!(freed, Some(address), "the free node frees the alloc node's address");
    // Edges: alloc -> iota -> affine -> copy x->y -> copy y->back; the memset and the empty
    // node are independent; the free after affine (the last use of tmp).
    assert_eq!(info.edges.len(), cache.edges().len());
    let idx = |k: GraphNodeKind| kinds.iter().position(|&x| x == k).unwrap();
    let (a, f) = (idx(GraphNodeKind::MemAlloc), idx(GraphNodeKind::MemFree));
    assert!(info.edges.iter().any(|&(from, _)| from == a));
    assert!(info.edges.iter().any(|&(_, to)| to == f));
    assert!(
        !info
            .edges
            .iter()
            .any(|&(p, q)| p == idx(GraphNodeKind::Empty) || q == idx(GraphNodeKind::Empty))
    );
    assert_same(back.as_slice()?, &host::affine(&host::iota(n, 3, 1), 2, 0), "result");

    // The driver does not clone a graph with memory nodes (measured on the H200, driver 580:
    // CUDA_ERROR_NOT_SUPPORTED): the error names the call.
    match cache.clone_graph() {
        Err(cudagraph::Error::Graph { source, .. }) => {
            assert_eq!(source.call, "cuGraphClone");
            assert_eq!(
                source.error.0,
                cudagraph::cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED
            );
        }
        Err(e) => panic!("expected the driver's refusal to clone, got {e}"),
        Ok(_) => panic!("the driver cloned a graph with memory nodes"),
    }

    // Without the graph-owned buffer: a clone has the same nodes and edges, and finds each
    // original node.
    let mut cache = GraphCache::new();
    graph!(&mut cache, &s, {
        k.iota(n, 3, 1, &mut x).launch(cfg(n));
        copy(&x, &mut y);
        memset(&mut flags, 7u16);
        copy(&y, &mut back);
        empty();
    })?;
    let info = cache.graph_info()?.expect("a variant");
    assert_eq!(info.nodes.len(), 5);
    let clone = cache.clone_graph()?.expect("a variant");
    assert_eq!(clone.info().nodes.len(), info.nodes.len());
    assert_eq!(clone.info().edges.len(), info.edges.len());
    for i in 0..info.nodes.len() {
        let j = clone.find(i)?.expect("every node has its clone");
        assert_eq!(clone.info().nodes[j].kind, info.nodes[i].kind);
    }
    assert_eq!(clone.find(info.nodes.len())?, None);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_and_capture_graphs_report_their_nodes() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 256u32;
    let mut x = s.alloc_zeros::<u32>(n as usize)?;
    let mut y = s.alloc_zeros::<u32>(n as usize)?;
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&s);
    let (xw, yw) = (g.write(&mut x), g.write(&mut y));
    g.kernel(k.iota(n, 1, 2, xw).launch(cfg(n)));
    g.copy(xw.read(), yw);
    g.launch()?;
    let nodes = cache.nodes()?;
    assert_eq!(nodes.len(), 2);
    assert_eq!(cache.graph_info()?.expect("launched").edges, {
        let kernel = nodes.iter().position(|g| g.kind == GraphNodeKind::Kernel).unwrap();
        vec![(kernel, 1 - kernel)]
    });

    let mut z = s.alloc_zeros::<u32>(n as usize)?;
    let graph = capture(&s, (&y, &mut z), |c, (y, mut z)| c.copy(&y, &mut z))?;
    let info = graph.node_info()?;
    assert_eq!(info.nodes.len(), 1);
    assert_eq!(
        info.nodes[0].details,
        NodeDetails::Memcpy {
            width_bytes: n as usize * 4,
            height: 1,
            src_device: true,
            dst_device: true
        }
    );
    let clone = graph.clone_graph()?;
    assert_eq!(clone.find(0)?, Some(0));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn flagged_instantiations_compute_what_eager_launches_compute() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 4099u32;
    for flags in [
        InstantiateFlags { upload: true, ..Default::default() },
        InstantiateFlags { auto_free_on_launch: true, ..Default::default() },
        InstantiateFlags { node_priority: true, ..Default::default() },
        InstantiateFlags {
            upload: true,
            auto_free_on_launch: true,
            node_priority: true,
            device_launch: false,
        },
    ] {
        let mut cache = GraphCache::new();
        cache.set_instantiate_flags(flags);
        let mut out = s.alloc_zeros::<u32>(n as usize)?;
        let mut held = s.alloc_zeros::<u32>(n as usize)?;
        let mut want = s.alloc_zeros::<u32>(n as usize)?;
        for a in [1u32, 2, 2, 9] {
            graph!(&mut cache, &s, {
                let tmp = alloc::<u32>(n as usize);
                k.iota(n, a, 3, &mut tmp).launch(cfg(n));
                k.mix(n, &tmp, &mut out).launch(cfg(n));
            })?;
            eager!(&s, {
                k.iota(n, a, 3, &mut held).launch(cfg(n));
                k.mix(n, &held, &mut want).launch(cfg(n));
            })?;
            assert_same(&s.clone_dtoh(&out)?, &s.clone_dtoh(&want)?, &format!("{flags:?}, a {a}"));
        }
        assert_eq!(cache.stats().builds, 1, "{flags:?}");
    }
    Ok(())
}

/// `Mode::Instantiate` (issue 32): a call builds, instantiates and uploads its variant without
/// running anything (its output buffer stays zero, its host closure does not run), `nodes()`
/// then describes that variant, and the next `Mode::Graph` call with the same parameters
/// launches it with nothing built or sent, computing what eager launches compute. A changed
/// scalar in `Mode::Instantiate` is a per-node update of the uploaded exec, again not run.
#[test]
#[ignore = "needs a CUDA GPU"]
fn instantiate_mode_uploads_without_running_and_graph_mode_launches_it_as_is() -> Result {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let n = 4099u32;
    let mut x = s.alloc_zeros::<u32>(n as usize)?;
    let mut y = s.alloc_zeros::<u32>(n as usize)?;
    let (mut ex, mut ey) = (s.alloc_zeros::<u32>(n as usize)?, s.alloc_zeros::<u32>(n as usize)?);
    let ran = Arc::new(AtomicU32::new(0));
    let mut cache = GraphCache::new();
    let step = |cache: &mut GraphCache, seed: u32, x: &mut _, y: &mut _| {
        let ran = ran.clone();
        graph!(cache, &s, {
            k.iota(n, 3, seed, &mut *x).launch(cfg(n));
            k.affine(n, 2, 1, &*x, &mut *y).launch(cfg(n));
            host(move |()| {
                ran.fetch_add(1, Ordering::SeqCst);
            });
        })
    };
    cache.set_mode(cudagraph::Mode::Instantiate);
    step(&mut cache, 1, &mut x, &mut y)?;
    s.synchronize()?;
    let st = cache.stats();
    assert_eq!((st.builds, st.instantiations, st.uploads, st.launches), (1, 1, 1, 0), "{st:?}");
    assert_eq!(st.stream_waits, 0, "{st:?}");
    assert_same(&s.clone_dtoh(&y)?, &vec![0; n as usize], "nothing ran");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the host closure did not run");
    let kinds: Vec<GraphNodeKind> = cache.nodes()?.iter().map(|g| g.kind).collect();
    assert_eq!(kinds.iter().filter(|&&g| g == GraphNodeKind::Kernel).count(), 2, "{kinds:?}");
    assert_eq!(kinds.len(), 3, "two kernels and the host node: {kinds:?}");

    cache.set_mode(cudagraph::Mode::Graph);
    for (call, seed) in [1u32, 1, 5].into_iter().enumerate() {
        if seed == 5 {
            // Updated and uploaded, not run: `y` keeps the last launch's result.
            let before = s.clone_dtoh(&y)?;
            cache.set_mode(cudagraph::Mode::Instantiate);
            step(&mut cache, seed, &mut x, &mut y)?;
            s.synchronize()?;
            assert_same(&s.clone_dtoh(&y)?, &before, "an update in Mode::Instantiate ran nothing");
            cache.set_mode(cudagraph::Mode::Graph);
        }
        let (updates, instantiations) = (cache.stats().node_updates, cache.stats().instantiations);
        step(&mut cache, seed, &mut x, &mut y)?;
        eager!(&s, {
            k.iota(n, 3, seed, &mut ex).launch(cfg(n));
            k.affine(n, 2, 1, &ex, &mut ey).launch(cfg(n));
        })?;
        s.synchronize()?;
        let st = cache.stats();
        assert_eq!(st.node_updates, updates, "call {call}: nothing sent at launch: {st:?}");
        assert_eq!(st.instantiations, instantiations, "call {call}: {st:?}");
        let got = s.clone_dtoh(&y)?;
        assert_same(&got, &s.clone_dtoh(&ey)?, &format!("call {call}: graph vs eager"));
        assert_same(&got, &host::affine(&host::iota(n, 3, seed), 2, 1), "host model");
    }
    let st = cache.stats();
    assert_eq!((st.builds, st.launches, st.uploads), (1, 3, 2), "{st:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 3, "one closure run per launch");
    Ok(())
}
