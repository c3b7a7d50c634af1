//! Device control flow (`device_while`, `device_if`, `device_switch`) and device scalars
//! (`&T`/`&mut T` kernel parameters): each graph is compared
//! with the same work driven from the host (the conditions decided on the host, the kernels
//! that set no condition launched eagerly with cudarc), exactly (integers).

use std::sync::Arc;

use cudagraph::cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use cudagraph::{Condition, Error, GraphCache, Mode, graph, kernels};

const SRC: &str = include_str!("../kernels/conditional.cu");
const N: u32 = 1000;

kernels! {
    /// Kernels of `kernels/conditional.cu`.
    struct K {
        fn set_nonzero(c: Condition, v: &[u32]);
        fn set_value(c: Condition, v: &[u32]);
        fn count_down(c: Condition, counter: &mut [u32]);
        fn count_down_plain(counter: &mut [u32]);
        fn set_odd(c: Condition, counter: &[u32]);
        fn step(n: u32, a: u32, counter: &[u32], x: &mut [u32]);
        fn add(n: u32, a: u32, x: &mut [u32]);
        fn square_into(a: &u32, b: &mut u32);
        fn scale_by(n: u32, s: &u32, x: &mut [u32]);
    }
}

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn gpu() -> Result<(Arc<CudaContext>, Arc<CudaStream>, K)> {
    assert!(cudagraph::driver_available(), "no CUDA driver: the GPU tests need one");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let opts = CompileOptions {
        include_paths: vec!["/usr/local/cuda/include".into()],
        ..Default::default()
    };
    // SAFETY: the declarations match conditional.cu; the kernels stay within their buffers
    // (`n` elements, one element for the counters and flags).
    let k = unsafe { K::load(&ctx, compile_ptx_with_opts(SRC, opts)?) }?;
    Ok((ctx, stream, k))
}

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// The oracle's launches of the kernels that set no condition.
struct Eager<'a>(&'a K, &'a Arc<CudaStream>);
impl Eager<'_> {
    fn step(&self, a: u32, counter: &CudaSlice<u32>, x: &mut CudaSlice<u32>) -> Result {
        let f = self.0.function("step").expect("declared");
        // SAFETY: the signature of `step`; x has N elements, counter one.
        unsafe { self.1.launch_builder(f).arg(&N).arg(&a).arg(counter).arg(x).launch(cfg()) }?;
        Ok(())
    }
    fn add(&self, a: u32, x: &mut CudaSlice<u32>) -> Result {
        let f = self.0.function("add").expect("declared");
        // SAFETY: the signature of `add`; x has N elements.
        unsafe { self.1.launch_builder(f).arg(&N).arg(&a).arg(x).launch(cfg()) }?;
        Ok(())
    }
    fn count_down(&self, counter: &mut CudaSlice<u32>) -> Result {
        let f = self.0.function("count_down_plain").expect("declared");
        let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the signature of `count_down_plain`; counter has one element.
        unsafe { self.1.launch_builder(f).arg(counter).launch(one) }?;
        Ok(())
    }
}

