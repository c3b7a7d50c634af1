//! Jacobi iteration converging on the device: a `device_while` loop.
//!
//! ```text
//! jacobi [--sizes 64,256,1024] [--tol T] [--max-it M] [--cpu-max N] [--plan]
//! ```
//! Solves the 2-D Poisson problem of the `cg` example (`-Δu = 2 (x(1-x) + y(1-y))` on the unit
//! square, zero boundary, `n`×`n` interior points, 5-point Laplacian, f64; exact solution
//! `x(1-x) y(1-y)`, reproduced exactly by the stencil at the grid points) by Jacobi iteration
//! `u ← u + (b − A u) / 4` from `u = 0`, until the relative residual `‖b − A u‖ / ‖b‖` falls below
//! `T` (default 1e-6) or `M` iterations (default 20 000) were made, four ways:
//! - `device while`: one `graph!` call for the whole solve; the residual norm, the iteration
//!   count and the converged flag stay in device memory, and the loop is a `device_while` whose
//!   body unrolls 8 iterations (a sweep and a 1-block `finish` each, 16 kernels); kernels after
//!   the end return at once, so the solution and count are those of the first iterate below the
//!   tolerance (or the cap);
//! - `host every 1` / `host every 10`: the same kernels, one `graph!` call per 1 or 10
//!   iterations, the converged flag copied to pinned host memory (allocated once per solver)
//!   and checked after each call;
//! - `cpu`: the same algorithm on the host (sizes up to `--cpu-max`, default 256).
//!
//! Jacobi needs O(n²) iterations: the residual shrinks by about `cos(π/(n+1))` per iteration, so
//! to 1e-6 about 11 800 at 64², 185 000 at 256² and 2.9 million at 1024². The default cap of
//! 20 000 keeps the whole run to seconds: 64² converges, 256² and 1024² stop at the cap (the
//! table says which). `--max-it 200000` lets 256² converge (with `--cpu-max 64`, the CPU takes
//! minutes there).
//!
//! Each sweep also gives the residual of the iterate it reads (fused, no extra pass over the
//! grid); "iterations" is the index of the reported iterate, and µs/iteration is the solve's
//! wall time divided by the sweeps run (iterations + 1: the last sweep measured the final
//! iterate's residual). Each variant solves twice: once with a cap of 2 to build its graphs,
//! then timed (the cap is a kernel scalar: a per-node update, no rebuild). The device variants
//! must agree bit for bit and the CPU's iteration count within 1; any mismatch exits non-zero.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use cudagraph::{Condition, GraphCache, PinnedBuffer, graph, kernels};

#[path = "cli.rs"]
mod cli;
#[path = "poisson.rs"]
mod poisson;
use poisson::{exact_error, rhs};

const SOURCE: &str = include_str!("../kernels/jacobi.cu");
/// Threads per block of both kernels (`THREADS` in jacobi.cu).
const THREADS: u32 = 256;
/// Most blocks of a sweep (the partial sums `finish` adds up).
const MAX_PARTS: u32 = 1024;
/// Cap of the solve that builds the graphs before the timed one.
const WARMUP_CAP: u32 = 2;

kernels! {
    /// Kernels of `kernels/jacobi.cu`.
    struct Jacobi {
        fn sweep(n: u32, done: &u32, b: &[f64], src: &[f64], dst: &mut [f64], partial: &mut [f64]);
        fn finish(c: Condition, parts: u32, max_it: u32, thresh: f64, partial: &[f64], rr: &mut f64, it: &mut u32, done: &mut u32);
        fn finish_host(parts: u32, max_it: u32, thresh: f64, partial: &[f64], rr: &mut f64, it: &mut u32, done: &mut u32);
    }
}

