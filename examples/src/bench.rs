//! The benchmark: what a step of K tiny kernels costs with `graph!`, next to what one would
//! otherwise use — cudarc stream launches, cudarc stream capture — and next to the floor,
//! hand-written raw driver graphs (`cudarc::driver::sys`); what a `capture` statement, recorded
//! anew on every call, costs against the same kernels as direct nodes (row dc); and, on devices
//! of compute capability 9.0 and later, chains of `#[programmatic]` kernels with programmatic
//! edges against raw graphs with plain and with programmatic edges (rows pc, pp, pt, pd, pn,
//! pf, pnf; and qc, qp, qd, qn with DESIGN.md's kernel on `cuMemAlloc` memory;
//! `--programmatic-only` runs them alone); and steps that wait for their graph and read 8 bytes
//! of its result from pinned host memory, raw graphs against `graph!` (rows rc, rc1, rd, re, rs).
//!
//! ```text
//! bench [--reps N] [--steps S] [--max-k K] [--quick] [--programmatic-only] [--json PATH] [--svg PATH]
//! ```
//! `--reps N`: repetitions per measurement (default 200; 20 with `--quick`). `--steps S`: steps
//! per repetition. `--max-k K`: steady rows up to K. `--quick`: K up to 100 and smaller build
//! sizes, for a fast sanity run. `--json PATH`: where the same data goes as JSON (default
//! `bench.json` in the current directory, written with serde). `--svg PATH`: a log-log plot of µs
//! per step against K, one line per row (default `bench.svg`). `--help` says the same. A progress
//! bar shows on standard error when it is a terminal. Without a CUDA driver the run prints one
//! line and exits with status 2.
//!
//! Every measured row first checks its own result: the buffers are zeroed, three steps run, and
//! the device values must equal a host model of the step; after the timed repetitions the model
//! replays every step and the values are checked again, so a row whose updates did not reach the
//! GPU fails instead of looking fast; the read rows also check every value they read. Any error
//! or mismatch stops the run with a non-zero status; what was measured up to then is still
//! written to the JSON file.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::path::PathBuf;
use std::process::ExitCode;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cudagraph::cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUcontext, CUdeviceptr, CUfunction, CUgraphNode,
    CUmemorytype, CUstream,
};
use cudagraph::cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PinnedHostSlice,
    PushKernelArg, result,
};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx, compile_ptx_with_opts};
use cudagraph::{BufferArray, GraphCache, PinnedBuffer, Rows, Stats, graph, kernels};
use serde::Serialize;

#[path = "progress.rs"]
mod progress;
use progress::out;

#[path = "bench_kernels.rs"]
mod bench_kernels;
mod plot;
use bench_kernels::{Bench, CFG, ELEMS, SOURCE};
/// The crate's readback kernel, for row rk's raw graph.
const READBACK_SOURCE: &str = include_str!("../../cudagraph/src/kind/readback.cu");
#[path = "raw_graph.rs"]
mod raw_graph;
use raw_graph::{OwnedExec, OwnedGraph};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

// ---------------------------------------------------------------------------------------------
// Host memory: a counting global allocator (Rust heap only; the driver's own allocations are
// made by libcuda's malloc and are not seen here).

struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to `System`; the counters do not affect allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System.alloc`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size() as u64, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size() as u64, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        FREED.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            ALLOCATED.fetch_add(new_size as u64, Relaxed);
            FREED.fetch_add(layout.size() as u64, Relaxed);
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// (bytes allocated so far, bytes freed so far).
fn heap() -> (u64, u64) {
    (ALLOCATED.load(Relaxed), FREED.load(Relaxed))
}

// ---------------------------------------------------------------------------------------------
// Kernels and the graph! steps.

kernels! {
    /// The kernel of the programmatic rows (`add_wait` of `kernels/bench.cu`, compiled for the
    /// device's architecture): `x[i] += v` after `griddepcontrol.wait`.
    pub struct BenchPdl {
        #[programmatic]
        fn add_wait(n: u32, v: u32, x: &mut [u32]);
        /// `add_wait`, then `griddepcontrol.launch_dependents` (row pt only, raw).
        #[programmatic]
        fn add_wait_trigger(n: u32, v: u32, x: &mut [u32]);
        /// DESIGN.md's kernel (rows q*): `x[threadIdx.x] += 1` for `threadIdx.x < n`, between
        /// `griddepcontrol.wait` and `griddepcontrol.launch_dependents`.
        #[programmatic]
        fn inc_wait(n: u32, x: &mut [u32]);
    }
}

/// The same as a cudarc `LaunchConfig`.
const LAUNCH: LaunchConfig =
    LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
/// Calls timed one at a time, the GPU idle, for the host enqueue line of each steady section.
const ENQUEUE_REPS: u64 = 50;
/// Steps run and checked before a row is timed.
const VERIFY_STEPS: u64 = 3;

// Every graph function below is `#[inline(never)]`: a row calls only its own size's body.
// (Inlined into `graph_step`, the 1000-node fan's stack frame was probed by every call of every
// size: 0.25 µs more host time per call at K = 1 and 10.)

/// Chain graphs of `1 + REST` kernels: `$step` (the first adds `s`, the others 1) and `$alt` (two
/// variants by a host `if`: the first kernel adds 1 on even steps, 2 on odd ones).
macro_rules! chain_graphs {
    ($step:ident, $rest:tt) => {
        #[inline(never)]
        fn $step(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            s: u32,
            mut x: &mut CudaSlice<u32>,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                k.add(ELEMS, s, &mut x).launch(CFG);
                for _ in 0..$rest {
                    k.add(ELEMS, 1, &mut x).launch(CFG);
                }
            })
        }
    };
    ($step:ident, $alt:ident, $rest:tt) => {
        chain_graphs!($step, $rest);

        #[inline(never)]
        fn $alt(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            step: u64,
            mut x: &mut CudaSlice<u32>,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                if step % 2 == 0 {
                    k.add(ELEMS, 1, &mut x).launch(CFG);
                    for _ in 0..$rest {
                        k.add(ELEMS, 1, &mut x).launch(CFG);
                    }
                } else {
                    k.add(ELEMS, 2, &mut x).launch(CFG);
                    for _ in 0..$rest {
                        k.add(ELEMS, 1, &mut x).launch(CFG);
                    }
                }
            })
        }
    };
}

/// Fan graphs of `MID + 2` kernels: a producer `add(s)` on `p`, `MID` independent `acc(p → bufs[i])`
/// (each reads `p`, so each runs after the producer), and a consumer `add(1)` on `p` (it writes
/// what they all read, so it runs after all of them). `$alt` as in `chain_graphs!`.
macro_rules! fan_graphs {
    ($step:ident, $mid:tt) => {
        #[inline(never)]
        fn $step(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            s: u32,
            mut p: &mut CudaSlice<u32>,
            bufs: &mut BufferArray<u32>,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                k.add(ELEMS, s, &mut p).launch(CFG);
                for i in 0..$mid {
                    k.acc(ELEMS, &p, &mut bufs[i]).launch(CFG);
                }
                k.add(ELEMS, 1, &mut p).launch(CFG);
            })
        }
    };
    ($step:ident, $alt:ident, $mid:tt) => {
        fan_graphs!($step, $mid);

        #[inline(never)]
        fn $alt(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            step: u64,
            mut p: &mut CudaSlice<u32>,
            bufs: &mut BufferArray<u32>,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                if step % 2 == 0 {
                    k.add(ELEMS, 1, &mut p).launch(CFG);
                    for i in 0..$mid {
                        k.acc(ELEMS, &p, &mut bufs[i]).launch(CFG);
                    }
                    k.add(ELEMS, 1, &mut p).launch(CFG);
                } else {
                    k.add(ELEMS, 2, &mut p).launch(CFG);
                    for i in 0..$mid {
                        k.acc(ELEMS, &p, &mut bufs[i]).launch(CFG);
                    }
                    k.add(ELEMS, 1, &mut p).launch(CFG);
                }
            })
        }
    };
}

/// A chain of `1 + $rest` programmatic kernels `add_wait` (the first adds `s`, the others 1):
/// `$rest` programmatic edges.
macro_rules! pdl_chain_graph {
    ($step:ident, $rest:tt) => {
        #[inline(never)]
        fn $step(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &BenchPdl,
            s: u32,
            mut x: &mut CudaSlice<u32>,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                k.add_wait(ELEMS, s, &mut x).launch(CFG);
                for _ in 0..$rest {
                    k.add_wait(ELEMS, 1, &mut x).launch(CFG);
                }
            })
        }
    };
}

pdl_chain_graph!(pdl_chain_10, 9);
pdl_chain_graph!(pdl_chain_100, 99);
pdl_chain_graph!(pdl_chain_1000, 999);

/// A chain of `1 + $rest` programmatic kernels `inc_wait` (each adds 1): `$rest` programmatic
/// edges, the chain of rows qd and qn.
macro_rules! inc_chain_graph {
    ($step:ident, $rest:tt) => {
        #[inline(never)]
        fn $step(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &BenchPdl,
            mut x: &mut CudaSlice<u32>,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                k.inc_wait(ELEMS, &mut x).launch(CFG);
                for _ in 0..$rest {
                    k.inc_wait(ELEMS, &mut x).launch(CFG);
                }
            })
        }
    };
}

inc_chain_graph!(inc_chain_10, 9);
inc_chain_graph!(inc_chain_100, 99);
inc_chain_graph!(inc_chain_1000, 999);

/// K of the programmatic rows (chains only).
const PDL_K: [usize; 3] = [10, 100, 1000];

fn pdl_chain(
    nodes: usize,
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &BenchPdl,
    s: u32,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    match nodes {
        10 => pdl_chain_10(cache, stream, k, s, x),
        100 => pdl_chain_100(cache, stream, k, s, x),
        1000 => pdl_chain_1000(cache, stream, k, s, x),
        _ => panic!("no graph! programmatic chain of {nodes} nodes is compiled in"),
    }
}

fn inc_chain(
    nodes: usize,
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &BenchPdl,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    match nodes {
        10 => inc_chain_10(cache, stream, k, x),
        100 => inc_chain_100(cache, stream, k, x),
        1000 => inc_chain_1000(cache, stream, k, x),
        _ => panic!("no graph! inc_wait chain of {nodes} nodes is compiled in"),
    }
}

chain_graphs!(chain_1, chain_alt_1, 0);
chain_graphs!(chain_10, chain_alt_10, 9);
chain_graphs!(chain_100, chain_alt_100, 99);
chain_graphs!(chain_1000, chain_alt_1000, 999);

/// The largest `graph!`: a chain of 10 000 statements, for the build-cost rows (issue 18). A
/// graph `for` unrolls at most 4096 iterations, so the 9999 after the first are 3 × 3333.
fn chain_10000(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    s: u32,
    mut x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, stream, {
        k.add(ELEMS, s, &mut x).launch(CFG);
        for _ in 0..3 {
            for _ in 0..3333 {
                k.add(ELEMS, 1, &mut x).launch(CFG);
            }
        }
    })
}
fan_graphs!(fan_10, fan_alt_10, 8);
fan_graphs!(fan_100, fan_alt_100, 98);
fan_graphs!(fan_1000, fan_alt_1000, 998);

/// Elements the read rows copy back: the first 2 `u32`s of a buffer, 8 bytes.
const READ_LEN: usize = 2;
/// The rows of the read rows' `copy_2d` on both sides: one dense row of `READ_LEN` elements
/// at the buffer's start (the device buffer has `ELEMS`, the pinned one `READ_LEN`). Pitch =
/// width and one row: the driver gets the fields of a 1-D copy of 8 bytes, as from `copy`
/// ([`head_copy`] is the raw graphs' same copy).
const READ_ROWS: Rows = Rows::dense(READ_LEN, 1);

/// The read rows' graphs: `chain` as `chain_graphs!`, `fan` as `fan_graphs!` (every scalar 1,
/// nothing changes between calls), then one copy of the first `READ_LEN` elements of the
/// chain's `x` (the fan's `p`) into the pinned buffer `host`, which runs after the last kernel
/// (the last writer of that buffer).
macro_rules! read_graphs {
    (chain $step:ident, $host:ty, $rest:tt) => {
        #[inline(never)]
        fn $step(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            mut x: &mut CudaSlice<u32>,
            mut host: &mut $host,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                k.add(ELEMS, 1, &mut x).launch(CFG);
                for _ in 0..$rest {
                    k.add(ELEMS, 1, &mut x).launch(CFG);
                }
                copy_2d(&x, READ_ROWS, &mut host, READ_ROWS);
            })
        }
    };
    (fan $step:ident, $host:ty, $mid:tt) => {
        #[inline(never)]
        fn $step(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            mut p: &mut CudaSlice<u32>,
            bufs: &mut BufferArray<u32>,
            mut host: &mut $host,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                k.add(ELEMS, 1, &mut p).launch(CFG);
                for i in 0..$mid {
                    k.acc(ELEMS, &p, &mut bufs[i]).launch(CFG);
                }
                k.add(ELEMS, 1, &mut p).launch(CFG);
                copy_2d(&p, READ_ROWS, &mut host, READ_ROWS);
            })
        }
    };
}

read_graphs!(chain chain_read_1, PinnedBuffer<u32>, 0);
read_graphs!(chain chain_read_10, PinnedBuffer<u32>, 9);
read_graphs!(chain chain_read_100, PinnedBuffer<u32>, 99);
read_graphs!(chain chain_read_1000, PinnedBuffer<u32>, 999);
read_graphs!(fan fan_read_10, PinnedBuffer<u32>, 8);
read_graphs!(fan fan_read_100, PinnedBuffer<u32>, 98);
read_graphs!(fan fan_read_1000, PinnedBuffer<u32>, 998);
// Row rs: the same graphs into cudarc's `PinnedHostSlice`.
read_graphs!(chain chain_read_1_cudarc, PinnedHostSlice<u32>, 0);
read_graphs!(chain chain_read_10_cudarc, PinnedHostSlice<u32>, 9);
read_graphs!(chain chain_read_100_cudarc, PinnedHostSlice<u32>, 99);
read_graphs!(chain chain_read_1000_cudarc, PinnedHostSlice<u32>, 999);
read_graphs!(fan fan_read_10_cudarc, PinnedHostSlice<u32>, 8);
read_graphs!(fan fan_read_100_cudarc, PinnedHostSlice<u32>, 98);
read_graphs!(fan fan_read_1000_cudarc, PinnedHostSlice<u32>, 998);

/// Largest `graph!` compiled in: a 10 000-statement chain, built in about 18 s of release build
/// on a 2-core machine since the chunked expansion (issue 18; `BENCHMARKS.md`).
const MAX_GRAPH_NODES: usize = 10_000;

/// K of the steady-state rows (every one has a chain and, from 10 on, a fan graph! compiled in).
const STEADY_K: [usize; 4] = [1, 10, 100, 1000];
/// Node counts of the build-cost rows.
const BUILD_SIZES: [usize; 4] = [10, 100, 1000, 10_000];

fn chain_step(
    nodes: usize,
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    s: u32,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    match nodes {
        1 => chain_1(cache, stream, k, s, x),
        10 => chain_10(cache, stream, k, s, x),
        100 => chain_100(cache, stream, k, s, x),
        1000 => chain_1000(cache, stream, k, s, x),
        10_000 => chain_10000(cache, stream, k, s, x),
        _ => panic!("no graph! chain of {nodes} nodes is compiled in"),
    }
}

fn chain_alt(
    nodes: usize,
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    step: u64,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    match nodes {
        1 => chain_alt_1(cache, stream, k, step, x),
        10 => chain_alt_10(cache, stream, k, step, x),
        100 => chain_alt_100(cache, stream, k, step, x),
        1000 => chain_alt_1000(cache, stream, k, step, x),
        _ => panic!("no graph! two-variant chain of {nodes} nodes is compiled in"),
    }
}

fn fan_step(
    nodes: usize,
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    s: u32,
    p: &mut CudaSlice<u32>,
    bufs: &mut BufferArray<u32>,
) -> cudagraph::Result<()> {
    match nodes {
        10 => fan_10(cache, stream, k, s, p, bufs),
        100 => fan_100(cache, stream, k, s, p, bufs),
        1000 => fan_1000(cache, stream, k, s, p, bufs),
        _ => panic!("no graph! fan of {nodes} nodes is compiled in"),
    }
}

fn fan_alt(
    nodes: usize,
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    step: u64,
    p: &mut CudaSlice<u32>,
    bufs: &mut BufferArray<u32>,
) -> cudagraph::Result<()> {
    match nodes {
        10 => fan_alt_10(cache, stream, k, step, p, bufs),
        100 => fan_alt_100(cache, stream, k, step, p, bufs),
        1000 => fan_alt_1000(cache, stream, k, step, p, bufs),
        _ => panic!("no graph! two-variant fan of {nodes} nodes is compiled in"),
    }
}

