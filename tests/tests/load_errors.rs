//! Loading errors, in a test binary of their own: the driver calls here fail on purpose
//! (`cuModuleGetFunction` → `CUDA_ERROR_NOT_FOUND`, `cuModuleLoadData` → `CUDA_ERROR_INVALID_IMAGE`),
//! which compute-sanitizer reports as API errors; keeping them apart keeps the other GPU test
//! binaries' sanitizer runs at zero errors.

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::driver::sys::CUresult;
use cudagraph::cudarc::nvrtc::{Ptx, compile_ptx};
use cudagraph::{Error, kernels};

const SOURCE: &str = include_str!("../kernels/ops.cu");

kernels! {
    /// `ops.cu`'s `iota`.
    pub struct Ops {
        fn iota(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
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
    match Incomplete::load(&ctx, compile_ptx(SOURCE)?) {
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
    match Ops::load(&ctx, Ptx::from_src("this is not PTX")) {
        Ok(_) => panic!("a module that is not PTX must not load"),
        Err(Error::Module { kernels, source }) => {
            assert_eq!(kernels, "Ops");
            assert_eq!(source.call, "cuModuleLoadData");
        }
        Err(other) => panic!("expected Error::Module, got {other:?}"),
    }
    // The complete declaration loads from the same module and resolves every kernel.
    let ops = Ops::load(&ctx, compile_ptx(SOURCE)?)?;
    for name in Ops::NAMES {
        assert!(ops.function(name).is_some(), "{name}");
    }
    assert!(ops.function("not_in_module").is_none());
    Ok(())
}
