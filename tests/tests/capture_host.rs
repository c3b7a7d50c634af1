//! Host work inside captures (issue 30, item 4): pinned host operands listed in a capture,
//! copies between their views and device views (`Capture::copy_htod`, `Capture::copy_dtoh`) and
//! host functions (`Capture::host`), recorded as nodes of the capture.
//!
//! The GPU tests compare each capture with the same work run eagerly (`Mode::Eager`, or plain
//! cudarc calls for the standalone capture) and with a host model, exact integers, over several
//! calls whose host inputs change. The plan test at the end needs no GPU.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{Result, assert_same, gpu, host, launch, pinned};
use cudagraph::cudarc::driver::{LaunchConfig, PinnedHostSlice, PushKernelArg};
use cudagraph::{Error, GraphCache, GraphNodeKind, Mode, NodeKind, graph};

const N: u32 = 1024;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// An order-sensitive checksum of `v` (what the host functions compute).
fn checksum(v: &[u32]) -> u64 {
    v.iter().enumerate().fold(0u64, |acc, (i, &x)| {
        acc.wrapping_mul(1_000_003).wrapping_add(u64::from(x) ^ (i as u64) << 7)
    })
}

/// Waits up to 10 s for `done`, polling (user-object destructors run on a driver thread some
/// time after the last graph holding them is gone).
fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// H2D copy → kernel → D2H copy → host function (reads the D2H result, writes pinned memory) →
/// H2D copy of what it wrote → kernel → D2H copy, in one `capture` statement, four calls with
/// a new host input each: the graph's results equal the eager run's and the host model's, so
/// every piece ran in capture order at every launch (the host function after the copy before
/// it, the copy after it after the host function), with each call's input.
#[test]
#[ignore = "needs a CUDA GPU"]
fn host_copies_and_a_host_function_inside_a_capture_match_eager() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "host_copies_and_a_host_function_inside_a_capture");
    let (ctx, s, k) = gpu()?;
    let len = N as usize;
    let mut per_mode = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut x = s.alloc_zeros::<u32>(len)?;
        let mut y = s.alloc_zeros::<u32>(len)?;
        let mut inp = pinned::<u32>(&ctx, len)?;
        let mut out = pinned::<u32>(&ctx, len)?;
        let mut back = pinned::<u32>(&ctx, len)?;
        let mut res = pinned::<u32>(&ctx, len)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut got = Vec::new();
        for step in 0..4u32 {
            let input = host::iota(N, 5 + step, step * 11);
            inp.as_mut_slice()?.copy_from_slice(&input);
            graph!(&mut cache, &s, {
                capture(
                    &inp,
                    &mut x,
                    &mut y,
                    &mut out,
                    &mut back,
                    &mut res,
                    |c, (inp, mut x, mut y, mut out, mut back, mut res)| {
                        c.copy_htod(&inp, &mut x)?;
                        c.kernel(k.mix(N, c.read(&x)?, c.write(&mut y)?).launch(cfg()))?;
                        c.copy_dtoh(&y, &mut out)?;
                        c.host((&out, &mut back), move |(out, back)| {
                            for (b, o) in back.iter_mut().zip(out) {
                                *b = o.wrapping_mul(7) ^ step;
                            }
                        })?;
                        c.copy_htod(&back, &mut x)?;
                        c.kernel(k.affine(N, 2, 1, c.read(&x)?, c.write(&mut y)?).launch(cfg()))?;
                        c.copy_dtoh(&y, &mut res)?;
                        Ok::<(), Error>(())
                    },
                );
            })?;
            // No synchronize: the call borrowed the pinned operands, so cudarc's `as_slice`
            // waits for the launch (its event, recorded after it), host function included.
            let mixed = host::mix(&input);
            let fed: Vec<u32> = mixed.iter().map(|o| o.wrapping_mul(7) ^ step).collect();
            let what = format!("{mode:?}, call {step}");
            assert_same(out.as_slice()?, &mixed, &format!("{what}: the D2H copy after the kernel"));
            assert_same(back.as_slice()?, &fed, &format!("{what}: the host function's output"));
            let want = host::affine(&fed, 2, 1);
            assert_same(
                res.as_slice()?,
                &want,
                &format!("{what}: the work after the host function"),
            );
            got.push((
                out.as_slice()?.to_vec(),
                back.as_slice()?.to_vec(),
                res.as_slice()?.to_vec(),
            ));
        }
        if mode == Mode::Graph {
            // Recorded by every call (no key); how each recording reached the exec (a per-node
            // update of the child graph, or a rung below) is the ladder's business.
            let st = cache.stats();
            eprintln!("host copies and a host function inside a capture: {st:?}");
            assert_eq!((st.launches, st.captures), (4, 4), "{st:?}");
        }
        per_mode.push(got);
    }
    assert!(per_mode[0] == per_mode[1], "graph and eager results differ");
    Ok(())
}

