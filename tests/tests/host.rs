//! Host function nodes (`host(&a, &mut b, |(a, b)| …)` in `graph!`), on the GPU: each against
//! the same work run eagerly (`Mode::Eager`: the closure through `cuLaunchHostFunc` on the
//! stream) and against a host model.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use common::{Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::{Error, GraphCache, Mode, graph};

const N: u32 = 1024;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// A host node after a kernel, five calls of each mode: the closure ran once per launch, in
/// call order, each with its own call's value.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_node_runs_once_per_launch_with_its_calls_closure() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(N as usize)?;
    for mode in [Mode::Graph, Mode::Eager] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        for step in 0..5u32 {
            let seen = seen.clone();
            graph!(&mut cache, &s, {
                k.iota(N, 1, step, &mut x).launch(cfg());
                host(move |()| seen.lock().unwrap().push(step));
            })?;
        }
        s.synchronize()?;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec![0, 1, 2, 3, 4], "{mode:?}: the closures that ran, in order");
        if mode == Mode::Graph {
            let st = cache.stats();
            assert_eq!((st.builds, st.launches), (1, 5), "one graph, five launches: {st:?}");
        }
    }
    Ok(())
}

/// A host node reads what the copy before it wrote to pinned memory and writes another pinned
/// buffer, which the copy after it sends back to the device: every call's values (which change
/// every call) went through the host closure, graph and eager alike.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_node_sees_the_copy_before_it_and_feeds_the_copy_after_it() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let len = N as usize;
    let mut results = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut x = s.alloc_zeros::<u32>(len)?;
        let mut y = s.alloc_zeros::<u32>(len)?;
        // SAFETY: pinned buffers of plain u32, written by the graph before they are read.
        let (mut inp, mut out) =
            unsafe { (ctx.alloc_pinned::<u32>(len)?, ctx.alloc_pinned::<u32>(len)?) };
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut got = Vec::new();
        for step in 0..4u32 {
            graph!(&mut cache, &s, {
                k.iota(N, 3, step, &mut x).launch(cfg());
                copy(&x, &mut inp);
                host(&inp, &mut out, move |(inp, out)| {
                    for (o, i) in out.iter_mut().zip(inp) {
                        *o = i.wrapping_mul(7) ^ step;
                    }
                });
                copy(&out, &mut y);
                k.affine(N, 2, 1, &y, &mut x).launch(cfg());
            })?;
            got.push(s.clone_dtoh(&x)?);
        }
        results.push((mode, got));
    }
    for (mode, got) in &results {
        for (step, g) in got.iter().enumerate() {
            let step = step as u32;
            let want: Vec<u32> =
                host::iota(N, 3, step).iter().map(|i| i.wrapping_mul(7) ^ step).collect();
            let want = host::affine(&want, 2, 1);
            assert_same(g, &want, &format!("{mode:?} call {step}"));
        }
    }
    assert_eq!(results[0].1, results[1].1, "graph and eager");
    Ok(())
}

/// A panic in a host closure does not unwind into the driver: the next call on the cache
/// returns it (naming the host node and the message) and enqueues nothing, and the call after
/// that runs normally. Eager mode the same.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panicking_host_closure_is_the_error_of_the_next_call() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(N as usize)?;
    for mode in [Mode::Graph, Mode::Eager] {
        let count = Arc::new(AtomicU32::new(0));
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut results = Vec::new();
        for step in 0..4u32 {
            let count = count.clone();
            let r = graph!(&mut cache, &s, {
                k.iota(N, 1, step, &mut x).launch(cfg());
                host(move |()| {
                    count.fetch_add(1, Ordering::SeqCst);
                    assert!(step != 1, "host closure failed at step {step}");
                });
            });
            s.synchronize()?;
            results.push(r);
        }
        let oks: Vec<bool> = results.iter().map(|r| r.is_ok()).collect();
        assert_eq!(oks, [true, true, false, true], "{mode:?}: {results:?}");
        match &results[2] {
            Err(Error::HostFunction { site, message }) => {
                assert_eq!(site.label, "host", "{mode:?}");
                assert!(message.contains("host closure failed at step 1"), "{mode:?}: {message}");
            }
            other => panic!("{mode:?}: expected Error::HostFunction, got {other:?}"),
        }
        // Calls 0, 1 and 3 launched (2 was the error, which enqueued nothing).
        assert_eq!(count.load(Ordering::SeqCst), 3, "{mode:?}");
        assert_same(&s.clone_dtoh(&x)?, &host::iota(N, 1, 3), &format!("{mode:?} after"));
    }
    Ok(())
}

