//! Bad input at run time, in a test binary of its own: some driver calls here fail on purpose
//! (`cuModuleGetFunction` → `CUDA_ERROR_NOT_FOUND`, `cuModuleLoadData` → `CUDA_ERROR_INVALID_IMAGE`,
//! a kernel node with more shared memory than the function may use), which compute-sanitizer
//! reports as API errors; keeping them apart keeps the other GPU test binaries' sanitizer runs at
//! zero errors. Every error must name the node and its source location, enqueue nothing, and
//! leave the cache usable.

use cudagraph::cudarc::driver::sys::CUresult;
use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::{Ptx, compile_ptx};
use cudagraph::{Error, GraphCache, graph, kernels};

mod common;
use common::{Ops, SOURCE};

const N: u32 = 1024;

/// One bad call, then the same call site with good parameters: the bad one must fail with an
/// error naming the `iota` node of this file, the good ones must run (y = 3i + 1).
fn bad_then_good(bad: LaunchConfig, want: fn(&Error) -> bool) -> cudagraph::Result<()> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { Ops::load(&ctx, compile_ptx(SOURCE)?) }?;
    let mut y = stream.alloc_zeros::<u32>(N as usize)?;
    let mut cache = GraphCache::new();
    let good = LaunchConfig::for_num_elems(N);
    for (i, cfg) in [good, bad, good, bad, good].into_iter().enumerate() {
        let b = i as u32;
        let r = graph!(&mut cache, &stream, {
            let fill = k.iota(N, 3, b, &mut y).launch(cfg);
        });
        if i % 2 == 0 {
            r?;
            let got = stream.clone_dtoh(&y)?;
            assert!(got.iter().enumerate().all(|(j, &v)| v == 3 * j as u32 + b), "call {i}");
        } else {
            let e = r.expect_err("bad launch configuration must fail");
            let msg = e.to_string();
            assert!(want(&e), "unexpected error kind: {msg}");
            assert!(msg.contains("node `fill`") && msg.contains("bad_input.rs:"), "{msg}");
            // nothing ran: y still holds the previous good call's values
            let got = stream.clone_dtoh(&y)?;
            assert!(got.iter().enumerate().all(|(j, &v)| v == 3 * j as u32 + b - 1), "{msg}");
        }
    }
    assert_eq!(cache.stats().launches, 3);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn block_over_the_device_limit() -> cudagraph::Result<()> {
    let bad = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (2048, 1, 1), shared_mem_bytes: 0 };
    bad_then_good(bad, |e| matches!(e, Error::LaunchLimit { .. }))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn shared_memory_over_the_device_limit() -> cudagraph::Result<()> {
    let bad =
        LaunchConfig { grid_dim: (4, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 1 << 20 };
    bad_then_good(bad, |e| matches!(e, Error::LaunchLimit { .. }))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn zero_block() -> cudagraph::Result<()> {
    let bad = LaunchConfig { grid_dim: (4, 1, 1), block_dim: (0, 1, 1), shared_mem_bytes: 0 };
    bad_then_good(bad, |e| matches!(e, Error::ZeroDims { .. }))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn driver_refusal_is_reported_with_the_node_label() -> cudagraph::Result<()> {
    // 64 KiB of dynamic shared memory is within the H200's opt-in limit, but over the 48 KiB a
    // function may use without raising its attribute: the driver refuses the node.
    let bad =
        LaunchConfig { grid_dim: (4, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 64 << 10 };
    bad_then_good(bad, |e| matches!(e, Error::Node { .. }))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn buffer_from_another_context() -> cudagraph::Result<()> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let other = CudaContext::new_non_primary(0, 0)?;
    ctx.bind_to_thread()?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { Ops::load(&ctx, compile_ptx(SOURCE)?) }?;
    let mut foreign = other.default_stream().alloc_zeros::<u32>(N as usize)?;
    let mut mine = stream.alloc_zeros::<u32>(N as usize)?;
    ctx.bind_to_thread()?;
    let cfg = LaunchConfig::for_num_elems(N);
    let mut cache = GraphCache::new();
    let e = graph!(&mut cache, &stream, {
        k.iota(N, 1, 0, &mut foreign).launch(cfg);
    })
    .expect_err("a buffer of another context must be refused");
    assert!(matches!(e, Error::WrongContext { .. }), "{e}");
    assert!(e.to_string().contains("bad_input.rs:"), "{e}");
    graph!(&mut cache, &stream, {
        k.iota(N, 1, 0, &mut mine).launch(cfg);
    })?;
    assert_eq!(stream.clone_dtoh(&mine)?[5], 5);
    Ok(())
}

kernels! {
    /// `ops.cu`'s `iota` plus a kernel the module does not define.
    pub struct Incomplete {
        fn iota(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn not_in_module(n: u32, x: &mut [u32]);
    }
}

/// A declared kernel missing from the module fails `load` with `Error::MissingFunction` naming
/// it; a module that does not load fails with `Error::Module` naming the struct.
#[test]
#[ignore = "needs a CUDA GPU"]
fn missing_kernel_function_is_named() -> cudagraph::Result<()> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    match unsafe { Incomplete::load(&ctx, compile_ptx(SOURCE)?) } {
        Ok(_) => panic!("ops.cu has no `not_in_module`: Incomplete::load must fail"),
        Err(err) => {
            let msg = err.to_string();
            match &err {
                Error::MissingFunction { name, source } => {
                    assert_eq!(*name, "not_in_module", "{msg}");
                    assert_eq!(source.call, "cuModuleGetFunction", "{msg}");
                    assert_eq!(source.error.0, CUresult::CUDA_ERROR_NOT_FOUND, "{msg}");
                }
                other => panic!("expected Error::MissingFunction, got {other:?}"),
            }
            assert!(msg.contains("`not_in_module`"), "{msg}");
        }
    }
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    match unsafe { Ops::load(&ctx, Ptx::from_src("this is not PTX")) } {
        Ok(_) => panic!("a module that is not PTX must not load"),
        Err(Error::Module { kernels, source }) => {
            assert_eq!(kernels, "Ops");
            assert_eq!(source.call, "cuModuleLoadData");
        }
        Err(other) => panic!("expected Error::Module, got {other:?}"),
    }
    // The complete declaration loads from the same module and resolves every kernel.
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let ops = unsafe { Ops::load(&ctx, compile_ptx(SOURCE)?) }?;
    for name in Ops::NAMES {
        assert!(ops.function(name).is_some(), "{name}");
    }
    assert!(ops.function("not_in_module").is_none());
    Ok(())
}

/// A kernel not declared `extern "C"`: its symbol is a C++ mangled name (`_Z5scalejfPf`).
const MANGLED: &str = "__global__ void scale(unsigned int n, float a, float *x) {\n\
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
    if (i < n) x[i] *= a;\n\
}\n";

kernels! {
    /// `MANGLED`'s kernel, declared by its source name.
    pub struct Mangled {
        fn scale(n: u32, a: f32, x: &mut [f32]);
    }
}

/// `load` of a kernel that is not `extern "C"` says "not found" and hints at the mangled name.
#[test]
#[ignore = "needs a CUDA GPU"]
fn kernel_without_extern_c_gets_the_mangling_hint() -> cudagraph::Result<()> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declaration matches the kernel, which stays within `n` elements.
    match unsafe { Mangled::load(&ctx, compile_ptx(MANGLED)?) } {
        Ok(_) => panic!("`scale` is mangled in the module: Mangled::load must fail"),
        Err(err) => {
            let msg = err.to_string();
            assert!(matches!(err, Error::MissingFunction { name: "scale", .. }), "{msg}");
            assert!(msg.contains("extern \"C\""), "{msg}");
            assert!(msg.contains("mangled"), "{msg}");
        }
    }
    Ok(())
}
