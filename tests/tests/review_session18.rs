//! Review 18 (commits e419eb2 and 24c93cb: every place's guard in a `graph!` call's words, an
//! unchanged call skipping the aliasing check, the stream ledger when no buffer lives on another
//! stream and the guards' drops when none records; a run's later iterations compared through
//! their elements' guards and contexts only (`word_repeat`'s `RUN_TAG`); `__private::EachMut`
//! and one bounds check per constant-index array (`DistinctIndices`'s `end`)). Safe code only,
//! except where a test makes two overlapping views of one allocation (`upgrade_device_ptr`, as
//! `guard_words.rs` does) to stand for foreign aliasing the aliasing check must catch.
//!
//! Every test here must PASS when the crate is safe. Results at 24c93cb: the two
//! `DistinctIndices` tests fail with `--release` (pass in debug); the two `a_later_pinned_*`
//! tests die of SIGSEGV inside the unchanged call on an H200 (driver 580.159.04, the new
//! allocation at the freed address), their control passes; every other test passes (on the
//! H200 and, where it can run, on the CPU stub driver). Fixed after the review (session 18):
//! `DistinctIndices::new` saturates `end` (the bounds check then refuses `usize::MAX`), and an
//! array of pinned host memory acquired in one loop puts each element's allocation id in the
//! call's words (`Handle::HOST`, `Guards::contexts`), as a copy's words do.
//!
//! - `distinct_indices_with_usize_max_are_out_of_range` and
//!   `distinct_indices_with_usize_max_are_out_of_range_for_disjoint_mut` (no GPU):
//!   `DistinctIndices::new` (public, safe, a `const fn` callable at run time) computes one past
//!   the largest index as `idx[i] + 1`; without overflow checks (`--release`) an index of
//!   `usize::MAX` wraps it to 0, so `__cudagraph_each_mut` / `__cudagraph_disjoint_mut_distinct`
//!   skip their only bounds check and hand out `&mut *base.add(usize::MAX)` (the element
//!   before the slice): an out-of-bounds `&mut` from safe code. Found: fails with
//!   `cargo test --release`, passes in debug (the `+ 1` panics there).
//! - `a_later_pinned_element_reallocated_at_the_same_address_is_copied_to` (and the
//!   `PinnedBuffer` twin, GPU): a run `for i in 0..4 { copy(&d, &mut hosts[i]); }`. A copy with a
//!   pinned host side carries its allocation's id in its words (`pack_copy`'s `host_buffer`:
//!   the driver keeps the host address it resolved when the node was set, and launching an
//!   unchanged node after that buffer was freed and another allocated at the same address
//!   crashed inside `cuGraphLaunch`, gpu.rs). The run's later iterations put no node words,
//!   only the elements' guards (address, bytes, write) and contexts: no id. Element 2 freed and
//!   reallocated at the same address leaves the words equal: unchanged call, no set-params, the
//!   exec copies into the freed allocation. Controls: element 0 (the first iteration, whose
//!   node words hold the id) is refused as unchanged.
//! - `a_call_moved_to_another_stream_is_ordered_with_the_buffers_stream` (GPU, stub): calls on
//!   the buffers' own stream skip the ledger (`foreign` false), then an unchanged call on a
//!   second stream must not (the flag is per call, not per words).
//! - `a_panic_after_the_words_were_taken_leaves_no_unchecked_call`,
//!   `words_taken_by_safe_code_leave_no_unchecked_call`, `eager_mode_checks_every_call` (GPU,
//!   stub): the variant's words lent to a call that never gives them back (a panic in the body,
//!   or `cache.words` called and dropped from safe code), or a call in `Mode::Eager`: the next
//!   call with an element swapped for an overlapping view is still refused with
//!   `Error::Aliasing`.
//! - `each_mut_is_sound_through_its_public_api`, plus ui `review18-*` (compile-fail):
//!   `EachMut::take` is private, `EachMut` is not `Clone` and cannot be built from its fields,
//!   and `DistinctIndices` with duplicate indices or `usize::MAX` in a `const` (as `graph!`
//!   makes it) does not compile.
//!
//! Host-side parts also run on the CPU stub driver: `REVIEW17_STUB=1 LD_LIBRARY_PATH=<dir of the
//! libraries .ci/stub-driver builds> cargo test -p cudagraph-tests --test review_session18 --
//! --ignored` (values are not compared there; the pinned tests need a GPU: the stub reports no
//! allocation ids, so those copies never pack).

mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::review17::{assert_same, same_all, stub};
use common::run8::{LEN, N, cfg, distinct, run8, run8_eager};
use common::{Ops, Result, gpu, host, launch, read_all};
use cudagraph::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, PinnedHostSlice, PushKernelArg,
};
use cudagraph::{Error, GraphCache, Mode, PinnedBuffer, graph};

/// Steps of `slow_iota`: a few milliseconds on an H200.
const SPINS: u32 = 1 << 17;

// ---------------------------------------------------------------------------------------------
// DistinctIndices: one bounds check per array (no GPU).

/// `DistinctIndices::new([usize::MAX])` at run time, then `__cudagraph_each_mut` on a 4-element
/// slice: must panic (out of range). With the hole (`end = idx + 1` wrapping to 0 without
/// overflow checks) it returns an `EachMut` whose element 0 is `base.add(usize::MAX)`, which
/// `acquire_mut_each` (public, safe) turns into a `&mut` to the element before the slice.
#[test]
fn distinct_indices_with_usize_max_are_out_of_range() {
    use cudagraph::__private::{DisjointMut, DistinctIndices};
    let mut v = [0u32; 4];
    for idx in [[usize::MAX, 0], [0, usize::MAX], [3, usize::MAX]] {
        let idx = std::hint::black_box(idx);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // (Made at run time: leaked for the `'static` borrow `graph!`'s consts get.)
            let idx = Box::leak(Box::new(DistinctIndices::new(idx)));
            let _each = v.as_mut_slice().__cudagraph_each_mut(idx);
        }));
        assert!(r.is_err(), "indices {idx:?} of a 4-element slice were accepted");
    }
}

/// The same through `__cudagraph_disjoint_mut_distinct` (which returns the references
/// themselves), on a slice of a zero-sized type so that an accepted out-of-range element
/// touches no memory even with the hole.
#[test]
fn distinct_indices_with_usize_max_are_out_of_range_for_disjoint_mut() {
    use cudagraph::__private::{DisjointMut, DistinctIndices};
    let mut v = [(); 4];
    let idx = std::hint::black_box([2usize, usize::MAX]);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let [a, b] = v.as_mut_slice().__cudagraph_disjoint_mut_distinct(DistinctIndices::new(idx));
        let _ = (a, b);
    }));
    assert!(r.is_err(), "index usize::MAX of a 4-element slice was accepted");
}

/// `EachMut` through its public API only: made for distinct in-range indices, and handed to
/// `acquire_mut_each`, which takes each element once (no second `&mut`: `take` is private, see
/// the ui cases). Duplicates and out-of-range indices panic before any `EachMut` exists.
#[test]
fn each_mut_is_sound_through_its_public_api() {
    use cudagraph::__private::{DisjointMut, DistinctIndices};
    let mut v = [0u32; 4];
    let dup = std::panic::catch_unwind(|| DistinctIndices::new(std::hint::black_box([1, 1])));
    assert!(dup.is_err(), "duplicate indices accepted");
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = v.as_mut_slice().__cudagraph_each_mut(&const { DistinctIndices::new([0, 4]) });
    }));
    assert!(out.is_err(), "index 4 of a 4-element slice accepted");
    let _ = v.as_mut_slice().__cudagraph_each_mut(&const { DistinctIndices::new([3, 0]) });
}

// ---------------------------------------------------------------------------------------------
// A run's later iterations: pinned host elements reallocated at the same address.

