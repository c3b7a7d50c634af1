//! Conjugate gradients converging on the device: a `device_while` loop.
//!
//! ```text
//! cg [--sizes 64,256,1024] [--tol T] [--cpu-max N] [--reps R] [--overhead-iters N]
//!    [--plain-edges] [--plan]
//! ```
//! Solves the 2-D Poisson problem `-Δu = 2 (x(1-x) + y(1-y))` on the unit square (zero
//! boundary, `n`×`n` interior points, 5-point Laplacian, f64; exact solution
//! `x(1-x) y(1-y)`, which the 5-point stencil reproduces exactly at the grid points, so the
//! error against it is the solver's) by conjugate gradients to a relative residual `‖r‖/‖r₀‖ < T` (default
//! 1e-8), four ways:
//! - `device while`: one `graph!` call for the whole solve; alpha, beta, the residual norms,
//!   the iteration count and the converged flag stay in device memory (`&f64`/`&mut u32` device
//!   scalars), and the loop is a `device_while` whose body unrolls 16 iterations. An iteration
//!   is one kernel, `step`: the single-reduction form of CG (Chronopoulos and Gear), which sums
//!   both dot products of an iteration in one pass, with every block adding up the last step's
//!   partial sums itself (`kernels/cg.cu` explains the double-buffered state). A step that
//!   starts from a converged iterate returns at once, so the solution and count are those of
//!   the first iteration below the tolerance;
//! - `host every 1` / `host every 10`: the same kernels, one `graph!` call per 1 or 10
//!   iterations, the converged flag copied to pinned host memory (allocated once per solver)
//!   and checked after each call;
//! - `cpu`: textbook CG (two reductions per iteration) on the host, for sizes up to
//!   `--cpu-max` (default 256): the device's iteration count must be within 1 of it.
//!
//! Prints iterations, final relative residual, max error against the exact solution and µs
//! per iteration for each (the median of `--reps` timed solves; the CPU's: one solve), then
//! the per-iteration overhead of the conditional node for bodies of 1, 4 and 16 kernels (a
//! `device_while` of tiny kernels against the same kernels as a straight chain). The device variants must agree bit for bit (deterministic reductions).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudagraph::cudarc::driver::sys::CUdevice_attribute;
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use cudagraph::{Condition, GraphCache, PinnedBuffer, graph, kernels};

#[path = "cli.rs"]
mod cli;
#[path = "poisson.rs"]
mod poisson;
use poisson::{exact_error, rhs};

const SOURCE: &str = include_str!("../kernels/cg.cu");
/// Blocks of `start` and `step`, and partial sums of each dot product (`PARTS` in cg.cu); every
/// kernel has 256 threads per block.
const PARTS: u32 = 256;
/// Length of a step's scalar buffer `s`: gamma, alpha, iterations done, then `PARTS` parts of
/// `r · r` and `PARTS` of `w · r` (`S_PARTS` in cg.cu).
const S_LEN: usize = 3 + 2 * PARTS as usize;

kernels! {
    /// Kernels of `kernels/cg.cu`. `v`: 3 n² doubles (r, w = A r, z = A p); `s`: `S_LEN`.
    struct Cg {
        fn start(n: u32, b: &[f64], v: &mut [f64], s: &mut [f64]);
        fn start_scalars(tol2: f64, s: &mut [f64], rr0: &mut f64, thresh: &mut f64, rr: &mut f64, it: &mut u32, done: &mut u32);
        /// One iteration; waits for the kernel before it first (griddepcontrol.wait).
        #[programmatic]
        fn step(c: Condition, n: u32, max_it: u32, thresh: &f64, s_in: &[f64], v_in: &[f64], s_out: &mut [f64], v_out: &mut [f64], p: &mut [f64], x: &mut [f64], rr: &mut f64, it: &mut u32, done: &mut u32);
        /// `step` without a condition (the host-checked variants); waits first too.
        #[programmatic]
        fn step_host(n: u32, max_it: u32, thresh: &f64, s_in: &[f64], v_in: &[f64], s_out: &mut [f64], v_out: &mut [f64], p: &mut [f64], x: &mut [f64], rr: &mut f64, it: &mut u32, done: &mut u32);
        fn set_running(c: Condition, done: &u32);
        fn tick(v: &mut f64);
        fn tick_last(c: Condition, left: &mut u32);
    }
}

