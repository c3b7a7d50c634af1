//! Review of session 24 (commit 24efa08): a changed call validates and compares only the kernel
//! nodes whose words differ from the exec it updates (`NodeWords`, `GraphCache::clean_nodes`),
//! and skips the aliasing check when its guards' words equal the last launched variant's
//! (`guards_same`). Each test makes a sequence of safe calls meant to leave the kept words
//! stale relative to the exec (a panic in the body, other call sites and a builder on the same
//! cache, `clear`, freed memory allocated again at the same address, a kernel's module dropped
//! and loaded again, host `if` variants choosing other places with the same guards), changing a
//! scalar every call so that every call is a changed call, and compares the graph with the same
//! launches made one by one with cudarc after every call (integers: exact).
//! Expected on a GPU: all pass.

mod common;

use std::sync::Arc;

use common::{AddressesSeen, Ops, Result, gpu, host, read_all, same_all};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{GraphCache, graph};

/// Elements per buffer.
const N: u32 = 4096;
const LEN: usize = N as usize;
/// Buffers of the run (one kernel each): with `x` and `y`, 18 nodes, above the fewest for
/// which the cache keeps node words.
const RUN: usize = 16;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

/// `v`, or a panic when `v` is 0 (an argument evaluated in the body, after the words were lent).
fn or_panic(v: u32) -> u32 {
    assert!(v != 0, "review24: a panic in the body");
    v
}

/// `x = a * x + 1`, the run `b = 3 * b + 1`, then `y = c * y + 2` (`c` 0 panics in the body).
fn step(
    cache: &mut GraphCache,
    (k, s): (&Ops, &Arc<CudaStream>),
    (a, c): (u32, u32),
    mut x: &mut CudaSlice<u32>,
    mut y: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let g = cfg();
    graph!(cache, s, {
        k.affine_inplace(N, a, 1, &mut x).launch(g);
        for i in 0..16 {
            k.affine_inplace(N, 3, 1, &mut bufs[i]).launch(g);
        }
        k.affine_inplace(N, or_panic(c), 2, &mut y).launch(g);
    })
}