/// A run of 4 copies from `d`, each into its own element of `hosts` (cudarc's pinned memory).
fn copy4(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    d: &CudaSlice<u32>,
    hosts: &mut [PinnedHostSlice<u32>],
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..4 {
            copy(&d, &mut hosts[i]);
        }
    })
}

/// [`copy4`] into the crate's `PinnedBuffer`s.
fn copy4_buffers(
    cache: &mut GraphCache,
    s: &Arc<CudaStream>,
    d: &CudaSlice<u32>,
    hosts: &mut [PinnedBuffer<u32>],
) -> cudagraph::Result<()> {
    graph!(cache, s, {
        for i in 0..4 {
            copy(&d, &mut hosts[i]);
        }
    })
}

/// The pinned element kinds of the tests below.
trait Pinned: Sized {
    fn make(ctx: &Arc<CudaContext>, s: &Arc<CudaStream>) -> Result<Self>;
    fn address(&self) -> Result<usize>;
    fn values(&self) -> Result<Vec<u32>>;
    fn run(
        cache: &mut GraphCache,
        s: &Arc<CudaStream>,
        d: &CudaSlice<u32>,
        hosts: &mut [Self],
    ) -> cudagraph::Result<()>;
}

impl Pinned for PinnedHostSlice<u32> {
    fn make(ctx: &Arc<CudaContext>, _: &Arc<CudaStream>) -> Result<Self> {
        common::pinned::<u32>(ctx, LEN)
    }
    fn address(&self) -> Result<usize> {
        Ok(self.as_ptr()? as usize)
    }
    fn values(&self) -> Result<Vec<u32>> {
        Ok(self.as_slice()?.to_vec())
    }
    fn run(
        cache: &mut GraphCache,
        s: &Arc<CudaStream>,
        d: &CudaSlice<u32>,
        hosts: &mut [Self],
    ) -> cudagraph::Result<()> {
        copy4(cache, s, d, hosts)
    }
}

impl Pinned for PinnedBuffer<u32> {
    fn make(_: &Arc<CudaContext>, s: &Arc<CudaStream>) -> Result<Self> {
        PinnedBuffer::zeros(s, LEN)
    }
    fn address(&self) -> Result<usize> {
        Ok(self.as_slice()?.as_ptr() as usize)
    }
    fn values(&self) -> Result<Vec<u32>> {
        Ok(self.as_slice()?.to_vec())
    }
    fn run(
        cache: &mut GraphCache,
        s: &Arc<CudaStream>,
        d: &CudaSlice<u32>,
        hosts: &mut [Self],
    ) -> cudagraph::Result<()> {
        copy4_buffers(cache, s, d, hosts)
    }
}

