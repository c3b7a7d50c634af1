//! GPU tests of programmatic dependent launch: kernels declared `#[programmatic]` (each waits
//! with `griddepcontrol.wait` first, see `kernels/programmatic.cu`) in chains, fans and fan-ins,
//! mixed with plain kernels, memcpy and memset nodes, through `graph!` and `GraphBuilder`, with
//! scalars, pointers and grids changed between calls. Every result is compared with the same
//! statements run eagerly (`Mode::Eager`: programmatic stream serialization), with the same graph
//! built with plain edges (`set_programmatic(false)`) and with a host model (integer data: exact
//! equality). On a device before compute capability 9.0 the edges fall back to plain ones and
//! the same tests check that (`Stats::programmatic_fallbacks`).

use std::sync::Arc;

use cudagraph::cudarc::driver::sys::CUdevice_attribute;
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use cudagraph::{Condition, EdgeKind, GraphCache, Mode, Result, Stats, graph, kernels};

const SRC: &str = include_str!("../kernels/programmatic.cu");
const LOOP_SRC: &str = include_str!("../kernels/conditional.cu");
/// Elements of every buffer: 256 blocks of 256 threads at full grid.
const N: u32 = 1 << 16;
/// Spin steps per element before each write (see `step` in the kernel source).
const SPINS: u32 = 64;

kernels! {
    /// The kernels of `kernels/programmatic.cu`, each waiting for its predecessors first.
    pub struct Pdl {
        #[programmatic]
        fn step(n: u32, spins: u32, a: u32, x: &[u32], y: &mut [u32]);
        #[programmatic]
        fn scale(n: u32, a: u32, b: u32, x: &mut [u32]);
        #[programmatic]
        fn combine(n: u32, a: &[u32], b: &[u32], out: &mut [u32]);
    }
}

