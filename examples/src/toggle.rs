//! Enable/disable against variants (issue 15): is a host `if` whose branches hold only kernel
//! nodes cheaper as one exec whose nodes are switched on and off (`cuGraphNodeSetEnabled`) than
//! as one cached exec per branch, as `graph!` makes it today?
//!
//! ```text
//! toggle [--reps N] [--steps S] [--max-k K] [--copies C] [--quick] [--plan]
//! ```
//! A step is a host `if` whose two branches are each a chain of K tiny kernels (`affine`, one
//! block of 32 threads on 32 `u32`: branch A maps `x → 3x + 1`, branch B `x → 5x + 2`, so the
//! order of the branches taken shows in the result), for K = 1, 10, 100, with the branch
//! alternating every step (`alternate`) or always A (`same`). Four ways, timed side by side in
//! one run (each repetition runs every way once, in a rotating order):
//! - `floor`: a raw exec of branch A alone, launched every step, nothing switched (the cost of
//!   launching K kernels);
//! - `graph! host if`: `graph!` with the host `if`: two cached variants, what the crate does;
//! - `raw 2 execs`: raw driver graphs, one exec per branch, launch the step's one;
//! - `raw toggled`: one raw exec holding both branches (A's chain, then B's, one chain: the
//!   union of the branches with edges from their hazards in program order), the K nodes of the
//!   branch not taken disabled; when the branch changes, the K nodes of the old branch are
//!   disabled and the K of the new one enabled (2K `cuGraphNodeSetEnabled` calls on the exec),
//!   then `cuGraphLaunch`.
//!
//! µs per step = wall time of S steps enqueued back to back, then one `cuStreamSynchronize`,
//! divided by S; median (and p10/p90) over the repetitions. Every way checks its buffer against
//! a host model after the warm-up and after the timed repetitions.
//!
//! One-time costs per K: instantiations (the cache's `stats().instantiations`; 2 and 1 for the
//! raw ways), the median time of `cuGraphInstantiateWithFlags` of the K-node branch graph and of
//! the 2K-node union graph, `graph!`'s first call of each branch (build, instantiate, launch),
//! and device memory per exec: `cuMemGetInfo_v2`'s free bytes before and after instantiating
//! `--copies` execs of one graph (and again after `cuGraphUpload` of each, synchronized, since
//! the driver may place an exec's device data at upload or first launch), divided by the
//! copies; likewise the process's resident host memory (`/proc/self/statm`). The driver hands
//! out device memory in pages, so a figure is resolved to about a page / copies.
//!
//! Ends with a table and a one-line verdict. Without a CUDA driver: one line, the step's plan,
//! exit status 2; `--plan` prints the plan as Graphviz DOT.

use std::ffi::c_void;
use std::process::ExitCode;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use cudagraph::cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS, CUdeviceptr, CUfunction, CUgraphNode, CUstream,
};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, graph, kernels};

#[path = "cli.rs"]
mod cli;
#[path = "raw_graph.rs"]
mod raw_graph;
use raw_graph::{OwnedExec, OwnedGraph};

const SOURCE: &str = include_str!("../kernels/toggle.cu");

type Res<T> = Result<T, Box<dyn std::error::Error>>;