/// NVIDIA's simpleCudaGraphs, captured with the standalone `cudagraph::capture`: H2D copy, two
/// memsets, two kernels, D2H copy and a host function: the 7 nodes of the C++ sample's captured
/// graph, one chain in that order (the host function is one child-graph node: host function
/// and its wait). Launched three times with a new input written between launches (the exec
/// released and bound again), each result equal to the same work done eagerly with cudarc and
/// to the host model.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_simple_cuda_graphs_capture_has_its_seven_nodes_and_matches_eager() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "simpleCudaGraphs capture");
    let (ctx, s, k) = gpu()?;
    let len = N as usize;
    let (mut x, mut y, mut r) =
        (s.alloc_zeros::<u32>(len)?, s.alloc_zeros::<u32>(len)?, s.alloc_zeros::<u32>(len)?);
    let mut inp = pinned::<u32>(&ctx, len)?;
    let mut out = pinned::<u32>(&ctx, len)?;
    let mut total = pinned::<u64>(&ctx, 1)?;
    inp.as_mut_slice()?.copy_from_slice(&host::iota(N, 3, 1));
    let graph = cudagraph::capture(
        &s,
        (&inp, &mut x, &mut y, &mut r, &mut out, &mut total),
        |c, (inp, mut x, mut y, mut r, mut out, mut total)| {
            c.copy_htod(&inp, &mut x)?;
            c.zero(&mut y)?;
            c.zero(&mut r)?;
            c.kernel(k.mix(N, c.read(&x)?, c.write(&mut y)?).launch(cfg()))?;
            c.kernel(k.affine(N, 3, 7, c.read(&y)?, c.write(&mut r)?).launch(cfg()))?;
            c.copy_dtoh(&r, &mut out)?;
            c.host((&out, &mut total), |(out, total)| total[0] = checksum(out))?;
            Ok::<(), Error>(())
        },
    )?;
    assert_eq!(graph.nodes()?, 7, "the sample's 7 nodes");
    let info = graph.node_info()?;
    eprintln!("simpleCudaGraphs capture: {info:?}");
    // One chain in capture order (the driver lists nodes in the order they were added): each
    // node after the one before it, every edge forward. The recording also holds edges the
    // chain implies (cudarc's waits on a view's events become edges: measured on the H200,
    // e.g. (0, 3) from the copy into `x` to the kernel reading it), which order nothing more.
    for n in 0..6 {
        assert!(
            info.edges.contains(&(n, n + 1)),
            "node {n} before node {}: {:?}",
            n + 1,
            info.edges
        );
    }
    assert!(info.edges.iter().all(|&(from, to)| from < to), "a chain: {:?}", info.edges);
    let order: Vec<usize> = (0..7).collect();
    let kinds: Vec<GraphNodeKind> = order.iter().map(|&n| info.nodes[n].kind).collect();
    use GraphNodeKind::{ChildGraph, Kernel, Memcpy, Memset};
    assert_eq!(
        kinds,
        [Memcpy, Memset, Memset, Kernel, Kernel, Memcpy, ChildGraph],
        "capture order"
    );

    let mut exec = graph.instantiate()?;
    for round in 0..3u32 {
        let input = host::iota(N, 3 + round, round * 5 + 1);
        exec.launch(&s)?;
        let released = exec.release();
        s.synchronize()?;
        let want = host::affine(&host::mix(&input), 3, 7);
        let what = format!("round {round}");
        assert_same(out.as_slice()?, &want, &format!("{what}: the graph's D2H copy"));
        assert_eq!(total.as_slice()?[0], checksum(&want), "{what}: the host function's checksum");
        // The same work eagerly with cudarc.
        let mut eager_out = pinned::<u32>(&ctx, len)?;
        s.memcpy_htod(&inp, &mut x)?;
        s.memset_zeros(&mut y)?;
        s.memset_zeros(&mut r)?;
        launch!(s, k, "mix", cfg(); &N, &x, &mut y)?;
        launch!(s, k, "affine", cfg(); &N, &3u32, &7u32, &y, &mut r)?;
        s.memcpy_dtoh(&r, &mut eager_out)?;
        s.synchronize()?;
        assert_same(out.as_slice()?, eager_out.as_slice()?, &format!("{what}: graph vs eager"));
        assert_eq!(total.as_slice()?[0], checksum(eager_out.as_slice()?), "{what}: vs eager");
        // The next round's input, written while the exec holds no borrow.
        let next = host::iota(N, 4 + round, (round + 1) * 5 + 1);
        inp.as_mut_slice()?.copy_from_slice(&next);
        exec = released.bind((&inp, &mut x, &mut y, &mut r, &mut out, &mut total));
        let _ = input;
    }
    drop(exec);
    Ok(())
}

