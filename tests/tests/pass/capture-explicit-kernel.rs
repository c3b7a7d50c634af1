//! Explicit kernel nodes inside a capture: handles of the closure's views, a typed kernel node,
//! the node kept out of the closure, its parameters set on the exec with handles of the operands
//! the exec holds; the same inside a `capture` statement of `graph!`.
//!
//! A pass case: must compile. `main` runs but never touches CUDA.

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::Ptx;
use cudagraph::{CapturedKernel, GraphCache, capture, graph, kernels};

kernels! {
    struct K {
        fn affine(n: u32, a: u32, b: u32, x: &[u32], y: &mut [u32]);
    }
}

fn run() -> cudagraph::Result<()> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, Ptx::from_src("")) }?;
    let cfg = LaunchConfig::for_num_elems(1024);
    let x = stream.alloc_zeros::<u32>(1024)?;
    let mut y = stream.alloc_zeros::<u32>(1024)?;
    let mut out = stream.alloc_zeros::<u32>(1024)?;
    // A graph holds what its closure borrows as long as it lives: the node goes out through a cell.
    let node: std::cell::OnceCell<CapturedKernel> = std::cell::OnceCell::new();
    let graph = capture(&stream, (&x, &mut y, &mut out), |s, (x, mut y, mut out)| {
        let _ = node.set(s.kernel(k.affine(1024, 2, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg))?);
        // A part of a view, and a read handle of a `CudaViewMut`.
        let head = x.slice(0..512);
        s.kernel(k.affine(512, 3, 0, s.read(&head)?, s.write(&mut out)?).launch(cfg))?;
        s.kernel(k.affine(1024, 1, 1, s.read(&y)?, s.write(&mut out)?).launch(cfg))?;
        s.copy(&y, &mut out)?;
        Ok::<(), cudagraph::Error>(())
    })?;
    let node = node.get().expect("recorded");
    assert!(node.is_recorded());
    let mut exec = graph.instantiate()?;
    for a in 2..5u32 {
        exec.set_kernel(node, k.affine(1024, a, 1, exec.read(0)?, exec.write(1)?).launch(cfg))?;
        exec.launch(&stream)?;
    }
    drop(exec);

    let mut cache = GraphCache::new();
    graph!(&mut cache, &stream, {
        capture(&x, &mut y, |s, (x, mut y)| {
            s.kernel(k.affine(1024, 2, 1, s.read(&x)?, s.write(&mut y)?).launch(cfg)).map(drop)
        });
    })?;
    Ok(())
}

fn main() {
    if std::env::args().count() > 100 {
        run().unwrap();
    }
}
