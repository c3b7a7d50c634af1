//! The main job: 2-D heat diffusion, one `graph!` call per step.
//!
//! ```text
//! heat [--n N] [--steps S] [--residual-every R] [--plain-first] [--image PATH] [--plan]
//! ```
//! Runs `S` steps (default 1000) on an `N`×`N` f32 grid (default 512) as a CUDA graph with
//! programmatic edges, then as the same graph with plain edges, then the same steps launched
//! eagerly on a stream (`cudagraph::eager!`), compares the final fields of all runs (expect
//! bit-exact), and prints per-step times and the speed-up. Every kernel is declared
//! `#[programmatic]` (each waits first with `griddepcontrol.wait`, see `kernels/heat.cu`), so the
//! edges between kernels are programmatic on devices of compute capability 9.0 and later. The
//! step is one chain (the flag's memset first, not beside the stencil): with a memset node
//! beside the kernels the step ran about 1.4 µs slower on the H200, and programmatic edges made
//! it slower still (1.05–1.25×); as one chain, programmatic edges ran the raw step 0.90× of plain
//! ones (`examples/probes/heat_floor.cu`, 2026-12-04, modes pchain and chain), so heat's graph
//! keeps them (`HEAT_PROGRAMMATIC`). The second graph, with plain edges
//! (`set_programmatic(false)`), shows that difference (`--plain-first` times it first). A third
//! run times heat's graph with the other exec policy (`HEAT_MEMO`: heat keeps an exec per buffer set its swap
//! alternates between, the cache's default; the third run updates the swapped pointers in
//! place). Every `R` steps (default 100;
//! 0 = never) the step also computes the residual max |v − u| and copies it to pinned host
//! memory: a host `if` inside `graph!`, so the cache holds two variants (with and without the
//! residual). `--image PATH` writes the final field as a colour-mapped PNG. `--plan` prints the
//! step's graph as Graphviz DOT, programmatic edges drawn bold blue, without touching CUDA;
//! `--help` lists the arguments. Without a CUDA driver the run exits with status 2 and one line
//! saying so.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use cudagraph::cudarc::driver::sys::CUdevice_attribute;
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};
use cudagraph::cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};
use cudagraph::{GraphCache, PinnedBuffer, graph, kernels};
use std::sync::Arc;

#[path = "cli.rs"]
mod cli;

const SOURCE: &str = include_str!("../kernels/heat.cu");

/// Whether heat's graph keeps an exec per buffer set the swap alternates between (the cache's
/// default, [`GraphCache::set_execs_per_variant`]: a memo hit launches the exec holding the
/// step's pointers and sends nothing), or keeps one exec per variant and updates the stencil's,
/// boundary's and check's pointers in place every step (`set_execs_per_variant(1)`). The run
/// times the other choice too: on the H200 updating in place took 0.98–1.33× the memo's step
/// time (about 1.0 where the host was fast enough to hide the changed call's host work, up to
/// 1.33× where it was not; heat as one chain, 2026-12-04, docs/performance.md): the memo loses
/// less.
const HEAT_MEMO: bool = true;

/// Whether heat's graph has programmatic edges between its kernels (`GraphCache`'s default on
/// devices of compute capability 9.0 and later). On the H200 its chain ran 0.90× of the plain
/// one's time where the GPU set the pace (the raw step, `examples/probes/heat_floor.cu`,
/// 2026-12-04), and the same where the host did: the run times both and prints the ratio.
const HEAT_PROGRAMMATIC: bool = true;

kernels! {
    /// Kernels of `kernels/heat.cu`. Each waits for its predecessors first
    /// (`griddepcontrol.wait`), so each is declared `#[programmatic]`.
    pub struct Heat {
        /// One explicit Euler step of the interior: `dst = src + alpha * laplacian(src)`.
        #[programmatic]
        fn stencil(nx: u32, ny: u32, alpha: f32, src: &[f32], dst: &mut [f32]);
        /// Dirichlet boundary: top edge 1, others 0.
        #[programmatic]
        fn boundary(nx: u32, ny: u32, u: &mut [f32]);
        /// `flags[0] |= 1` if any of the `n` cells is not finite.
        #[programmatic]
        fn check_finite(n: u32, u: &[f32], flags: &mut [u32]);
        /// `r[0] = max |v - u|` over `n` cells, `r[0]` zeroed before.
        #[programmatic]
        fn residual(n: u32, u: &[f32], v: &[f32], r: &mut [f32]);
    }
}

