//! Stress: long runs, big graphs, variant churn and early drops, with memory measured.
//!
//! ```text
//! stress [--heat-steps S (default 1000000)] [--churn-calls C (default 2000)] [--sanitizer]
//! ```
//! `--help` lists the arguments. Parts 1 and 3 show a progress bar on standard error when it is
//! a terminal (none in logs and pipes).
//! `--sanitizer`: for runs under compute-sanitizer, whose instrumentation grows host memory:
//! the host RSS check only prints its figures.
//! 1. `S` steps of the heat step (pointers swap and `alpha` changes every step): host RSS and
//!    device memory in use at step 1000 and at the end must match; no rebuild.
//! 2. A 1000-node graph (an unrolled 10 × 100 `for`): build + instantiate, then a call that
//!    changes every node's scalar (1000 node updates), then an unchanged relaunch; each call's
//!    stats checked, and the result compared with the same calls run by a cache in
//!    `Mode::Eager`. 2b. The same with 10 000 nodes, assembled at run time by a `GraphBuilder`
//!    (a 10 000-statement `graph!` body compiles for minutes).
//! 3. Variant churn: four structural variants cycled through a cache bounded to 2, alternating
//!    two streams, compared with eager launches after every call.
//! 4. A cache dropped while its last launch is still running (a kernel spinning ~50 ms).
//!
//! Exits non-zero on any mismatch, leak or rebuild. Without a CUDA driver: one line, status 2.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudagraph::cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, Mode, Result, graph, kernels};

#[path = "progress.rs"]
mod progress;
use progress::out;

kernels! {
    /// Kernels of `kernels/heat.cu`.
    pub struct Heat {
        fn stencil(nx: u32, ny: u32, alpha: f32, src: &[f32], dst: &mut [f32]);
        fn boundary(nx: u32, ny: u32, u: &mut [f32]);
        fn check_finite(n: u32, u: &[f32], flags: &mut [u32]);
    }
}

kernels! {
    /// Kernels of `kernels/stress.cu`.
    pub struct S {
        fn mix(n: u32, a: u32, x: &mut [u32]);
        fn add(n: u32, a: u32, x: &[u32], y: &mut [u32]);
        fn spin(n: u32, cycles: u64, x: &mut [u32]);
    }
}

/// Resident host memory of this process, KiB (`VmRSS` of /proc/self/status).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Device memory in use, MiB (`cuMemGetInfo`: total − free).
/// Device memory in use, MiB (`cuMemGetInfo`): device-wide, so other processes on the same GPU
/// (e.g. several sanitizer runs at once) change it; run `stress` alone for its flat-memory check.
fn device_mib(ctx: &CudaContext) -> Result<u64> {
    let (free, total) = ctx.mem_get_info()?;
    Ok(((total - free) >> 20) as u64)
}

fn check(ok: bool, what: &str, failures: &mut Vec<String>) {
    out!("  [{}] {what}", if ok { "ok" } else { "FAILED" });
    if !ok {
        failures.push(what.to_string());
    }
}