/// K of the captured row `dc` (chain only).
const CAPTURE_K: [usize; 3] = [1, 10, 100];

/// The chain as one `capture` statement: its closure adds row a's `nodes` launches of `add`
/// (the first adds `s`, the others 1) with the capture's own kernel nodes (`Capture::kernel`:
/// safe, no cudarc launch). Keyed: recorded by the first call, then the kept recording.
fn chain_captured(
    cache: &mut GraphCache,
    stream: &Arc<CudaStream>,
    kern: &Arc<Bench>,
    nodes: usize,
    s: u32,
    x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, stream, {
        // Keyed: recorded again only when the kernels, the count, the scalar or `x` change.
        capture(&mut *x, key = (kern.clone(), nodes, s), |cap, (kern, nodes, s), (mut x,)| {
            cap.kernel(kern.add(ELEMS, *s, cap.write(&mut x)?).launch(LAUNCH))?;
            for _ in 1..*nodes {
                cap.kernel(kern.add(ELEMS, 1, cap.write(&mut x)?).launch(LAUNCH))?;
            }
            Ok::<(), cudagraph::Error>(())
        });
    })
}

// ---------------------------------------------------------------------------------------------
// The floor: explicit graphs made with raw driver calls.

/// A kernel node's arguments, in the order of `bench.cu`'s parameters.
#[derive(Clone, Copy, Debug)]
enum KArgs {
    Add {
        n: u32,
        v: u32,
        x: CUdeviceptr,
    },
    Acc {
        n: u32,
        src: CUdeviceptr,
        dst: CUdeviceptr,
    },
    /// `inc_wait(n, x)`.
    Inc {
        n: u32,
        x: CUdeviceptr,
    },
}

/// Calls `f` with the driver's kernel node parameters for `func(args)`, one block of 32 threads.
/// `kernelParams` points into this call's copy of `args`, valid during `f` only (the driver
/// copies the values during the call that takes them).
fn with_params<R>(
    func: CUfunction,
    mut args: KArgs,
    f: impl FnOnce(&CUDA_KERNEL_NODE_PARAMS) -> R,
) -> R {
    let mut ptrs: [*mut c_void; 3] = match &mut args {
        KArgs::Add { n, v, x } => {
            [ptr::from_mut(n).cast(), ptr::from_mut(v).cast(), ptr::from_mut(x).cast()]
        }
        KArgs::Acc { n, src, dst } => {
            [ptr::from_mut(n).cast(), ptr::from_mut(src).cast(), ptr::from_mut(dst).cast()]
        }
        KArgs::Inc { n, x } => [ptr::from_mut(n).cast(), ptr::from_mut(x).cast(), ptr::null_mut()],
    };
    f(&kernel_node_params(func, 32, &mut ptrs))
}

/// The driver's kernel node parameters for `func` with the argument pointers `ptrs`: one block
/// of `block_x` threads, no shared memory, the context of the graph it is added to.
fn kernel_node_params(
    func: CUfunction,
    block_x: u32,
    ptrs: &mut [*mut c_void],
) -> CUDA_KERNEL_NODE_PARAMS {
    CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block_x,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: ptrs.as_mut_ptr(),
        extra: ptr::null_mut(),
        kern: ptr::null_mut(),
        ctx: ptr::null_mut(),
    }
}

/// One node of a raw graph: function, arguments, indices of the earlier nodes it follows.
struct RawNode {
    func: CUfunction,
    args: KArgs,
    deps: Vec<usize>,
}

impl OwnedGraph {
    /// `cuGraphCreate`, then one `cuGraphAddKernelNode_v2` per node, in order.
    fn build(spec: &[RawNode]) -> Res<OwnedGraph> {
        let mut g = OwnedGraph::create(spec.len())?;
        let mut deps: Vec<CUgraphNode> = Vec::new();
        for node in spec {
            deps.clear();
            deps.extend(node.deps.iter().map(|&d| g.nodes[d]));
            let mut handle = ptr::null_mut();
            with_params(node.func, node.args, |p| {
                // SAFETY: the graph is live, `deps` are its nodes, `p` points to one value per
                // parameter of `node.func`, valid during the call.
                unsafe {
                    sys::cuGraphAddKernelNode_v2(&mut handle, g.graph, deps.as_ptr(), deps.len(), p)
                }
            })
            .result()?;
            g.nodes.push(handle);
        }
        Ok(g)
    }
}

impl OwnedGraph {
    /// A chain of `k` kernels `func` with the arguments `args(j)` of node `j`, each after the one
    /// before, with programmatic edges (type `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC` from port
    /// `CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`, `cuGraphAddDependencies_v2`) or plain ones: the
    /// raw floor of the programmatic rows.
    fn build_chain(
        func: CUfunction,
        k: usize,
        args: impl Fn(usize) -> KArgs,
        programmatic: bool,
    ) -> Res<OwnedGraph> {
        let spec: Vec<RawNode> =
            (0..k).map(|j| RawNode { func, args: args(j), deps: vec![] }).collect();
        let g = OwnedGraph::build(&spec)?;
        let edge = sys::CUgraphEdgeData {
            from_port: if programmatic {
                sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER as u8
            } else {
                0
            },
            to_port: 0,
            type_: if programmatic {
                sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8
            } else {
                0
            },
            reserved: [0; 5],
        };
        for j in 1..k {
            let (from, to) = (g.nodes[j - 1], g.nodes[j]);
            // SAFETY: both are kernel nodes of the live graph; one edge datum for one edge.
            unsafe { sys::cuGraphAddDependencies_v2(g.graph, &from, &to, &edge, 1) }.result()?;
        }
        Ok(g)
    }
}

impl OwnedExec {
    /// `cuGraphExecKernelNodeSetParams_v2`.
    fn set(&self, node: CUgraphNode, func: CUfunction, args: KArgs) -> Res<()> {
        with_params(func, args, |p| {
            // SAFETY: `node` is a kernel node of the graph this exec was instantiated from; `p`
            // as in `OwnedGraph::build`.
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.0, node, p) }
        })
        .result()?;
        Ok(())
    }

    /// `cuGraphExecUpdate_v2` from `g`, which has the same topology.
    fn update(&self, g: &OwnedGraph) -> Res<()> {
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: ptr::null_mut(),
            errorFromNode: ptr::null_mut(),
        };
        // SAFETY: both live and of the current context.
        let r = unsafe { sys::cuGraphExecUpdate_v2(self.0, g.graph, &mut info) }.result();
        r.map_err(|e| format!("cuGraphExecUpdate_v2 failed: {e} ({:?})", info.result).into())
    }
}

/// The read rows' copy as the driver takes it: the first `READ_LEN` `u32`s (8 bytes) of the
/// device buffer at `src` into the pinned host memory at `dst`, a 1-D `CUDA_MEMCPY3D` (one row,
/// pitches = width), the fields `graph!` gives `copy_2d(&x, READ_ROWS, &mut host, READ_ROWS)`
/// and a `copy` of 8 bytes.
fn head_copy(src: CUdeviceptr, dst: *mut c_void) -> CUDA_MEMCPY3D {
    let row = READ_LEN * size_of::<u32>();
    CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: ptr::null(),
        srcDevice: src,
        srcArray: ptr::null_mut(),
        reserved0: ptr::null_mut(),
        srcPitch: row,
        srcHeight: 1,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_HOST,
        dstHost: dst,
        dstDevice: 0,
        dstArray: ptr::null_mut(),
        reserved1: ptr::null_mut(),
        dstPitch: row,
        dstHeight: 1,
        WidthInBytes: row,
        Height: 1,
        Depth: 1,
    }
}

impl OwnedGraph {
    /// One memcpy node (`cuGraphAddMemcpyNode`) of `copy`, run in `ctx`, after node `after`:
    /// the read rows' copy back, added after a graph's last kernel.
    fn add_copy(&mut self, after: usize, copy: &CUDA_MEMCPY3D, ctx: CUcontext) -> Res<()> {
        let dep = self.nodes[after];
        let mut handle = ptr::null_mut();
        // SAFETY: the graph is live, `dep` is one of its nodes, `copy` names device and pinned
        // host memory of `ctx` (the current context), which the caller keeps alive while this
        // graph or an exec of it is used.
        unsafe { sys::cuGraphAddMemcpyNode(&mut handle, self.graph, &dep, 1, copy, ctx) }
            .result()?;
        self.nodes.push(handle);
        Ok(())
    }
}

impl OwnedExec {
    /// `cuGraphExecMemcpyNodeSetParams`.
    fn set_copy(&self, node: CUgraphNode, copy: &CUDA_MEMCPY3D, ctx: CUcontext) -> Res<()> {
        // SAFETY: `node` is a memcpy node of the graph this exec was instantiated from, and
        // `copy` has its memory types; `copy` as in `OwnedGraph::add_copy`.
        unsafe { sys::cuGraphExecMemcpyNodeSetParams(self.0, node, copy, ctx) }.result()?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Shapes, buffers and the host model of a step.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// K dependent kernels on one buffer.
    Chain,
    /// 1 producer → K−2 independent kernels, each writing its own buffer → 1 consumer.
    Fan,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Chain => "chain",
            Shape::Fan => "fan",
        }
    }
}

/// What changes from one step to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Nothing.
    None,
    /// The first kernel's scalar (`s = step + 1`).
    Scalar,
    /// The buffer every kernel uses (`a[step % 2]`): every node's pointer.
    Pointer,
    /// The host `if` of the two-variant graphs (`s = 1` on even steps, `2` on odd ones).
    Variant,
}

/// The first kernel's scalar at step `i`.
fn scalar(i: u64, change: Change) -> u32 {
    match change {
        Change::Scalar => (i as u32).wrapping_add(1),
        Change::Variant => 1 + (i % 2) as u32,
        Change::None | Change::Pointer => 1,
    }
}

/// Which of the two `a` buffers step `i` uses.
fn slot(i: u64, change: Change) -> usize {
    if change == Change::Pointer { (i % 2) as usize } else { 0 }
}

/// Kernel function of node `j` of a shape with `k` nodes.
fn node_func(shape: Shape, k: usize, j: usize, add: CUfunction, acc: CUfunction) -> CUfunction {
    match shape {
        Shape::Fan if j > 0 && j + 1 < k => acc,
        _ => add,
    }
}

/// Arguments of node `j`, with scalar `s` and buffer `a` (the chain's `x`, the fan's `p`).
fn node_args(shape: Shape, k: usize, j: usize, s: u32, a: CUdeviceptr, mids: &[u64]) -> KArgs {
    match shape {
        Shape::Chain => KArgs::Add { n: ELEMS, v: if j == 0 { s } else { 1 }, x: a },
        Shape::Fan if j == 0 => KArgs::Add { n: ELEMS, v: s, x: a },
        Shape::Fan if j + 1 == k => KArgs::Add { n: ELEMS, v: 1, x: a },
        Shape::Fan => KArgs::Acc { n: ELEMS, src: a, dst: mids[j - 1] },
    }
}

/// Predecessors of node `j`: the previous node in a chain; in a fan the producer for the middle
/// nodes and every middle node for the consumer.
fn node_deps(shape: Shape, k: usize, j: usize) -> Vec<usize> {
    match shape {
        Shape::Chain if j == 0 => vec![],
        Shape::Chain => vec![j - 1],
        Shape::Fan if j == 0 => vec![],
        Shape::Fan if j + 1 == k => (1..k - 1).collect(),
        Shape::Fan => vec![0],
    }
}

fn raw_spec(
    shape: Shape,
    k: usize,
    env: &Env,
    s: u32,
    a: CUdeviceptr,
    mids: &[u64],
) -> Vec<RawNode> {
    let (add, acc) = (env.f_add(), env.f_acc());
    (0..k)
        .map(|j| RawNode {
            func: node_func(shape, k, j, add, acc),
            args: node_args(shape, k, j, s, a, mids),
            deps: node_deps(shape, k, j),
        })
        .collect()
}

/// The device buffers of one row: `a[0]`, `a[1]` (the chain's `x`, the fan's `p`, two of them for
/// the pointer-change rows) and the fan's K−2 middle buffers, in a `BufferArray` (an unchanged
/// `graph!` call compares their addresses in one piece instead of acquiring each one).
struct Bufs {
    a: [CudaSlice<u32>; 2],
    mids: BufferArray<u32>,
}

impl Bufs {
    fn new(stream: &Arc<CudaStream>, shape: Shape, k: usize) -> Res<Bufs> {
        let n = ELEMS as usize;
        let mids = match shape {
            Shape::Chain => 0,
            Shape::Fan => k - 2,
        };
        Ok(Bufs {
            a: [stream.alloc_zeros(n)?, stream.alloc_zeros(n)?],
            mids: (0..mids).map(|_| stream.alloc_zeros(n)).collect::<Result<_, _>>()?,
        })
    }

    fn zero(&mut self, stream: &Arc<CudaStream>) -> Res<()> {
        for b in self.a.iter_mut().chain(self.mids.iter_mut()) {
            stream.memset_zeros(b)?;
        }
        Ok(())
    }

    /// Device addresses of `a` and `mids`, for raw graphs. Only with event tracking off (the
    /// guards are dropped at once).
    fn ptrs(&self, stream: &CudaStream) -> ([CUdeviceptr; 2], Vec<CUdeviceptr>) {
        let p = |b: &CudaSlice<u32>| b.device_ptr(stream).0;
        ([p(&self.a[0]), p(&self.a[1])], self.mids.iter().map(p).collect())
    }
}

/// `Bufs` of a chain whose two `a` buffers come from `cuMemAlloc` instead of cudarc's
/// stream-ordered pool (`cuMemAllocAsync`), as in DESIGN.md's programmatic measurement (rows
/// q*). Freed with `cuMemFree` on drop, after a synchronize of the stream.
struct MallocBufs(Option<Bufs>);

impl MallocBufs {
    fn new(ctx: &CudaContext, stream: &Arc<CudaStream>) -> Res<MallocBufs> {
        ctx.bind_to_thread()?;
        let alloc = || -> Res<CudaSlice<u32>> {
            // SAFETY: a plain allocation of the bound context (`ctx`, the stream's), owned by
            // the slice below until `Drop` takes it back.
            let p = unsafe { result::malloc_sync(ELEMS as usize * size_of::<u32>()) }?;
            // SAFETY: `p` is a live allocation of `ELEMS` `u32`s of the stream's context; every
            // bit pattern is a valid `u32`, and each row zeroes it first (`Bufs::zero`).
            Ok(unsafe { stream.upgrade_device_ptr(p, ELEMS as usize) })
        };
        Ok(MallocBufs(Some(Bufs { a: [alloc()?, alloc()?], mids: BufferArray::new(Vec::new()) })))
    }

    fn bufs(&mut self) -> &mut Bufs {
        self.0.as_mut().expect("taken only by drop")
    }
}

impl Drop for MallocBufs {
    fn drop(&mut self) {
        let Some(Bufs { a, .. }) = self.0.take() else { return };
        for x in a {
            let stream = x.stream().clone();
            // Nothing may still use the memory when it is freed.
            let synced = stream.synchronize().is_ok() && stream.context().bind_to_thread().is_ok();
            let p = x.leak();
            if synced {
                // SAFETY: `p` came from `cuMemAlloc` in `new` and nothing uses it any more (the
                // stream is synchronized and the slice leaked); a failure would only leak it.
                let _ = unsafe { result::free_sync(p) };
            }
        }
    }
}

/// The host model: every element of `a[0]`, `a[1]` and of every middle buffer after the steps so
/// far (all elements of one buffer are equal).
struct Model {
    shape: Shape,
    k: usize,
    a: [u32; 2],
    mid: u32,
}

impl Model {
    fn new(shape: Shape, k: usize) -> Model {
        Model { shape, k, a: [0, 0], mid: 0 }
    }

    fn step(&mut self, i: u64, change: Change) {
        let (s, w) = (scalar(i, change), slot(i, change));
        match self.shape {
            Shape::Chain => {
                self.a[w] = self.a[w].wrapping_add(s).wrapping_add(self.k as u32 - 1);
            }
            Shape::Fan => {
                self.a[w] = self.a[w].wrapping_add(s);
                self.mid = self.mid.wrapping_add(self.a[w]);
                self.a[w] = self.a[w].wrapping_add(1);
            }
        }
    }

