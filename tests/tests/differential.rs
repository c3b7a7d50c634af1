//! Randomized differential tests (proptest): random DAGs of kernels, copies and memsets over six
//! buffers, with random parameters, pointer swaps and structural variant switches between
//! calls, run as graphs and through the library's eager oracle (`Mode::Eager`) on identical
//! inputs; all six buffers must be equal after every call (integer data: exact).
//!
//! The body has 24 statement slots with fixed wiring (drawn once with a fixed seed), each under a
//! host `if` on one bit of a random mask: every mask is a different DAG (2^24 of them), and each
//! kernel slot takes its function from one of three modules chosen per call (a function swap).

//!
//! `builder_graphs_equal_the_eager_oracle_on_random_dags` does the same through `GraphBuilder`:
//! each case draws 2 or 3 random programs (1 to 24 kernels, copies, memsets and zeros over the
//! six buffers, with random `after` edges), and its calls pick one of them (so builder variants,
//! keyed by topology, switch and repeat), with random modules, scalars, a buffer swap and a
//! random registration order. A host model of the kernels checks the oracle too.

use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{DevRead, DevWrite, GraphCache, Mode, Node, Result, graph, kernels};
use proptest::prelude::*;

const N: u32 = 256;
const SRC: &str = include_str!("../kernels/differential.cu");

kernels! {
    /// One kernel `op`, defined three ways in three modules.
    pub struct Op {
        fn op(n: u32, a: u32, x: &[u32], y: &mut [u32]);
    }
}

struct Bufs {
    b0: CudaSlice<u32>,
    b1: CudaSlice<u32>,
    b2: CudaSlice<u32>,
    b3: CudaSlice<u32>,
    b4: CudaSlice<u32>,
    b5: CudaSlice<u32>,
}

impl Bufs {
    fn new(stream: &Arc<CudaStream>, seed: u32) -> Result<Bufs> {
        let f = |k: u32| -> Result<CudaSlice<u32>> {
            let v: Vec<u32> =
                (0..N).map(|i| i.wrapping_mul(2654435761) ^ seed.wrapping_add(k)).collect();
            Ok(stream.clone_htod(&v)?)
        };
        Ok(Bufs { b0: f(0)?, b1: f(1)?, b2: f(2)?, b3: f(3)?, b4: f(4)?, b5: f(5)? })
    }

    fn swap(&mut self, i: usize, j: usize) {
        let mut all =
            [&mut self.b0, &mut self.b1, &mut self.b2, &mut self.b3, &mut self.b4, &mut self.b5];
        if i != j {
            let (lo, hi) = (i.min(j), i.max(j));
            let (a, b) = all.split_at_mut(hi);
            std::mem::swap(a[lo], b[0]);
        }
    }

    fn host(&self, stream: &Arc<CudaStream>) -> Result<Vec<Vec<u32>>> {
        [&self.b0, &self.b1, &self.b2, &self.b3, &self.b4, &self.b5]
            .into_iter()
            .map(|b| Ok(stream.clone_dtoh(b)?))
            .collect()
    }
}

