//! Review 14 (commit dcee469: `graph!` acquires the written elements of one array indexed by
//! constants in one loop, `__private::acquire_mut_each`, and puts every place's guard into one
//! `__private::Guards`): safe code only, against the array path and the guard container.
//!
//! Every result is compared exactly with the eager oracle (`GraphCache::eager()`, the same
//! expansion run one statement at a time) or a host model of the integer kernels. What each
//! test attacks and what is expected on a GPU (all: pass):
//! - `array_groups_of_vec_array_slice_and_views_match_eager`: the array path over a
//!   `Vec<CudaSlice>`, a `[CudaSlice; 3]`, a `&mut [CudaSlice]` and a `[CudaViewMut; 3]` split
//!   from one allocation (elements adjacent in memory), each element read again later.
//! - `one_constant_element_spelled_three_ways_is_one_place`: `bufs[i]` (unrolled) beside
//!   `bufs[0 + 0]`, `bufs[(1)]` and `bufs[4 / 2]`: folded to one place each (one borrow, one
//!   guard), results equal eager and the host model.
//! - `a_named_constant_index_beside_the_array_panics_before_anything_runs`: `bufs[ONE]` beside
//!   an unrolled `&mut bufs[i]` (keys differ, the indices do not): the group is not constant,
//!   `get_disjoint_mut` must panic before anything is enqueued (the buffers keep their values),
//!   in `graph!` and `eager!`, and the cache stays usable.
//! - `equal_runtime_index_beside_the_array_panics_before_anything_runs`: `&bufs[j]` read beside
//!   the written array, `j` equal to a written index at run time: panic, nothing enqueued; `j`
//!   past the array's written part: matches eager.
//! - `runtime_for_and_host_if_over_array_elements_match_eager`: the array's handles used inside
//!   a run-time `for` (count 0, 1, 3) and in both branches of a host `if`, across calls.
//! - `user_deref_to_different_slices_acquires_one_of_them`: a user type whose `Deref` and
//!   `DerefMut` return different `Vec`s: the group borrows through `DerefMut` only (so the
//!   element read as `&two[0]` is the `DerefMut` slice's), graph equal to eager, the `Deref`
//!   slice untouched.
//! - `user_inherent_disjoint_method_only_redirects`: a user type with an inherent
//!   `__cudagraph_disjoint_mut_distinct` (found before the crate's trait method) that reverses
//!   the elements (since session 18: `__cudagraph_each_mut`, which reverses its vector and
//!   lends the elements the crate's slice method hands out): safe code can only hand back
//!   distinct `&mut`, so the worst is a redirection;
//!   graph equal to eager, and the writes land where the method sent them.
//! - `user_index_that_panics_after_the_array_was_acquired`: a user `Index` that panics on the
//!   place acquired after the array (its guards are in `Guards`): `graph!` and `eager!` unwind
//!   with nothing enqueued; the same cache then matches eager, and a `PinnedBuffer` element
//!   array whose guards were dropped by the unwinding is read right after.
//! - `private_guards_and_acquire_mut_each_from_safe_code`: `Guards`, `acquire_into`,
//!   `acquire_mut_into`, `acquire_mut_each` and `scratch` called directly: a place put twice
//!   or out of range panics (its guard dropped once, the rest dropped by `Guards`), `all()` of a
//!   partly filled container panics, and the buffers are used by cudarc and read right after
//!   (a guard dropped twice or never would show as an error or a stale event only; what is
//!   checked is that nothing faults and every value is right).

mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::{Ops, Result, assert_same, buffers, gpu, host, read_all, same_all};
use cudagraph::cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, LaunchConfig};
use cudagraph::{GraphCache, PinnedBuffer, eager, graph};

