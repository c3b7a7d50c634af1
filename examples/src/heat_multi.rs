//! The heat step of `heat` split into horizontal slabs over 1 or 2 GPUs, one `graph!` call per
//! step, halos exchanged every step.
//!
//! ```text
//! heat_multi [--sizes 512,4096,16384] [--steps S] [--gpus 1,2] [--plan]
//! examples/launch_local.sh N heat_multi --procs [--sizes …] [--steps S]   # one process per GPU
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
//! With `--procs` (and the `nccl` feature) the process is one rank of a run of one process per
//! GPU started by `examples/launch_local.sh`, torchrun, `srun` or `mpirun` (see `procs.rs`): its
//! rank and GPU from the launcher's variables, NCCL's unique id from rank 0 through
//! `--rendezvous file:PATH|tcp:HOST:PORT`, its slab of the field over all ranks, and halos by
//! NCCL send/recv with the ranks above and below in its step's `capture` statement; each rank
//! compares its own rows with the single-GPU step on its GPU (see `docs/several-gpus.md`).
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
#[path = "procs.rs"]
mod procs;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    /// Run as one rank of one process per GPU (needs the `nccl` feature): rank, world size and
    /// GPU from the launcher's variables (RANK/WORLD_SIZE/LOCAL_RANK, OMPI_COMM_WORLD_*, or
    /// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID), this rank's slab of the field, halos by NCCL
    /// send/recv with the neighbour ranks. Start it with examples/launch_local.sh, srun or
    /// mpirun.
    #[arg(long)]
    procs: bool,
    /// With --procs: where rank 0 hands NCCL's unique id to the others: file:PATH (a fresh path
    /// on a file system every rank sees) or tcp:HOST:PORT (an address of rank 0's host,
    /// reachable from every rank).
    #[arg(long, requires = "procs")]
    rendezvous: Option<procs::Rendezvous>,
    /// With --procs: seconds to wait for the other ranks at the rendezvous before giving up.
    #[arg(long, default_value = "60", value_parser = procs::seconds)]
    rendezvous_timeout: Duration,
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
    (0..g).map(|i| slab(&gpus[i as usize], n, i, g)).collect()
}

/// Slab `i` of `g` of an N×N field, on `gpu`.
fn slab(gpu: &Gpu, n: u32, i: u32, g: u32) -> cudagraph::Result<Slab> {
    let interior = n - 2;
    let (a, b) = (1 + interior * i / g, 1 + interior * (i + 1) / g);
    Slab::new(gpu, n, a - 1, b - a + 2)
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
    cli::main(
        "heat_multi",
        Heat::PROGRAMMATIC,
        |a: &Args| a.plan,
        |a: &Args| {
            if a.procs { run_procs(a) } else { Ok::<_, BoxError>(run(a)?) }
        },
    )
}

#[cfg(not(feature = "nccl"))]
fn run_procs(_: &Args) -> Result<bool, BoxError> {
    eprintln!(
        "heat_multi: --procs exchanges halos with NCCL: build with `--features cudagraph-examples/nccl`"
    );
    Ok(false)
}

