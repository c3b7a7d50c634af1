//! The heat step of `heat` split into horizontal slabs over 1 or 2 GPUs, one `graph!` call per
//! step, halos exchanged every step.
//!
//! ```text
//! heat_multi [--sizes 512,4096,16384] [--steps S] [--gpus 1,2] [--plan]
//! ```
//! The N×N field (the stencil and boundary kernels of `kernels/heat.cu`, as `heat` runs them) is
//! cut into horizontal slabs, one per GPU; each slab holds its rows plus one halo row above and
//! below, and the stencil and boundary kernels run on each slab on its own device (the kernels
//! are loaded once per device: each node runs on its `kernels!` struct's context). After the
//! step, each slab's edge row is copied into the neighbour's halo row:
//! (a) with peer copy nodes (`copy_2d` of one row, `Rows::from_row`, between the devices), or
//! (b) with NCCL send/recv captured into the graph (`capture` statement, `Capture::fork` and
//! `join`), only when built with the `nccl` feature (`--features cudagraph-examples/nccl`);
//! without it, (b) is skipped and said so.
//! Each configuration runs `S` steps (default 200) as a graph and eagerly (the same `graph!`
//! body in `Mode::Eager`); the final field is compared bit for bit with the single-GPU step
//! (one slab: `heat`'s stencil and boundary), and the per-step times and the scaling against
//! one GPU are printed. Asking for more GPUs than there are is an error (exit status 1). Without
//! a CUDA driver: one line saying so and the plans, exit status 2.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudagraph::cudarc::driver::sys::CUdevice_attribute;
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};
use cudagraph::{GraphCache, Mode, Rows, graph, kernels};

#[path = "cli.rs"]
mod cli;

const SOURCE: &str = include_str!("../kernels/heat.cu");

kernels! {
    /// The kernels of `kernels/heat.cu` that a step uses (see `heat.rs`).
    pub struct Heat {
        /// One explicit Euler step of the interior: `dst = src + alpha * laplacian(src)`.
        #[programmatic]
        fn stencil(nx: u32, ny: u32, alpha: f32, src: &[f32], dst: &mut [f32]);
        /// Dirichlet boundary: top edge 1, others 0.
        #[programmatic]
        fn boundary(nx: u32, ny: u32, u: &mut [f32]);
    }
}

/// The heat step over slabs of 1 or 2 GPUs, against the single-GPU step.
///
/// Without a CUDA GPU: says so, prints the steps' graph plans and exits with status 2.
#[derive(clap::Parser)]
#[command(name = "heat_multi")]
struct Args {
    /// Grid sides N (the field is N x N f32 cells), comma-separated (each at least 8).
    #[arg(long, value_delimiter = ',', default_values_t = [512u32, 4096, 16384])]
    sizes: Vec<u32>,
    /// Steps per run (at least 2).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(2..))]
    steps: u32,
    /// GPU counts to run, comma-separated: 1 and/or 2 (1 always runs: it is the reference).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    gpus: Vec<usize>,
    /// Print the steps' graph plans as Graphviz DOT and exit, without touching CUDA.
    #[arg(long)]
    plan: bool,
}

/// `heat.cu` compiled by NVRTC for the device's own architecture (see `heat.rs`: the
/// `#[programmatic]` declarations need `griddepcontrol.wait` compiled in).
fn compile(ctx: &CudaContext) -> cudagraph::Result<Ptx> {
    let major = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let options = vec![format!("--gpu-architecture=compute_{major}{minor}")];
    Ok(compile_ptx_with_opts(SOURCE, CompileOptions { options, ..Default::default() })?)
}

/// One GPU: its context, stream and the kernels loaded in its context.
struct Gpu {
    stream: Arc<CudaStream>,
    k: Heat,
}

/// One slab: global rows `first .. first + rows` of the field, the first and last of them halo
/// rows (or the field's own top and bottom edge), on one GPU.
struct Slab {
    u: CudaSlice<f32>,
    v: CudaSlice<f32>,
    /// Rows held, halos included.
    rows: u32,
    /// The global row of its row 0.
    first: u32,
}