/// Conjugate-gradient solve of a 2-D Poisson problem, converging on the device (a
/// `device_while` over the iteration), against host-checked loops and the CPU.
#[derive(clap::Parser)]
#[command(name = "cg")]
struct Args {
    /// Grid sizes n (an n×n grid each), comma-separated, 2 to 4096.
    #[arg(long, value_name = "N,N…", value_delimiter = ',', default_value = "64,256,1024", value_parser = clap::value_parser!(u32).range(2..=4096))]
    sizes: Vec<u32>,
    /// Convergence tolerance on the residual's 2-norm relative to the right-hand side's.
    #[arg(long, default_value_t = 1e-8)]
    tol: f64,
    /// Largest n for which the CPU reference runs.
    #[arg(long = "cpu-max", default_value_t = 256)]
    cpu_max: u32,
    /// Loop iterations of each conditional-node overhead measurement (fewer under
    /// compute-sanitizer, where every launch costs milliseconds).
    #[arg(long = "overhead-iters", default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    overhead_iters: u32,
    /// Timed solves per variant (after one that builds the graphs); µs per iteration is their
    /// median.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// Plain edges between the steps (`GraphCache::set_programmatic(false)`), instead of
    /// programmatic ones (where the device has them: compute capability 9.0, CUDA 12.3).
    #[arg(long = "plain-edges")]
    plain_edges: bool,
    /// Print the graph plans as Graphviz DOT and exit (no GPU needed).
    #[arg(long)]
    plan: bool,
}

/// The device state of one solve.
struct Solver {
    n: u32,
    b: CudaSlice<f64>,
    x: CudaSlice<f64>,
    p: CudaSlice<f64>,
    /// The two sets of vectors (r, w, z; 3 n² each) that the steps alternate.
    v: [CudaSlice<f64>; 2],
    /// The two sets of a step's scalars and partial sums (`S_LEN` each).
    s: [CudaSlice<f64>; 2],
    // Device scalars (one-element buffers).
    rr0: CudaSlice<f64>,
    rr: CudaSlice<f64>,
    thresh: CudaSlice<f64>,
    it: CudaSlice<u32>,
    done: CudaSlice<u32>,
    /// The converged flag, copied here by the host-checked variants: allocated once per solver.
    flag: PinnedBuffer<u32>,
    caches: [GraphCache; 3],
}

/// One solve's outcome.
struct Outcome {
    iterations: u32,
    residual: f64,
    x: Vec<f64>,
    us_per_it: f64,
}

impl Solver {
    fn new(
        stream: &Arc<CudaStream>,
        n: u32,
        programmatic: bool,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let len = (n * n) as usize;
        let z = |l| stream.alloc_zeros::<f64>(l);
        // Page-locked, and read right after each call: `as_slice` waits for the copy.
        let flag = PinnedBuffer::zeros(stream, 1)?;
        Ok(Solver {
            n,
            b: stream.clone_htod(&rhs(n))?,
            x: z(len)?,
            p: z(len)?,
            v: [z(3 * len)?, z(3 * len)?],
            s: [z(S_LEN)?, z(S_LEN)?],
            rr0: z(1)?,
            rr: z(1)?,
            thresh: z(1)?,
            it: stream.alloc_zeros::<u32>(1)?,
            done: stream.alloc_zeros::<u32>(1)?,
            flag,
            caches: [0; 3].map(|_| {
                let mut c = GraphCache::new();
                c.set_programmatic(programmatic);
                c
            }),
        })
    }