/// One call: the slots of mask `m`, kernel slot `i` from module `c[i]` with scalar `s[i]`.
fn step(
    cache: &mut GraphCache,
    stream: &CudaStream,
    mods: &[Op; 3],
    b: &mut Bufs,
    m: u32,
    c: &[usize; 24],
    s: &[u32; 24],
) -> Result<()> {
    let cfg = LaunchConfig::for_num_elems(N);
    graph!(cache, stream, {
        if m & (1 << 0) != 0 {
            mods[c[0]].op(N, s[0], &b.b3, &mut b.b5).launch(cfg);
        }
        if m & (1 << 1) != 0 {
            mods[c[1]].op(N, s[1], &b.b1, &mut b.b0).launch(cfg);
        }
        if m & (1 << 2) != 0 {
            copy(&b.b2, &mut b.b5);
        }
        if m & (1 << 3) != 0 {
            mods[c[3]].op(N, s[3], &b.b1, &mut b.b5).launch(cfg);
        }
        if m & (1 << 4) != 0 {
            mods[c[4]].op(N, s[4], &b.b0, &mut b.b3).launch(cfg);
        }
        if m & (1 << 5) != 0 {
            mods[c[5]].op(N, s[5], &b.b0, &mut b.b1).launch(cfg);
        }
        if m & (1 << 6) != 0 {
            copy(&b.b4, &mut b.b0);
        }
        if m & (1 << 7) != 0 {
            zero(&mut b.b4);
        }
        if m & (1 << 8) != 0 {
            mods[c[8]].op(N, s[8], &b.b4, &mut b.b0).launch(cfg);
        }
        if m & (1 << 9) != 0 {
            mods[c[9]].op(N, s[9], &b.b4, &mut b.b3).launch(cfg);
        }
        if m & (1 << 10) != 0 {
            mods[c[10]].op(N, s[10], &b.b1, &mut b.b3).launch(cfg);
        }
        if m & (1 << 11) != 0 {
            zero(&mut b.b0);
        }
        if m & (1 << 12) != 0 {
            mods[c[12]].op(N, s[12], &b.b4, &mut b.b3).launch(cfg);
        }
        if m & (1 << 13) != 0 {
            memset(&mut b.b3, s[13]);
        }
        if m & (1 << 14) != 0 {
            zero(&mut b.b2);
        }
        if m & (1 << 15) != 0 {
            memset(&mut b.b4, s[15]);
        }
        if m & (1 << 16) != 0 {
            mods[c[16]].op(N, s[16], &b.b4, &mut b.b0).launch(cfg);
        }
        if m & (1 << 17) != 0 {
            zero(&mut b.b3);
        }
        if m & (1 << 18) != 0 {
            copy(&b.b1, &mut b.b4);
        }
        if m & (1 << 19) != 0 {
            memset(&mut b.b4, s[19]);
        }
        if m & (1 << 20) != 0 {
            mods[c[20]].op(N, s[20], &b.b3, &mut b.b2).launch(cfg);
        }
        if m & (1 << 21) != 0 {
            memset(&mut b.b0, s[21]);
        }
        if m & (1 << 22) != 0 {
            zero(&mut b.b5);
        }
        if m & (1 << 23) != 0 {
            mods[c[23]].op(N, s[23], &b.b2, &mut b.b5).launch(cfg);
        }
    })
}

/// One call of a case: the mask, module choices, scalars and a buffer swap before it.
#[derive(Clone, Debug)]
struct Call {
    mask: u32,
    modules: [usize; 24],
    scalars: [u32; 24],
    swap: (usize, usize),
}

fn call(masks: Vec<u32>) -> impl Strategy<Value = Call> {
    (
        proptest::sample::select(masks),
        proptest::array::uniform24(0usize..3),
        proptest::array::uniform24(any::<u32>()),
        (0usize..6, 0usize..6),
    )
        .prop_map(|(mask, modules, scalars, swap)| Call { mask, modules, scalars, swap })
}

/// A case: 2 or 3 masks (so calls both switch variants and repeat them, updating in place) and
/// 2 to 6 calls drawn from them.
fn case() -> impl Strategy<Value = (u32, Vec<Call>)> {
    (any::<u32>(), proptest::collection::vec(0u32..(1 << 24), 2..4))
        .prop_flat_map(|(seed, masks)| (Just(seed), proptest::collection::vec(call(masks), 2..7)))
}

struct Gpu {
    stream: Arc<CudaStream>,
    mods: [Op; 3],
}

fn gpu() -> Result<Gpu> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let load = |name: &str| -> Result<Op> {
        // SAFETY: each module defines `op(unsigned, unsigned, const unsigned*, unsigned*)`,
        // reading x and writing y within n elements.
        unsafe { Op::load(&ctx, compile_ptx(SRC.replace(name, "op"))?) }
    };
    Ok(Gpu { mods: [load("op_add")?, load("op_mul")?, load("op_acc")?], stream })
}

