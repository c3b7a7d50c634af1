//! A buffer the closure of `cudagraph::capture` uses without listing it is borrowed by the
//! closure, and the graph holds its closure's borrows for as long as it lives: it cannot be
//! dropped while the graph (or its exec) may replay the recording.
use cudagraph::capture;
use cudagraph::cudarc::driver::CudaContext;

fn main() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let mut z = stream.alloc_zeros::<u32>(1024)?; // not listed
    let graph = capture(&stream, (&mut y,), |s, (mut y,)| {
        s.zero(&mut y)?;
        stream.memset_zeros(&mut z)?; // the call's stream, held by safe code: not recorded
        Ok::<(), cudagraph::Error>(())
    })?;
    let mut exec = graph.instantiate()?;
    drop(z);
    exec.launch(&stream)
}
