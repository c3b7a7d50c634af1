//! Host work inside captures (issue 30, item 4): pinned host operands listed in a `capture`
//! statement (unkeyed and keyed), copies between their views and device views
//! (`Capture::copy_htod`, `Capture::copy_dtoh`), and a host function (`Capture::host`) given
//! `&` and `&mut` host views, a part of one, and none; and in `GraphBuilder::capture`, whose
//! operands are the builder's handles (a pinned host handle among them).
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use std::sync::mpsc;

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::{GraphCache, graph};

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: written by the host before any read (cudarc's contract for uninitialized memory).
    let mut input = unsafe { ctx.alloc_pinned_with_flags::<u32>(16, 0) }?;
    input.as_mut_slice()?.fill(1);
    let mut output = unsafe { ctx.alloc_pinned_with_flags::<u32>(16, 0) }?;
    let mut sum = unsafe { ctx.alloc_pinned_with_flags::<u64>(1, 0) }?;
    let mut dev = stream.alloc_zeros::<u32>(16)?;
    let (tx, _rx) = mpsc::channel::<u64>();
    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&input, &mut dev, &mut output, &mut sum, |s, (input, mut dev, mut output, mut sum)| {
            s.copy_htod(&input, &mut dev)?;
            s.copy_dtoh(&dev, &mut output)?;
            let first = output.slice(..1);
            s.host((&output, &first, &mut sum), move |(out, first, sum)| {
                sum[0] = out.iter().map(|&v| u64::from(v)).sum::<u64>() + u64::from(first[0]);
                let _ = tx.send(sum[0]);
            })?;
            s.host((), |()| {})?;
            s.copy_htod(&output, &mut dev)?;
            Ok::<(), cudagraph::Error>(())
        });
    })?;
    graph!(&mut cache, &stream, {
        capture(&input, &mut dev, &mut output, key = 16usize, |s, n, (input, mut dev, mut output)| {
            let n = *n;
            s.copy_htod(&input.slice(..n), &mut dev)?;
            s.copy_dtoh(&dev, &mut output)?;
            s.host((&mut output,), |(out,)| out.iter_mut().for_each(|v| *v += 1))?;
            Ok::<(), cudagraph::Error>(())
        });
    })?;
    // A builder's captured region takes pinned host handles too.
    let mut g = cache.builder(&stream);
    let (hr, dw) = (g.read(&input), g.write(&mut dev));
    g.capture(&stream, (hr, dw), |s, (input, mut dev)| s.copy_htod(&input, &mut dev));
    g.launch()
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