fn run_case(g: &Gpu, seed: u32, calls: &[Call], graph_cache: &mut GraphCache) -> Result<()> {
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let (mut bg, mut be) = (Bufs::new(&g.stream, seed)?, Bufs::new(&g.stream, seed)?);
    for (i, c) in calls.iter().enumerate() {
        bg.swap(c.swap.0, c.swap.1);
        be.swap(c.swap.0, c.swap.1);
        step(graph_cache, &g.stream, &g.mods, &mut bg, c.mask, &c.modules, &c.scalars)?;
        step(&mut eager, &g.stream, &g.mods, &mut be, c.mask, &c.modules, &c.scalars)?;
        let (got, want) = (bg.host(&g.stream)?, be.host(&g.stream)?);
        for k in 0..6 {
            assert_eq!(got[k], want[k], "call {i} (mask {:#08x}): buffer b{k} differs", c.mask);
        }
    }
    Ok(())
}

/// Runs `DIFFERENTIAL_CASES` (default 1000) cases of `strategy` with shrinking, each through
/// `run` on one graph cache shared by all cases (variants pile up and are evicted, bound 8);
/// `calls` counts a case's calls. Returns the number of cases, of calls (shrinking included)
/// and the cache's stats.
fn run_cases<S: Strategy>(
    strategy: S,
    calls: impl Fn(&S::Value) -> usize,
    run: impl Fn(&S::Value, &mut GraphCache) -> Result<()>,
) -> (u32, u64, cudagraph::Stats) {
    let cache = std::cell::RefCell::new(GraphCache::new());
    let cases =
        std::env::var("DIFFERENTIAL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let total = std::cell::Cell::new(0u64);
    runner
        .run(&strategy, |case| {
            total.set(total.get() + calls(&case) as u64);
            run(&case, &mut cache.borrow_mut()).map_err(|e| TestCaseError::fail(e.to_string()))
        })
        .unwrap();
    let s = cache.borrow().stats();
    (cases, total.get(), s)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graphs_equal_the_eager_oracle_on_random_dags() {
    let g = gpu().expect("GPU setup");
    let (cases, calls, s) =
        run_cases(case(), |(_, c)| c.len(), |(seed, c), cache| run_case(&g, *seed, c, cache));
    println!("{cases} cases, {calls} graph calls (shrinking included), stats {s:?}");
    assert!(s.builds > 0 && s.hits > 0 && s.node_updates > 0 && s.evictions > 0, "{s:?}");
}

// ---------------------------------------------------------------------------------------------
// The same through `GraphBuilder`: random programs instead of one fixed body.
// ---------------------------------------------------------------------------------------------

/// One instruction of a builder program, over buffers `0..6`.
#[derive(Clone, Copy, Debug)]
enum Instr {
    /// `op(N, scalar, src, dst)` from the call's module for this slot.
    Kernel { src: usize, dst: usize },
    /// `copy(src, dst)`.
    Copy { src: usize, dst: usize },
    /// `memset(dst, scalar)`.
    Memset { dst: usize },
    /// `zero(dst)`.
    Zero { dst: usize },
}

/// An instruction and its `after` edges: each index picks one of the earlier nodes.
#[derive(Clone, Debug)]
struct Slot {
    instr: Instr,
    after: Vec<proptest::sample::Index>,
}

fn instr() -> impl Strategy<Value = Instr> {
    let pair = || (0usize..6, 1usize..6).prop_map(|(s, d)| (s, (s + d) % 6));
    prop_oneof![
        4 => pair().prop_map(|(src, dst)| Instr::Kernel { src, dst }),
        1 => pair().prop_map(|(src, dst)| Instr::Copy { src, dst }),
        1 => (0usize..6).prop_map(|dst| Instr::Memset { dst }),
        1 => (0usize..6).prop_map(|dst| Instr::Zero { dst }),
    ]
}

/// A program of 1 to 24 slots; about one slot in six has 1 or 2 `after` edges.
fn program() -> impl Strategy<Value = Vec<Slot>> {
    let after = prop_oneof![
        5 => Just(Vec::new()),
        1 => proptest::collection::vec(any::<proptest::sample::Index>(), 1..3),
    ];
    proptest::collection::vec(
        (instr(), after).prop_map(|(instr, after)| Slot { instr, after }),
        1..=24,
    )
}

/// One builder call: which program, per slot its module and scalar, a buffer swap before it,
/// the order in which the buffers are registered, and which buffers the program only reads are
/// registered with `write` anyway.
#[derive(Clone, Debug)]
struct BuilderCall {
    program: usize,
    modules: [usize; 24],
    scalars: [u32; 24],
    swap: (usize, usize),
    order: Vec<usize>,
    register_write: [bool; 6],
}

fn builder_call(programs: usize) -> impl Strategy<Value = BuilderCall> {
    (
        0..programs,
        proptest::array::uniform24(0usize..3),
        proptest::array::uniform24(any::<u32>()),
        (0usize..6, 0usize..6),
        Just((0..6).collect::<Vec<usize>>()).prop_shuffle(),
        proptest::array::uniform6(any::<bool>()),
    )
        .prop_map(|(program, modules, scalars, swap, order, register_write)| BuilderCall {
            program,
            modules,
            scalars,
            swap,
            order,
            register_write,
        })
}

/// A builder case: a seed for the buffers' contents, 2 or 3 programs, and 2 to 7 calls.
type BuilderCase = (u32, Vec<Vec<Slot>>, Vec<BuilderCall>);

fn builder_case() -> impl Strategy<Value = BuilderCase> {
    (any::<u32>(), proptest::collection::vec(program(), 2..4)).prop_flat_map(|(seed, programs)| {
        let n = programs.len();
        (Just(seed), Just(programs), proptest::collection::vec(builder_call(n), 2..8))
    })
}

/// The six buffers of a builder case, with the contents of `Bufs::new`.
fn buffers(stream: &Arc<CudaStream>, seed: u32) -> Result<[CudaSlice<u32>; 6]> {
    let b = Bufs::new(stream, seed)?;
    Ok([b.b0, b.b1, b.b2, b.b3, b.b4, b.b5])
}

/// A registered buffer: read only, or written (and read through `DevWrite::read`).
#[derive(Clone, Copy)]
enum Reg<'a> {
    Read(DevRead<'a, u32>),
    Write(DevWrite<'a, u32>),
}

impl<'a> Reg<'a> {
    fn read(self) -> DevRead<'a, u32> {
        match self {
            Reg::Read(r) => r,
            Reg::Write(w) => w.read(),
        }
    }

    fn write(self) -> DevWrite<'a, u32> {
        match self {
            Reg::Write(w) => w,
            Reg::Read(_) => {
                unreachable!("every buffer a program writes is registered with `write`")
            }
        }
    }
}

/// One call of `program` through a `GraphBuilder` on `cache` (graph or eager mode).
fn builder_step(
    cache: &mut GraphCache,
    stream: &CudaStream,
    mods: &[Op; 3],
    bufs: &mut [CudaSlice<u32>; 6],
    program: &[Slot],
    c: &BuilderCall,
) -> Result<()> {
    let cfg = LaunchConfig::for_num_elems(N);
    let (mut used, mut written) = ([false; 6], [false; 6]);
    for s in program {
        match s.instr {
            Instr::Kernel { src, dst } | Instr::Copy { src, dst } => {
                used[src] = true;
                used[dst] = true;
                written[dst] = true;
            }
            Instr::Memset { dst } | Instr::Zero { dst } => {
                used[dst] = true;
                written[dst] = true;
            }
        }
    }
    let mut g = cache.builder(stream);
    let mut unregistered: Vec<Option<&mut CudaSlice<u32>>> = bufs.iter_mut().map(Some).collect();
    let mut regs: [Option<Reg<'_>>; 6] = [None; 6];
    for &i in &c.order {
        let b = unregistered[i].take().expect("`order` is a permutation");
        if used[i] {
            regs[i] = Some(if written[i] || c.register_write[i] {
                Reg::Write(g.write(b))
            } else {
                Reg::Read(g.read(b))
            });
        }
    }
    let reg = |i: usize| regs[i].expect("every buffer the program uses is registered");
    let mut nodes: Vec<Node> = Vec::with_capacity(program.len());
    for (j, s) in program.iter().enumerate() {
        let node = match s.instr {
            Instr::Kernel { src, dst } => {
                let k = &mods[c.modules[j]];
                g.kernel(k.op(N, c.scalars[j], reg(src).read(), reg(dst).write()).launch(cfg))
            }
            Instr::Copy { src, dst } => g.copy(reg(src).read(), reg(dst).write()),
            Instr::Memset { dst } => g.memset(reg(dst).write(), c.scalars[j]),
            Instr::Zero { dst } => g.zero(reg(dst).write()),
        };
        if j > 0 && !s.after.is_empty() {
            let earlier: Vec<Node> = s.after.iter().map(|ix| nodes[ix.index(j)]).collect();
            g.after(node, &earlier);
        }
        nodes.push(node);
    }
    g.launch()
}

/// Host model of one builder call (the three kernels of `differential.cu`, in program order),
/// which checks the eager oracle itself: a wrong pointer or scalar in what the builder records
/// would go to the graph and to the oracle alike.
fn model(bufs: &mut [Vec<u32>; 6], program: &[Slot], c: &BuilderCall) {
    for (j, s) in program.iter().enumerate() {
        let a = c.scalars[j];
        match s.instr {
            Instr::Kernel { src, dst } => {
                let x = bufs[src].clone();
                for (y, x) in bufs[dst].iter_mut().zip(x) {
                    *y = match c.modules[j] {
                        0 => x.wrapping_add(a),
                        1 => x.wrapping_mul(3) ^ a,
                        _ => y.wrapping_add(x.wrapping_mul(a | 1)),
                    };
                }
            }
            Instr::Copy { src, dst } => bufs[dst] = bufs[src].clone(),
            Instr::Memset { dst } => bufs[dst].fill(a),
            Instr::Zero { dst } => bufs[dst].fill(0),
        }
    }
}

fn run_builder_case(
    g: &Gpu,
    (seed, programs, calls): &BuilderCase,
    graph_cache: &mut GraphCache,
) -> Result<()> {
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let (mut bg, mut be) = (buffers(&g.stream, *seed)?, buffers(&g.stream, *seed)?);
    let mut host: [Vec<u32>; 6] =
        Bufs::new(&g.stream, *seed)?.host(&g.stream)?.try_into().expect("six buffers");
    for (i, c) in calls.iter().enumerate() {
        bg.swap(c.swap.0, c.swap.1);
        be.swap(c.swap.0, c.swap.1);
        host.swap(c.swap.0, c.swap.1);
        let p = c.program % programs.len();
        builder_step(graph_cache, &g.stream, &g.mods, &mut bg, &programs[p], c)?;
        builder_step(&mut eager, &g.stream, &g.mods, &mut be, &programs[p], c)?;
        model(&mut host, &programs[p], c);
        for k in 0..6 {
            let (got, want) = (g.stream.clone_dtoh(&bg[k])?, g.stream.clone_dtoh(&be[k])?);
            assert_eq!(got, want, "call {i} (program {p}): buffer {k}: graph and eager differ");
            assert_eq!(want, host[k], "call {i} (program {p}): buffer {k}: eager and host differ");
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_graphs_equal_the_eager_oracle_on_random_dags() {
    let g = gpu().expect("GPU setup");
    let (cases, calls, s) = run_cases(
        builder_case(),
        |case| case.2.len(),
        |case, cache| run_builder_case(&g, case, cache),
    );
    println!("builder: {cases} cases, {calls} graph calls (shrinking included), stats {s:?}");
    assert!(s.builds > 0 && s.hits > 0 && s.node_updates > 0 && s.evictions > 0, "{s:?}");
}