const N: u32 = 4096;
const LEN: usize = N as usize;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Three array groups of three kinds of container, each written in an unrolled `for` and read
/// again afterwards.
// A `Vec` on purpose: its elements are split through `Vec`'s own `DerefMut`.
#[allow(clippy::too_many_arguments, clippy::ptr_arg)]
fn containers(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    v: &mut Vec<CudaSlice<u32>>,
    a: &mut [CudaSlice<u32>; 3],
    sl: &mut [CudaSlice<u32>],
    views: &mut [CudaViewMut<'_, u32>; 3],
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..3 {
            k.iota(N, i + 2, b + i, &mut v[i]).launch(cfg());
            k.affine(N, 3, i, &v[i], &mut a[i]).launch(cfg());
            k.affine(N, 5, i + b, &a[i], &mut sl[i]).launch(cfg());
            k.mix(N, &sl[i], &mut views[i]).launch(cfg());
        }
        k.combine3(N, &views[0], &views[1], &views[2], &mut v[0]).launch(cfg());
        k.combine3(N, &v[0], &a[1], &sl[2], &mut a[0]).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn array_groups_of_vec_array_slice_and_views_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mut sets = Vec::new();
    for _ in 0..2 {
        let v = buffers(&s, 3, LEN)?;
        let a: [CudaSlice<u32>; 3] =
            [s.alloc_zeros(LEN)?, s.alloc_zeros(LEN)?, s.alloc_zeros(LEN)?];
        let sl = buffers(&s, 4, LEN)?;
        let big = s.alloc_zeros::<u32>(3 * LEN)?;
        sets.push((v, a, sl, big));
    }
    let (mut cache, mut eager_cache) = (GraphCache::new(), GraphCache::eager());
    for call in 0..4u32 {
        for (which, set) in sets.iter_mut().enumerate() {
            let (v, a, sl, big) = set;
            let (v0, mut rest) = big.split_at_mut(LEN);
            let (v1, v2) = rest.split_at_mut(LEN);
            let mut views = [v0, v1, v2];
            let c = if which == 0 { &mut cache } else { &mut eager_cache };
            containers(c, &k, &s, v, a, &mut sl[1..], &mut views, call)?;
        }
        let [(gv, ga, gsl, gbig), (ev, ea, esl, ebig)] = &sets[..] else { unreachable!() };
        same_all(&read_all(&s, gv)?, &read_all(&s, ev)?, &format!("call {call}: Vec"));
        same_all(&read_all(&s, ga)?, &read_all(&s, ea)?, &format!("call {call}: array"));
        same_all(&read_all(&s, gsl)?, &read_all(&s, esl)?, &format!("call {call}: slice"));
        assert_same(&s.clone_dtoh(gbig)?, &s.clone_dtoh(ebig)?, &format!("call {call}: views"));
        // The host model of the first element chain (iota, affine, affine, mix).
        let want = {
            let x = host::iota(N, 2, call);
            let y = host::affine(&x, 3, 0);
            let z = host::affine(&y, 5, call);
            host::mix(&z)
        };
        assert_same(&s.clone_dtoh(gbig)?[..LEN], &want, &format!("call {call}: views[0]"));
        // The slice's element 0 (outside the `&mut sl[1..]` passed in) is never written.
        assert!(s.clone_dtoh(&gsl[0])?.iter().all(|&x| x == 0), "call {call}: sl[0] untouched");
    }
    assert_eq!(cache.stats().builds, 1, "one variant: {:?}", cache.stats());
    Ok(())
}

#[allow(unused_parens)] // `bufs[(1)]` is the attack
// The index spellings are the point of the test.
#[allow(clippy::identity_op)]
fn spelled(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    out: &mut CudaSlice<u32>,
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..3 {
            k.iota(N, 1, b + 10 * i, &mut bufs[i]).launch(cfg());
        }
        k.combine3(N, &bufs[0 + 0], &bufs[(1)], &bufs[4 / 2], &mut *out).launch(cfg());
        k.affine_inplace(N, 13, 1, &mut bufs[2 * 1 - 1]).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_constant_element_spelled_three_ways_is_one_place() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut g, mut e) = (buffers(&s, 3, LEN)?, buffers(&s, 3, LEN)?);
    let (mut go, mut eo) = (s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?);
    let (mut cache, mut eager_cache) = (GraphCache::new(), GraphCache::eager());
    for b in [5u32, 9, 9] {
        spelled(&mut cache, &k, &s, &mut g, &mut go, b)?;
        spelled(&mut eager_cache, &k, &s, &mut e, &mut eo, b)?;
        same_all(&read_all(&s, &g)?, &read_all(&s, &e)?, &format!("b {b}: bufs"));
        assert_same(&s.clone_dtoh(&go)?, &s.clone_dtoh(&eo)?, &format!("b {b}: out"));
        let x: Vec<Vec<u32>> = (0..3).map(|i| host::iota(N, 1, b + 10 * i)).collect();
        assert_same(&s.clone_dtoh(&go)?, &host::combine3(&x[0], &x[1], &x[2]), "out model");
        let mut x1 = x[1].clone();
        host::affine_inplace(&mut x1, 13, 1);
        assert_same(&s.clone_dtoh(&g[1])?, &x1, "bufs[1] model");
    }
    // Three places only: `bufs[0]`, `bufs[1]`, `bufs[2]` (and `out`).
    let plan = cudagraph::plans()
        .find(|p| p.nodes.iter().any(|n| n.text.contains("affine_inplace(N, 13, 1")))
        .expect("the plan of `spelled`");
    assert_eq!(plan.places, ["bufs[0]", "bufs[1]", "bufs[2]", "out"], "one place per element");
    Ok(())
}