/// `GraphBuilder::capture` with pinned host handles: H2D copy, host function, D2H copy in the
/// builder's captured node, three launches with new inputs, graph and eager alike, against the
/// host model.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_capture_takes_pinned_host_handles() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "a builder capture with pinned host handles");
    let (ctx, s, _k) = gpu()?;
    let len = N as usize;
    let mut per_mode = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        let mut x = s.alloc_zeros::<u32>(len)?;
        let mut inp = pinned::<u32>(&ctx, len)?;
        let mut back = pinned::<u32>(&ctx, len)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut got = Vec::new();
        for step in 0..3u32 {
            let input = host::iota(N, 9, step);
            inp.as_mut_slice()?.copy_from_slice(&input);
            let mut g = cache.builder(&s);
            let (hr, xw, bw) = (g.read(&inp), g.write(&mut x), g.write(&mut back));
            g.capture(&s, (hr, xw, bw), move |c, (inp, mut x, mut back)| {
                c.copy_dtoh(&x, &mut back)?; // last call's x (zero at first)
                c.host((&mut back,), move |(b,)| b.iter_mut().for_each(|v| *v ^= step))?;
                c.copy_htod(&inp, &mut x)?;
                Ok::<(), Error>(())
            });
            g.launch()?;
            s.synchronize()?;
            let last = if step == 0 { vec![0; len] } else { host::iota(N, 9, step - 1) };
            let want: Vec<u32> = last.iter().map(|v| v ^ step).collect();
            assert_same(back.as_slice()?, &want, &format!("{mode:?}, launch {step}"));
            got.push(back.as_slice()?.to_vec());
        }
        per_mode.push(got);
    }
    assert!(per_mode[0] == per_mode[1], "graph and eager results differ");
    Ok(())
}

