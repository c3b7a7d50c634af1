//! Review 16b (commit 87bde5e: a `KernelCall` holds one `&KernelEntry` — function, load context
//! and name, one per kernel in `__private::Functions` — and `KernelCall::new` ignores its name
//! argument). Safe code only. What only a GPU shows:
//! - `each_method_runs_its_declared_kernel`: two `kernels!` structs loaded from one module, one
//!   declaring the kernels in the other's reverse order (so every name has another index), all
//!   of one signature with different bodies: a method resolved to another index or struct runs
//!   another body and writes other values. Each launch's `name()`, `function()` and `context()`
//!   are those of its declaration; graph and eager results equal host models.
//! - `cache_keeps_module_after_struct_dropped`: the struct is dropped after its graph was cached;
//!   its module must stay loaded while the cache holds an exec naming its function
//!   (`KernelState::owner` / `template`), and a second module (another body, same declaration)
//!   loaded afterwards must run its own body through the same cache: a stale function handle
//!   taken for unchanged would write the first module's values.
//! - `builder_launch_outlives_struct`: a `GraphBuilder` keeps the function (`g.kernel` clones
//!   it): the struct dropped before `g.launch()` leaves the module loaded and the kernel runs.
//!
//! All must pass on a GPU.

mod common;

use std::sync::{Arc, Weak};

use common::{Result, assert_same};
use cudagraph::cudarc::driver::{CudaContext, CudaModule, LaunchConfig};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, graph, kernels};

const N: u32 = 1 << 12;
const LEN: usize = N as usize;

/// Three kernels of one signature; `kK` writes `i * a + b + K * 1000003`.
const THREE: &str = r#"
extern "C" __global__ void k0(unsigned n, unsigned a, unsigned b, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i * a + b;
}
extern "C" __global__ void k1(unsigned n, unsigned a, unsigned b, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i * a + b + 1000003u;
}
extern "C" __global__ void k2(unsigned n, unsigned a, unsigned b, unsigned *x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i * a + b + 2000006u;
}
"#;