const ONE: usize = 1;

fn named_constant(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    out: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..3 {
            k.iota(N, 7, i, &mut bufs[i]).launch(cfg());
        }
        k.mix(N, &bufs[ONE], &mut *out).launch(cfg());
    })
}

fn named_constant_eager(
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    out: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    eager!(s, {
        for i in 0..3 {
            k.iota(N, 7, i, &mut bufs[i]).launch(cfg());
        }
        k.mix(N, &bufs[ONE], &mut *out).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_named_constant_index_beside_the_array_panics_before_anything_runs() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let marker: Vec<u32> = (0..N).map(|i| i ^ 0x5a5a).collect();
    let mut bufs: Vec<CudaSlice<u32>> =
        (0..3).map(|_| s.clone_htod(&marker)).collect::<std::result::Result<_, _>>()?;
    let mut out = s.clone_htod(&marker)?;
    let mut cache = GraphCache::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        named_constant(&mut cache, &k, &s, &mut bufs, &mut out)
    }));
    let p = r.expect_err("bufs[ONE] names bufs[1], written by the array: must panic");
    assert!(panic_text(&*p).contains("distinct"), "panic: {}", panic_text(&*p));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        named_constant_eager(&k, &s, &mut bufs, &mut out)
    }));
    assert!(r.is_err(), "eager!: must panic too");
    // Nothing ran.
    for (i, b) in read_all(&s, &bufs)?.iter().enumerate() {
        assert_same(b, &marker, &format!("bufs[{i}] untouched"));
    }
    assert_same(&s.clone_dtoh(&out)?, &marker, "out untouched");
    assert_eq!(cache.stats().builds, 0, "{:?}", cache.stats());
    // The cache still runs another body.
    graph!(&mut cache, &s, {
        k.iota(N, 1, 3, &mut out).launch(cfg());
    })?;
    assert_same(&s.clone_dtoh(&out)?, &host::iota(N, 1, 3), "after the panics");
    Ok(())
}