/// A pinned buffer freed and another allocated (often at the same address: the driver hands it
/// back) is another buffer for a kept recording, whose host copies the driver resolved for the
/// first one: a keyed capture records again for it (and the result is the new buffer's), and a
/// standalone exec bound to it refuses to launch.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_pinned_buffer_reallocated_at_the_same_address_is_not_the_recorded_one() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "a pinned buffer reallocated at the same address");
    let (ctx, s, _k) = gpu()?;
    let len = N as usize;
    let mut x = s.alloc_zeros::<u32>(len)?;
    let mut out = pinned::<u32>(&ctx, len)?;
    let mut cache = GraphCache::new();
    let mut step =
        |cache: &mut GraphCache, inp: &mut PinnedHostSlice<u32>, out: &mut PinnedHostSlice<u32>| {
            graph!(cache, &s, {
                capture(&*inp, &mut x, &mut *out, key = (), |c, (), (inp, mut x, mut out)| {
                    c.copy_htod(&inp, &mut x)?;
                    c.copy_dtoh(&x, &mut out)?;
                    Ok::<(), Error>(())
                });
            })
        };
    let mut first = pinned::<u32>(&ctx, len)?;
    first.as_mut_slice()?.copy_from_slice(&host::iota(N, 3, 1));
    step(&mut cache, &mut first, &mut out)?;
    s.synchronize()?;
    assert_same(out.as_slice()?, &host::iota(N, 3, 1), "the first buffer");
    let at = first.as_ptr()? as usize;
    drop(first);
    let mut second = pinned::<u32>(&ctx, len)?;
    let reused = second.as_ptr()? as usize == at;
    eprintln!("pinned address reused by the new buffer: {reused}");
    second.as_mut_slice()?.copy_from_slice(&host::iota(N, 5, 2));
    step(&mut cache, &mut second, &mut out)?;
    s.synchronize()?;
    assert_same(out.as_slice()?, &host::iota(N, 5, 2), "the second buffer");
    let st = cache.stats();
    assert_eq!((st.captures, st.capture_reuses), (2, 0), "recorded again: {st:?}");

    // The standalone capture: bound to the new buffer, the exec refuses to launch.
    let mut h = pinned::<u32>(&ctx, len)?;
    let exec = cudagraph::capture(&s, (&h, &mut x), |c, (h, mut x)| c.copy_htod(&h, &mut x))?
        .instantiate()?;
    let released = exec.release();
    drop(h);
    h = pinned::<u32>(&ctx, len)?;
    let mut exec = released.bind((&h, &mut x));
    assert!(matches!(exec.launch(&s), Err(Error::Graph { .. })), "another pinned buffer");
    Ok(())
}

/// Counts the runs of a host function and the drops of what its closure owns.
#[derive(Default)]
struct Probe {
    runs: AtomicU32,
    drops: AtomicU32,
}

