//! The `main` of the examples that run one `graph!` step (`heat`, `mlp`): arguments, `--plan`,
//! the machine without a GPU, and the exit status. Included with `#[path]` by each example.

use std::process::ExitCode;

/// Runs example `name` (whose source file is `name.rs`): the arguments are parsed into `A` by
/// clap (`--help` prints the usage and exits with status 0; a wrong argument prints clap's error
/// and exits with status 2), `plan` tells whether only the plan was asked for (printed as Graphviz
/// DOT, no CUDA touched, with the edges into the kernels named in `programmatic` drawn as
/// programmatic edges), `run` does the work and says whether its checks passed. Without a CUDA
/// driver: one line saying so, the step's plan, exit status 2.
pub fn main<A: clap::Parser, E: std::fmt::Display>(
    name: &str,
    programmatic: &[&str],
    plan: impl FnOnce(&A) -> bool,
    run: impl FnOnce(&A) -> Result<bool, E>,
) -> ExitCode {
    let args = A::parse();
    // This example's `graph!` plans (registered at compile time; no GPU needed).
    let file = format!("{name}.rs");
    let plans = || cudagraph::plans().filter(|p| p.file.ends_with(&file));
    if plan(&args) {
        for p in plans() {
            print!("{}", p.to_dot_with(&p.edge_kinds(|k| programmatic.contains(&k))));
        }
        return ExitCode::SUCCESS;
    }
    if !cudagraph::driver_available() {
        eprintln!(
            "{name}: no CUDA GPU here (the CUDA driver, libcuda, could not be loaded), so nothing ran.\n\
             {name}: the step's graph plan follows; `--plan` prints it as Graphviz DOT"
        );
        for p in plans() {
            print!("{p}");
        }
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}
