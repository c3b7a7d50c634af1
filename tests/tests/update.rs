//! GPU tests of the update engine: every change class between calls, compared after every call
//! with the same launches made eagerly with cudarc on a stream (integer data: exact equality).

use std::sync::Arc;

use cudagraph::cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, Result, graph, kernels};

const SRC: &str = include_str!("../kernels/update.cu");
const N: u32 = 256;

kernels! {
    /// Kernels of `tests/kernels/update.cu`.
    pub struct K {
        fn affine(n: u32, a: i32, b: i32, x: &[i32], y: &mut [i32]);
        fn append_digit(n: u32, a: i32, y: &mut [i32]);
        fn fill_index(n: u32, base: i32, y: &mut [i32]);
        fn reverse_shared(n: u32, base: i32, y: &mut [i32]);
    }
}

kernels! {
    /// One kernel named `step`, loaded from two modules that define it differently.
    pub struct Step {
        fn step(n: u32, y: &mut [i32]);
    }
}

fn setup() -> Result<(Arc<CudaContext>, Arc<CudaStream>, K)> {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let k = unsafe { K::load(&ctx, compile_ptx(SRC)?) }?;
    Ok((ctx, stream, k))
}

fn cfg(n: u32) -> LaunchConfig {
    LaunchConfig::for_num_elems(n)
}

fn host(stream: &Arc<CudaStream>, x: &CudaSlice<i32>) -> Vec<i32> {
    stream.clone_dtoh(x).expect("copy to host")
}

fn iota(stream: &Arc<CudaStream>, n: u32) -> Result<CudaSlice<i32>> {
    Ok(stream.clone_htod(&(0..n as i32).collect::<Vec<_>>())?)
}

/// Eager launch of `f` with the given arguments pushed in order.
macro_rules! eager {
    ($stream:expr, $f:expr, $cfg:expr, $($arg:expr),* $(,)?) => {{
        let mut b = $stream.launch_builder($f);
        $(b.arg($arg);)*
        // SAFETY: the tests pass exactly the kernel's parameter types, and buffers of >= n elements.
        unsafe { b.launch($cfg) }?;
    }};
}