/// Owned by a host function's closure: counts its drop.
struct Token(Arc<Probe>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A keyed capture recorded once and reused by five calls: its host function (a closure made
/// once, owning a `Token`) runs at every launch, with each call's input, and is not dropped
/// while the cache keeps the recording; it is dropped once, after the cache is gone. Eager runs
/// the closure at every call instead (five closures, five drops), with the same results.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_function_of_a_kept_recording_lives_and_runs_at_every_launch() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "a host function of a kept recording");
    let (ctx, s, _k) = gpu()?;
    let len = N as usize;
    let mut per_mode = Vec::new();
    for mode in [Mode::Graph, Mode::Eager] {
        // What earlier tests of this binary made is gone (or going: destructors run on a driver
        // thread after the last graph holding them).
        eventually("no host function of an earlier test left", || {
            cudagraph::__private::captured_host_functions() == 0
        });
        eventually("no flag of an earlier test left", || {
            cudagraph::__private::host_flags_in_use() == 0
        });
        let (before, flags_before) = (0, 0);
        let probe = Arc::new(Probe::default());
        let mut x = s.alloc_zeros::<u32>(len)?;
        let mut inp = pinned::<u32>(&ctx, len)?;
        let mut out = pinned::<u32>(&ctx, len)?;
        let mut total = pinned::<u64>(&ctx, 1)?;
        let mut cache = GraphCache::new();
        cache.set_mode(mode);
        let mut got = Vec::new();
        for step in 0..5u32 {
            let input = host::iota(N, 2 + step, step);
            inp.as_mut_slice()?.copy_from_slice(&input);
            graph!(&mut cache, &s, {
                capture(
                    &inp,
                    &mut x,
                    &mut out,
                    &mut total,
                    key = probe.clone(),
                    |c, probe, (inp, mut x, mut out, mut total)| {
                        c.copy_htod(&inp, &mut x)?;
                        c.copy_dtoh(&x, &mut out)?;
                        let token = Token(probe.clone());
                        c.host((&out, &mut total), move |(out, total)| {
                            token.0.runs.fetch_add(1, Ordering::SeqCst);
                            total[0] = checksum(out);
                        })?;
                        Ok::<(), Error>(())
                    },
                );
            })?;
            s.synchronize()?;
            let what = format!("{mode:?}, call {step}");
            assert_same(out.as_slice()?, &input, &what);
            assert_eq!(total.as_slice()?[0], checksum(&input), "{what}: this call's checksum");
            assert_eq!(probe.runs.load(Ordering::SeqCst), step + 1, "{what}: one run per launch");
            got.push(total.as_slice()?[0]);
            if mode == Mode::Graph {
                assert_eq!(
                    probe.drops.load(Ordering::SeqCst),
                    0,
                    "{what}: kept with the recording"
                );
                assert!(
                    cudagraph::__private::captured_host_functions() > before,
                    "{what}: the recording holds its host function"
                );
            }
        }
        if mode == Mode::Graph {
            let st = cache.stats();
            assert_eq!((st.captures, st.capture_reuses), (1, 4), "recorded once: {st:?}");
        }
        drop(cache);
        s.synchronize()?;
        let drops = if mode == Mode::Graph { 1 } else { 5 };
        eventually(&format!("{mode:?}: the closures dropped"), || {
            probe.drops.load(Ordering::SeqCst) == drops
        });
        eventually(&format!("{mode:?}: no host function left"), || {
            cudagraph::__private::captured_host_functions() == before
        });
        eventually(&format!("{mode:?}: every flag given back"), || {
            cudagraph::__private::host_flags_in_use() == flags_before
        });
        per_mode.push(got);
    }
    assert_eq!(per_mode[0], per_mode[1], "graph and eager checksums");
    Ok(())
}

/// A host function of a capture that panics: caught on the worker, the launch goes on, and the
/// next call of the cache (or launch of the standalone exec) returns `Error::HostFunction`
/// naming the `Capture::host` call; the call after it runs normally.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panicking_host_function_of_a_capture_is_reported_by_the_next_call() -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "a panicking host function of a capture");
    let (ctx, s, _k) = gpu()?;
    let mut out = pinned::<u32>(&ctx, 4)?;
    let runs = Arc::new(AtomicU32::new(0));
    let line = line!() + 6;
    let mut cache = GraphCache::new();
    let call = |cache: &mut GraphCache, out: &mut PinnedHostSlice<u32>| {
        let runs = runs.clone();
        graph!(cache, &s, {
            capture(&mut *out, |c, (mut out,)| {
                c.host((&mut out,), move |(out,)| {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    assert!(n != 0, "the first run panics on purpose");
                    out[0] = n;
                })
            });
        })
    };
    call(&mut cache, &mut out)?;
    s.synchronize()?;
    match call(&mut cache, &mut out) {
        Err(Error::HostFunction { site, message }) => {
            assert!(message.contains("on purpose"), "{message}");
            assert_eq!((site.text, site.line), ("Capture::host", line), "{site:?}");
        }
        other => panic!("expected Error::HostFunction, got {other:?}"),
    }
    call(&mut cache, &mut out)?;
    s.synchronize()?;
    assert_eq!(out.as_slice()?[0], 1, "the run after the reported panic");

    // The standalone capture: the next launch reports it.
    let flag = Arc::new(AtomicU32::new(0));
    let f2 = flag.clone();
    let graph = cudagraph::capture(&s, (&mut out,), move |c, (mut out,)| {
        c.host((&mut out,), move |(out,)| {
            let n = f2.fetch_add(1, Ordering::SeqCst);
            assert!(n != 0, "the first launch panics on purpose");
            out[0] = 100 + n;
        })
    })?;
    let mut exec = graph.instantiate()?;
    exec.launch(&s)?;
    s.synchronize()?;
    assert!(matches!(exec.launch(&s), Err(Error::HostFunction { .. })), "reported");
    exec.launch(&s)?;
    s.synchronize()?;
    drop(exec);
    assert_eq!(out.as_slice()?[0], 101);
    assert_eq!(flag.load(Ordering::SeqCst), 2, "two launches ran the host function");
    Ok(())
}