fn runtime_index(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    out: &mut CudaSlice<u32>,
    j: usize,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..3 {
            k.iota(N, 3, i + 1, &mut bufs[i]).launch(cfg());
        }
        k.mix(N, &bufs[j], &mut *out).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn equal_runtime_index_beside_the_array_panics_before_anything_runs() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let marker: Vec<u32> = (0..N).map(|i| i.wrapping_mul(77)).collect();
    let mut bufs: Vec<CudaSlice<u32>> =
        (0..4).map(|_| s.clone_htod(&marker)).collect::<std::result::Result<_, _>>()?;
    let mut ebufs: Vec<CudaSlice<u32>> =
        (0..4).map(|_| s.clone_htod(&marker)).collect::<std::result::Result<_, _>>()?;
    let (mut out, mut eout) = (s.clone_htod(&marker)?, s.clone_htod(&marker)?);
    let (mut cache, mut eager_cache) = (GraphCache::new(), GraphCache::eager());
    // Where each panic was raised: `graph!`'s call of the array's split is `#[track_caller]`
    // and spanned on the body's tokens, so the location is this file's `runtime_index`.
    let at: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = at.clone();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let file = info.location().map(|l| l.file().to_string()).unwrap_or_default();
        seen.lock().unwrap().push(file);
    }));
    for j in [0usize, 1, 2, 4] {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime_index(&mut cache, &k, &s, &mut bufs, &mut out, j)
        }));
        let p = r.expect_err(&format!(
            "j = {j}: must panic (equal to a written index, or out of range)"
        ));
        // The first two operands that name one element, as the body spells them.
        let text = panic_text(&*p);
        let want = if j < 4 {
            format!("and `bufs[j]` name one element (index {j}) of the array")
        } else {
            "`bufs[j]` is out of range: index 4 of an array of 4".to_string()
        };
        assert!(text.contains(&want), "j = {j}: panic {text:?} should contain {want:?}");
    }
    std::panic::set_hook(hook);
    let files = at.lock().unwrap().clone();
    assert_eq!(files.len(), 4, "one panic per refused call: {files:?}");
    for f in &files {
        assert!(f.ends_with("review_session14.rs"), "the panic's location is the body's: {f}");
    }
    for (i, b) in read_all(&s, &bufs)?.iter().enumerate() {
        assert_same(b, &marker, &format!("bufs[{i}] untouched by the refused calls"));
    }
    assert_same(&s.clone_dtoh(&out)?, &marker, "out untouched by the refused calls");
    for _ in 0..2 {
        runtime_index(&mut cache, &k, &s, &mut bufs, &mut out, 3)?;
        runtime_index(&mut eager_cache, &k, &s, &mut ebufs, &mut eout, 3)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &ebufs)?, "j = 3: bufs");
        assert_same(&s.clone_dtoh(&out)?, &s.clone_dtoh(&eout)?, "j = 3: out");
        assert_same(&s.clone_dtoh(&out)?, &host::mix(&marker), "j = 3: out model");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn looped(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>; 3],
    out: &mut CudaSlice<u32>,
    count: usize,
    flag: bool,
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..3 {
            k.iota(N, 2, b + i, &mut bufs[i]).launch(cfg());
        }
        for _t in 0..count {
            k.affine_inplace(N, 3, 1, &mut bufs[1]).launch(cfg());
            k.combine3(N, &bufs[1], &bufs[2], &bufs[1], &mut bufs[0]).launch(cfg());
        }
        if flag {
            k.mix(N, &bufs[0], &mut bufs[2]).launch(cfg());
        } else {
            k.mix(N, &bufs[1], &mut bufs[2]).launch(cfg());
            k.affine(N, 5, 5, &bufs[2], &mut *out).launch(cfg());
        }
        k.combine3(N, &bufs[0], &bufs[1], &bufs[2], &mut *out).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn runtime_for_and_host_if_over_array_elements_match_eager() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let mk = |s: &Arc<CudaStream>| -> Result<[CudaSlice<u32>; 3]> {
        Ok([s.alloc_zeros(LEN)?, s.alloc_zeros(LEN)?, s.alloc_zeros(LEN)?])
    };
    let (mut g, mut e) = (mk(&s)?, mk(&s)?);
    let (mut go, mut eo) = (s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?);
    let (mut cache, mut eager_cache) = (GraphCache::new(), GraphCache::eager());
    let mut b = 0u32;
    for (count, flag) in [(0, true), (1, false), (3, true), (3, false), (1, true), (0, false)] {
        b += 1;
        looped(&mut cache, &k, &s, &mut g, &mut go, count, flag, b)?;
        looped(&mut eager_cache, &k, &s, &mut e, &mut eo, count, flag, b)?;
        let what = format!("count {count}, flag {flag}");
        same_all(&read_all(&s, &g)?, &read_all(&s, &e)?, &what);
        assert_same(&s.clone_dtoh(&go)?, &s.clone_dtoh(&eo)?, &format!("{what}: out"));
    }
    // The host model of the last call (count 0, flag false).
    let x: Vec<Vec<u32>> = (0..3).map(|i| host::iota(N, 2, b + i)).collect();
    let x2 = host::mix(&x[1]);
    assert_same(&s.clone_dtoh(&go)?, &host::combine3(&x[0], &x[1], &x2), "model");
    Ok(())
}

/// `Deref` and `DerefMut` to different `Vec`s.
struct Two {
    shown: Vec<CudaSlice<u32>>,
    written: Vec<CudaSlice<u32>>,
}

impl std::ops::Deref for Two {
    type Target = [CudaSlice<u32>];
    fn deref(&self) -> &[CudaSlice<u32>] {
        &self.shown
    }
}

impl std::ops::DerefMut for Two {
    fn deref_mut(&mut self) -> &mut [CudaSlice<u32>] {
        &mut self.written
    }
}

