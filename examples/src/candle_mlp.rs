//! A small candle model whose forward is one keyed `capture` statement of a `graph!` step,
//! replayed for a new input every step and checked bit for bit against eager candle.
//!
//! ```text
//! candle_mlp [--steps S] [--batch B,B…] [--width W] [--hidden H] [--plan]
//! ```
//! Built only with the examples' `candle` feature (candle's CUDA back end; it needs nvcc to
//! build: `source examples/candle-env.sh` first, README "candle"):
//! `cargo run --release -p cudagraph-examples --features candle --bin candle_mlp`.
//!
//! The model (f32, random weights made here from a fixed seed), `x` of `batch × W`:
//! `Linear(W→H) → GELU → LayerNorm(H) → Linear(H→H) → GELU → LayerNorm(H) → Linear(H→W)`
//! (`candle_nn::Linear`, `Tensor::gelu`, `candle_nn::LayerNorm`; default `W` 256, `H` 512).
//! For each batch size `B` (default 1,8) it runs `S` steps (default 200), step `i` reading
//! input `i` of a device buffer of `S` inputs, three ways:
//! - **graph**: one `graph!` call per step: a copy of input `i` into a fixed buffer `x`, a keyed
//!   `capture` statement that runs the model's forward from `x` to a fixed buffer `y` (recorded
//!   by the first call only: its operands and key never change), a copy of `y` into output `i`.
//!   Every launch after the first sends the two copies' new pointers and replays the forward;
//! - **eager**: the same forward with candle directly (copy input `i` into a fresh input tensor,
//!   `forward`, copy the output into output `i`), candle as it runs by default;
//! - **eager, params cached**: the same with candle's parameter cache on
//!   (`CudaDevice::enable_cuda_graph_htod_cache`, which the capture needs, see below): what
//!   candle's eager forward costs without its per-op uploads of shapes and strides.
//!
//! It checks that every step's output is bit-identical in all three (the largest absolute
//! difference, 0 when they are), and prints the median µs per step of each (of `--repeats`
//! timed runs) and eager ÷ graph.
//!
//! What candle does while captured, and what this example does about it:
//! - **every op allocates its output** (`CudaStream::alloc`, `cuMemAllocAsync` on candle's
//!   stream) and every temporary it drops is freed (`cuMemFreeAsync`): inside the capture these
//!   are graph memory, an allocation node and a free node each, freed by the recording, so
//!   nothing candle made inside the closure may be used after it (the closure copies the output
//!   into the listed `y` and drops every tensor before it returns);
//! - **a non-contiguous op uploads its shape and strides** from host memory (a broadcast bias
//!   add, here): captured, that copy would be replayed from host memory long gone. candle's
//!   parameter cache (`enable_cuda_graph_htod_cache`, a guard) uploads each such vector once,
//!   keeps it on the device, and refuses an upload while its stream captures ("h2d param cache
//!   miss during CUDA graph capture"): the guard is held by the warm-up forward (which fills
//!   the cache for this batch size) and inside the capture;
//! - **modules are loaded on first use** (`cuModuleLoadData`, not a stream operation): the
//!   warm-up forward loads them before the first capture; candle's device keeps them loaded,
//!   and the key (the model's `Arc`, which holds the device) keeps the device alive with the
//!   recording;
//! - **cuBLAS** (candle's handle, bound to candle's stream) allocates a workspace while
//!   captured unless it has one: the model sets one (32 MiB) before any forward;
//! - **cudarc's event tracking** would make every use of a weight wait on an event recorded
//!   outside the capture (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`): candle's device is made on a
//!   `CudaContext` object of its own (the same device and primary context as the step's) with
//!   event tracking off, before any tensor exists; candle orders its work by its one stream.
//!   The step's stream keeps tracking on, as `Capture::fork` requires; the closure forks
//!   candle's stream into the capture (`Capture::fork`), runs the forward there and joins it
//!   back (`Capture::join`) before it copies the output (candle's stream manages no events, so
//!   the join is what orders the two: `fork`'s contract).
//!
//! `--plan` prints the step's graph as Graphviz DOT without touching CUDA; `--help` lists the
//! arguments. Unlike the other examples it links the CUDA libraries (candle asks cudarc for
//! `dynamic-linking`, which then holds for the whole workspace): it starts only where
//! `libcuda.so.1`, `libcublas.so.13`, `libcurand.so.10` and `libcudart.so.13` can be found.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, Device, Module, Storage, Tensor};
use candle_nn::{LayerNorm, Linear};
use cudagraph::cudarc::cublas::sys as cublas_sys;
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudagraph::{GraphCache, graph};

#[path = "cli.rs"]
mod cli;
#[path = "models.rs"]
mod models;

use models::{median, positive, values, verdict};