/// Misuse found at run time, each naming the call and failing the capture before anything of
/// the call is enqueued: copies of different lengths in both directions, and a host view
/// given to a capture it is not a view of (a capture begun inside an eager capture's closure).
#[test]
#[ignore = "needs a CUDA GPU"]
fn host_copies_of_other_lengths_and_views_of_another_capture_are_refused() -> Result {
    let _serial = common::serial();
    let (ctx, s, _k) = gpu()?;
    let mut x = s.alloc_zeros::<u32>(N as usize)?;
    let mut h = pinned::<u32>(&ctx, N as usize)?;
    let (htod, dtoh) = (line!() + 5, line!() + 7);
    for dir in 0..2 {
        let r = cudagraph::capture(&s, (&mut h, &mut x), |c, (mut h, mut x)| {
            let half = N as usize / 2;
            if dir == 0 {
                c.copy_htod(&h.slice(..half), &mut x)
            } else {
                c.copy_dtoh(&x, &mut h.slice_mut(..half))
            }
        });
        let Err(Error::Capture { source, .. }) = r else { panic!("dir {dir}: {r:?}") };
        let e = source.downcast::<Error>().expect("the capture's error");
        let Error::CopyLength { site, src, dst } = *e else { panic!("dir {dir}: {e:?}") };
        let want = if dir == 0 {
            (htod, N as usize / 2, N as usize)
        } else {
            (dtoh, N as usize, N as usize / 2)
        };
        assert_eq!((site.line, src, dst), want, "dir {dir}: {site:?}");
    }

    // A host view of an eager outer capture given to an inner capture's `host`.
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let s2 = s.clone();
    let mut y = s.alloc_zeros::<u32>(4)?;
    let refused = Arc::new(std::sync::Mutex::new(None));
    let seen = refused.clone();
    graph!(&mut cache, &s, {
        capture(&mut h, |_outer, (mut h,)| {
            let inner = cudagraph::capture(&s2, (&mut y,), |c, (_y,)| {
                let r = c.host((&mut h,), |(_h,)| {});
                *seen.lock().unwrap() = Some(format!("{r:?}"));
                Ok::<(), Error>(())
            });
            drop(inner);
            Ok::<(), Error>(())
        });
    })?;
    let r = refused.lock().unwrap().take().expect("the inner closure ran");
    assert!(r.contains("NodeRefused") && r.contains("NotAnOperand"), "{r}");
    Ok(())
}

/// The buffers of [`ordered_step`].
#[allow(dead_code)]
struct Bufs {
    d: cudagraph::cudarc::driver::CudaSlice<u32>,
    d2: cudagraph::cudarc::driver::CudaSlice<u32>,
    h_in: PinnedHostSlice<u32>,
    h_mid: PinnedHostSlice<u32>,
}

/// A step in which a `capture` statement lists pinned host buffers, between a copy into one of
/// them, a `host` statement reading another and a copy writing the first again (only the plan
/// of this function is used: it never runs).
#[allow(dead_code)]
fn ordered_step(
    cache: &mut GraphCache,
    s: &Arc<cudagraph::cudarc::driver::CudaStream>,
    b: &mut Bufs,
) -> Result {
    graph!(cache, s, {
        copy(&b.d, &mut b.h_in);
        capture(&b.h_in, &mut b.d2, &mut b.h_mid, |c, (h_in, mut d2, mut h_mid)| {
            c.copy_htod(&h_in, &mut d2)?;
            c.copy_dtoh(&d2, &mut h_mid)
        });
        host(&b.h_mid, move |(_m,)| {});
        copy(&b.d, &mut b.h_in);
    })
}

/// No GPU needed: a capture's pinned host operands are accesses of its node like any other
/// statement's, so the launch orders them (the copy into `h_in` before the capture that reads
/// it, the host statement after the capture that writes `h_mid`, the copy that writes `h_in`
/// again after the capture that reads it).
#[test]
fn a_captures_pinned_host_operands_order_it_with_the_other_statements() {
    let plan = cudagraph::plans()
        .find(|p| {
            p.file.ends_with("capture_host.rs") && p.places.iter().any(|pl| pl.contains("h_mid"))
        })
        .expect("the graph! of `ordered_step` is registered");
    let kinds: Vec<NodeKind> = plan.nodes.iter().map(|n| n.kind).collect();
    assert_eq!(kinds, [NodeKind::Memcpy, NodeKind::Captured, NodeKind::Host, NodeKind::Memcpy]);
    let mut edges = plan.edges();
    edges.sort_unstable();
    assert_eq!(edges, [(0, 1), (1, 2), (1, 3)], "copy -> capture -> host, capture -> copy");
}