/// [`step`]'s work, launch by launch.
fn step_eager(
    (k, s): (&Ops, &Arc<CudaStream>),
    (a, c): (u32, u32),
    x: &mut CudaSlice<u32>,
    y: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> Result {
    common::launch!(s, k, "affine_inplace", cfg(); &N, &a, &1u32, x)?;
    for b in bufs.iter_mut() {
        common::launch!(s, k, "affine_inplace", cfg(); &N, &3u32, &1u32, b)?;
    }
    common::launch!(s, k, "affine_inplace", cfg(); &N, &c, &2u32, y)?;
    Ok(())
}

/// Another call site with the same places: `x = a * x + 5`, the run `b = 5 * b + 3`.
fn other_site(
    cache: &mut GraphCache,
    (k, s): (&Ops, &Arc<CudaStream>),
    a: u32,
    mut x: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let g = cfg();
    graph!(cache, s, {
        k.affine_inplace(N, a, 5, &mut x).launch(g);
        for i in 0..16 {
            k.affine_inplace(N, 5, 3, &mut bufs[i]).launch(g);
        }
    })
}

fn other_site_eager(
    (k, s): (&Ops, &Arc<CudaStream>),
    a: u32,
    x: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> Result {
    common::launch!(s, k, "affine_inplace", cfg(); &N, &a, &5u32, x)?;
    for b in bufs.iter_mut() {
        common::launch!(s, k, "affine_inplace", cfg(); &N, &5u32, &3u32, b)?;
    }
    Ok(())
}

/// `n` buffers, each with other values.
fn distinct(s: &Arc<CudaStream>, n: usize, from: u32) -> Result<Vec<CudaSlice<u32>>> {
    (0..n as u32).map(|j| Ok(s.clone_htod(&host::iota(N, from + j + 2, 5 * j))?)).collect()
}

/// The buffers of one side (graph or eager): `x`, `y` and the run.
struct Side {
    x: CudaSlice<u32>,
    y: CudaSlice<u32>,
    bufs: Vec<CudaSlice<u32>>,
}

impl Side {
    fn new(s: &Arc<CudaStream>) -> Result<Self> {
        let mut two = distinct(s, 2, 0)?;
        let y = two.pop().expect("two");
        let x = two.pop().expect("two");
        Ok(Side { x, y, bufs: distinct(s, RUN, 3)? })
    }

    fn contents(&self, s: &Arc<CudaStream>) -> Result<Vec<Vec<u32>>> {
        let mut all = vec![s.clone_dtoh(&self.x)?, s.clone_dtoh(&self.y)?];
        all.extend(read_all(s, &self.bufs)?);
        Ok(all)
    }
}

/// The body panics (an argument of its last statement, after every place was acquired and the
/// variant's words lent) on some calls between changed calls, with one or two execs per
/// variant: the panicking call enqueues nothing, and every later call, whose first scalar is
/// new, matches eager. A panic that left an exec's kept node words naming parameters the exec
/// does not hold would skip the first node.
#[test]
#[ignore = "needs a CUDA GPU"]
fn panics_in_the_body_between_changed_calls_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    for execs in [1usize, 2] {
        let (mut g, mut e) = (Side::new(&s)?, Side::new(&s)?);
        let mut cache = GraphCache::new();
        cache.set_execs_per_variant(execs);
        for call in 0..24u32 {
            // Scalars coming back (ping-pong of the first node's) and new ones.
            let a = if call < 12 { 2 + call % 2 } else { 2 + call };
            let c = if call % 5 == 4 { 0 } else { 1 + call % 3 };
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                step(&mut cache, (&k, &s), (a, c), &mut g.x, &mut g.y, &mut g.bufs)
            }));
            match r {
                Ok(r) => {
                    r?;
                    step_eager((&k, &s), (a, c), &mut e.x, &mut e.y, &mut e.bufs)?;
                }
                Err(_) => assert_eq!(c, 0, "only the zero scalar panics"),
            }
            let what = format!("execs {execs}, call {call}");
            same_all(&g.contents(&s)?, &e.contents(&s)?, &what);
        }
        let st = cache.stats();
        assert!(st.node_updates > 0, "execs {execs}: {st:?}");
    }
    Ok(())
}

/// One cache for two `graph!` call sites with the same places, a builder of 17 kernels, and
/// `clear`, taking turns with a new scalar every call: each switch drops the other site's
/// execs (and their kept words). Against eager after every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn call_sites_a_builder_and_clear_on_one_cache_between_changed_calls_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut g, mut e) = (Side::new(&s)?, Side::new(&s)?);
    let mut cache = GraphCache::new();
    for call in 0..30u32 {
        let a = 2 + call;
        match call % 6 {
            0 | 1 => {
                step(&mut cache, (&k, &s), (a, 1), &mut g.x, &mut g.y, &mut g.bufs)?;
                step_eager((&k, &s), (a, 1), &mut e.x, &mut e.y, &mut e.bufs)?;
            }
            2 | 3 => {
                other_site(&mut cache, (&k, &s), a, &mut g.x, &mut g.bufs)?;
                other_site_eager((&k, &s), a, &mut e.x, &mut e.bufs)?;
            }
            4 => {
                let mut b = cache.builder(&s);
                let x = b.write(&mut g.x);
                b.kernel(k.affine_inplace(N, a, 7, x).launch(cfg()));
                for buf in g.bufs.iter_mut() {
                    let w = b.write(buf);
                    b.kernel(k.affine_inplace(N, 7, 1, w).launch(cfg()));
                }
                b.launch()?;
                common::launch!(s, k, "affine_inplace", cfg(); &N, &a, &7u32, &mut e.x)?;
                for buf in e.bufs.iter_mut() {
                    common::launch!(s, k, "affine_inplace", cfg(); &N, &7u32, &1u32, buf)?;
                }
            }
            _ => {
                cache.clear();
                step(&mut cache, (&k, &s), (a, 3), &mut g.x, &mut g.y, &mut g.bufs)?;
                step_eager((&k, &s), (a, 3), &mut e.x, &mut e.y, &mut e.bufs)?;
            }
        }
        same_all(&g.contents(&s)?, &e.contents(&s)?, &format!("call {call}"));
    }
    Ok(())
}

