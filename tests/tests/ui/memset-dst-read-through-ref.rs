// A written operand reached through a reference, marked `&`: the suggestion prints the deref next
// to the place (`&mut *result_d`), as a user would write it.
use cudagraph::cudarc::driver::{CudaContext, CudaSlice};
use cudagraph::{GraphCache, graph};

fn clear(cache: &mut GraphCache, result_d: &mut CudaSlice<u32>) -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    graph!(cache, &stream, {
        memset(&*result_d, 0u32);
    })
}

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let mut result_d = ctx.default_stream().alloc_zeros::<u32>(16)?;
    clear(&mut GraphCache::new(), &mut result_d)
}