kernels! {
    /// The same kernels declared plain: for a mix of programmatic and plain kernels.
    pub struct Plain {
        fn step(n: u32, spins: u32, a: u32, x: &[u32], y: &mut [u32]);
        fn scale(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

kernels! {
    /// `count_down` of `kernels/conditional.cu` (a plain kernel): a device loop's counter.
    pub struct Loop {
        fn count_down(c: Condition, counter: &mut [u32]);
    }
}

struct Setup {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    k: Pdl,
    plain: Plain,
    /// Programmatic dependent launch works on this device and driver.
    supported: bool,
}

/// The device's context, a stream, and the kernels compiled for the device's own architecture
/// (`griddepcontrol` needs compute capability 9.0; NVRTC's default architecture is older).
fn setup() -> Result<Setup> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let major = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(SRC, opts)?;
    // SAFETY: the declarations match the kernels, which stay within their buffers (n elements);
    // compiled for this device, every thread of each waits (`griddepcontrol.wait`) first, before
    // it touches memory or returns (compute capability 9.0 and later; earlier, the edges are
    // plain).
    let k = unsafe { Pdl::load(&ctx, ptx.clone()) }?;
    // SAFETY: as above.
    let plain = unsafe { Plain::load(&ctx, ptx) }?;
    let supported = major >= 9 && cudagraph::raw::driver_version()? >= 12030;
    Ok(Setup { ctx, stream, k, plain, supported })
}

/// `blocks` blocks of 256 threads (the kernels loop over all `N` elements whatever the grid).
fn cfg(blocks: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

fn host(stream: &Arc<CudaStream>, x: &CudaSlice<u32>) -> Vec<u32> {
    stream.clone_dtoh(x).expect("copy to host")
}

fn upload(stream: &Arc<CudaStream>, v: &[u32]) -> CudaSlice<u32> {
    stream.clone_htod(v).expect("copy to device")
}

/// Host models of the kernels.
mod model {
    pub fn step(a: u32, x: &[u32]) -> Vec<u32> {
        let n = x.len() as u64;
        (0..x.len())
            .map(|i| x[((i as u64 * 7 + 3) % n) as usize].wrapping_mul(a).wrapping_add(i as u32))
            .collect()
    }
    pub fn scale(a: u32, b: u32, x: &mut [u32]) {
        for v in x {
            *v = v.wrapping_mul(a).wrapping_add(b);
        }
    }
    pub fn combine(a: &[u32], b: &[u32]) -> Vec<u32> {
        let n = a.len();
        (0..n).map(|i| a[i].wrapping_add(b[n - 1 - i].wrapping_mul(3))).collect()
    }
}

fn sorted(mut edges: Vec<(u32, u32, EdgeKind)>) -> Vec<(u32, u32, EdgeKind)> {
    edges.sort_unstable_by_key(|&(a, b, _)| (a, b));
    edges
}

fn start(seed: u32) -> Vec<u32> {
    (0..N).map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed)).collect()
}

/// The three ways every test runs its calls, and what each must show in its stats.
#[derive(Clone, Copy, Debug, PartialEq)]
enum How {
    /// Programmatic edges (plain ones where the device lacks support).
    Graph,
    /// `set_programmatic(false)`: plain edges.
    PlainEdges,
    /// `Mode::Eager`: launches, programmatic kernels with programmatic stream serialization.
    Eager,
}

const HOWS: [How; 3] = [How::Graph, How::PlainEdges, How::Eager];

fn cache(how: How) -> GraphCache {
    let mut c = GraphCache::new();
    c.set_programmatic(how != How::PlainEdges);
    if how == How::Eager {
        c.set_mode(Mode::Eager);
    }
    c
}

/// Checks a run's stats: `programmatic` edges per built graph (when the device supports
/// them and the run uses them), `builds` builds, and no whole-exec update or re-instantiation.
#[track_caller]
fn check_stats(s: &Stats, how: How, supported: bool, builds: u64, programmatic: u64) {
    match how {
        How::Eager => assert_eq!((s.builds, s.launches), (0, 0), "{how:?}: {s:?}"),
        How::Graph | How::PlainEdges => {
            assert_eq!(s.builds, builds, "{how:?}: {s:?}");
            assert_eq!((s.exec_updates, s.reinstantiations), (0, 0), "{how:?}: {s:?}");
            let (edges, fallbacks) = match (how, supported) {
                (How::Graph, true) => (builds * programmatic, 0),
                (How::Graph, false) => (0, builds * programmatic),
                _ => (0, 0),
            };
            assert_eq!(
                (s.programmatic_edges, s.programmatic_fallbacks),
                (edges, fallbacks),
                "{how:?}: {s:?}"
            );
        }
    }
}

/// A chain of 16 dependent programmatic kernels, ping-ponging between two buffers (each reads
/// what the previous one wrote, and writes what the one before read): 15 programmatic edges.
#[allow(clippy::too_many_arguments)]
fn chain16(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Pdl,
    spins: u32,
    a: u32,
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
    c: LaunchConfig,
) -> Result<()> {
    graph!(cache, stream, {
        for i in 0..8 {
            k.step(N, spins, a + i, &*x, &mut *y).launch(c);
            k.step(N, spins, a + 2 * i + 1, &*y, &mut *x).launch(c);
        }
    })
}

fn chain16_model(a: u32, x: &mut Vec<u32>) {
    for i in 0..8 {
        let y = model::step(a + i, x);
        *x = model::step(a + 2 * i + 1, &y);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn chain_of_programmatic_kernels_with_scalar_pointer_and_grid_updates() -> Result<()> {
    let s = setup()?;
    let stream = &s.stream;
    let mut results = Vec::new();
    for how in HOWS {
        let mut cache = cache(how);
        let (mut u, mut v) = (upload(stream, &start(1)), upload(stream, &start(2)));
        let mut y = stream.alloc_zeros::<u32>(N as usize)?;
        let (mut mu, mut mv) = (start(1), start(2));
        // Call by call: a scalar change, the buffers swapped (every node's pointers), the grid
        // changed (256 -> 64 -> 1000 blocks), and both at once.
        let calls = [(3, 256), (5, 256), (5, 64), (7, 1000), (9, 256)];
        for (call, &(a, blocks)) in calls.iter().enumerate() {
            chain16(&mut cache, stream, &s.k, SPINS, a, &mut u, &mut y, cfg(blocks))?;
            chain16_model(a, &mut mu);
            let what = format!("{how:?} call {call}");
            assert_eq!(host(stream, &u), mu, "{what}: u");
            std::mem::swap(&mut u, &mut v);
            std::mem::swap(&mut mu, &mut mv);
        }
        check_stats(&cache.stats(), how, s.supported, 1, 15);
        if how == How::Graph {
            // Every later call changes every node (its scalar, pointers or grid): per-node
            // updates only.
            let st = cache.stats();
            assert_eq!((st.node_updates, st.nodes_unchanged), (4 * 16, 0), "{st:?}");
            let kinds = cache.edges();
            assert_eq!(kinds.len(), 15, "{kinds:?}");
            let want = if s.supported { EdgeKind::Programmatic } else { EdgeKind::Plain };
            assert!(kinds.iter().all(|e| e.2 == want), "{kinds:?}");
            assert_eq!(sorted(cache.driver_edges()?), sorted(kinds));
        }
        results.push((host(stream, &u), host(stream, &v)));
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "graph, plain edges and eager agree");
    Ok(())
}

/// A producer, four consumers that read what it wrote (a fan), and a tree of fan-ins.
#[allow(clippy::too_many_arguments)]
fn fan(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Pdl,
    a: u32,
    p: &mut CudaSlice<u32>,
    q: &mut [CudaSlice<u32>; 4],
    r: &mut [CudaSlice<u32>; 2],
    out: &mut CudaSlice<u32>,
    c: LaunchConfig,
) -> Result<()> {
    graph!(cache, stream, {
        k.scale(N, a, 1, &mut *p).launch(c);
        for i in 0..4 {
            k.step(N, SPINS, a + i, &*p, &mut q[i]).launch(c);
        }
        k.combine(N, &q[0], &q[1], &mut r[0]).launch(c);
        k.combine(N, &q[2], &q[3], &mut r[1]).launch(c);
        k.combine(N, &r[0], &r[1], &mut *out).launch(c);
        // Writes what the consumers read: after all four of them (write after read).
        k.scale(N, 3, a, &mut *p).launch(c);
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fans_and_fan_ins_of_programmatic_kernels() -> Result<()> {
    let s = setup()?;
    let stream = &s.stream;
    let mut results = Vec::new();
    for how in HOWS {
        let mut cache = cache(how);
        let mut p = upload(stream, &start(5));
        let mut q = [0, 1, 2, 3].map(|_| stream.alloc_zeros::<u32>(N as usize).expect("alloc"));
        let mut r = [0, 1].map(|_| stream.alloc_zeros::<u32>(N as usize).expect("alloc"));
        let mut out = stream.alloc_zeros::<u32>(N as usize)?;
        let mut mp = start(5);
        for (call, (a, blocks)) in [(2, 256), (3, 256), (4, 32)].into_iter().enumerate() {
            fan(&mut cache, stream, &s.k, a, &mut p, &mut q, &mut r, &mut out, cfg(blocks))?;
            model::scale(a, 1, &mut mp);
            let mq: Vec<Vec<u32>> = (0..4).map(|i| model::step(a + i, &mp)).collect();
            let mr = [model::combine(&mq[0], &mq[1]), model::combine(&mq[2], &mq[3])];
            let mout = model::combine(&mr[0], &mr[1]);
            model::scale(3, a, &mut mp);
            let what = format!("{how:?} call {call}");
            assert_eq!(host(stream, &out), mout, "{what}: out");
            assert_eq!(host(stream, &p), mp, "{what}: p");
            // Swap two consumers' buffers: pointer updates of a fan.
            q.swap(0, 3);
        }
        // Edges: p -> 4 consumers, 4 consumers -> 2 fan-ins, 2 -> 1, 4 consumers -> last scale
        // (write after read; the edges through the fan-ins do not order it).
        check_stats(&cache.stats(), how, s.supported, 1, 4 + 4 + 2 + 4);
        assert_eq!(sorted(cache.driver_edges()?), sorted(cache.edges()), "{how:?}");
        results.push((host(stream, &out), host(stream, &p)));
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "graph, plain edges and eager agree");
    Ok(())
}

/// Programmatic and plain kernels, memset, memcpy and an `.after` edge:
/// memset(a) -> pdl scale(a) -> memcpy(a -> b) -> pdl step(b -> c) -> plain scale(c)
/// -> pdl step(c -> d) -> plain step(d -> e) -> pdl scale(e), and a pdl scale(f) `.after` the
/// plain scale. Programmatic edges: plain scale(c) -> pdl step(c -> d), plain step(d -> e) ->
/// pdl scale(e), plain scale(c) -> pdl scale(f): 3.
#[allow(clippy::too_many_arguments)]
fn mix(
    cache: &mut GraphCache,
    stream: &CudaStream,
    (k, plain): (&Pdl, &Plain),
    a: u32,
    bufs: &mut [CudaSlice<u32>; 6],
    c: LaunchConfig,
) -> Result<()> {
    let [ba, bb, bc, bd, be, bf] = bufs;
    graph!(cache, stream, {
        memset(&mut *ba, 7u32);
        k.scale(N, a, 1, &mut *ba).launch(c);
        copy(&*ba, &mut *bb);
        k.step(N, SPINS, a, &*bb, &mut *bc).launch(c);
        let s = plain.scale(N, 5, a, &mut *bc).launch(c);
        k.step(N, SPINS, a + 1, &*bc, &mut *bd).launch(c);
        plain.step(N, SPINS, a + 2, &*bd, &mut *be).launch(c);
        k.scale(N, 3, 1, &mut *be).launch(c);
        k.scale(N, 1, a, &mut *bf).launch(c).after(s);
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn programmatic_and_plain_kernels_with_memset_memcpy_and_after() -> Result<()> {
    let s = setup()?;
    let stream = &s.stream;
    let mut results = Vec::new();
    for how in HOWS {
        let mut cache = cache(how);
        let mut bufs = [0, 1, 2, 3, 4, 5].map(|i| upload(stream, &start(10 + i)));
        let mut mf = start(15);
        for (call, (a, blocks)) in [(2, 256), (3, 256), (3, 100)].into_iter().enumerate() {
            mix(&mut cache, stream, (&s.k, &s.plain), a, &mut bufs, cfg(blocks))?;
            let mut ma = vec![7u32; N as usize];
            model::scale(a, 1, &mut ma);
            let mut mc = model::step(a, &ma);
            model::scale(5, a, &mut mc);
            let md = model::step(a + 1, &mc);
            let mut me = model::step(a + 2, &md);
            model::scale(3, 1, &mut me);
            model::scale(1, a, &mut mf);
            let what = format!("{how:?} call {call}");
            for (name, buf, want) in
                [("a", 0, &ma), ("b", 1, &ma), ("c", 2, &mc), ("d", 3, &md), ("e", 4, &me)]
            {
                assert_eq!(&host(stream, &bufs[buf]), want, "{what}: {name}");
            }
            assert_eq!(host(stream, &bufs[5]), mf, "{what}: f");
        }
        check_stats(&cache.stats(), how, s.supported, 1, 3);
        assert_eq!(sorted(cache.driver_edges()?), sorted(cache.edges()), "{how:?}");
        if how == How::Graph {
            let programmatic =
                cache.edges().iter().filter(|e| e.2 == EdgeKind::Programmatic).count();
            assert_eq!(programmatic, if s.supported { 3 } else { 0 }, "{:?}", cache.edges());
            let plan = cache.plan().expect("a graph! ran");
            let declared = plan.edge_kinds(|name| Pdl::PROGRAMMATIC.contains(&name));
            // The plan resolves kernels by name, and `Plain` has kernels of the same names: by
            // name every kernel -> kernel edge looks programmatic (5 of them).
            assert_eq!(declared.iter().filter(|e| e.2 == EdgeKind::Programmatic).count(), 5);
        }
        results.push(bufs.map(|b| host(stream, &b)));
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "graph, plain edges and eager agree");
    Ok(())
}

/// A builder's chain and fan of programmatic kernels, recorded anew every call with pointers,
/// scalars and grids changing: one variant, updated in place.
#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_chains_and_fans_of_programmatic_kernels() -> Result<()> {
    let s = setup()?;
    let stream = &s.stream;
    let mut results = Vec::new();
    for how in HOWS {
        let mut cache = cache(how);
        let (mut u, mut v) = (upload(stream, &start(21)), upload(stream, &start(22)));
        let mut outs = [0, 1, 2].map(|_| stream.alloc_zeros::<u32>(N as usize).expect("alloc"));
        let mut sum = stream.alloc_zeros::<u32>(N as usize)?;
        let mut mu = start(21);
        for (call, (a, blocks)) in [(3, 256), (4, 256), (4, 48), (6, 512)].into_iter().enumerate() {
            let mut g = cache.builder(stream);
            let (uw, vw) = (g.write(&mut u), g.write(&mut v));
            // Chain of 6 through u and v.
            for i in 0..3 {
                g.kernel(s.k.step(N, SPINS, a + i, uw.read(), vw).launch(cfg(blocks)));
                g.kernel(s.k.step(N, SPINS, a + i + 1, vw.read(), uw).launch(cfg(blocks)));
            }
            // Fan out of u into three buffers, fan in of two of them.
            let ow: Vec<_> = outs.iter_mut().map(|o| g.write(o)).collect();
            for (i, &o) in ow.iter().enumerate() {
                g.kernel(s.k.step(N, SPINS, a + 10 + i as u32, uw.read(), o).launch(cfg(blocks)));
            }
            let sw = g.write(&mut sum);
            g.kernel(s.k.combine(N, ow[0].read(), ow[2].read(), sw).launch(cfg(blocks)));
            let kinds = g.edge_kinds();
            assert_eq!(kinds.len(), 5 + 3 + 2, "{kinds:?}");
            assert!(kinds.iter().all(|e| e.2 == EdgeKind::Programmatic), "{kinds:?}");
            g.launch()?;
            for i in 0..3 {
                let mv = model::step(a + i, &mu);
                mu = model::step(a + i + 1, &mv);
            }
            let mo: Vec<Vec<u32>> = (0..3).map(|i| model::step(a + 10 + i, &mu)).collect();
            let what = format!("{how:?} call {call}");
            assert_eq!(host(stream, &u), mu, "{what}: u");
            assert_eq!(host(stream, &sum), model::combine(&mo[0], &mo[2]), "{what}: sum");
            outs.swap(0, 1);
        }
        // The chain's 5 edges, 3 out of the fan, 2 into the combine; 1 variant (the grid and
        // buffers change, not the topology).
        check_stats(&cache.stats(), how, s.supported, 1, 10);
        assert_eq!(sorted(cache.driver_edges()?), sorted(cache.edges()), "{how:?}");
        results.push((host(stream, &u), host(stream, &sum)));
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "graph, plain edges and eager agree");
    Ok(())
}

/// The driver holds the programmatic edges the cache counts (`cuGraphGetEdges_v2`); its DOT
/// (`cuGraphDebugDotPrint`) has the chain's 15 edges (it does not mark their type: measured on
/// the H200, CUDA 13.0, every edge reads `[headlabel=0]`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_driver_holds_the_programmatic_edges() -> Result<()> {
    let s = setup()?;
    let stream = &s.stream;
    let mut cache = GraphCache::new();
    let (mut u, mut y) = (upload(stream, &start(1)), stream.alloc_zeros::<u32>(N as usize)?);
    chain16(&mut cache, stream, &s.k, 1, 3, &mut u, &mut y, cfg(64))?;
    stream.synchronize()?;
    let path = std::env::temp_dir().join(format!("cudagraph-pdl-{}.dot", std::process::id()));
    assert!(cache.debug_dot_print(&path)?);
    let dot = std::fs::read_to_string(&path).expect("the driver wrote the DOT file");
    let _ = std::fs::remove_file(&path);
    let edges: Vec<&str> = dot.lines().filter(|l| l.contains("->")).collect();
    println!("driver DOT edges ({}):\n{}", edges.len(), edges.join("\n"));
    assert_eq!(edges.len(), 15, "{dot}");
    let held = cache.driver_edges()?;
    let programmatic = held.iter().filter(|e| e.2 == EdgeKind::Programmatic).count();
    assert_eq!(programmatic, if s.supported { 15 } else { 0 }, "{held:?}");
    assert_eq!(sorted(held), sorted(cache.edges()));
    Ok(())
}

/// `count_down` compiled (it needs the CUDA headers for `cudaGraphSetConditional`).
fn load_loop(ctx: &Arc<CudaContext>) -> Result<Loop> {
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    // SAFETY: `count_down` has the declared parameters and touches only `counter[0]`.
    unsafe { Loop::load(ctx, compile_ptx_with_opts(LOOP_SRC, opts)?) }
}

/// A device `while` whose body is a chain of three programmatic kernels (two programmatic
/// edges, inside the body graph) beside a plain kernel that counts the iterations down, with
/// the iteration count, the kernels' scalars and a grid changed between calls (updates of
/// nodes inside the body). Compared with the same graph with plain edges, with the body's
/// kernels launched eagerly as many times (programmatic stream serialization), and with the
/// host model.
#[test]
#[ignore = "needs a CUDA GPU"]
fn programmatic_kernels_inside_a_device_while_body() -> Result<()> {
    let s = setup()?;
    let (stream, k) = (&s.stream, &s.k);
    let lp = load_loop(&s.ctx)?;
    let calls = [(5u32, 3u32, 256u32), (1, 5, 256), (7, 5, 64), (3, 9, 1000)];
    let mut results = Vec::new();
    for how in [How::Graph, How::PlainEdges] {
        let mut cache = cache(how);
        let mut x = upload(stream, &start(3));
        let mut y = stream.alloc_zeros::<u32>(N as usize)?;
        let mut counter = stream.alloc_zeros::<u32>(1)?;
        let mut model = start(3);
        for (call, &(n, a, blocks)) in calls.iter().enumerate() {
            let c2 = cfg(blocks);
            graph!(&mut cache, stream, {
                memset(&mut counter, n);
                let c = condition(1);
                device_while(c, {
                    k.step(N, SPINS, a, &x, &mut y).launch(c2);
                    k.step(N, SPINS, a + 1, &y, &mut x).launch(cfg(256));
                    k.scale(N, 3, a, &mut x).launch(cfg(64));
                    lp.count_down(c, &mut counter).launch((1, 1));
                });
            })?;
            for _ in 0..n {
                let m = model::step(a, &model);
                model = model::step(a + 1, &m);
                model::scale(3, a, &mut model);
            }
            assert_eq!(host(stream, &x), model, "{how:?} call {call}: x");
            assert_eq!(host(stream, &counter), [0], "{how:?} call {call}: counter");
        }
        let st = cache.stats();
        assert_eq!(st.builds, 1, "{how:?}: {st:?}");
        let want = match (how, s.supported) {
            (How::Graph, true) => (2, 0),
            (How::Graph, false) => (0, 2),
            _ => (0, 0),
        };
        assert_eq!((st.programmatic_edges, st.programmatic_fallbacks), want, "{how:?}: {st:?}");
        if how == How::Graph {
            let kinds = cache.edges();
            let n = kinds.iter().filter(|e| e.2 == EdgeKind::Programmatic).count();
            assert_eq!(n, if s.supported { 2 } else { 0 }, "{kinds:?}");
            // What the driver holds, body graph included, edge types read back.
            assert_eq!(sorted(cache.driver_edges()?), sorted(kinds));
        }
        results.push(host(stream, &x));
    }
    // The eager oracle: the body's kernels, call by call, `n` times each.
    let mut cache = cache(How::Eager);
    let mut x = upload(stream, &start(3));
    let mut y = stream.alloc_zeros::<u32>(N as usize)?;
    for &(n, a, blocks) in &calls {
        let c2 = cfg(blocks);
        for _ in 0..n {
            graph!(&mut cache, stream, {
                k.step(N, SPINS, a, &x, &mut y).launch(c2);
                k.step(N, SPINS, a + 1, &y, &mut x).launch(cfg(256));
                k.scale(N, 3, a, &mut x).launch(cfg(64));
            })?;
        }
    }
    results.push(host(stream, &x));
    assert!(results.windows(2).all(|w| w[0] == w[1]), "graph, plain edges and eager agree");
    Ok(())
}

/// A memset beside a chain of programmatic kernels, joined at the last one (`heat`'s step until
/// session 26): memset(c) beside step(a -> b) -> scale(b), then step(b -> c) after both (it
/// reads b, and overwrites what the memset wrote). The last kernel joins a plain edge, so its
/// edge from scale(b) is plain too: one programmatic edge, step(a -> b) -> scale(b). The
/// memset's edge orders it: run after the step it would leave c all 7.
fn memset_joined(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Pdl,
    v: u32,
    [a, b, c]: &mut [CudaSlice<u32>; 3],
    cf: LaunchConfig,
) -> Result<()> {
    graph!(cache, stream, {
        memset(&mut *c, 7u32);
        k.step(N, SPINS, v, &*a, &mut *b).launch(cf);
        k.scale(N, 3, v, &mut *b).launch(cf);
        k.step(N, SPINS, v + 1, &*b, &mut *c).launch(cf);
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_programmatic_kernel_joining_a_memset_s_branch_gets_plain_edges() -> Result<()> {
    let s = setup()?;
    let stream = &s.stream;
    let mut results = Vec::new();
    for how in HOWS {
        let mut cache = cache(how);
        let mut bufs = [1, 2, 3].map(|i| upload(stream, &start(20 + i)));
        let ma = start(21);
        for (call, v) in [4u32, 5, 5].into_iter().enumerate() {
            memset_joined(&mut cache, stream, &s.k, v, &mut bufs, cfg(256))?;
            let mut mb = model::step(v, &ma);
            model::scale(3, v, &mut mb);
            let mc = model::step(v + 1, &mb);
            let what = format!("{how:?} call {call}");
            assert_eq!(host(stream, &bufs[1]), mb, "{what}: b");
            assert_eq!(host(stream, &bufs[2]), mc, "{what}: c");
        }
        check_stats(&cache.stats(), how, s.supported, 1, 1);
        if how != How::Eager {
            assert_eq!(sorted(cache.driver_edges()?), sorted(cache.edges()), "{how:?}");
        }
        if how == How::Graph {
            let p = if s.supported { EdgeKind::Programmatic } else { EdgeKind::Plain };
            let plain = EdgeKind::Plain;
            // Nodes: 0 memset, 1 step(a -> b), 2 scale(b), 3 step(b -> c).
            assert_eq!(
                sorted(cache.edges()),
                sorted(vec![(0, 3, plain), (1, 2, p), (2, 3, plain)])
            );
            let plan = cache.plan().expect("a graph! ran");
            let declared = plan.edge_kinds(|name| Pdl::PROGRAMMATIC.contains(&name));
            let want = [(0, 3, plain), (1, 2, EdgeKind::Programmatic), (2, 3, plain)];
            assert_eq!(sorted(declared), sorted(want.to_vec()));
        }
        results.push(bufs.map(|b| host(stream, &b)));
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "graph, plain edges and eager agree");
    Ok(())
}