/// Jacobi iteration on a 2-D Poisson problem, converging on the device (a `device_while` over
/// the iteration), against host-checked loops and the CPU.
#[derive(clap::Parser)]
#[command(name = "jacobi")]
struct Args {
    /// Grid sizes n (an n×n grid each), comma-separated, 2 to 4096.
    #[arg(long, value_name = "N,N…", value_delimiter = ',', default_value = "64,256,1024", value_parser = clap::value_parser!(u32).range(2..=4096))]
    sizes: Vec<u32>,
    /// Convergence tolerance on the residual's 2-norm relative to the right-hand side's.
    #[arg(long, default_value_t = 1e-6)]
    tol: f64,
    /// Iteration cap: the solve stops at this iterate if it has not converged.
    #[arg(long = "max-it", default_value_t = 20_000)]
    max_it: u32,
    /// Largest n for which the CPU reference runs.
    #[arg(long = "cpu-max", default_value_t = 256)]
    cpu_max: u32,
    /// Print the graph plans as Graphviz DOT and exit (no GPU needed).
    #[arg(long)]
    plan: bool,
}

/// The device state of one problem size.
struct Solver {
    n: u32,
    /// Blocks of a sweep.
    parts: u32,
    /// `‖b‖²` (the residual of `u = 0`), computed on the host.
    rr0: f64,
    b: CudaSlice<f64>,
    /// The iterates: `u_j` is in `u0` for even `j`, `u1` for odd.
    u0: CudaSlice<f64>,
    u1: CudaSlice<f64>,
    partial: CudaSlice<f64>,
    // Device scalars (one-element buffers).
    rr: CudaSlice<f64>,
    it: CudaSlice<u32>,
    done: CudaSlice<u32>,
    /// The converged flag, copied here by the host-checked variants: allocated once.
    flag: PinnedBuffer<u32>,
    caches: [GraphCache; 3],
}

/// One solve's outcome.
struct Outcome {
    iterations: u32,
    residual: f64,
    u: Vec<f64>,
    us_per_it: f64,
}

impl Solver {
    fn new(stream: &Arc<CudaStream>, n: u32) -> Result<Self, Box<dyn std::error::Error>> {
        let len = n * n;
        let b = rhs(n);
        let z = |l| stream.alloc_zeros::<f64>(l);
        // Page-locked, and read right after each call: `as_slice` waits for the copy.
        let flag = PinnedBuffer::zeros(stream, 1)?;
        let parts = len.div_ceil(THREADS).min(MAX_PARTS);
        Ok(Solver {
            n,
            parts,
            rr0: b.iter().map(|v| v * v).sum(),
            b: stream.clone_htod(&b)?,
            u0: z(len as usize)?,
            u1: z(len as usize)?,
            partial: z(parts as usize)?,
            rr: z(1)?,
            it: stream.alloc_zeros::<u32>(1)?,
            done: stream.alloc_zeros::<u32>(1)?,
            flag,
            caches: [GraphCache::new(), GraphCache::new(), GraphCache::new()],
        })
    }

    /// The whole solve as one graph: a `device_while` of 8 unrolled iterations.
    fn device(
        &mut self,
        stream: &Arc<CudaStream>,
        k: &Jacobi,
        thresh: f64,
        max_it: u32,
    ) -> cudagraph::Result<()> {
        let Solver { n, parts, b, u0, u1, partial, rr, it, done, caches, .. } = self;
        let (n, parts) = (*n, *parts);
        let cfg = (parts, THREADS);
        graph!(&mut caches[0], stream, {
            zero(&mut *u0);
            zero(&mut *u1);
            zero(&mut *rr);
            zero(&mut *it);
            zero(&mut *done);
            let c = condition(1);
            device_while(c, {
                for _ in 0..4 {
                    k.sweep(n, &*done, &*b, &*u0, &mut *u1, &mut *partial).launch(cfg);
                    k.finish(c, parts, max_it, thresh, &*partial, &mut *rr, &mut *it, &mut *done)
                        .launch((1, THREADS));
                    k.sweep(n, &*done, &*b, &*u1, &mut *u0, &mut *partial).launch(cfg);
                    k.finish(c, parts, max_it, thresh, &*partial, &mut *rr, &mut *it, &mut *done)
                        .launch((1, THREADS));
                }
            });
        })
    }