    /// The whole solve as one graph: a `device_while` of 16 unrolled iterations.
    fn device(&mut self, stream: &Arc<CudaStream>, k: &Cg, tol: f64) -> cudagraph::Result<()> {
        let Solver {
            n, b, x, p, v: [v0, v1], s: [s0, s1], rr0, rr, thresh, it, done, caches, ..
        } = self;
        let (n, tol2, max_it) = (*n, tol * tol, 10 * *n * *n);
        let grid = (PARTS, 256);
        graph!(&mut caches[0], stream, {
            zero(&mut *x);
            zero(&mut *p);
            zero(&mut *done);
            k.start(n, &*b, &mut *v0, &mut *s0).launch(grid);
            k.start_scalars(
                tol2,
                &mut *s0,
                &mut *rr0,
                &mut *thresh,
                &mut *rr,
                &mut *it,
                &mut *done,
            )
            .launch((1, 256));
            let c = condition(1);
            k.set_running(c, &*done).launch((1, 1));
            // 16 iterations per body, 2 per round: the steps alternate the two sets.
            device_while(c, {
                for _ in 0..8 {
                    k.step(
                        c, n, max_it, &*thresh, &*s0, &*v0, &mut *s1, &mut *v1, &mut *p, &mut *x,
                        &mut *rr, &mut *it, &mut *done,
                    )
                    .launch(grid);
                    k.step(
                        c, n, max_it, &*thresh, &*s1, &*v1, &mut *s0, &mut *v0, &mut *p, &mut *x,
                        &mut *rr, &mut *it, &mut *done,
                    )
                    .launch(grid);
                }
            });
        })
    }

    /// The same solve driven from the host: a `graph!` call per `every` (1 or 10) iterations,
    /// the converged flag checked on the host after each. A step sees that the iterate it
    /// starts from has converged, so the host stops after the call that holds that step.
    fn host(
        &mut self,
        stream: &Arc<CudaStream>,
        k: &Cg,
        tol: f64,
        every10: bool,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let Solver {
            n,
            b,
            x,
            p,
            v: [v0, v1],
            s: [s0, s1],
            rr0,
            rr,
            thresh,
            it,
            done,
            flag,
            caches,
        } = self;
        let (n, tol2, max_it) = (*n, tol * tol, 10 * *n * *n);
        let grid = (PARTS, 256);
        graph!(&mut caches[1], stream, {
            zero(&mut *x);
            zero(&mut *p);
            zero(&mut *done);
            k.start(n, &*b, &mut *v0, &mut *s0).launch(grid);
            k.start_scalars(
                tol2,
                &mut *s0,
                &mut *rr0,
                &mut *thresh,
                &mut *rr,
                &mut *it,
                &mut *done,
            )
            .launch((1, 256));
        })?;
        // Whether the next step reads set 1 (after an odd number of single steps).
        let mut odd = false;
        loop {
            graph!(&mut caches[2], stream, {
                if every10 {
                    for _ in 0..5 {
                        k.step_host(
                            n, max_it, &*thresh, &*s0, &*v0, &mut *s1, &mut *v1, &mut *p, &mut *x,
                            &mut *rr, &mut *it, &mut *done,
                        )
                        .launch(grid);
                        k.step_host(
                            n, max_it, &*thresh, &*s1, &*v1, &mut *s0, &mut *v0, &mut *p, &mut *x,
                            &mut *rr, &mut *it, &mut *done,
                        )
                        .launch(grid);
                    }
                } else if odd {
                    k.step_host(
                        n, max_it, &*thresh, &*s1, &*v1, &mut *s0, &mut *v0, &mut *p, &mut *x,
                        &mut *rr, &mut *it, &mut *done,
                    )
                    .launch(grid);
                } else {
                    k.step_host(
                        n, max_it, &*thresh, &*s0, &*v0, &mut *s1, &mut *v1, &mut *p, &mut *x,
                        &mut *rr, &mut *it, &mut *done,
                    )
                    .launch(grid);
                }
                copy(&*done, &mut *flag);
            })?;
            odd = !every10 && !odd;
            if flag.as_slice()?[0] != 0 {
                return Ok(());
            }
        }
    }

