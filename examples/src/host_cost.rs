//! Where the host time of an unchanged `graph!` call goes (issue 18): the call of a 1000-node
//! fan and a 1000-node chain (the shapes of `bench`), with the GPU idle, against its parts done
//! one by one through the same hidden functions the expansion calls.
//!
//! ```text
//! host_cost [--reps N]
//! ```
//! Rows, µs per call, median of N (default 200) with the GPU idle before each:
//! - `graph! call`: the whole unchanged call (acquire, nodes, validation, ledger, ladder,
//!   `cuGraphLaunch`);
//! - `acquire`: one `acquire_mut` per place (the borrow, cudarc's pointer and guard);
//! - `nodes`: each statement's kernel node made from the handles, and its node-list entry;
//! - `guards dropped`: dropping the call's guards (after the launch, in the call);
//! - `rest`: the call minus the parts above: the cache's validation, aliasing and ledger
//!   checks, the ladder's comparisons and bookkeeping, and `cuGraphLaunch` (`bench`'s row c
//!   measures the raw launch alone: about 20 µs for this fan, 2.6 µs for this chain).
//!
//! Built with the feature `phase-times` (`cargo build --release -p cudagraph-examples --bin
//! host_cost --features phase-times`), it also prints the cache's part of the fan's call by
//! phase (validation, aliasing check, ledger, ladder, `cuGraphLaunch`).
//!
//! Exits with status 1 if an unchanged call built or updated anything, or a part lost a node.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use cudagraph::__private as p;
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{BufferArray, GraphCache, PinnedBuffer, Rows, graph};

#[path = "cli.rs"]
mod cli;

#[path = "bench_kernels.rs"]
mod bench_kernels;
use bench_kernels::{Bench, CFG, ELEMS, SOURCE};
/// Statements of each body.
const NODES: usize = 1000;

#[derive(clap::Parser)]
#[command(about = "Where the host time of an unchanged graph! call goes (1000-node fan and chain)")]
struct Args {
    /// Calls timed per row.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// Print the graph plans as Graphviz DOT and exit (no GPU needed).
    #[arg(long)]
    plan: bool,
    /// Time only this shape's unchanged call (`fan` or `chain`, 1000 nodes; `chain1`, one
    /// kernel, 100 calls per timing) and exit: for `perf record`, whose report then holds that
    /// call alone.
    /// `fan-read`: the fan and a copy of 8 bytes into a `PinnedBuffer` after it, unchanged
    /// (`bench` row rd, without the wait and read); `chain1-read`: one kernel and the same
    /// copy, then the read (`as_slice`), 100 calls per timing. The `PinnedBuffer` gives the
    /// copy its allocation id without a driver query, so the copy packs on the stub driver as
    /// on the H200.
    /// With `HOST_COST_STATS` set, the cache's `Stats` are printed after the timing.
    /// `fan-scalar`: the fan with its first kernel's scalar changed every call (never
    /// repeating: one node updated in place, bench row e); `chain1-scalar` the same for one
    /// kernel (100 calls per timing).
    /// `chain1-swap` and `fan-swap`: the same calls with their first buffer swapped between two
    /// every call (`bench` row f: each call equals the one before last, whose exec the cache
    /// kept: a memo hit).
    /// `fan-array`, `fan-read-array`, `fan-swap-array`: `fan`, `fan-read` and `fan-swap` with
    /// the middle buffers in a `BufferArray` instead of a `Vec`; `fan-read-swap-array`:
    /// `fan-read-array` with the copy's destination alternating between two `PinnedBuffer`s
    /// (`bench` row re; with `--execs 1`, row re1: the copy node updated in place).
    /// `fan10-eager`: the 10-kernel fan in `Mode::Eager`, and `fan10-plain` the same 10
    /// launches made with cudarc (100 calls per timing): eager mode's own cost per statement;
    /// `cap4-eager` and `cap4-plain` the same for 4 capture statements, each launching a
    /// kernel with cudarc, beside 4 kernel statements (as `mlp`'s step). `builder-fan`: the
    /// fan made with a `GraphBuilder` (recorded and checked every call), unchanged;
    /// `builder-fan-swap` with its first buffer swapped between two every call (memo hits; with
    /// `--execs 1`, its 1000 nodes set in place); `builder-fan-scalar` with its first kernel's
    /// scalar new every call (one node updated).
    #[arg(
        long,
        value_parser = ["fan", "fan-scalar", "fan-read", "fan-array", "fan-read-array", "fan-swap-array", "fan-read-swap-array", "chain", "chain1", "chain1-scalar", "chain1-read", "fan-swap", "chain1-swap", "fan10-eager", "fan10-plain", "cap4-eager", "cap4-plain", "builder-fan", "builder-fan-swap", "builder-fan-scalar"]
    )]
    only: Option<String>,
    /// Execs per variant of the fan's and chain's caches (`set_execs_per_variant`; default
    /// the cache's): 1 makes the swap modes update their nodes in place every call.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    execs: Option<u32>,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `fan` and `fan_read` for an array type of the middle buffers: a slice, or a `BufferArray`