fn start(stream: &Arc<CudaStream>) -> Result<Vec<u32>> {
    let _ = stream;
    Ok((0..N).map(|i| i.wrapping_mul(2_654_435_761)).collect())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_while_runs_exactly_the_count_a_kernel_set() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let e = Eager(&k, &stream);
    let init = start(&stream)?;
    let mut cache = GraphCache::new();
    let (mut x, mut counter) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    let (mut y, mut ycount) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    for n in [0u32, 1, 7, 1000, 7] {
        stream.memcpy_htod(&init, &mut x)?;
        // One cache for every count: the count is a memset value, a per-node update.
        graph!(&mut cache, &stream, {
            let c = condition(1);
            memset(&mut counter, n);
            k.set_nonzero(c, &counter).launch((1, 1));
            device_while(c, {
                k.step(N, 11, &counter, &mut x).launch(cfg());
                k.count_down(c, &mut counter).launch((1, 1));
            });
        })?;
        // The oracle: the same loop decided on the host.
        stream.memcpy_htod(&init, &mut y)?;
        stream.memcpy_htod(&[n], &mut ycount)?;
        for _ in 0..n {
            e.step(11, &ycount, &mut y)?;
            e.count_down(&mut ycount)?;
        }
        let (got, want) = (stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?);
        assert_eq!(got, want, "n = {n}");
        assert_eq!(stream.clone_dtoh(&counter)?, stream.clone_dtoh(&ycount)?, "n = {n}");
        if n > 0 {
            assert_ne!(got, init, "n = {n}: the loop ran");
        }
    }
    let s = cache.stats();
    println!("while: {s:?}");
    assert_eq!(s.builds, 1);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_if_else_and_switch_take_the_branch_a_kernel_chose() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let e = Eager(&k, &stream);
    let init = start(&stream)?;
    let (mut cache_if, mut cache_else, mut cache_switch) =
        (GraphCache::new(), GraphCache::new(), GraphCache::new());
    let mut x = stream.clone_htod(&init)?;
    let mut y = stream.clone_htod(&init)?;
    let mut flag = stream.alloc_zeros::<u32>(1)?;
    for v in [0u32, 1, 2, 3, 1, 0] {
        // if, taken when v != 0
        stream.memcpy_htod(&init, &mut x)?;
        graph!(&mut cache_if, &stream, {
            let c = condition(0);
            memset(&mut flag, v);
            k.set_nonzero(c, &flag).launch((1, 1));
            device_if(c, {
                k.add(N, 5, &mut x).launch(cfg());
            });
        })?;
        stream.memcpy_htod(&init, &mut y)?;
        if v != 0 {
            e.add(5, &mut y)?;
        }
        assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?, "if, v = {v}");

        // if / else
        stream.memcpy_htod(&init, &mut x)?;
        graph!(&mut cache_else, &stream, {
            let c = condition(0);
            memset(&mut flag, v);
            k.set_nonzero(c, &flag).launch((1, 1));
            device_if(
                c,
                {
                    k.add(N, 5, &mut x).launch(cfg());
                },
                {
                    k.add(N, 9, &mut x).launch(cfg());
                    k.add(N, 1, &mut x).launch(cfg());
                },
            );
        })?;
        stream.memcpy_htod(&init, &mut y)?;
        if v != 0 {
            e.add(5, &mut y)?;
        } else {
            e.add(9, &mut y)?;
            e.add(1, &mut y)?;
        }
        assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?, "if/else, v = {v}");

        // switch over 3 cases (v = 3: none)
        stream.memcpy_htod(&init, &mut x)?;
        graph!(&mut cache_switch, &stream, {
            let c = condition(0);
            memset(&mut flag, v);
            k.set_value(c, &flag).launch((1, 1));
            device_switch(
                c,
                {
                    k.add(N, 100, &mut x).launch(cfg());
                },
                {
                    k.add(N, 200, &mut x).launch(cfg());
                },
                {
                    k.add(N, 300, &mut x).launch(cfg());
                },
            );
        })?;
        stream.memcpy_htod(&init, &mut y)?;
        if v < 3 {
            e.add(100 * (v + 1), &mut y)?;
        }
        assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?, "switch, v = {v}");
    }
    println!(
        "if: {:?}\nelse: {:?}\nswitch: {:?}",
        cache_if.stats(),
        cache_else.stats(),
        cache_switch.stats()
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_if_nested_in_a_while() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let e = Eager(&k, &stream);
    let init = start(&stream)?;
    let mut cache = GraphCache::new();
    let (mut x, mut counter) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    let (mut y, mut ycount) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    for n in [9u32, 4] {
        stream.memcpy_htod(&init, &mut x)?;
        graph!(&mut cache, &stream, {
            let c = condition(1);
            memset(&mut counter, n);
            k.set_nonzero(c, &counter).launch((1, 1));
            device_while(c, {
                let odd = condition(0);
                k.set_odd(odd, &counter).launch((1, 1));
                device_if(odd, {
                    k.add(N, 3, &mut x).launch(cfg());
                });
                k.step(N, 1, &counter, &mut x).launch(cfg());
                k.count_down(c, &mut counter).launch((1, 1));
            });
        })?;
        stream.memcpy_htod(&init, &mut y)?;
        stream.memcpy_htod(&[n], &mut ycount)?;
        for left in (1..=n).rev() {
            if left % 2 == 1 {
                e.add(3, &mut y)?;
            }
            e.step(1, &ycount, &mut y)?;
            e.count_down(&mut ycount)?;
        }
        assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?, "n = {n}");
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn body_parameters_and_condition_buffers_change_between_calls() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let e = Eager(&k, &stream);
    let init = start(&stream)?;
    let mut cache = GraphCache::new();
    // Two outputs and two counters, swapped between calls: pointer updates inside the body
    // and of the condition's buffer; the scalar `a` changes too.
    let mut xs = [stream.clone_htod(&init)?, stream.clone_htod(&init)?];
    let mut counters = [stream.alloc_zeros::<u32>(1)?, stream.alloc_zeros::<u32>(1)?];
    let (mut y, mut ycount) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    for call in 0..6u32 {
        let (i, n, a) = ((call % 2) as usize, 3 + call, 10 * call);
        stream.memcpy_htod(&init, &mut xs[i])?;
        stream.memcpy_htod(&[n], &mut counters[i])?;
        let (x, counter) = (&mut xs[i], &mut counters[i]);
        graph!(&mut cache, &stream, {
            let c = condition(1);
            k.set_nonzero(c, &*counter).launch((1, 1));
            device_while(c, {
                k.step(N, a, &*counter, &mut *x).launch(cfg());
                k.count_down(c, &mut *counter).launch((1, 1));
            });
        })?;
        stream.memcpy_htod(&init, &mut y)?;
        stream.memcpy_htod(&[n], &mut ycount)?;
        for _ in 0..n {
            e.step(a, &ycount, &mut y)?;
            e.count_down(&mut ycount)?;
        }
        assert_eq!(stream.clone_dtoh(&xs[i])?, stream.clone_dtoh(&y)?, "call {call}");
    }
    let s = cache.stats();
    println!("updates: {s:?}; last refusal: {:?}", cache.last_refusal());
    assert_eq!(s.builds, 1);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn eager_mode_refuses_device_control_flow_before_enqueuing_anything() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let init = start(&stream)?;
    let mut x = stream.clone_htod(&init)?;
    let mut counter = stream.alloc_zeros::<u32>(1)?;
    let mut cache = GraphCache::new();
    cache.set_mode(Mode::Eager);
    let r = graph!(&mut cache, &stream, {
        k.add(N, 5, &mut x).launch(cfg());
        let c = condition(1);
        memset(&mut counter, 3u32);
        k.set_nonzero(c, &counter).launch((1, 1));
        device_while(c, {
            k.count_down(c, &mut counter).launch((1, 1));
        });
    });
    match r {
        Err(Error::InvalidNode { site, why }) => {
            assert_eq!(site.label, "device_while", "{why}");
            assert!(why.contains("only in a graph"), "{why}");
        }
        other => panic!("expected InvalidNode, got {other:?}"),
    }
    assert_eq!(stream.clone_dtoh(&x)?, init, "nothing enqueued");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_scalars_are_one_element_buffers_passed_by_address() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let init = start(&stream)?;
    let mut cache = GraphCache::new();
    let mut x = stream.clone_htod(&init)?;
    let mut y = stream.clone_htod(&init)?;
    let mut b = stream.alloc_zeros::<u32>(1)?;
    let mut yb = stream.alloc_zeros::<u32>(1)?;
    for av in [3u32, 7] {
        let a = stream.clone_htod(&[av])?;
        stream.memcpy_htod(&init, &mut x)?;
        graph!(&mut cache, &stream, {
            k.square_into(&a, &mut b).launch((1, 1));
            k.scale_by(N, &b, &mut x).launch(cfg());
        })?;
        // The oracle: the same kernels launched eagerly.
        stream.memcpy_htod(&init, &mut y)?;
        let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let (sq, sc) = (
            k.function("square_into").expect("declared"),
            k.function("scale_by").expect("declared"),
        );
        // SAFETY: the kernels' signatures; a and yb have one element, y has N.
        unsafe {
            stream.launch_builder(sq).arg(&a).arg(&mut yb).launch(one)?;
            stream.launch_builder(sc).arg(&N).arg(&yb).arg(&mut y).launch(cfg())?;
        }
        assert_eq!(stream.clone_dtoh(&b)?, [av * av + 1]);
        assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?, "a = {av}");
    }
    // A buffer of two elements is not a device scalar: refused, nothing enqueued.
    let two = stream.clone_htod(&[3u32, 4])?;
    stream.memcpy_htod(&init, &mut x)?;
    let r = graph!(&mut cache, &stream, {
        k.scale_by(N, &b, &mut x).launch(cfg());
        k.square_into(&two, &mut b).launch((1, 1));
    });
    match r {
        Err(Error::InvalidNode { site, why }) => {
            assert_eq!(site.label, "square_into", "{why}");
            assert!(why.contains("exactly 1 element, not 2"), "{why}");
        }
        other => panic!("expected InvalidNode, got {other:?}"),
    }
    assert_eq!(stream.clone_dtoh(&x)?, init, "nothing enqueued");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_builder_device_while_with_a_nested_if_and_a_switch() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let e = Eager(&k, &stream);
    let init = start(&stream)?;
    let mut cache = GraphCache::new();
    let (mut x, mut counter) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    let (mut y, mut ycount) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    let mut flag = stream.alloc_zeros::<u32>(1)?;
    for (n, v) in [(5u32, 1u32), (0, 2), (8, 7), (5, 0)] {
        stream.memcpy_htod(&init, &mut x)?;
        stream.memcpy_htod(&[v], &mut flag)?;
        let mut g = cache.builder(&stream);
        let (xw, cw, fr) = (g.write(&mut x), g.write(&mut counter), g.read(&flag));
        let c = g.condition(1);
        g.memset(cw, n);
        g.kernel(k.set_nonzero(c, cw.read()).launch((1, 1)));
        g.device_while(c, |g| {
            let odd = g.condition(0);
            g.kernel(k.set_odd(odd, cw.read()).launch((1, 1)));
            g.device_if(odd, |g| {
                g.kernel(k.add(N, 3, xw).launch(cfg()));
            });
            g.kernel(k.step(N, 1, cw.read(), xw).launch(cfg()));
            g.kernel(k.count_down(c, cw).launch((1, 1)));
        });
        let s = g.condition(0);
        g.kernel(k.set_value(s, fr).launch((1, 1)));
        g.device_switch(s, 3, |g, case| {
            g.kernel(k.add(N, 100 * (case + 1), xw).launch(cfg()));
        });
        g.launch()?;
        // The oracle.
        stream.memcpy_htod(&init, &mut y)?;
        stream.memcpy_htod(&[n], &mut ycount)?;
        for left in (1..=n).rev() {
            if left % 2 == 1 {
                e.add(3, &mut y)?;
            }
            e.step(1, &ycount, &mut y)?;
            e.count_down(&mut ycount)?;
        }
        if v < 3 {
            e.add(100 * (v + 1), &mut y)?;
        }
        assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?, "n = {n}, v = {v}");
    }
    let s = cache.stats();
    println!("builder: {s:?}");
    assert_eq!(s.builds, 1, "one topology");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn run_time_for_beside_a_device_while_with_fill_in_its_body() -> Result {
    // Issues 14 and 17 together: a run-time `for` (its count part of the variant) before a
    // `device_while` whose body starts with `fill`; against the same work driven from the host.
    let (_ctx, stream, k) = gpu()?;
    let e = Eager(&k, &stream);
    let init = start(&stream)?;
    let mut cache = GraphCache::new();
    let (mut x, mut counter) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    let (mut y, mut ycount) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    let (mut z, mut yz) = (stream.alloc_zeros::<u32>(N as usize)?, stream.alloc_zeros(N as usize)?);
    for (reps, n) in [(0usize, 3u32), (2, 5), (2, 0), (5, 4), (2, 5)] {
        stream.memcpy_htod(&init, &mut x)?;
        graph!(&mut cache, &stream, {
            for _ in 0..reps {
                k.add(N, 3, &mut x).launch(cfg());
            }
            let c = condition(1);
            memset(&mut counter, n);
            k.set_nonzero(c, &counter).launch((1, 1));
            device_while(c, {
                fill(&mut z, 7u32 + n);
                k.add(N, 1, &mut z).launch(cfg());
                k.step(N, 11, &counter, &mut x).launch(cfg());
                k.count_down(c, &mut counter).launch((1, 1));
            });
        })?;
        stream.memcpy_htod(&init, &mut y)?;
        for _ in 0..reps {
            e.add(3, &mut y)?;
        }
        stream.memcpy_htod(&[n], &mut ycount)?;
        for _ in 0..n {
            stream.memcpy_htod(&vec![7 + n; N as usize], &mut yz)?;
            e.add(1, &mut yz)?;
            e.step(11, &ycount, &mut y)?;
            e.count_down(&mut ycount)?;
        }
        let what = format!("reps = {reps}, n = {n}");
        assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?, "{what}");
        assert_eq!(stream.clone_dtoh(&z)?, stream.clone_dtoh(&yz)?, "{what}");
        assert_eq!(stream.clone_dtoh(&counter)?, stream.clone_dtoh(&ycount)?, "{what}");
    }
    let s = cache.stats();
    println!("for + while: {s:?}");
    assert_eq!(s.builds, 3, "one topology per distinct count (0, 2, 5)");
    Ok(())
}

