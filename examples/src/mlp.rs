//! A small multi-layer perceptron, one `graph!` call per step: each layer a cuBLAS GEMM
//! recorded by a `capture` statement plus this crate's own bias + ReLU kernel.
//!
//! ```text
//! mlp [--steps S] [--batch B,B…] [--width W,W…] [--plan]
//! ```
//! For each batch size `B` (default 1,8,64) and width `W` (default 256,1024), runs `S` steps
//! (default 200) of a 4-layer MLP (`h[l+1] = relu(W_l · h[l] + b_l)`, f32, column-major) whose
//! input changes every step (step `i` reads input `i` of a device buffer of `S` inputs, so the
//! graph's copy node and the first GEMM get a new pointer every step), once as a CUDA graph
//! and once eagerly ([`Mode::Eager`]: the same statements, cuBLAS called directly on the stream),
//! checks that every step's output is bit-identical, and prints the per-step time of both.
//! `--plan` prints the step's graph as Graphviz DOT without touching CUDA. Without a CUDA driver
//! the run exits with status 2 and one line saying so; `--help` lists the arguments.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudagraph::cudarc::cublas::sys as cublas_sys;
use cudagraph::cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys::cublasOperation_t};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, Mode, graph, kernels};

#[path = "cli.rs"]
mod cli;

const SOURCE: &str = include_str!("../kernels/mlp.cu");
const LAYERS: usize = 4;
/// cuBLAS's workspace (its documented recommendation for graph capture on Hopper: 32 MiB).
const WORKSPACE_BYTES: usize = 32 << 20;

kernels! {
    /// Kernels of `kernels/mlp.cu`.
    pub struct Mlp {
        /// `y[r + c * rows] = max(y[r + c * rows] + bias[r], 0)`.
        fn bias_relu(rows: u32, cols: u32, bias: &[f32], y: &mut [f32]);
    }
}

/// A 4-layer MLP (cuBLAS GEMMs recorded by `capture` statements plus a bias + ReLU kernel), one
/// `graph!` call per step, checked bit for bit against the same steps run eagerly.
///
/// Without a CUDA GPU: says so, prints the step's graph plan and exits with status 2.
#[derive(clap::Parser)]
#[command(name = "mlp")]
struct Args {
    /// Steps per (batch, width) pair; each step reads its own input.
    #[arg(long, default_value_t = 200, value_parser = positive)]
    steps: usize,
    /// Batch sizes (columns of the input), comma-separated.
    #[arg(long = "batch", value_name = "B,B…", value_delimiter = ',', default_value = "1,8,64", value_parser = positive)]
    batches: Vec<usize>,
    /// Layer widths (rows), comma-separated.
    #[arg(long = "width", value_name = "W,W…", value_delimiter = ',', default_value = "256,1024", value_parser = positive)]
    widths: Vec<usize>,
    /// Print the step's graph plan as Graphviz DOT and exit, without touching CUDA.
    #[arg(long)]
    plan: bool,
}

