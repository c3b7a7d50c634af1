//! GPU tests of the holes through which safe code could race or write freed memory (issue 11):
//! buffers used on several streams, buffers freed right after a call, handles kept from another
//! call, overlapping views, and the smaller ones (`upload` on another context, non-UTF-8 DOT
//! paths, a kernel's function swapped to another module). Each compares the graph's result with
//! the same work launched eagerly on one stream, exactly (integer data).

mod common;

use std::cell::RefCell;
use std::sync::Arc;

use common::{Ops, Result, assert_same, gpu, host, launch};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudagraph::{DevRead, DevWrite, Error, GraphCache, KernelCall, graph};

const N: u32 = 1 << 16;
/// Steps of `slow_affine` / `slow_iota`: a few milliseconds on an H200, so that a later
/// writer or free that does not wait would overtake the kernel.
const SPINS: u32 = 1 << 17;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// Who reads `x` quickly on the second stream, and who overwrites it on the third.
#[derive(Clone, Copy, Debug, PartialEq)]
enum By {
    Graph,
    Cudarc,
}

/// A slow graph read of `x` on stream 1, a fast read on stream 2, then a write of `x` on stream
/// 3: the write must wait for the slow read, whoever the fast reader and the writer are (the
/// graph reads leave their completion on `x`'s own stream, which every later graph use waits
/// for; a graph read also records cudarc's read event). Returns `(y1, y2, x)`.
fn three_streams(fast: By, writer: By) -> Result<(Vec<u32>, Vec<u32>, Vec<u32>)> {
    let (ctx, _, k) = gpu()?;
    let own = ctx.new_stream()?;
    let (s1, s2, s3) = (ctx.new_stream()?, ctx.new_stream()?, ctx.new_stream()?);
    let len = N as usize;
    let mut x = own.clone_htod(&host::iota(N, 3, 1))?;
    let (mut y1, mut y2) = (own.alloc_zeros::<u32>(len)?, own.alloc_zeros::<u32>(len)?);
    own.synchronize()?;
    let (mut c1, mut c2, mut c3) = (GraphCache::new(), GraphCache::new(), GraphCache::new());
    let cfg = cfg();
    graph!(&mut c1, &s1, {
        k.slow_affine(N, SPINS, 5, 7, &x, &mut y1).launch(cfg);
    })?;
    match fast {
        By::Graph => graph!(&mut c2, &s2, {
            k.affine(N, 3, 1, &x, &mut y2).launch(cfg);
        })?,
        By::Cudarc => launch!(s2, k, "affine", cfg; &N, &3u32, &1u32, &x, &mut y2)?,
    }
    match writer {
        By::Graph => graph!(&mut c3, &s3, {
            k.iota(N, 11, 13, &mut x).launch(cfg);
        })?,
        By::Cudarc => launch!(s3, k, "iota", cfg; &N, &11u32, &13u32, &mut x)?,
    }
    ctx.synchronize()?;
    Ok((own.clone_dtoh(&y1)?, own.clone_dtoh(&y2)?, own.clone_dtoh(&x)?))
}

