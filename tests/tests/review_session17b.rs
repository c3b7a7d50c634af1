//! Review 17b (commit 9740d23: a run's later iterations are compared by their array elements'
//! handles only when `__private::made_by(&receiver, &first_iteration_node, "method")` holds for
//! every kernel statement of the first iteration). Safe code only; every kernel is a declared
//! one, reached through a helper of the user's that forwards the statement's own handles to it
//! and returns its `KernelCall` (allowed: SAFETY.md rule 1).
//!
//! **Hole found and fixed.** `graph!` called the kernel method on `__private::kernels(&r)`, of
//! type `&&Ops` for a receiver `k: &Ops`; method lookup tries `&&Ops` by value before it
//! derefs to `&Ops`, so a trait method named like a kernel (`fn affine(&self, …)`) implemented
//! for `&Ops` was picked instead of the generated one. It forwarded to the real `affine`, so
//! `made_by` held and the later iterations were compared by their elements only: a buffer only
//! they used could be replaced and freed under the graph (review 17's use-after-free). Fixed
//! (the commit after this file's): `__private::kernels` returns `&Kernels::Struct`, the struct
//! itself, where the inherent method is found first; and the words of a run's later iterations
//! hold every operand's handle, array element or not, so that whatever call a helper makes, each
//! buffer a later node may use is compared. The shadowing helpers are now compile errors (ui:
//! `review17b-shadow-on-a-reference`, `review17b-shadow-generic`,
//! `shadowing-trait-method-on-an-owned-receiver`).
//!
//! The tests below keep each attack with the helpers renamed (`helper_affine`, …: no longer
//! named like a kernel, so `made_by` is false and the run is compared as written), and the
//! same GPU expectations: all pass. Before the fix, with the helpers named like kernels, the six
//! that are not controls failed on the CPU stub driver (counted unchanged, or the helper ran
//! once).
//!
//! Host-side parts also run on the CPU stub driver: `REVIEW17_STUB=1 LD_LIBRARY_PATH=<dir of the
//! libraries .ci/host-profile builds> cargo test -p cudagraph-tests --test review_session17b --
//! --ignored` (values are not compared there).

mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::review17::{assert_same, same_all};
use common::{Ops, Result, gpu, host, launch};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudagraph::{DevRead, DevWrite, GraphCache, KernelCall, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;
/// Length of element 0 of the runs' arrays (their first iteration): one more than the others.
const FIRST: usize = LEN + 1;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

type Affine<'k, 'b> = KernelCall<'k, (u32, u32, u32, DevRead<'b, u32>, DevWrite<'b, u32>)>;
type InPlace<'k, 'b> = KernelCall<'k, (u32, u32, u32, DevWrite<'b, u32>)>;

thread_local! {
    /// The mode of `iota` (see `a_shadowed_kernel_name_runs_the_kernel_its_statement_evaluates_to`).
    static MODE: Cell<u32> = const { Cell::new(0) };
    /// Calls of `affine_inplace` so far.
    static COUNT: Cell<u32> = const { Cell::new(0) };
}

/// `e = p` for the run's first element, `e = q` for the others: the real `affine`, so the
/// call's entry is `Ops`'s `affine`.
fn p_or_q<'k, 'b>(
    k: &'k Ops,
    n: u32,
    p: DevRead<'b, u32>,
    q: DevRead<'b, u32>,
    e: DevWrite<'b, u32>,
) -> Affine<'k, 'b> {
    let src = if e.len() == FIRST { p } else { q };
    k.affine(n, 1, 0, src, e)
}

/// `p = e` for the run's first element, `q = e` for the others (the real `affine`).
fn store_p_or_q<'k, 'b>(
    k: &'k Ops,
    n: u32,
    e: DevWrite<'b, u32>,
    p: DevWrite<'b, u32>,
    q: DevWrite<'b, u32>,
) -> Affine<'k, 'b> {
    let dst = if e.len() == FIRST { p } else { q };
    k.affine(n, 1, 0, e.read(), dst)
}