fn two_body(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    two: &mut Two,
    out: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..2 {
            k.iota(N, 9, i, &mut two[i + 1]).launch(cfg());
        }
        k.combine3(N, &two[0], &two[1], &two[2], &mut *out).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn user_deref_to_different_slices_acquires_one_of_them() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let seed: Vec<u32> = (0..N).map(|i| i * 3 + 1).collect();
    let fresh = |s: &Arc<CudaStream>| -> Result<Two> {
        let v = |s: &Arc<CudaStream>| -> Result<Vec<CudaSlice<u32>>> {
            Ok((0..3).map(|_| s.clone_htod(&seed)).collect::<std::result::Result<_, _>>()?)
        };
        Ok(Two { shown: v(s)?, written: v(s)? })
    };
    let (mut g, mut e) = (fresh(&s)?, fresh(&s)?);
    let (mut go, mut eo) = (s.alloc_zeros::<u32>(LEN)?, s.alloc_zeros::<u32>(LEN)?);
    let (mut cache, mut eager_cache) = (GraphCache::new(), GraphCache::eager());
    for _ in 0..2 {
        two_body(&mut cache, &k, &s, &mut g, &mut go)?;
        two_body(&mut eager_cache, &k, &s, &mut e, &mut eo)?;
        assert_same(&s.clone_dtoh(&go)?, &s.clone_dtoh(&eo)?, "out: graph vs eager");
        same_all(&read_all(&s, &g.written)?, &read_all(&s, &e.written)?, "written");
        for (i, b) in read_all(&s, &g.shown)?.iter().enumerate() {
            assert_same(b, &seed, &format!("shown[{i}] is never written"));
        }
        // All three reads went through one borrow of the `DerefMut` slice.
        let want = host::combine3(&seed, &host::iota(N, 9, 0), &host::iota(N, 9, 1));
        assert_same(&s.clone_dtoh(&go)?, &want, "out model (DerefMut slice)");
    }
    Ok(())
}

/// A user type with an inherent method of the name the macro calls: it is found before the
/// crate's `DisjointMut` trait method.
struct Reversed(Vec<CudaSlice<u32>>);

impl Reversed {
    /// (Since session 18 the macro borrows an array acquired in one loop through
    /// `__cudagraph_each_mut`, whose `EachMut` only the crate's slice method makes: the user's
    /// method can only redirect to a slice of its choosing, here the vector reversed.)
    #[allow(non_snake_case, clippy::wrong_self_convention)]
    fn __cudagraph_each_mut<const M: usize>(
        &mut self,
        idx: &'static cudagraph::__private::DistinctIndices<M>,
    ) -> cudagraph::__private::EachMut<'_, CudaSlice<u32>, M> {
        use cudagraph::__private::DisjointMut as _;
        self.0.reverse();
        self.0.__cudagraph_each_mut(idx)
    }
}

impl std::ops::Index<usize> for Reversed {
    type Output = CudaSlice<u32>;
    fn index(&self, i: usize) -> &CudaSlice<u32> {
        &self.0[i]
    }
}

impl std::ops::IndexMut<usize> for Reversed {
    fn index_mut(&mut self, i: usize) -> &mut CudaSlice<u32> {
        &mut self.0[i]
    }
}

// The macro's `use DisjointMut as _` is unused here (the inherent method is found first).
#[allow(unused_imports)]
fn reversed_body(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    r: &mut Reversed,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..3 {
            k.iota(N, 1, 100 * i, &mut r[i]).launch(cfg());
        }
        k.combine3(N, &r[1], &r[2], &r[1], &mut r[0]).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn user_inherent_disjoint_method_only_redirects() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut g, mut e) = (Reversed(buffers(&s, 3, LEN)?), Reversed(buffers(&s, 3, LEN)?));
    let (mut cache, mut eager_cache) = (GraphCache::new(), GraphCache::eager());
    for _ in 0..2 {
        reversed_body(&mut cache, &k, &s, &mut g)?;
        reversed_body(&mut eager_cache, &k, &s, &mut e)?;
        same_all(&read_all(&s, &g.0)?, &read_all(&s, &e.0)?, "graph vs eager");
    }
    // Place `r[i]` is element `i` of the vector the method reversed: after the second call
    // (two reversals) `g.0[i]`, each buffer having been every place in turn.
    let x: Vec<Vec<u32>> = (0..3).map(|i| host::iota(N, 1, 100 * i)).collect();
    let got = read_all(&s, &g.0)?;
    assert_same(&got[1], &x[1], "r[1] is g.0[1]");
    assert_same(&got[2], &x[2], "r[2] is g.0[2]");
    assert_same(&got[0], &host::combine3(&x[1], &x[2], &x[1]), "r[0] is g.0[0]");
    Ok(())
}