fn heat(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    steps: u64,
    f: &mut Vec<String>,
) -> Result<()> {
    out!("1. heat step, {steps} calls, pointers and alpha changing every call");
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { Heat::load(ctx, compile_ptx(include_str!("../kernels/heat.cu"))?) }?;
    let n = 512u32;
    let cells = n * n;
    let mut u = stream.alloc_zeros::<f32>(cells as usize)?;
    let mut v = stream.alloc_zeros::<f32>(cells as usize)?;
    let mut flags = stream.alloc_zeros::<u32>(1)?;
    let grid2d =
        LaunchConfig { grid_dim: (n / 16, n / 16, 1), block_dim: (16, 16, 1), shared_mem_bytes: 0 };
    let (edge, all) = (LaunchConfig::for_num_elems(n), LaunchConfig::for_num_elems(cells));
    let mut cache = GraphCache::new();
    let (mut rss0, mut dev0) = (0, 0);
    let t = Instant::now();
    progress::start("1. heat steps", steps);
    for step in 0..steps {
        if step % 4096 == 0 {
            progress::set(step);
        }
        let alpha = if step % 2 == 0 { 0.2f32 } else { 0.19f32 };
        graph!(&mut cache, stream, {
            memset(&mut flags, 0u32);
            k.stencil(n, n, alpha, &u, &mut v).launch(grid2d);
            k.boundary(n, n, &mut v).launch(edge);
            k.check_finite(cells, &v, &mut flags).launch(all);
        })?;
        std::mem::swap(&mut u, &mut v);
        if step == 1000.min(steps - 1) {
            stream.synchronize()?;
            (rss0, dev0) = (rss_kib(), device_mib(ctx)?);
        }
    }
    progress::set(steps);
    stream.synchronize()?;
    let secs = t.elapsed().as_secs_f64();
    let (rss1, dev1) = (rss_kib(), device_mib(ctx)?);
    let s = cache.stats();
    out!(
        "  {:.2} s, {:.2} µs per call; host RSS {rss0} KiB at step 1000, {rss1} KiB at the end; device {dev0} MiB, {dev1} MiB",
        secs,
        secs * 1e6 / steps as f64
    );
    out!("  stats: {s:?}");
    let flag = stream.clone_dtoh(&flags)?[0];
    // One build, plus one per parameter set that came back (`Stats::memo_builds`).
    let one = s.builds == 1 + s.memo_builds && s.instantiations == s.builds;
    check(one && s.reinstantiations == 0, "no rebuild", f);
    check(s.launches == steps, "every call launched", f);
    if SANITIZER.load(std::sync::atomic::Ordering::Relaxed) {
        out!("  (--sanitizer: host RSS not checked)");
    } else {
        check(rss1 <= rss0 + 1024, "host memory flat (within 1 MiB)", f);
    }
    check(dev1 == dev0, "device memory flat", f);
    check(flag == 0, "field finite", f);
    Ok(())
}

fn eager_mix(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    n: u32,
    a: u32,
    x: &mut CudaSlice<u32>,
) -> Result<()> {
    let cfg = LaunchConfig::for_num_elems(n);
    // SAFETY: `mix(unsigned n, unsigned a, unsigned *x)` with x of n elements.
    unsafe { stream.launch_builder(f).arg(&n).arg(&a).arg(x).launch(cfg) }?;
    Ok(())
}

/// Three calls of a chain of `nodes` `mix` kernels on `x` (seeds 1, 2, 2: build, every scalar
/// changed, unchanged), each timed to its return and to completion, checked call by call
/// through the cache's stats, and compared with the same calls run on `e` by a second cache in
/// [`Mode::Eager`] (the library's eager oracle: the same nodes launched one by one, in order)
/// and with the host's arithmetic.
fn three_calls(
    stream: &Arc<CudaStream>,
    (x, e): (&mut CudaSlice<u32>, &mut CudaSlice<u32>),
    nodes: u32,
    f: &mut Vec<String>,
    mut call: impl FnMut(&mut GraphCache, &mut CudaSlice<u32>, u32) -> Result<()>,
) -> Result<()> {
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::new();
    eager.set_mode(Mode::Eager);
    let (mut times, mut stats) = (Vec::new(), Vec::new());
    for seed in [1u32, 2, 2] {
        let t = Instant::now();
        call(&mut cache, x, seed)?;
        let host = t.elapsed().as_secs_f64() * 1e3;
        stream.synchronize()?;
        times.push((host, t.elapsed().as_secs_f64() * 1e3));
        stats.push(cache.stats());
        call(&mut eager, e, seed)?;
    }
    let ms = |(host, done): (f64, f64)| format!("{done:.1} ms (host {host:.1} ms)");
    out!(
        "  first call (build + instantiate + launch) {}; all {nodes} scalars changed {}; unchanged {}",
        ms(times[0]),
        ms(times[1]),
        ms(times[2])
    );
    let (s0, s1, s2) = (stats[0], stats[1], stats[2]);
    out!("  stats: {s2:?}");
    let got = stream.clone_dtoh(x)?;
    check(got == stream.clone_dtoh(e)?, "equal to the same calls run eagerly (Mode::Eager)", f);
    // Node i of a call computes x = x * 3 + seed + i (mod 2^32), in order.
    let want = [1u32, 2, 2].iter().flat_map(|&seed| (0..nodes).map(move |i| seed + i));
    let want = want.fold(0u32, |v, a| v.wrapping_mul(3).wrapping_add(a));
    check(got.iter().all(|&v| v == want), "equal to the same arithmetic on the host", f);
    let n = u64::from(nodes);
    check(
        (s0.builds, s0.instantiations, s0.hits, s0.launches) == (1, 1, 0, 1),
        "first call: 1 build + instantiation",
        f,
    );
    check(
        (s1.builds, s1.hits, s1.node_updates, s1.nodes_unchanged) == (1, 1, n, 0)
            && (s1.exec_updates, s1.reinstantiations) == (0, 0),
        &format!("second call: a hit, all {nodes} nodes updated in place"),
        f,
    );
    check(
        (s2.builds, s2.instantiations, s2.hits, s2.launches) == (1, 1, 2, 3)
            && (s2.node_updates, s2.nodes_unchanged) == (n, n),
        "third call: a hit, no node updated",
        f,
    );
    let es = eager.stats();
    check(
        (es.eager_calls, es.builds, es.launches) == (3, 0, 0),
        "the eager cache ran every call eagerly",
        f,
    );
    Ok(())
}