    fn outcome(
        &self,
        stream: &Arc<CudaStream>,
        secs: f64,
    ) -> Result<Outcome, Box<dyn std::error::Error>> {
        let iterations = stream.clone_dtoh(&self.it)?[0];
        let (rr, rr0) = (stream.clone_dtoh(&self.rr)?[0], stream.clone_dtoh(&self.rr0)?[0]);
        let x = stream.clone_dtoh(&self.x)?;
        let us_per_it = secs * 1e6 / f64::from(iterations.max(1));
        Ok(Outcome { iterations, residual: (rr / rr0).sqrt(), x, us_per_it })
    }
}

/// Textbook conjugate gradients on the host (two reductions per iteration).
fn cpu(n: u32, tol: f64) -> Outcome {
    let (nn, len) = (n as usize, (n * n) as usize);
    let b = rhs(n);
    let (mut x, mut r, mut p, mut q) = (vec![0.0; len], b.clone(), b.clone(), vec![0.0; len]);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
    let rr0 = dot(&r, &r);
    let (mut rr, mut it) = (rr0, 0u32);
    let t = Instant::now();
    while rr >= tol * tol * rr0 && it < 10 * n * n {
        for k in 0..len {
            let (i, j) = (k / nn, k % nn);
            let mut s = 4.0 * p[k];
            if i > 0 {
                s -= p[k - nn];
            }
            if i + 1 < nn {
                s -= p[k + nn];
            }
            if j > 0 {
                s -= p[k - 1];
            }
            if j + 1 < nn {
                s -= p[k + 1];
            }
            q[k] = s;
        }
        let alpha = rr / dot(&p, &q);
        for k in 0..len {
            x[k] += alpha * p[k];
            r[k] -= alpha * q[k];
        }
        let rr_new = dot(&r, &r);
        for k in 0..len {
            p[k] = r[k] + rr_new / rr * p[k];
        }
        rr = rr_new;
        it += 1;
    }
    let us_per_it = t.elapsed().as_secs_f64() * 1e6 / f64::from(it.max(1));
    Outcome { iterations: it, residual: (rr / rr0).sqrt(), x, us_per_it }
}

/// µs per iteration of a `device_while` whose body is `kernels` tiny kernels, and µs per
/// `kernels` of the same kernels as a straight chain: the difference is the conditional
/// node's own cost per iteration.
fn overhead(
    stream: &Arc<CudaStream>,
    k: &Cg,
    kernels: u32,
    iters: u32,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    const REPEATS: u32 = 50;
    let mut v = stream.alloc_zeros::<f64>(1)?;
    let mut left = stream.alloc_zeros::<u32>(1)?;
    let (mut loop_cache, mut chain_cache) = (GraphCache::new(), GraphCache::new());
    let timed = |run: &mut dyn FnMut() -> cudagraph::Result<()>| -> Result<f64, Box<dyn std::error::Error>> {
        run()?; // build
        stream.synchronize()?;
        let t = Instant::now();
        run()?;
        stream.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e6)
    };
    let while_us = timed(&mut || {
        let mut g = loop_cache.builder(stream);
        let (vw, lw) = (g.write(&mut v), g.write(&mut left));
        g.memset(lw, iters);
        let c = g.condition(1);
        g.device_while(c, |g| {
            for _ in 1..kernels {
                g.kernel(k.tick(vw).launch((1, 32)));
            }
            g.kernel(k.tick_last(c, lw).launch((1, 32)));
        });
        g.launch()
    })? / f64::from(iters);
    let chain_us = timed(&mut || {
        let mut g = chain_cache.builder(stream);
        let vw = g.write(&mut v);
        for _ in 0..kernels * REPEATS {
            g.kernel(k.tick(vw).launch((1, 32)));
        }
        g.launch()
    })? / f64::from(REPEATS);
    Ok((while_us, chain_us))
}

