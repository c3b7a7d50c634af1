// Review 14: a `__private::Guards` holding a buffer's guard (which records the buffer's event
// on the stream when dropped) cannot outlive the buffer or the stream: its `Drop` keeps both
// borrowed until it is dropped, even when nothing reads it after.
use cudagraph::__private::{Guards, acquire_into, begin_call};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let call = begin_call();
    let mut g = Guards::<1>::new();
    {
        let a = ctx.default_stream().alloc_zeros::<u32>(16)?;
        let s2 = ctx.new_stream()?;
        let _ = acquire_into(&a, &s2, &call, 0, &mut g);
    }
    Ok(())
}