/// Three calls of the run (the last two unchanged), then element `which` freed and another
/// allocated, at the same address where the allocator hands it back, and `d` rewritten: the
/// next call must copy `d` into every element, the new one included, and must not count as
/// unchanged when an element is another allocation. With the hole (`which` > 0: an element of
/// the run's later iterations, whose words hold no allocation id), the call is unchanged, no
/// parameter is set again, and the exec's copy goes to the freed allocation the driver
/// resolved before (a crash inside `cuGraphLaunch`, or the new buffer left stale).
fn reallocated_element<P: Pinned>(which: usize) -> Result {
    let _serial = common::serial();
    let _dog = common::watchdog(120, "review 18: a pinned element reallocated");
    let (ctx, s, k) = gpu()?;
    let mut d = s.alloc_zeros::<u32>(LEN)?;
    let mut hosts: Vec<P> = (0..4).map(|_| P::make(&ctx, &s)).collect::<Result<_>>()?;
    let mut cache = GraphCache::new();
    for call in 0..3u32 {
        launch!(s, k, "iota", cfg(); &N, &(call + 1), &call, &mut d)?;
        P::run(&mut cache, &s, &d, &mut hosts)?;
        s.synchronize()?;
        for (j, h) in hosts.iter().enumerate() {
            assert_same(&h.values()?, &host::iota(N, call + 1, call), &format!("call {call}, {j}"));
        }
    }
    let st = cache.stats();
    assert!(st.unchanged_calls >= 2, "{st:?}");
    let at = hosts[which].address()?;
    drop(hosts.remove(which));
    // Allocations kept aside until one lands at the freed address (usually the first).
    let mut aside = Vec::new();
    let mut fresh = P::make(&ctx, &s)?;
    while fresh.address()? != at && aside.len() < 8 {
        aside.push(fresh);
        fresh = P::make(&ctx, &s)?;
    }
    let reused = fresh.address()? == at;
    eprintln!("element {which}: the new allocation is at the freed address: {reused}");
    hosts.insert(which, fresh);
    drop(aside);
    launch!(s, k, "iota", cfg(); &N, &9u32, &9u32, &mut d)?;
    let unchanged = cache.stats().unchanged_calls;
    P::run(&mut cache, &s, &d, &mut hosts)?;
    s.synchronize()?;
    for (j, h) in hosts.iter().enumerate() {
        assert_same(&h.values()?, &host::iota(N, 9, 9), &format!("after the reallocation, {j}"));
    }
    assert_eq!(
        cache.stats().unchanged_calls,
        unchanged,
        "a call with element {which} another pinned allocation (at the same address: \
         {reused}) counted as unchanged: {:?}",
        cache.stats()
    );
    // And once more, unchanged now, still right.
    launch!(s, k, "iota", cfg(); &N, &11u32, &2u32, &mut d)?;
    P::run(&mut cache, &s, &d, &mut hosts)?;
    s.synchronize()?;
    for (j, h) in hosts.iter().enumerate() {
        assert_same(&h.values()?, &host::iota(N, 11, 2), &format!("the call after, {j}"));
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_later_pinned_element_reallocated_at_the_same_address_is_copied_to() -> Result {
    reallocated_element::<PinnedHostSlice<u32>>(2)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_later_pinned_buffer_element_reallocated_at_the_same_address_is_copied_to() -> Result {
    reallocated_element::<PinnedBuffer<u32>>(2)
}

/// Control: the run's first element, whose copy's node words hold the allocation id.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_first_pinned_element_reallocated_at_the_same_address_is_copied_to() -> Result {
    reallocated_element::<PinnedHostSlice<u32>>(0)
}

// ---------------------------------------------------------------------------------------------
// The stream ledger, the lent words, eager mode.

/// Every buffer lives on `own` (a context object with event tracking off, so that cudarc
/// orders nothing: only the cache's ledger can). Two calls on `own` itself: no buffer on
/// another stream, the ledger is skipped (no stream wait). Then a slow kernel on `own` writes
/// element 3 and the same run is called on a second stream `other` of the same context: the
/// words are equal (nothing in them names the stream), so the call is unchanged, but every
/// guard's buffer now lives on another stream than the call's, so the ledger must order the
/// launch after the slow kernel. With the ledger skipped on equal words, the graph would read
/// element 3 before it is written (and `own` would free a dropped element under the graph).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_call_moved_to_another_stream_is_ordered_with_the_buffers_stream() -> Result {
    let _serial = common::serial();
    let (_ctx, _s, _k) = gpu()?;
    let dev = CudaContext::new(0)?;
    // SAFETY: every cudarc use of `dev`'s buffers in this test is on `own` (or synchronized);
    // the graph's launches are ordered with `own` by the cache's ledger, which is tested.
    unsafe { dev.disable_event_tracking() };
    let k = common::load(&dev)?;
    let own = dev.new_stream()?;
    let other = dev.new_stream()?;
    let mut bufs = distinct(&own)?;
    own.synchronize()?;
    let mut want = read_all(&own, &bufs)?;
    let mut cache = GraphCache::new();
    for call in 0..2 {
        run8(&mut cache, &k, &own, &mut bufs)?;
        for w in want.iter_mut() {
            host::affine_inplace(w, 3, 1);
        }
        own.synchronize()?;
        same_all(&read_all(&own, &bufs)?, &want, &format!("call {call} on own"));
    }
    let st = cache.stats();
    assert_eq!(st.stream_waits, 0, "every buffer on the call's stream: {st:?}");
    assert!(st.unchanged_calls >= 1, "{st:?}");
    let unchanged = st.unchanged_calls;
    launch!(own, k, "slow_iota", cfg(); &N, &SPINS, &5u32, &7u32, &mut bufs[3])?;
    run8(&mut cache, &k, &other, &mut bufs)?;
    want[3] = host::slow_iota(N, SPINS, 5, 7);
    for w in want.iter_mut() {
        host::affine_inplace(w, 3, 1);
    }
    other.synchronize()?;
    own.synchronize()?;
    same_all(&read_all(&own, &bufs)?, &want, "the call on another stream");
    let st = cache.stats();
    assert!(st.stream_waits >= 2, "the ledger ordered the call on another stream: {st:?}");
    if stub() {
        // Host-side evidence: the call was unchanged (words equal) and still ordered.
        assert_eq!(st.unchanged_calls, unchanged + 1, "{st:?}");
    }
    Ok(())
}

thread_local! {
    /// Makes [`boom`] panic.
    static BOOM: Cell<bool> = const { Cell::new(false) };
}

/// A scalar `0`, or a panic while [`BOOM`] is set: a statement evaluated after the call's words
/// were taken from its guards (`take_words`), before the call runs.
fn boom() -> u32 {
    assert!(!BOOM.get(), "review 18: a statement panics");
    0
}

/// [`run8`] with one more statement, whose scalar is [`boom`].
fn run8_then(
    cache: &mut GraphCache,
    k: &Ops,
    s: &Arc<CudaStream>,
    bufs: &mut [CudaSlice<u32>],
    mut extra: &mut CudaSlice<u32>,
) -> cudagraph::Result<()> {
    let c = cfg();
    graph!(cache, s, {
        for i in 0..8 {
            k.affine_inplace(N, 3, 1, &mut bufs[i]).launch(c);
        }
        k.affine_inplace(N, 1, boom(), &mut extra).launch(c);
    })
}

/// Element 5 replaced by a view of element 6 from its element 4 on (two views of one
/// allocation, as foreign aliasing): the call must be refused with `Error::Aliasing`, nothing
/// launched. Element 5 is put back (the view leaked, never freed) before returning.
fn refused_with_an_overlapping_element(
    s: &Arc<CudaStream>,
    cache: &mut GraphCache,
    bufs: &mut [CudaSlice<u32>],
    call: impl FnOnce(&mut GraphCache, &mut [CudaSlice<u32>]) -> cudagraph::Result<()>,
) -> Result {
    let view = common::overlapping_view(s, &bufs[6]);
    let mine = std::mem::replace(&mut bufs[5], view);
    let launches = cache.stats().launches;
    let r = call(cache, bufs);
    std::mem::replace(&mut bufs[5], mine).leak();
    match r {
        Err(Error::Aliasing { .. }) => {}
        r => panic!("expected Error::Aliasing, got {r:?} ({:?})", cache.stats()),
    }
    assert_eq!(cache.stats().launches, launches, "nothing launched");
    Ok(())
}

/// Unchanged calls, then one whose body panics after its words were taken (the variant's words
/// were lent to it and are lost), then the run with an element swapped for an overlapping view:
/// must be refused. With a lost pack compared wrongly (an empty pack, or the words of the
/// panicked call, taken for the variant's), the call could count as unchanged and skip the
/// check.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panic_after_the_words_were_taken_leaves_no_unchecked_call() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut bufs, mut eager) = (distinct(&s)?, distinct(&s)?);
    let mut extra = s.alloc_zeros::<u32>(LEN)?;
    let mut cache = GraphCache::new();
    for call in 0..3 {
        run8_then(&mut cache, &k, &s, &mut bufs, &mut extra)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("call {call}"));
    }
    assert!(cache.stats().unchanged_calls >= 2, "{:?}", cache.stats());
    BOOM.set(true);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run8_then(&mut cache, &k, &s, &mut bufs, &mut extra)
    }));
    BOOM.set(false);
    assert!(panicked.is_err(), "the body panicked");
    refused_with_an_overlapping_element(&s, &mut cache, &mut bufs, |c, b| {
        run8_then(c, &k, &s, b, &mut extra)
    })?;
    // Twice: the refused call's words are not kept either.
    refused_with_an_overlapping_element(&s, &mut cache, &mut bufs, |c, b| {
        run8_then(c, &k, &s, b, &mut extra)
    })?;
    for call in 0..2 {
        run8_then(&mut cache, &k, &s, &mut bufs, &mut extra)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("after, call {call}"));
    }
    Ok(())
}

