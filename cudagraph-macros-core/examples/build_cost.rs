//! Build cost of `graph!`: the wall time of `cargo build` (release and debug) of a small library
//! crate holding one `graph!` of N statements, on top of the same crate with an empty body.
//!
//! ```text
//! cargo run --release -p cudagraph-macros-core --example build_cost [-- --sizes 10,100,1000,4000] [--debug | --clippy] [--runs R]
//! ```
//! Each row is the median of `R` builds (default 1; on a small shared machine the ratios move
//! by ±10 % from run to run).
//! `--clippy` times `cargo clippy` (a debug check with clippy's lints, what a user's CI runs)
//! instead of a build.
//! Shapes: `chain` (N kernels writing one buffer, each after the last), `fan` (N kernels
//! reading one buffer and writing one of 64 elements of an array, `bufs[i % 64]`) and `unrolled`
//! (the chain written as graph `for`s unrolled at compile time, at most 4000 iterations each). The crate
//! depends on this workspace's `cudagraph` by path and is built in a temporary directory with its
//! own target directory; dependencies are built once first, so each row times only the crate
//! itself (expansion, type checking, code generation). Prints one row per shape and size: build
//! seconds, seconds over the empty body, and that time relative to the 1000-statement row.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

fn body(shape: &str, n: usize) -> String {
    let mut s = String::new();
    if shape == "unrolled" {
        // One graph `for` unrolls at most 4096 iterations: nested, n = outer × inner + rest.
        let (outer, inner) = if n > 4000 { (n / 4000, 4000) } else { (1, n) };
        let rest = n - outer * inner;
        writeln!(s, "        for _ in 0..{outer} {{ for _ in 0..{inner} {{ k.add(n, 1, &mut x).launch(cfg); }} }}").unwrap();
        for _ in 0..rest {
            s += "        k.add(n, 1, &mut x).launch(cfg);\n";
        }
        return s;
    }
    for i in 0..n {
        match shape {
            "chain" => s += "        k.add(n, 1, &mut x).launch(cfg);\n",
            _ => writeln!(s, "        k.acc(n, &p, &mut bufs[{}]).launch(cfg);", i % 64).unwrap(),
        }
    }
    s
}

fn lib_rs(shape: &str, n: usize) -> String {
    format!(
        r#"use cudagraph::cudarc::driver::{{CudaSlice, CudaStream}};
use cudagraph::{{GraphCache, graph, kernels}};

kernels! {{
    pub struct K {{
        fn add(n: u32, v: u32, x: &mut [u32]);
        fn acc(n: u32, src: &[u32], dst: &mut [u32]);
    }}
}}

#[allow(unused_variables, unused_mut)]
pub fn step(
    cache: &mut GraphCache,
    stream: &CudaStream,
    k: &K,
    mut x: &mut CudaSlice<u32>,
    p: &CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {{
    let n = 1024u32;
    let cfg = (1u32, 32u32);
    graph!(cache, stream, {{
        // {shape}, {n} statements
{body}    }})
}}
"#,
        body = body(shape, n)
    )
}

/// What each row times.
#[derive(Clone, Copy)]
enum Mode {
    Release,
    Debug,
    Clippy,
}

fn build(dir: &Path, mode: Mode) -> Result<f64, String> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.arg(if matches!(mode, Mode::Clippy) { "clippy" } else { "build" })
        .arg("--quiet")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"));
    if matches!(mode, Mode::Release) {
        cmd.arg("--release");
    }
    let t = Instant::now();
    let out = cmd.output().map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(t.elapsed().as_secs_f64())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sizes: Vec<usize> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(|x| x.parse().expect("--sizes takes numbers")).collect())
        .unwrap_or_else(|| vec![10, 100, 1000, 4000]);
    let mode = if args.iter().any(|a| a == "--clippy") {
        Mode::Clippy
    } else if args.iter().any(|a| a == "--debug") {
        Mode::Debug
    } else {
        Mode::Release
    };
    let workspace =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("workspace");
    let dir = std::env::temp_dir().join(format!("cudagraph-build-cost-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src")).expect("temp crate");
    let manifest = format!(
        "[package]\nname = \"build-cost\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[lib]\npath = \"src/lib.rs\"\n\n[dependencies]\ncudagraph = {{ path = {:?} }}\n\n[workspace]\n",
        workspace.join("cudagraph")
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("manifest");
    std::fs::copy(workspace.join("rust-toolchain.toml"), dir.join("rust-toolchain.toml")).ok();
    std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).ok();
    let profile = match mode {
        Mode::Release => "release build",
        Mode::Debug => "debug build",
        Mode::Clippy => "cargo clippy",
    };
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(1, |r| r.parse().expect("--runs takes a number"));
    // The median of `runs` builds (the file rewritten each time, so that cargo rebuilds it).
    let run = |shape: &str, n: usize| -> Result<f64, String> {
        let mut t = Vec::with_capacity(runs);
        for _ in 0..runs.max(1) {
            std::fs::write(dir.join("src/lib.rs"), lib_rs(shape, n)).map_err(|e| e.to_string())?;
            t.push(build(&dir, mode)?);
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    };
    // Dependencies, then the empty body twice (the second is the baseline).
    if let Err(e) = run("chain", 0).and_then(|_| run("chain", 0)) {
        eprintln!("build_cost: the empty crate does not build:\n{e}");
        return ExitCode::FAILURE;
    }
    let empty = run("chain", 0).expect("built before");
    println!(
        "{profile} of one graph! of N statements, seconds, median of {runs} (empty body: {empty:.2} s)"
    );
    println!("{:<6}{:>7}{:>10}{:>12}{:>12}", "shape", "N", "build", "over empty", "÷ N=1000");
    let mut status = ExitCode::SUCCESS;
    for shape in ["chain", "fan", "unrolled"] {
        let mut rows = Vec::new();
        for &n in &sizes {
            match run(shape, n) {
                Ok(t) => rows.push((n, t, t - empty)),
                Err(e) => {
                    eprintln!("build_cost: {shape} N={n} failed:\n{e}");
                    status = ExitCode::FAILURE;
                }
            }
        }
        let base = rows.iter().find(|r| r.0 == 1000).map(|r| r.2);
        for (n, t, over) in rows {
            let ratio = base.map_or("-".to_string(), |b| format!("{:.2}", over / b));
            println!("{shape:<6}{n:>7}{t:>10.2}{over:>12.2}{ratio:>12}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    status
}