    /// The same solve driven from the host: a `graph!` call per `every` (1 or 10) iterations,
    /// the converged flag checked on the host after each.
    fn host(
        &mut self,
        stream: &Arc<CudaStream>,
        k: &Jacobi,
        thresh: f64,
        max_it: u32,
        every10: bool,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let Solver { n, parts, b, u0, u1, partial, rr, it, done, flag, caches, .. } = self;
        let (n, parts) = (*n, *parts);
        let cfg = (parts, THREADS);
        graph!(&mut caches[1], stream, {
            zero(&mut *u0);
            zero(&mut *u1);
            zero(&mut *rr);
            zero(&mut *it);
            zero(&mut *done);
        })?;
        // The iterate the next call starts from: u_j is in u0 for even j (every 10: always).
        let mut j = 0u64;
        loop {
            let odd = j % 2 == 1;
            graph!(&mut caches[2], stream, {
                if every10 {
                    for _ in 0..5 {
                        k.sweep(n, &*done, &*b, &*u0, &mut *u1, &mut *partial).launch(cfg);
                        k.finish_host(
                            parts, max_it, thresh, &*partial, &mut *rr, &mut *it, &mut *done,
                        )
                        .launch((1, THREADS));
                        k.sweep(n, &*done, &*b, &*u1, &mut *u0, &mut *partial).launch(cfg);
                        k.finish_host(
                            parts, max_it, thresh, &*partial, &mut *rr, &mut *it, &mut *done,
                        )
                        .launch((1, THREADS));
                    }
                } else if odd {
                    k.sweep(n, &*done, &*b, &*u1, &mut *u0, &mut *partial).launch(cfg);
                    k.finish_host(parts, max_it, thresh, &*partial, &mut *rr, &mut *it, &mut *done)
                        .launch((1, THREADS));
                } else {
                    k.sweep(n, &*done, &*b, &*u0, &mut *u1, &mut *partial).launch(cfg);
                    k.finish_host(parts, max_it, thresh, &*partial, &mut *rr, &mut *it, &mut *done)
                        .launch((1, THREADS));
                }
                copy(&*done, &mut *flag);
            })?;
            if flag.as_slice()?[0] != 0 {
                return Ok(());
            }
            j += if every10 { 10 } else { 1 };
        }
    }

    fn outcome(
        &self,
        stream: &Arc<CudaStream>,
        secs: f64,
    ) -> Result<Outcome, Box<dyn std::error::Error>> {
        let iterations = stream.clone_dtoh(&self.it)?[0];
        let rr = stream.clone_dtoh(&self.rr)?[0];
        let u = stream.clone_dtoh(if iterations % 2 == 0 { &self.u0 } else { &self.u1 })?;
        let us_per_it = secs * 1e6 / (f64::from(iterations) + 1.0);
        Ok(Outcome { iterations, residual: (rr / self.rr0).sqrt(), u, us_per_it })
    }
}

/// The same algorithm on the host (the same sums per point, in the same order).
fn cpu(n: u32, thresh: f64, rr0: f64, max_it: u32) -> Outcome {
    let (nn, len) = (n as usize, (n * n) as usize);
    let b = rhs(n);
    let (mut u, mut v) = (vec![0.0; len], vec![0.0; len]);
    let mut it = 0u32;
    let t = Instant::now();
    let rr = loop {
        let mut rr = 0.0;
        for k in 0..len {
            let (i, j) = (k / nn, k % nn);
            let mut nb = 0.0;
            if i > 0 {
                nb += u[k - nn];
            }
            if i + 1 < nn {
                nb += u[k + nn];
            }
            if j > 0 {
                nb += u[k - 1];
            }
            if j + 1 < nn {
                nb += u[k + 1];
            }
            let r = b[k] + nb - 4.0 * u[k];
            v[k] = u[k] + 0.25 * r;
            rr += r * r;
        }
        if rr < thresh || it >= max_it {
            break rr;
        }
        std::mem::swap(&mut u, &mut v);
        it += 1;
    };
    let us_per_it = t.elapsed().as_secs_f64() * 1e6 / (f64::from(it) + 1.0);
    Outcome { iterations: it, residual: (rr / rr0).sqrt(), u, us_per_it }
}