/// The same three steps eagerly on one stream: the sequential meaning.
fn three_streams_eager() -> Result<(Vec<u32>, Vec<u32>, Vec<u32>)> {
    let (_ctx, s, k) = gpu()?;
    let len = N as usize;
    let mut x = s.clone_htod(&host::iota(N, 3, 1))?;
    let (mut y1, mut y2) = (s.alloc_zeros::<u32>(len)?, s.alloc_zeros::<u32>(len)?);
    let cfg = cfg();
    launch!(s, k, "slow_affine", cfg; &N, &SPINS, &5u32, &7u32, &x, &mut y1)?;
    launch!(s, k, "affine", cfg; &N, &3u32, &1u32, &x, &mut y2)?;
    launch!(s, k, "iota", cfg; &N, &11u32, &13u32, &mut x)?;
    Ok((s.clone_dtoh(&y1)?, s.clone_dtoh(&y2)?, s.clone_dtoh(&x)?))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_slow_graph_read_is_not_overtaken_by_a_later_writer_on_a_third_stream() -> Result {
    let (e1, e2, ex) = three_streams_eager()?;
    assert_same(&e1, &host::affine(&host::iota(N, 3, 1), 5, 7), "eager slow read vs host model");
    for (fast, writer) in [(By::Graph, By::Graph), (By::Cudarc, By::Graph), (By::Graph, By::Cudarc)]
    {
        let (y1, y2, x) = three_streams(fast, writer)?;
        let what = format!("fast reader {fast:?}, writer {writer:?}");
        assert_same(&y1, &e1, &format!("{what}: slow graph read vs eager"));
        assert_same(&y2, &e2, &format!("{what}: fast read vs eager"));
        assert_same(&x, &ex, &format!("{what}: written buffer vs eager"));
    }
    // The control, plain cudarc on all three streams, is not asserted: cudarc keeps one read
    // event per buffer, so its own later writer may overtake its first reader.
    let (ctx, _, k) = gpu()?;
    let (s1, s2, s3) = (ctx.new_stream()?, ctx.new_stream()?, ctx.new_stream()?);
    let mut x = s1.clone_htod(&host::iota(N, 3, 1))?;
    let (mut y1, mut y2) = (s1.alloc_zeros::<u32>(N as usize)?, s1.alloc_zeros::<u32>(N as usize)?);
    s1.synchronize()?;
    let cfg = cfg();
    launch!(s1, k, "slow_affine", cfg; &N, &SPINS, &5u32, &7u32, &x, &mut y1)?;
    launch!(s2, k, "affine", cfg; &N, &3u32, &1u32, &x, &mut y2)?;
    launch!(s3, k, "iota", cfg; &N, &11u32, &13u32, &mut x)?;
    ctx.synchronize()?;
    let raced = s1.clone_dtoh(&y1)? != e1;
    println!(
        "control, plain cudarc on three streams: the writer overtook the slow reader: {raced}"
    );
    Ok(())
}

/// A graph writes `x` slowly on `graph_stream`; `x` is dropped right after the call, and a fresh
/// allocation on `x`'s own stream is filled with a pattern. The fresh buffer must keep the
/// pattern: the free waits for the graph. Returns whether the fresh buffer reused `x`'s memory.
fn dropped_right_after_the_call(
    k: &Ops,
    own: &Arc<CudaStream>,
    graph_stream: Arc<CudaStream>,
    drop_graph_stream: bool,
) -> Result<bool> {
    let len = N as usize;
    let mut x = own.alloc_zeros::<u32>(len)?;
    own.synchronize()?;
    let addr = x.device_ptr(own).0;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    graph!(&mut cache, &graph_stream, {
        k.slow_iota(N, SPINS, 1, 2, &mut x).launch(cfg);
    })?;
    if drop_graph_stream {
        // The last extra stream of its context object: cudarc goes back to single-stream mode.
        drop(graph_stream);
    }
    drop(x);
    let pattern: Vec<u32> = (0..N).map(|i| i ^ 0x5a5a_5a5a).collect();
    // SAFETY: filled by the copy below before it is read.
    let mut fresh = unsafe { own.alloc::<u32>(len) }?;
    let reused = fresh.device_ptr(own).0 == addr;
    own.memcpy_htod(&pattern, &mut fresh)?;
    own.context().synchronize()?;
    assert_same(&own.clone_dtoh(&fresh)?, &pattern, "fresh allocation after the free");
    drop(cache);
    Ok(reused)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_buffer_dropped_right_after_the_call_is_freed_after_the_graph() -> Result {
    let (_ctx, _, k) = gpu()?;
    // The graph's result itself, against eager, once.
    {
        let (ctx, s, _) = gpu()?;
        let mut x = s.alloc_zeros::<u32>(N as usize)?;
        let mut cache = GraphCache::new();
        let cfg = cfg();
        graph!(&mut cache, &s, {
            k.slow_iota(N, 64, 1, 2, &mut x).launch(cfg);
        })?;
        let mut e = s.alloc_zeros::<u32>(N as usize)?;
        launch!(s, k, "slow_iota", cfg; &N, &64u32, &1u32, &2u32, &mut e)?;
        ctx.synchronize()?;
        assert_same(&s.clone_dtoh(&x)?, &s.clone_dtoh(&e)?, "slow_iota: graph vs eager");
        assert_same(&s.clone_dtoh(&x)?, &host::slow_iota(N, 64, 1, 2), "slow_iota: host model");
    }
    let mut reuses = [0u32; 2];
    for _ in 0..4 {
        // (a) Two context objects of one device: the buffer's (single-stream mode, so cudarc's
        // free does not wait for events) and the graph stream's.
        let (a, b) = (CudaContext::new(0)?, CudaContext::new(0)?);
        reuses[0] += u32::from(dropped_right_after_the_call(
            &k,
            &a.default_stream(),
            b.new_stream()?,
            false,
        )?);
        // (b) The graph's stream is the last extra stream of the buffer's context object and is
        // dropped right after the call, before the buffer.
        let c = CudaContext::new(0)?;
        let graph_stream = c.new_stream()?;
        reuses[1] +=
            u32::from(dropped_right_after_the_call(&k, &c.default_stream(), graph_stream, true)?);
    }
    println!(
        "fresh allocations that reused the freed memory: (a) {} of 4, (b) {} of 4",
        reuses[0], reuses[1]
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn buffers_on_another_stream_are_ordered_through_it_and_counted() -> Result {
    let (ctx, stream, k) = gpu()?;
    let own = ctx.new_stream()?;
    let len = N as usize;
    let (mut x, mut y) = (own.alloc_zeros::<u32>(len)?, stream.alloc_zeros::<u32>(len)?);
    let (mut ex, mut ey) = (stream.alloc_zeros::<u32>(len)?, stream.alloc_zeros::<u32>(len)?);
    let mut cache = GraphCache::new();
    let cfg = cfg();
    for call in 0..3u32 {
        graph!(&mut cache, &stream, {
            k.iota(N, 3, call, &mut x).launch(cfg);
            k.affine(N, 5, 1, &x, &mut y).launch(cfg);
        })?;
        launch!(stream, k, "iota", cfg; &N, &3u32, &call, &mut ex)?;
        launch!(stream, k, "affine", cfg; &N, &5u32, &1u32, &ex, &mut ey)?;
        // Work on x's own stream right after the call sees the graph's result.
        let seen = own.clone_dtoh(&x)?;
        assert_same(&seen, &host::iota(N, 3, call), "x read on its own stream");
    }
    assert_same(&stream.clone_dtoh(&y)?, &stream.clone_dtoh(&ey)?, "y: graph vs eager");
    // One wait before and one after each call, for x's own stream only.
    assert_eq!(cache.stats().stream_waits, 6, "{:?}", cache.stats());
    Ok(())
}

thread_local! {
    /// A handle kept from a builder whose buffer, cache and stream were leaked ('static).
    static STASH: RefCell<Option<DevWrite<'static, u32>>> = const { RefCell::new(None) };
}

impl Ops {
    /// A method of the user's that hands a kept handle to a kernel: it compiles, and `graph!`
    /// refuses the node at run time, since the handle is not one of the statement's operands.
    fn iota_into_stash(&self, n: u32) -> KernelCall<'_, (u32, u32, u32, DevWrite<'static, u32>)> {
        let w = STASH.with(|s| s.borrow().expect("stashed"));
        self.iota(n, 1, 0, w)
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_handle_kept_from_elsewhere_is_refused_and_nothing_is_enqueued() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let len = N as usize;
    let kept: &'static mut CudaSlice<u32> = Box::leak(Box::new(stream.alloc_zeros::<u32>(len)?));
    let leaked_cache: &'static mut GraphCache = Box::leak(Box::new(GraphCache::new()));
    let leaked_stream: &'static Arc<CudaStream> = Box::leak(Box::new(stream.clone()));
    let mut g = leaked_cache.builder(leaked_stream);
    STASH.with(|s| *s.borrow_mut() = Some(g.write(kept)));
    drop(g);
    let mut y = stream.alloc_zeros::<u32>(len)?;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    let r = graph!(&mut cache, &stream, {
        k.iota(N, 7, 7, &mut y).launch(cfg);
        k.iota_into_stash(N).launch(cfg);
    });
    match r {
        Err(Error::InvalidNode { site, why }) => {
            assert_eq!(site.label, "iota_into_stash");
            assert!(why.contains("did not borrow in this call"), "{why}");
        }
        r => panic!("expected InvalidNode, got {r:?}"),
    }
    stream.synchronize()?;
    assert_eq!(cache.stats().launches, 0);
    assert!(stream.clone_dtoh(&y)?.iter().all(|&v| v == 0), "nothing was enqueued");
    // The cache is usable afterwards, and matches eager.
    graph!(&mut cache, &stream, {
        k.iota(N, 7, 7, &mut y).launch(cfg);
    })?;
    let mut e = stream.alloc_zeros::<u32>(len)?;
    launch!(stream, k, "iota", cfg; &N, &7u32, &7u32, &mut e)?;
    assert_same(
        &stream.clone_dtoh(&y)?,
        &stream.clone_dtoh(&e)?,
        "after the refusal: graph vs eager",
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn overlapping_views_of_one_allocation_are_refused_naming_both_statements() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let len = N as usize;
    let a = stream.clone_htod(&host::iota(N, 1, 0))?;
    let base = a.device_ptr(&stream).0;
    // SAFETY (of this test only): `b` aliases `a` from element 4 on, as two views of one
    // allocation would; it is leaked below, never freed, so `a` alone frees the memory.
    let mut b = unsafe { stream.upgrade_device_ptr::<u32>(base + 16, len - 4) };
    let mut c = stream.alloc_zeros::<u32>(len - 4)?;
    let n = N - 4;
    let cfg = LaunchConfig::for_num_elems(n);
    let mut cache = GraphCache::new();
    let r = graph!(&mut cache, &stream, {
        k.affine(n, 2, 0, &a, &mut c).launch(cfg);
        k.iota(n, 9, 9, &mut b).launch(cfg);
    });
    match r {
        Err(Error::Aliasing { first, second }) => {
            assert!(first.text.contains("affine"), "{first}");
            assert!(second.text.contains("iota"), "{second}");
        }
        r => panic!("expected Aliasing, got {r:?}"),
    }
    let mut g = cache.builder(&stream);
    let (ar, cw, bw) = (g.read(&a), g.write(&mut c), g.write(&mut b));
    g.kernel(k.affine(n, 2, 0, ar, cw).launch(cfg));
    g.kernel(k.iota(n, 9, 9, bw).launch(cfg));
    assert!(matches!(g.launch(), Err(Error::Aliasing { .. })));
    stream.synchronize()?;
    assert_eq!(cache.stats().launches, 0);
    assert_same(&stream.clone_dtoh(&a)?, &host::iota(N, 1, 0), "a untouched");
    assert!(stream.clone_dtoh(&c)?.iter().all(|&v| v == 0), "c untouched");
    // Disjoint views of the same allocation are fine, and match eager.
    let mut d = stream.alloc_zeros::<u32>(len - 4)?;
    graph!(&mut cache, &stream, {
        k.affine(n, 2, 0, &c, &mut d).launch(cfg);
        k.iota(n, 9, 9, &mut b).launch(cfg);
    })?;
    let mut e = stream.alloc_zeros::<u32>(len - 4)?;
    launch!(stream, k, "iota", cfg; &n, &9u32, &9u32, &mut e)?;
    assert_same(&stream.clone_dtoh(&b)?, &stream.clone_dtoh(&e)?, "b: graph vs eager");
    b.leak();
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn upload_on_a_stream_of_another_context_is_refused() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(N as usize)?;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    graph!(&mut cache, &stream, {
        k.iota(N, 1, 1, &mut x).launch(cfg);
    })?;
    let other = CudaContext::new_non_primary(0, 0)?;
    let foreign = other.new_stream()?;
    let e = cache.upload(&foreign).unwrap_err();
    assert!(e.to_string().contains("another context"), "{e}");
    cache.upload(&stream)?;
    assert_same(&stream.clone_dtoh(&x)?, &host::iota(N, 1, 1), "graph vs host model");
    Ok(())
}

#[cfg(unix)]
#[test]
#[ignore = "needs a CUDA GPU"]
fn debug_dot_print_writes_exactly_the_path_given() -> Result {
    use std::os::unix::ffi::OsStrExt;
    let (_ctx, stream, k) = gpu()?;
    let mut x = stream.alloc_zeros::<u32>(N as usize)?;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    graph!(&mut cache, &stream, {
        k.iota(N, 1, 1, &mut x).launch(cfg);
    })?;
    let dir = std::env::temp_dir().join(format!("cudagraph-dot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(std::ffi::OsStr::from_bytes(b"graph-\xff.dot"));
    assert!(cache.debug_dot_print(&path)?);
    let names: Vec<_> =
        std::fs::read_dir(&dir).expect("dir").map(|e| e.expect("entry").file_name()).collect();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(names, [std::ffi::OsString::from(std::ffi::OsStr::from_bytes(b"graph-\xff.dot"))]);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_function_swapped_to_another_module_keeps_the_template_graph_valid() -> Result {
    let (ctx, stream, k) = gpu()?;
    // SAFETY: the declarations match the kernels, which stay within their buffers.
    let other = unsafe { Ops::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx(common::SOURCE)?) }?;
    let mut x = stream.alloc_zeros::<u32>(N as usize)?;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    for (call, kk) in [&other, &k, &k].into_iter().enumerate() {
        let b = call as u32;
        graph!(&mut cache, &stream, {
            kk.iota(N, 3, b, &mut x).launch(cfg);
        })?;
        let mut e = stream.alloc_zeros::<u32>(N as usize)?;
        launch!(stream, k, "iota", cfg; &N, &3u32, &b, &mut e)?;
        assert_same(
            &stream.clone_dtoh(&x)?,
            &stream.clone_dtoh(&e)?,
            &format!("call {call}: graph vs eager"),
        );
        if call == 0 {
            continue;
        }
        // After the swap the exec runs `k`'s function; the template graph still names
        // `other`'s, whose module must stay loaded while the template lives.
        let path =
            std::env::temp_dir().join(format!("cudagraph-swap-{}-{call}.dot", std::process::id()));
        assert!(cache.debug_dot_print(&path)?);
        let dot = std::fs::read_to_string(&path).expect("DOT written");
        std::fs::remove_file(&path).ok();
        assert!(dot.contains("iota"), "{dot}");
    }
    drop(other);
    let path = std::env::temp_dir().join(format!("cudagraph-swap-{}.dot", std::process::id()));
    assert!(cache.debug_dot_print(&path)?);
    let dot = std::fs::read_to_string(&path).expect("DOT written");
    std::fs::remove_file(&path).ok();
    assert!(dot.contains("iota"), "{dot}");
    assert_eq!(cache.stats().node_updates, 2, "{:?}", cache.stats());
    Ok(())
}

// A user method on the `kernels!` struct forwards one `&mut place` handle to two buffer
// parameters. `graph!` rejects `k.mix(N, &x, &mut x)` at compile time and the builder rejects it
// at run time, but through a method every handle carries the same (call, place) tag and the plan
// lists the place as written, so `check_accesses` accepts it.
impl Ops {
    fn mix_in_place<'k, 'b>(
        &'k self,
        n: u32,
        x: DevWrite<'b, u32>,
    ) -> KernelCall<'k, (u32, DevRead<'b, u32>, DevWrite<'b, u32>)> {
        self.mix(n, x.read(), x)
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_user_method_cannot_pass_one_written_place_twice() -> Result {
    let (_ctx, s, k) = gpu()?;
    let mut x = s.clone_htod(&host::iota(N, 3, 1))?;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    let r = graph!(&mut cache, &s, {
        k.mix_in_place(N, &mut x).launch(cfg);
    });
    // InvalidNode, nothing enqueued: else `mix` would run with x == y (its cross-block reads of
    // x would race with its writes).
    assert!(
        matches!(r, Err(Error::InvalidNode { .. })),
        "aliased &[u32]/&mut [u32] accepted: {r:?}"
    );
    // The builder refuses the same thing:
    let mut g = cache.builder(&s);
    let w = g.write(&mut x);
    g.kernel(k.mix_in_place(N, w).launch(cfg));
    assert!(matches!(g.launch(), Err(Error::InvalidNode { .. })));
    Ok(())
}

// Two `Arc<CudaContext>` objects of one device. `x` belongs to `a` (multi-stream mode:
// streams `own` and `s3`); the graph runs on `b`'s default stream (`b` has no stream of its own,
// so cudarc's `SyncOnDrop::Record` checks `b.is_managing_stream_synchronization()` == false and
// records NOTHING). The ledger makes `own` wait for the graph, but a cudarc reader/writer on
// `s3` waits only for x's read/write events, which the graph never recorded.
fn two_ctx(graph_writes: bool) -> Result<(Vec<u32>, Vec<u32>)> {
    let (_, _, k) = gpu()?;
    let a = CudaContext::new(0)?;
    let b = CudaContext::new(0)?;
    let (own, s3) = (a.new_stream()?, a.new_stream()?);
    let gs = b.default_stream();
    let len = N as usize;
    let mut x = own.clone_htod(&host::iota(N, 3, 1))?;
    let mut y = own.alloc_zeros::<u32>(len)?;
    own.synchronize()?;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    if graph_writes {
        // slow graph write of x, then a cudarc read of x on s3 (copied into y).
        graph!(&mut cache, &gs, {
            k.slow_iota(N, SPINS, 1, 2, &mut x).launch(cfg);
        })?;
        launch!(s3, k, "affine", cfg; &N, &1u32, &0u32, &x, &mut y)?;
    } else {
        // slow graph read of x into y, then a cudarc overwrite of x on s3.
        graph!(&mut cache, &gs, {
            k.slow_affine(N, SPINS, 5, 7, &x, &mut y).launch(cfg);
        })?;
        launch!(s3, k, "iota", cfg; &N, &11u32, &13u32, &mut x)?;
    }
    a.synchronize()?;
    Ok((own.clone_dtoh(&x)?, own.clone_dtoh(&y)?))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_uses_are_recorded_whatever_the_graph_streams_context_object() -> Result {
    let want_x = host::slow_iota(N, SPINS, 1, 2);
    let (x, y) = two_ctx(true)?;
    assert_same(&x, &want_x, "graph write");
    assert_same(&y, &want_x, "cudarc read on a third stream after a graph write ");
    let (x, y) = two_ctx(false)?;
    assert_same(
        &y,
        &host::affine(&host::iota(N, 3, 1), 5, 7),
        "slow graph read overtaken by writer on s3",
    );
    assert_same(&x, &host::iota(N, 11, 13), "writer");
    Ok(())
}

// The module of a kernel still in flight unloaded. Call 2 swaps the node's function to
// k2's (per-node update); call 3 swaps it to k3's, so the cache drops its clone of k2's
// function; dropping k2 then runs cuModuleUnload while call 2's slow kernel may still run.
// (Plain cudarc allows the same: launch, then drop the module.) Correct results, no error from
// the context, and compute-sanitizer clean.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_function_swapped_away_while_in_flight_keeps_its_module() -> Result {
    let (ctx, s, k1) = gpu()?;
    let load = || -> Result<Ops> {
        // SAFETY: the declarations match the kernels.
        unsafe { Ops::load(&ctx, cudagraph::cudarc::nvrtc::compile_ptx(common::SOURCE)?) }
    };
    let (k2, k3) = (load()?, load()?);
    let mut x = s.alloc_zeros::<u32>(N as usize)?;
    let mut cache = GraphCache::new();
    let cfg = cfg();
    for (i, k) in [&k1, &k2, &k3].into_iter().enumerate() {
        graph!(&mut cache, &s, {
            k.slow_iota(N, SPINS, i as u32, 2, &mut x).launch(cfg);
        })?;
        if i == 2 {
            break;
        }
    }
    drop(k2); // call 2 may still run k2's function
    ctx.synchronize()?;
    assert_same(&s.clone_dtoh(&x)?, &host::slow_iota(N, SPINS, 2, 2), "last call");
    Ok(())
}
