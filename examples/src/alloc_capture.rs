//! A library that allocates every op's output, captured: the pattern of `candle_mlp` with
//! cudarc alone (no candle, no nvcc: kernels compiled at run time by NVRTC).
//!
//! ```text
//! alloc_capture [--steps S] [--batch B,B…] [--width W] [--layers L] [--repeats R] [--plan]
//! ```
//! The "library" (`Lib`) is written as a tensor library is: on a `CudaContext` object and a
//! stream of its own, event tracking off (it orders everything by its one stream), with a
//! parameter of its own made before any capture (a bias), and each op allocating its output
//! (`stream.alloc::<f32>(n)`, `cuMemAllocAsync`) and the scratch it needs, which it drops
//! (`cuMemFreeAsync`) before returning. Its forward, `x` of `batch × W`, is `L` layers (default
//! 3) of `h = center(relu(a·h + bias)) + h` (the centering subtracts each row's mean, from a
//! scratch buffer), from a fresh copy of the input to the output.
//!
//! For each batch size `B` (default 1,8) it runs `S` steps (default 200), step `i` reading
//! input `i` of a device buffer of `S` inputs, two ways:
//! - **graph**: one `graph!` call per step: a copy of input `i` into a fixed buffer `x`, a keyed
//!   `capture` statement that forks the library's stream into the capture and runs the forward
//!   from `x` to a fixed buffer `y` (recorded by the first call only: its operands and key never
//!   change; every buffer the library makes inside is graph memory: an allocation node where it
//!   is made, a free node where it is dropped, all dropped before the closure returns), and a copy
//!   of `y` into output `i`;
//! - **eager**: the same forward on the library's stream directly, input `i` to output `i`.
//!
//! It checks that every step's output is bit-identical in both (the largest absolute
//! difference, 0 when they are), and prints the median µs per step of each (of `--repeats`
//! timed runs) and eager ÷ graph. `--plan` prints the step's graph as Graphviz DOT without
//! touching CUDA. Without a CUDA driver the run exits with status 2 and one line saying so;
//! `--help` lists the arguments.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudagraph::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DriverError, LaunchConfig,
    PushKernelArg,
};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, graph};

#[path = "cli.rs"]
mod cli;
#[path = "models.rs"]
mod models;

use models::{median, positive, values, verdict};

const SOURCE: &str = include_str!("../kernels/alloc_capture.cu");

/// A small library whose every op allocates its output, captured into a `graph!` step and
/// replayed for new inputs, checked bit for bit against the same library run eagerly.
///
/// Without a CUDA GPU: says so, prints the step's graph plan and exits with status 2.
#[derive(clap::Parser)]
#[command(name = "alloc_capture")]
struct Args {
    /// Steps per batch size and way; each step reads its own input.
    #[arg(long, default_value_t = 200, value_parser = positive)]
    steps: usize,
    /// Batch sizes (rows of the input), comma-separated.
    #[arg(long = "batch", value_name = "B,B…", value_delimiter = ',', default_value = "1,8", value_parser = positive)]
    batches: Vec<usize>,
    /// Row width.
    #[arg(long, default_value_t = 1024, value_parser = positive)]
    width: usize,
    /// Layers of the forward (4 kernels, 4 allocations and 4 frees each).
    #[arg(long, default_value_t = 3, value_parser = positive)]
    layers: usize,
    /// Timed runs of the `--steps` steps per way; the table shows their median.
    #[arg(long, default_value_t = 5, value_parser = positive)]
    repeats: usize,
    /// Print the step's graph plan as Graphviz DOT and exit, without touching CUDA.
    #[arg(long)]
    plan: bool,
}

/// One thread per element (or row) of `n`, blocks of 256.
fn cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The library: its own context object (event tracking off) and stream, its kernels, and a
/// parameter made before any capture.
struct Lib {
    stream: Arc<CudaStream>,
    affine: CudaFunction,
    relu: CudaFunction,
    row_mean: CudaFunction,
    center_add: CudaFunction,
    bias: CudaSlice<f32>,
    width: usize,
    layers: usize,
}

impl Lib {
    fn new(width: usize, layers: usize) -> Result<Self, Box<dyn Error>> {
        // Another `CudaContext` object of the device's primary context than the step's.
        let ctx = cudagraph::context(0)?;
        // SAFETY: everything the library does is on its one stream; the capture's stream is
        // joined with it by `Capture::fork`/`join`, and eagerly the step's buffers keep their
        // own events (another context object, tracking on). No buffer of this object exists.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let module = ctx.load_module(compile_ptx(SOURCE)?)?;
        Ok(Self {
            affine: module.load_function("affine")?,
            relu: module.load_function("relu")?,
            row_mean: module.load_function("row_mean")?,
            center_add: module.load_function("center_add")?,
            bias: stream.clone_htod(&values(width, 3, 0.1))?,
            stream,
            width,
            layers,
        })
    }