/// cuBLAS's workspace (its documented recommendation for graph capture on Hopper: 32 MiB).
const WORKSPACE_BYTES: usize = 32 << 20;
/// LayerNorm's epsilon.
const EPS: f64 = 1e-5;

/// A small candle model (Linear + GELU + LayerNorm layers, f32, random weights) whose forward
/// is captured into a `graph!` step and replayed for new inputs, checked bit for bit against
/// eager candle.
///
/// It links the CUDA libraries (candle asks cudarc for `dynamic-linking`): without them it
/// does not start; with them but no GPU it says so and exits with status 2.
#[derive(clap::Parser)]
#[command(name = "candle_mlp")]
struct Args {
    /// Steps per batch size and way; each step reads its own input.
    #[arg(long, default_value_t = 200, value_parser = positive)]
    steps: usize,
    /// Batch sizes (rows of the input), comma-separated.
    #[arg(long = "batch", value_name = "B,B…", value_delimiter = ',', default_value = "1,8", value_parser = positive)]
    batches: Vec<usize>,
    /// Input and output width.
    #[arg(long, default_value_t = 256, value_parser = positive)]
    width: usize,
    /// Hidden width.
    #[arg(long, default_value_t = 512, value_parser = positive)]
    hidden: usize,
    /// Timed runs of the `--steps` steps per way; the table shows their median.
    #[arg(long, default_value_t = 5, value_parser = positive)]
    repeats: usize,
    /// Print the step's graph plan as Graphviz DOT and exit, without touching CUDA.
    #[arg(long)]
    plan: bool,
}

/// The model, on a candle device of its own (see the module docs: its own `CudaContext`
/// object, event tracking off, its own stream).
struct Model {
    device: Device,
    linears: Vec<Linear>,
    norms: Vec<LayerNorm>,
    width: usize,
    /// cuBLAS's workspace, set on candle's handle (kept alive here; `Drop` unsets it).
    _workspace: CudaSlice<u8>,
}

impl Model {
    /// Makes the device and the weights (from `seed`); sets cuBLAS's workspace.
    fn new(width: usize, hidden: usize, seed: u64) -> Result<Self, Box<dyn Error>> {
        let device = Device::new_cuda_with_stream(0)?;
        let cuda = device.as_cuda_device()?;
        // SAFETY: candle orders everything it does by its one stream (this device's), and the
        // only other stream that touches its memory, the capture's, is joined with it by
        // `Capture::fork`/`join`; eagerly, the step's buffers keep their own events (another
        // context object, tracking on). No tensor exists yet.
        unsafe { cuda.disable_event_tracking() };
        let workspace = cuda.alloc_zeros::<u8>(WORKSPACE_BYTES)?;
        let blas = cuda.cublas_handle();
        {
            let stream = cuda.cuda_stream();
            let (ptr, _sync) = workspace.device_ptr(&stream);
            // SAFETY: device memory of the handle's context, `WORKSPACE_BYTES` long; `Drop`
            // unsets it before the memory is freed.
            let status = unsafe {
                cublas_sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, WORKSPACE_BYTES)
            };
            if status != cublas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(format!("cublasSetWorkspace: {status:?}").into());
            }
        }
        let tensor = |n: usize, shape: &[usize], seed: u64, scale: f32| {
            Tensor::from_vec(values(n, seed, scale), shape, &device)
        };
        let dims = [(width, hidden), (hidden, hidden), (hidden, width)];
        let mut linears = Vec::new();
        for (l, &(fan_in, fan_out)) in dims.iter().enumerate() {
            let s = seed + 10 * l as u64;
            let w =
                tensor(fan_in * fan_out, &[fan_out, fan_in], s, (fan_in as f32).recip().sqrt())?;
            let b = tensor(fan_out, &[fan_out], s + 1, 0.1)?;
            linears.push(Linear::new(w, Some(b)));
        }
        let mut norms = Vec::new();
        for l in 0..2u64 {
            let s = seed + 100 + 10 * l;
            let gamma = (tensor(hidden, &[hidden], s, 0.1)? + 1.0)?;
            let beta = tensor(hidden, &[hidden], s + 1, 0.1)?;
            norms.push(LayerNorm::new(gamma, beta, EPS));
        }
        cuda.cuda_stream().synchronize()?;
        Ok(Self { device, linears, norms, width, _workspace: workspace })
    }

    /// candle's device.
    fn cuda(&self) -> &CudaDevice {
        self.device.as_cuda_device().expect("made by Device::new_cuda_with_stream")
    }

    /// candle's stream: everything the model does is enqueued there.
    fn stream(&self) -> Arc<CudaStream> {
        self.cuda().cuda_stream()
    }

    /// `Linear → GELU → LayerNorm → Linear → GELU → LayerNorm → Linear`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = self.norms[0].forward(&self.linears[0].forward(x)?.gelu()?)?;
        let h = self.norms[1].forward(&self.linears[1].forward(&h)?.gelu()?)?;
        self.linears[2].forward(&h)
    }

    /// One step on candle's stream: `batch` rows of `src` copied into a fresh input tensor,
    /// [`forward`](Self::forward), the output copied into `dst`. Every tensor it makes is
    /// dropped before it returns (inside a capture: freed by the recording).
    fn run(
        &self,
        batch: usize,
        src: &impl DevicePtr<f32>,
        dst: &mut impl DevicePtrMut<f32>,
    ) -> candle_core::Result<()> {
        let cuda = self.cuda();
        let stream = cuda.cuda_stream();
        // SAFETY: written in full by the copy below before any read.
        let mut x = unsafe { cuda.alloc::<f32>(batch * self.width)? };
        stream.memcpy_dtod(src, &mut x).map_err(candle_core::Error::wrap)?;
        let x = Tensor::from_storage(
            Storage::Cuda(CudaStorage::wrap_cuda_slice(x, cuda.clone())),
            (batch, self.width),
            BackpropOp::none(),
            false,
        );
        let y = self.forward(&x)?;
        drop(x);
        let (storage, layout) = y.storage_and_layout();
        let Storage::Cuda(s) = &*storage else { candle_core::bail!("output not on the GPU") };
        let Some((lo, hi)) = layout.contiguous_offsets() else {
            candle_core::bail!("output not contiguous")
        };
        stream
            .memcpy_dtod(&s.as_cuda_slice::<f32>()?.slice(lo..hi), dst)
            .map_err(candle_core::Error::wrap)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let blas = self.cuda().cublas_handle();
        // SAFETY: no workspace: cuBLAS allocates its own again; the handle may outlive the
        // model (candle's device holds it), `workspace` does not.
        unsafe { cublas_sys::cublasSetWorkspace_v2(*blas.handle(), std::ptr::null_mut(), 0) };
    }
}