/// (`*-array` modes).
macro_rules! fans {
    ($fan:ident, $fan_read:ident, $bufs:ty) => {
        #[inline(never)] // timed as its own call (see bench.rs)
        fn $fan(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            mut p: &mut CudaSlice<u32>,
            bufs: &mut $bufs,
            s: u32,
        ) -> cudagraph::Result<()> {
            graph!(cache, stream, {
                k.add(ELEMS, s, &mut p).launch(CFG);
                for i in 0..998 {
                    k.acc(ELEMS, &p, &mut bufs[i]).launch(CFG);
                }
                k.add(ELEMS, 1, &mut p).launch(CFG);
            })
        }

        /// The fan with bench's read rows' copy after it: the first 8 bytes of `p` into
        /// pinned host memory (`copy_2d`, as `bench` row rd).
        #[inline(never)] // timed as its own call (see bench.rs)
        fn $fan_read(
            cache: &mut GraphCache,
            stream: &CudaStream,
            k: &Bench,
            mut p: &mut CudaSlice<u32>,
            bufs: &mut $bufs,
            mut host: &mut PinnedBuffer<u32>,
        ) -> cudagraph::Result<()> {
            const ROWS: Rows = Rows::dense(2, 1);
            graph!(cache, stream, {
                k.add(ELEMS, 1, &mut p).launch(CFG);
                for i in 0..998 {
                    k.acc(ELEMS, &p, &mut bufs[i]).launch(CFG);
                }
                k.add(ELEMS, 1, &mut p).launch(CFG);
                copy_2d(&p, ROWS, &mut host, ROWS);
            })
        }
    };
}
fans!(fan, fan_read, [CudaSlice<u32>]);
fans!(fan_array, fan_read_array, BufferArray<u32>);

#[inline(never)] // timed as its own call (see bench.rs)
fn chain(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    mut x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, stream, {
        for _ in 0..1000 {
            k.add(ELEMS, 1, &mut x).launch(CFG);
        }
    })
}

/// A one-kernel chain: the fixed part of a call's host cost.
#[inline(never)] // timed as its own call (see bench.rs)
fn chain1(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    mut x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, stream, {
        k.add(ELEMS, 1, &mut x).launch(CFG);
    })
}

/// `chain1` with the kernel's scalar `s` (`chain1-scalar`: a changed call, `bench` row e). Not
/// `chain1` itself with `s = 1`: a scalar that is a variable adds 11 instructions to the
/// unchanged call `chain1` measures (callgrind), whose figures BENCHMARKS.md compares.
#[inline(never)]
fn chain1_scalar(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    s: u32,
    mut x: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, stream, {
        k.add(ELEMS, s, &mut x).launch(CFG);
    })
}

/// `chain1` and a copy of 8 bytes into `host` (`bench` row rd at chain K = 1).
#[inline(never)]
fn chain1_read(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    mut x: &mut CudaSlice<u32>,
    mut host: &mut PinnedBuffer<u32>,
) -> cudagraph::Result<()> {
    const ROWS: Rows = Rows::dense(2, 1);
    graph!(cache, stream, {
        k.add(ELEMS, 1, &mut x).launch(CFG);
        copy_2d(&x, ROWS, &mut host, ROWS);
    })
}