/// Asserts `e` is `Error::InvalidNode` naming a `GraphBuilder` device statement at `line` of
/// this file, saying `why`.
#[track_caller]
fn refused_statement(e: &Error, label: &str, line: u32, why: &str) {
    match e {
        Error::InvalidNode { site, why: w } => {
            assert_eq!((site.label, site.line), (label, line), "{e}");
            assert!(site.file.ends_with("conditional.rs"), "{e}");
            assert!(w.contains(why), "{e}");
        }
        other => panic!("expected Error::InvalidNode, got {other:?}"),
    }
}

/// A `GraphBuilder` whose device body panicked (the panic caught by the caller) or inside whose
/// body the builder was swapped with another is refused at launch, naming the statement, and
/// nothing of it is enqueued (its conditional node would lack the body's accesses: no edge from
/// the memset and the kernel before it). An untouched builder of the same work still launches
/// and matches the work done eagerly.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_builder_whose_device_body_panicked_or_was_swapped_is_refused_and_enqueues_nothing() -> Result {
    let (_ctx, stream, k) = gpu()?;
    let e = Eager(&k, &stream);
    let init = start(&stream)?;
    let (mut cache, mut other_cache) = (GraphCache::new(), GraphCache::new());
    let (mut x, mut counter) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);
    let (mut y, mut ycount) = (stream.clone_htod(&init)?, stream.alloc_zeros::<u32>(1)?);

    // A body that panics after adding its nodes; the caller catches the panic and launches.
    let mut g = cache.builder(&stream);
    let (xw, cw) = (g.write(&mut x), g.write(&mut counter));
    let c = g.condition(1);
    g.memset(cw, 3);
    g.kernel(k.set_nonzero(c, cw.read()).launch((1, 1)));
    let line = line!() + 2;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        g.device_while(c, |g| {
            g.kernel(k.add(N, 5, xw).launch(cfg()));
            g.kernel(k.count_down(c, cw).launch((1, 1)));
            panic!("a panic inside the device body");
        });
    }));
    assert!(caught.is_err());
    g.kernel(k.add(N, 1, xw).launch(cfg()));
    let err = g.launch().unwrap_err();
    refused_statement(&err, "device_while", line, "did not return normally");
    stream.synchronize()?;
    assert_eq!(stream.clone_dtoh(&x)?, init, "nothing enqueued");
    assert_eq!(stream.clone_dtoh(&counter)?, [0], "nothing enqueued");

    // The builder swapped with another one inside the body: both are refused.
    let mut g = cache.builder(&stream);
    let mut h = other_cache.builder(&stream);
    let yw = h.write(&mut y);
    h.kernel(k.add(N, 7, yw).launch(cfg()));
    let (xw, cw) = (g.write(&mut x), g.write(&mut counter));
    let c = g.condition(1);
    g.memset(cw, 3);
    g.kernel(k.set_nonzero(c, cw.read()).launch((1, 1)));
    let line = line!() + 1;
    g.device_while(c, |g| {
        g.kernel(k.add(N, 5, xw).launch(cfg()));
        g.kernel(k.count_down(c, cw).launch((1, 1)));
        std::mem::swap(g, &mut h);
    });
    // `g` now holds the other builder, `h` this one with its statement unfinished.
    let err = g.launch().unwrap_err();
    refused_statement(&err, "device_while", line, "swapped");
    let err = h.launch().unwrap_err();
    refused_statement(&err, "device_while", line, "did not return normally");
    stream.synchronize()?;
    assert_eq!(stream.clone_dtoh(&x)?, init, "nothing enqueued");
    assert_eq!(stream.clone_dtoh(&y)?, init, "nothing enqueued");
    assert_eq!(stream.clone_dtoh(&counter)?, [0], "nothing enqueued");

    // The same work, untouched, launches; against the work done eagerly.
    let mut g = cache.builder(&stream);
    let (xw, cw) = (g.write(&mut x), g.write(&mut counter));
    let c = g.condition(1);
    g.memset(cw, 3);
    g.kernel(k.set_nonzero(c, cw.read()).launch((1, 1)));
    g.device_while(c, |g| {
        g.kernel(k.add(N, 5, xw).launch(cfg()));
        g.kernel(k.count_down(c, cw).launch((1, 1)));
    });
    g.kernel(k.add(N, 1, xw).launch(cfg()));
    g.launch()?;
    stream.memcpy_htod(&[3u32], &mut ycount)?;
    for _ in 0..3 {
        e.add(5, &mut y)?;
        e.count_down(&mut ycount)?;
    }
    e.add(1, &mut y)?;
    assert_eq!(stream.clone_dtoh(&x)?, stream.clone_dtoh(&y)?);
    assert_eq!(stream.clone_dtoh(&counter)?, [0]);
    Ok(())
}
