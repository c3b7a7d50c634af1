// Review 29: a write handle of an exec's operand (`Exec::write`) kept past `Exec::release`
// would name a buffer the exec no longer borrows; set into another exec's node (whose own
// operand may lie at the same address after a reallocation), it would be written unborrowed.
// The handle borrows the exec, which `release` consumes.
use cudagraph::CapturedKernel;
use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{Exec, kernels};

kernels! {
    struct K {
        fn fill(n: u32, x: &mut [f32]);
    }
}

fn reuse(k: &K, exec: Exec<'_>, other: &Exec<'_>, node: &CapturedKernel) -> cudagraph::Result<()> {
    let w = exec.write::<f32>(0)?;
    let released = exec.release();
    other.set_kernel(node, k.fill(4, w).launch((1, 1)))?;
    drop(released);
    Ok(())
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: the declaration matches the kernel, which stays within its buffer.
    let _k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let _ = reuse;
    Ok(())
}