/// The buffers of one batch size: every step's input and output, and the graph's fixed input
/// and output of the captured forward.
struct Io {
    inputs: CudaSlice<f32>,
    x: CudaSlice<f32>,
    y: CudaSlice<f32>,
}

/// `steps` steps through `graph!` (input `i` copied into `io.x`, the captured forward from
/// `io.x` to `io.y`, `io.y` copied into output `i`). Returns seconds, idle to idle.
fn run_graph(
    stream: &Arc<CudaStream>,
    model: &Arc<Model>,
    io: &mut Io,
    outputs: &mut CudaSlice<f32>,
    (batch, steps): (usize, usize),
    cache: &mut GraphCache,
) -> Result<f64, Box<dyn Error>> {
    let n = io.x.len();
    let Io { inputs, x, y } = io;
    stream.synchronize()?;
    model.stream().synchronize()?;
    let t = Instant::now();
    for i in 0..steps {
        let input = inputs.slice(i * n..(i + 1) * n);
        let mut out = outputs.slice_mut(i * n..(i + 1) * n);
        graph!(cache, stream, {
            copy(&input, &mut *x);
            // Keyed: recorded by the first call only (the operands `x`, `y` and the key never
            // change), replayed by every later launch.
            // SAFETY: `fork` joins candle's stream into the capture; what the model enqueues
            // there reads `x`'s view and the model's weights, uses cuBLAS's workspace (both
            // alive in the key's `Arc` as long as the recording), writes `y`'s view, and
            // allocates and frees only its own
            // temporaries, each dropped before the closure returns (graph memory, freed by the
            // recording); its kernels' modules stay loaded with candle's device (in the key);
            // it copies nothing from or to the host (the parameter cache, filled by the warm-up,
            // refuses to) and waits only on the views' events, recorded in this capture
            // (tracking is off on candle's context). Joined back before the closure returns,
            // on error too.
            capture(
                &*x,
                &mut *y,
                key = (model.clone(), batch),
                |cap, (model, batch), (x, mut y)| unsafe {
                    let candle = model.stream();
                    cap.fork(&candle)?;
                    let params = model.cuda().enable_cuda_graph_htod_cache();
                    let r = model.run(*batch, x.as_cuda_view(), y.as_cuda_view_mut());
                    drop(params);
                    cap.join(&candle)?;
                    r?;
                    Ok::<(), Box<dyn Error + Send + Sync>>(())
                },
            );
            copy(&*y, &mut out);
        })?;
    }
    stream.synchronize()?;
    model.stream().synchronize()?;
    Ok(t.elapsed().as_secs_f64())
}

