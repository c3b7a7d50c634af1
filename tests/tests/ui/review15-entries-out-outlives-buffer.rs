// Review 15: a node list filled by `__private::entries` holds the buffer's handles: the
// buffer cannot be freed while the list is used.
use cudagraph::__private::{Guards, acquire_mut_into, begin_call, entries, entry, zero};
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    let mut a = s.alloc_zeros::<u32>(16)?;
    let call = begin_call();
    let mut out = [const { None }; 1];
    let z;
    {
        let mut g = Guards::<1>::new();
        let (_r, w) = acquire_mut_into(&mut a, &s, &call, 0, &mut g);
        z = zero(w);
    }
    let e = entry(&z);
    entries(&mut out, &[&e]);
    drop(a);
    let _ = out[0].is_some();
    Ok(())
}
