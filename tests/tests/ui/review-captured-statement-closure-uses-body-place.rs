// Review (issue 13): the closure of a `capture` statement cannot use another place of the same
// `graph!` body directly (it is borrowed for the whole call): only the listed operands' views.
use cudagraph::cudarc::driver::{CudaContext, DriverError};
use cudagraph::{GraphCache, graph};

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut cache = GraphCache::new();
    let x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let mut z = stream.alloc_zeros::<f32>(1024)?;
    graph!(&mut cache, &stream, {
        copy(&x, &mut z);
        capture(&x, &mut y, |s, (_x, _y)| -> Result<(), DriverError> {
            // SAFETY: (not reached: the borrow is refused) the work touches the listed buffers only.
            unsafe { s.stream() }.memset_zeros(&mut z)
        });
    })
}