kernels! {
    /// The kernel of `kernels/toggle.cu`.
    struct Toggle {
        /// `x[i] = x[i] * a + b` for `i < n`.
        fn affine(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

/// Elements of every buffer; each kernel is one block of 32 threads over them.
const ELEMS: u32 = 32;
/// `(grid, block)` of every kernel.
const CFG: (u32, u32) = (1, 32);
/// Branch sizes (kernels per branch).
const KS: [usize; 3] = [1, 10, 100];
/// Steps run and checked before a row is timed.
const WARMUP: u64 = 4;

/// One branch of the host `if`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Branch {
    A,
    B,
}

impl Branch {
    /// `(a, b)` of the branch's kernels: each maps `x → a x + b`.
    fn map(self) -> (u32, u32) {
        match self {
            Branch::A => (3, 1),
            Branch::B => (5, 2),
        }
    }
}

/// Which branch each step takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// A, B, A, B, …: the branch changes every step.
    Alternate,
    /// A every step.
    Same,
}

impl Pattern {
    fn branch(self, step: u64) -> Branch {
        match self {
            Pattern::Alternate if step % 2 == 1 => Branch::B,
            _ => Branch::A,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Pattern::Alternate => "alternate",
            Pattern::Same => "same",
        }
    }
}

/// The host model: `x` after `k` kernels of `branch`.
fn model(mut x: u32, branch: Branch, k: usize) -> u32 {
    let (a, b) = branch.map();
    for _ in 0..k {
        x = x.wrapping_mul(a).wrapping_add(b);
    }
    x
}

// ---------------------------------------------------------------------------------------------
// The graph! step: a host `if` over two chains of K kernels (two cached variants).

macro_rules! host_if_graph {
    ($name:ident, $k:tt) => {
        fn $name(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Toggle,
            take_a: bool,
            mut x: &mut CudaSlice<u32>,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                if take_a {
                    for _ in 0..$k {
                        k.affine(ELEMS, 3, 1, &mut x).launch(CFG);
                    }
                } else {
                    for _ in 0..$k {
                        k.affine(ELEMS, 5, 2, &mut x).launch(CFG);
                    }
                }
            })
        }
    };
}

host_if_graph!(host_if_1, 1);
host_if_graph!(host_if_10, 10);
host_if_graph!(host_if_100, 100);

fn host_if(
    nodes: usize,
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Toggle,
    branch: Branch,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let take_a = branch == Branch::A;
    match nodes {
        1 => host_if_1(cache, stream, k, take_a, x),
        10 => host_if_10(cache, stream, k, take_a, x),
        100 => host_if_100(cache, stream, k, take_a, x),
        _ => panic!("no graph! host if of {nodes} kernels per branch is compiled in"),
    }
}

// ---------------------------------------------------------------------------------------------
// Raw driver graphs.

impl OwnedGraph {
    /// A chain of kernel nodes `affine`, one `cuGraphAddKernelNode_v2` of `affine(ELEMS, a, b, x)`
    /// per `(a, b)` of `maps`, each after the one before.
    fn chain(func: CUfunction, maps: &[(u32, u32)], x: CUdeviceptr) -> Res<OwnedGraph> {
        let mut g = OwnedGraph::create(maps.len())?;
        for &(mut a, mut b) in maps {
            let (mut n, mut x) = (ELEMS, x);
            let mut args: [*mut c_void; 4] = [
                ptr::from_mut(&mut n).cast(),
                ptr::from_mut(&mut a).cast(),
                ptr::from_mut(&mut b).cast(),
                ptr::from_mut(&mut x).cast(),
            ];
            let params = CUDA_KERNEL_NODE_PARAMS {
                func,
                gridDimX: CFG.0,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: CFG.1,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                kernelParams: args.as_mut_ptr(),
                extra: ptr::null_mut(),
                kern: ptr::null_mut(),
                ctx: ptr::null_mut(),
            };
            let deps: &[CUgraphNode] = match g.nodes.last() {
                Some(last) => std::slice::from_ref(last),
                None => &[],
            };
            let mut node = ptr::null_mut();
            // SAFETY: the graph is live, `deps` are its nodes, `params` points to one value per
            // parameter of `affine(unsigned, unsigned, unsigned, unsigned *)`, valid during the
            // call (the driver copies them).
            unsafe {
                sys::cuGraphAddKernelNode_v2(&mut node, g.graph, deps.as_ptr(), deps.len(), &params)
            }
            .result()?;
            g.nodes.push(node);
        }
        Ok(g)
    }
}

