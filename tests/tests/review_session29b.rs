//! Review 29b (brief 1, safe code only) of 79f3968: a changed `graph!` call leaves the
//! later iterations of its runs (an unrolled `for` over an array acquired in one loop, every
//! statement a `kernels!` launch) unmade while its words show them clean, and walks only the
//! dirty nodes. Attacks: a buffer outside the arrays swapped (the run left unmade) while
//! elements are replaced (old memory taken at once by a canary) or swapped, the run's own
//! scalar changed, memoized execs, `Mode::Instantiate`, `Mode::Eager` and `clear()` on the
//! same cache, a host `if` around another statement, two runs, a panic in the body between
//! calls. Each call is compared exactly with the same calls on a `GraphCache::eager()` and
//! with a host model. A node taken for clean whose exec parameters are another call's writes
//! a freed element (the canary) or leaves the new one without its update; a node left absent
//! leaves it unchanged. Expected on a GPU: every test passes. Not run (no GPU this session).

#![allow(clippy::borrow_deref_ref)] // `graph!` operands are places marked `&`: `&*x`

mod common;

use std::mem::replace;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use common::buffer_array::{address, array};
use common::{AddressesSeen, Ops, Result, gpu_untracked, host, read_all, same_all, serial};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use cudagraph::{BufferArray, GraphCache, Mode, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;
const SPINS: u32 = 1 << 20;
/// Elements of each array.
const E: usize = 8;

/// The launch configuration, bound to a name before each body: `.launch(cfg())` makes no run.
fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

type S = Arc<CudaStream>;
type Ks<'a> = (&'a Ops, &'a S);
type B = CudaSlice<u32>;

/// A buffer of `len` copies of `v`.
fn filled(s: &S, v: u32) -> Result<B> {
    Ok(s.clone_htod(&vec![v; LEN])?)
}

/// Replaces `slot` by a buffer of `v`, frees the old one and takes its memory at once with a
/// canary of `0xdead_0000 | v` (returned; both addresses noted).
fn replaced(s: &S, slot: &mut B, v: u32, seen: &mut AddressesSeen) -> Result<B> {
    s.synchronize()?;
    let old = address(s, slot);
    drop(replace(slot, filled(s, v)?));
    let canary = filled(s, 0xdead_0000 | (v & 0xffff))?;
    seen.note(old);
    seen.note(address(s, &canary));
    Ok(canary)
}

#[track_caller]
fn canary_intact(s: &S, c: &B, what: &str) {
    let got = s.clone_dtoh(c).expect("canary");
    assert!(got.iter().all(|&v| v == got[0] && v >> 16 == 0xdead), "{what}: canary written");
}

/// A slow kernel on a buffer outside the array, then a run over the array's elements.
fn outside_then_run(
    cache: &mut GraphCache,
    (k, s): Ks<'_>,
    (out, v): (&mut B, &mut [B]),
    (a, b): (u32, u32),
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        k.slow_iota(N, SPINS, a, 1, &mut *out).launch(c);
        for i in 0..8 {
            k.affine_inplace(N, 3, b, &mut v[i]).launch(c);
        }
    })
}

/// Attack: the buffer outside the array swapped every other call (the run's chunks left
/// unmade), an element replaced (its old memory a canary) or two elements swapped (the run
/// made and sent), the run's scalar changed; with one exec and with memoized execs; calls in
/// `Mode::Instantiate` and `Mode::Eager` between, and `clear()`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_run_left_unmade_beside_a_swapped_buffer_matches_eager_and_the_host() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut seen = AddressesSeen::default();
    for execs in [1usize, 3] {
        let (mut v, mut ev) = (Vec::new(), Vec::new());
        for e in 0..E as u32 {
            v.push(filled(&s, e)?);
            ev.push(filled(&s, e)?);
        }
        let mut model: Vec<Vec<u32>> = (0..E as u32).map(|e| vec![e; LEN]).collect();
        let mut outs = [filled(&s, 0)?, filled(&s, 0)?];
        let mut eout = filled(&s, 0)?;
        let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
        cache.set_execs_per_variant(execs);
        for c in 0..30u32 {
            let what = format!("execs {execs}, call {c}");
            let mut canaries = Vec::new();
            if c % 5 == 4 {
                let e = 1 + (c as usize / 5) % (E - 1);
                canaries.push(replaced(&s, &mut v[e], c, &mut seen)?);
                ev[e] = filled(&s, c)?;
                model[e] = vec![c; LEN];
            }
            if c % 7 == 6 {
                v.swap(2, 6);
                ev.swap(2, 6);
                model.swap(2, 6);
            }
            if c == 20 {
                cache.clear();
            }
            let b = if c % 9 == 8 { 5 } else { 1 };
            let a = 2 + c % 3;
            let o = (c as usize / 2) % 2;
            let instantiate = c % 11 == 10;
            cache.set_mode(if instantiate { Mode::Instantiate } else { Mode::Graph });
            if c % 13 == 12 {
                cache.set_mode(Mode::Eager);
            }
            outside_then_run(&mut cache, (&k, &s), (&mut outs[o], &mut v), (a, b))?;
            if !instantiate {
                outside_then_run(&mut eager, (&k, &s), (&mut eout, &mut ev), (a, b))?;
                for m in &mut model {
                    host::affine_inplace(m, 3, b);
                }
            }
            s.synchronize()?;
            for cn in &canaries {
                canary_intact(&s, cn, &what);
            }
            let got = read_all(&s, &v)?;
            same_all(&got, &read_all(&s, &ev)?, &format!("{what}: eager"));
            same_all(&got, &model, &format!("{what}: host"));
            if !instantiate {
                let want = host::slow_iota(N, SPINS, a, 1);
                assert_eq!(s.clone_dtoh(&outs[o])?, want, "{what}: out");
                assert_eq!(s.clone_dtoh(&eout)?, want, "{what}: eager out");
            }
        }
    }
    seen.assert_some_came_back("replaced elements: ");
    Ok(())
}