kernels! {
    struct Fwd {
        fn k0(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn k1(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn k2(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

kernels! {
    struct Rev {
        fn k2(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn k1(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn k0(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

/// One kernel `put`, whose body is the module's: `i * a + b + salt`.
fn put_source(salt: u32) -> String {
    format!(
        "extern \"C\" __global__ void put(unsigned n, unsigned a, unsigned b, unsigned *x) {{\n\
         unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         if (i < n) x[i] = i * a + b + {salt}u;\n}}\n"
    )
}

kernels! {
    struct Put {
        fn put(n: u32, a: u32, b: u32, x: &mut [u32]);
    }
}

fn model(a: u32, b: u32, salt: u32) -> Vec<u32> {
    (0..N).map(|i| i.wrapping_mul(a).wrapping_add(b).wrapping_add(salt)).collect()
}

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn setup() -> Result<(Arc<CudaContext>, Arc<cudagraph::cudarc::driver::CudaStream>)> {
    assert!(cudagraph::driver_available(), "no CUDA driver");
    let ctx = CudaContext::new(0)?;
    let s = ctx.new_stream()?;
    Ok((ctx, s))
}

fn load_put(ctx: &Arc<CudaContext>, salt: u32) -> Result<Put> {
    // SAFETY: `put` takes (unsigned, unsigned, unsigned, unsigned *) and writes x[0..n) only.
    unsafe { Put::load(ctx, compile_ptx(put_source(salt))?) }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn each_method_runs_its_declared_kernel() -> Result {
    let _serial = common::serial();
    let (ctx, s) = setup()?;
    // SAFETY: k0, k1 and k2 take (unsigned, unsigned, unsigned, unsigned *) and write x[0..n)
    // only, as both structs declare (each by name).
    let fwd = unsafe { Fwd::load(&ctx, compile_ptx(THREE)?) }?;
    let rev = unsafe { Rev::load(&ctx, compile_ptx(THREE)?) }?;
    const SALT: [u32; 3] = [0, 1000003, 2000006];

    // Names, functions and contexts of the launches themselves.
    {
        let mut cache = GraphCache::new();
        let mut x = s.alloc_zeros::<u32>(LEN)?;
        let mut g = cache.builder(&s);
        let w = g.write(&mut x);
        let launches = [
            (fwd.k0(N, 1, 0, w).launch(cfg()), "k0"),
            (fwd.k1(N, 1, 0, w).launch(cfg()), "k1"),
            (fwd.k2(N, 1, 0, w).launch(cfg()), "k2"),
        ];
        for (l, name) in &launches {
            assert_eq!(l.name(), *name);
            assert_eq!(l.function().cu_function(), fwd.function(name).unwrap().cu_function());
            assert!(Arc::ptr_eq(l.context(), fwd.context()));
        }
        let rl = [
            (rev.k2(N, 1, 0, w).launch(cfg()), "k2"),
            (rev.k1(N, 1, 0, w).launch(cfg()), "k1"),
            (rev.k0(N, 1, 0, w).launch(cfg()), "k0"),
        ];
        for (l, name) in &rl {
            assert_eq!(l.name(), *name);
            assert_eq!(l.function().cu_function(), rev.function(name).unwrap().cu_function());
            assert_ne!(l.function().cu_function(), fwd.function(name).unwrap().cu_function());
            assert!(Arc::ptr_eq(l.context(), rev.context()));
        }
        drop(g);
    }

    // What they run: graph and eager, with scalars that change and repeat.
    let mut cache = GraphCache::new();
    let mut eager = GraphCache::eager();
    let mut xs: Vec<_> =
        (0..6).map(|_| s.alloc_zeros::<u32>(LEN)).collect::<std::result::Result<_, _>>()?;
    for call in 0..8u32 {
        let (a, b) = (call / 2 + 3, 17 * (call / 2));
        for mode in 0..2 {
            for x in xs.iter_mut() {
                s.memset_zeros(x)?;
            }
            let [x0, x1, x2, y0, y1, y2] = &mut xs[..] else { unreachable!() };
            let c = if mode == 0 { &mut cache } else { &mut eager };
            graph!(c, &s, {
                fwd.k0(N, a, b, &mut *x0).launch(cfg());
                fwd.k1(N, a, b, &mut *x1).launch(cfg());
                fwd.k2(N, a, b, &mut *x2).launch(cfg());
                rev.k0(N, a, b, &mut *y0).launch(cfg());
                rev.k1(N, a, b, &mut *y1).launch(cfg());
                rev.k2(N, a, b, &mut *y2).launch(cfg());
            })?;
            for (j, x) in xs.iter().enumerate() {
                let got = s.clone_dtoh(x)?;
                let what = format!("call {call}, mode {mode}, buffer {j}");
                assert_same(&got, &model(a, b, SALT[j % 3]), &what);
            }
        }
    }
    assert!(cache.stats().unchanged_calls >= 3, "{:?}", cache.stats());
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cache_keeps_module_after_struct_dropped() -> Result {
    let _serial = common::serial();
    let (ctx, s) = setup()?;
    let mut cache = GraphCache::new();
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let mut kept: Vec<Weak<CudaModule>> = Vec::new();
    for round in 0..6u32 {
        let salt = 0x1000 * (round + 1);
        let k = load_put(&ctx, salt)?;
        kept.push(Arc::downgrade(k.module()));
        // Twice each: the second call is unchanged (same function handle and scalars).
        for _ in 0..2 {
            s.memset_zeros(&mut x)?;
            graph!(&mut cache, &s, {
                k.put(N, 5, round, &mut x).launch(cfg());
            })?;
            assert_same(&s.clone_dtoh(&x)?, &model(5, round, salt), &format!("round {round}"));
        }
        drop(k);
        // The cache's exec names this module's function: it must still be loaded.
        assert!(
            kept[round as usize].upgrade().is_some(),
            "round {round}: module unloaded under the cache"
        );
    }
    drop(cache);
    s.synchronize()?;
    // And nothing keeps them after the cache is gone (a leaked owner keeps modules forever).
    for (i, w) in kept.iter().enumerate() {
        assert!(
            w.upgrade().is_none(),
            "module of round {i} still loaded after the cache was dropped"
        );
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn builder_launch_outlives_struct() -> Result {
    let _serial = common::serial();
    let (ctx, s) = setup()?;
    let mut cache = GraphCache::new();
    let mut x = s.alloc_zeros::<u32>(LEN)?;
    let k = load_put(&ctx, 77)?;
    let weak = Arc::downgrade(k.module());
    let mut g = cache.builder(&s);
    let w = g.write(&mut x);
    g.kernel(k.put(N, 9, 4, w).launch(cfg()));
    drop(k);
    assert!(weak.upgrade().is_some(), "module unloaded under a builder that holds its kernel");
    // A second module loaded now must not take the first one's place.
    let other = load_put(&ctx, 555)?;
    g.launch()?;
    assert_same(&s.clone_dtoh(&x)?, &model(9, 4, 77), "builder after drop");
    drop(other);
    Ok(())
}