/// `steps` steps with candle directly on its stream ([`Model::run`] from input `i` to output
/// `i`), with candle's parameter cache on when `cached`. Returns seconds, idle to idle.
fn run_eager(
    stream: &Arc<CudaStream>,
    model: &Model,
    io: &Io,
    outputs: &mut CudaSlice<f32>,
    (batch, steps): (usize, usize),
    cached: bool,
) -> Result<f64, Box<dyn Error>> {
    let n = io.x.len();
    let params = cached.then(|| model.cuda().enable_cuda_graph_htod_cache());
    stream.synchronize()?;
    model.stream().synchronize()?;
    let t = Instant::now();
    for i in 0..steps {
        let input = io.inputs.slice(i * n..(i + 1) * n);
        model.run(batch, &input, &mut outputs.slice_mut(i * n..(i + 1) * n))?;
    }
    model.stream().synchronize()?;
    stream.synchronize()?;
    let s = t.elapsed().as_secs_f64();
    drop(params);
    Ok(s)
}

fn run(args: &Args) -> Result<bool, Box<dyn Error>> {
    let ctx = cudagraph::context(0)?;
    // The step's stream: a stream of its own (the legacy default stream cannot be captured),
    // on `cudagraph`'s context object (event tracking on).
    let stream = ctx.new_stream()?;
    // In an `Arc`: the capture statement's key holds it (a recording is of this model).
    let model = Arc::new(Model::new(args.width, args.hidden, 1)?);
    println!("device: {}", ctx.name()?);
    println!(
        "candle 0.11.1 model: Linear({w}→{h}) GELU LayerNorm Linear({h}→{h}) GELU LayerNorm Linear({h}→{w}), f32; \
         {} steps, input changes every step; median of {} runs",
        args.steps,
        args.repeats,
        w = args.width,
        h = args.hidden,
    );
    println!(
        "{:>6} | {:>9} {:>9} {:>13} | {:>11} {:>11} | {:>9} {:>9} | stats (graph)",
        "batch",
        "graph µs",
        "eager µs",
        "eager+cache µs",
        "eager/graph",
        "cache/graph",
        "max diff",
        "outputs"
    );
    let mut all_ok = true;
    for &batch in &args.batches {
        let n = batch * args.width;
        let mut io = Io {
            inputs: stream.clone_htod(&values(n * args.steps, 7 + batch as u64, 1.0))?,
            x: stream.alloc_zeros::<f32>(n)?,
            y: stream.alloc_zeros::<f32>(n)?,
        };
        let mut out_graph = stream.alloc_zeros::<f32>(n * args.steps)?;
        let mut out_eager = stream.alloc_zeros::<f32>(n * args.steps)?;
        let mut out_cached = stream.alloc_zeros::<f32>(n * args.steps)?;
        let sizes = (batch, args.steps);
        let warm = (batch, 2.min(args.steps));
        // Warm-up: candle loads its modules and (with the cache on) uploads this batch size's
        // shape and stride vectors; then the first graph call records and instantiates.
        run_eager(&stream, &model, &io, &mut out_cached, warm, true)?;
        run_eager(&stream, &model, &io, &mut out_eager, warm, false)?;
        let mut cache = GraphCache::new();
        run_graph(&stream, &model, &mut io, &mut out_graph, warm, &mut cache)?;
        let (mut tg, mut te, mut tc) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.repeats {
            tg.push(run_graph(&stream, &model, &mut io, &mut out_graph, sizes, &mut cache)?);
            te.push(run_eager(&stream, &model, &io, &mut out_eager, sizes, false)?);
            tc.push(run_eager(&stream, &model, &io, &mut out_cached, sizes, true)?);
        }
        let (tg, te, tc) = (median(tg), median(te), median(tc));
        let g = stream.clone_dtoh(&out_graph)?;
        let mut max_diff = 0f32;
        let mut same = true;
        for o in [&out_eager, &out_cached] {
            let v = stream.clone_dtoh(o)?;
            same &= g.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits());
            max_diff = g.iter().zip(&v).map(|(a, b)| (a - b).abs()).fold(max_diff, f32::max);
        }
        let (ok, word) = verdict(&g, same);
        all_ok &= ok;
        let s = cache.stats();
        let per = |t: f64| t / args.steps as f64 * 1e6;
        println!(
            "{batch:>6} | {:>9.2} {:>9.2} {:>13.2} | {:>11.2} {:>11.2} | {:>9.1e} {:>9} | launches {} builds {} node updates {} recordings {} reused {}",
            per(tg),
            per(te),
            per(tc),
            te / tg,
            tc / tg,
            max_diff,
            word,
            s.launches,
            s.builds,
            s.node_updates,
            s.captures,
            s.capture_reuses,
        );
    }
    if !all_ok {
        eprintln!(
            "candle_mlp: FAILED (graph and eager outputs differ, or are all zero / not finite)"
        );
    }
    Ok(all_ok)
}

fn main() -> ExitCode {
    cli::main("candle_mlp", &[], |a: &Args| a.plan, run)
}
