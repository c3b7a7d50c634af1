//! The `main` of the examples (`heat`, `mlp`, `cg`, `jacobi`, …): arguments, `--plan`,
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
        let dots = plans().map(|p| p.to_dot_with(&p.edge_kinds(|k| programmatic.contains(&k))));
        print_all(dots);
        return ExitCode::SUCCESS;
    }
    if !cudagraph::driver_available() {
        eprintln!(
            "{name}: no CUDA GPU here (the CUDA driver, libcuda, could not be loaded), so nothing ran.\n\
             {name}: its graph plans follow; `--plan` prints them as Graphviz DOT"
        );
        print_all(plans().map(|p| p.to_string()));
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

/// Prints `texts` to standard output, stopping quietly when the reader has gone (`--plan | head`
/// closes the pipe: `print!` would panic).
fn print_all(texts: impl Iterator<Item = String>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    for t in texts {
        if out.write_all(t.as_bytes()).is_err() {
            return;
        }
    }
    let _ = out.flush();
}