/// Helpers named like `Ops`'s kernels, implemented for `&Ops` (imported only where used, so
/// that `write_form`'s `affine` is not ambiguous with this one).
mod shadow {
    use super::{
        Affine, COUNT, Cell, DevRead, DevWrite, FIRST, InPlace, MODE, Ops, p_or_q, store_p_or_q,
    };

    /// Helpers named like `Ops`'s kernels, implemented for `&Ops`: with a receiver `k: &Ops`,
    /// `graph!`'s `__private::kernels(&k).affine(…)` is a call on `&&Ops`, which these match
    /// before the inherent methods (receiver `&Ops`).
    pub trait Shadow {
        fn helper_affine<'k, 'b>(
            &'k self,
            n: u32,
            p: DevRead<'b, u32>,
            q: DevRead<'b, u32>,
            e: DevWrite<'b, u32>,
        ) -> Affine<'k, 'b>;
        fn helper_mix<'k, 'b>(
            &'k self,
            n: u32,
            e: DevWrite<'b, u32>,
            p: DevWrite<'b, u32>,
            q: DevWrite<'b, u32>,
        ) -> Affine<'k, 'b>;
        fn helper_iota<'k, 'b>(&'k self, n: u32, e: DevWrite<'b, u32>) -> InPlace<'k, 'b>;
        fn helper_affine_inplace<'k, 'b>(&'k self, n: u32, x: DevWrite<'b, u32>)
        -> InPlace<'k, 'b>;
    }

    impl Shadow for Ops {
        fn helper_affine<'k, 'b>(
            &'k self,
            n: u32,
            p: DevRead<'b, u32>,
            q: DevRead<'b, u32>,
            e: DevWrite<'b, u32>,
        ) -> Affine<'k, 'b> {
            p_or_q(self, n, p, q, e)
        }
        /// Named `mix` but makes an `affine` call: `made_by(…, "mix")` is false (a control of the
        /// name half of the check; not used by a test that must fail).
        fn helper_mix<'k, 'b>(
            &'k self,
            n: u32,
            e: DevWrite<'b, u32>,
            p: DevWrite<'b, u32>,
            q: DevWrite<'b, u32>,
        ) -> Affine<'k, 'b> {
            store_p_or_q(self, n, e, p, q)
        }
        fn helper_iota<'k, 'b>(&'k self, n: u32, e: DevWrite<'b, u32>) -> InPlace<'k, 'b> {
            let m = MODE.with(Cell::get);
            if e.len() == FIRST {
                Ops::iota(self, n, 1, 0, e)
            } else if m.is_multiple_of(2) {
                Ops::iota(self, n, 2, m, e)
            } else {
                Ops::affine_inplace(self, n, 2, m, e)
            }
        }
        fn helper_affine_inplace<'k, 'b>(
            &'k self,
            n: u32,
            x: DevWrite<'b, u32>,
        ) -> InPlace<'k, 'b> {
            let c = COUNT.with(|c| {
                c.set(c.get() + 1);
                c.get()
            });
            Ops::affine_inplace(self, n, 1, c, x)
        }
    }
}

/// The same helper for the generic and owned-receiver forms: implemented for `Ops` itself.
trait OnStruct {
    fn struct_affine<'k, 'b>(
        &'k self,
        n: u32,
        p: DevRead<'b, u32>,
        q: DevRead<'b, u32>,
        e: DevWrite<'b, u32>,
    ) -> Affine<'k, 'b>;
}

impl OnStruct for Ops {
    fn struct_affine<'k, 'b>(
        &'k self,
        n: u32,
        p: DevRead<'b, u32>,
        q: DevRead<'b, u32>,
        e: DevWrite<'b, u32>,
    ) -> Affine<'k, 'b> {
        p_or_q(self, n, p, q, e)
    }
}

