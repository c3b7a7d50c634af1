//! A port of the demo of PyCUDA's CUDA-graph pull request (`examples/demo_graph.py`): a small
//! pipeline captured from a stream, two kernel nodes added into the capture by hand, the graph's
//! DOT written, and the added nodes re-pointed on the instantiated graph before its launch.
//!
//! ```text
//! pycuda_demo [--dot PATH]
//! ```
//! The pipeline on 4×4 `f32` arrays `a`, `b`, `b2`: set all three to zero (the demo copies
//! zeros from the host), `a += 2` (a captured launch), then two nodes added by hand:
//! `first: b += 3` and `second: a *= b`, then `result = a` (the demo copies it to the host; here
//! to a device buffer read back after the launch: a capture's operands are device memory).
//! Before launching, the exec's `first` is set to `b2 += 100` and `second` to `a *= b2`, so the
//! launch computes `(0 + 2) × (0 + 100) = 200` everywhere. The same steps run eagerly on the
//! stream give the same result, which is checked. Without a CUDA driver the run exits with
//! status 2 and one line saying so. `--help` lists the arguments.
//!
//! | PyCUDA (pull request) | cudagraph |
//! |---|---|
//! | `stream.begin_capture()` … `end_capture()` | `cudagraph::capture(&stream, (operands…), \|s, views\| …)` (memsets and copies: `s.zero`, `s.copy`; a raw launch on the `unsafe` `s.stream()`) |
//! | `func_plus(a_gpu, …, stream=stream_1)` | a cudarc launch on `s.stream()` |
//! | `get_capture_info_v2` + `graph.add_kernel_node(…)` + `update_capture_dependencies` | `s.kernel(k.plus(n, s.write(&mut b)?, 3).launch(cfg))?` |
//! | `graph.debug_dot_print(path)` | `graph.debug_dot_print(path)?` |
//! | `instance.kernel_node_set_params(…, kernel_node=first_node)` | `exec.set_kernel(&first, k.plus(n, exec.write(2)?, 100).launch(cfg))?` |
//! | `instance.launch()` | `exec.launch(&stream)?` |

use std::cell::OnceCell;
use std::path::PathBuf;
use std::process::ExitCode;

use cudagraph::cudarc::driver::{LaunchConfig, PushKernelArg};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{CapturedKernel, capture, kernels};

const SOURCE: &str = include_str!("../kernels/pycuda_demo.cu");
const N: u32 = 16;

kernels! {
    /// Kernels of `kernels/pycuda_demo.cu`.
    pub struct Demo {
        /// `a[i] += num`.
        fn plus(n: u32, a: &mut [f32], num: i32);
        /// `a[i] *= b[i]`.
        fn times(n: u32, a: &mut [f32], b: &[f32]);
    }
}

/// A port of PyCUDA's CUDA-graph demo: a captured pipeline with two kernel nodes added by hand
/// and re-pointed on the exec before its launch; checked against the same steps run eagerly.
///
/// Without a CUDA GPU: says so and exits with status 2.
#[derive(clap::Parser)]
#[command(name = "pycuda_demo")]
struct Args {
    /// Where the captured graph's Graphviz DOT (the driver's debug print) is written.
    #[arg(long, value_name = "PATH", default_value = "pycuda_demo.dot")]
    dot: PathBuf,
}