fn big_graph(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, f: &mut Vec<String>) -> Result<()> {
    out!("2. a 1000-node graph: build, update every node, relaunch");
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { S::load(ctx, compile_ptx(include_str!("../kernels/stress.cu"))?) }?;
    let n = 64u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut x = stream.alloc_zeros::<u32>(n as usize)?;
    let mut e = stream.alloc_zeros::<u32>(n as usize)?;
    three_calls(stream, (&mut x, &mut e), 1000, f, |cache, x, seed| {
        graph!(cache, stream, {
            for i in 0..10 {
                for j in 0..100 {
                    k.mix(n, seed + i * 100 + j, &mut *x).launch(cfg);
                }
            }
        })
    })
}

/// 10 000 nodes in one graph. A `graph!` body of 10 000 statements takes minutes to compile
/// (rustc and LLVM on one huge function), so this one is assembled at run time with
/// [`GraphBuilder`](cudagraph::GraphBuilder): one cached variant, as its topology (a chain of
/// writes to `x`) is the same on every call.
fn ten_thousand(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    f: &mut Vec<String>,
) -> Result<()> {
    const NODES: u32 = 10_000;
    out!("2b. a {NODES}-node graph from a GraphBuilder: build, update every node, relaunch");
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { S::load(ctx, compile_ptx(include_str!("../kernels/stress.cu"))?) }?;
    let n = 64u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut x = stream.alloc_zeros::<u32>(n as usize)?;
    let mut e = stream.alloc_zeros::<u32>(n as usize)?;
    three_calls(stream, (&mut x, &mut e), NODES, f, |cache, x, seed| {
        let mut g = cache.builder(stream);
        let w = g.write(x);
        for i in 0..NODES {
            g.kernel(k.mix(n, seed + i, w).launch(cfg));
        }
        g.launch()
    })
}

fn churn(ctx: &Arc<CudaContext>, calls: u32, f: &mut Vec<String>) -> Result<()> {
    out!("3. variant churn: 4 variants, cache bound 2, two streams, {calls} calls");
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { S::load(ctx, compile_ptx(include_str!("../kernels/stress.cu"))?) }?;
    let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
    let n = 256u32;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut x = a.alloc_zeros::<u32>(n as usize)?;
    let mut y = a.alloc_zeros::<u32>(n as usize)?;
    let mut ex = a.alloc_zeros::<u32>(n as usize)?;
    let mut ey = a.alloc_zeros::<u32>(n as usize)?;
    let (mix, add) = (k.function("mix").expect("declared"), k.function("add").expect("declared"));
    let mut cache = GraphCache::with_max_variants(2);
    let mut ok = true;
    progress::start("3. churn calls", u64::from(calls));
    for i in 0..calls {
        if i % 64 == 0 {
            progress::set(u64::from(i));
        }
        let (p, q) = (i % 2 == 0, (i / 2) % 2 == 0);
        let s = if i % 3 == 0 { &a } else { &b };
        graph!(&mut cache, s, {
            if p {
                k.mix(n, i, &mut x).launch(cfg);
            }
            if q {
                k.add(n, 7, &x, &mut y).launch(cfg);
            } else {
                k.mix(n, 5, &mut y).launch(cfg);
            }
        })?;
        if p {
            eager_mix(&a, mix, n, i, &mut ex)?;
        }
        if q {
            // SAFETY: add(n, a, x, y) with n-element buffers.
            unsafe { a.launch_builder(add).arg(&n).arg(&7u32).arg(&ex).arg(&mut ey).launch(cfg) }?;
        } else {
            eager_mix(&a, mix, n, 5, &mut ey)?;
        }
        if i % 97 == 0 || i + 1 == calls {
            ok &= a.clone_dtoh(&y)? == a.clone_dtoh(&ey)?
                && a.clone_dtoh(&x)? == a.clone_dtoh(&ex)?;
        }
    }
    progress::set(u64::from(calls));
    let s = cache.stats();
    out!("  stats: {s:?}");
    check(ok, "equal to eager after every checked call", f);
    check(cache.len() <= 2 && s.evictions > 0, "bounded to 2 variants, evicting", f);
    Ok(())
}

