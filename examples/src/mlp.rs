//! A small multi-layer perceptron, one `graph!` call per step: each layer a cuBLAS GEMM
//! recorded by a `capture` statement plus this crate's own bias + ReLU kernel.
//!
//! ```text
//! mlp [--steps S] [--batch B,B…] [--width W,W…] [--plan]
//! ```
//! For each batch size `B` (default 1,8,64) and width `W` (default 256,1024), runs `S` steps
//! (default 200) of a 4-layer MLP (`h[l+1] = relu(W_l · h[l] + b_l)`, f32, column-major) whose
//! input changes every step (step `i` reads input `i` of a device buffer of `S` inputs, so the
//! graph's copy node gets a new pointer every step), five ways:
//! - **graph**: one `graph!` call per step. Each GEMM is a keyed `capture` statement, recorded
//!   by the first call only: its operands (weights and activations) and its key (the sizes and
//!   the cuBLAS handle) do not change, so later calls take the kept recording and only the two
//!   copy nodes (input in, output out) are updated. Buffers made with cudarc's event tracking
//!   off, as for the floor: `graph!` orders its buffers itself and a capture does not need
//!   cudarc's events;
//! - **graph\***: the same with cudarc's event tracking on (its default): each call also waits
//!   on and records every buffer's cudarc events (two or three driver calls per buffer);
//! - **floor**: the same step captured once with cudarc (`begin_capture`/`end_capture`) on the
//!   static buffers and replayed: copy in, `cuGraphLaunch`, copy out, with cudarc's event
//!   tracking off (what a hand-written graph costs; unsafe in general, right here: one stream);
//! - **plain**: the same calls with cudarc and cuBLAS directly, no graph, event tracking on
//!   (cudarc's default);
//! - **eager**: the `graph!` body run eagerly ([`Mode::Eager`]).
//!
//! Each of `--reps` rounds (default 5) times every column once, in turn; the table prints the
//! medians. It checks that every step's output is bit-identical in all five and prints the
//! per-step times and the ratios graph ÷ floor, plain ÷ graph and plain ÷ graph*.
//! `--plan` prints the step's graph as Graphviz DOT without touching CUDA. Without a CUDA driver
//! the run exits with status 2 and one line saying so; `--help` lists the arguments.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudagraph::cudarc::cublas::sys as cublas_sys;
use cudagraph::cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys::cublasOperation_t};
use cudagraph::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, Mode, graph, kernels};

#[path = "cli.rs"]
mod cli;
#[path = "models.rs"]
mod models;

use models::{median, positive, values, verdict};

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
    /// Rounds per (batch, width) pair: each round times every column once, in turn; the table
    /// prints each column's median.
    #[arg(long, default_value_t = 5, value_parser = positive)]
    reps: usize,
    /// Layer widths (rows), comma-separated.
    #[arg(long = "width", value_name = "W,W…", value_delimiter = ',', default_value = "256,1024", value_parser = positive)]
    widths: Vec<usize>,
    /// Print the step's graph plan as Graphviz DOT and exit, without touching CUDA.
    #[arg(long)]
    plan: bool,
}

/// The network's buffers for one size.
struct Net {
    w: Vec<CudaSlice<f32>>,
    b: Vec<CudaSlice<f32>>,
    h: Vec<CudaSlice<f32>>,
    inputs: CudaSlice<f32>,
}

/// cuBLAS's configuration of one layer's GEMM: `W (width×width) · h (width×batch)`.
fn gemm_config(batch: usize, width: usize) -> GemmConfig<f32> {
    GemmConfig {
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
    }
}

/// The bias + ReLU launch configuration for `batch × width` elements.
fn relu_cfg(batch: usize, width: usize) -> (u32, u32) {
    (((batch * width) as u32).div_ceil(256), 256u32)
}

