// Review 14: a `__private::Guards` (a pinned buffer's guard updates its non-atomic state when
// dropped) cannot be sent to another thread and dropped there.
use cudagraph::__private::{Guards, acquire_mut_into, begin_call};
use cudagraph::PinnedBuffer;
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut p = PinnedBuffer::<u32>::zeros(&s, 16)?;
    let call = begin_call();
    let mut g = Guards::<1>::new();
    let _ = acquire_mut_into(&mut p, &s, &call, 0, &mut g);
    std::thread::scope(|sc| {
        sc.spawn(move || drop(g));
    });
    Ok(())
}