fn drop_running(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    f: &mut Vec<String>,
) -> Result<()> {
    out!("4. a cache dropped while its launch is still running");
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { S::load(ctx, compile_ptx(include_str!("../kernels/stress.cu"))?) }?;
    let n = 1024u32;
    let mut x = stream.alloc_zeros::<u32>(n as usize)?;
    let cfg = LaunchConfig::for_num_elems(n);
    let cycles = 100_000_000u64; // ~50 ms at 2 GHz
    let t = Instant::now();
    {
        let mut cache = GraphCache::new();
        graph!(&mut cache, stream, {
            k.spin(n, cycles, &mut x).launch(cfg);
            k.mix(n, 1, &mut x).launch(cfg);
        })?;
        // `cache` drops here: cuGraphExecDestroy while the spin kernel runs.
    }
    let dropped_after = t.elapsed().as_secs_f64() * 1e3;
    stream.synchronize()?;
    let finished_after = t.elapsed().as_secs_f64() * 1e3;
    out!(
        "  cache dropped after {dropped_after:.2} ms; launch finished after {finished_after:.2} ms"
    );
    check(dropped_after < finished_after / 2.0, "dropped while running", f);
    check(
        stream.clone_dtoh(&x)?.iter().all(|&v| v == 4),
        "the launch completed in full (x = 1*3+1)",
        f,
    );
    Ok(())
}

/// `--sanitizer` was given.
static SANITIZER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Stress: long runs, big graphs, variant churn and early drops, with memory measured (host RSS
/// in KiB, device memory in MiB). Exits non-zero on any mismatch, leak or rebuild.
///
/// Without a CUDA GPU: one line, status 2. A progress bar shows on standard error when it is a
/// terminal.
#[derive(clap::Parser)]
#[command(name = "stress")]
struct Args {
    /// Calls of the heat step in part 1 (512 x 512 cells).
    #[arg(long, value_name = "S", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    heat_steps: u64,
    /// Calls of the variant-churn part 3.
    #[arg(long, value_name = "C", default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    churn_calls: u32,
    /// For runs under compute-sanitizer, whose instrumentation grows host memory: the host RSS
    /// check of part 1 only prints its figures.
    #[arg(long)]
    sanitizer: bool,
}

fn main() -> ExitCode {
    let Args { heat_steps, churn_calls, sanitizer } = <Args as clap::Parser>::parse();
    SANITIZER.store(sanitizer, std::sync::atomic::Ordering::Relaxed);
    if !cudagraph::driver_available() {
        eprintln!("stress: no CUDA driver found (libcuda could not be loaded)");
        return ExitCode::from(2);
    }
    let mut failures = Vec::new();
    let run = |f: &mut Vec<String>| -> Result<()> {
        let ctx = CudaContext::new(0)?;
        let stream = ctx.new_stream()?;
        heat(&ctx, &stream, heat_steps, f)?;
        big_graph(&ctx, &stream, f)?;
        ten_thousand(&ctx, &stream, f)?;
        churn(&ctx, churn_calls, f)?;
        drop_running(&ctx, &stream, f)?;
        Ok(())
    };
    let result = run(&mut failures);
    progress::finish();
    if let Err(e) = result {
        eprintln!("stress: {e}");
        return ExitCode::FAILURE;
    }
    if failures.is_empty() {
        out!("stress: all checks passed");
        ExitCode::SUCCESS
    } else {
        out!("stress: {} checks FAILED: {failures:?}", failures.len());
        ExitCode::FAILURE
    }
}