/// Between changed calls, one of the run's buffers is dropped and another allocated (with new
/// contents), usually at the same address: its node's words are then those of the exec (a
/// clean node, neither validated nor sent), which is right only because the pointer is the
/// same; its guard's range is too, so the aliasing check is skipped. The graph must read and
/// write the new buffer. Every call after the first two also first runs a slow kernel on the
/// reallocated buffer on the same stream, so that a graph that read a stale address or did not
/// order after it shows wrong data. Against eager after every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn buffers_allocated_again_at_a_freed_address_between_changed_calls_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut g, mut e) = (Side::new(&s)?, Side::new(&s)?);
    let mut cache = GraphCache::new();
    let mut seen = AddressesSeen::default();
    const SPINS: u32 = 1 << 14;
    for call in 0..16u32 {
        if call >= 2 {
            let j = (call as usize * 7) % RUN;
            let fresh = host::iota(N, 11 + call, call);
            // The graph side's buffer dropped first, then allocated again (same size).
            drop(g.bufs.remove(j));
            g.bufs.insert(j, s.clone_htod(&fresh)?);
            seen.note(g.bufs[j].device_ptr(&s).0 as usize);
            e.bufs[j] = s.clone_htod(&fresh)?;
            common::launch!(s, k, "slow_iota", cfg(); &N, &SPINS, &(call + 1), &3u32, &mut g.bufs[j])?;
            common::launch!(s, k, "slow_iota", cfg(); &N, &SPINS, &(call + 1), &3u32, &mut e.bufs[j])?;
        } else {
            for b in &g.bufs {
                seen.note(b.device_ptr(&s).0 as usize);
            }
        }
        let a = 2 + call;
        step(&mut cache, (&k, &s), (a, 1), &mut g.x, &mut g.y, &mut g.bufs)?;
        step_eager((&k, &s), (a, 1), &mut e.x, &mut e.y, &mut e.bufs)?;
        same_all(&g.contents(&s)?, &e.contents(&s)?, &format!("call {call}"));
    }
    seen.assert_some_came_back("review24: ");
    Ok(())
}

/// `ops.cu` with `affine_inplace` adding `1000 + i` instead of `i`: the same declaration (its
/// kernel stays within its buffer), another function.
fn shifted_source() -> String {
    let from = "if (i < n) x[i] = x[i] * a + b + i;";
    assert!(common::SOURCE.contains(from), "ops.cu's affine_inplace changed");
    common::SOURCE.replace(from, "if (i < n) x[i] = x[i] * a + b + i + 1000u;")
}