/// Safe code takes the variant's words with the hidden `GraphCache::words` (its plan from
/// `cache.plan()`), even puts a guard-less `Guards::with_words` around them and takes them back
/// (`take_words`: marked guarded), then drops them: it cannot hand them to a run (`run_words*`
/// are `unsafe`). The next call with an overlapping element must still be refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn words_taken_by_safe_code_leave_no_unchecked_call() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut bufs, mut eager) = (distinct(&s)?, distinct(&s)?);
    let mut cache = GraphCache::new();
    for call in 0..3 {
        run8(&mut cache, &k, &s, &mut bufs)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("call {call}"));
    }
    let plan = cache.plan().expect("ran");
    let words = cache.words(plan, &cudagraph::__private::begin_call());
    let mut g = cudagraph::__private::Guards::<0>::with_words(&s, words);
    let taken = g.take_words();
    drop((g, taken));
    refused_with_an_overlapping_element(&s, &mut cache, &mut bufs, |c, b| run8(c, &k, &s, b))?;
    // Taken and kept across a call: that call is compared without them, and still checked.
    let kept = cache.words(plan, &cudagraph::__private::begin_call());
    refused_with_an_overlapping_element(&s, &mut cache, &mut bufs, |c, b| run8(c, &k, &s, b))?;
    drop(kept);
    for call in 0..2 {
        run8(&mut cache, &k, &s, &mut bufs)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("after, call {call}"));
    }
    Ok(())
}