impl OwnedExec {
    /// `cuGraphNodeSetEnabled` of `node` (a kernel node of the graph this exec was made from).
    fn set_enabled(&self, node: CUgraphNode, on: bool) -> Res<()> {
        // SAFETY: `node` is a kernel node of the graph this exec was instantiated from, which
        // is still alive; launches already enqueued are not affected (the driver's rule).
        unsafe { sys::cuGraphNodeSetEnabled(self.0, node, u32::from(on)) }.result()?;
        Ok(())
    }
}

/// The `(a, b)` of the K kernels of `branch`.
fn maps(branch: Branch, k: usize) -> Vec<(u32, u32)> {
    vec![branch.map(); k]
}

/// One exec holding both branches (A's K nodes, then B's K nodes, one chain), B disabled, and
/// which branch is enabled now.
struct Toggled {
    graph: OwnedGraph,
    exec: OwnedExec,
    k: usize,
    on: Branch,
}

impl Toggled {
    fn new(func: CUfunction, k: usize, x: CUdeviceptr) -> Res<Toggled> {
        let both: Vec<(u32, u32)> =
            maps(Branch::A, k).into_iter().chain(maps(Branch::B, k)).collect();
        let graph = OwnedGraph::chain(func, &both, x)?;
        let exec = OwnedExec::instantiate(&graph)?;
        let t = Toggled { graph, exec, k, on: Branch::A };
        for &node in t.nodes(Branch::B) {
            t.exec.set_enabled(node, false)?;
        }
        Ok(t)
    }

    fn nodes(&self, b: Branch) -> &[CUgraphNode] {
        match b {
            Branch::A => &self.graph.nodes[..self.k],
            Branch::B => &self.graph.nodes[self.k..],
        }
    }

    /// The step: switch the branches' nodes if the branch changed, then launch.
    fn step(&mut self, b: Branch, stream: CUstream) -> Res<()> {
        if b != self.on {
            for &node in self.nodes(self.on) {
                self.exec.set_enabled(node, false)?;
            }
            for &node in self.nodes(b) {
                self.exec.set_enabled(node, true)?;
            }
            self.on = b;
        }
        self.exec.launch(stream)
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements.

/// Median and 10th/90th percentiles (nearest rank) of a sample.
#[derive(Clone, Copy, Debug)]
struct Summary {
    median: f64,
    p10: f64,
    p90: f64,
}

fn summarize(mut v: Vec<f64>) -> Summary {
    assert!(!v.is_empty(), "summarize: no samples");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let rank = |q: f64| v[((q * (n - 1) as f64).round() as usize).min(n - 1)];
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Summary { median, p10: rank(0.1), p90: rank(0.9) }
}

struct Env {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    k: Toggle,
    reps: usize,
    steps: Option<usize>,
    copies: usize,
}

impl Env {
    fn func(&self) -> CUfunction {
        self.k.function("affine").expect("declared in kernels!").cu_function()
    }
    fn cu_stream(&self) -> CUstream {
        self.stream.cu_stream()
    }
}

/// One step of one way: its buffer (unused by the raw ways, whose graphs hold its address) and
/// the branch to take.
type StepFn<'a> = dyn FnMut(&mut CudaSlice<u32>, Branch) -> Res<()> + 'a;

/// One way of running the step, with its own buffer and its count of steps run.
struct Lane<'a> {
    name: &'static str,
    /// The branch this way always takes (the floor), else the pattern's.
    fixed: Option<Branch>,
    x: CudaSlice<u32>,
    steps_run: u64,
    run: Box<StepFn<'a>>,
    samples: Vec<f64>,
}

impl Lane<'_> {
    fn branch(&self, pattern: Pattern, step: u64) -> Branch {
        self.fixed.unwrap_or_else(|| pattern.branch(step))
    }

    fn steps(&mut self, pattern: Pattern, n: u64) -> Res<()> {
        for _ in 0..n {
            let b = self.branch(pattern, self.steps_run);
            (self.run)(&mut self.x, b)?;
            self.steps_run += 1;
        }
        Ok(())
    }