    fn check(&self, stream: &Arc<CudaStream>, b: &Bufs, what: &str) -> Res<()> {
        stream.synchronize()?;
        let expect = |name: String, buf: &CudaSlice<u32>, want: u32| -> Res<()> {
            let got = stream.clone_dtoh(buf)?;
            if let Some(bad) = got.iter().find(|&&v| v != want) {
                return Err(format!(
                    "{what}: WRONG RESULT: {name} holds {bad}, the host model says {want}"
                )
                .into());
            }
            Ok(())
        };
        expect("a[0]".into(), &b.a[0], self.a[0])?;
        expect("a[1]".into(), &b.a[1], self.a[1])?;
        for (j, m) in b.mids.iter().enumerate() {
            expect(format!("middle buffer {j}"), m, self.mid)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics.

/// Median and 10th/90th percentiles (nearest rank) of a sample, in µs.
#[derive(Clone, Copy, Debug, Serialize)]
struct Summary {
    median: f64,
    p10: f64,
    p90: f64,
    samples: usize,
}

fn summarize(mut v: Vec<f64>) -> Summary {
    assert!(!v.is_empty(), "summarize: no samples");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let rank = |q: f64| v[((q * (n - 1) as f64).round() as usize).min(n - 1)];
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Summary { median, p10: rank(0.1), p90: rank(0.9), samples: n }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

// ---------------------------------------------------------------------------------------------
// JSON (serde): the report's records, field names as the JSON file spells them.

/// `cudagraph::Stats` as written to the JSON (`cudagraph` itself does not depend on serde).
#[derive(Serialize)]
struct StatsJson {
    launches: u64,
    builds: u64,
    instantiations: u64,
    hits: u64,
    node_updates: u64,
    nodes_unchanged: u64,
    exec_updates: u64,
    reinstantiations: u64,
    evictions: u64,
    captures: u64,
    unchanged_calls: u64,
}

impl From<Stats> for StatsJson {
    fn from(s: Stats) -> StatsJson {
        StatsJson {
            launches: s.launches,
            builds: s.builds,
            instantiations: s.instantiations,
            hits: s.hits,
            node_updates: s.node_updates,
            nodes_unchanged: s.nodes_unchanged,
            exec_updates: s.exec_updates,
            reinstantiations: s.reinstantiations,
            evictions: s.evictions,
            captures: s.captures,
            unchanged_calls: s.unchanged_calls,
        }
    }
}

/// One steady row as written to the JSON (times in µs).
#[derive(Serialize)]
struct RowJson {
    section: &'static str,
    shape: &'static str,
    k: usize,
    row: &'static str,
    what: &'static str,
    steps_per_rep: usize,
    us_per_step: Summary,
    us_per_node: f64,
    ratio_to_raw_launch: Option<f64>,
    floor_row: Option<&'static str>,
    ratio_to_floor: Option<f64>,
    graph_stats: Option<StatsJson>,
}

/// One K of the capture comparison (µs per step).
#[derive(Serialize)]
struct CaptureJson {
    k: usize,
    direct_row: &'static str,
    captured_row: &'static str,
    eager_row: &'static str,
    direct_us: Option<Summary>,
    captured_us: Option<Summary>,
    eager_us: Option<Summary>,
    ratio_captured_to_direct: Option<f64>,
    ratio_captured_to_eager: Option<f64>,
    recording_us_per_launch: Option<f64>,
}

/// First-call costs at one node count (µs; host bytes per node).
#[derive(Serialize)]
struct BuildJson {
    nodes: usize,
    reps: usize,
    graph_first_call_us: Option<Summary>,
    raw_first_call_us: Summary,
    ratio_graph_to_raw: Option<f64>,
    raw_build_us: Summary,
    raw_instantiate_us: Summary,
    raw_instantiate_us_per_node: f64,
    raw_first_launch_sync_us: Summary,
    graph_host_bytes_retained_per_node: Option<Summary>,
    graph_host_bytes_allocated_per_node: Option<Summary>,
}

/// Whole-graph update at one node count (µs).
#[derive(Serialize)]
struct UpdateJson {
    nodes: usize,
    reps: usize,
    rebuild_us: Summary,
    rebuild_us_per_node: f64,
    exec_update_us: Summary,
    exec_update_us_per_node: f64,
}

/// Upload latencies at one node count: `nodes`, `reps`, then one key per measurement (µs), in
/// the order measured.
struct UploadJson {
    nodes: usize,
    reps: usize,
    values: Vec<(&'static str, Summary)>,
}

impl Serialize for UploadJson {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(Some(2 + self.values.len()))?;
        m.serialize_entry("nodes", &self.nodes)?;
        m.serialize_entry("reps", &self.reps)?;
        for (key, x) in &self.values {
            m.serialize_entry(key, x)?;
        }
        m.end()
    }
}

/// One goal of the issue against its measured value.
#[derive(Serialize)]
struct GoalJson {
    goal: String,
    value: f64,
    limit: f64,
    op: &'static str,
    met: bool,
}

/// One row id and what it measures.
#[derive(Serialize)]
struct LegendJson {
    row: &'static str,
    what: &'static str,
}

/// What the run was: device, driver, command, units.
#[derive(Serialize)]
struct Meta {
    device: String,
    driver_version: i32,
    unix_time: u64,
    command: String,
    reps: usize,
    quick: bool,
    kernel: &'static str,
    unit: &'static str,
    event_tracking: &'static str,
}

/// The whole JSON file.
#[derive(Serialize)]
struct ReportJson<'a> {
    #[serde(flatten)]
    meta: Option<&'a Meta>,
    legend: Vec<LegendJson>,
    steady: Vec<RowJson>,
    capture: &'a [CaptureJson],
    build: &'a [BuildJson],
    exec_update: &'a [UpdateJson],
    upload: &'a [UploadJson],
    goals: &'a [GoalJson],
    notes: &'a [String],
    error: Option<&'a str>,
}

// ---------------------------------------------------------------------------------------------
// The run.

struct Env {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Another stream, which owns the buffers of row `do`.
    other: Arc<CudaStream>,
    kern: Arc<Bench>,
    reps: usize,
    quick: bool,
    /// `--steps`: steps per repetition of every steady row, instead of [`steps_per_rep`].
    steps: Option<usize>,
    /// `--device-launch`: the paired table's `graph!` caches instantiate for device launch
    /// ([`Env::paired_cache`]).
    device_launch: bool,
    /// The crate's readback kernel (`cudagraph/src/kind/readback.cu`), loaded here for row rk:
    /// the raw graph with the kernel node that `graph!` makes of rd's copy.
    readback: CudaFunction,
}

impl Env {
    /// A cache of the paired table's `graph!` rows: device-launch instantiations with
    /// `--device-launch`.
    fn paired_cache(&self) -> GraphCache {
        let mut c = GraphCache::new();
        c.set_instantiate_flags(cudagraph::InstantiateFlags {
            device_launch: self.device_launch,
            ..Default::default()
        });
        c
    }

    fn f_add(&self) -> CUfunction {
        self.kern.function("add").expect("declared in kernels!").cu_function()
    }
    fn f_acc(&self) -> CUfunction {
        self.kern.function("acc").expect("declared in kernels!").cu_function()
    }
    fn cu_stream(&self) -> CUstream {
        self.stream.cu_stream()
    }
}

/// Steps enqueued back-to-back per repetition: enough that the one synchronize per repetition is
/// a small part of it.
fn steps_per_rep(k: usize) -> usize {
    (2000 / k).clamp(10, 1000)
}

/// One measured steady-state row.
struct Row {
    section: &'static str,
    shape: Shape,
    k: usize,
    id: &'static str,
    what: &'static str,
    steps_per_rep: usize,
    t: Summary,
    /// Row id this row is divided by in `ratio_floor`.
    floor: Option<&'static str>,
    ratio_raw: Option<f64>,
    ratio_floor: Option<f64>,
    stats: Option<Stats>,
}

impl Row {
    /// A row as measured, its ratios not yet worked out.
    fn measured(
        section: &'static str,
        (shape, k, steps_per_rep): (Shape, usize, usize),
        id: &'static str,
        t: Summary,
        stats: Option<Stats>,
    ) -> Self {
        let what = describe(id);
        Row {
            section,
            shape,
            k,
            id,
            what,
            steps_per_rep,
            t,
            floor: None,
            ratio_raw: None,
            ratio_floor: None,
            stats,
        }
    }

    fn json(&self) -> RowJson {
        RowJson {
            section: self.section,
            shape: self.shape.name(),
            k: self.k,
            row: self.id,
            what: self.what,
            steps_per_rep: self.steps_per_rep,
            us_per_step: self.t,
            us_per_node: self.t.median / self.k as f64,
            ratio_to_raw_launch: self.ratio_raw,
            floor_row: self.floor,
            ratio_to_floor: self.ratio_floor,
            graph_stats: self.stats.map(StatsJson::from),
        }
    }
}

/// Every row `bench` prints: its label and what it measures, in the order of the legend and of
/// each block of rows. `BENCHMARKS.md` names rows by these labels; a test keeps the two in step.
const ROWS: &[(&str, &str)] = &[
    ("a", "cudarc: K x stream.launch_builder(f).arg(..).launch(cfg) per step"),
    ("b", "cudarc: stream capture of a's K launches once, then CudaGraph::launch() per step"),
    (
        "c",
        "raw driver: explicit graph (cuGraphAddKernelNode_v2), cuGraphLaunch per step (the floor)",
    ),
    (
        "c1",
        "raw driver: 1 x cuGraphExecKernelNodeSetParams_v2 (first node's scalar) + cuGraphLaunch",
    ),
    (
        "cA",
        "raw driver: K x cuGraphExecKernelNodeSetParams_v2 (every node's pointer) + cuGraphLaunch",
    ),
    ("d", "graph!: nothing changed"),
    ("e", "graph!: one scalar changed per step (first node)"),
    (
        "f",
        "graph!: every pointer changed per step (alternating between two buffers, as std::mem::swap after each step would)",
    ),
    ("g", "graph!: host if alternating between two cached variants every step"),
    (
        "do",
        "graph!: as d, with the buffers allocated on another stream (ordered through it: cuEventRecord + cuStreamWaitEvent before and after each launch)",
    ),
    (
        "dc",
        "graph!: a's K launches inside one keyed capture statement (the capture's own kernel nodes, Capture::kernel), nothing changed (as d): recorded by the first call, then the kept recording every call (nothing recorded or sent); event tracking off, as in d; chain, K = 1, 10, 100",
    ),
    ("h", "GraphBuilder: the same K nodes recorded and launched every step, nothing changed"),
    ("hf", "GraphBuilder: as h, every pointer changed per step (as f)"),
    ("a*", "a with cudarc's event tracking on (buffers allocated while tracking)"),
    ("d*", "d with cudarc's event tracking on (buffers allocated while tracking)"),
    (
        "rc",
        "raw driver: c's graph plus a memcpy node (cuGraphAddMemcpyNode) after the last kernel copying a[0]'s first 8 bytes into pinned host memory (flags 0); per step cuGraphLaunch + cuStreamSynchronize + an 8-byte read, checked against the host model (every r row: one step, waited for, then read)",
    ),
    (
        "rc1",
        "raw driver: as rc, the copy's pinned destination swapped between two buffers per step: 1 x cuGraphExecMemcpyNodeSetParams + cuGraphLaunch + cuStreamSynchronize + read",
    ),
    (
        "rd",
        "graph!: d's statements plus copy_2d of a[0]'s first 8 bytes into a cudagraph::PinnedBuffer (rc's copy), nothing changed; per step the call + as_slice(), which waits with one cuStreamSynchronize (the README's way)",
    ),
    (
        "re",
        "graph!: as rd, the copy's pinned destination swapped between two buffers per step (one node's pointer, as rc1)",
    ),
    (
        "re1",
        "graph!: as re with one exec per variant (set_execs_per_variant(1)): the copy node updated in place every step, as rc1 (paired table only)",
    ),
    (
        "rk",
        "raw driver: as rc with a kernel node of the crate's readback kernel (cudagraph/src/kind/readback.cu, one 8-byte word, one block of 256 threads: the node graph! makes of rd's copy) instead of the memcpy node (paired table only)",
    ),
    (
        "rs",
        "graph!: as rd into cudarc's PinnedHostSlice (flags 0): per step the call + stream.synchronize() + as_slice() (cudarc's event, timing enabled, recorded after each call and checked by as_slice)",
    ),
    (
        "pc",
        "raw driver: chain of K add_wait kernels (griddepcontrol.wait first), plain edges, cuGraphLaunch per step",
    ),
    (
        "pp",
        "raw driver: the same chain with programmatic edges (CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC from port LAUNCH_ORDER, cuGraphAddDependencies_v2), cuGraphLaunch per step",
    ),
    (
        "pt",
        "raw driver: as pp, with add_wait_trigger (griddepcontrol.launch_dependents after the write)",
    ),
    (
        "pd",
        "graph!: the same chain of #[programmatic] add_wait kernels (programmatic edges), nothing changed",
    ),
    ("pn", "graph!: as pd with set_programmatic(false) (plain edges)"),
    ("pf", "graph!: as pd, every pointer changed per step (as f: K node updates per step)"),
    ("pnf", "graph!: as pf with set_programmatic(false) (plain edges)"),
    (
        "qc",
        "raw driver: chain of K inc_wait kernels (DESIGN.md's: wait, x[threadIdx.x] += 1, launch_dependents) on cuMemAlloc memory, plain edges",
    ),
    ("qp", "raw driver: as qc with programmatic edges (as pp)"),
    (
        "qd",
        "graph!: the same chain of #[programmatic] inc_wait kernels on the same cuMemAlloc memory, nothing changed",
    ),
    ("qn", "graph!: as qd with set_programmatic(false) (plain edges)"),
];

/// What row `id` measures (printed as the legend, stored in the JSON).
fn describe(id: &str) -> &'static str {
    ROWS.iter().find(|r| r.0 == id).map_or("?", |r| r.1)
}

/// Row ids of the plot, in the order of the legend (the programmatic rows are not plotted: one
/// kernel, chains only; nor the read rows, which wait for every step).
const LEGEND: [&str; 14] =
    ["a", "b", "c", "c1", "cA", "d", "e", "f", "g", "dc", "h", "hf", "a*", "d*"];

#[derive(Default)]
struct Report {
    meta: Option<Meta>,
    rows: Vec<Row>,
    /// Rows measured in turn ([`paired_rows`]), per shape and K.
    paired: Vec<Paired>,
    capture: Vec<CaptureJson>,
    build: Vec<BuildJson>,
    update: Vec<UpdateJson>,
    upload: Vec<UploadJson>,
    goals: Vec<GoalJson>,
    notes: Vec<String>,
    error: Option<String>,
}

impl Report {
    fn json(&self) -> String {
        let report = ReportJson {
            meta: self.meta.as_ref(),
            legend: ROWS.iter().map(|&(row, what)| LegendJson { row, what }).collect(),
            steady: self.rows.iter().map(Row::json).collect(),
            capture: &self.capture,
            build: &self.build,
            exec_update: &self.update,
            upload: &self.upload,
            goals: &self.goals,
            notes: &self.notes,
            error: self.error.as_deref(),
        };
        let mut s = serde_json::to_string_pretty(&report).expect("the report serializes");
        s.push('\n');
        s
    }
}

type Step<'a> = dyn FnMut(&mut Bufs, u64) -> Res<()> + 'a;

/// Checks a row's result, warms it up, times it, and checks it again.
///
/// Per repetition: `steps` steps enqueued back-to-back, then one `cuStreamSynchronize`; the
/// sample is the wall time divided by `steps` (µs per step, enqueue and completion).
#[allow(clippy::too_many_arguments)]
fn timed_row(
    env: &Env,
    b: &mut Bufs,
    shape: Shape,
    k: usize,
    change: Change,
    steps: usize,
    what: &str,
    step: &mut Step<'_>,
) -> Res<Summary> {
    b.zero(&env.stream)?;
    let mut model = Model::new(shape, k);
    for i in 0..VERIFY_STEPS {
        step(b, i)?;
        model.step(i, change);
    }
    model.check(&env.stream, b, what)?;
    let mut i = VERIFY_STEPS;
    for _ in 0..2 * steps {
        step(b, i)?;
        i += 1;
    }
    env.stream.synchronize()?;
    let mut samples = Vec::with_capacity(env.reps);
    for _ in 0..env.reps {
        let t = Instant::now();
        for _ in 0..steps {
            step(b, i)?;
            i += 1;
        }
        env.stream.synchronize()?;
        samples.push(us(t.elapsed()) / steps as f64);
    }
    for j in VERIFY_STEPS..i {
        model.step(j, change);
    }
    model.check(&env.stream, b, what)?;
    env.ctx.check_err()?;
    Ok(summarize(samples))
}

/// Rows of one shape and K measured in turn: per round, one block of `steps` steps of each row
/// (timed alone, with a synchronize before and after), `rounds` rounds after one unmeasured
/// round. `timed_row` measures a row's repetitions back to back, one row after another, so a
/// slow drift of the host (this host has two speeds) falls on some rows and not on others;
/// measured in turn, it falls on each round's rows alike, and a ratio of two rows is the median
/// of its per-round ratios. Every step goes into one host model, in the order run (each row with
/// its own `Change`), checked after the last round. Returns each row's samples (µs per step).
fn paired_rows(
    env: &Env,
    b: &mut Bufs,
    (shape, k): (Shape, usize),
    steps: usize,
    rounds: usize,
    what: &str,
    rows: &mut [(Change, &mut Step<'_>)],
) -> Res<Vec<Vec<f64>>> {
    b.zero(&env.stream)?;
    let mut model = Model::new(shape, k);
    let mut i = 0u64;
    let mut samples = vec![Vec::with_capacity(rounds); rows.len()];
    for round in 0..=rounds {
        for (j, (change, step)) in rows.iter_mut().enumerate() {
            env.stream.synchronize()?;
            let first = i;
            let t = Instant::now();
            for _ in 0..steps {
                step(b, i)?;
                i += 1;
            }
            env.stream.synchronize()?;
            let elapsed = t.elapsed();
            if round > 0 {
                samples[j].push(us(elapsed) / steps as f64);
            }
            for s in first..i {
                model.step(s, *change);
            }
        }
    }
    model.check(&env.stream, b, what)?;
    env.ctx.check_err()?;
    Ok(samples)
}

/// The paired measurement of one shape and K ([`paired_rows`]): the steady rows c, d, cA, f and
/// the read rows rc, rd, rc1, re, each row's median and the goal ratios as medians of per-round
/// ratios.
struct Paired {
    shape: Shape,
    k: usize,
    rounds: usize,
    /// Medians, µs per step: c, d, cA, f.
    steady: [f64; 4],
    /// d / c, f / cA, f / d.
    steady_ratios: [f64; 3],
    /// Medians, µs per step: rc, rd, rc1, re, re1, rk.
    read: [f64; 6],
    /// rd / rc, re / rc1, re1 / rc1, rd / rk.
    read_ratios: [f64; 4],
}

/// The median of the per-round ratios of samples `x` to samples `y` (same rounds).
fn ratio_median(x: &[f64], y: &[f64]) -> f64 {
    summarize(x.iter().zip(y).map(|(a, b)| a / b).collect()).median
}

/// K cudarc launches of one step on the stream (`s`: the first kernel's scalar, always into
/// `a[0]`).
fn eager_step(env: &Env, shape: Shape, k: usize, b: &mut Bufs, s: u32) -> Res<()> {
    let add = env.kern.function("add").expect("declared in kernels!");
    let acc = env.kern.function("acc").expect("declared in kernels!");
    let (n, one) = (ELEMS, 1u32);
    let stream = &env.stream;
    let Bufs { a, mids } = b;
    let x = &mut a[0];
    // SAFETY: the arguments match bench.cu's `add(unsigned, unsigned, unsigned*)` and
    // `acc(unsigned, const unsigned*, unsigned*)`; every buffer holds ELEMS elements.
    unsafe {
        stream.launch_builder(add).arg(&n).arg(&s).arg(&mut *x).launch(LAUNCH)?;
        match shape {
            Shape::Chain => {
                for _ in 1..k {
                    stream.launch_builder(add).arg(&n).arg(&one).arg(&mut *x).launch(LAUNCH)?;
                }
            }
            Shape::Fan => {
                for m in mids.iter_mut() {
                    stream.launch_builder(acc).arg(&n).arg(&*x).arg(m).launch(LAUNCH)?;
                }
                stream.launch_builder(add).arg(&n).arg(&one).arg(&mut *x).launch(LAUNCH)?;
            }
        }
    }
    Ok(())
}

/// One `graph!` step of the row's kind.
fn graph_step(
    env: &Env,
    cache: &mut GraphCache,
    shape: Shape,
    k: usize,
    b: &mut Bufs,
    i: u64,
    change: Change,
) -> Res<()> {
    let (s, w) = (scalar(i, change), slot(i, change));
    let (st, kern) = (&*env.stream, &env.kern);
    match (shape, change) {
        (Shape::Chain, Change::Variant) => chain_alt(k, cache, st, kern, i, &mut b.a[0])?,
        (Shape::Chain, _) => chain_step(k, cache, st, kern, s, &mut b.a[w])?,
        (Shape::Fan, Change::Variant) => fan_alt(k, cache, st, kern, i, &mut b.a[0], &mut b.mids)?,
        (Shape::Fan, _) => fan_step(k, cache, st, kern, s, &mut b.a[w], &mut b.mids)?,
    }
    Ok(())
}

/// One step built with `GraphBuilder` (the run-time API): the same nodes as `graph_step`,
/// recorded anew every step.
fn builder_step(
    env: &Env,
    cache: &mut GraphCache,
    shape: Shape,
    k: usize,
    b: &mut Bufs,
    i: u64,
    change: Change,
) -> Res<()> {
    let (s, w) = (scalar(i, change), slot(i, change));
    let kern = &env.kern;
    let mut g = cache.builder(&env.stream);
    let x = g.write(&mut b.a[w]);
    g.kernel(kern.add(ELEMS, s, x).launch(CFG));
    match shape {
        Shape::Chain => {
            for _ in 1..k {
                g.kernel(kern.add(ELEMS, 1, x).launch(CFG));
            }
        }
        Shape::Fan => {
            for m in b.mids.iter_mut() {
                let m = g.write(m);
                g.kernel(kern.acc(ELEMS, x.read(), m).launch(CFG));
            }
            g.kernel(kern.add(ELEMS, 1, x).launch(CFG));
        }
    }
    g.launch()?;
    Ok(())
}

/// `$name`: one step of a read row's `graph!` into a `$host`: the unchanged step of the shape
/// (as `graph_step` with nothing changed), then the copy of `a[0]`'s first 8 bytes into `host`,
/// by the `read_graphs!` functions of each shape and K.
macro_rules! read_step {
    ($name:ident, $host:ty, [$c1:ident, $c10:ident, $c100:ident, $c1000:ident], [$f10:ident, $f100:ident, $f1000:ident]) => {
        fn $name(
            env: &Env,
            cache: &mut GraphCache,
            shape: Shape,
            k: usize,
            b: &mut Bufs,
            host: &mut $host,
        ) -> Res<()> {
            let (st, kern) = (&*env.stream, &env.kern);
            let Bufs { a, mids } = b;
            let x = &mut a[0];
            match (shape, k) {
                (Shape::Chain, 1) => $c1(cache, st, kern, x, host)?,
                (Shape::Chain, 10) => $c10(cache, st, kern, x, host)?,
                (Shape::Chain, 100) => $c100(cache, st, kern, x, host)?,
                (Shape::Chain, 1000) => $c1000(cache, st, kern, x, host)?,
                (Shape::Fan, 10) => $f10(cache, st, kern, x, mids, host)?,
                (Shape::Fan, 100) => $f100(cache, st, kern, x, mids, host)?,
                (Shape::Fan, 1000) => $f1000(cache, st, kern, x, mids, host)?,
                _ => panic!("no graph! {} of {k} nodes with a read is compiled in", shape.name()),
            }
            Ok(())
        }
    };
}
read_step!(
    read_step,
    PinnedBuffer<u32>,
    [chain_read_1, chain_read_10, chain_read_100, chain_read_1000],
    [fan_read_10, fan_read_100, fan_read_1000]
);
// Row rs: into cudarc's `PinnedHostSlice`.
read_step!(
    read_step_cudarc,
    PinnedHostSlice<u32>,
    [chain_read_1_cudarc, chain_read_10_cudarc, chain_read_100_cudarc, chain_read_1000_cudarc],
    [fan_read_10_cudarc, fan_read_100_cudarc, fan_read_1000_cudarc]
);

/// Expected `Stats` of a graph! row: builds (variants), and no fallback rungs.
fn check_stats(what: &str, s: &Stats, variants: u64, report: &mut Report) {
    // Execs the memo built for a set of parameters coming back (ping-pong) are not fallbacks.
    let builds = s.builds - s.memo_builds;
    if builds != variants || s.exec_updates != 0 || s.reinstantiations != 0 || s.evictions != 0 {
        let note = format!(
            "WARNING {what}: expected {variants} build(s) and no fallback, got builds {builds} (and {} memo builds) exec_updates {} reinstantiations {} evictions {}",
            s.memo_builds, s.exec_updates, s.reinstantiations, s.evictions
        );
        out!("{note}");
        report.notes.push(note);
    }
}

/// Steps per repetition of the read rows, at most (`--steps` sets it as for every steady row):
/// each step waits for its graph, so there is no enqueue to amortize, and 200 repetitions of 50
/// steps read 10 000 results.
const READ_STEPS: usize = 50;

/// What the read rows' pinned buffers hold before a row's first step: no step's result (the
/// chain's results are multiples of K from K up, the fan's even numbers).
const UNSET: u32 = u32::MAX;

/// The value a read row expects after step `i`: every element of `a[0]` in the host model of
/// the unchanged step, started again at step 0 (where `timed_row` zeroes the buffers).
struct Expect(Model);

impl Expect {
    fn new(shape: Shape, k: usize) -> Expect {
        Expect(Model::new(shape, k))
    }

    fn after(&mut self, i: u64) -> u32 {
        if i == 0 {
            self.0 = Model::new(self.0.shape, self.0.k);
        }
        self.0.step(i, Change::None);
        self.0.a[0]
    }
}

/// A read row's check of one step: both `u32`s read must be the host model's value.
fn check_read(what: &str, i: u64, got: [u32; READ_LEN], want: u32) -> Res<()> {
    if got != [want; READ_LEN] {
        return Err(format!(
            "{what}: WRONG RESULT at step {i}: read {got:?} from pinned memory, the host model says {want}"
        )
        .into());
    }
    Ok(())
}

/// Fills the read rows' pinned buffers with [`UNSET`].
fn unset(hosts: &mut [PinnedHostSlice<u32>]) -> Res<()> {
    for h in hosts {
        h.as_mut_slice()?.fill(UNSET);
    }
    Ok(())
}

/// The raw read rows' graph (rc, rc1): `raw_spec`'s graph with a memcpy node after its last
/// kernel copying the first 8 bytes of `a[0]` into pinned buffer 0, and the copies into each
/// of the two buffers (rc1 swaps between them).
struct RawRead {
    graph: OwnedGraph,
    /// `raw_spec`'s graph with the readback kernel node instead of the memcpy node (row rk).
    kgraph: OwnedGraph,
    copy_node: CUgraphNode,
    copies: [CUDA_MEMCPY3D; 2],
    /// The buffers' host addresses: the caller keeps the buffers alive while it uses `self`.
    hp: [*const u32; 2],
    ctx: CUcontext,
    cs: CUstream,
}

impl RawRead {
    /// The graph for `a[0]` at `a0` and the middle buffers `mids`, reading into `hosts`.
    fn new(
        env: &Env,
        (shape, k): (Shape, usize),
        (a0, mids): (CUdeviceptr, &[CUdeviceptr]),
        hosts: &[PinnedHostSlice<u32>; 2],
    ) -> Res<RawRead> {
        // The buffers' host addresses. Their events are never recorded (cudarc does not see
        // these rows use them), so `as_ptr` does not wait.
        let hp = [hosts[0].as_ptr()?, hosts[1].as_ptr()?];
        let copies = hp.map(|p| head_copy(a0, p.cast_mut().cast()));
        let ctx = env.ctx.cu_ctx();
        let mut graph = OwnedGraph::build(&raw_spec(shape, k, env, 1, a0, mids))?;
        graph.add_copy(k - 1, &copies[0], ctx)?;
        let copy_node = graph.nodes[k];
        let mut kgraph = OwnedGraph::build(&raw_spec(shape, k, env, 1, a0, mids))?;
        kgraph.add_readback(k - 1, env.readback.cu_function(), a0, hp[0] as u64)?;
        Ok(RawRead { graph, kgraph, copy_node, copies, hp, ctx, cs: env.cu_stream() })
    }

    /// Step `i` of an exec of `self.graph`: its copy's destination set to buffer `i % 2` first
    /// when `swap` (one set-params), then launch, `cuStreamSynchronize`, and the buffer read.
    fn step(&self, exec: &OwnedExec, swap: bool, i: u64) -> Res<[u32; READ_LEN]> {
        let w = if swap { (i % 2) as usize } else { 0 };
        if swap {
            exec.set_copy(self.copy_node, &self.copies[w], self.ctx)?;
        }
        exec.launch(self.cs)?;
        // SAFETY: the stream is live.
        unsafe { sys::cuStreamSynchronize(self.cs) }.result()?;
        // SAFETY: `hp[w]` points to `READ_LEN` `u32`s of live pinned memory (the caller keeps
        // the buffers alive, page-aligned), which this step's copy wrote and nothing writes now
        // (the stream is synchronized).
        Ok(unsafe { ptr::read_volatile(self.hp[w].cast::<[u32; READ_LEN]>()) })
    }
}

impl OwnedGraph {
    /// One kernel node of the crate's readback kernel (`cuGraphAddKernelNode_v2`) after node
    /// `after`, copying the read rows' 8 bytes from `src` to the pinned memory at `dst` as
    /// `graph!` makes rd's copy: one 8-byte word, one block of 256 threads.
    fn add_readback(&mut self, after: usize, func: CUfunction, src: u64, dst: u64) -> Res<()> {
        let dep = self.nodes[after];
        let (mut src, mut dst, mut words, mut word_bytes) =
            (src, dst, (READ_LEN * size_of::<u32>() / 8) as u64, 8u32);
        let mut ptrs: [*mut c_void; 4] = [
            ptr::from_mut(&mut src).cast(),
            ptr::from_mut(&mut dst).cast(),
            ptr::from_mut(&mut words).cast(),
            ptr::from_mut(&mut word_bytes).cast(),
        ];
        let params = kernel_node_params(func, 256, &mut ptrs);
        let mut handle = ptr::null_mut();
        // SAFETY: the graph is live, `dep` is one of its nodes, `params` points to one value per
        // parameter of the readback kernel, valid during the call; `src` is device memory and
        // `dst` pinned host memory (its device address: unified addressing) of at least 8 bytes,
        // which the caller keeps alive while this graph or an exec of it is used.
        unsafe { sys::cuGraphAddKernelNode_v2(&mut handle, self.graph, &dep, 1, &params) }
            .result()?;
        self.nodes.push(handle);
        Ok(())
    }
}

impl RawRead {
    /// Step of row rk on an exec of `self.kgraph`: launch, `cuStreamSynchronize`, buffer 0 read.
    fn step_kernel(&self, exec: &OwnedExec) -> Res<[u32; READ_LEN]> {
        exec.launch(self.cs)?;
        // SAFETY: the stream is live.
        unsafe { sys::cuStreamSynchronize(self.cs) }.result()?;
        // SAFETY: as in `step`: `hp[0]`, which this step's readback node wrote.
        Ok(unsafe { ptr::read_volatile(self.hp[0].cast::<[u32; READ_LEN]>()) })
    }
}

/// Step `i` of a `graph!` read row (rd, re): the call into `ours[0]` (into `ours[i % 2]` when
/// `swap`), then that buffer read (`as_slice` waits for the copy).
fn our_read(
    env: &Env,
    cache: &mut GraphCache,
    (shape, k): (Shape, usize),
    b: &mut Bufs,
    ours: &mut [PinnedBuffer<u32>; 2],
    swap: bool,
    i: u64,
) -> Res<[u32; READ_LEN]> {
    let w = if swap { (i % 2) as usize } else { 0 };
    read_step(env, cache, shape, k, b, &mut ours[w])?;
    Ok(ours[w].as_slice()?.try_into()?)
}

/// Step `i` of row cA: every node of `exec` (of `g`, `raw_spec`'s graph, whose kernels are
/// `add` and `acc`) given `a[i % 2]` (K set-params), then the launch on `cs`.
fn set_pointers_and_launch(
    (exec, g, cs): (&OwnedExec, &OwnedGraph, CUstream),
    (add, acc): (CUfunction, CUfunction),
    (shape, k): (Shape, usize),
    (a_ptr, mids): (&[CUdeviceptr; 2], &[CUdeviceptr]),
    i: u64,
) -> Res<()> {
    let a = a_ptr[slot(i, Change::Pointer)];
    for (j, &node) in g.nodes.iter().enumerate() {
        let f = node_func(shape, k, j, add, acc);
        exec.set(node, f, node_args(shape, k, j, 1, a, mids))?;
    }
    exec.launch(cs)
}

/// The read rows of one shape and K, every step ending with its result read on the host: the
/// step's graph copies the first 8 bytes of `a[0]` into pinned host memory (flags 0) after its
/// last kernel, then the host waits for the step and reads them, and they must hold the host
/// model's value after that step (else the row fails). rc, rc1: a raw graph with a memcpy node;
/// rd, re, rs: `graph!` with the same copy as a `copy_2d` statement. `steady` sets the ratios.
fn read_rows(env: &Env, shape: Shape, k: usize, b: &mut Bufs, report: &mut Report) -> Res<()> {
    let steps = env.steps.unwrap_or_else(|| steps_per_rep(k).min(READ_STEPS));
    let label = |id: &str| format!("{} K={k} row {id}", shape.name());
    let mut rows: Vec<(&'static str, Summary, Option<Stats>)> = Vec::new();
    // SAFETY: the memory is uninitialized; `unset` fills it before every row, and nothing reads
    // it before that.
    let mut hosts: [PinnedHostSlice<u32>; 2] = unsafe {
        [
            env.ctx.alloc_pinned_with_flags(READ_LEN, 0)?,
            env.ctx.alloc_pinned_with_flags(READ_LEN, 0)?,
        ]
    };
    let (a_ptr, mid_ptrs) = b.ptrs(&env.stream);

    // rc, rc1: c's raw graph and a memcpy node after its last kernel; rc1 swaps the node's
    // destination between the two pinned buffers every step (one set-params).
    {
        let raw = RawRead::new(env, (shape, k), (a_ptr[0], &mid_ptrs), &hosts)?;
        let exec = OwnedExec::instantiate(&raw.graph)?;
        for (id, swap) in [("rc", false), ("rc1", true)] {
            let what = label(id);
            let mut want = Expect::new(shape, k);
            unset(&mut hosts)?;
            let t = timed_row(env, b, shape, k, Change::None, steps, &what, &mut |_, i| {
                check_read(&what, i, raw.step(&exec, swap, i)?, want.after(i))
            })?;
            rows.push((id, t, None));
        }
        env.stream.synchronize()?;
    }

    // rd, re: graph! into `PinnedBuffer`s, read right after the call (`as_slice` waits: one
    // cuStreamSynchronize); re swaps the copy's destination every step.
    let mut ours = [
        PinnedBuffer::from_slice(&env.stream, &[UNSET; READ_LEN])?,
        PinnedBuffer::from_slice(&env.stream, &[UNSET; READ_LEN])?,
    ];
    for (id, swap) in [("rd", false), ("re", true)] {
        let what = label(id);
        let mut want = Expect::new(shape, k);
        let mut cache = GraphCache::new();
        for h in &mut ours {
            h.as_mut_slice()?.fill(UNSET);
        }
        let t = timed_row(env, b, shape, k, Change::None, steps, &what, &mut |b, i| {
            let got = our_read(env, &mut cache, (shape, k), b, &mut ours, swap, i)?;
            check_read(&what, i, got, want.after(i))
        })?;
        let stats = cache.stats();
        check_stats(&what, &stats, 1, report);
        rows.push((id, t, Some(stats)));
    }
    // rs: graph! into cudarc's `PinnedHostSlice`, then `stream.synchronize()` and `as_slice()`
    // (without the synchronize, `as_slice` sleeps on cudarc's blocking-sync event: 57.6 µs).
    {
        let what = label("rs");
        let mut want = Expect::new(shape, k);
        let mut cache = GraphCache::new();
        unset(&mut hosts)?;
        let t = timed_row(env, b, shape, k, Change::None, steps, &what, &mut |b, i| {
            read_step_cudarc(env, &mut cache, shape, k, b, &mut hosts[0])?;
            env.stream.synchronize()?;
            let got: [u32; READ_LEN] = hosts[0].as_slice()?.try_into()?;
            check_read(&what, i, got, want.after(i))
        })?;
        let stats = cache.stats();
        check_stats(&what, &stats, 1, report);
        rows.push(("rs", t, Some(stats)));
    }

    for (id, t, stats) in rows {
        report.rows.push(Row::measured("read", (shape, k, steps), id, t, stats));
    }
    Ok(())
}

/// Rows c, d, cA, f, then rc, rd, rc1, re, of one shape and K measured in turn
/// ([`paired_rows`], at least 5 rounds): the goals' ratios (`f` ÷ `cA`, `f` ÷ `d`, `rd` ÷ `rc`,
/// `re` ÷ `rc1`) without the host's drift between rows measured one after another. Each row as
/// in [`steady`] and [`read_rows`], with its own cache or exec; every read checked as there.
fn paired(env: &Env, shape: Shape, k: usize, b: &mut Bufs, report: &mut Report) -> Res<()> {
    let rounds = env.reps.max(5);
    let label = |id: &str| format!("{} K={k} paired rows {id}", shape.name());
    let (a_ptr, mid_ptrs) = b.ptrs(&env.stream);
    let cs = env.cu_stream();
    let funcs = (env.f_add(), env.f_acc());
    let med = |x: &[f64]| summarize(x.to_vec()).median;

    // c, d, cA, f.
    let steps = env.steps.unwrap_or_else(|| steps_per_rep(k));
    let g = OwnedGraph::build(&raw_spec(shape, k, env, 1, a_ptr[0], &mid_ptrs))?;
    let (exec, exec_a) = (OwnedExec::instantiate(&g)?, OwnedExec::instantiate(&g)?);
    let (mut dcache, mut fcache) = (env.paired_cache(), env.paired_cache());
    let t = {
        let mut c = |_: &mut Bufs, _: u64| exec.launch(cs);
        let mut d = |b: &mut Bufs, i| graph_step(env, &mut dcache, shape, k, b, i, Change::None);
        let mut ca = |_: &mut Bufs, i| {
            set_pointers_and_launch((&exec_a, &g, cs), funcs, (shape, k), (&a_ptr, &mid_ptrs), i)
        };
        let mut f = |b: &mut Bufs, i| graph_step(env, &mut fcache, shape, k, b, i, Change::Pointer);
        let rows: &mut [(Change, &mut Step<'_>)] = &mut [
            (Change::None, &mut c),
            (Change::None, &mut d),
            (Change::Pointer, &mut ca),
            (Change::Pointer, &mut f),
        ];
        paired_rows(env, b, (shape, k), steps, rounds, &label("c, d, cA, f"), rows)?
    };
    check_stats(&label("d"), &dcache.stats(), 1, report);
    check_stats(&label("f"), &fcache.stats(), 1, report);
    env.stream.synchronize()?;
    let steady = [med(&t[0]), med(&t[1]), med(&t[2]), med(&t[3])];
    let steady_ratios =
        [ratio_median(&t[1], &t[0]), ratio_median(&t[3], &t[2]), ratio_median(&t[3], &t[1])];

    // rc, rd, rc1, re: as in `read_rows` (rc and rc1 with an exec each, so that rc1's
    // destination swaps never reach rc).
    let steps = env.steps.unwrap_or_else(|| steps_per_rep(k).min(READ_STEPS));
    // SAFETY: the memory is uninitialized; every read step writes it (its copy) before reading
    // it, and nothing else reads it.
    let hosts: [PinnedHostSlice<u32>; 2] = unsafe {
        [
            env.ctx.alloc_pinned_with_flags(READ_LEN, 0)?,
            env.ctx.alloc_pinned_with_flags(READ_LEN, 0)?,
        ]
    };
    let raw = RawRead::new(env, (shape, k), (a_ptr[0], &mid_ptrs), &hosts)?;
    let (rexec, rexec1) =
        (OwnedExec::instantiate(&raw.graph)?, OwnedExec::instantiate(&raw.graph)?);
    let kexec = OwnedExec::instantiate(&raw.kgraph)?;
    let mut ours = [
        PinnedBuffer::from_slice(&env.stream, &[UNSET; READ_LEN])?,
        PinnedBuffer::from_slice(&env.stream, &[UNSET; READ_LEN])?,
    ];
    let (mut rdcache, mut recache) = (env.paired_cache(), env.paired_cache());
    // re1: as re with one exec per variant, so the copy's destination is updated in place
    // every step (`cuGraphExecMemcpyNodeSetParams`, as rc1) instead of launching the other of
    // two memoized execs.
    let mut re1cache = env.paired_cache();
    re1cache.set_execs_per_variant(1);
    let want = std::cell::RefCell::new(Expect::new(shape, k));
    let what = label("rc, rd, rc1, re, re1, rk");
    let t = {
        let check = |i, got| check_read(&what, i, got, want.borrow_mut().after(i));
        let ours = std::cell::RefCell::new(&mut ours);
        let ours_step = |cache: &mut GraphCache, b: &mut Bufs, swap: bool, i: u64| -> Res<()> {
            let got = our_read(env, cache, (shape, k), b, &mut ours.borrow_mut(), swap, i)?;
            check(i, got)
        };
        let mut rc = |_: &mut Bufs, i| check(i, raw.step(&rexec, false, i)?);
        let mut rd = |b: &mut Bufs, i| ours_step(&mut rdcache, b, false, i);
        let mut rc1 = |_: &mut Bufs, i| check(i, raw.step(&rexec1, true, i)?);
        let mut re = |b: &mut Bufs, i| ours_step(&mut recache, b, true, i);
        let mut re1 = |b: &mut Bufs, i| ours_step(&mut re1cache, b, true, i);
        let mut rk = |_: &mut Bufs, i| check(i, raw.step_kernel(&kexec)?);
        let rows: &mut [(Change, &mut Step<'_>)] = &mut [
            (Change::None, &mut rc),
            (Change::None, &mut rd),
            (Change::None, &mut rc1),
            (Change::None, &mut re),
            (Change::None, &mut re1),
            (Change::None, &mut rk),
        ];
        paired_rows(env, b, (shape, k), steps, rounds, &what, rows)?
    };
    check_stats(&label("rd"), &rdcache.stats(), 1, report);
    check_stats(&label("re"), &recache.stats(), 1, report);
    env.stream.synchronize()?;
    report.paired.push(Paired {
        shape,
        k,
        rounds,
        steady,
        steady_ratios,
        read: [med(&t[0]), med(&t[1]), med(&t[2]), med(&t[3]), med(&t[4]), med(&t[5])],
        read_ratios: [
            ratio_median(&t[1], &t[0]),
            ratio_median(&t[3], &t[2]),
            ratio_median(&t[4], &t[2]),
            ratio_median(&t[1], &t[5]),
        ],
    });
    Ok(())
}

/// The paired measurements ([`paired`]) as one table.
fn paired_costs(report: &Report) {
    if report.paired.is_empty() {
        return;
    }
    let rounds = report.paired[0].rounds;
    out!(
        "Measured in turn: rows c, d, cA, f, then rc, rd, rc1, re, re1, rk, one block of steps of each per round, {rounds} rounds after one unmeasured; µs per step, medians; ratios are medians of the per-round ratios"
    );
    out!(
        "{:<6}{:>5}  {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7}  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>9} {:>7}",
        "shape",
        "K",
        "c",
        "d",
        "cA",
        "f",
        "d / c",
        "f / cA",
        "f / d",
        "rc",
        "rd",
        "rc1",
        "re",
        "re1",
        "rk",
        "rd / rc",
        "re / rc1",
        "re1 / rc1",
        "rd / rk"
    );
    for p in &report.paired {
        let [c, d, ca, f] = p.steady;
        let [dc, fca, fd] = p.steady_ratios;
        let [rc, rd, rc1, re, re1, rk] = p.read;
        let [rdrc, rerc1, re1rc1, rdrk] = p.read_ratios;
        out!(
            "{:<6}{:>5}  {c:>8.2} {d:>8.2} {ca:>8.2} {f:>8.2} {dc:>7.3} {fca:>7.3} {fd:>7.3}  {rc:>8.2} {rd:>8.2} {rc1:>8.2} {re:>8.2} {re1:>8.2} {rk:>8.2} {rdrc:>7.3} {rerc1:>8.3} {re1rc1:>9.3} {rdrk:>7.3}",
            p.shape.name(),
            p.k
        );
    }
    out!(
        "  issue 31's goals: f / cA <= 1.0, f / d <= 1.05, rd / rc <= 1.05, re / rc1 <= 1.0. rk is rc with the kernel node that graph! makes of the copy (the crate's readback kernel), so rd / rk is the call's own cost over that raw graph. The rows above measure each row's repetitions back to back, one row after another; here a drift of the host's speed falls on every row of a round alike."
    );
    out!();
}

/// Every steady-state row of one shape and K.
fn steady(env: &Env, shape: Shape, k: usize, report: &mut Report) -> Res<()> {
    progress::status(&format!("bench: measuring {} K={k} …", shape.name()));
    progress::message(&format!("{} K={k}", shape.name()));
    let steps = env.steps.unwrap_or_else(|| steps_per_rep(k));
    let first = report.rows.len();
    let push = |report: &mut Report, section, id, t, stats| {
        report.rows.push(Row::measured(section, (shape, k, steps), id, t, stats))
    };
    let label = |id: &str| format!("{} K={k} row {id}", shape.name());

    let mut b = Bufs::new(&env.stream, shape, k)?;
    let (a_ptr, mid_ptrs) = b.ptrs(&env.stream);

    // c, c1, cA: raw driver graphs.
    {
        let spec = raw_spec(shape, k, env, 1, a_ptr[0], &mid_ptrs);
        let g = OwnedGraph::build(&spec)?;
        let exec = OwnedExec::instantiate(&g)?;
        let cs = env.cu_stream();
        let t = timed_row(env, &mut b, shape, k, Change::None, steps, &label("c"), &mut |_, _| {
            exec.launch(cs)
        })?;
        push(report, "steady", "c", t, None);

        let (add, acc) = (env.f_add(), env.f_acc());
        let t =
            timed_row(env, &mut b, shape, k, Change::Scalar, steps, &label("c1"), &mut |_, i| {
                let s = scalar(i, Change::Scalar);
                exec.set(g.nodes[0], add, node_args(shape, k, 0, s, a_ptr[0], &mid_ptrs))?;
                exec.launch(cs)
            })?;
        push(report, "steady", "c1", t, None);

        let t =
            timed_row(env, &mut b, shape, k, Change::Pointer, steps, &label("cA"), &mut |_, i| {
                let funcs = (add, acc);
                set_pointers_and_launch((&exec, &g, cs), funcs, (shape, k), (&a_ptr, &mid_ptrs), i)
            })?;
        push(report, "steady", "cA", t, None);
        env.stream.synchronize()?;
    }

    // a: cudarc stream launches.
    let t = timed_row(env, &mut b, shape, k, Change::None, steps, &label("a"), &mut |b, _| {
        eager_step(env, shape, k, b, 1)
    })?;
    push(report, "steady", "a", t, None);

    // b: cudarc stream capture + replay. Capture needs event tracking off (with it, the launches
    // wait on events recorded outside the capture: CUDA_ERROR_STREAM_CAPTURE_ISOLATION); this
    // whole section runs with it off, and these buffers were allocated so.
    {
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        env.stream.begin_capture(mode)?;
        let captured = eager_step(env, shape, k, &mut b, 1);
        let ended = env.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        captured?;
        let graph = ended?.ok_or("stream capture produced no graph")?;
        let t = timed_row(env, &mut b, shape, k, Change::None, steps, &label("b"), &mut |_, _| {
            Ok(graph.launch()?)
        })?;
        push(report, "steady", "b", t, None);
        env.stream.synchronize()?;
    }

    // d, e, f, g: graph!.
    for (id, change, variants) in [
        ("d", Change::None, 1),
        ("e", Change::Scalar, 1),
        ("f", Change::Pointer, 1),
        ("g", Change::Variant, 2),
    ] {
        let mut cache = GraphCache::new();
        let t = timed_row(env, &mut b, shape, k, change, steps, &label(id), &mut |b, i| {
            graph_step(env, &mut cache, shape, k, b, i, change)
        })?;
        let stats = cache.stats();
        check_stats(&label(id), &stats, variants, report);
        push(report, "steady", id, t, Some(stats));
    }
    // h, hf: GraphBuilder.
    for (id, change) in [("h", Change::None), ("hf", Change::Pointer)] {
        let mut cache = GraphCache::new();
        let t = timed_row(env, &mut b, shape, k, change, steps, &label(id), &mut |b, i| {
            builder_step(env, &mut cache, shape, k, b, i, change)
        })?;
        let stats = cache.stats();
        check_stats(&label(id), &stats, 1, report);
        push(report, "steady", id, t, Some(stats));
    }
    // do: d with every buffer owned by another stream, which the cache orders with the graph.
    {
        let mut own = Bufs::new(&env.other, shape, k)?;
        env.other.synchronize()?;
        let mut cache = GraphCache::new();
        let t =
            timed_row(env, &mut own, shape, k, Change::None, steps, &label("do"), &mut |b, i| {
                graph_step(env, &mut cache, shape, k, b, i, Change::None)
            })?;
        let stats = cache.stats();
        check_stats(&label("do"), &stats, 1, report);
        if stats.stream_waits != 2 * stats.launches {
            return Err(format!(
                "{}: {} stream waits for {} launches",
                label("do"),
                stats.stream_waits,
                stats.launches
            )
            .into());
        }
        push(report, "steady", "do", t, Some(stats));
        env.stream.synchronize()?;
    }
    // dc: a's launches in one keyed capture statement, nothing changed (as d): recorded by the
    // first call, then the same recording every call (nothing recorded, nothing sent). Event
    // tracking off, as in d: a capture does not need it (with it on, the call pays cudarc's
    // events of `x`, as d* does).
    if shape == Shape::Chain && CAPTURE_K.contains(&k) {
        let mut cache = GraphCache::new();
        let t = timed_row(env, &mut b, shape, k, Change::None, steps, &label("dc"), &mut |b, i| {
            let s = scalar(i, Change::None);
            Ok(chain_captured(&mut cache, &env.stream, &env.kern, k, s, &mut b.a[0])?)
        });
        let t = t?;
        let stats = cache.stats();
        check_stats(&label("dc"), &stats, 1, report);
        // One recording, taken again by every later call; nothing sent to the exec.
        if stats.captures != 1 || stats.capture_reuses + 1 != stats.launches {
            return Err(format!(
                "{}: {} recordings and {} reuses for {} launches (want 1 recording)",
                label("dc"),
                stats.captures,
                stats.capture_reuses,
                stats.launches
            )
            .into());
        }
        if stats.node_updates != 0 {
            let note = format!(
                "WARNING {}: expected no node updates, got {}",
                label("dc"),
                stats.node_updates
            );
            out!("{note}");
            report.notes.push(note);
        }
        push(report, "steady", "dc", t, Some(stats));
        env.stream.synchronize()?;
    }
    // rc, rc1, rd, re, rs: each step waits for its graph and reads its result.
    read_rows(env, shape, k, &mut b, report)?;
    // c, d, cA, f, then rc, rd, rc1, re again, measured in turn.
    paired(env, shape, k, &mut b, report)?;
    // Host enqueue time of one unchanged call with the GPU idle: `graph!` (as row d) against
    // the raw cuGraphLaunch (as row c). Where the first exceeds the GPU time of a step, the
    // steady rows are host-bound (issue 18: the fan at K = 1000). These calls change the
    // buffers; every timed row zeroes them first.
    {
        let spec = raw_spec(shape, k, env, 1, a_ptr[0], &mid_ptrs);
        let g = OwnedGraph::build(&spec)?;
        let exec = OwnedExec::instantiate(&g)?;
        let cs = env.cu_stream();
        let mut cache = GraphCache::new();
        graph_step(env, &mut cache, shape, k, &mut b, 0, Change::None)?;
        let (mut graph_t, mut raw_t) = (Vec::new(), Vec::new());
        for i in 1..=ENQUEUE_REPS {
            env.stream.synchronize()?;
            let t = Instant::now();
            graph_step(env, &mut cache, shape, k, &mut b, i, Change::None)?;
            graph_t.push(us(t.elapsed()));
            env.stream.synchronize()?;
            let t = Instant::now();
            exec.launch(cs)?;
            raw_t.push(us(t.elapsed()));
        }
        env.stream.synchronize()?;
        let (gt, rt) = (summarize(graph_t), summarize(raw_t));
        let line = format!(
            "{} K={k}: host enqueue of one unchanged call, GPU idle, median of {ENQUEUE_REPS}: graph! {:.2} µs ({:.0} ns per node; {} of {} calls unchanged), raw cuGraphLaunch {:.2} µs",
            shape.name(),
            gt.median,
            gt.median * 1000.0 / k as f64,
            cache.stats().unchanged_calls,
            ENQUEUE_REPS,
            rt.median
        );
        out!("{line}");
        report.notes.push(line);
    }
    env.stream.synchronize()?;
    drop(b);

    // a*, d*: the same with cudarc's event tracking on, as it is by default once a context has a
    // second stream.
    {
        // SAFETY: everything runs on one stream, so there is nothing for tracking to order; the
        // buffers allocated now carry events, the earlier ones do not.
        unsafe { env.ctx.enable_event_tracking() };
        let result = (|| -> Res<()> {
            let mut b = Bufs::new(&env.stream, shape, k)?;
            let t = timed_row(
                env,
                &mut b,
                shape,
                k,
                Change::None,
                steps,
                &label("a*"),
                &mut |b, _| eager_step(env, shape, k, b, 1),
            )?;
            push(report, "steady-tracking", "a*", t, None);
            let mut cache = GraphCache::new();
            let t = timed_row(
                env,
                &mut b,
                shape,
                k,
                Change::None,
                steps,
                &label("d*"),
                &mut |b, i| graph_step(env, &mut cache, shape, k, b, i, Change::None),
            )?;
            let stats = cache.stats();
            check_stats(&label("d*"), &stats, 1, report);
            push(report, "steady-tracking", "d*", t, Some(stats));
            drop(cache);
            env.stream.synchronize()?;
            Ok(())
        })();
        // SAFETY: back to the untracked mode the rest of the run uses.
        unsafe { env.ctx.disable_event_tracking() };
        result?;
    }

    // Ratios.
    let rows = &mut report.rows[first..];
    let median = |rows: &[Row], id: &str| rows.iter().find(|r| r.id == id).map(|r| r.t.median);
    let (c, c1, ca) = (median(rows, "c"), median(rows, "c1"), median(rows, "cA"));
    let d = median(rows, "d");
    let (rc, rc1, rd) = (median(rows, "rc"), median(rows, "rc1"), median(rows, "rd"));
    for r in rows.iter_mut() {
        r.ratio_raw = c.map(|c| r.t.median / c);
        let floor = match r.id {
            "d" | "g" | "h" | "d*" | "do" => Some(("c", c)),
            "e" => Some(("c1", c1)),
            "dc" => Some(("d", d)),
            "f" | "hf" => Some(("cA", ca)),
            "rd" => Some(("rc", rc)),
            "re" => Some(("rc1", rc1)),
            "rs" => Some(("rd", rd)),
            _ => None,
        };
        if let Some((id, Some(v))) = floor {
            r.floor = Some(id);
            r.ratio_floor = Some(r.t.median / v);
        }
    }
    print_block(&report.rows[first..]);
    Ok(())
}

fn print_block(rows: &[Row]) {
    for (id, _) in ROWS {
        let Some(r) = rows.iter().find(|r| r.id == *id) else { continue };
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
        let floor = r.floor.map_or(String::new(), |f| format!(" (÷{f})"));
        out!(
            "{:<6}{:>5}  {:<3}{:>11.2}{:>10.2}{:>10.2}{:>9.3}{:>8}{floor:<6} {:>7.3}",
            r.shape.name(),
            r.k,
            r.id,
            r.t.median,
            r.t.p10,
            r.t.p90,
            r.ratio_raw.unwrap_or(f64::NAN),
            opt(r.ratio_floor),
            r.t.median / r.k as f64,
        );
    }
    out!();
}

/// A programmatic row's stats, checked: one build, no fallback, and `k - 1` programmatic edges
/// (none with plain edges).
fn pdl_stats(
    what: &str,
    cache: &GraphCache,
    programmatic: bool,
    k: usize,
    report: &mut Report,
) -> Res<Stats> {
    let stats = cache.stats();
    check_stats(what, &stats, 1, report);
    // Per graph built: the memo builds one more exec for a pointer set coming back (pf, pnf).
    let want = if programmatic { (k as u64 - 1) * stats.builds } else { 0 };
    if stats.programmatic_edges != want || stats.programmatic_fallbacks != 0 {
        return Err(format!("{what}: {stats:?}, expected {want} programmatic edges").into());
    }
    Ok(stats)
}

/// The programmatic rows of one K (chain): raw plain edges (pc), raw programmatic edges (pp),
/// `graph!` with programmatic edges (pd) and with plain ones (pn), one kernel (`add_wait`, which
/// waits first) for all four, measured side by side.
fn programmatic_rows(env: &Env, pdl: &BenchPdl, k: usize, report: &mut Report) -> Res<()> {
    progress::status(&format!("bench: measuring programmatic chain K={k} …"));
    progress::message(&format!("programmatic chain K={k}"));
    let shape = Shape::Chain;
    let steps = env.steps.unwrap_or_else(|| steps_per_rep(k));
    let first = report.rows.len();
    let label = |id: &str| format!("programmatic chain K={k} row {id}");
    let mut b = Bufs::new(&env.stream, shape, k)?;
    let (a_ptr, _) = b.ptrs(&env.stream);
    let func = pdl.function("add_wait").expect("declared in kernels!").cu_function();
    let mut rows = Vec::new();
    let trigger = pdl.function("add_wait_trigger").expect("declared in kernels!").cu_function();
    for (id, f, programmatic) in [("pc", func, false), ("pp", func, true), ("pt", trigger, true)] {
        let add = |_| KArgs::Add { n: ELEMS, v: 1, x: a_ptr[0] };
        let g = OwnedGraph::build_chain(f, k, add, programmatic)?;
        let exec = OwnedExec::instantiate(&g)?;
        let cs = env.cu_stream();
        let t = timed_row(env, &mut b, shape, k, Change::None, steps, &label(id), &mut |_, _| {
            exec.launch(cs)
        })?;
        rows.push((id, t, None));
        env.stream.synchronize()?;
    }
    for (id, programmatic, change) in [
        ("pd", true, Change::None),
        ("pn", false, Change::None),
        ("pf", true, Change::Pointer),
        ("pnf", false, Change::Pointer),
    ] {
        let mut cache = GraphCache::new();
        cache.set_programmatic(programmatic);
        let t = timed_row(env, &mut b, shape, k, change, steps, &label(id), &mut |b, i| {
            let w = slot(i, change);
            Ok(pdl_chain(k, &mut cache, &env.stream, pdl, 1, &mut b.a[w])?)
        })?;
        let stats = pdl_stats(&label(id), &cache, programmatic, k, report)?;
        rows.push((id, t, Some(stats)));
    }
    env.stream.synchronize()?;
    // DESIGN.md's kernel and memory, side by side with the rows above: `inc_wait` on `cuMemAlloc`
    // memory, raw plain and programmatic chains, then `graph!`'s.
    let mut m = MallocBufs::new(&env.ctx, &env.stream)?;
    let (m_ptr, _) = m.bufs().ptrs(&env.stream);
    let inc = pdl.function("inc_wait").expect("declared in kernels!").cu_function();
    for (id, programmatic) in [("qc", false), ("qp", true)] {
        let g = OwnedGraph::build_chain(
            inc,
            k,
            |_| KArgs::Inc { n: ELEMS, x: m_ptr[0] },
            programmatic,
        )?;
        let exec = OwnedExec::instantiate(&g)?;
        let cs = env.cu_stream();
        let t =
            timed_row(env, m.bufs(), shape, k, Change::None, steps, &label(id), &mut |_, _| {
                exec.launch(cs)
            })?;
        rows.push((id, t, None));
        env.stream.synchronize()?;
    }
    for (id, programmatic) in [("qd", true), ("qn", false)] {
        let mut cache = GraphCache::new();
        cache.set_programmatic(programmatic);
        let t =
            timed_row(env, m.bufs(), shape, k, Change::None, steps, &label(id), &mut |b, _| {
                Ok(inc_chain(k, &mut cache, &env.stream, pdl, &mut b.a[0])?)
            })?;
        let stats = pdl_stats(&label(id), &cache, programmatic, k, report)?;
        rows.push((id, t, Some(stats)));
    }
    env.stream.synchronize()?;
    drop(m);
    let median = |id: &str| rows.iter().find(|r| r.0 == id).map(|r| r.1.median);
    let (pc, pp, pnf, qc, qp) =
        (median("pc"), median("pp"), median("pnf"), median("qc"), median("qp"));
    for (id, t, stats) in rows {
        let floor = match id {
            "pd" => Some(("pp", pp)),
            "pn" => Some(("pc", pc)),
            "pf" => pnf.map(|v| ("pnf", Some(v))),
            "qp" | "qn" => Some(("qc", qc)),
            "qd" => Some(("qp", qp)),
            _ => None,
        };
        report.rows.push(Row {
            floor: floor.map(|f| f.0),
            ratio_raw: pc.map(|c| t.median / c),
            ratio_floor: floor.and_then(|f| f.1).map(|v| t.median / v),
            ..Row::measured("programmatic", (shape, k, steps), id, t, stats)
        });
    }
    print_block(&report.rows[first..]);
    Ok(())
}

/// A captured region's per-call cost: row dc (the chain's K launches in one keyed `capture`
/// statement, nothing changed: recorded once) against the same K kernels as `graph!` nodes (d)
/// and as cudarc launches (a), from the steady rows of the same K (measured side by side).
fn capture_costs(report: &mut Report) {
    let find = |k: usize, id: &str| {
        report.rows.iter().find(|r| r.shape == Shape::Chain && r.k == k && r.id == id).map(|r| r.t)
    };
    let ks: Vec<usize> = CAPTURE_K.into_iter().filter(|&k| find(k, "dc").is_some()).collect();
    if ks.is_empty() {
        return;
    }
    out!(
        "Capture: one keyed capture statement holding the chain's K launches, unchanged (dc, recorded once) against the same K kernels as graph! nodes (d) and as cudarc launches (a), µs per step, medians of the rows above"
    );
    out!(
        "{:>6}  {:>10} {:>10} {:>10}  {:>8} {:>8}  {:>12}",
        "K",
        "d",
        "dc",
        "a",
        "dc / d",
        "dc / a",
        "(dc - d) / K"
    );
    let mut out = Vec::new();
    for k in ks {
        let (d, dc, a) = (find(k, "d"), find(k, "dc"), find(k, "a"));
        let med = |x: Option<Summary>| x.map(|x| x.median);
        let ratio = |x: Option<Summary>, y: Option<Summary>| med(x).zip(med(y)).map(|(x, y)| x / y);
        let (to_d, to_a) = (ratio(dc, d), ratio(dc, a));
        let per_launch = med(dc).zip(med(d)).map(|(c, d)| (c - d) / k as f64);
        let opt = |x: Option<f64>, prec: usize| x.map_or("-".into(), |v| format!("{v:.prec$}"));
        out!(
            "{k:>6}  {:>10} {:>10} {:>10}  {:>8} {:>8}  {:>12}",
            opt(med(d), 2),
            opt(med(dc), 2),
            opt(med(a), 2),
            opt(to_d, 3),
            opt(to_a, 3),
            opt(per_launch, 3),
        );
        out.push(CaptureJson {
            k,
            direct_row: "d",
            captured_row: "dc",
            eager_row: "a",
            direct_us: d,
            captured_us: dc,
            eager_us: a,
            ratio_captured_to_direct: to_d,
            ratio_captured_to_eager: to_a,
            recording_us_per_launch: per_launch,
        });
    }
    report.capture = out;
    out!(
        "  dc / d: an unchanged captured region's per-call cost (recorded once; later calls take the kept recording and send nothing) against the same kernels as graph! nodes, both with event tracking off; (dc - d) / K: what the captured region adds per launch."
    );
    out!();
}

/// Reading a result back every step: `graph!` (rd, re, rs) against the raw graph with the same
/// copy (rc, rc1), from the steady rows of each shape and K (measured side by side).
fn read_costs(report: &Report) {
    let find = |shape: Shape, k: usize, id: &str| {
        report.rows.iter().find(|r| r.shape == shape && r.k == k && r.id == id).map(|r| r.t.median)
    };
    let mut lines = Vec::new();
    for shape in [Shape::Chain, Shape::Fan] {
        for k in STEADY_K {
            let [rc, rd, rc1, re, rs] =
                ["rc", "rd", "rc1", "re", "rs"].map(|id| find(shape, k, id));
            if rd.is_none() && rs.is_none() {
                continue;
            }
            let ratio = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x / y);
            let opt = |x: Option<f64>, prec: usize| x.map_or("-".into(), |v| format!("{v:.prec$}"));
            lines.push(format!(
                "{:<6}{k:>5}  {:>9} {:>9} {:>8}  {:>9} {:>9} {:>8}  {:>9} {:>8}",
                shape.name(),
                opt(rc, 2),
                opt(rd, 2),
                opt(ratio(rd, rc), 3),
                opt(rc1, 2),
                opt(re, 2),
                opt(ratio(re, rc1), 3),
                opt(rs, 2),
                opt(ratio(rs, rd), 3),
            ));
        }
    }
    if lines.is_empty() {
        return;
    }
    out!(
        "Reading a result back: each step launched, waited for, and 8 bytes of its result read from pinned memory (rows rc, rc1, rd, re, rs), µs per step, medians of the rows above"
    );
    out!(
        "{:<6}{:>5}  {:>9} {:>9} {:>8}  {:>9} {:>9} {:>8}  {:>9} {:>8}",
        "shape",
        "K",
        "rc",
        "rd",
        "rd / rc",
        "rc1",
        "re",
        "re / rc1",
        "rs",
        "rs / rd"
    );
    for line in lines {
        out!("{line}");
    }
    out!(
        "  rd / rc: an unchanged call read back against the raw graph (issue 31 goal <= 1.05); re / rc1: the copy's destination swapped per step against one raw set-params (goal <= 1.0); rs / rd: cudarc's PinnedHostSlice (stream.synchronize() + as_slice()) against cudagraph's PinnedBuffer (as_slice() alone)."
    );
    out!();
}

/// First call of `graph!` (fresh cache: build + instantiate + launch + synchronize) against the
/// raw driver's build + instantiate + launch + synchronize, with host memory of the cache; then
/// whole-graph update (`cuGraphExecUpdate_v2`) from a rebuilt raw graph.
fn build_costs(env: &Env, sizes: &[usize], report: &mut Report) -> Res<()> {
    out!(
        "Build: first call (build + instantiate + launch + cuStreamSynchronize), µs, median [p10, p90]"
    );
    out!(
        "{:>6}  {:>28}  {:>28}  {:>7}  {:>10} {:>10} {:>10}  {:>10} {:>10}",
        "nodes",
        "graph! first call",
        "raw first call",
        "ratio",
        "raw build",
        "raw inst",
        "raw launch",
        "B/node",
        "B/node"
    );
    out!(
        "{:>6}  {:>28}  {:>28}  {:>7}  {:>10} {:>10} {:>10}  {:>10} {:>10}",
        "",
        "",
        "",
        "",
        "add nodes",
        "instant.",
        "+sync",
        "retained",
        "allocated"
    );
    for &nodes in sizes {
        progress::status(&format!("bench: build costs at {nodes} nodes …"));
        progress::message(&format!("build costs at {nodes} nodes"));
        let reps: usize = match (env.quick, nodes) {
            (true, _) => 5,
            (false, n) if n >= 10_000 => 5,
            (false, n) if n >= 1000 => 10,
            _ => 20,
        };
        let mut b = Bufs::new(&env.stream, Shape::Chain, nodes)?;
        let (a_ptr, _) = b.ptrs(&env.stream);
        let spec = raw_spec(Shape::Chain, nodes, env, 1, a_ptr[0], &[]);
        let mut model = Model::new(Shape::Chain, nodes);
        let mut launches = 0u64;
        let mut graph_t = Vec::new();
        let (mut raw_t, mut raw_build, mut raw_inst, mut raw_launch) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut retained, mut allocated) = (Vec::new(), Vec::new());
        let has_graph = nodes <= MAX_GRAPH_NODES;
        assert!(has_graph, "every build size has a graph! compiled in");
        // One untimed round first (symbol loading, first-use costs).
        for rep in 0..=reps {
            let (mut dt, mut h0, mut h1) = (Duration::ZERO, (0, 0), (0, 0));
            if has_graph {
                let mut cache = GraphCache::new();
                h0 = heap();
                let t = Instant::now();
                chain_step(nodes, &mut cache, &env.stream, &env.kern, 1, &mut b.a[0])?;
                env.stream.synchronize()?;
                dt = t.elapsed();
                h1 = heap();
                let s = cache.stats();
                if s.builds != 1 || s.launches != 1 {
                    return Err(format!(
                        "graph! first call at {nodes} nodes: unexpected stats {s:?}"
                    )
                    .into());
                }
                drop(cache);
                model.step(launches, Change::None);
                launches += 1;
            }

            let t0 = Instant::now();
            let g = OwnedGraph::build(&spec)?;
            let t1 = Instant::now();
            let e = OwnedExec::instantiate(&g)?;
            let t2 = Instant::now();
            e.launch(env.cu_stream())?;
            env.stream.synchronize()?;
            let t3 = Instant::now();
            drop(e);
            drop(g);
            model.step(launches, Change::None);
            launches += 1;
            if rep == 0 {
                continue;
            }
            if has_graph {
                graph_t.push(us(dt));
                let live = |h: (u64, u64)| h.0 as i64 - h.1 as i64;
                retained.push((live(h1) - live(h0)) as f64 / nodes as f64);
                allocated.push((h1.0 - h0.0) as f64 / nodes as f64);
            }
            raw_t.push(us(t3 - t0));
            raw_build.push(us(t1 - t0));
            raw_inst.push(us(t2 - t1));
            raw_launch.push(us(t3 - t2));
        }
        model.check(&env.stream, &b, &format!("build costs at {nodes} nodes"))?;
        let rt = summarize(raw_t);
        let (rb, ri, rl) = (summarize(raw_build), summarize(raw_inst), summarize(raw_launch));
        let gt = has_graph.then(|| summarize(graph_t));
        let ret = has_graph.then(|| summarize(retained));
        let alloc = has_graph.then(|| summarize(allocated));
        let ratio = gt.map(|g| g.median / rt.median);
        let fmt = |s: Summary| format!("{:.1} [{:.1}, {:.1}]", s.median, s.p10, s.p90);
        let opt = |x: Option<f64>, prec: usize| x.map_or("-".into(), |v| format!("{v:.prec$}"));
        out!(
            "{nodes:>6}  {:>28}  {:>28}  {:>7}  {:>10.1} {:>10.1} {:>10.1}  {:>10} {:>10}",
            gt.map_or("not compiled in (see note)".into(), fmt),
            fmt(rt),
            opt(ratio, 3),
            rb.median,
            ri.median,
            rl.median,
            opt(ret.map(|s| s.median), 0),
            opt(alloc.map(|s| s.median), 0),
        );
        report.build.push(BuildJson {
            nodes,
            reps,
            graph_first_call_us: gt,
            raw_first_call_us: rt,
            ratio_graph_to_raw: ratio,
            raw_build_us: rb,
            raw_instantiate_us: ri,
            raw_instantiate_us_per_node: ri.median / nodes as f64,
            raw_first_launch_sync_us: rl,
            graph_host_bytes_retained_per_node: ret,
            graph_host_bytes_allocated_per_node: alloc,
        });
        env.stream.synchronize()?;
        progress::inc();
    }
    out!(
        "  ratio = graph! / raw first call. B/node: Rust heap bytes per node during graph!'s first call: retained = still held after it (the cache's node records), allocated = all allocations made during it (including temporaries); the driver's own host memory is not counted."
    );
    out!();

    out!(
        "Whole-graph update: cuGraphExecUpdate_v2 of an exec from a rebuilt raw graph (every node's pointer changed), µs"
    );
    out!(
        "{:>6}  {:>26} {:>9}  {:>26} {:>9}",
        "nodes",
        "rebuild (create + add)",
        "per node",
        "cuGraphExecUpdate_v2",
        "per node"
    );
    for &nodes in sizes {
        let reps = if nodes >= 10_000 { 5 } else { 20 }.min(env.reps);
        let mut b = Bufs::new(&env.stream, Shape::Chain, nodes)?;
        let (a_ptr, _) = b.ptrs(&env.stream);
        let specs = [
            raw_spec(Shape::Chain, nodes, env, 1, a_ptr[0], &[]),
            raw_spec(Shape::Chain, nodes, env, 1, a_ptr[1], &[]),
        ];
        let g0 = OwnedGraph::build(&specs[0])?;
        let exec = OwnedExec::instantiate(&g0)?;
        let mut model = Model::new(Shape::Chain, nodes);
        exec.launch(env.cu_stream())?;
        model.step(0, Change::Pointer);
        let (mut rebuild, mut update) = (Vec::new(), Vec::new());
        for rep in 1..=reps as u64 {
            let t0 = Instant::now();
            let g = OwnedGraph::build(&specs[(rep % 2) as usize])?;
            let t1 = Instant::now();
            exec.update(&g)?;
            let t2 = Instant::now();
            drop(g);
            exec.launch(env.cu_stream())?;
            model.step(rep, Change::Pointer);
            env.stream.synchronize()?;
            rebuild.push(us(t1 - t0));
            update.push(us(t2 - t1));
        }
        model.check(&env.stream, &b, &format!("exec update at {nodes} nodes"))?;
        b.zero(&env.stream)?;
        drop(exec);
        drop(g0);
        let (rb, up) = (summarize(rebuild), summarize(update));
        let fmt = |s: Summary| format!("{:.1} [{:.1}, {:.1}]", s.median, s.p10, s.p90);
        out!(
            "{nodes:>6}  {:>26} {:>9.3}  {:>26} {:>9.3}",
            fmt(rb),
            rb.median / nodes as f64,
            fmt(up),
            up.median / nodes as f64
        );
        report.update.push(UpdateJson {
            nodes,
            reps,
            rebuild_us: rb,
            rebuild_us_per_node: rb.median / nodes as f64,
            exec_update_us: up,
            exec_update_us_per_node: up.median / nodes as f64,
        });
        env.stream.synchronize()?;
    }
    out!();
    Ok(())
}

/// First-launch latency with and without `cuGraphUpload` (raw) and `GraphCache::upload`
/// (graph!), each timed as launch + `cuStreamSynchronize` on an idle stream.
fn upload_costs(env: &Env, sizes: &[usize], report: &mut Report) -> Res<()> {
    out!(
        "Upload: latency of one launch + cuStreamSynchronize on an idle stream, µs, median [p10, p90]"
    );
    let reps = 20.min(env.reps);
    let fmt = |s: Summary| format!("{:.1} [{:.1}, {:.1}]", s.median, s.p10, s.p90);
    for &nodes in sizes {
        progress::status(&format!("bench: upload at {nodes} nodes …"));
        progress::message(&format!("upload at {nodes} nodes"));
        let mut b = Bufs::new(&env.stream, Shape::Chain, nodes)?;
        let (a_ptr, _) = b.ptrs(&env.stream);
        let spec = raw_spec(Shape::Chain, nodes, env, 1, a_ptr[0], &[]);
        let cs = env.cu_stream();
        let mut model = Model::new(Shape::Chain, nodes);
        let mut launches = 0u64;
        let mut launched = |n: u64| {
            for _ in 0..n {
                model.step(launches, Change::None);
                launches += 1;
            }
        };
        let mut v: [Vec<f64>; 8] = Default::default();
        let timed = |f: &mut dyn FnMut() -> Res<()>| -> Res<f64> {
            env.stream.synchronize()?;
            let t = Instant::now();
            f()?;
            env.stream.synchronize()?;
            Ok(us(t.elapsed()))
        };
        for _ in 0..reps {
            // raw, no upload: first and second launch after instantiation.
            let g = OwnedGraph::build(&spec)?;
            let e = OwnedExec::instantiate(&g)?;
            v[0].push(timed(&mut || e.launch(cs))?);
            v[1].push(timed(&mut || e.launch(cs))?);
            drop(e);
            // raw, upload first.
            let e = OwnedExec::instantiate(&g)?;
            v[2].push(timed(&mut || e.upload(cs))?);
            v[3].push(timed(&mut || e.launch(cs))?);
            drop(e);
            drop(g);
            launched(3);
            // graph!: first call, then the second call without / with cache.upload before it.
            let mut cache = GraphCache::new();
            let st = &*env.stream;
            v[4].push(timed(&mut || {
                Ok(chain_step(nodes, &mut cache, st, &env.kern, 1, &mut b.a[0])?)
            })?);
            v[5].push(timed(&mut || {
                Ok(chain_step(nodes, &mut cache, st, &env.kern, 1, &mut b.a[0])?)
            })?);
            drop(cache);
            let mut cache = GraphCache::new();
            chain_step(nodes, &mut cache, st, &env.kern, 1, &mut b.a[0])?;
            v[6].push(timed(&mut || Ok(cache.upload(st)?))?);
            v[7].push(timed(&mut || {
                Ok(chain_step(nodes, &mut cache, st, &env.kern, 1, &mut b.a[0])?)
            })?);
            drop(cache);
            launched(4);
        }
        model.check(&env.stream, &b, &format!("upload at {nodes} nodes"))?;
        let s: Vec<Summary> = v.into_iter().map(summarize).collect();
        let names = [
            "raw: first launch after instantiate, no upload",
            "raw: second launch",
            "raw: cuGraphUpload alone",
            "raw: first launch after cuGraphUpload",
            "graph!: first call (build + instantiate + launch)",
            "graph!: second call, no upload",
            "graph!: cache.upload() alone (after the first call)",
            "graph!: second call after cache.upload()",
        ];
        let keys = [
            "raw_first_launch_no_upload_us",
            "raw_second_launch_us",
            "raw_upload_us",
            "raw_first_launch_after_upload_us",
            "graph_first_call_us",
            "graph_second_call_no_upload_us",
            "graph_cache_upload_us",
            "graph_second_call_after_upload_us",
        ];
        out!("  {nodes} nodes:");
        for (name, x) in names.iter().zip(&s) {
            out!("    {name:<52} {:>28}", fmt(*x));
        }
        let values = keys.iter().copied().zip(s.iter().copied()).collect();
        report.upload.push(UploadJson { nodes, reps, values });
        env.stream.synchronize()?;
        progress::inc();
    }
    out!(
        "  Raw: cuGraphUpload moves the exec's first-launch setup off the launch; compare the first launch with and without it."
    );
    out!(
        "  graph!: the first call always launches right after instantiating, so no exec is ever un-launched when cache.upload() can be called: it re-uploads an exec that is already resident, and the second call should cost the same with or without it."
    );
    out!();
    Ok(())
}

/// The issue's goals, from the measured rows.
fn goals(report: &mut Report) {
    out!("Goals (from the issue; measured, not tuned for):");
    let mut goals = Vec::new();
    let find = |shape: Shape, k: usize, id: &str| {
        report.rows.iter().find(|r| r.shape == shape && r.k == k && r.id == id).map(|r| r.t.median)
    };
    let mut check = |name: String, value: Option<f64>, limit: f64, at_most: bool| {
        let Some(v) = value else { return };
        let met = if at_most { v <= limit } else { v >= limit };
        let op = if at_most { "<=" } else { ">=" };
        out!("  {:<6} {name}: {v:.3} (goal {op} {limit})", if met { "met" } else { "MISSED" });
        goals.push(GoalJson { goal: name, value: v, limit, op, met });
    };
    for shape in [Shape::Chain, Shape::Fan] {
        for k in STEADY_K {
            let (c, c1, a) = (find(shape, k, "c"), find(shape, k, "c1"), find(shape, k, "a"));
            let (d, e) = (find(shape, k, "d"), find(shape, k, "e"));
            let limit = if k == 1 { 1.10 } else { 1.02 };
            let ratio = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x / y);
            check(
                format!("{} K={k} graph! unchanged / raw launch", shape.name()),
                ratio(d, c),
                limit,
                true,
            );
            check(
                format!("{} K={k} graph! one scalar / raw set-params + launch", shape.name()),
                ratio(e, c1),
                1.05,
                true,
            );
            if k == 100 {
                check(
                    format!("{} K={k} cudarc stream launches / graph! unchanged", shape.name()),
                    ratio(a, d),
                    4.0,
                    false,
                );
            }
            let [rc, rc1, rd, re] = ["rc", "rc1", "rd", "re"].map(|id| find(shape, k, id));
            check(
                format!(
                    "{} K={k} graph! unchanged + read / raw launch + sync + read",
                    shape.name()
                ),
                ratio(rd, rc),
                1.05,
                true,
            );
            check(
                format!(
                    "{} K={k} graph! one pointer + read / raw set-params + launch + sync + read",
                    shape.name()
                ),
                ratio(re, rc1),
                1.0,
                true,
            );
        }
    }
    let builds: Vec<(usize, f64)> =
        report.build.iter().filter_map(|b| b.ratio_graph_to_raw.map(|r| (b.nodes, r))).collect();
    for (kernel, [c, p, d]) in [
        ("add_wait, pool memory", ["pc", "pp", "pd"]),
        ("DESIGN.md's inc_wait, cuMemAlloc memory", ["qc", "qp", "qd"]),
    ] {
        for k in PDL_K {
            let (c, p, d) =
                (find(Shape::Chain, k, c), find(Shape::Chain, k, p), find(Shape::Chain, k, d));
            let ratio = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x / y);
            check(
                format!("programmatic chain K={k} ({kernel}) graph! / raw plain edges"),
                ratio(d, c),
                0.60,
                true,
            );
            check(
                format!("programmatic chain K={k} ({kernel}) graph! / raw programmatic edges"),
                ratio(d, p),
                1.05,
                true,
            );
        }
    }
    for (nodes, ratio) in builds {
        check(format!("{nodes} nodes graph! first call / raw first call"), Some(ratio), 1.2, true);
    }
    report.goals = goals;
    out!();
}

fn run(args: &Cli, report: &mut Report) -> Res<()> {
    let ctx = CudaContext::new(0)?;
    // Event tracking off before anything is allocated: all work is on one stream, stream capture
    // (row b) fails with it on, and the launch mechanisms are compared without cudarc's per-buffer
    // event bookkeeping. Rows a* and d* measure that bookkeeping separately.
    // SAFETY: every buffer is used on the one stream made below only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    let other = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let kern = Arc::new(unsafe { Bench::load(&ctx, compile_ptx(SOURCE)?) }?);
    let mut version = 0i32;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    let device = ctx.name().unwrap_or_default();
    let reps = args.reps.map_or(if args.quick { 20 } else { 200 }, |n| n as usize);
    let steps = args.steps.map(|n| n as usize);
    let device_launch = args.device_launch;
    let readback =
        ctx.load_module(compile_ptx(READBACK_SOURCE)?)?.load_function("cudagraph_readback")?;
    let env =
        Env { ctx, stream, other, kern, reps, quick: args.quick, steps, device_launch, readback };
    let ks: Vec<usize> = STEADY_K
        .iter()
        .copied()
        .filter(|&k| (!args.quick || k <= 100) && args.max_k.is_none_or(|m| k <= m))
        .collect();
    let build_sizes: Vec<usize> =
        BUILD_SIZES.iter().copied().filter(|&n| !args.quick || n <= 100).collect();
    let upload_sizes: Vec<usize> =
        [10, 100, 1000].into_iter().filter(|&n| !args.quick || n <= 100).collect();
    let unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    report.meta = Some(Meta {
        device: device.clone(),
        driver_version: version,
        unix_time: unix,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        reps,
        quick: args.quick,
        kernel: "1 block x 32 threads on 32 u32 (add: x[i] += v; acc: dst[i] += src[i])",
        unit: "µs per step = wall time of N steps enqueued back-to-back then one cuStreamSynchronize, divided by N (rows rc, rc1, rd, re, rs: N steps, each waited for and its result read); median and p10/p90 over reps",
        event_tracking: "off for every row but a* and d*",
    });
    out!(
        "cudagraph bench — device {device}, CUDA driver {}.{}",
        version / 1000,
        version % 1000 / 10
    );
    out!(
        "{reps} repetitions per row; each kernel is 1 block x 32 threads over 32 u32 (add: x[i] += v, acc: dst[i] += src[i])."
    );
    out!(
        "µs per step = wall time of N steps enqueued back-to-back, then one cuStreamSynchronize, divided by N (N = steps/rep: {})",
        ks.iter()
            .map(|&k| format!("K={k}: {}", steps.unwrap_or_else(|| steps_per_rep(k))))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out!(
        "  Rows rc, rc1, rd, re, rs: N steps, each waited for and its result read (N as above but at most {READ_STEPS}, unless --steps)."
    );
    out!(
        "Shapes: chain = K dependent kernels on one buffer; fan = 1 producer add(p) -> K-2 independent acc(p -> own buffer) -> 1 consumer add(p)."
    );
    out!(
        "  (rows a and b issue the fan's launches on one stream, so they run one after another; b's captured graph is a chain.)"
    );
    out!("Rows:");
    for (id, what) in ROWS {
        out!("  {id:<3} {what}");
    }
    out!("  Event tracking is off for every row but a* and d* (see the notes at the end).");
    out!("x raw = row / c; x floor = row / its matching raw row (named); /node = median / K.");
    out!();
    out!(
        "{:<6}{:>5}  {:<3}{:>11}{:>10}{:>10}{:>9}{:>14} {:>7}",
        "shape",
        "K",
        "row",
        "median µs",
        "p10",
        "p90",
        "x raw",
        "x floor",
        "/node"
    );
    // The bar counts measurements: each steady (shape, K), each build size, each upload size.
    let steady_units = ks.iter().map(|&k| if k >= 3 { 2 } else { 1 }).sum::<usize>();
    let units = steady_units + build_sizes.len() + upload_sizes.len();
    if args.device_launch {
        report.notes.push(
            "--device-launch: the paired table's graph! rows instantiate for device launch".into(),
        );
    }
    progress::start("bench", if args.programmatic_only { 0 } else { units as u64 });
    for &k in ks.iter().filter(|_| !args.programmatic_only) {
        steady(&env, Shape::Chain, k, report)?;
        progress::inc();
        if k >= 3 {
            steady(&env, Shape::Fan, k, report)?;
            progress::inc();
        }
    }
    capture_costs(report);
    read_costs(report);
    paired_costs(report);
    // Programmatic rows: compute capability 9.0 (griddepcontrol) and CUDA 12.3.
    let major =
        env.ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor =
        env.ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    if major >= 9 && version >= 12030 {
        let options = vec![format!("--gpu-architecture=compute_{major}{minor}")];
        let ptx = compile_ptx_with_opts(SOURCE, CompileOptions { options, ..Default::default() })?;
        // SAFETY: `add_wait`, `add_wait_trigger` and `inc_wait` have these signatures, stay
        // within their buffer (each checks its index against `n`, the buffer's length) and wait (`griddepcontrol.wait`, compiled in for this architecture) first in every
        // thread.
        let pdl = unsafe { BenchPdl::load(&env.ctx, ptx) }?;
        for &k in ks.iter().filter(|k| PDL_K.contains(k)) {
            programmatic_rows(&env, &pdl, k, report)?;
        }
    } else {
        report.notes.push(format!(
            "no programmatic rows: compute capability {major}.{minor}, driver {version} (9.0 and 12030 needed)"
        ));
    }
    if !ks.contains(&1000) {
        report.notes.push("--quick: K up to 100, build sizes up to 100".into());
    }
    if args.programmatic_only {
        report.notes.push("--programmatic-only: the programmatic rows alone".into());
    } else {
        build_costs(&env, &build_sizes, report)?;
        upload_costs(&env, &upload_sizes, report)?;
    }
    goals(report);
    let notes = [
        "Event tracking: cudarc records and waits on per-buffer events around every use once a context has a second stream; it is off for all rows except a* and d* (the same as a and d with tracking on: a pays it per kernel launch, graph! per distinct buffer per call).",
        "Fan in rows a/b: one stream serializes the K launches; capture of one stream records them as a chain, so b is not a fan-shaped graph.",
        "Pointer rows (f, cA): step i uses buffer a[i % 2], the same pointer change std::mem::swap(&mut x, &mut y) after each step gives.",
        "Fan in graph!: the K-2 middle buffers are elements bufs[i] of one slice, borrowed together on every call (constant indices: distinctness checked at compile time, bounds at run time).",
        "Capture (row dc, chain K = 1, 10, 100): every call runs the closure under stream capture (cuStreamBeginCapture, K cudarc launches, cuStreamEndCapture: a new CUgraph), sends the recording to the child-graph node with cuGraphExecNodeSetParams and launches; its first scalar changes every step (as in e) so the result checks see each recording reach the GPU, and since a recording is made and sent on every call whether or not anything changed, d (nothing changed) is its direct counterpart. Recording is host work: while the host records step i+1 the GPU still runs step i, so where d is GPU-bound (the chain's dependent kernels) (dc - d) / K is the recording's cost per launch beyond the GPU time it overlaps, not its whole host cost.",
    ];
    report.notes.extend(notes.iter().map(|n| n.to_string()));
    for n in &report.notes {
        out!("note: {n}");
    }
    env.ctx.check_err()?;
    Ok(())
}

/// The benchmark of `graph!` against cudarc stream launches, stream capture and raw driver
/// graphs: µs per step of K tiny kernels, first-call, update and upload costs. Every row checks
/// its device results against a host model.
///
/// Writes the table to standard output, the same data as JSON (`--json`) and a log-log plot of
/// µs per step against K for every row (`--svg`). Without a CUDA GPU: one line, status 2. A
/// progress bar shows on standard error when it is a terminal.
#[derive(clap::Parser)]
#[command(name = "bench")]
struct Cli {
    /// Repetitions per measurement, at least 5 [default: 200, 20 with --quick].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(5..))]
    reps: Option<u64>,
    /// Steps enqueued per repetition of every steady row [default: 2000/K within 10..=1000; rows
    /// rc, rc1, rd, re, rs: at most 50].
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    steps: Option<u64>,
    /// Steady rows up to this K only (K = 1, 10, 100, 1000).
    #[arg(long, value_name = "K")]
    max_k: Option<usize>,
    /// A fast sanity run: K up to 100, build and upload sizes up to 100 nodes.
    #[arg(long)]
    quick: bool,
    /// Only the programmatic rows (pc, pp, pt, pd, pn, pf, pnf: chains of `#[programmatic]`
    /// kernels against raw graphs with plain and programmatic edges; compute capability 9.0).
    #[arg(long)]
    programmatic_only: bool,
    /// The paired table's `graph!` caches (rows d, f, rd, re, re1) instantiate their execs for
    /// device launch (`InstantiateFlags::device_launch`; still launched from the host). The
    /// raw rows keep the default flags.
    #[arg(long)]
    device_launch: bool,
    /// Where the JSON report goes.
    #[arg(long, value_name = "PATH", default_value = "bench.json")]
    json: PathBuf,
    /// Where the SVG plot goes (µs per step against K, log-log, one line per row, one panel per
    /// shape).
    #[arg(long, value_name = "PATH", default_value = "bench.svg")]
    svg: PathBuf,
}

fn main() -> ExitCode {
    let args = <Cli as clap::Parser>::parse();
    if !cudagraph::driver_available() {
        eprintln!(
            "bench: no CUDA driver found (libcuda could not be loaded); this benchmark needs an NVIDIA GPU"
        );
        return ExitCode::from(2);
    }
    // A thread with a large stack: the 10 000-node graph! keeps every node's parameters on it.
    let worker =
        std::thread::Builder::new().name("bench".into()).stack_size(256 << 20).spawn(move || {
            let mut report = Report::default();
            let result = run(&args, &mut report);
            if let Err(e) = &result {
                report.error = Some(e.to_string());
            }
            progress::finish();
            let written = std::fs::write(&args.json, report.json());
            let plotted = plot::write(&args.svg, &report.rows);
            (
                result.map_err(|e| e.to_string()),
                written.map_err(|e| e.to_string()),
                args.json,
                plotted.map_err(|e| e.to_string()),
                args.svg,
            )
        });
    let joined = match worker {
        Ok(h) => h.join(),
        Err(e) => {
            eprintln!("bench: cannot start the benchmark thread: {e}");
            return ExitCode::FAILURE;
        }
    };
    match joined {
        Ok((result, written, path, plotted, svg)) => {
            match written {
                Ok(()) => out!("JSON written to {}", path.display()),
                Err(e) => eprintln!("bench: cannot write {}: {e}", path.display()),
            }
            match plotted {
                Ok(()) => out!("SVG plot written to {}", svg.display()),
                Err(e) => eprintln!("bench: cannot write {}: {e}", svg.display()),
            }
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("bench: FAILED: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(_) => {
            eprintln!("bench: FAILED: the benchmark thread panicked");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ratio measured in turn is the median of the per-round ratios, not the ratio of the
    /// medians: a round where the host ran slow for both rows does not move it.
    #[test]
    fn ratio_median_takes_the_per_round_ratios() {
        // Rounds 2 and 3 twice as slow for both rows: per-round ratios 1.1, 1.1, 1.1, 2.0, 0.5.
        let d = [1.1, 2.2, 2.2, 2.0, 0.5];
        let c = [1.0, 2.0, 2.0, 1.0, 1.0];
        assert!((ratio_median(&d, &c) - 1.1).abs() < 1e-12);
        // The ratio of the medians (2.0 / 1.0) would be 2.0.
        assert!((summarize(d.to_vec()).median / summarize(c.to_vec()).median - 2.0).abs() < 1e-12);
    }

    /// A report of made-up rows (no GPU): chain K = 1, 10, 100 and fan K = 10, 100, rows c and d.
    fn report() -> Report {
        let mut r = Report::default();
        for (shape, ks) in [(Shape::Chain, &[1, 10, 100][..]), (Shape::Fan, &[10, 100][..])] {
            for &k in ks {
                for (id, per_node) in [("c", 0.8), ("d", 0.82)] {
                    let median = 1.0 + per_node * k as f64;
                    let t = Summary { median, p10: median * 0.9, p90: median * 1.1, samples: 20 };
                    let stats = (id == "d").then(Stats::default);
                    r.rows.push(Row {
                        floor: (id == "d").then_some("c"),
                        ratio_raw: Some(1.0),
                        ..Row::measured("steady", (shape, k, steps_per_rep(k)), id, t, stats)
                    });
                }
            }
        }
        r.upload.push(UploadJson {
            nodes: 10,
            reps: 20,
            values: vec![("raw_upload_us", summarize(vec![3.0, 1.0, 2.0]))],
        });
        r.notes.push("a note".into());
        r
    }

    #[test]
    fn json_keeps_its_shape() {
        let r = report();
        let v: serde_json::Value = serde_json::from_str(&r.json()).expect("valid JSON");
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        // Without a run's meta (the run failed before it), the top level starts at the legend.
        let want = [
            "build",
            "capture",
            "error",
            "exec_update",
            "goals",
            "legend",
            "notes",
            "steady",
            "upload",
        ];
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, want);
        let row = &v["steady"][3];
        assert_eq!(row["shape"], "chain");
        assert_eq!(row["k"], 10);
        assert_eq!(row["row"], "d");
        assert_eq!(row["floor_row"], "c");
        assert_eq!(row["ratio_to_floor"], serde_json::Value::Null);
        assert_eq!(row["us_per_step"]["samples"], 20);
        assert_eq!(row["graph_stats"]["launches"], 0);
        assert_eq!(v["upload"][0]["raw_upload_us"]["median"], 2.0);
        assert_eq!(v["legend"].as_array().unwrap().len(), ROWS.len());
        assert_eq!(v["error"], serde_json::Value::Null);
        // Upload keys stay in the order measured.
        let text = r.json();
        assert!(text.find("\"nodes\": 10").unwrap() < text.find("\"raw_upload_us\"").unwrap());
    }

    /// `BENCHMARKS.md` and `bench` name the same rows: its table of rows lists every label of
    /// `ROWS`, in order, and every table cell of it that is one backticked label (alone, or on
    /// either side of a ÷ or −) is a row `bench` prints.
    #[test]
    fn benchmarks_md_names_the_rows_bench_prints() {
        const DOC: &str = include_str!("../../BENCHMARKS.md");
        let labels: Vec<&str> = ROWS.iter().map(|r| r.0).collect();
        let (_, section) = DOC
            .split_once("\n## The rows of `bench`\n")
            .expect("BENCHMARKS.md has a section \"The rows of `bench`\"");
        let listed: Vec<&str> = section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|p| p.0))
            .collect();
        assert_eq!(listed, labels, "BENCHMARKS.md's table of rows against bench's ROWS");
        let mut named = 0;
        for line in DOC.lines().filter(|l| l.starts_with('|')) {
            for part in line.split(['|', '÷', '−']).map(str::trim) {
                let Some(token) = part.strip_prefix('`').and_then(|p| p.strip_suffix('`')) else {
                    continue;
                };
                if token.len() <= 3 && token.chars().all(|c| c.is_ascii_alphanumeric() || c == '*')
                {
                    assert!(
                        labels.contains(&token),
                        "BENCHMARKS.md names row `{token}`: not in ROWS"
                    );
                    named += 1;
                }
            }
        }
        assert!(named > labels.len(), "the reference's tables name rows as `label`");
    }

    #[test]
    fn svg_plot_has_both_panels_and_every_row() {
        let path = std::env::temp_dir().join(format!("cudagraph-bench-{}.svg", std::process::id()));
        plot::write(&path, &report().rows).expect("plot written");
        let svg = std::fs::read_to_string(&path).expect("plot readable");
        std::fs::remove_file(&path).ok();
        assert!(svg.starts_with("<svg"));
        for text in ["chain: K dependent", "fan: producer", "K (kernels per step)", ">\nd\n<"] {
            assert!(svg.contains(text), "{text:?} missing from the plot");
        }
        assert!(plot::write(&path, &[]).is_err(), "no rows: nothing to plot");
    }
}