/// Unchanged graph calls, then `Mode::Eager` (no words) with an overlapping element: refused;
/// back in `Mode::Graph` with the same overlap: refused (the eager call stored no words).
#[test]
#[ignore = "needs a CUDA GPU"]
fn eager_mode_checks_every_call() -> Result {
    let _serial = common::serial();
    let (_ctx, s, k) = gpu()?;
    let (mut bufs, mut eager) = (distinct(&s)?, distinct(&s)?);
    let mut cache = GraphCache::new();
    for call in 0..3 {
        run8(&mut cache, &k, &s, &mut bufs)?;
        run8_eager(&k, &s, &mut eager)?;
        same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, &format!("call {call}"));
    }
    cache.set_mode(Mode::Eager);
    refused_with_an_overlapping_element(&s, &mut cache, &mut bufs, |c, b| run8(c, &k, &s, b))?;
    run8(&mut cache, &k, &s, &mut bufs)?;
    run8_eager(&k, &s, &mut eager)?;
    same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, "eager");
    cache.set_mode(Mode::Graph);
    refused_with_an_overlapping_element(&s, &mut cache, &mut bufs, |c, b| run8(c, &k, &s, b))?;
    run8(&mut cache, &k, &s, &mut bufs)?;
    run8_eager(&k, &s, &mut eager)?;
    same_all(&read_all(&s, &bufs)?, &read_all(&s, &eager)?, "graph again");
    Ok(())
}