/// Runs `steps` steps in `mode`, each step's output copied into `outputs`; returns seconds.
fn run_steps(
    stream: &Arc<CudaStream>,
    blas: &Arc<CudaBlas>,
    k: &Mlp,
    net: &mut Net,
    outputs: &mut CudaSlice<f32>,
    (batch, width, steps): (usize, usize, usize),
    cache: &mut GraphCache,
) -> cudagraph::Result<f64> {
    let n = batch * width;
    let (rows, cols) = (width as u32, batch as u32);
    let cfg = relu_cfg(batch, width);
    let Net { w, b, h, inputs } = net;
    stream.synchronize()?;
    let t = Instant::now();
    for i in 0..steps {
        let x = inputs.slice(i * n..(i + 1) * n);
        let mut out = outputs.slice_mut(i * n..(i + 1) * n);
        graph!(cache, stream, {
            copy(&x, &mut h[0]);
            for l in 0..4 {
                // Keyed: recorded again only if the sizes, the handle or the buffers change.
                // SAFETY: `s.stream()` joins the step's stream (`blas`'s) into the capture; the
                // GEMM on it touches only the listed views and cuBLAS's own workspace, set
                // before and alive while the cache (which keeps the recordings) is
                // (`gemm_config` describes W (width×width), h[l] and h[l + 1] (width×batch),
                // the sizes these buffers were allocated with).
                capture(
                    &w[l],
                    &h[l],
                    &mut h[l + 1],
                    key = (batch, width, blas.clone()),
                    |s, (batch, width, blas), (w, x, mut y)| unsafe {
                        s.stream();
                        blas.gemm(gemm_config(*batch, *width), &w, &x, &mut y)
                    },
                );
                k.bias_relu(rows, cols, &b[l], &mut h[l + 1]).launch(cfg);
            }
            copy(&h[4], &mut out);
        })?;
    }
    stream.synchronize()?;
    Ok(t.elapsed().as_secs_f64())
}

/// One step's work with cudarc and cuBLAS directly on `stream`, from `h[0]` to `h[4]`.
fn layers(
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    k: &Mlp,
    net: &mut Net,
    (batch, width): (usize, usize),
) -> Result<(), Box<dyn std::error::Error>> {
    let f = k.function("bias_relu").expect("declared in kernels!");
    let (rows, cols) = (width as u32, batch as u32);
    let (gx, bx) = relu_cfg(batch, width);
    let cfg = LaunchConfig { grid_dim: (gx, 1, 1), block_dim: (bx, 1, 1), shared_mem_bytes: 0 };
    for l in 0..LAYERS {
        let (lo, hi) = net.h.split_at_mut(l + 1);
        // SAFETY: `gemm_config` describes W (width×width), h[l] and h[l + 1] (width×batch).
        unsafe { blas.gemm(gemm_config(batch, width), &net.w[l], &lo[l], &mut hi[0]) }?;
        // SAFETY: the arguments match `bias_relu` in kernels/mlp.cu; h[l + 1] holds rows·cols.
        unsafe {
            stream
                .launch_builder(f)
                .arg(&rows)
                .arg(&cols)
                .arg(&net.b[l])
                .arg(&mut hi[0])
                .launch(cfg)
        }?;
    }
    Ok(())
}

/// The floor: the step captured once with cudarc on the static buffers and replayed (copy the
/// input in, `cuGraphLaunch`, copy the output out), with event tracking off. Returns seconds.
fn run_floor(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    k: &Mlp,
    net: &mut Net,
    outputs: &mut CudaSlice<f32>,
    (batch, width, steps): (usize, usize, usize),
) -> Result<f64, Box<dyn std::error::Error>> {
    let n = batch * width;
    stream.synchronize()?;
    // SAFETY: everything below runs on `stream` alone, so cudarc's events are not needed to
    // order it; tracking is back on before the function returns (also on error, below).
    unsafe { ctx.disable_event_tracking() };
    let r = (|| -> Result<f64, Box<dyn std::error::Error>> {
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let captured = layers(stream, blas, k, net, (batch, width));
        let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
        captured?;
        let graph = graph.ok_or("the capture recorded nothing")?;
        graph.upload()?;
        timed_steps(stream, net, outputs, (n, steps), |_| Ok(graph.launch()?))
    })();
    let _ = stream.synchronize();
    // SAFETY: back to cudarc's default, the stream idle.
    unsafe { ctx.enable_event_tracking() };
    r
}

/// The same steps with plain cudarc and cuBLAS calls, event tracking on. Returns seconds.
fn run_plain(
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    k: &Mlp,
    net: &mut Net,
    outputs: &mut CudaSlice<f32>,
    (batch, width, steps): (usize, usize, usize),
) -> Result<f64, Box<dyn std::error::Error>> {
    let n = batch * width;
    timed_steps(stream, net, outputs, (n, steps), |net| {
        layers(stream, blas, k, net, (batch, width))
    })
}