    /// Checks the buffer against the host model of every step run so far.
    fn check(&self, env: &Env, pattern: Pattern, k: usize, what: &str) -> Res<()> {
        env.stream.synchronize()?;
        let want = (0..self.steps_run).fold(0u32, |x, i| model(x, self.branch(pattern, i), k));
        let got = env.stream.clone_dtoh(&self.x)?;
        if let Some(bad) = got.iter().find(|&&v| v != want) {
            return Err(format!(
                "{what}, {}: WRONG RESULT after {} steps: the buffer holds {bad}, the host model says {want}",
                self.name, self.steps_run
            )
            .into());
        }
        Ok(())
    }
}

/// Steps per repetition: enough that the one synchronize per repetition is a small part of it.
fn steps_per_rep(k: usize) -> usize {
    (2000 / k).clamp(10, 1000)
}

/// Device pointer of a buffer (event tracking is off: the guard does nothing).
fn dptr(x: &CudaSlice<u32>, stream: &CudaStream) -> CUdeviceptr {
    x.device_ptr(stream).0
}

/// µs per step of the four ways at one K and pattern, in the order floor, graph!, 2 execs,
/// toggled; and the cache's instantiations.
fn per_step(env: &Env, k: usize, pattern: Pattern) -> Res<([Summary; 4], u64)> {
    let what = format!("K={k} {}", pattern.name());
    let steps = env.steps.unwrap_or_else(|| steps_per_rep(k));
    let (func, cs) = (env.func(), env.cu_stream());
    let zeros = || env.stream.alloc_zeros::<u32>(ELEMS as usize);
    let (x_floor, x_graph, x_two, x_tog) = (zeros()?, zeros()?, zeros()?, zeros()?);

    let floor_graph = OwnedGraph::chain(func, &maps(Branch::A, k), dptr(&x_floor, &env.stream))?;
    let floor = OwnedExec::instantiate(&floor_graph)?;
    let p_two = dptr(&x_two, &env.stream);
    let (ga, gb) = (
        OwnedGraph::chain(func, &maps(Branch::A, k), p_two)?,
        OwnedGraph::chain(func, &maps(Branch::B, k), p_two)?,
    );
    let (ea, eb) = (OwnedExec::instantiate(&ga)?, OwnedExec::instantiate(&gb)?);
    let mut toggled = Toggled::new(func, k, dptr(&x_tog, &env.stream))?;
    let mut cache = GraphCache::new();

    let mut lanes = vec![
        Lane {
            name: "floor",
            fixed: Some(Branch::A),
            x: x_floor,
            steps_run: 0,
            run: Box::new(|_, _| floor.launch(cs)),
            samples: vec![],
        },
        Lane {
            name: "graph! host if",
            fixed: None,
            x: x_graph,
            steps_run: 0,
            run: Box::new(|x, b| Ok(host_if(k, &mut cache, &env.stream, &env.k, b, x)?)),
            samples: vec![],
        },
        Lane {
            name: "raw 2 execs",
            fixed: None,
            x: x_two,
            steps_run: 0,
            run: Box::new(|_, b| match b {
                Branch::A => ea.launch(cs),
                Branch::B => eb.launch(cs),
            }),
            samples: vec![],
        },
        Lane {
            name: "raw toggled",
            fixed: None,
            x: x_tog,
            steps_run: 0,
            run: Box::new(|_, b| toggled.step(b, cs)),
            samples: vec![],
        },
    ];
    for lane in &mut lanes {
        lane.steps(pattern, WARMUP)?;
        lane.check(env, pattern, k, &what)?;
        lane.steps(pattern, steps as u64)?;
    }
    env.stream.synchronize()?;
    let n = lanes.len();
    for rep in 0..env.reps {
        for j in 0..n {
            let lane = &mut lanes[(rep + j) % n];
            let t = Instant::now();
            lane.steps(pattern, steps as u64)?;
            env.stream.synchronize()?;
            lane.samples.push(t.elapsed().as_secs_f64() * 1e6 / steps as f64);
        }
    }
    for lane in &lanes {
        lane.check(env, pattern, k, &what)?;
    }
    env.ctx.check_err()?;
    let s: Vec<Summary> = lanes.into_iter().map(|l| summarize(l.samples)).collect();
    Ok(([s[0], s[1], s[2], s[3]], cache.stats().instantiations))
}