/// `heat.cu` compiled by NVRTC for the device's own architecture: `griddepcontrol.wait`, which
/// the `#[programmatic]` declarations promise, exists from compute capability 9.0 on, and
/// NVRTC's default architecture is older (the wait would be compiled out).
fn compile(ctx: &CudaContext) -> cudagraph::Result<(Ptx, (i32, i32))> {
    let major = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let options = vec![format!("--gpu-architecture=compute_{major}{minor}")];
    Ok((
        compile_ptx_with_opts(SOURCE, CompileOptions { options, ..Default::default() })?,
        (major, minor),
    ))
}

/// 2-D heat diffusion on the GPU, one `graph!` call per step, checked against the same steps
/// launched eagerly.
///
/// Without a CUDA GPU: says so, prints the step's graph plan and exits with status 2.
#[derive(clap::Parser)]
#[command(name = "heat")]
struct Args {
    /// Grid side N: the field is N x N f32 cells (at least 3).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(3..))]
    n: u32,
    /// Steps to run, as a graph and then eagerly (at least 2).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(2..))]
    steps: u32,
    /// Compute the residual max |v - u| and copy it to pinned host memory every R steps (0 = never).
    #[arg(long, value_name = "R", default_value_t = 100)]
    residual_every: u32,
    /// Print the step's graph plan as Graphviz DOT and exit, without touching CUDA.
    #[arg(long)]
    plan: bool,
    /// Time the graph with plain edges before heat's own, with programmatic edges (the default
    /// order is the other way round).
    #[arg(long)]
    plain_first: bool,
    /// Write the graph run's final temperature field to this PNG file (N x N pixels, one per
    /// cell, top edge at the top; colour scale 0 (black) to 1 (white), the boundary's range).
    #[arg(long, value_name = "PATH")]
    image: Option<std::path::PathBuf>,
}

/// The device state of one run.
struct Fields {
    u: CudaSlice<f32>,
    v: CudaSlice<f32>,
    flags: CudaSlice<u32>,
    /// Residual on the device and its pinned host copy.
    r: CudaSlice<f32>,
    host_r: PinnedBuffer<f32>,
    step: u32,
}

impl Fields {
    fn new(stream: &Arc<CudaStream>, n: u32) -> cudagraph::Result<Fields> {
        let cells = (n as usize) * (n as usize);
        Ok(Fields {
            u: stream.alloc_zeros(cells)?,
            v: stream.alloc_zeros(cells)?,
            flags: stream.alloc_zeros(1)?,
            r: stream.alloc_zeros(1)?,
            // Page-locked host memory the host reads fast; `as_slice` waits for the copy.
            host_r: PinnedBuffer::zeros(stream, 1)?,
            step: 0,
        })
    }
}

struct Config {
    n: u32,
    alpha: f32,
    grid2d: LaunchConfig,
    edge: LaunchConfig,
    cells: LaunchConfig,
    residual_every: u32,
}

impl Config {
    fn new(n: u32, residual_every: u32) -> Config {
        let b = 16;
        Config {
            n,
            alpha: 0.2,
            grid2d: LaunchConfig {
                grid_dim: (n.div_ceil(b), n.div_ceil(b), 1),
                block_dim: (b, b, 1),
                shared_mem_bytes: 0,
            },
            edge: LaunchConfig::for_num_elems(n),
            cells: LaunchConfig::for_num_elems(n * n),
            residual_every,
        }
    }
}