/// Four elements, element 0 `FIRST` long, the others `LEN`; element `e` holds `i * 7 + 1000 e`.
fn elements(s: &Arc<CudaStream>) -> Result<Vec<CudaSlice<u32>>> {
    (0..4u32)
        .map(|e| {
            let len = if e == 0 { FIRST } else { LEN };
            let v: Vec<u32> = (0..len as u32).map(|i| i * 7 + 1000 * e).collect();
            Ok(s.clone_htod(&v)?)
        })
        .collect()
}

/// `LEN` copies of `v`, on the device.
fn filled(s: &Arc<CudaStream>, v: u32) -> Result<CudaSlice<u32>> {
    Ok(s.clone_htod(&vec![v; LEN])?)
}

/// The receiver is `k: &Ops`: `affine` is `Shadow::affine` (4 arguments; the inherent one
/// takes 5).
fn load_run(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    p: &CudaSlice<u32>,
    q: &CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    use shadow::Shadow as _;
    let c = cfg();
    graph!(cache, s, {
        for i in 0..4 {
            k.helper_affine(N, &p, &q, &mut bufs[i]).launch(c);
        }
    })
}

/// A generic receiver (bounded on the hidden `Kernels` with its struct): the helper is
/// `OnStruct::struct_affine`.
fn load_run_generic<K: cudagraph::__private::Kernels<Struct = Ops>>(
    cache: &mut GraphCache,
    k: &K,
    s: &Arc<CudaStream>,
    p: &CudaSlice<u32>,
    q: &CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..4 {
            k.struct_affine(N, &p, &q, &mut bufs[i]).launch(c);
        }
    })
}

type LoadRun = fn(
    &mut GraphCache,
    &Ops,
    &Arc<CudaStream>,
    &CudaSlice<u32>,
    &CudaSlice<u32>,
    &mut [CudaSlice<u32>],
) -> cudagraph::Result<()>;

/// Review 17's read test with `run`: after `q` is replaced and the old one freed, elements 1–3
/// must be read from the new `q`.
fn read_after_replace(run: LoadRun) -> Result {
    let (_ctx, s, k) = gpu()?;
    let mut cache = GraphCache::new();
    let mut bufs = elements(&s)?;
    let p = filled(&s, 0x1111)?;
    let mut q = filled(&s, 0x2222)?;
    run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    let got = common::read_all(&s, &bufs)?;
    assert_same(&got[0][..LEN], &vec![0x1111; LEN], "call 1, element 0 (from p)");
    for (e, g) in got.iter().enumerate().skip(1) {
        assert_same(g, &vec![0x2222; LEN], &format!("call 1, element {e} (from q)"));
    }
    let q2 = filled(&s, 0x3333)?;
    drop(std::mem::replace(&mut q, q2));
    let victim = filled(&s, 0xdead)?;
    s.synchronize()?;
    let before = cache.stats().unchanged_calls;
    run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    let unchanged = cache.stats().unchanged_calls - before;
    let got = common::read_all(&s, &bufs)?;
    assert_eq!(unchanged, 0, "call 2 (its later iterations read a new q) taken for unchanged");
    for (e, g) in got.iter().enumerate().skip(1) {
        assert_same(g, &vec![0x3333; LEN], &format!("call 2, element {e}: from the new q"));
    }
    drop(victim);
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_shadowing_method_on_a_reference_reads_the_new_buffer() -> Result {
    let _serial = common::serial();
    read_after_replace(load_run)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_generic_receiver_bounded_on_kernels_reads_the_new_buffer() -> Result {
    let _serial = common::serial();
    read_after_replace(load_run_generic::<Ops>)
}

/// The decision alone, host side (holds on the CPU stub driver too).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_call_whose_later_iterations_use_another_buffer_is_not_unchanged() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let p = filled(&s, 1)?;
    let mut q = filled(&s, 2)?;
    let mut cache = GraphCache::new();
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    assert_eq!(cache.stats().unchanged_calls, 1, "the same call again is unchanged");
    let q2 = filled(&s, 3)?;
    drop(std::mem::replace(&mut q, q2));
    load_run(&mut cache, &k, &s, &p, &q, &mut bufs)?;
    assert_eq!(
        cache.stats().unchanged_calls,
        1,
        "a call whose later iterations read another q was taken for unchanged: {:?}",
        cache.stats()
    );
    Ok(())
}

/// Control: the same helper on `Ops` itself and an owned receiver. The inherent `affine` (5
/// arguments) is taken, so the statement is written with its arguments; `made_by` holds and is
/// right. Replacing `q` (read by no statement here) leaves the call unchanged, and values match
/// the launches made one by one.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_owned_receiver_takes_the_inherent_method() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let p = filled(&s, 0x1111)?;
    let mut want = common::read_all(&s, &bufs)?;
    let mut cache = GraphCache::new();
    let c = cfg();
    for call in 0..2 {
        graph!(&mut cache, &s, {
            for i in 0..4 {
                k.affine(N, 3, call, &p, &mut bufs[i]).launch(c);
            }
        })?;
        for w in want.iter_mut() {
            w[..LEN].copy_from_slice(&host::affine(&vec![0x1111; LEN], 3, call));
        }
        same_all(&common::read_all(&s, &bufs)?, &want, &format!("call {call}"));
    }
    Ok(())
}