/// A positive integer argument.
fn positive(v: &str) -> Result<usize, String> {
    match v.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{v}` is not a positive integer")),
    }
}

/// Deterministic values in [-scale, scale].
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The network's buffers for one size.
struct Net {
    w: Vec<CudaSlice<f32>>,
    b: Vec<CudaSlice<f32>>,
    h: Vec<CudaSlice<f32>>,
    inputs: CudaSlice<f32>,
}

/// Runs `steps` steps in `mode`, each step's output copied into `outputs`; returns seconds.
#[allow(clippy::too_many_arguments)]
fn run_steps(
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    k: &Mlp,
    net: &mut Net,
    outputs: &mut CudaSlice<f32>,
    (batch, width, steps): (usize, usize, usize),
    cache: &mut GraphCache,
) -> cudagraph::Result<f64> {
    let n = batch * width;
    let gemm = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: width as i32,
        n: batch as i32,
        k: width as i32,
        alpha: 1.0f32,
        lda: width as i32,
        ldb: width as i32,
        beta: 0.0f32,
        ldc: width as i32,
    };
    let (rows, cols) = (width as u32, batch as u32);
    let cfg = ((n as u32).div_ceil(256), 256u32);
    let Net { w, b, h, inputs } = net;
    stream.synchronize()?;
    let t = Instant::now();
    for i in 0..steps {
        let x = inputs.slice(i * n..(i + 1) * n);
        let mut out = outputs.slice_mut(i * n..(i + 1) * n);
        graph!(cache, stream, {
            copy(&x, &mut h[0]);
            for l in 0..4 {
                // SAFETY: `s.stream()` joins the step's stream (`blas`'s) into the capture;
                // the GEMM on it touches only the listed views and cuBLAS's own workspace,
                // set before (`gemm` describes W (width×width), h[l] and h[l + 1]
                // (width×batch), the sizes these buffers were allocated with).
                capture(&w[l], &h[l], &mut h[l + 1], |s, (w, x, mut y)| unsafe {
                    s.stream();
                    blas.gemm(gemm, &w, &x, &mut y)
                });
                k.bias_relu(rows, cols, &b[l], &mut h[l + 1]).launch(cfg);
            }
            copy(&h[4], &mut out);
        })?;
    }
    stream.synchronize()?;
    Ok(t.elapsed().as_secs_f64())
}

fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let ctx = cudagraph::context(0)?;
    // A stream of its own: the legacy default stream cannot be captured.
    let stream = ctx.new_stream()?;
    // A workspace of cuBLAS's own, set once: without it cuBLAS allocates one while captured
    // (`cudaMallocAsync`, a memory-allocation node), which a child graph cannot hold.
    let workspace = stream.alloc_zeros::<u8>(WORKSPACE_BYTES)?;
    let blas = CudaBlas::new(stream.clone())?;
    {
        let (ptr, _sync) = workspace.device_ptr(&stream);
        // SAFETY: `workspace` is device memory of the handle's context, `WORKSPACE_BYTES` long,
        // and outlives `blas` (declared before it, so dropped after it).
        let status = unsafe {
            cublas_sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, WORKSPACE_BYTES)
        };
        if status != cublas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(format!("cublasSetWorkspace: {status:?}").into());
        }
    }
    // SAFETY: `Mlp`'s declaration matches `kernels/mlp.cu`.
    let k = unsafe { Mlp::load(&ctx, compile_ptx(SOURCE)?)? };
    println!("device: {}", ctx.name()?);
    println!(
        "{LAYERS} layers, each a captured cuBLAS SGEMM + bias_relu kernel; {} steps; input changes every step",
        args.steps
    );
    println!(
        "{:>6} {:>6} | {:>12} {:>12} {:>8} | {:>8} | stats (graph)",
        "batch", "width", "graph µs", "eager µs", "speed-up", "outputs"
    );
    let mut all_ok = true;
    for &width in &args.widths {
        for &batch in &args.batches {
            let n = batch * width;
            let mut net = Net {
                w: (0..LAYERS)
                    .map(|l| {
                        stream.clone_htod(&values(width * width, l as u64, 1.0 / width as f32))
                    })
                    .collect::<Result<_, _>>()?,
                b: (0..LAYERS)
                    .map(|l| stream.clone_htod(&values(width, 100 + l as u64, 0.1)))
                    .collect::<Result<_, _>>()?,
                h: (0..=LAYERS).map(|_| stream.alloc_zeros::<f32>(n)).collect::<Result<_, _>>()?,
                inputs: stream.clone_htod(&values(n * args.steps, 7, 1.0))?,
            };
            let mut out_graph = stream.alloc_zeros::<f32>(n * args.steps)?;
            let mut out_eager = stream.alloc_zeros::<f32>(n * args.steps)?;
            let sizes = (batch, width, args.steps);
            // Warm-up of both paths (cuBLAS heuristics, module load, first instantiation).
            let mut cache = GraphCache::new();
            let mut eager = GraphCache::new();
            eager.set_mode(Mode::Eager);
            let warm = (batch, width, 2.min(args.steps));
            run_steps(&stream, &blas, &k, &mut net, &mut out_graph, warm, &mut cache)?;
            run_steps(&stream, &blas, &k, &mut net, &mut out_eager, warm, &mut eager)?;
            let tg = run_steps(&stream, &blas, &k, &mut net, &mut out_graph, sizes, &mut cache)?;
            let te = run_steps(&stream, &blas, &k, &mut net, &mut out_eager, sizes, &mut eager)?;
            let g = stream.clone_dtoh(&out_graph)?;
            let e = stream.clone_dtoh(&out_eager)?;
            let same = g.iter().zip(&e).all(|(a, b)| a.to_bits() == b.to_bits());
            let finite = g.iter().all(|v| v.is_finite()) && g.iter().any(|&v| v != 0.0);
            all_ok &= same && finite;
            let s = cache.stats();
            let per = |t: f64| t / args.steps as f64 * 1e6;
            println!(
                "{batch:>6} {width:>6} | {:>12.2} {:>12.2} {:>7.2}x | {:>8} | launches {} builds {} node updates {} exec updates {} reinstantiations {}",
                per(tg),
                per(te),
                te / tg,
                if !finite {
                    "ZERO/NaN"
                } else if same {
                    "bit-exact"
                } else {
                    "DIFFER"
                },
                s.launches,
                s.builds,
                s.node_updates,
                s.exec_updates,
                s.reinstantiations,
            );
        }
    }
    if !all_ok {
        eprintln!("mlp: FAILED (graph and eager outputs differ, or are all zero / not finite)");
    }
    Ok(all_ok)
}

fn main() -> ExitCode {
    cli::main("mlp", &[], |a: &Args| a.plan, run)
}