/// Free device bytes (`cuMemGetInfo_v2`).
fn free_device_bytes() -> Res<usize> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: writes two integers; the context is current.
    unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }.result()?;
    Ok(free)
}

/// Resident host bytes of this process (`/proc/self/statm`, second field, 4 KiB pages); 0 where
/// it cannot be read.
fn resident_host_bytes() -> i64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<i64>().ok()))
        .map_or(0, |pages| pages * 4096)
}

/// One-time costs of execs of one graph: median µs of `cuGraphInstantiateWithFlags`, device
/// bytes per exec after instantiating and after uploading, host bytes per exec.
#[derive(Clone, Copy, Debug)]
struct ExecCost {
    instantiate_us: f64,
    device_bytes: f64,
    device_bytes_uploaded: f64,
    host_bytes: f64,
}

fn exec_cost(env: &Env, maps: &[(u32, u32)], x: CUdeviceptr) -> Res<ExecCost> {
    let g = OwnedGraph::chain(env.func(), maps, x)?;
    env.stream.synchronize()?;
    let (free0, rss0) = (free_device_bytes()?, resident_host_bytes());
    let mut execs = Vec::with_capacity(env.copies);
    let mut times = Vec::with_capacity(env.copies);
    for _ in 0..env.copies {
        let t = Instant::now();
        execs.push(OwnedExec::instantiate(&g)?);
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let free1 = free_device_bytes()?;
    for e in &execs {
        e.upload(env.cu_stream())?;
    }
    env.stream.synchronize()?;
    let (free2, rss2) = (free_device_bytes()?, resident_host_bytes());
    drop(execs);
    let c = env.copies as f64;
    Ok(ExecCost {
        instantiate_us: summarize(times).median,
        device_bytes: (free0 as f64 - free1 as f64) / c,
        device_bytes_uploaded: (free0 as f64 - free2 as f64) / c,
        host_bytes: (rss2 - rss0) as f64 / c,
    })
}

/// `graph!`'s one-time costs: median µs of the first call of each branch (build, instantiate,
/// launch enqueued), device and host bytes per cache holding both variants (launched and
/// synchronized), instantiations per cache.
struct GraphCost {
    first_call_us: f64,
    device_bytes: f64,
    host_bytes: f64,
    instantiations: f64,
}

fn graph_cost(env: &Env, k: usize) -> Res<GraphCost> {
    let mut x = env.stream.alloc_zeros::<u32>(ELEMS as usize)?;
    env.stream.synchronize()?;
    let (free0, rss0) = (free_device_bytes()?, resident_host_bytes());
    let mut caches: Vec<GraphCache> = (0..env.copies).map(|_| GraphCache::new()).collect();
    let mut times = Vec::with_capacity(2 * env.copies);
    for cache in &mut caches {
        for b in [Branch::A, Branch::B] {
            let t = Instant::now();
            host_if(k, cache, &env.stream, &env.k, b, &mut x)?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    env.stream.synchronize()?;
    let (free1, rss1) = (free_device_bytes()?, resident_host_bytes());
    let inst: u64 = caches.iter().map(|c| c.stats().instantiations).sum();
    drop(caches);
    let c = env.copies as f64;
    Ok(GraphCost {
        first_call_us: summarize(times).median,
        device_bytes: (free0 as f64 - free1 as f64) / c,
        host_bytes: (rss1 - rss0) as f64 / c,
        instantiations: inst as f64 / c,
    })
}

fn kib(bytes: f64) -> String {
    format!("{:.1}", bytes / 1024.0)
}

fn run(a: &Args) -> Res<bool> {
    let ctx = CudaContext::new(0)?;
    ctx.bind_to_thread()?;
    // Event tracking off before anything is allocated: all work is on one stream, the raw
    // graphs take the buffers' addresses once, and the ways are compared without cudarc's
    // per-buffer event bookkeeping.
    // SAFETY: every buffer is used on the one stream made below only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    // SAFETY: the declaration matches toggle.cu's `affine`, which stays within its buffer.
    let k = unsafe { Toggle::load(&ctx, compile_ptx(SOURCE)?) }?;
    let mut version = 0i32;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    let reps = a.reps.map_or(if a.quick { 5 } else { 100 }, |n| n as usize);
    let copies = a.copies.map_or(if a.quick { 4 } else { 32 }, |n| n as usize);
    let steps = a.steps.map(|n| n as usize);
    let env = Env { ctx, stream, k, reps, steps, copies };
    let ks: Vec<usize> = KS
        .iter()
        .copied()
        .filter(|&k| a.max_k.is_none_or(|m| k <= m) && (!a.quick || k <= 10))
        .collect();
    println!(
        "toggle: device {}, CUDA driver {}.{}; {reps} repetitions; each kernel 1 block x 32 threads on 32 u32",
        env.ctx.name().unwrap_or_default(),
        version / 1000,
        version % 1000 / 10
    );
    println!(
        "µs per step = wall time of S steps enqueued back to back, then one synchronize, / S (S = {}); median [p10, p90]; the four ways interleaved per repetition",
        ks.iter()
            .map(|&k| format!("K={k}: {}", steps.unwrap_or_else(|| steps_per_rep(k))))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
    println!(
        "| K | pattern | floor (1 exec, no switch) | graph! host if | raw 2 execs | raw toggled | toggled / 2 execs | graph! / 2 execs |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let cell = |s: &Summary| format!("{:.2} [{:.2}, {:.2}]", s.median, s.p10, s.p90);
    // (K, pattern, toggled / 2 execs).
    let mut ratios: Vec<(usize, Pattern, f64)> = Vec::new();
    let mut graph_inst = Vec::new();
    for &kk in &ks {
        for pattern in [Pattern::Alternate, Pattern::Same] {
            eprintln!("toggle: K={kk} {}", pattern.name());
            let ([fl, g, two, tog], inst) = per_step(&env, kk, pattern)?;
            // One exec per branch taken: both when alternating, A's alone when not.
            let want = if pattern == Pattern::Alternate { 2 } else { 1 };
            graph_inst.push((kk, pattern, inst, want));
            ratios.push((kk, pattern, tog.median / two.median));
            println!(
                "| {kk} | {} | {} | {} | {} | {} | {:.2} | {:.2} |",
                pattern.name(),
                cell(&fl),
                cell(&g),
                cell(&two),
                cell(&tog),
                tog.median / two.median,
                g.median / two.median
            );
        }
    }

    println!();
    println!(
        "One-time costs ({copies} copies each; device memory from cuMemGetInfo_v2 free bytes before/after instantiating, and after cuGraphUpload + synchronize, / copies; host memory from /proc/self/statm resident pages; KiB):"
    );
    println!(
        "| K | instantiations graph! / 2 execs / toggled | instantiate µs K-node / 2K-node graph | graph! first call µs per branch | device KiB per exec K-node (uploaded) | device KiB per exec 2K-node (uploaded) | device KiB: 2 execs / toggled / graph! cache | host KiB: 2 execs / toggled / graph! cache |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    // (K, device bytes of 2 execs, of the toggled exec).
    let mut memory: Vec<(usize, f64, f64)> = Vec::new();
    let mut scratch = env.stream.alloc_zeros::<u32>(ELEMS as usize)?;
    for &kk in &ks {
        eprintln!("toggle: K={kk} one-time costs");
        let p = dptr(&scratch, &env.stream);
        let one = exec_cost(&env, &maps(Branch::A, kk), p)?;
        let both: Vec<(u32, u32)> =
            maps(Branch::A, kk).into_iter().chain(maps(Branch::B, kk)).collect();
        let union = exec_cost(&env, &both, p)?;
        let g = graph_cost(&env, kk)?;
        let two_dev = 2.0 * one.device_bytes_uploaded;
        memory.push((kk, two_dev, union.device_bytes_uploaded));
        println!(
            "| {kk} | {:.0} / 2 / 1 | {:.1} / {:.1} | {:.1} | {} ({}) | {} ({}) | {} / {} / {} | {} / {} / {} |",
            g.instantiations,
            one.instantiate_us,
            union.instantiate_us,
            g.first_call_us,
            kib(one.device_bytes),
            kib(one.device_bytes_uploaded),
            kib(union.device_bytes),
            kib(union.device_bytes_uploaded),
            kib(two_dev),
            kib(union.device_bytes_uploaded),
            kib(g.device_bytes),
            kib(2.0 * one.host_bytes),
            kib(union.host_bytes),
            kib(g.host_bytes),
        );
    }
    env.stream.memset_zeros(&mut scratch)?;
    env.stream.synchronize()?;
    let inst_ok = graph_inst.iter().all(|&(_, _, got, want)| got == want);
    if !inst_ok {
        println!("MISMATCH: graph! instantiations (K, pattern, made, expected): {graph_inst:?}");
    }

    // The verdict: toggling is the better default only if it is no slower per step (within 5 %)
    // at every K in both patterns; memory alone does not decide (a cache holds at most 8
    // variants by default).
    let worst = ratios
        .iter()
        .copied()
        .fold((0, Pattern::Same, 0.0f64), |w, r| if r.2 > w.2 { r } else { w });
    let best = ratios
        .iter()
        .copied()
        .fold((0, Pattern::Same, f64::MAX), |w, r| if r.2 < w.2 { r } else { w });
    let mem = memory
        .iter()
        .map(|(kk, two, tog)| format!("K={kk}: {} vs {} KiB", kib(*two), kib(*tog)))
        .collect::<Vec<_>>()
        .join(", ");
    let toggling_wins = worst.2 <= 1.05;
    println!();
    println!(
        "verdict: toggled / 2 execs per step from {:.2}x (K={} {}) to {:.2}x (K={} {}); device memory 2 execs vs toggled {mem}; instantiations 2 vs 1 -> {}",
        best.2,
        best.0,
        best.1.name(),
        worst.2,
        worst.0,
        worst.1.name(),
        if toggling_wins {
            "toggling is no slower at launch: it is the better default"
        } else {
            "variants are faster at launch: keep one cached exec per branch as the default"
        }
    );
    Ok(inst_ok)
}

/// Enable/disable against variants: µs per step, instantiations and memory of a host `if`
/// with two branches of K kernels, as `graph!`'s two cached variants, as two raw execs, and as
/// one raw exec with the branches' nodes toggled (`cuGraphNodeSetEnabled`).
#[derive(clap::Parser)]
#[command(name = "toggle")]
struct Args {
    /// Repetitions per measurement, at least 3 [default: 100, 5 with --quick].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(3..))]
    reps: Option<u64>,
    /// Steps per repetition [default: 2000/K within 10..=1000].
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    steps: Option<u64>,
    /// Branch sizes up to this K only (K = 1, 10, 100).
    #[arg(long, value_name = "K")]
    max_k: Option<usize>,
    /// Execs (and caches) instantiated per memory measurement [default: 32, 4 with --quick].
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u64).range(1..))]
    copies: Option<u64>,
    /// A fast sanity run: K up to 10, 5 repetitions, 4 copies.
    #[arg(long)]
    quick: bool,
    /// Print the step's graph plan as Graphviz DOT and exit (no GPU needed).
    #[arg(long)]
    plan: bool,
}

fn main() -> ExitCode {
    cli::main("toggle", &[], |a: &Args| a.plan, |a| run(a).map_err(|e| e.to_string()))
}