/// One step as a graph: stencil u -> v, boundary of v, finiteness check of v (after clearing
/// the flag), every `residual_every` steps the residual copied to pinned host memory; then the
/// fields swap, so every call changes the stencil's pointers.
fn step_graph(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &Heat,
    f: &mut Fields,
    c: &Config,
) -> cudagraph::Result<()> {
    let (n, alpha, cells) = (c.n, c.alpha, c.n * c.n);
    let residual = c.residual_every > 0 && f.step.is_multiple_of(c.residual_every);
    graph!(cache, stream, {
        // One chain: the flag's clear first, not beside the stencil, and the residual's clear
        // after the check. A memset node beside a kernel, joined later, cost the H200 about
        // 1.4 µs a step (`examples/probes/heat_floor.cu`, modes execs against chain).
        let m = memset(&mut f.flags, 0u32);
        let s = k.stencil(n, n, alpha, &f.u, &mut f.v).launch(c.grid2d).after(m);
        k.boundary(n, n, &mut f.v).launch(c.edge).after(s);
        let check = k.check_finite(cells, &f.v, &mut f.flags).launch(c.cells);
        if residual {
            zero(&mut f.r).after(check);
            k.residual(cells, &f.u, &f.v, &mut f.r).launch(c.cells);
            copy(&f.r, &mut f.host_r);
        }
    })?;
    std::mem::swap(&mut f.u, &mut f.v);
    f.step += 1;
    Ok(())
}

/// The same step launched statement by statement on the stream with `cudagraph::eager!`: the
/// typed, checked `kernels!` methods (no `unsafe` cudarc argument chains), one
/// `cuLaunchKernel`/`cuMemsetD32Async`/`cuMemcpyAsync` per statement, no graph. Its host time
/// includes `eager!`'s checks (borrows, aliasing, launch dimensions), as the graph's does.
fn step_eager(
    stream: &Arc<CudaStream>,
    k: &Heat,
    f: &mut Fields,
    c: &Config,
) -> cudagraph::Result<()> {
    let (n, alpha, cells) = (c.n, c.alpha, c.n * c.n);
    let residual = c.residual_every > 0 && f.step.is_multiple_of(c.residual_every);
    cudagraph::eager!(stream, {
        memset(&mut f.flags, 0u32);
        k.stencil(n, n, alpha, &f.u, &mut f.v).launch(c.grid2d);
        k.boundary(n, n, &mut f.v).launch(c.edge);
        k.check_finite(cells, &f.v, &mut f.flags).launch(c.cells);
        if residual {
            zero(&mut f.r);
            k.residual(cells, &f.u, &f.v, &mut f.r).launch(c.cells);
            copy(&f.r, &mut f.host_r);
        }
    })?;
    std::mem::swap(&mut f.u, &mut f.v);
    f.step += 1;
    Ok(())
}

/// Runs `steps` steps; returns (first step, mean of the others) in wall time, synchronized.
fn timed(
    stream: &CudaStream,
    steps: u32,
    mut step: impl FnMut() -> cudagraph::Result<()>,
) -> cudagraph::Result<(Duration, Duration)> {
    let t0 = Instant::now();
    step()?;
    stream.synchronize()?;
    let first = t0.elapsed();
    let t1 = Instant::now();
    for _ in 1..steps {
        step()?;
    }
    stream.synchronize()?;
    Ok((first, t1.elapsed() / (steps - 1)))
}