    /// `a·x + bias` (bias per column), a new buffer.
    fn affine(&self, x: &CudaSlice<f32>, a: f32) -> Result<CudaSlice<f32>, DriverError> {
        let (n, cols) = (x.len() as u32, self.width as u32);
        // SAFETY: written in full by the kernel.
        let mut y = unsafe { self.stream.alloc::<f32>(x.len()) }?;
        let mut b = self.stream.launch_builder(&self.affine);
        b.arg(&n).arg(&cols).arg(&a).arg(&self.bias).arg(x).arg(&mut y);
        // SAFETY: the arguments match `affine` in kernels/alloc_capture.cu; x, y hold n, bias cols.
        unsafe { b.launch(cfg(x.len())) }?;
        Ok(y)
    }

    /// `max(x, 0)`, a new buffer.
    fn relu(&self, x: &CudaSlice<f32>) -> Result<CudaSlice<f32>, DriverError> {
        let n = x.len() as u32;
        // SAFETY: written in full by the kernel.
        let mut y = unsafe { self.stream.alloc::<f32>(x.len()) }?;
        let mut b = self.stream.launch_builder(&self.relu);
        b.arg(&n).arg(x).arg(&mut y);
        // SAFETY: the arguments match `relu`; x, y hold n.
        unsafe { b.launch(cfg(x.len())) }?;
        Ok(y)
    }

    /// `x - mean(row of x) + skip`, a new buffer; the row means in a scratch buffer, freed
    /// before it returns.
    fn center_add(
        &self,
        x: &CudaSlice<f32>,
        skip: &CudaSlice<f32>,
    ) -> Result<CudaSlice<f32>, DriverError> {
        let (rows, cols) = ((x.len() / self.width) as u32, self.width as u32);
        // SAFETY: both written in full by the kernels.
        let mut mean = unsafe { self.stream.alloc::<f32>(rows as usize) }?;
        let mut y = unsafe { self.stream.alloc::<f32>(x.len()) }?;
        let mut b = self.stream.launch_builder(&self.row_mean);
        b.arg(&rows).arg(&cols).arg(x).arg(&mut mean);
        // SAFETY: the arguments match `row_mean`; x holds rows·cols, mean rows.
        unsafe { b.launch(cfg(rows as usize)) }?;
        let mut b = self.stream.launch_builder(&self.center_add);
        b.arg(&rows).arg(&cols).arg(x).arg(&mean).arg(skip).arg(&mut y);
        // SAFETY: the arguments match `center_add`; x, skip, y hold rows·cols, mean rows.
        unsafe { b.launch(cfg(x.len())) }?;
        drop(mean);
        Ok(y)
    }

    /// One step on the library's stream: `src` copied into a new buffer, the layers, the result
    /// copied into `dst`. Every buffer it makes is dropped before it returns.
    fn forward(
        &self,
        src: &impl DevicePtr<f32>,
        dst: &mut impl DevicePtrMut<f32>,
    ) -> Result<(), DriverError> {
        // SAFETY: written in full by the copy.
        let mut h = unsafe { self.stream.alloc::<f32>(src.len()) }?;
        self.stream.memcpy_dtod(src, &mut h)?;
        for l in 0..self.layers {
            let a = self.affine(&h, 1.5 - 0.25 * l as f32)?;
            let r = self.relu(&a)?;
            drop(a);
            h = self.center_add(&r, &h)?;
        }
        self.stream.memcpy_dtod(&h, dst)
    }
}

/// The buffers of one batch size: every step's input, and the graph's fixed input and output
/// of the captured forward.
struct Io {
    inputs: CudaSlice<f32>,
    x: CudaSlice<f32>,
    y: CudaSlice<f32>,
}

