//! Compile cost of `graph!`: expansion time of generated bodies of 10, 100, 1000 and 4000
//! statements.
//!
//! ```text
//! cargo run --release -p cudagraph-macros-core --example compile_cost
//! ```
//! Each body is a fixed pseudo-random mix over 20 places: kernel launches with 2–4 buffer operands
//! (the last one written) and scalar arguments, copies, memsets and zeros, one statement in eight
//! named with `let` and one in six ordered `.after` earlier names, and one host `if` per 100
//! statements. The body is lexed once from text, so its tokens have distinct source positions as
//! they would coming from rustc; only `cudagraph_macros_core::graph` is timed (parse, check,
//! expand), not the lexing, nor rustc compiling the expansion. Prints the median, minimum and
//! maximum over several runs, the time per statement and the size of the output in tokens, and
//! fails (exit status 1) unless the 1000-statement body expands in under one second.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use proc_macro2::{TokenStream, TokenTree};

/// The places: plain variables, fields and indexed elements.
const PLACES: [&str; 20] = [
    "u", "v", "w", "tmp", "flux", "rhs", "res", "mask", "grad", "norm", "f.u", "f.v", "f.r",
    "self.a", "self.b", "self.c", "bufs[0]", "bufs[1]", "bufs[2]", "bufs[3]",
];

/// Kernel names, used in rotation.
const KERNELS: [&str; 6] = ["stencil", "axpy", "scale", "reduce", "boundary", "residual"];

/// A small deterministic generator (64-bit LCG, top bits), so every run times the same bodies.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }

    /// `k` distinct places.
    fn places(&mut self, k: usize) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::with_capacity(k);
        while out.len() < k {
            let p = PLACES[self.below(PLACES.len())];
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

/// One node statement (with its `let` and `.after`, if any), as text.
fn statement(rng: &mut Lcg, index: usize, names: &mut Vec<String>) -> String {
    let op = match rng.below(10) {
        0 => {
            let p = rng.places(2);
            format!("copy(&{}, &mut {})", p[0], p[1])
        }
        1 => format!("memset(&mut {}, 0u32)", rng.places(1)[0]),
        2 => format!("zero(&mut {})", rng.places(1)[0]),
        _ => {
            let k = 2 + rng.below(3);
            let operands = rng.places(k);
            let last = operands.len() - 1;
            let mut args = vec!["n".to_string()];
            if rng.below(2) == 0 {
                args.push("0.5f32".into());
            }
            for (i, p) in operands.iter().enumerate() {
                args.push(if i == last { format!("&mut {p}") } else { format!("&{p}") });
            }
            let kernel = KERNELS[index % KERNELS.len()];
            format!("k.{kernel}({}).launch(cfg)", args.join(", "))
        }
    };
    let after = if !names.is_empty() && rng.below(6) == 0 {
        let a = &names[rng.below(names.len())];
        let b = &names[rng.below(names.len())];
        if a == b { format!(".after({a})") } else { format!(".after({a}, {b})") }
    } else {
        String::new()
    };
    if index.is_multiple_of(8) {
        let name = format!("s{index}");
        let text = format!("let {name} = {op}{after};\n");
        names.push(name);
        text
    } else {
        format!("{op}{after};\n")
    }
}

/// A `graph!` input with `n` node statements; every 100th statement opens a host `if` around
/// the next three.
fn body(n: usize) -> TokenStream {
    let mut rng = Lcg(0x5eed ^ n as u64);
    let mut names = Vec::new();
    let mut text = String::from("&mut cache, &stream, {\n");
    let mut i = 0;
    while i < n {
        if i % 100 == 50 && n - i >= 3 {
            writeln!(text, "if flags[{}] {{", i / 100).unwrap();
            for _ in 0..3 {
                // Names inside an `if` are not used by `.after` outside it.
                let mut inner = Vec::new();
                text += &statement(&mut rng, i, &mut inner);
                i += 1;
            }
            text += "}\n";
        } else {
            text += &statement(&mut rng, i, &mut names);
            i += 1;
        }
    }
    text += "}";
    TokenStream::from_str(&text).expect("generated bodies lex")
}

/// Token trees in `tokens`, the contents of groups included.
fn count(tokens: TokenStream) -> usize {
    tokens
        .into_iter()
        .map(|t| match t {
            TokenTree::Group(g) => 1 + count(g.stream()),
            _ => 1,
        })
        .sum()
}

/// Median, minimum and maximum of `runs` expansions of `input`, and the output.
fn time(input: &TokenStream, runs: usize) -> (Duration, Duration, Duration, TokenStream) {
    let mut times = Vec::with_capacity(runs);
    let mut out = TokenStream::new();
    for _ in 0..runs {
        let tokens = input.clone();
        let start = Instant::now();
        out = cudagraph_macros_core::graph(tokens);
        times.push(start.elapsed());
    }
    times.sort();
    (times[runs / 2], times[0], times[runs - 1], out)
}

fn show(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

fn main() -> ExitCode {
    println!(
        "{:>10}  {:>10}  {:>10}  {:>10}  {:>9}  {:>13}  {:>13}",
        "statements", "median", "min", "max", "µs/stmt", "input tokens", "output tokens"
    );
    let mut verdict = None;
    for (n, runs) in [(10, 200), (100, 50), (1000, 11), (4000, 5)] {
        let input = body(n);
        let (median, min, max, out) = time(&input, runs);
        let text = out.to_string();
        assert!(
            !text.contains("compile_error"),
            "the generated {n}-statement body has errors:\n{text}"
        );
        println!(
            "{n:>10}  {:>10}  {:>10}  {:>10}  {:>9.2}  {:>13}  {:>13}",
            show(median),
            show(min),
            show(max),
            median.as_secs_f64() * 1e6 / n as f64,
            count(input),
            count(out),
        );
        if n == 1000 {
            verdict = Some(max < Duration::from_secs(1));
        }
    }
    if verdict == Some(true) {
        println!("PASS: the 1000-statement body expands in under one second (slowest run)");
        ExitCode::SUCCESS
    } else {
        println!("FAIL: the 1000-statement body takes one second or more to expand");
        ExitCode::FAILURE
    }
}