/// The fan made at run time with a [`GraphBuilder`](cudagraph::GraphBuilder) (`builder-fan`,
/// `builder-fan-swap` with `p` swapped between two buffers every call, `builder-fan-scalar`
/// with the first kernel's scalar `s` new every call): the same 1000 kernels as `fan`,
/// recorded and checked on every call.
#[inline(never)]
fn builder_fan(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    p: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
    s: u32,
) -> cudagraph::Result<()> {
    let mut g = cache.builder(stream);
    let pw = g.write(p);
    g.kernel(k.add(ELEMS, s, pw).launch(CFG));
    for b in bufs.iter_mut() {
        let w = g.write(b);
        g.kernel(k.acc(ELEMS, pw.read(), w).launch(CFG));
    }
    g.kernel(k.add(ELEMS, 1, pw).launch(CFG));
    g.launch()
}

/// The kernel configuration of `CFG`, for cudarc's launches.
fn plain_cfg() -> cudagraph::cudarc::driver::LaunchConfig {
    cudagraph::cudarc::driver::LaunchConfig {
        grid_dim: (CFG.0, 1, 1),
        block_dim: (CFG.1, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Four capture statements, each launching `acc` with cudarc on the joined stream, each
/// followed by a kernel statement (as `mlp`'s layers: a captured library call and a kernel).
#[inline(never)]
fn cap4(
    cache: &mut GraphCache,
    stream: &std::sync::Arc<CudaStream>,
    k: &Bench,
    p: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    use cudagraph::cudarc::driver::PushKernelArg;
    let acc = k.function("acc").expect("acc");
    let src = &*p;
    graph!(cache, stream, {
        for l in 0..4 {
            capture(
                &src,
                &mut bufs[l],
                |s, (x, mut y)| -> Result<(), cudarc::driver::DriverError> {
                    // SAFETY: `acc` reads and writes `ELEMS` elements of the listed views, on the
                    // joined stream.
                    let st = unsafe { s.stream() };
                    let (xv, yv) = unsafe { (x.as_cuda_view(), y.as_cuda_view_mut()) };
                    unsafe {
                        st.launch_builder(acc).arg(&ELEMS).arg(xv).arg(yv).launch(plain_cfg())
                    }
                    .map(drop)
                },
            );
            k.add(ELEMS, 1, &mut bufs[l]).launch(CFG);
        }
    })
}

/// [`cap4`]'s launches made with cudarc, one by one.
#[inline(never)]
fn cap4_plain(
    stream: &CudaStream,
    k: &Bench,
    p: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> Result<(), cudarc::driver::DriverError> {
    use cudagraph::cudarc::driver::PushKernelArg;
    let (add, acc) = (k.function("add").expect("add"), k.function("acc").expect("acc"));
    let one = 1u32;
    // SAFETY: the arguments match the kernels' signatures; every buffer holds `ELEMS` elements.
    unsafe {
        for b in &mut bufs[..4] {
            stream.launch_builder(acc).arg(&ELEMS).arg(&*p).arg(&mut *b).launch(plain_cfg())?;
            stream.launch_builder(add).arg(&ELEMS).arg(&one).arg(b).launch(plain_cfg())?;
        }
    }
    Ok(())
}

/// [`fan10`]'s launches made with cudarc, one by one (no checks).
#[inline(never)]
fn fan10_plain(
    stream: &CudaStream,
    k: &Bench,
    p: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> Result<(), cudarc::driver::DriverError> {
    use cudagraph::cudarc::driver::PushKernelArg;
    let (add, acc) = (k.function("add").expect("add"), k.function("acc").expect("acc"));
    let (one, cfg) = (1u32, plain_cfg());
    // SAFETY: the arguments match the kernels' signatures; every buffer holds `ELEMS` elements.
    unsafe {
        stream.launch_builder(add).arg(&ELEMS).arg(&one).arg(&mut *p).launch(cfg)?;
        for b in &mut bufs[..8] {
            stream.launch_builder(acc).arg(&ELEMS).arg(&*p).arg(b).launch(cfg)?;
        }
        stream.launch_builder(add).arg(&ELEMS).arg(&one).arg(&mut *p).launch(cfg)?;
    }
    Ok(())
}

/// A 10-node fan (as `bench`'s fan K = 10).
#[inline(never)] // timed as its own call (see bench.rs)
fn fan10(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Bench,
    mut p: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    graph!(cache, stream, {
        k.add(ELEMS, 1, &mut p).launch(CFG);
        for i in 0..8 {
            k.acc(ELEMS, &p, &mut bufs[i]).launch(CFG);
        }
        k.add(ELEMS, 1, &mut p).launch(CFG);
    })
}

/// Median of `reps` timings of `f`, each after the stream is idle.
fn median(stream: &CudaStream, reps: u32, mut f: impl FnMut() -> Res<Duration>) -> Res<f64> {
    let mut t = Vec::with_capacity(reps as usize);
    for _ in 0..=reps {
        stream.synchronize()?;
        t.push(f()?.as_secs_f64() * 1e6);
    }
    t.remove(0); // first-use costs
    Ok(middle(t))
}

/// The median of `v` (the upper one of an even count).
fn middle(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The parts of one fan call, timed one by one: acquire, nodes, guards dropped.
fn fan_parts(
    stream: &CudaStream,
    k: &Bench,
    pbuf: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> (Duration, Duration, Duration, usize) {
    let call = p::begin_call();
    let t0 = Instant::now();
    let (r0, _, g0) = p::acquire_mut(pbuf, stream, &call, 0);
    let mut handles = Vec::with_capacity(bufs.len());
    for (i, b) in bufs.iter_mut().enumerate() {
        handles.push(p::acquire_mut(b, stream, &call, i as u32 + 1));
    }
    let t1 = Instant::now();
    let nodes: Vec<_> = handles
        .iter()
        .map(|(_, w, _)| p::kernel_node(p::kernels(k).acc(p::scalar(ELEMS), r0, *w).launch(CFG)))
        .collect();
    let entries: Vec<_> = nodes.iter().map(|n| p::entry(n).entry()).collect();
    let t2 = Instant::now();
    let present = entries.iter().flatten().count();
    drop(entries);
    drop(nodes);
    let t3 = Instant::now();
    // The guards last.
    drop(handles);
    drop(g0);
    (t1 - t0, t2 - t1, t3.elapsed(), present)
}

fn run(a: &Args) -> Res<bool> {
    let ctx = CudaContext::new(0)?;
    // As in `bench`: event tracking off, every buffer used on one stream.
    // SAFETY: every buffer is used on the one stream made below only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { Bench::load(&ctx, compile_ptx(SOURCE)?) }?;
    let mut pbuf = stream.alloc_zeros::<u32>(ELEMS as usize)?;
    let mut bufs = (0..NODES - 2)
        .map(|_| stream.alloc_zeros::<u32>(ELEMS as usize))
        .collect::<Result<Vec<_>, _>>()?;
    // The same middle buffers again in a `BufferArray` (the `*-array` modes and row).
    let mut arr: BufferArray<u32> = (0..NODES - 2)
        .map(|_| stream.alloc_zeros::<u32>(ELEMS as usize))
        .collect::<Result<_, _>>()?;
    let mut x = stream.alloc_zeros::<u32>(ELEMS as usize)?;
    let (mut fan_cache, mut chain_cache) = (GraphCache::new(), GraphCache::new());
    if let Some(n) = a.execs {
        fan_cache.set_execs_per_variant(n as usize);
        chain_cache.set_execs_per_variant(n as usize);
    }
    let reps = a.reps;
    if let Some(shape) = &a.only {
        let small = ["chain1", "fan10", "cap4"];
        let calls = if small.iter().any(|p| shape.starts_with(p)) { 100 } else { 1 };
        let mut eager = GraphCache::eager();
        let mut pair = [stream.alloc_zeros::<u32>(ELEMS as usize)?, x.clone()];
        let mut host = PinnedBuffer::zeros(&stream, 2)?;
        // Two destinations of the read, alternated by `fan-read-swap-array` (bench's `re`; with
        // `--execs 1`, `re1`).
        let mut hosts = [PinnedBuffer::zeros(&stream, 2)?, PinnedBuffer::zeros(&stream, 2)?];
        let mut i = 0usize;
        let only = median(&stream, reps, || {
            let t = Instant::now();
            for _ in 0..calls {
                i += 1;
                match shape.as_str() {
                    "fan" => fan(&mut fan_cache, &stream, &k, &mut pbuf, &mut bufs, 1)?,
                    "chain" => chain(&mut chain_cache, &stream, &k, &mut x)?,
                    "fan-swap" => fan(&mut fan_cache, &stream, &k, &mut pair[i % 2], &mut bufs, 1)?,
                    "fan-read" => {
                        fan_read(&mut fan_cache, &stream, &k, &mut pbuf, &mut bufs, &mut host)?
                    }
                    "fan-array" => fan_array(&mut fan_cache, &stream, &k, &mut pbuf, &mut arr, 1)?,
                    "fan-swap-array" => {
                        fan_array(&mut fan_cache, &stream, &k, &mut pair[i % 2], &mut arr, 1)?
                    }
                    "fan-read-array" => {
                        fan_read_array(&mut fan_cache, &stream, &k, &mut pbuf, &mut arr, &mut host)?
                    }
                    "fan-read-swap-array" => fan_read_array(
                        &mut fan_cache,
                        &stream,
                        &k,
                        &mut pbuf,
                        &mut arr,
                        &mut hosts[i % 2],
                    )?,
                    "fan-scalar" => {
                        fan(&mut fan_cache, &stream, &k, &mut pbuf, &mut bufs, i as u32)?
                    }
                    "chain1-swap" => chain1(&mut chain_cache, &stream, &k, &mut pair[i % 2])?,
                    "chain1-scalar" => {
                        chain1_scalar(&mut chain_cache, &stream, &k, i as u32, &mut x)?
                    }
                    "chain1-read" => {
                        chain1_read(&mut chain_cache, &stream, &k, &mut x, &mut host)?;
                        std::hint::black_box(host.as_slice()?[0]);
                    }
                    "builder-fan" => {
                        builder_fan(&mut fan_cache, &stream, &k, &mut pbuf, &mut bufs, 1)?
                    }
                    "builder-fan-swap" => {
                        builder_fan(&mut fan_cache, &stream, &k, &mut pair[i % 2], &mut bufs, 1)?
                    }
                    "builder-fan-scalar" => {
                        builder_fan(&mut fan_cache, &stream, &k, &mut pbuf, &mut bufs, i as u32)?
                    }
                    "fan10-eager" => fan10(&mut eager, &stream, &k, &mut pbuf, &mut bufs)?,
                    "fan10-plain" => fan10_plain(&stream, &k, &mut pbuf, &mut bufs)?,
                    "cap4-eager" => cap4(&mut eager, &stream, &k, &mut pbuf, &mut bufs)?,
                    "cap4-plain" => cap4_plain(&stream, &k, &mut pbuf, &mut bufs)?,
                    _ => chain1(&mut chain_cache, &stream, &k, &mut x)?,
                }
            }
            Ok(t.elapsed() / calls)
        })?;
        println!("{shape} graph! call: {only:.3} µs (median of {reps})");
        let fan_stats = shape.starts_with("fan") || shape.starts_with("builder");
        let s = if fan_stats { fan_cache.stats() } else { chain_cache.stats() };
        if std::env::var_os("HOST_COST_STATS").is_some() {
            println!("{s:?}");
        }
        if shape.starts_with("fan10") || shape.starts_with("cap4") {
            return Ok(eager.stats().launches == 0);
        }
        if shape.ends_with("scalar") {
            // One build, then one node updated per call.
            return Ok(s.builds == 1 && s.memo_hits == 0 && s.node_updates + 4 >= s.hits);
        }
        let swap = shape.ends_with("swap") || shape == "fan-read-swap-array";
        if swap && a.execs == Some(1) {
            // One build, then every call updates the swapped nodes in place.
            return Ok(s.builds == 1 && s.memo_hits == 0 && s.node_updates >= s.hits);
        }
        if swap {
            // One build per buffer, one update in the first round (memoizing pays from the
            // second), then memo hits only.
            return Ok(s.builds <= 2 && s.memo_hits + 4 >= s.hits);
        }
        return Ok(s.builds == 1 && s.node_updates == 0);
    }

    let fan_call = median(&stream, reps, || {
        let t = Instant::now();
        fan(&mut fan_cache, &stream, &k, &mut pbuf, &mut bufs, 1)?;
        Ok(t.elapsed())
    })?;
    // The same fan with its middle buffers in a `BufferArray` (an unchanged call compares the
    // array's memo instead of acquiring each element).
    let mut array_cache = GraphCache::new();
    let fan_array_call = median(&stream, reps, || {
        let t = Instant::now();
        fan_array(&mut array_cache, &stream, &k, &mut pbuf, &mut arr, 1)?;
        Ok(t.elapsed())
    })?;
    let chain_call = median(&stream, reps, || {
        let t = Instant::now();
        chain(&mut chain_cache, &stream, &k, &mut x)?;
        Ok(t.elapsed())
    })?;
    // The small shapes: 100 calls per timing (one call is about a microsecond).
    let (mut c1, mut f10) = (GraphCache::new(), GraphCache::new());
    let chain1_call = median(&stream, reps, || {
        let t = Instant::now();
        for _ in 0..100 {
            chain1(&mut c1, &stream, &k, &mut x)?;
        }
        Ok(t.elapsed() / 100)
    })?;
    let fan10_call = median(&stream, reps, || {
        let t = Instant::now();
        for _ in 0..100 {
            fan10(&mut f10, &stream, &k, &mut pbuf, &mut bufs)?;
        }
        Ok(t.elapsed() / 100)
    })?;
    let mut parts = Vec::new();
    for _ in 0..=reps {
        stream.synchronize()?;
        parts.push(fan_parts(&stream, &k, &mut pbuf, &mut bufs));
    }
    parts.remove(0);
    let part = |f: fn(&(Duration, Duration, Duration, usize)) -> Duration| {
        middle(parts.iter().map(|p| f(p).as_secs_f64() * 1e6).collect())
    };
    let (acquire, nodes, dropped) = (part(|p| p.0), part(|p| p.1), part(|p| p.2));
    let ok = parts.iter().all(|p| p.3 == NODES - 2);
    let fs = fan_cache.stats();
    let cs = chain_cache.stats();
    let ok = ok && fs.builds == 1 && cs.builds == 1 && fs.node_updates == 0 && cs.node_updates == 0;
    let small = [c1.stats(), f10.stats(), array_cache.stats()];
    let ok = ok && small.iter().all(|s| s.builds == 1 && s.node_updates == 0);

    println!("host_cost: µs per unchanged call with the GPU idle, median of {reps}");
    println!("{:<34}{:>10}{:>14}", "row", "µs", "ns per node");
    let row =
        |name: &str, us: f64| println!("{name:<34}{us:>10.2}{:>14.0}", us * 1e3 / NODES as f64);
    row("fan graph! call", fan_call);
    row("fan acquire (999 places)", acquire);
    row("fan nodes + entries (998)", nodes);
    row("fan guards dropped", dropped);
    let rest = fan_call - acquire - nodes - dropped;
    row("fan rest (call - parts)", rest);
    if rest < 0.0 {
        println!(
            "note: the parts, timed one by one in host_cost's own loop, cost more than the call: \
             each part's Vec is allocated anew per repetition (glibc maps blocks over 128 KB; \
             .ci/host-profile sets MALLOC_MMAP_THRESHOLD_), so read the parts as an upper bound"
        );
    }
    row("fan graph! call, BufferArray", fan_array_call);
    row("chain graph! call", chain_call);
    println!("{:<34}{:>10.3}", "chain K=1 graph! call", chain1_call);
    println!("{:<34}{:>10.3}", "fan K=10 graph! call", fan10_call);
    if cfg!(feature = "phase-times") {
        println!(
            "note: built with the feature phase-times, every call also reads the clock at each \
             phase (about 0.3 µs per call, most of the K=1 and K=10 rows); without it the \
             one-kernel call was 0.08 µs on the 2-core machine of 2026-12-02"
        );
    }
    println!(
        "note: `rest` holds the cache's validation, aliasing and ledger checks, the ladder's \
         comparisons and cuGraphLaunch (bench row c: about 20 µs for this fan, 2.6 µs for this \
         chain)."
    );
    println!(
        "unchanged calls (Stats::unchanged_calls): fan {} of {}, chain {} of {}",
        fs.unchanged_calls, fs.hits, cs.unchanged_calls, cs.hits
    );
    #[cfg(feature = "phase-times")]
    {
        // The phases of the fan's calls: its own calls, timed again with the phases read.
        p::phase_times();
        let calls = reps;
        for _ in 0..calls {
            stream.synchronize()?;
            fan(&mut fan_cache, &stream, &k, &mut pbuf, &mut bufs, 1)?;
        }
        println!("fan graph! call by phase (feature phase-times), mean of {calls} calls:");
        for (name, ns) in p::phase_times() {
            let us = ns as f64 / 1e3 / f64::from(calls);
            row(&format!("  {name}"), us);
        }
    }
    if !ok {
        println!("FAILED: an unchanged call rebuilt or updated nodes, or a part lost a node");
    }
    Ok(ok)
}

fn main() -> ExitCode {
    cli::main("host_cost", &[], |a: &Args| a.plan, |a| run(a).map_err(|e| e.to_string()))
}