fn run(a: &Args) -> cudagraph::Result<bool> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let (ptx, (major, minor)) = compile(&ctx)?;
    println!("device: {} (compute capability {major}.{minor})", ctx.name().unwrap_or_default());
    // SAFETY: the declarations match the kernels, which stay within their buffers; compiled for
    // this device's architecture, every thread of each kernel executes `griddepcontrol.wait`
    // first (from compute capability 9.0 on; before it, the edges are plain).
    let k = unsafe { Heat::load(&ctx, ptx) }?;
    let c = Config::new(a.n, a.residual_every);

    // Heat's graph (programmatic edges: see `HEAT_PROGRAMMATIC`), and the same graph with plain
    // edges, timed in the order asked for (`--plain-first`: plain edges first).
    // `memo`: see `HEAT_MEMO`.
    let graph_run = |programmatic: bool, memo: bool| -> cudagraph::Result<_> {
        let mut f = Fields::new(&stream, a.n)?;
        let mut cache = GraphCache::new();
        cache.set_programmatic(programmatic);
        if !memo {
            cache.set_execs_per_variant(1);
        }
        let t = timed(&stream, a.steps, || step_graph(&mut cache, &stream, &k, &mut f, &c))?;
        Ok((f, cache, t))
    };
    // `g`: heat's graph; `p`: the same with the other edge kind.
    let own_first = a.plain_first != HEAT_PROGRAMMATIC;
    let ((g, cache, (g_first, g_step)), (p, other, (p_first, p_step))) = if own_first {
        let g = graph_run(HEAT_PROGRAMMATIC, HEAT_MEMO)?;
        (g, graph_run(!HEAT_PROGRAMMATIC, HEAT_MEMO)?)
    } else {
        let p = graph_run(!HEAT_PROGRAMMATIC, HEAT_MEMO)?;
        (graph_run(HEAT_PROGRAMMATIC, HEAT_MEMO)?, p)
    };
    // Heat's graph with the other exec policy (see `HEAT_MEMO`).
    let (o, other_execs, (_, o_step)) = graph_run(HEAT_PROGRAMMATIC, !HEAT_MEMO)?;

    let mut e = Fields::new(&stream, a.n)?;
    let (e_first, e_step) = timed(&stream, a.steps, || step_eager(&stream, &k, &mut e, &c))?;

    let gu = stream.clone_dtoh(&g.u)?;
    let pu = stream.clone_dtoh(&p.u)?;
    let ou = stream.clone_dtoh(&o.u)?;
    let eu = stream.clone_dtoh(&e.u)?;
    let gf = stream.clone_dtoh(&g.flags)?;
    let max_diff = gu.iter().zip(&eu).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits());
    let bit_exact = same(&gu, &eu) && same(&pu, &eu) && same(&ou, &eu);
    let heat: f64 = gu.iter().map(|&x| f64::from(x)).sum();
    // The residuals: `as_slice` waits for each buffer's last copy.
    let (gr, er) = (g.host_r.as_slice()?[0], e.host_r.as_slice()?[0]);
    let (pr, or) = (p.host_r.as_slice()?[0], o.host_r.as_slice()?[0]);
    let variants = if a.residual_every > 0 && a.steps > 1 { 2 } else { 1 };
    let s = cache.stats();
    let ps = other.stats();
    let os = other_execs.stats();
    println!(
        "grid {n}x{n}, {steps} steps, 4 nodes per step (+3 every {r} steps)",
        n = a.n,
        steps = a.steps,
        r = a.residual_every
    );
    println!(
        "stats: builds {} instantiations {} launches {} node updates {} unchanged nodes {} exec updates {} reinstantiations {} stream waits {} aliasing checks {}",
        s.builds,
        s.instantiations,
        s.launches,
        s.node_updates,
        s.nodes_unchanged,
        s.exec_updates,
        s.reinstantiations,
        s.stream_waits,
        s.alias_checks
    );
    println!("variants (hits): {:?}", cache.variant_hits());
    // The programmatic-edge and the plain-edge run (stats, µs per step), whichever is heat's
    // own, and the edge kind of heat's run and of the second.
    let ((pe, prog), (plain_stats, plain), kinds) = if HEAT_PROGRAMMATIC {
        ((s, g_step), (ps, p_step), ["programmatic", "plain"])
    } else {
        ((ps, p_step), (s, g_step), ["plain", "programmatic"])
    };
    println!(
        "edges: heat's graph {}, the second graph {} (set_programmatic(false)); the programmatic one has {} programmatic edges, {} plain where programmatic was declared but the device or driver lacks it (compute capability 9.0 and CUDA 12.3 needed)",
        kinds[0], kinds[1], pe.programmatic_edges, pe.programmatic_fallbacks
    );
    println!(
        "total heat {heat:.6}; non-finite flag {}; last residual graph {gr:e} eager {er:e}",
        gf[0]
    );
    println!(
        "max |graph - eager| = {max_diff:e} ({})",
        if bit_exact { "bit-exact" } else { "NOT bit-exact" }
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "first step: graph {:9.1} µs (build + instantiate + launch), {}-edge graph {:9.1} µs, eager {:9.1} µs",
        us(g_first),
        kinds[1],
        us(p_first),
        us(e_first)
    );
    println!(
        "per step:   graph {:9.2} µs, {}-edge graph {:9.2} µs, eager {:9.2} µs, speed-up {:.2}x over eager, programmatic edges {:.3}x of plain",
        us(g_step),
        kinds[1],
        us(p_step),
        us(e_step),
        us(e_step) / us(g_step),
        us(prog) / us(plain)
    );
    let policy = |memo| if memo { "an exec per buffer set" } else { "pointers updated in place" };
    println!(
        "execs:      graph ({}) {:9.2} µs, the same with {} {:9.2} µs ({:.3}x; {} node updates, {} memo hits)",
        policy(HEAT_MEMO),
        us(g_step),
        policy(!HEAT_MEMO),
        us(o_step),
        us(o_step) / us(g_step),
        os.node_updates,
        os.memo_hits
    );
    if let Some(path) = &a.image {
        match write_image(path, a.n, &gu) {
            Ok(()) => println!(
                "image: {} ({n}x{n} pixels, final field of the graph run, colour scale 0 to 1)",
                path.display(),
                n = a.n
            ),
            Err(e) => {
                eprintln!("heat: cannot write {}: {e}", path.display());
                return Ok(false);
            }
        }
    }
    // One build and instantiation per variant and per buffer set its swaps alternate between
    // (`Stats::memo_builds`), then only updates or memo hits: never a rebuild.
    let ok = bit_exact
        && gr.to_bits() == er.to_bits()
        && pr.to_bits() == er.to_bits()
        && or.to_bits() == er.to_bits()
        && [s, ps, os].iter().all(|s| {
            s.builds == variants + s.memo_builds
                && s.instantiations == s.builds
                && s.reinstantiations == 0
                && s.launches == u64::from(a.steps)
        })
        && plain_stats.programmatic_edges == 0
        && pe.programmatic_edges + pe.programmatic_fallbacks > 0
        && gf[0] == 0;
    if !ok {
        eprintln!(
            "heat: FAILED (results differ, a rebuild happened, or the field went non-finite)"
        );
    }
    Ok(ok)
}