fn run(a: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // For the device's own architecture: `griddepcontrol` (the programmatic steps' wait) needs
    // compute capability 9.0, and NVRTC's default architecture is older.
    let major = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
        ..Default::default()
    };
    // SAFETY: the declarations match cg.cu; every kernel stays within its buffers when they
    // have the lengths `Solver::new` gives them (n² for b, x and p, 3 n² for v, S_LEN for s,
    // one element for the scalars), as every call here passes.
    let k = unsafe { Cg::load(&ctx, compile_ptx_with_opts(SOURCE, opts)?) }?;
    let mut ok = true;
    println!("| n | variant | iterations | rel. residual | max error vs exact | µs/iteration |");
    println!("|---|---|---|---|---|---|");
    for &n in &a.sizes {
        eprintln!("cg: {n}²");
        let mut s = Solver::new(&stream, n, !a.plain_edges)?;
        let mut rows: Vec<(&str, Outcome)> = Vec::new();
        for variant in ["device while", "host every 1", "host every 10"] {
            let solve = |s: &mut Solver| -> Result<(), Box<dyn std::error::Error>> {
                match variant {
                    "device while" => s.device(&stream, &k, a.tol)?,
                    "host every 1" => s.host(&stream, &k, a.tol, false)?,
                    _ => s.host(&stream, &k, a.tol, true)?,
                }
                stream.synchronize()?;
                Ok(())
            };
            eprintln!("cg: {n}² {variant}");
            solve(&mut s)?; // builds the graphs
            let mut secs = Vec::with_capacity(a.reps as usize);
            for _ in 0..a.reps {
                let t = Instant::now();
                solve(&mut s)?;
                secs.push(t.elapsed().as_secs_f64());
            }
            secs.sort_by(f64::total_cmp);
            rows.push((variant, s.outcome(&stream, secs[secs.len() / 2])?));
        }
        if n <= a.cpu_max {
            rows.push(("cpu", cpu(n, a.tol)));
        }
        for (v, o) in &rows {
            println!(
                "| {n}² | {v} | {} | {:.3e} | {:.3e} | {:.2} |",
                o.iterations,
                o.residual,
                exact_error(n, &o.x),
                o.us_per_it
            );
        }
        let d = &rows[0].1;
        for (v, o) in &rows[1..3] {
            if o.x != d.x || o.iterations != d.iterations {
                println!("MISMATCH: {v} differs from the device while at {n}²");
                ok = false;
            }
        }
        if let Some((_, c)) = rows.get(3)
            && c.iterations.abs_diff(d.iterations) > 1
        {
            println!(
                "MISMATCH: {} iterations on the CPU, {} on the device at {n}²",
                c.iterations, d.iterations
            );
            ok = false;
        }
        println!(
            "speed: device while {:.2}x the µs/iteration of host every 10",
            d.us_per_it / rows[2].1.us_per_it
        );
        let (dev, every10) = (s.caches[0].stats(), s.caches[2].stats());
        println!(
            "edges between steps: programmatic {} in the device graph, {} in the every-10 graphs \
             (fallen back to plain: {} and {})",
            dev.programmatic_edges,
            every10.programmatic_edges,
            dev.programmatic_fallbacks,
            every10.programmatic_fallbacks
        );
    }
    println!(
        "\n| body kernels | device while µs/iteration | chain µs per body | conditional node overhead µs |"
    );
    println!("|---|---|---|---|");
    for kernels in [1, 4, 16] {
        eprintln!("cg: overhead, {kernels} kernels");
        let (w, c) = overhead(&stream, &k, kernels, a.overhead_iters)?;
        println!("| {kernels} | {w:.2} | {c:.2} | {:.2} |", w - c);
    }
    Ok(ok)
}

fn main() -> ExitCode {
    cli::main("cg", Cg::PROGRAMMATIC, |a: &Args| a.plan, |a| run(a).map_err(|e| e.to_string()))
}