/// The write form: `affine` with three written operands, on `&&Ops` (a trait of its own, so
/// that `load_run`'s `affine` keeps its signature).
mod write_form {
    use super::{Affine, DevWrite, Ops};
    pub trait ShadowWrite {
        fn helper_store<'k, 'b>(
            &'k self,
            n: u32,
            e: DevWrite<'b, u32>,
            p: DevWrite<'b, u32>,
            q: DevWrite<'b, u32>,
        ) -> Affine<'k, 'b>;
    }
    impl ShadowWrite for Ops {
        fn helper_store<'k, 'b>(
            &'k self,
            n: u32,
            e: DevWrite<'b, u32>,
            p: DevWrite<'b, u32>,
            q: DevWrite<'b, u32>,
        ) -> Affine<'k, 'b> {
            super::store_p_or_q(self, n, e, p, q)
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_shadowing_method_on_a_reference_writes_the_new_buffer() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let want_q: Vec<u32> = (0..N).map(|i| i * 7 + 3000).collect(); // element 3, last writer
    let mut p = filled(&s, 0)?;
    let mut q = filled(&s, 0)?;
    let mut cache = GraphCache::new();
    store_run_w(&mut cache, &k, &s, &mut p, &mut q, &mut bufs)?;
    assert_same(&s.clone_dtoh(&q)?, &want_q, "call 1: q");
    let q2 = filled(&s, 0)?;
    drop(std::mem::replace(&mut q, q2));
    // Likely at the freed q's address: must keep its contents (no call borrows it).
    let victim = filled(&s, 0xdead)?;
    s.synchronize()?;
    let before = cache.stats().unchanged_calls;
    store_run_w(&mut cache, &k, &s, &mut p, &mut q, &mut bufs)?;
    let unchanged = cache.stats().unchanged_calls - before;
    assert_eq!(unchanged, 0, "call 2 (its later iterations write a new q) taken for unchanged");
    assert_same(&s.clone_dtoh(&victim)?, &vec![0xdead; LEN], "call 2: victim untouched");
    assert_same(&s.clone_dtoh(&q)?, &want_q, "call 2: the new q written");
    Ok(())
}

fn store_run_w(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    p: &mut CudaSlice<u32>,
    q: &mut CudaSlice<u32>,
    bufs: &mut [CudaSlice<u32>],
) -> cudagraph::Result<()> {
    use write_form::ShadowWrite as _;
    let c = cfg();
    graph!(cache, s, {
        for i in 0..4 {
            k.helper_store(N, &mut bufs[i], &mut *p, &mut *q).launch(c);
        }
    })
}

/// Control of the name half of `made_by`: `Shadow::mix` makes an `affine` call, so the run is
/// compared as written: replacing `q` is a changed call and the new `q` is written.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_helper_named_like_another_kernel_is_compared_as_written() -> Result {
    use shadow::Shadow as _;
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut bufs = elements(&s)?;
    let want_q: Vec<u32> = (0..N).map(|i| i * 7 + 3000).collect();
    let mut p = filled(&s, 0)?;
    let mut q = filled(&s, 0)?;
    let mut cache = GraphCache::new();
    let mix_run = |cache: &mut GraphCache,
                   p: &mut CudaSlice<u32>,
                   q: &mut CudaSlice<u32>,
                   bufs: &mut [CudaSlice<u32>]| {
        let (k, c) = (&k, cfg());
        graph!(cache, &s, {
            for i in 0..4 {
                k.helper_mix(N, &mut bufs[i], &mut *p, &mut *q).launch(c);
            }
        })
    };
    mix_run(&mut cache, &mut p, &mut q, &mut bufs)?;
    let q2 = filled(&s, 0)?;
    drop(std::mem::replace(&mut q, q2));
    let victim = filled(&s, 0xdead)?;
    s.synchronize()?;
    let before = cache.stats().unchanged_calls;
    mix_run(&mut cache, &mut p, &mut q, &mut bufs)?;
    assert_eq!(cache.stats().unchanged_calls, before, "call 2 taken for unchanged");
    assert_same(&s.clone_dtoh(&victim)?, &vec![0xdead; LEN], "call 2: victim untouched");
    assert_same(&s.clone_dtoh(&q)?, &want_q, "call 2: the new q written");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_shadowed_kernel_name_runs_the_kernel_its_statement_evaluates_to() -> Result {
    use shadow::Shadow as _;
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let k = &k;
    let mut bufs = elements(&s)?;
    let mut want: Vec<Vec<u32>> = common::read_all(&s, &bufs)?;
    let mut cache = GraphCache::new();
    let c = cfg();
    for (call, mode) in [0u32, 1, 1, 2, 3].into_iter().enumerate() {
        MODE.with(|m| m.set(mode));
        let before = cache.stats().unchanged_calls;
        graph!(&mut cache, &s, {
            for i in 0..4 {
                k.helper_iota(N, &mut bufs[i]).launch(c);
            }
        })?;
        if call == 1 || call == 3 {
            let unchanged = cache.stats().unchanged_calls - before;
            assert_eq!(unchanged, 0, "call {call}, mode {mode}: taken for unchanged");
        }
        want[0][..LEN].copy_from_slice(&host::iota(N, 1, 0));
        for w in want.iter_mut().skip(1) {
            if mode.is_multiple_of(2) {
                *w = host::iota(N, 2, mode);
            } else {
                host::affine_inplace(w, 2, mode);
            }
        }
        same_all(&common::read_all(&s, &bufs)?, &want, &format!("call {call}, mode {mode}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_exact_run_of_a_shadowed_kernel_name_calls_it_in_every_iteration() -> Result {
    use shadow::Shadow as _;
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let k = &k;
    let mut x = filled(&s, 5)?;
    let mut e = filled(&s, 5)?;
    let mut cache = GraphCache::new();
    let c = cfg();
    for call in 0..2u32 {
        COUNT.with(|n| n.set(0));
        graph!(&mut cache, &s, {
            for _ in 0..4 {
                k.helper_affine_inplace(N, &mut x).launch(c);
            }
        })?;
        let count = COUNT.with(Cell::get);
        for j in 1..=4u32 {
            launch!(s, k, "affine_inplace", cfg(); &N, &1u32, &j, &mut e)?;
        }
        assert_eq!(count, 4, "call {call}: the helper of 4 statements ran {count} times");
        assert_same(&s.clone_dtoh(&x)?, &s.clone_dtoh(&e)?, &format!("call {call}"));
    }
    Ok(())
}
