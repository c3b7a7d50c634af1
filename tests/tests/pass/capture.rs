//! A stream capture of cudarc work on listed buffers: views by operand, instantiate, launch,
//! release and bind between launches, update from another capture.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use cudagraph::cudarc::driver::{CudaContext, CudaFunction, DriverError, LaunchConfig, PushKernelArg};
use cudagraph::{Capture, CaptureSlice, CaptureSliceMut, capture};

fn scale(
    f: &CudaFunction,
    s: &Capture,
    (x, mut y): (CaptureSlice<'_, f32>, CaptureSliceMut<'_, f32>),
) -> cudagraph::Result<()> {
    s.zero(&mut y)?;
    let n = x.len() as u32;
    // SAFETY: `scale(n, x, y)` reads n elements of x and writes n of y, both listed views, on
    // the call's stream joined into the capture.
    let mut launch = unsafe { s.stream() }.launch_builder(f);
    // SAFETY: used on the joined stream only.
    let (xv, yv) = unsafe { (x.as_cuda_view(), y.as_cuda_view_mut()) };
    launch.arg(&n).arg(xv).arg(yv);
    // SAFETY: as above.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
    Ok(())
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let f = ctx.load_module(cudagraph::cudarc::nvrtc::Ptx::from_src(""))?.load_function("scale")?;
    let mut x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;
    let (x2, mut y2) = (stream.alloc_zeros::<f32>(1024)?, stream.alloc_zeros::<f32>(1024)?);
    let graph = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        s.copy(&x, &mut y)?;
        Ok::<(), cudagraph::Error>(())
    })?;
    assert!(graph.nodes()? <= 1);
    let mut exec = graph.instantiate()?;
    exec.launch(&stream)?;
    let released = exec.release();
    stream.memcpy_htod(&[1.0f32; 1024], &mut x)?;
    let mut exec = released.bind((&x, &mut y));
    exec.launch(&stream)?;
    let other = capture(&stream, (&x2, &mut y2), |s, v| scale(&f, s, v))?;
    if let Err(refused) = exec.update(other) {
        let _graph = refused.graph;
        return Err(refused.error);
    }
    exec.launch(&stream)?;
    drop(exec);
    let _ = stream.clone_dtoh(&y2)?;
    capture(&stream, (), |_, ()| Ok::<(), DriverError>(()))?.instantiate()?.launch(&stream)
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