fn run(a: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    // SAFETY: the declarations match jacobi.cu; every kernel stays within its buffers (n*n
    // elements, `parts` partial sums, one element for the scalars).
    let k = unsafe { Jacobi::load(&ctx, compile_ptx_with_opts(SOURCE, opts)?) }?;
    let mut ok = true;
    println!(
        "jacobi: relative residual tolerance {:e}, iteration cap {} (Jacobi needs O(n²) iterations: sizes that do not converge within the cap stop there)",
        a.tol, a.max_it
    );
    println!(
        "| n | variant | iterations | stopped by | rel. residual | max error vs exact | µs/iteration |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &n in &a.sizes {
        eprintln!("jacobi: {n}²");
        let mut s = Solver::new(&stream, n)?;
        let thresh = a.tol * a.tol * s.rr0;
        let mut rows: Vec<(&str, Outcome)> = Vec::new();
        for variant in ["device while", "host every 1", "host every 10"] {
            let solve = |s: &mut Solver, max_it| -> Result<(), Box<dyn std::error::Error>> {
                match variant {
                    "device while" => s.device(&stream, &k, thresh, max_it)?,
                    "host every 1" => s.host(&stream, &k, thresh, max_it, false)?,
                    _ => s.host(&stream, &k, thresh, max_it, true)?,
                }
                stream.synchronize()?;
                Ok(())
            };
            eprintln!("jacobi: {n}² {variant}");
            solve(&mut s, WARMUP_CAP.min(a.max_it))?; // builds the graphs
            let t = Instant::now();
            solve(&mut s, a.max_it)?;
            let secs = t.elapsed().as_secs_f64();
            rows.push((variant, s.outcome(&stream, secs)?));
        }
        if n <= a.cpu_max {
            eprintln!("jacobi: {n}² cpu");
            rows.push(("cpu", cpu(n, thresh, s.rr0, a.max_it)));
        }
        for (v, o) in &rows {
            let by = if o.residual < a.tol { "tolerance" } else { "cap" };
            println!(
                "| {n}² | {v} | {} | {by} | {:.3e} | {:.3e} | {:.2} |",
                o.iterations,
                o.residual,
                exact_error(n, &o.u),
                o.us_per_it
            );
        }
        let d = &rows[0].1;
        let bits = |u: &[f64]| u.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for (v, o) in &rows[1..3] {
            if bits(&o.u) != bits(&d.u)
                || o.iterations != d.iterations
                || o.residual.to_bits() != d.residual.to_bits()
            {
                println!("MISMATCH: {v} differs from the device while at {n}²");
                ok = false;
            }
        }
        if let Some((_, c)) = rows.get(3) {
            if c.iterations.abs_diff(d.iterations) > 1 {
                println!(
                    "MISMATCH: {} iterations on the CPU, {} on the device at {n}²",
                    c.iterations, d.iterations
                );
                ok = false;
            }
            if c.iterations == d.iterations {
                let diff = c.u.iter().zip(&d.u).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                println!("{n}²: max |device − cpu| = {diff:.3e} (same iterate)");
            }
        }
        println!(
            "speed: device while {:.2}x the µs/iteration of host every 10, {:.2}x host every 1",
            d.us_per_it / rows[2].1.us_per_it,
            d.us_per_it / rows[1].1.us_per_it
        );
    }
    Ok(ok)
}

fn main() -> ExitCode {
    cli::main("jacobi", &[], |a: &Args| a.plan, |a| run(a).map_err(|e| e.to_string()))
}