/// Two runs over one `BufferArray` and a `Vec`, a host `if` around a slow kernel on a
/// buffer outside the arrays, and a run that reads an element the other writes.
#[allow(clippy::type_complexity)]
fn two_runs(
    cache: &mut GraphCache,
    (k, s): Ks<'_>,
    (arr, w): (&mut BufferArray<u32>, &mut [B]),
    (x, flag): (&mut B, bool),
    b: u32,
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..8 {
            k.affine_inplace(N, 5, b, &mut arr[i]).launch(c);
        }
        if flag {
            k.slow_iota(N, SPINS, 7, b, &mut *x).launch(c);
        }
        for i in 0..8 {
            k.affine(N, 3, 1, &arr[i], &mut w[i]).launch(c);
        }
    })
}

/// Attack: the host `if` toggled (another variant, then back: the run's exec is the
/// other's), the outside buffer swapped, `BufferArray` elements replaced (canaries) and the
/// `Vec`'s swapped (each call writes them whole), a panic in the body (equal run-time indices) between calls.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_runs_a_host_if_and_a_panic_between_calls_match_eager_and_the_host() -> Result {
    let _serial = serial();
    let (_ctx, s, k) = gpu_untracked()?;
    let mut seen = AddressesSeen::default();
    let (mut arr, mut earr) = (array(&s, E, LEN)?, array(&s, E, LEN)?);
    let (mut w, mut ew) = (Vec::new(), Vec::new());
    for _ in 0..E {
        w.push(filled(&s, 0)?);
        ew.push(filled(&s, 0)?);
    }
    let mut model = vec![vec![0u32; LEN]; E];
    let mut xs = [filled(&s, 0)?, filled(&s, 0)?];
    let mut ex = filled(&s, 0)?;
    let (mut cache, mut eager) = (GraphCache::new(), GraphCache::eager());
    for c in 0..24u32 {
        let what = format!("call {c}");
        let mut canaries = Vec::new();
        if c % 4 == 3 {
            let e = (c as usize / 4) % E;
            canaries.push(replaced(&s, &mut arr[e], c, &mut seen)?);
            earr[e] = filled(&s, c)?;
            model[e] = vec![c; LEN];
        }
        if c % 6 == 5 {
            w.swap(0, 7);
            ew.swap(0, 7);
        }
        if c % 10 == 2 {
            // Equal run-time indices in another body on the same cache: refused by a panic
            // before anything runs (the call's words lent, never given back); the next call
            // of `two_runs` is whole.
            let r = catch_unwind(AssertUnwindSafe(|| {
                let (j, z, cc, cm) = (0usize, 0usize, cfg(), &mut cache);
                graph!(cm, &s, {
                    k.affine(N, 1, 1, &arr[j], &mut w[z]).launch(cc);
                    k.affine(N, 1, 1, &arr[z], &mut w[j]).launch(cc);
                })
            }));
            assert!(r.is_err(), "{what}: equal indices must panic");
        }
        let flag = c % 3 != 1;
        let b = 1 + c / 8;
        let o = (c as usize / 2) % 2;
        two_runs(&mut cache, (&k, &s), (&mut arr, &mut w), (&mut xs[o], flag), b)?;
        two_runs(&mut eager, (&k, &s), (&mut earr, &mut ew), (&mut ex, flag), b)?;
        for m in &mut model {
            host::affine_inplace(m, 5, b);
        }
        s.synchronize()?;
        for cn in &canaries {
            canary_intact(&s, cn, &what);
        }
        let (got, egot) = (read_all(&s, &arr)?, read_all(&s, &earr)?);
        same_all(&got, &egot, &format!("{what}: array, eager"));
        same_all(&got, &model, &format!("{what}: array, host"));
        let ws = read_all(&s, &w)?;
        same_all(&ws, &read_all(&s, &ew)?, &format!("{what}: w, eager"));
        let wm: Vec<Vec<u32>> = model.iter().map(|m| host::affine(m, 3, 1)).collect();
        same_all(&ws, &wm, &format!("{what}: w, host"));
        if flag {
            let want = host::slow_iota(N, SPINS, 7, b);
            assert_eq!(s.clone_dtoh(&xs[o])?, want, "{what}: x");
            assert_eq!(s.clone_dtoh(&ex)?, want, "{what}: eager x");
        }
    }
    seen.assert_some_came_back("replaced elements: ");
    Ok(())
}
