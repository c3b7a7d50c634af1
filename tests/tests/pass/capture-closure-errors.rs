//! The error type of capture closures (issue 32): cudarc's `DriverError` through `?` as the
//! closure's own error, `cudagraph::Error` taking both the capture's errors and `DriverError`
//! through `?`, and a boxed mix, in `capture`, the `capture` statement and
//! `GraphBuilder::capture`.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use cudagraph::cudarc::driver::{CudaContext, CudaFunction, DriverError, LaunchConfig, PushKernelArg};
use cudagraph::{Capture, CaptureSlice, CaptureSliceMut, GraphCache, capture, graph};

/// A cudarc launch on the joined stream: `DriverError`.
fn scale(
    f: &CudaFunction,
    s: &Capture,
    x: &CaptureSlice<'_, f32>,
    y: &mut CaptureSliceMut<'_, f32>,
) -> Result<(), DriverError> {
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
    let x = stream.alloc_zeros::<f32>(1024)?;
    let mut y = stream.alloc_zeros::<f32>(1024)?;

    // The closure's own error is cudarc's, through `?`.
    let only_driver = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        scale(&f, s, &x, &mut y)?;
        Ok::<(), DriverError>(())
    })?;
    drop(only_driver);

    // `cudagraph::Error`: the capture's own calls and `DriverError` (`From`) through `?`.
    let mixed = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        s.zero(&mut y)?;
        scale(&f, s, &x, &mut y)?;
        Ok::<(), cudagraph::Error>(())
    })?;
    drop(mixed);

    // Any mix, boxed: a message of the closure's own beside the driver's.
    let boxed = capture(&stream, (&x, &mut y), |s, (x, mut y)| {
        if x.is_empty() {
            return Err("nothing to scale".into());
        }
        scale(&f, s, &x, &mut y)?;
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    })?;
    drop(boxed);

    // The same closures in the `capture` statement and in `GraphBuilder::capture`.
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&x, &mut y, |s, (x, mut y)| scale(&f, s, &x, &mut y));
        capture(&x, &mut y, |s, (x, mut y)| {
            s.zero(&mut y)?;
            scale(&f, s, &x, &mut y)?;
            Ok::<(), cudagraph::Error>(())
        });
    })?;
    let mut g = cache.builder(&stream);
    let (xr, yw) = (g.read(&x), g.write(&mut y));
    g.capture(&stream, (xr, yw), |s, (x, mut y)| scale(&f, s, &x, &mut y));
    g.capture(&stream, (xr, yw), |s, (x, mut y)| {
        s.zero(&mut y)?;
        scale(&f, s, &x, &mut y)?;
        Ok::<(), cudagraph::Error>(())
    });
    g.launch()
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