/// The first node's kernel comes from one of two `Ops` (another module, another function of the
/// same name), chosen per call; the shifted one is dropped and loaded again every few calls
/// (a new module, whose function handle may take a freed one's value), with one, two or three
/// execs per variant. The first node's words name the function: a node kept as clean with
/// another function would run the other code (off by 1000). Against eager with the same
/// function after every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_from_a_module_loaded_again_between_changed_calls_runs_its_own_code() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let ptx = shifted_source();
    let load = || -> Result<Ops> {
        // SAFETY: the declarations match the kernels (ops.cu with one constant added to one
        // kernel's result), which stay within their buffers.
        unsafe { Ops::load(&ctx, compile_ptx(ptx.as_str())?) }
    };
    for execs in [1usize, 2, 3] {
        let (mut g, mut e) = (Side::new(&s)?, Side::new(&s)?);
        let mut cache = GraphCache::new();
        cache.set_execs_per_variant(execs);
        let mut shifted = Some(load()?);
        for call in 0..24u32 {
            if call % 4 == 3 {
                drop(shifted.take());
                shifted = Some(load()?);
            }
            let sk = shifted.as_ref().expect("loaded");
            let kk: &Ops = if call % 3 == 1 { sk } else { &k };
            let a = 2 + call % 4;
            let c = cfg();
            {
                let (mut x, bufs) = (&mut g.x, &mut g.bufs);
                graph!(&mut cache, &s, {
                    kk.affine_inplace(N, a, 1, &mut x).launch(c);
                    for i in 0..16 {
                        k.affine_inplace(N, 3, 1, &mut bufs[i]).launch(c);
                    }
                })?;
            }
            common::launch!(s, kk, "affine_inplace", cfg(); &N, &a, &1u32, &mut e.x)?;
            for b in e.bufs.iter_mut() {
                common::launch!(s, k, "affine_inplace", cfg(); &N, &3u32, &1u32, b)?;
            }
            same_all(&g.contents(&s)?, &e.contents(&s)?, &format!("execs {execs}, call {call}"));
        }
    }
    Ok(())
}

/// A host `if` chooses which of two places the first kernel writes, while both are borrowed
/// every call (so the guards' words, and the aliasing check's outcome, stay the last call's:
/// `guards_same`); the run's buffers swap places every fourth call (guards differ: checked).
/// The first node then differs between the variants in its handle's place and pointer: it
/// must be validated and sent. Against eager after every call.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_if_choosing_places_with_the_same_guards_matches_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut g, mut e) = (Side::new(&s)?, Side::new(&s)?);
    let mut cache = GraphCache::new();
    let checks0 = cache.stats().alias_checks;
    for call in 0..24u32 {
        let (a, flip) = (2 + call, call % 3 == 1);
        let c = cfg();
        {
            let (mut x, mut y, bufs) = (&mut g.x, &mut g.y, &mut g.bufs);
            graph!(&mut cache, &s, {
                if flip {
                    k.affine_inplace(N, a, 1, &mut x).launch(c);
                } else {
                    k.affine_inplace(N, a, 1, &mut y).launch(c);
                }
                for i in 0..16 {
                    k.affine_inplace(N, 3, 1, &mut bufs[i]).launch(c);
                }
            })?;
        }
        let target = if flip { &mut e.x } else { &mut e.y };
        common::launch!(s, k, "affine_inplace", cfg(); &N, &a, &1u32, target)?;
        for b in e.bufs.iter_mut() {
            common::launch!(s, k, "affine_inplace", cfg(); &N, &3u32, &1u32, b)?;
        }
        same_all(&g.contents(&s)?, &e.contents(&s)?, &format!("call {call}"));
        if call % 4 == 3 {
            g.bufs.swap(2, 9);
            e.bufs.swap(2, 9);
        }
    }
    let st = cache.stats();
    assert!(st.alias_checks > checks0, "{st:?}");
    Ok(())
}

/// The model of [`step`] on the host, as a check of the eager side itself for the first test's
/// scalars (so that a wrong eager oracle cannot hide a wrong graph).
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_eager_side_matches_the_host_model() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut e = Side::new(&s)?;
    let mut want = e.contents(&s)?;
    for call in 0..4u32 {
        let (a, c) = (2 + call, 1 + call);
        step_eager((&k, &s), (a, c), &mut e.x, &mut e.y, &mut e.bufs)?;
        host::affine_inplace(&mut want[0], a, 1);
        host::affine_inplace(&mut want[1], c, 2);
        for w in want[2..].iter_mut() {
            host::affine_inplace(w, 3, 1);
        }
    }
    same_all(&e.contents(&s)?, &want, "eager against the host model");
    assert_eq!(want[0].len(), LEN);
    Ok(())
}