/// Runs `steps` steps of `n` elements on `stream` (input `i` copied into `h[0]`, `step`, then
/// `h[LAYERS]` copied into output `i`), from an idle stream to an idle stream. Returns seconds.
fn timed_steps(
    stream: &Arc<CudaStream>,
    net: &mut Net,
    outputs: &mut CudaSlice<f32>,
    (n, steps): (usize, usize),
    mut step: impl FnMut(&mut Net) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<f64, Box<dyn std::error::Error>> {
    stream.synchronize()?;
    let t = Instant::now();
    for i in 0..steps {
        stream.memcpy_dtod(&net.inputs.slice(i * n..(i + 1) * n), &mut net.h[0])?;
        step(net)?;
        stream.memcpy_dtod(&net.h[LAYERS], &mut outputs.slice_mut(i * n..(i + 1) * n))?;
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
    // In an `Arc`: the capture statements' key holds it (a recording is of this handle).
    let blas = Arc::new(CudaBlas::new(stream.clone())?);
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
        "{:>6} {:>6} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>11} {:>11} {:>12} | {:>9} | stats (graph)",
        "batch",
        "width",
        "graph µs",
        "graph* µs",
        "floor µs",
        "plain µs",
        "eager µs",
        "graph/floor",
        "plain/graph",
        "plain/graph*",
        "outputs"
    );
    let mut all_ok = true;
    for &width in &args.widths {
        for &batch in &args.batches {
            let n = batch * width;
            let make_net = || -> Result<Net, Box<dyn std::error::Error>> {
                Ok(Net {
                    w: (0..LAYERS)
                        .map(|l| {
                            stream.clone_htod(&values(width * width, l as u64, 1.0 / width as f32))
                        })
                        .collect::<Result<_, _>>()?,
                    b: (0..LAYERS)
                        .map(|l| stream.clone_htod(&values(width, 100 + l as u64, 0.1)))
                        .collect::<Result<_, _>>()?,
                    h: (0..=LAYERS)
                        .map(|_| stream.alloc_zeros::<f32>(n))
                        .collect::<Result<_, _>>()?,
                    inputs: stream.clone_htod(&values(n * args.steps, 7, 1.0))?,
                })
            };
            // With cudarc's event tracking on (its default): plain, graph*, eager.
            let mut net = make_net()?;
            // Made with event tracking off (the buffers have no cudarc events): graph, floor.
            // SAFETY: every buffer of this program is used on `stream` alone.
            unsafe { ctx.disable_event_tracking() };
            let net_off = make_net();
            // SAFETY: back to cudarc's default.
            unsafe { ctx.enable_event_tracking() };
            let mut net_off = net_off?;
            let mut out = Vec::new();
            for _ in 0..5 {
                out.push(stream.alloc_zeros::<f32>(n * args.steps)?);
            }
            let [og, ot, of, op, oe] = &mut out[..] else { unreachable!("five outputs") };
            let sizes = (batch, width, args.steps);
            // Warm-up of every path (cuBLAS heuristics, module load, first instantiation).
            let (mut cache, mut tracked, mut eager) =
                (GraphCache::new(), GraphCache::new(), GraphCache::new());
            eager.set_mode(Mode::Eager);
            let warm = (batch, width, 2.min(args.steps));
            run_steps(&stream, &blas, &k, &mut net_off, og, warm, &mut cache)?;
            run_steps(&stream, &blas, &k, &mut net, ot, warm, &mut tracked)?;
            run_steps(&stream, &blas, &k, &mut net, oe, warm, &mut eager)?;
            run_plain(&stream, &blas, &k, &mut net, op, warm)?;
            let mut t: [Vec<f64>; 5] = Default::default();
            for _ in 0..args.reps {
                t[0].push(run_steps(&stream, &blas, &k, &mut net_off, og, sizes, &mut cache)?);
                t[1].push(run_steps(&stream, &blas, &k, &mut net, ot, sizes, &mut tracked)?);
                t[2].push(run_floor(&ctx, &stream, &blas, &k, &mut net_off, of, sizes)?);
                t[3].push(run_plain(&stream, &blas, &k, &mut net, op, sizes)?);
                t[4].push(run_steps(&stream, &blas, &k, &mut net, oe, sizes, &mut eager)?);
            }
            let [tg, tt, tf, tp, te] = t.map(median);
            let g = stream.clone_dtoh(og)?;
            let bits = |o: &CudaSlice<f32>| -> Result<bool, Box<dyn std::error::Error>> {
                let v = stream.clone_dtoh(o)?;
                Ok(g.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()))
            };
            let same = bits(ot)? && bits(oe)? && bits(of)? && bits(op)?;
            let (ok, word) = verdict(&g, same);
            all_ok &= ok;
            let s = cache.stats();
            let per = |t: f64| t / args.steps as f64 * 1e6;
            println!(
                "{batch:>6} {width:>6} | {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} | {:>11.3} {:>11.3} {:>12.3} | {:>9} | launches {} builds {} node updates {} exec updates {} reinstantiations {} recordings {} reused {}",
                per(tg),
                per(tt),
                per(tf),
                per(tp),
                per(te),
                tg / tf,
                tp / tg,
                tp / tt,
                word,
                s.launches,
                s.builds,
                s.node_updates,
                s.exec_updates,
                s.reinstantiations,
                s.captures,
                s.capture_reuses,
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
