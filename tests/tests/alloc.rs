//! Steady state allocates nothing: a `graph!` call whose parameters did not change, or changed
//! only in value (scalars, pointers), makes zero heap allocations. A counting global allocator
//! (this test binary only) counts them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use cudagraph::cudarc::driver::{CudaContext, LaunchConfig};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, Result, graph, kernels};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

kernels! {
    pub struct K {
        fn affine(n: u32, a: i32, b: i32, x: &[i32], y: &mut [i32]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn steady_state_calls_allocate_nothing() -> Result<()> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, compile_ptx(include_str!("../kernels/update.cu"))?) }?;
    let n = 1024u32;
    let mut u = stream.clone_htod(&(0..n as i32).collect::<Vec<_>>())?;
    let mut v = stream.alloc_zeros::<i32>(n as usize)?;
    let mut flags = stream.alloc_zeros::<u32>(4)?;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut cache = GraphCache::new();
    // The update ladder (one exec per variant): every changed call updates in place. The memo's
    // path is measured below.
    cache.set_execs_per_variant(1);
    let mut step = |cache: &mut GraphCache, a: i32, u: &mut _, v: &mut _| -> Result<()> {
        graph!(cache, &stream, {
            memset(&mut flags, 0u32);
            let s = k.affine(n, a, 1, &*u, &mut *v).launch(cfg);
            k.affine(n, 1, a, &*v, &mut *u).launch(cfg).after(s);
        })
    };
    // Warm-up: the build allocates, and so does the first use of each driver entry point
    // (cudarc resolves each symbol lazily, once). Steady state is everything after.
    step(&mut cache, 1, &mut u, &mut v)?; // build + instantiate
    step(&mut cache, 1, &mut u, &mut v)?; // unchanged
    step(&mut cache, 2, &mut u, &mut v)?; // scalar changed: first cuGraphExecKernelNodeSetParams
    std::mem::swap(&mut u, &mut v);
    step(&mut cache, 2, &mut u, &mut v)?; // pointers changed
    stream.synchronize()?;

    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for i in 0..100 {
        step(&mut cache, 1, &mut u, &mut v)?; // unchanged
        step(&mut cache, i, &mut u, &mut v)?; // scalar changed
        std::mem::swap(&mut u, &mut v);
        step(&mut cache, i, &mut u, &mut v)?; // pointers changed
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    stream.synchronize()?;
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.launches), (1, 1, 304));
    assert!(s.node_updates > 0 && s.nodes_unchanged > 0, "{s:?}");
    assert_eq!(allocations, 0, "steady-state graph! calls allocated {allocations} times");

    // The memo (default execs per variant): ping-pong buffers with fixed scalars get an exec
    // per set in the first rounds, then every call launches one with nothing sent.
    let mut memo = GraphCache::new();
    for _ in 0..6 {
        step(&mut memo, 3, &mut u, &mut v)?;
        std::mem::swap(&mut u, &mut v);
    }
    stream.synchronize()?;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let hits = memo.stats().memo_hits;
    for _ in 0..100 {
        step(&mut memo, 3, &mut u, &mut v)?;
        std::mem::swap(&mut u, &mut v);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    stream.synchronize()?;
    let s = memo.stats();
    assert_eq!(s.memo_hits - hits, 100, "{s:?}");
    assert_eq!(allocations, 0, "memoized graph! calls allocated {allocations} times");
    Ok(())
}