fn run(dot: &std::path::Path) -> Result<bool, Box<dyn std::error::Error>> {
    let ctx = cudagraph::context(0)?;
    let stream = ctx.new_stream()?; // a stream that can capture (not the legacy default one)
    // SAFETY: the declarations match `kernels/pycuda_demo.cu`; each kernel touches n elements.
    let k = unsafe { Demo::load(&ctx, compile_ptx(SOURCE)?)? };
    let cfg = LaunchConfig::for_num_elems(N);
    let plus = k.function("plus").expect("declared");
    let n = N as usize;
    let mut a = stream.alloc_zeros::<f32>(n)?;
    let mut b = stream.alloc_zeros::<f32>(n)?;
    let mut b2 = stream.alloc_zeros::<f32>(n)?;
    let mut result = stream.alloc_zeros::<f32>(n)?;
    // Any value: the captured memsets must clear them.
    stream.memcpy_htod(&[7.0f32; 16], &mut a)?;
    stream.memcpy_htod(&[7.0f32; 16], &mut b)?;

    // The added nodes' handles, set by the closure (a graph holds what its closure borrows for
    // as long as it lives: shared cells, read while the graph lives).
    let (first, second): (OnceCell<CapturedKernel>, OnceCell<CapturedKernel>) =
        (OnceCell::new(), OnceCell::new());
    let graph = capture(
        &stream,
        (&mut a, &mut b, &mut b2, &mut result),
        |s, (mut a, mut b, mut b2, mut result)| {
            s.zero(&mut a)?;
            s.zero(&mut b)?;
            s.zero(&mut b2)?;
            // A captured launch, as the demo's `func_plus(a_gpu, 2, stream=stream_1)`.
            // SAFETY: `plus(n, a, num)` adds `num` to the n elements of `a`, a listed view; its
            // module (`k`) outlives the graph; nothing else uses `stream` while this runs.
            unsafe {
                let mut launch = s.stream().launch_builder(plus);
                launch.arg(&N).arg(a.as_cuda_view_mut()).arg(&2i32).launch(cfg)?;
            }
            // Two nodes added by hand, each after everything captured so far.
            let _ = first.set(s.kernel(k.plus(N, s.write(&mut b)?, 3).launch(cfg))?);
            let _ = second.set(s.kernel(k.times(N, s.write(&mut a)?, s.read(&b)?).launch(cfg))?);
            s.copy(&a, &mut result)?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        },
    )?;
    let (first, second) = (first.get().expect("recorded"), second.get().expect("recorded"));
    println!("captured {} nodes, {} edges", graph.nodes()?, graph.edges()?.len());
    graph.debug_dot_print(dot)?;
    println!("DOT written to {}", dot.display());
    let mut exec = graph.instantiate()?;
    // Setting dynamic parameters: operand 2 is b2.
    exec.set_kernel(first, k.plus(N, exec.write(2)?, 100).launch(cfg))?;
    exec.set_kernel(second, k.times(N, exec.write(0)?, exec.read(2)?).launch(cfg))?;
    exec.launch(&stream)?;
    drop(exec); // ends the borrows of a, b, b2 and result
    let got = stream.clone_dtoh(&result)?;

    // The same steps eagerly on the stream.
    let times = k.function("times").expect("declared");
    stream.memset_zeros(&mut a)?;
    stream.memset_zeros(&mut b2)?;
    // SAFETY: as above; `times(n, a, b)` multiplies the n elements of `a` by those of `b`.
    unsafe { stream.launch_builder(plus).arg(&N).arg(&mut a).arg(&2i32).launch(cfg) }?;
    unsafe { stream.launch_builder(plus).arg(&N).arg(&mut b2).arg(&100i32).launch(cfg) }?;
    unsafe { stream.launch_builder(times).arg(&N).arg(&mut a).arg(&b2).launch(cfg) }?;
    let want = stream.clone_dtoh(&a)?;

    println!("(0+2)x(0+100) = 200, using a captured graph with 2 added kernel nodes:");
    for row in got.chunks(4) {
        println!("  {row:?}");
    }
    let ok = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits())
        && got.iter().all(|&v| v == 200.0);
    println!("graph vs eager: {}", if ok { "bit-exact, all 200" } else { "DIFFER" });
    Ok(ok)
}

fn main() -> ExitCode {
    let Args { dot } = <Args as clap::Parser>::parse();
    if !cudagraph::driver_available() {
        eprintln!(
            "pycuda_demo: no CUDA GPU here (the CUDA driver, libcuda, could not be loaded), so nothing ran"
        );
        return ExitCode::from(2);
    }
    match run(&dot) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("pycuda_demo: FAILED (the graph's result differs from the eager steps)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("pycuda_demo: {e}");
            ExitCode::FAILURE
        }
    }
}
