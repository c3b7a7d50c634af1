// Review 14: `__private::acquire_mut_each` is a safe `pub` function taking `[&mut P; M]`: safe
// code cannot hand it one buffer twice (two write handles and two guards of one buffer).
use cudagraph::__private::{Guards, acquire_mut_each, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut a = s.alloc_zeros::<u32>(16)?;
    let call = begin_call();
    let mut g = Guards::<2>::new();
    let _h = acquire_mut_each(&mut std::mem::MaybeUninit::uninit(), [&mut a, &mut a], &s, &call, &[0, 1], &mut g);
    Ok(())
}