/// `steps` steps through `graph!` (input `i` copied into `io.x`, the captured forward from
/// `io.x` to `io.y`, `io.y` copied into output `i`). Returns seconds, idle to idle.
fn run_graph(
    stream: &Arc<CudaStream>,
    lib: &Arc<Lib>,
    io: &mut Io,
    outputs: &mut CudaSlice<f32>,
    steps: usize,
    cache: &mut GraphCache,
) -> Result<f64, Box<dyn Error>> {
    let n = io.x.len();
    let Io { inputs, x, y } = io;
    stream.synchronize()?;
    lib.stream.synchronize()?;
    let t = Instant::now();
    for i in 0..steps {
        let input = inputs.slice(i * n..(i + 1) * n);
        let mut out = outputs.slice_mut(i * n..(i + 1) * n);
        graph!(cache, stream, {
            copy(&input, &mut *x);
            // Keyed: recorded by the first call only, replayed by every later launch.
            // SAFETY: `fork` joins the library's stream into the capture; what the library
            // enqueues there reads `x`'s view and its own `bias` (alive in the key's `Arc` as
            // long as the recording), writes `y`'s view, and allocates and frees only its own
            // buffers, each dropped before the closure returns (graph memory, freed by the
            // recording); its module stays loaded with its functions (in the key); no host copy;
            // waits only on the views' events, recorded in this capture (tracking is off on its
            // context). Joined back on error too.
            capture(&*x, &mut *y, key = lib.clone(), |cap, lib, (x, mut y)| unsafe {
                cap.fork(&lib.stream)?;
                let r = lib.forward(x.as_cuda_view(), y.as_cuda_view_mut());
                cap.join(&lib.stream)?;
                r?;
                Ok::<(), Box<dyn Error + Send + Sync>>(())
            });
            copy(&*y, &mut out);
        })?;
    }
    stream.synchronize()?;
    lib.stream.synchronize()?;
    Ok(t.elapsed().as_secs_f64())
}

/// `steps` steps with the library directly on its stream, input `i` to output `i`. Returns
/// seconds, idle to idle.
fn run_eager(
    stream: &Arc<CudaStream>,
    lib: &Lib,
    io: &Io,
    outputs: &mut CudaSlice<f32>,
    steps: usize,
) -> Result<f64, Box<dyn Error>> {
    let n = io.x.len();
    stream.synchronize()?;
    lib.stream.synchronize()?;
    let t = Instant::now();
    for i in 0..steps {
        lib.forward(
            &io.inputs.slice(i * n..(i + 1) * n),
            &mut outputs.slice_mut(i * n..(i + 1) * n),
        )?;
    }
    lib.stream.synchronize()?;
    stream.synchronize()?;
    Ok(t.elapsed().as_secs_f64())
}

fn run(args: &Args) -> Result<bool, Box<dyn Error>> {
    let ctx = cudagraph::context(0)?;
    // The step's stream, on `cudagraph`'s context object (event tracking on).
    let stream = ctx.new_stream()?;
    // In an `Arc`: the capture statement's key holds it (a recording is of this library).
    let lib = Arc::new(Lib::new(args.width, args.layers)?);
    println!("device: {}", ctx.name()?);
    println!(
        "{} layers of center(relu(a·h + bias)) + h, width {}, each op allocating its output; {} steps, \
         input changes every step; median of {} runs",
        args.layers, args.width, args.steps, args.repeats
    );
    println!(
        "{:>6} | {:>9} {:>9} | {:>11} | {:>9} {:>9} | stats (graph)",
        "batch", "graph µs", "eager µs", "eager/graph", "max diff", "outputs"
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
        // Warm-up of both (the first graph call records and instantiates).
        let warm = 2.min(args.steps);
        let mut cache = GraphCache::new();
        run_eager(&stream, &lib, &io, &mut out_eager, warm)?;
        run_graph(&stream, &lib, &mut io, &mut out_graph, warm, &mut cache)?;
        let (mut tg, mut te) = (Vec::new(), Vec::new());
        for _ in 0..args.repeats {
            tg.push(run_graph(&stream, &lib, &mut io, &mut out_graph, args.steps, &mut cache)?);
            te.push(run_eager(&stream, &lib, &io, &mut out_eager, args.steps)?);
        }
        let (tg, te) = (median(tg), median(te));
        let (g, e) = (stream.clone_dtoh(&out_graph)?, stream.clone_dtoh(&out_eager)?);
        let same = g.iter().zip(&e).all(|(a, b)| a.to_bits() == b.to_bits());
        let max_diff = g.iter().zip(&e).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let (ok, word) = verdict(&g, same);
        all_ok &= ok;
        let s = cache.stats();
        let per = |t: f64| t / args.steps as f64 * 1e6;
        println!(
            "{batch:>6} | {:>9.2} {:>9.2} | {:>11.2} | {:>9.1e} {:>9} | launches {} builds {} node updates {} recordings {} reused {}",
            per(tg),
            per(te),
            te / tg,
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
            "alloc_capture: FAILED (graph and eager outputs differ, or are all zero / not finite)"
        );
    }
    Ok(all_ok)
}

fn main() -> ExitCode {
    cli::main("alloc_capture", &[], |a: &Args| a.plan, run)
}