/// The colour of temperature `t` (clamped to 0..=1): black through deep blue, red and orange to
/// white, linear between these stops.
fn colour(t: f32) -> [u8; 3] {
    const STOPS: [(f32, [f32; 3]); 5] = [
        (0.0, [0.0, 0.0, 0.0]),
        (0.25, [40.0, 20.0, 140.0]),
        (0.5, [200.0, 30.0, 60.0]),
        (0.75, [250.0, 160.0, 20.0]),
        (1.0, [255.0, 255.0, 255.0]),
    ];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let i = STOPS.windows(2).position(|w| t <= w[1].0).unwrap_or(STOPS.len() - 2);
    let ((t0, c0), (t1, c1)) = (STOPS[i], STOPS[i + 1]);
    let f = (t - t0) / (t1 - t0);
    std::array::from_fn(|j| (c0[j] + f * (c1[j] - c0[j])).round() as u8)
}

/// Writes the `n` x `n` field `u` (row 0 = the top edge) as an RGB PNG, one pixel per cell.
fn write_image(path: &std::path::Path, n: u32, u: &[f32]) -> image::ImageResult<()> {
    let img = image::RgbImage::from_fn(n, n, |x, y| {
        image::Rgb(colour(u[(y as usize) * (n as usize) + x as usize]))
    });
    img.save_with_format(path, image::ImageFormat::Png)
}

fn main() -> ExitCode {
    cli::main("heat", Heat::PROGRAMMATIC, |a: &Args| a.plan, run)
}
