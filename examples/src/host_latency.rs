//! What a `host` statement costs per launch since its closure runs on a worker thread (issue
//! 29, kind 7): a host node is a child graph of the host function and a device-side wait for the
//! worker's flag. Rows, µs per call including `cuStreamSynchronize`, median of N (default 500):
//! - `kernel only`: `graph!` of one tiny kernel (the baseline round trip);
//! - `kernel + host`: the same with an empty `host` statement after it;
//! - `kernel + host, eager`: the same in `Mode::Eager` (`cuLaunchHostFunc`,
//!   `cuStreamWaitValue32_v2`, and the host function that returns the flag);
//! - `raw kernel + cuLaunchHostFunc`: the kernel and an empty callback launched directly,
//!   where a closure would run on the driver's thread (what a host node cost before).
//!
//! ```text
//! host_latency [--reps N]
//! ```

use std::time::Instant;

use cudagraph::cudarc::driver::{CudaContext, CudaStream, sys};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, Mode, graph};

#[path = "cli.rs"]
mod cli;

#[path = "bench_kernels.rs"]
mod bench_kernels;
use bench_kernels::{Bench, CFG, ELEMS, SOURCE};

#[derive(clap::Parser)]
#[command(about = "Per-launch cost of a host statement (closure on a worker thread)")]
struct Args {
    /// Calls timed per row.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// Print the graph plans as Graphviz DOT and exit (no GPU needed).
    #[arg(long)]
    plan: bool,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median µs of `reps` runs of `f` followed by a stream synchronize.
fn time(reps: u32, s: &CudaStream, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    for _ in 0..20 {
        f()?;
        s.synchronize()?;
    }
    let mut v = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        s.synchronize()?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median(v))
}

unsafe extern "C" fn nothing(_: *mut core::ffi::c_void) {}

fn run(a: &Args) -> Res<bool> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    // SAFETY: the declarations match kernels/bench.cu.
    let k = unsafe { Bench::load(&ctx, compile_ptx(SOURCE)?) }?;
    let mut x = s.alloc_zeros::<u32>(ELEMS as usize)?;
    let mut rows = Vec::new();
    let mut plain = GraphCache::new();
    rows.push((
        "kernel only",
        time(a.reps, &s, || {
            graph!(&mut plain, &s, {
                k.add(ELEMS, 1, &mut x).launch(CFG);
            })?;
            Ok(())
        })?,
    ));
    let mut runs = 0u64;
    for (name, mode) in [("kernel + host", Mode::Graph), ("kernel + host, eager", Mode::Eager)] {
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let t = time(a.reps, &s, || {
            graph!(&mut cache, &s, {
                k.add(ELEMS, 1, &mut x).launch(CFG);
                host(move |()| {});
            })?;
            runs += 1;
            Ok(())
        })?;
        rows.push((name, t));
    }
    let f = k.function("add").expect("declared");
    let raw = time(a.reps, &s, || {
        use cudagraph::cudarc::driver::PushKernelArg;
        let mut b = s.launch_builder(f);
        let n = ELEMS;
        let v = 1u32;
        b.arg(&n).arg(&v).arg(&mut x);
        // SAFETY: `add(n, v, x)` with `x` of `n` elements.
        unsafe {
            b.launch(cudagraph::cudarc::driver::LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: 0,
            })
        }?;
        // SAFETY: an empty callback that makes no CUDA call.
        unsafe { sys::cuLaunchHostFunc(s.cu_stream(), Some(nothing), core::ptr::null_mut()) }
            .result()?;
        Ok(())
    })?;
    rows.push(("raw kernel + cuLaunchHostFunc", raw));
    println!("{:<32} {:>10}", "row", "µs/call");
    for (name, t) in &rows {
        println!("{name:<32} {t:>10.1}");
    }
    let base = rows[0].1;
    println!(
        "host statement adds {:.1} µs (graph), raw callback adds {:.1} µs",
        rows[1].1 - base,
        raw - base
    );
    Ok(runs > 0)
}

fn main() -> std::process::ExitCode {
    cli::main("host_latency", &[], |a: &Args| a.plan, run)
}