impl Slab {
    fn new(gpu: &Gpu, n: u32, first: u32, rows: u32) -> cudagraph::Result<Slab> {
        let cells = n as usize * rows as usize;
        Ok(Slab {
            u: gpu.stream.alloc_zeros(cells)?,
            v: gpu.stream.alloc_zeros(cells)?,
            rows,
            first,
        })
    }

    /// The stencil's launch: one thread per cell of the slab.
    fn cfg(&self, n: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (n.div_ceil(16), self.rows.div_ceil(16), 1),
            block_dim: (16, 16, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// The slabs of an N×N field over `g` GPUs: the N - 2 interior rows shared out evenly, each
/// slab with one row more above and below.
fn slabs(gpus: &[Gpu], n: u32) -> cudagraph::Result<Vec<Slab>> {
    let g = gpus.len() as u32;
    let interior = n - 2;
    (0..g)
        .map(|i| {
            let (a, b) = (1 + interior * i / g, 1 + interior * (i + 1) / g);
            Slab::new(&gpus[i as usize], n, a - 1, b - a + 2)
        })
        .collect()
}

/// The halo exchange of two slabs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exchange {
    /// Peer copy nodes.
    Peer,
    /// NCCL send/recv captured into the graph.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    Nccl,
}

/// The NCCL communicators of the two GPUs (one process drives both: `Comm::from_devices`).
#[cfg(feature = "nccl")]
type Comms = Vec<cudarc::nccl::Comm>;
#[cfg(not(feature = "nccl"))]
type Comms = ();

/// One step of one slab (the single-GPU `heat` step without its checks): stencil u -> v, then
/// the boundary of v; the fields swap after the call.
fn step1(
    cache: &mut GraphCache,
    g: &Gpu,
    s: &mut Slab,
    n: u32,
    alpha: f32,
) -> cudagraph::Result<()> {
    let (k, rows, cfg, edge) = (&g.k, s.rows, s.cfg(n), LaunchConfig::for_num_elems(n));
    graph!(cache, &g.stream, {
        k.stencil(n, rows, alpha, &s.u, &mut s.v).launch(cfg);
        k.boundary(n, rows, &mut s.v).launch(edge);
    })?;
    std::mem::swap(&mut s.u, &mut s.v);
    Ok(())
}

/// One step of two slabs, on their own GPUs, launched from GPU 0's stream: each slab's stencil
/// and boundary, then slab 0's last own row into slab 1's top halo and slab 1's first own row
/// into slab 0's bottom halo.
#[allow(clippy::too_many_arguments)]
fn step2(
    cache: &mut GraphCache,
    gpus: &[Gpu],
    slabs: &mut [Slab],
    n: u32,
    alpha: f32,
    exchange: Exchange,
    #[cfg_attr(not(feature = "nccl"), allow(unused_variables))] comms: &Comms,
) -> cudagraph::Result<()> {
    let [a, b] = slabs else { panic!("two slabs") };
    let (k0, k1) = (&gpus[0].k, &gpus[1].k);
    let (ra, rb) = (a.rows, b.rows);
    let (ca, cb, edge) = (a.cfg(n), b.cfg(n), LaunchConfig::for_num_elems(n));
    let row = |r: u32| Rows::dense(n as usize, 1).from_row(r as usize);
    match exchange {
        Exchange::Peer => graph!(cache, &gpus[0].stream, {
            k0.stencil(n, ra, alpha, &a.u, &mut a.v).launch(ca);
            k1.stencil(n, rb, alpha, &b.u, &mut b.v).launch(cb);
            k0.boundary(n, ra, &mut a.v).launch(edge);
            k1.boundary(n, rb, &mut b.v).launch(edge);
            copy_2d(&a.v, row(ra - 2), &mut b.v, row(0));
            copy_2d(&b.v, row(1), &mut a.v, row(ra - 1));
        })?,
        #[cfg(feature = "nccl")]
        Exchange::Nccl => {
            use cudarc::nccl::{group_end, group_start};
            type BoxError = Box<dyn std::error::Error + Send + Sync>;
            let nccl =
                |e: cudarc::nccl::result::NcclError| -> BoxError { format!("NCCL: {e:?}").into() };
            let w = n as usize;
            let (s1, last, halo) = (&gpus[1].stream, (ra as usize - 2) * w, (ra as usize - 1) * w);
            graph!(cache, &gpus[0].stream, {
                k0.stencil(n, ra, alpha, &a.u, &mut a.v).launch(ca);
                k1.stencil(n, rb, alpha, &b.u, &mut b.v).launch(cb);
                k0.boundary(n, ra, &mut a.v).launch(edge);
                k1.boundary(n, rb, &mut b.v).launch(edge);
                capture(&mut a.v, &mut b.v, |s, (mut va, mut vb)| {
                    // SAFETY: the step's stream (comms[0]'s, joined by `s.stream()`) and `s1`
                    // (comms[1]'s) carry only NCCL's send/recv of the listed views until the
                    // closure returns; `s1` is joined back below.
                    unsafe {
                        s.stream();
                        s.fork(s1)?;
                    }
                    group_start().map_err(nccl)?;
                    comms[0].send(&va.slice(last..last + w), 1).map_err(nccl)?;
                    comms[0].recv(&mut va.slice_mut(halo..halo + w), 1).map_err(nccl)?;
                    comms[1].send(&vb.slice(w..2 * w), 0).map_err(nccl)?;
                    comms[1].recv(&mut vb.slice_mut(0..w), 0).map_err(nccl)?;
                    group_end().map_err(nccl)?;
                    s.join(s1)?;
                    Ok::<(), BoxError>(())
                });
            })?
        }
        #[cfg(not(feature = "nccl"))]
        Exchange::Nccl => unreachable!("NCCL exchange without the nccl feature"),
    }
    for s in slabs.iter_mut() {
        std::mem::swap(&mut s.u, &mut s.v);
    }
    Ok(())
}

/// The global field of the slabs (their own rows, and the field's top and bottom edges).
fn gather(gpus: &[Gpu], slabs: &[Slab], n: u32) -> cudagraph::Result<Vec<f32>> {
    let w = n as usize;
    let mut field = vec![0f32; w * w];
    let last = slabs.len() - 1;
    for (i, (g, s)) in gpus.iter().zip(slabs).enumerate() {
        let local = g.stream.clone_dtoh(&s.u)?;
        // Own rows 1 .. rows - 1, plus row 0 of the first slab and the last row of the last.
        let lo = if i == 0 { 0 } else { 1 };
        let hi = if i == last { s.rows } else { s.rows - 1 };
        for r in lo..hi {
            let gr = (s.first + r) as usize;
            field[gr * w..(gr + 1) * w]
                .copy_from_slice(&local[r as usize * w..(r as usize + 1) * w]);
        }
    }
    Ok(field)
}

/// Per-step wall time of `steps` calls of `step` after a first untimed one (build and
/// instantiation), every stream synchronized.
fn timed(
    gpus: &[Gpu],
    steps: u32,
    mut step: impl FnMut() -> cudagraph::Result<()>,
) -> cudagraph::Result<Duration> {
    step()?;
    for g in gpus {
        g.stream.synchronize()?;
    }
    let t = Instant::now();
    for _ in 1..steps {
        step()?;
    }
    for g in gpus {
        g.stream.synchronize()?;
    }
    Ok(t.elapsed() / (steps - 1))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn run(a: &Args) -> cudagraph::Result<bool> {
    let found = CudaContext::device_count()? as usize;
    let most = a.gpus.iter().copied().max().unwrap_or(1);
    if let Some(bad) = a.gpus.iter().find(|&&g| g != 1 && g != 2) {
        eprintln!("heat_multi: --gpus {bad}: this example runs on 1 or 2 GPUs");
        return Ok(false);
    }
    if most > found {
        eprintln!("heat_multi: asked for {most} GPUs, found {found}: nothing ran");
        return Ok(false);
    }
    if let Some(small) = a.sizes.iter().find(|&&n| n < 8) {
        eprintln!("heat_multi: --sizes {small}: the field must be at least 8 x 8");
        return Ok(false);
    }
    let gpus = (0..most.max(1))
        .map(|i| {
            let ctx = CudaContext::new(i)?;
            let stream = ctx.new_stream()?;
            // SAFETY: the declarations match the kernels, which stay within their buffers;
            // compiled for the device's architecture, every thread of each kernel executes
            // `griddepcontrol.wait` first (from compute capability 9.0 on).
            let k = unsafe { Heat::load(&ctx, compile(&ctx)?) }?;
            println!("GPU {i}: {}", ctx.name().unwrap_or_default());
            Ok(Gpu { stream, k })
        })
        .collect::<cudagraph::Result<Vec<_>>>()?;
    #[cfg(feature = "nccl")]
    let comms: Comms = if most >= 2 {
        let streams = gpus.iter().map(|g| g.stream.clone()).collect();
        cudarc::nccl::Comm::from_devices(streams).map_err(|e| cudagraph::Error::Capture {
            file: file!(),
            line: line!(),
            source: format!("ncclCommInitAll: {e:?}").into(),
        })?
    } else {
        Vec::new()
    };
    #[cfg(not(feature = "nccl"))]
    let comms: Comms = ();
    if most >= 2 && cfg!(not(feature = "nccl")) {
        println!(
            "NCCL exchange: not built (build with `--features cudagraph-examples/nccl` to run it); peer copies only"
        );
    }
    let alpha = 0.2f32;
    let mut ok = true;
    for &n in &a.sizes {
        // One GPU: the reference field and times.
        let one = &gpus[..1];
        let mut reference = None;
        let mut base = Duration::ZERO;
        for mode in [Mode::Graph, Mode::Eager] {
            let mut s = slabs(one, n)?.remove(0);
            let mut cache = GraphCache::new();
            cache.set_mode(mode);
            let t = timed(one, a.steps, || step1(&mut cache, &one[0], &mut s, n, alpha))?;
            let field = gather(one, std::slice::from_ref(&s), n)?;
            match &reference {
                None => {
                    reference = Some(field);
                    base = t;
                    println!("{n}x{n}, {} steps, 1 GPU:  graph {:9.2} µs/step", a.steps, us(t));
                }
                Some(r) => {
                    let same = bits(r) == bits(&field);
                    ok &= same;
                    println!(
                        "{n}x{n}, {} steps, 1 GPU:  eager {:9.2} µs/step ({})",
                        a.steps,
                        us(t),
                        if same { "bit-exact with the graph" } else { "NOT bit-exact" }
                    );
                }
            }
        }
        let reference = reference.expect("the graph run made it");
        if !a.gpus.contains(&2) {
            continue;
        }
        let two = &gpus[..2];
        let exchanges: &[Exchange] = if cfg!(feature = "nccl") {
            &[Exchange::Peer, Exchange::Nccl]
        } else {
            &[Exchange::Peer]
        };
        for &x in exchanges {
            let name = if x == Exchange::Peer { "peer copies" } else { "NCCL send/recv" };
            for mode in [Mode::Graph, Mode::Eager] {
                let mut s = slabs(two, n)?;
                let mut cache = GraphCache::new();
                cache.set_mode(mode);
                let t =
                    timed(two, a.steps, || step2(&mut cache, two, &mut s, n, alpha, x, &comms))?;
                let same = bits(&reference) == bits(&gather(two, &s, n)?);
                ok &= same;
                let m = if mode == Mode::Graph { "graph" } else { "eager" };
                println!(
                    "{n}x{n}, {} steps, 2 GPUs, {name}: {m} {:9.2} µs/step, {:.2}x the 1-GPU graph step rate ({})",
                    a.steps,
                    us(t),
                    us(base) / us(t),
                    if same { "bit-exact with 1 GPU" } else { "NOT bit-exact with 1 GPU" }
                );
                if mode == Mode::Graph {
                    let st = cache.stats();
                    println!(
                        "    stats: builds {} launches {} node updates {} reinstantiations {} stream waits {} peer enables {} captures {}",
                        st.builds,
                        st.launches,
                        st.node_updates,
                        st.reinstantiations,
                        st.stream_waits,
                        st.peer_enables,
                        st.captures
                    );
                }
            }
        }
    }
    if !ok {
        eprintln!("heat_multi: FAILED (a field differs from the single-GPU step)");
    }
    Ok(ok)
}

/// The bit patterns of a field.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn main() -> ExitCode {
    cli::main("heat_multi", Heat::PROGRAMMATIC, |a: &Args| a.plan, run)
}