fn func<'a>(k: &'a K, name: &str) -> &'a CudaFunction {
    k.function(name).expect("declared")
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn scalar_arguments_change_every_call() -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let x = iota(&stream, N)?;
    let (mut y, mut e) = (stream.alloc_zeros::<i32>(N as usize)?, stream.alloc_zeros(N as usize)?);
    let mut cache = GraphCache::new();
    for step in 0..20i32 {
        let (a, b) = (step - 7, 3 * step);
        graph!(&mut cache, &stream, {
            k.affine(N, a, b, &x, &mut y).launch(cfg(N));
        })?;
        eager!(stream, func(&k, "affine"), cfg(N), &N, &a, &b, &x, &mut e);
        assert_eq!(host(&stream, &y), host(&stream, &e), "step {step}");
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.node_updates, s.nodes_unchanged), (1, 1, 19, 0));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn launches_use_the_values_of_their_own_call() -> Result<()> {
    // No synchronization between calls: if the driver read the arguments at launch time from
    // memory the next call overwrites, the digits would repeat.
    let (_ctx, stream, k) = setup()?;
    let (mut y, mut e) = (stream.alloc_zeros::<i32>(N as usize)?, stream.alloc_zeros(N as usize)?);
    let mut cache = GraphCache::new();
    for digit in 1..=7 {
        graph!(&mut cache, &stream, {
            k.append_digit(N, digit, &mut y).launch(cfg(N));
        })?;
        eager!(stream, func(&k, "append_digit"), cfg(N), &N, &digit, &mut e);
    }
    let got = host(&stream, &y);
    assert_eq!(got, host(&stream, &e));
    assert!(got.iter().all(|&v| v == 1_234_567), "{:?}", &got[..4]);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_pointers_swap_every_call() -> Result<()> {
    // One exec per variant (the update ladder sends the swapped pointers every call), then the
    // default: a second exec for the other buffer set (built when the first set comes back),
    // after which each call launches the exec holding its pointers with nothing sent.
    for execs in [1, GraphCache::DEFAULT_EXECS_PER_VARIANT] {
        pointer_swaps(execs)?;
    }
    Ok(())
}

fn pointer_swaps(execs: usize) -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let mut u = iota(&stream, N)?;
    let mut v = stream.alloc_zeros::<i32>(N as usize)?;
    let mut eu = iota(&stream, N)?;
    let mut ev = stream.alloc_zeros::<i32>(N as usize)?;
    let mut cache = GraphCache::new();
    cache.set_execs_per_variant(execs);
    for _ in 0..30 {
        graph!(&mut cache, &stream, {
            k.affine(N, 2, 1, &u, &mut v).launch(cfg(N));
        })?;
        eager!(stream, func(&k, "affine"), cfg(N), &N, &2i32, &1i32, &eu, &mut ev);
        std::mem::swap(&mut u, &mut v);
        std::mem::swap(&mut eu, &mut ev);
        assert_eq!(host(&stream, &u), host(&stream, &eu));
    }
    let s = cache.stats();
    let updates = (s.builds, s.node_updates, s.exec_updates, s.reinstantiations);
    if execs == 1 {
        assert_eq!(updates, (1, 29, 0, 0), "{s:?}");
    } else {
        // Call 1 updates (set b not seen before), call 2 builds set a's exec again (seen).
        assert_eq!(updates, (2, 1, 0, 0), "{s:?}");
        assert_eq!((s.memo_builds, s.memo_hits), (1, 27), "{s:?}");
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn grid_and_block_change() -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let n = 4 * 4 * 4 * 64;
    let (mut y, mut e) = (stream.alloc_zeros::<i32>(n)?, stream.alloc_zeros::<i32>(n)?);
    let mut cache = GraphCache::new();
    let shapes = [
        ((1, 1, 1), (32, 1, 1)),
        ((4, 1, 1), (32, 1, 1)),
        ((2, 2, 2), (8, 2, 2)),
        ((4, 4, 4), (4, 4, 4)),
        ((3, 1, 2), (64, 1, 1)),
    ];
    for (i, &(grid, block)) in shapes.iter().cycle().take(12).enumerate() {
        let base = 1000 * i as i32;
        let c = LaunchConfig { grid_dim: grid, block_dim: block, shared_mem_bytes: 0 };
        let n32 = n as u32;
        graph!(&mut cache, &stream, {
            zero(&mut y);
            k.fill_index(n32, base, &mut y).launch(c);
        })?;
        stream.memset_zeros(&mut e)?;
        eager!(stream, func(&k, "fill_index"), c, &n32, &base, &mut e);
        assert_eq!(host(&stream, &y), host(&stream, &e), "shape {grid:?} {block:?}");
    }
    assert_eq!(cache.stats().builds, 1);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dynamic_shared_memory_changes() -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let (mut y, mut e) = (stream.alloc_zeros::<i32>(N as usize)?, stream.alloc_zeros(N as usize)?);
    let mut cache = GraphCache::new();
    for (i, block) in [32u32, 64, 128, 256, 32].into_iter().enumerate() {
        let c = LaunchConfig {
            grid_dim: (N / block, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: block * 4,
        };
        let base = i as i32;
        graph!(&mut cache, &stream, {
            k.reverse_shared(N, base, &mut y).launch(c);
        })?;
        eager!(stream, func(&k, "reverse_shared"), c, &N, &base, &mut e);
        assert_eq!(host(&stream, &y), host(&stream, &e), "block {block}");
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.node_updates), (1, 4));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn kernel_function_swaps_between_modules() -> Result<()> {
    let (ctx, stream, _) = setup()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let add = unsafe { Step::load(&ctx, compile_ptx(SRC.replace("step_add", "step"))?) }?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let mul = unsafe { Step::load(&ctx, compile_ptx(SRC.replace("step_mul", "step"))?) }?;
    // One exec per variant: the function is sent at every swap; by default the module that
    // comes back gets an exec of its own, and later swaps launch it with nothing sent.
    for execs in [1, GraphCache::DEFAULT_EXECS_PER_VARIANT] {
        let (mut y, mut e) = (iota(&stream, N)?, iota(&stream, N)?);
        let mut cache = GraphCache::new();
        cache.set_execs_per_variant(execs);
        for i in 0..10 {
            let k = if i % 3 == 0 { &mul } else { &add };
            graph!(&mut cache, &stream, {
                k.step(N, &mut y).launch(cfg(N));
            })?;
            eager!(stream, k.function("step").unwrap(), cfg(N), &N, &mut e);
            assert_eq!(host(&stream, &y), host(&stream, &e), "execs {execs}, call {i}");
        }
        let s = cache.stats();
        if execs == 1 {
            assert_eq!(s.builds, 1);
            assert!(s.node_updates >= 6, "{s:?}");
        } else {
            assert_eq!((s.builds, s.memo_builds), (2, 1), "{s:?}");
            assert!(s.memo_hits >= 4 && s.node_updates <= 2, "{s:?}");
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn four_nodes_of_one_kernel_update_independently() -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let sizes = [1usize, 8, 27, 64];
    let mut ys: Vec<CudaSlice<i32>> =
        sizes.iter().map(|&s| stream.alloc_zeros(s)).collect::<std::result::Result<_, _>>()?;
    let mut es: Vec<CudaSlice<i32>> =
        sizes.iter().map(|&s| stream.alloc_zeros(s)).collect::<std::result::Result<_, _>>()?;
    let mut cache = GraphCache::new();
    let dims = |g: u32| ((g, g, g), (1, 1, 1));
    for round in 0..10 {
        let b: [i32; 4] = [round, 100 + round * 2, 200 + round * 3, 300 + round * 4];
        let n: [u32; 4] = [1, 8, 27, 64];
        graph!(&mut cache, &stream, {
            k.fill_index(n[0], b[0], &mut ys[0]).launch(dims(1));
            k.fill_index(n[1], b[1], &mut ys[1]).launch(dims(2));
            k.fill_index(n[2], b[2], &mut ys[2]).launch(dims(3));
            k.fill_index(n[3], b[3], &mut ys[3]).launch(dims(4));
        })?;
        for (i, e) in es.iter_mut().enumerate() {
            let g = i as u32 + 1;
            let c = LaunchConfig { grid_dim: (g, g, g), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
            eager!(stream, func(&k, "fill_index"), c, &n[i], &b[i], e);
        }
        for i in 0..4 {
            assert_eq!(host(&stream, &ys[i]), host(&stream, &es[i]), "round {round} node {i}");
        }
    }
    let s = cache.stats();
    assert_eq!((s.builds, s.node_updates), (1, 36));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_variants_alternate_a_thousand_times() -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let x = iota(&stream, N)?;
    let (mut y, mut e) = (stream.alloc_zeros::<i32>(N as usize)?, stream.alloc_zeros(N as usize)?);
    let mut cache = GraphCache::new();
    for step in 0..1000u32 {
        let odd = step % 2 == 1;
        graph!(&mut cache, &stream, {
            if odd {
                k.affine(N, 1, 1, &x, &mut y).launch(cfg(N));
            } else {
                k.append_digit(N, 1, &mut y).launch(cfg(N));
            }
        })?;
        if odd {
            eager!(stream, func(&k, "affine"), cfg(N), &N, &1i32, &1i32, &x, &mut e);
        } else {
            eager!(stream, func(&k, "append_digit"), cfg(N), &N, &1i32, &mut e);
        }
    }
    assert_eq!(host(&stream, &y), host(&stream, &e));
    let s = cache.stats();
    assert_eq!((s.builds, s.instantiations, s.hits, s.node_updates), (2, 2, 998, 0));
    let mut hits = cache.variant_hits();
    hits.sort_unstable();
    assert_eq!(hits, [(0, 499), (1, 499)]);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_cache_on_two_streams_in_turn() -> Result<()> {
    let (ctx, a, k) = setup()?;
    let b = ctx.new_stream()?;
    let (mut y, mut e) = (a.alloc_zeros::<i32>(N as usize)?, a.alloc_zeros(N as usize)?);
    let mut cache = GraphCache::new();
    for digit in 1..=8 {
        let s = if digit % 2 == 0 { &a } else { &b };
        graph!(&mut cache, s, {
            k.append_digit(N, digit, &mut y).launch(cfg(N));
        })?;
        eager!(a, func(&k, "append_digit"), cfg(N), &N, &digit, &mut e);
    }
    // Read on a third stream: cudarc's events order it after the graph's last write.
    let c = ctx.new_stream()?;
    let got = c.clone_dtoh(&y)?;
    assert!(got.iter().all(|&v| v == 12_345_678), "{:?}", &got[..4]);
    assert_eq!(got, host(&a, &e));
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn buffers_dropped_right_after_a_call_are_safe() -> Result<()> {
    // Each call reads and writes freshly allocated buffers that are dropped immediately after
    // the call, without synchronizing; cudarc's events keep their memory until the graph ran.
    // Run under compute-sanitizer memcheck to see a use after free if there were one.
    let (_ctx, stream, k) = setup()?;
    let mut keep = stream.alloc_zeros::<i32>(N as usize)?;
    let mut cache = GraphCache::new();
    for i in 0..50 {
        let x = iota(&stream, N)?;
        let mut t = stream.alloc_zeros::<i32>(N as usize)?;
        graph!(&mut cache, &stream, {
            k.affine(N, 3, i, &x, &mut t).launch(cfg(N));
            copy(&t, &mut keep);
        })?;
        drop(x);
        drop(t);
    }
    let want: Vec<i32> = (0..N as i32).map(|v| 3 * v + 49).collect();
    assert_eq!(host(&stream, &keep), want);
    assert_eq!(cache.stats().builds, 1);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn upload_before_launch() -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let x = iota(&stream, N)?;
    let mut y = stream.alloc_zeros::<i32>(N as usize)?;
    let mut cache = GraphCache::new();
    cache.upload(&stream)?; // empty cache: nothing to do
    for b in 0..3 {
        graph!(&mut cache, &stream, {
            k.affine(N, 1, b, &x, &mut y).launch(cfg(N));
        })?;
        cache.upload(&stream)?;
    }
    let want: Vec<i32> = (0..N as i32).map(|v| v + 2).collect();
    assert_eq!(host(&stream, &y), want);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn eager_mode_computes_what_the_graph_computes() -> Result<()> {
    // The same body run as a graph and through the eager oracle, on the same inputs.
    let (_ctx, stream, k) = setup()?;
    let x = iota(&stream, N)?;
    let mut results = Vec::new();
    for mode in [cudagraph::Mode::Graph, cudagraph::Mode::Eager] {
        let (mut y, mut z) =
            (stream.alloc_zeros::<i32>(N as usize)?, stream.alloc_zeros(N as usize)?);
        let mut host_z = unsafe { stream.context().alloc_pinned::<i32>(N as usize)? };
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        for step in 0..5 {
            graph!(&mut cache, &stream, {
                memset(&mut z, 7i32);
                let a = k.affine(N, step, 2, &x, &mut y).launch(cfg(N));
                k.append_digit(N, step, &mut z).launch(cfg(N)).after(a);
                k.append_digit(N, 1, &mut y).launch(cfg(N));
                copy(&z, &mut host_z);
            })?;
        }
        let s = cache.stats();
        match mode {
            cudagraph::Mode::Graph => assert_eq!((s.builds, s.launches, s.eager_calls), (1, 5, 0)),
            cudagraph::Mode::Eager => assert_eq!((s.builds, s.launches, s.eager_calls), (0, 0, 5)),
            cudagraph::Mode::Instantiate => unreachable!("not run in this test"),
        }
        results.push((host(&stream, &y), host_z.as_slice()?.to_vec()));
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0].1[0], 74);
    Ok(())
}

/// Calls equal to the last one launch without the node-by-node comparison
/// (`Stats::unchanged_calls`); a change between them (scalar, pointer, grid) still reaches the
/// GPU, and the call after it is unchanged again. Compared with eager launches after every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn unchanged_calls_skip_the_ladder_and_changes_between_them_still_arrive() -> Result<()> {
    let (_ctx, stream, k) = setup()?;
    let (mut x, mut other) = (iota(&stream, N)?, stream.clone_htod(&vec![5i32; N as usize])?);
    let mut current = 0;
    let (mut y, mut e) = (stream.alloc_zeros::<i32>(N as usize)?, stream.alloc_zeros(N as usize)?);
    let mut cache = GraphCache::new();
    // (a, which input, elements) per call: runs of equal calls with one change between runs.
    let calls = [(2, 0, N), (2, 0, N), (2, 0, N), (3, 0, N), (3, 0, N), (3, 1, N), (3, 1, N)];
    let calls = calls.iter().chain(&[(3, 1, N / 2), (3, 1, N / 2), (2, 0, N)]);
    let mut unchanged = 0;
    for (i, &(a, which, n)) in calls.enumerate() {
        if which != current {
            // Another input buffer: a pointer change.
            std::mem::swap(&mut x, &mut other);
            current = which;
        }
        let before = cache.stats();
        graph!(&mut cache, &stream, {
            k.affine(n, a, 1, &x, &mut y).launch(cfg(n));
            k.append_digit(n, a, &mut y).launch(cfg(n));
        })?;
        eager!(stream, func(&k, "affine"), cfg(n), &n, &a, &1i32, &x, &mut e);
        eager!(stream, func(&k, "append_digit"), cfg(n), &n, &a, &mut e);
        assert_eq!(host(&stream, &y), host(&stream, &e), "call {i}");
        let after = cache.stats();
        let same = i > 0 && after.node_updates == before.node_updates;
        if same && after.builds == before.builds {
            unchanged += 1;
        }
        assert_eq!(after.unchanged_calls, unchanged, "call {i}: {after:?}");
    }
    assert_eq!(unchanged, 5, "{:?}", cache.stats());
    Ok(())
}