/// `Index` that panics while `armed` (for reads: not grouped, so acquired by `Index`).
struct Flaky {
    v: Vec<CudaSlice<u32>>,
    armed: Cell<bool>,
}

impl std::ops::Index<usize> for Flaky {
    type Output = CudaSlice<u32>;
    fn index(&self, i: usize) -> &CudaSlice<u32> {
        assert!(!self.armed.get(), "Flaky: armed");
        &self.v[i]
    }
}

fn flaky_body(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    pins: &mut [PinnedBuffer<u32>],
    f: &Flaky,
    b: u32,
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..2 {
            k.iota(N, 5, b + i, &mut bufs[i]).launch(cfg());
            copy(&bufs[i], &mut pins[i]);
        }
        k.combine3(N, &f[0], &f[1], &bufs[0], &mut bufs[1]).launch(cfg());
    })
}

fn flaky_eager(
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    pins: &mut [PinnedBuffer<u32>],
    f: &Flaky,
    b: u32,
) -> cudagraph::Result<()> {
    eager!(s, {
        for i in 0..2 {
            k.iota(N, 5, b + i, &mut bufs[i]).launch(cfg());
            copy(&bufs[i], &mut pins[i]);
        }
        k.combine3(N, &f[0], &f[1], &bufs[0], &mut bufs[1]).launch(cfg());
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn user_index_that_panics_after_the_array_was_acquired() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let f = Flaky { v: buffers(&s, 2, LEN)?, armed: Cell::new(true) };
    let marker: Vec<u32> = (0..N).map(|i| !i).collect();
    let mut bufs: Vec<CudaSlice<u32>> =
        (0..2).map(|_| s.clone_htod(&marker)).collect::<std::result::Result<_, _>>()?;
    let mut pins: Vec<PinnedBuffer<u32>> =
        (0..2).map(|_| PinnedBuffer::<u32>::zeros(&s, LEN)).collect::<cudagraph::Result<_>>()?;
    let mut cache = GraphCache::new();
    for round in 0..3 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if round == 1 {
                flaky_eager(&k, &s, &mut bufs, &mut pins, &f, 1)
            } else {
                flaky_body(&mut cache, &k, &s, &mut bufs, &mut pins, &f, 1)
            }
        }));
        let p = r.expect_err("the armed Index panics");
        assert!(panic_text(&*p).contains("armed"), "{}", panic_text(&*p));
        for (i, b) in read_all(&s, &bufs)?.iter().enumerate() {
            assert_same(b, &marker, &format!("round {round}: bufs[{i}] untouched"));
        }
        for (i, p) in pins.iter().enumerate() {
            assert!(p.as_slice()?.iter().all(|&x| x == 0), "round {round}: pins[{i}] untouched");
        }
    }
    assert_eq!(cache.stats().builds, 0, "{:?}", cache.stats());
    f.armed.set(false);
    let mut ebufs = buffers(&s, 2, LEN)?;
    let mut epins: Vec<PinnedBuffer<u32>> =
        (0..2).map(|_| PinnedBuffer::<u32>::zeros(&s, LEN)).collect::<cudagraph::Result<_>>()?;
    for b in [2u32, 3] {
        flaky_body(&mut cache, &k, &s, &mut bufs, &mut pins, &f, b)?;
        flaky_eager(&k, &s, &mut ebufs, &mut epins, &f, b)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &ebufs)?, &format!("b {b}"));
        for (i, (g, e)) in pins.iter().zip(&epins).enumerate() {
            assert_same(g.as_slice()?, e.as_slice()?, &format!("b {b}: pins[{i}]"));
            assert_same(g.as_slice()?, &host::iota(N, 5, b + i as u32), "pins model");
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn private_guards_and_acquire_mut_each_from_safe_code() -> Result {
    use cudagraph::__private::{
        Guards, acquire_into, acquire_mut_each, acquire_mut_into, begin_call, scratch,
    };
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let seed: Vec<u32> = (0..N).map(|i| i.wrapping_mul(31)).collect();
    let mut bufs: Vec<CudaSlice<u32>> =
        (0..3).map(|_| s.clone_htod(&seed)).collect::<std::result::Result<_, _>>()?;
    let mut pin = PinnedBuffer::<u32>::zeros(&s, LEN)?;
    let x = s.clone_htod(&seed)?;
    // 1. A place put twice: the second guard is dropped by the failing `put`, the first by
    //    `Guards`.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let call = begin_call();
        // (The handles' store outlives the guards, which may make a guard from a handle.)
        let mut store = cudagraph::__private::EachStore::new();
        let mut g = Guards::<4>::new();
        let _ = acquire_into(&x, &s, &call, 3, &mut g);
        let _ = acquire_mut_into(&mut pin, &s, &call, 2, &mut g);
        let _ = acquire_mut_each(
            &mut store,
            each(&mut bufs, [0, 1]),
            &s,
            &call,
            places([0, 2]),
            &mut g,
        );
    }));
    assert!(panic_text(&*r.expect_err("put twice")).contains("acquired twice"));
    // 2. An index out of range: a bounds panic, nothing left half put.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let call = begin_call();
        let mut store = cudagraph::__private::EachStore::new();
        let mut g = Guards::<2>::new();
        let _ = acquire_mut_each(
            &mut store,
            each(&mut bufs, [0, 1, 2]),
            &s,
            &call,
            places([0, 1, 2]),
            &mut g,
        );
    }));
    assert!(r.is_err(), "index 2 of a Guards<2>");
    // 3. `all()` of a partly filled container, and of a full one, with a scratch place.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let call = begin_call();
        let mut g = Guards::<3>::new();
        let _sc = scratch::<u32, 3>(&s, &call, 0, 16, &mut g);
        let _ = acquire_into(&x, &s, &call, 2, &mut g);
        g.all().len()
    }));
    assert!(panic_text(&*r.expect_err("place 1 missing")).contains("not acquired"));
    {
        let call = begin_call();
        let mut g = Guards::<3>::new();
        let _sc = scratch::<u32, 3>(&s, &call, 1, 16, &mut g);
        let _ = acquire_into(&x, &s, &call, 0, &mut g);
        let _ = acquire_mut_into(&mut bufs[2], &s, &call, 2, &mut g);
        assert_eq!(g.all().len(), 3);
    }
    // 4. `Guards` forgotten with guards in it: no event recorded after an empty use; cudarc's
    //    own ordering still holds.
    {
        let call = begin_call();
        let mut g = Guards::<1>::new();
        let _ = acquire_mut_into(&mut pin, &s, &call, 0, &mut g);
        std::mem::forget(g);
    }
    // Everything is still usable, in order, with the right values.
    graph!(&mut GraphCache::new(), &s, {
        for i in 0..3 {
            k.affine(N, 3, i, &x, &mut bufs[i]).launch(cfg());
        }
        copy(&bufs[2], &mut pin);
    })?;
    for (i, b) in read_all(&s, &bufs)?.iter().enumerate() {
        assert_same(b, &host::affine(&seed, 3, i as u32), &format!("bufs[{i}]"));
    }
    assert_same(pin.as_slice()?, &host::affine(&seed, 3, 2), "pin");
    Ok(())
}

/// `s`'s elements at `idx`, as `graph!` borrows an array acquired in one loop (session 18).
fn each<const M: usize>(
    s: &mut [CudaSlice<u32>],
    idx: [usize; M],
) -> cudagraph::__private::EachMut<'_, CudaSlice<u32>, M> {
    use cudagraph::__private::{DisjointMut as _, DistinctIndices};
    // (Indices made at run time: leaked for the `'static` borrow `graph!`'s consts get.)
    s.__cudagraph_each_mut(Box::leak(Box::new(DistinctIndices::new(idx))))
}

/// Place numbers made at run time (checked then, not at compile time as `graph!`'s), leaked
/// for the `'static` borrow `graph!`'s consts get.
fn places<const M: usize, const N: usize>(
    idx: [u32; M],
) -> &'static cudagraph::__private::PlaceIndices<M, N> {
    Box::leak(Box::new(cudagraph::__private::PlaceIndices::new(idx)))
}