/// `--procs`: this process's rank of the run, its slab of each field on GPU `LOCAL_RANK`, the
/// halos exchanged with the ranks above and below by NCCL send/recv in the step's `capture`
/// statement; its own rows compared bit for bit with the single-GPU step run on the same GPU.
#[cfg(feature = "nccl")]
fn run_procs(a: &Args) -> Result<bool, BoxError> {
    use cudarc::nccl::{Comm, Id};
    let rank = procs::Rank::from_env()?;
    let me = format!("heat_multi: rank {} of {}", rank.rank, rank.world);
    let Some(rendezvous) = &a.rendezvous else {
        eprintln!("{me}: --procs needs --rendezvous file:PATH or tcp:HOST:PORT");
        return Ok(false);
    };
    let found = CudaContext::device_count()? as usize;
    if rank.local >= found {
        eprintln!("{me}: its local rank is {} but this host has {found} GPUs", rank.local);
        return Ok(false);
    }
    let world = rank.world as u32;
    if let Some(small) = a.sizes.iter().find(|&&n| n < 8 || n - 2 < world) {
        eprintln!("{me}: --sizes {small}: the field must be at least 8 x 8, with a row per rank");
        return Ok(false);
    }
    let ctx = CudaContext::new(rank.local)?;
    let stream = ctx.new_stream()?;
    // SAFETY: as in `run`.
    let k = unsafe { Heat::load(&ctx, compile(&ctx)?) }?;
    let gpu = Gpu { stream, k };
    println!("{me}: GPU {} of this host: {}", rank.local, ctx.name().unwrap_or_default());
    // NCCL's unique id, made by rank 0, handed to every rank once all have shown up.
    let make = || -> Result<Vec<u8>, String> {
        let id = Id::new().map_err(|e| format!("ncclGetUniqueId: {e:?}"))?;
        Ok(id.internal().iter().map(|&c| c as u8).collect())
    };
    let bytes = rendezvous.share(rank, make, a.rendezvous_timeout)?;
    let internal: [std::ffi::c_char; 128] =
        std::array::from_fn(|i| *bytes.get(i).unwrap_or(&0) as _);
    if bytes.len() != internal.len() {
        return Err(
            format!("{me}: the rendezvous gave an id of {} bytes, not 128", bytes.len()).into()
        );
    }
    let comm = Comm::from_rank(gpu.stream.clone(), rank.rank, rank.world, Id::uninit(internal))
        .map_err(|e| format!("{me}: ncclCommInitRank: {e:?}"))?;
    let one = std::slice::from_ref(&gpu);
    let alpha = 0.2f32;
    let mut ok = true;
    for &n in &a.sizes {
        // The single-GPU step on this rank's GPU: the reference field and time.
        let mut whole = slabs(one, n)?.remove(0);
        let mut cache = GraphCache::new();
        let base = timed(one, a.steps, || step1(&mut cache, &gpu, &mut whole, n, alpha))?;
        let reference = gather(one, std::slice::from_ref(&whole), n)?;
        drop(whole);
        for mode in [Mode::Graph, Mode::Eager] {
            let mut s = slab(&gpu, n, rank.rank as u32, world)?;
            let mut cache = GraphCache::new();
            cache.set_mode(mode);
            let t = timed(one, a.steps, || step_rank(&mut cache, &gpu, &mut s, n, alpha, &comm))?;
            // Its own rows (and the field's top or bottom edge on the first and last rank).
            let w = n as usize;
            let local = gpu.stream.clone_dtoh(&s.u)?;
            let lo = if rank.rank == 0 { 0 } else { 1 } as usize;
            let hi = s.rows as usize - if rank.rank + 1 == rank.world { 0 } else { 1 };
            let at = s.first as usize * w;
            let same = bits(&local[lo * w..hi * w]) == bits(&reference[at + lo * w..at + hi * w]);
            ok &= same;
            let m = if mode == Mode::Graph { "graph" } else { "eager" };
            println!(
                "{me}: {n}x{n}, {} steps, rows {}..{}, NCCL send/recv: {m} {:9.2} µs/step, {:.2}x this GPU's 1-GPU graph step rate ({})",
                a.steps,
                s.first as usize + lo,
                s.first as usize + hi,
                us(t),
                us(base) / us(t),
                if same { "bit-exact with 1 GPU" } else { "NOT bit-exact with 1 GPU" }
            );
        }
    }
    if !ok {
        eprintln!("{me}: FAILED (its rows differ from the single-GPU step)");
    }
    Ok(ok)
}

/// One step of this rank's slab: stencil and boundary, then its first own row to the rank above
/// and its last own row to the rank below, the halo rows from them, by NCCL send/recv in a
/// `capture` statement on the step's stream (the communicator's).
#[cfg(feature = "nccl")]
fn step_rank(
    cache: &mut GraphCache,
    g: &Gpu,
    s: &mut Slab,
    n: u32,
    alpha: f32,
    comm: &cudarc::nccl::Comm,
) -> cudagraph::Result<()> {
    use cudarc::nccl::{group_end, group_start};
    let nccl = |e: cudarc::nccl::result::NcclError| -> BoxError { format!("NCCL: {e:?}").into() };
    let (k, rows, cfg, edge) = (&g.k, s.rows, s.cfg(n), LaunchConfig::for_num_elems(n));
    let (w, r) = (n as usize, rows as usize);
    let up = comm.rank().checked_sub(1).map(|p| p as i32);
    let down = (comm.rank() + 1 < comm.world_size()).then_some(comm.rank() as i32 + 1);
    graph!(cache, &g.stream, {
        k.stencil(n, rows, alpha, &s.u, &mut s.v).launch(cfg);
        k.boundary(n, rows, &mut s.v).launch(edge);
        capture(&mut s.v, |c, (mut v,)| {
            // SAFETY: the step's stream is the communicator's (`Comm::from_rank` got it); until
            // the closure returns it carries only NCCL's send/recv of the listed view.
            unsafe {
                c.stream();
            }
            group_start().map_err(nccl)?;
            if let Some(p) = up {
                comm.send(&v.slice(w..2 * w), p).map_err(nccl)?;
                comm.recv(&mut v.slice_mut(0..w), p).map_err(nccl)?;
            }
            if let Some(p) = down {
                comm.send(&v.slice((r - 2) * w..(r - 1) * w), p).map_err(nccl)?;
                comm.recv(&mut v.slice_mut((r - 1) * w..r * w), p).map_err(nccl)?;
            }
            group_end().map_err(nccl)?;
            Ok::<(), BoxError>(())
        });
    })?;
    std::mem::swap(&mut s.u, &mut s.v);
    Ok(())
}