/// A variant evicted (cache of one variant, the other branch of a host `if` called next) while
/// its launch is still running a slow kernel: its host node still runs that launch's closure,
/// once, after the kernel.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_evicted_variants_pending_host_node_still_runs() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(N as usize)?;
    let ran = Arc::new(AtomicU32::new(0));
    let mut cache = GraphCache::with_max_variants(1);
    for slow in [true, false] {
        let ran = ran.clone();
        graph!(&mut cache, &s, {
            if slow {
                k.slow_iota(N, 1 << 22, 1, 0, &mut x).launch(cfg());
                host(move |()| {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
            } else {
                k.iota(N, 1, 0, &mut x).launch(cfg());
            }
        })?;
    }
    assert_eq!(cache.stats().evictions, 1, "the slow variant was evicted");
    s.synchronize()?;
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the evicted variant's host closure ran once");
    assert_same(&s.clone_dtoh(&x)?, &host::iota(N, 1, 0), "after both calls");
    Ok(())
}

/// A host node between two kernels orders them like any node: the second kernel reads what
/// the first wrote only after the closure ran (the closure records the time it ran, the host
/// sees the result of both kernels afterwards).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_node_is_ordered_after_its_predecessors() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let len = N as usize;
    let mut x = s.alloc_zeros::<u32>(len)?;
    // SAFETY: a pinned u32 buffer, written by the copy before the host node reads it.
    let mut p = unsafe { ctx.alloc_pinned::<u32>(len)? };
    let sums = Arc::new(Mutex::new(Vec::new()));
    let mut cache = GraphCache::new();
    for step in 0..3u32 {
        let sums = sums.clone();
        graph!(&mut cache, &s, {
            k.slow_iota(N, 1 << 16, 1, step, &mut x).launch(cfg());
            copy(&x, &mut p);
            host(&p, move |(p,)| {
                sums.lock().unwrap().push(p.iter().fold(0u32, |a, &v| a.wrapping_add(v)));
            });
        })?;
    }
    s.synchronize()?;
    let want: Vec<u32> = (0..3)
        .map(|step| {
            host::slow_iota(N, 1 << 16, 1, step).iter().fold(0u32, |a, &v| a.wrapping_add(v))
        })
        .collect();
    assert_eq!(*sums.lock().unwrap(), want, "each closure saw its own call's slow kernel's result");
    Ok(())
}

/// The same through `GraphBuilder::host`: a builder per call, the copy before the host node and
/// the copy after it, each call's closure with its call's value; graph against eager.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_host_node_between_two_copies() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let len = N as usize;
    let mut results = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut x = s.alloc_zeros::<u32>(len)?;
        let mut y = s.alloc_zeros::<u32>(len)?;
        // SAFETY: pinned buffers of plain u32, written by the graph before they are read.
        let (mut inp, mut out) =
            unsafe { (ctx.alloc_pinned::<u32>(len)?, ctx.alloc_pinned::<u32>(len)?) };
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut got = Vec::new();
        for step in 0..3u32 {
            let mut g = cache.builder(&s);
            let (xw, yw) = (g.write(&mut x), g.write(&mut y));
            let (iw, ow) = (g.write(&mut inp), g.write(&mut out));
            g.kernel(k.iota(N, 5, step, xw).launch(cfg()));
            g.copy(xw.read(), iw);
            g.host((iw.read(), ow), move |(i, o)| {
                for (o, i) in o.iter_mut().zip(i) {
                    *o = i.wrapping_add(step * 1000);
                }
            });
            g.copy(ow.read(), yw);
            g.launch()?;
            got.push(s.clone_dtoh(&y)?);
        }
        if mode == Mode::Graph {
            assert_eq!(cache.stats().builds, 1, "one topology: {:?}", cache.stats());
        }
        results.push(got);
    }
    for (step, g) in results[0].iter().enumerate() {
        let step = step as u32;
        let want: Vec<u32> =
            host::iota(N, 5, step).iter().map(|i| i.wrapping_add(step * 1000)).collect();
        assert_same(g, &want, &format!("graph call {step}"));
    }
    assert_eq!(results[0], results[1], "graph and eager");
    Ok(())
}
