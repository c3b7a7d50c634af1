//! Host work inside captures (issue 30, item 4): pinned host operands of a capture (a `capture`
//! statement of `graph!`, or the standalone [`capture`](crate::capture())), the closure's views of
//! them ([`CaptureHostSlice`], [`CaptureHostSliceMut`]), and the [`Capture`] methods that record
//! host work: copies between a host view and a device view ([`Capture::copy_htod`],
//! [`Capture::copy_dtoh`]) and host functions ([`Capture::host`]).
//!
//! # Host functions of a recording
//!
//! A recording is replayed by every launch of every exec made from it, long after the closure
//! that recorded it returned, and a keyed `capture` statement's recording is kept across calls.
//! So a host function of a capture is not a `host` statement's closure, given anew by each call
//! and called once: it is kept with the recording and called by each launch that reaches its
//! node. What stays the same as for the `host` statement (`kind/host.rs`, `kind/handoff.rs`):
//! - the node is a child graph of a host function node and a batch mem-op node waiting for a
//!   [`Flag`](crate::raw) of the crate's pool: the driver's callback ([`run_captured`]) only
//!   resets the flag and hands the closure to a worker thread of the crate's, which runs it
//!   (CUDA calls in it are ordinary calls, never on the driver's thread) and then sets the flag;
//! - what the driver holds is never a pointer to Rust data: the host function node's `userData`
//!   is a number, looked up in [`ENTRIES`] when the callback runs;
//! - the closure gets only the pinned host buffers it was given, as `&[T]` / `&mut [T]` made
//!   while it runs;
//! - a panic inside is caught and returned as [`Error::HostFunction`] by the next call of the
//!   cache whose call recorded it (or the next launch of the standalone exec);
//! - what the closure owns is dropped on a worker thread, never on a driver thread.
//!
//! What keeps the closure alive: the child graph's template owns two user objects
//! (`cuUserObjectCreate`, `cuGraphRetainUserObject`), one returning the flag to its pool, one
//! removing the closure's entry from [`ENTRIES`] (and handing it to a worker to drop). The
//! driver copies their references into every graph and exec that copies the node (the
//! recording, an exec's child node, a clone), and runs a destructor only once no graph or exec
//! holds a reference and no launch holding one is pending: the closure lives exactly as long as
//! something may launch it.
//!
//! Two execs of one recording (a keyed recording taken by two variants) may launch at the same
//! time on two streams: the closure is behind a mutex (one run at a time) and the flag is set
//! only when no run of the closure is pending ([`Entry::pending`]), so neither launch passes the
//! node before its run ended.

use core::ffi::c_void;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Bound, RangeBounds};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, Location, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{
    self, CUDA_BATCH_MEM_OP_NODE_PARAMS_v2, CUcontext, CUgraph, CUgraphNodeType, CUresult,
    CUstreamBatchMemOpParams, CUstreamBatchMemOpType, CUstreamWaitValue_flags,
};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DriverError};

use crate::error::{Call, CudaError, Error, NodeSite, Refusal, Result};
use crate::flags;
use crate::kind::captured::CaptureOperand;
use crate::kind::handoff::{self, Task};
use crate::kind::host::{self as host_kind, Deferred};
use crate::kind::{Reports, node_params};
use crate::operand::{HostRead, HostWrite};
use crate::raw::{self, Flag};
use crate::session::imp::Listed;
use crate::session::{Capture, CaptureSliceMut, CaptureView, make_current, site_at};

mod sealed {
    pub trait Sealed {}
}

/// A listed `&` pinned host operand as a capture's closure sees it (or a part of one): `len()`
/// elements of `T` of pinned host memory, which the capture's work may read.
///
/// It gives no access to the memory while the closure runs (the memory may still be in use by
/// earlier GPU work: the closure runs before the launch it records): safe code uses it only
/// through the [`Capture`]'s methods, [`copy_htod`](Capture::copy_htod) (as the source) and
/// [`host`](Capture::host) (the host function gets `&[T]` of it when it runs). It cannot leave
/// the closure.
pub struct CaptureHostSlice<'s, T> {
    ptr: *const T,
    len: usize,
    ctx: CUcontext,
    cap: &'s Capture,
}

/// A listed `&mut` pinned host operand as a capture's closure sees it (or a part of one); see
/// [`CaptureHostSlice`]. Also the destination of [`Capture::copy_dtoh`], and `&mut` of it gives a
/// host function `&mut [T]`.
pub struct CaptureHostSliceMut<'s, T> {
    ptr: *mut T,
    len: usize,
    ctx: CUcontext,
    cap: &'s Capture,
    _write: PhantomData<&'s mut [T]>,
}

/// `(start, end)` of `range` in a view of `len` elements.
///
/// # Panics
/// When the range is out of bounds or decreasing.
#[track_caller]
fn bounds(range: &impl RangeBounds<usize>, len: usize) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1).expect("range start overflows usize"),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1).expect("range end overflows usize"),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    assert!(
        start <= end && end <= len,
        "range {start}..{end} out of bounds of a host view of {len} elements"
    );
    (start, end)
}

impl<'s, T> CaptureHostSlice<'s, T> {
    /// Length, elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements in `range`.
    ///
    /// # Panics
    /// When `range` is out of bounds.
    #[track_caller]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> CaptureHostSlice<'s, T> {
        let (start, end) = bounds(&range, self.len);
        let ptr = offset(self.ptr, start);
        CaptureHostSlice { ptr, len: end - start, ctx: self.ctx, cap: self.cap }
    }
}

impl<'s, T> CaptureHostSliceMut<'s, T> {
    /// Length, elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements in `range`, read-only.
    ///
    /// # Panics
    /// When `range` is out of bounds.
    #[track_caller]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> CaptureHostSlice<'_, T> {
        let (start, end) = bounds(&range, self.len);
        let ptr = offset(self.ptr.cast_const(), start);
        CaptureHostSlice { ptr, len: end - start, ctx: self.ctx, cap: self.cap }
    }

    /// The elements in `range`.
    ///
    /// # Panics
    /// When `range` is out of bounds.
    #[track_caller]
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> CaptureHostSliceMut<'_, T> {
        let (start, end) = bounds(&range, self.len);
        let ptr = offset(self.ptr.cast_const(), start).cast_mut();
        CaptureHostSliceMut {
            ptr,
            len: end - start,
            ctx: self.ctx,
            cap: self.cap,
            _write: PhantomData,
        }
    }

    /// The elements before `mid` and from `mid` on.
    ///
    /// # Panics
    /// When `mid > len()`.
    #[track_caller]
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> (CaptureHostSliceMut<'_, T>, CaptureHostSliceMut<'_, T>) {
        assert!(mid <= self.len, "mid {mid} > len {} of a host view", self.len);
        let (ctx, cap) = (self.ctx, self.cap);
        let a = CaptureHostSliceMut { ptr: self.ptr, len: mid, ctx, cap, _write: PhantomData };
        let ptr = offset(self.ptr.cast_const(), mid).cast_mut();
        let b = CaptureHostSliceMut { ptr, len: self.len - mid, ctx, cap, _write: PhantomData };
        (a, b)
    }
}

impl<T> fmt::Debug for CaptureHostSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureHostSlice").field("len", &self.len).finish()
    }
}

impl<T> fmt::Debug for CaptureHostSliceMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureHostSliceMut").field("len", &self.len).finish()
    }
}

/// A host view that [`Capture::copy_htod`] copies from: a [`CaptureHostSlice`] or a
/// [`CaptureHostSliceMut`]. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a capture's view of pinned host memory",
    label = "expected a `CaptureHostSlice` or `CaptureHostSliceMut` of a listed pinned host operand",
    note = "list the pinned host buffer (`&h` or `&mut h` of a `PinnedHostSlice`) in the capture; the closure gets its host view"
)]
pub trait CaptureHostView: sealed::Sealed {
    /// The element type.
    type Elem: 'static;
    /// `(address, length in elements, context, capture)`.
    #[doc(hidden)]
    fn parts(&self) -> (*const c_void, usize, CUcontext, *const Capture);
}

impl<T> sealed::Sealed for CaptureHostSlice<'_, T> {}
impl<T: 'static> CaptureHostView for CaptureHostSlice<'_, T> {
    type Elem = T;
    fn parts(&self) -> (*const c_void, usize, CUcontext, *const Capture) {
        (self.ptr.cast(), self.len, self.ctx, self.cap)
    }
}

impl<T> sealed::Sealed for CaptureHostSliceMut<'_, T> {}
impl<T: 'static> CaptureHostView for CaptureHostSliceMut<'_, T> {
    type Elem = T;
    fn parts(&self) -> (*const c_void, usize, CUcontext, *const Capture) {
        (self.ptr.cast_const().cast(), self.len, self.ctx, self.cap)
    }
}

/// What a pinned host operand's view is made of while the closure runs: its address, length in
/// elements and context (nothing to alias: host memory has no cudarc events of its own in a
/// capture; the host function and the copies are ordered by the capture's stream).
#[doc(hidden)]
pub struct HostAlias<T> {
    ptr: *mut T,
    len: usize,
    ctx: CUcontext,
}

impl<T> HostAlias<T> {
    /// The alias of `len` elements of pinned host memory at `ptr`, of `ctx`.
    pub(crate) fn of(ptr: *mut c_void, len: usize, ctx: CUcontext) -> Self {
        HostAlias { ptr: ptr.cast(), len, ctx }
    }

    /// The closure's view of a `&` operand.
    pub(crate) fn view<'s>(&'s mut self, cap: &'s Capture) -> CaptureHostSlice<'s, T> {
        CaptureHostSlice { ptr: self.ptr.cast_const(), len: self.len, ctx: self.ctx, cap }
    }

    /// The closure's view of a `&mut` operand.
    pub(crate) fn view_mut<'s>(&'s mut self, cap: &'s Capture) -> CaptureHostSliceMut<'s, T> {
        let (ptr, len, ctx) = (self.ptr, self.len, self.ctx);
        CaptureHostSliceMut { ptr, len, ctx, cap, _write: PhantomData }
    }
}

/// The id of the pinned allocation at `ptr` ([`raw::buffer_id`]) for what a kept recording
/// depends on ([`CaptureOperand::buffer`]): 0 for an empty buffer (no copy of it is recorded),
/// and a number never given before when the driver cannot say, so that such a recording is
/// never taken again.
pub(crate) fn host_buffer(ptr: *const c_void) -> u64 {
    static UNKNOWN: AtomicU64 = AtomicU64::new(u64::MAX);
    if ptr.is_null() {
        return 0;
    }
    match raw::buffer_id(ptr as usize as sys::CUdeviceptr) {
        0 => UNKNOWN.fetch_sub(1, Ordering::Relaxed),
        id => id,
    }
}

impl<T: 'static> CaptureOperand for HostRead<'_, T> {
    type Elem = T;
    type View<'s> = CaptureHostSlice<'s, T>;
    type Alias = HostAlias<T>;
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool) {
        (self.ptr as usize as u64, self.len, self.ctx, self.tag, false)
    }
    fn own(&self) -> Option<&CudaStream> {
        None
    }
    fn device(&self) -> bool {
        false
    }
    fn buffer(&self) -> u64 {
        host_buffer(self.ptr)
    }
    unsafe fn alias(&self, _: &Arc<CudaStream>, _: &[Arc<CudaStream>], _: bool) -> HostAlias<T> {
        HostAlias::of(self.ptr.cast_mut(), self.len, self.ctx)
    }
    fn listed(&self, _: &mut HostAlias<T>, _: &CudaStream) -> Option<Listed> {
        None
    }
    fn view<'s>(alias: &'s mut HostAlias<T>, cap: &'s Capture) -> CaptureHostSlice<'s, T> {
        alias.view(cap)
    }
}

impl<T: 'static> CaptureOperand for HostWrite<'_, T> {
    type Elem = T;
    type View<'s> = CaptureHostSliceMut<'s, T>;
    type Alias = HostAlias<T>;
    fn parts(&self) -> (sys::CUdeviceptr, usize, CUcontext, u64, bool) {
        (self.ptr as usize as u64, self.len, self.ctx, self.tag, true)
    }
    fn own(&self) -> Option<&CudaStream> {
        None
    }
    fn device(&self) -> bool {
        false
    }
    fn buffer(&self) -> u64 {
        host_buffer(self.ptr)
    }
    unsafe fn alias(&self, _: &Arc<CudaStream>, _: &[Arc<CudaStream>], _: bool) -> HostAlias<T> {
        HostAlias::of(self.ptr, self.len, self.ctx)
    }
    fn listed(&self, _: &mut HostAlias<T>, _: &CudaStream) -> Option<Listed> {
        None
    }
    fn view<'s>(alias: &'s mut HostAlias<T>, cap: &'s Capture) -> CaptureHostSliceMut<'s, T> {
        alias.view_mut(cap)
    }
}

/// One buffer given to a host function of a capture ([`Capture::host`]): `&view` of a
/// [`CaptureHostSlice`] or [`CaptureHostSliceMut`] (the function gets `&[T]`), or `&mut view` of a
/// [`CaptureHostSliceMut`] (it gets `&mut [T]`). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be given to a capture's host function",
    label = "not `&view` or `&mut view` of a capture's pinned host view",
    note = "a host function of a capture gets only the closure's views of listed pinned host operands: `&h` (read, a `CaptureHostSlice` or `CaptureHostSliceMut`) or `&mut h` (written, a `CaptureHostSliceMut`); device memory reaches the host through `s.copy_dtoh` first"
)]
pub trait HostFnArg: sealed::Sealed {
    /// What the host function gets for it while it runs: `&[T]` or `&mut [T]`.
    type View<'v>;
    /// `(address, length in elements, capture)`.
    #[doc(hidden)]
    fn parts(&self) -> (*mut c_void, usize, *const Capture);
    /// The view of `len` elements at `ptr`.
    ///
    /// # Safety
    /// `ptr` and `len` are this argument's, and the memory is used by nothing else while `'v`
    /// lasts.
    #[doc(hidden)]
    unsafe fn view<'v>(ptr: *mut c_void, len: usize) -> Self::View<'v>;
}

impl<T> sealed::Sealed for &CaptureHostSlice<'_, T> {}
impl<T: Sync + 'static> HostFnArg for &CaptureHostSlice<'_, T> {
    type View<'v> = &'v [T];
    fn parts(&self) -> (*mut c_void, usize, *const Capture) {
        (self.ptr.cast_mut().cast(), self.len, self.cap)
    }
    unsafe fn view<'v>(ptr: *mut c_void, len: usize) -> &'v [T] {
        // SAFETY: the caller's contract; pinned memory of `len` elements of `T`.
        unsafe { slice_of(ptr, len) }
    }
}

impl<T> sealed::Sealed for &CaptureHostSliceMut<'_, T> {}
impl<T: Sync + 'static> HostFnArg for &CaptureHostSliceMut<'_, T> {
    type View<'v> = &'v [T];
    fn parts(&self) -> (*mut c_void, usize, *const Capture) {
        (self.ptr.cast(), self.len, self.cap)
    }
    unsafe fn view<'v>(ptr: *mut c_void, len: usize) -> &'v [T] {
        // SAFETY: the caller's contract.
        unsafe { slice_of(ptr, len) }
    }
}

impl<T> sealed::Sealed for &mut CaptureHostSliceMut<'_, T> {}
impl<T: Send + 'static> HostFnArg for &mut CaptureHostSliceMut<'_, T> {
    type View<'v> = &'v mut [T];
    fn parts(&self) -> (*mut c_void, usize, *const Capture) {
        (self.ptr.cast(), self.len, self.cap)
    }
    unsafe fn view<'v>(ptr: *mut c_void, len: usize) -> &'v mut [T] {
        if len == 0 || ptr.is_null() {
            return &mut [];
        }
        // SAFETY: the caller's contract; pinned memory of `len` elements of `T`.
        unsafe { core::slice::from_raw_parts_mut(ptr.cast(), len) }
    }
}

/// `ptr` moved by `n` elements; a null pointer (a view without memory: the views of it are
/// empty, see [`slice_of`]) stays null, so that no part of it gets an address that is not null
/// (review 33: a host operand of another context, since refused, was acquired as null and
/// `slice_mut(4..)` made a 4-element `&[u32]` at address 0x10).
fn offset<T>(ptr: *const T, n: usize) -> *const T {
    if ptr.is_null() { ptr } else { ptr.wrapping_add(n) }
}

/// `&[T]` of `len` elements at `ptr` (an empty slice for none, or for a null pointer, which an
/// empty pinned buffer has).
///
/// # Safety
/// As [`HostFnArg::view`].
unsafe fn slice_of<'v, T>(ptr: *mut c_void, len: usize) -> &'v [T] {
    if len == 0 || ptr.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(ptr.cast_const().cast(), len) }
}

/// The buffers given to a host function of a capture ([`Capture::host`]): a tuple of 0 to 6
/// [`HostFnArg`]s. The function gets their views as one tuple, in order. Sealed.
pub trait HostFnArgs: sealed::Sealed {
    /// The host function's views, in order.
    type Views<'v>;
    /// The buffers' addresses and lengths.
    #[doc(hidden)]
    type Raw: Copy + 'static;
    /// Whether every buffer is a view of `cap`'s listed operands.
    #[doc(hidden)]
    fn of(&self, cap: &Capture) -> bool;
    #[doc(hidden)]
    fn raw(&self) -> Self::Raw;
    /// # Safety
    /// As [`HostFnArg::view`], for each buffer.
    #[doc(hidden)]
    unsafe fn views<'v>(raw: Self::Raw) -> Self::Views<'v>;
}

macro_rules! host_fn_args {
    ($($o:ident $i:tt),*) => {
        impl<$($o: HostFnArg),*> sealed::Sealed for ($($o,)*) {}
        impl<$($o: HostFnArg),*> HostFnArgs for ($($o,)*) {
            type Views<'v> = ($($o::View<'v>,)*);
            type Raw = ($(host_fn_args!(@raw $o),)*);
            #[allow(unused_variables)]
            fn of(&self, cap: &Capture) -> bool {
                true $(&& core::ptr::eq(self.$i.parts().2, cap))*
            }
            #[allow(clippy::unused_unit)]
            fn raw(&self) -> Self::Raw {
                ($({ let (p, n, _) = self.$i.parts(); (p, n) },)*)
            }
            #[allow(unused_variables, clippy::unused_unit)]
            unsafe fn views<'v>(raw: Self::Raw) -> Self::Views<'v> {
                // SAFETY: the caller's contract.
                ($(unsafe { $o::view(raw.$i.0, raw.$i.1) },)*)
            }
        }
    };
    (@raw $o:ident) => { (*mut c_void, usize) };
}
host_fn_args!();
host_fn_args!(A 0);
host_fn_args!(A 0, B 1);
host_fn_args!(A 0, B 1, C 2);
host_fn_args!(A 0, B 1, C 2, D 3);
host_fn_args!(A 0, B 1, C 2, D 3, E 4);
host_fn_args!(A 0, B 1, C 2, D 3, E 4, F 5);

/// The addresses a host function's views are made of.
struct SendRaw<R>(R);
// SAFETY: addresses of pinned host memory of listed operands, only turned into the host
// function's views while a launch of the recording runs it: the launch's call (or the
// standalone exec) holds the operands' borrows, and their guards order every other use of the
// memory (host access, the free) after that launch, which waits for the function to return.
unsafe impl<R> Send for SendRaw<R> {}

/// One host function of a capture: the closure (bound to its buffers), the flag its wait node
/// polls, and where its panics go.
struct Entry {
    run: Mutex<Box<dyn FnMut() + Send>>,
    /// Runs of the closure handed to a worker and not ended: the flag is set when it drops to 0.
    pending: Mutex<usize>,
    flag: &'static Flag,
    site: NodeSite,
    reports: Arc<Reports>,
}

impl Entry {
    fn pending(&self) -> std::sync::MutexGuard<'_, usize> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One run ended: the wait node may pass once no other run is pending.
    fn finish(&self) {
        let mut p = self.pending();
        *p = p.saturating_sub(1);
        if *p == 0 {
            self.flag.set();
        }
    }
}

/// Every host function of a kept recording, by the number its host function node carries as
/// `userData`.
static ENTRIES: Mutex<Option<HashMap<u64, Arc<Entry>>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn with_entries<R>(f: impl FnOnce(&mut HashMap<u64, Arc<Entry>>) -> R) -> R {
    let mut e = ENTRIES.lock().unwrap_or_else(|e| e.into_inner());
    f(e.get_or_insert_with(HashMap::new))
}

/// How many host functions of captures are alive: held by a recording, a graph or an exec made
/// from one (or a launch of one still pending). For tests.
pub(crate) fn live() -> usize {
    with_entries(|e| e.len())
}

/// A launch reached `entry`'s node: resets its flag and hands the closure to a worker, which
/// runs it (catching a panic, reported to the entry's cache), then sets the flag unless another
/// run is pending. No CUDA call: called on the driver's callback thread.
fn start(entry: Arc<Entry>, gate: Option<Arc<handoff::Gate>>) {
    {
        let mut p = entry.pending();
        *p += 1;
        entry.flag.reset();
    }
    let job = move || {
        /// Ends the run whatever happens, so that the device's wait always ends.
        struct Finish<'e>(&'e Entry);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                self.0.finish();
            }
        }
        {
            let _finish = Finish(&entry);
            let ran = catch_unwind(AssertUnwindSafe(|| {
                let mut run = entry.run.lock().unwrap_or_else(|e| e.into_inner());
                (*run)();
            }));
            if let Err(panic) = ran {
                host_kind::report(&entry.reports, entry.site, "", panic);
            }
        }
        // An eager run: the call that gave it up after a refused wait may return now.
        if let Some(gate) = gate {
            gate.done();
        }
        // This `Arc` may be the entry's last (its node's graphs all gone): then the closure is
        // dropped by the worker, after the flag was set.
        let (site, reports) = (entry.site, entry.reports.clone());
        Some(Deferred::new(Box::new(entry), site, reports))
    };
    handoff::submit(Task { job: Some(Box::new(job)), flag: None });
}

/// The callback of every host function node of a capture: starts its entry's closure.
unsafe extern "C" fn run_captured(user: *mut c_void) {
    let id = user as u64;
    // The entry lives while a graph or exec holding the node exists (its user object); none
    // here would be a bug of this module, and nothing may unwind into the driver.
    if let Some(entry) = with_entries(|e| e.get(&id).cloned()) {
        start(entry, None);
    }
}

/// The destructor of an entry's user object (on a driver thread, no CUDA call): removes the
/// entry and hands it to a worker to drop, with what its closure owns.
unsafe extern "C" fn drop_entry(user: *mut c_void) {
    let id = user as u64;
    if let Some(entry) = with_entries(|e| e.remove(&id)) {
        drop_on_worker(entry);
    }
}

/// Hands `entry` to a worker to drop, with what its closure owns, without running it (no CUDA
/// call here: called on the driver's callback thread).
fn drop_on_worker(entry: Arc<Entry>) {
    let (site, reports) = (entry.site, entry.reports.clone());
    let job = move || Some(Deferred::new(Box::new(entry), site, reports));
    handoff::submit(Task { job: Some(Box::new(job)), flag: None });
}

/// The callback of an eager host function (`cuLaunchHostFunc`): owns its entry, and starts it
/// unless the call gave it up (its wait refused, review 33c): then a worker drops it unrun.
unsafe extern "C" fn run_eager(user: *mut c_void) {
    // SAFETY: `user` is the `Box<(Arc<Entry>, Arc<Gate>)>` that `host_eager` leaked for this
    // one callback.
    let (entry, gate) = *unsafe { Box::from_raw(user.cast::<(Arc<Entry>, Arc<handoff::Gate>)>()) };
    if gate.start() {
        start(entry, Some(gate));
    } else {
        drop_on_worker(entry);
    }
}

impl Capture {
    /// Copies the pinned host view `src` into the device view `dst` on the capture
    /// (`cuMemcpyHtoDAsync_v2` on the capture's stream: a memcpy node of the recording, host to
    /// device; eagerly, the copy on the call's stream). `src` is a view of a listed pinned host
    /// operand ([`CaptureHostSlice`] or [`CaptureHostSliceMut`], or a part of one), `dst` a view
    /// of a `&mut` device operand (or a part of one), of one element type (compile time) and
    /// one length in elements (run time). Every launch of the recording copies what `src`'s
    /// memory holds when the node runs: after the capture's earlier work (a host function that
    /// wrote it), and, through the graph call's borrows, after what the host wrote before the
    /// call. `dst` is ordered as [`copy`](Self::copy) orders its destination. An empty copy
    /// records (and runs) nothing.
    ///
    /// # Errors
    /// All name this call's location; nothing was enqueued:
    /// [`Error::NodeRefused`] ([`Refusal::NotAnOperand`]) when `src` is a view of another
    /// capture or `dst` not a view of a listed operand, ([`Refusal::ReadOnly`]) when `dst`'s
    /// operand is listed `&`; [`Error::CopyLength`] when the lengths differ;
    /// [`Error::WrongContext`] when either buffer is of another context than the stream;
    /// [`Error::Node`] when the driver refuses the copy.
    #[track_caller]
    pub fn copy_htod<'s, T: 'static, H: CaptureHostView<Elem = T>>(
        &self,
        src: &H,
        dst: &mut CaptureSliceMut<'s, T>,
    ) -> Result<()> {
        let at = Location::caller();
        let site = || site_at("copy_htod", "Capture::copy_htod", at);
        let (host, n, host_ctx, cap) = src.parts();
        if !core::ptr::eq(cap, self) {
            let why = Refusal::NotAnOperand { arg: None };
            return Err(Error::NodeRefused { site: site(), why });
        }
        let (_, m, dev_ctx) = self.locate(&*dst, true, at)?;
        let bytes = self.check_host_copy(n, m, host_ctx, dev_ctx, size_of::<T>(), &site)?;
        if bytes == 0 {
            return Ok(());
        }
        let call = "cuMemcpyHtoDAsync_v2 (Capture::copy_htod)";
        let err = |error| Error::Node { site: site(), source: CudaError { call, error } };
        make_current(self.stream.context()).map_err(err)?;
        // cudarc's events of `dst`'s alias: the stream waits for its last reader and writer in
        // the capture, and its write event is recorded after the copy (the guard's drop).
        let (d, guard) = DevicePtrMut::device_ptr_mut(dst, self.current());
        // SAFETY: `host` is `n` elements of `T` of pinned host memory of a listed operand and
        // `d` as many of a listed `&mut` device operand (checked above), both of the stream's
        // context, which is current; the graph call (or the standalone graph) borrows both for
        // as long as this copy (or a launch of its recording) may run.
        let r = unsafe { raw::memcpy_htod_async(d, host, bytes, self.current().cu_stream()) };
        drop(guard);
        r.map_err(err)
    }

    /// Copies the device view `src` into the pinned host view `dst` on the capture
    /// (`cuMemcpyDtoHAsync_v2` on the capture's stream: a memcpy node of the recording, device
    /// to host; eagerly, the copy on the call's stream). `src` is a view of a listed device
    /// operand ([`CaptureSlice`](crate::CaptureSlice) or
    /// [`CaptureSliceMut`], or a part of one), `dst` a view of a `&mut` pinned host operand (a
    /// [`CaptureHostSliceMut`], or a part of one), of one element type and length (elements).
    /// The host reads the result after the call (the graph call's borrow of `dst`'s buffer
    /// orders the host's access after the launch), or in a later host function of the capture
    /// ([`host`](Self::host)), which the capture's stream orders after the copy. `src` is ordered
    /// as [`copy`](Self::copy) orders its source. An empty copy records (and runs) nothing.
    ///
    /// # Errors
    /// As [`copy_htod`](Self::copy_htod), the other way round (a `&` pinned host operand has no
    /// [`CaptureHostSliceMut`]: that is a compile error).
    #[track_caller]
    pub fn copy_dtoh<'s, T: 'static, V: CaptureView<'s, Elem = T> + DevicePtr<T>>(
        &self,
        src: &V,
        dst: &mut CaptureHostSliceMut<'_, T>,
    ) -> Result<()> {
        let at = Location::caller();
        let site = || site_at("copy_dtoh", "Capture::copy_dtoh", at);
        if !core::ptr::eq(dst.cap, self) {
            let why = Refusal::NotAnOperand { arg: None };
            return Err(Error::NodeRefused { site: site(), why });
        }
        let (_, n, dev_ctx) = self.locate(src, false, at)?;
        let bytes = self.check_host_copy(n, dst.len, dst.ctx, dev_ctx, size_of::<T>(), &site)?;
        if bytes == 0 {
            return Ok(());
        }
        let call = "cuMemcpyDtoHAsync_v2 (Capture::copy_dtoh)";
        let err = |error| Error::Node { site: site(), source: CudaError { call, error } };
        make_current(self.stream.context()).map_err(err)?;
        // cudarc's events of `src`'s alias: the stream waits for its last writer in the capture,
        // and its read event is recorded after the copy.
        let (d, guard) = src.device_ptr(self.current());
        // SAFETY: as in `copy_htod`, the other way round: `dst` is of a listed `&mut` pinned host
        // operand, `d` of a listed device operand.
        let r =
            unsafe { raw::memcpy_dtoh_async(dst.ptr.cast(), d, bytes, self.current().cu_stream()) };
        drop(guard);
        r.map_err(err)
    }

    /// The checks of a copy between host and device shared by both directions: equal lengths
    /// (`n` source, `m` destination elements) and both buffers of the stream's context. Returns
    /// the bytes to copy.
    fn check_host_copy(
        &self,
        n: usize,
        m: usize,
        host_ctx: CUcontext,
        dev_ctx: CUcontext,
        elem: usize,
        site: &dyn Fn() -> NodeSite,
    ) -> Result<usize> {
        if n != m {
            return Err(Error::CopyLength { site: site(), src: n, dst: m });
        }
        let ctx = self.stream.context().cu_ctx();
        if host_ctx != ctx || dev_ctx != ctx {
            return Err(Error::WrongContext { site: site() });
        }
        Ok(n.saturating_mul(elem))
    }

    /// Records a host function: `f` runs on the host, with `args`' buffers, at every launch of
    /// the recording when the launch reaches its node, after the capture's earlier work on the
    /// capture's stream (a [`copy_dtoh`](Self::copy_dtoh) into a buffer it reads) and before its
    /// later work (a [`copy_htod`](Self::copy_htod) of a buffer it writes), as the `host`
    /// statement of `graph!` runs its closure (docs/host-nodes.md). Eagerly
    /// ([`is_capturing`](Self::is_capturing) is `false`), it runs once, in stream order on the
    /// call's stream (`cuLaunchHostFunc`, then `cuStreamWaitValue32_v2`).
    ///
    /// `args` is a tuple of the closure's host views (`(&a, &mut b)`, one: `(&r,)`, none: `()`):
    /// `&view` of a [`CaptureHostSlice`] or [`CaptureHostSliceMut`], or `&mut view` of a
    /// [`CaptureHostSliceMut`]; `f` gets, in order, `&[T]` for each `&view` and `&mut [T]` for
    /// each `&mut view`, valid while it runs (`move |(a, b)| …`). Device memory is not given to
    /// it: copy it to a pinned host operand first.
    ///
    /// `f` is `FnMut + Send + 'static`: it is kept with the recording, and with every graph and
    /// exec made from it (a keyed `capture` statement's recording is kept across calls; a
    /// [`Graph`](crate::Graph) and its [`Exec`](crate::Exec) hold theirs), and called by each
    /// launch; it is dropped (with what it owns) once none of them can launch it any more, on a
    /// worker thread of the crate's. It runs on a worker thread of the crate's, never on the
    /// driver's callback thread; the device waits for it (a batch mem-op node polling a flag of
    /// the crate's). The rules for its body are the `host` statement's: it must not wait for the
    /// stream that runs it, nor the device (`synchronize`). A panic inside is caught and
    /// returned as [`Error::HostFunction`] by the next `graph!` call of the cache whose call
    /// recorded it (by the next [`Exec::launch`](crate::Exec::launch) for the standalone
    /// [`capture`](crate::capture())); the launch goes on after the node.
    ///
    /// The recorded node is one child-graph node (`cuGraphAddNode_v2`,
    /// `CU_GRAPH_NODE_TYPE_GRAPH`) of two nodes: the host function node (`cuLaunchHostFunc`'s
    /// kind) and the batch mem-op wait; it is added after the stream's current capture
    /// dependencies and becomes their only one, as [`kernel`](Self::kernel)'s node does.
    ///
    /// # Errors
    /// All name this call's location; nothing was added or enqueued:
    /// [`Error::NodeRefused`] ([`Refusal::NotAnOperand`]) when a buffer is a view of another
    /// capture; [`Error::Node`] when a driver call fails (`cuStreamGetCaptureInfo_v3`: the
    /// stream is not in this capture; `cuMemHostAlloc` of the flag; `cuUserObjectCreate`,
    /// `cuGraphAddNode_v2`; eagerly `cuLaunchHostFunc`). A failure after the node was added
    /// (`cuStreamUpdateCaptureDependencies_v2`) is returned too, and the capture then fails with
    /// [`Error::CaptureInvalidated`].
    #[track_caller]
    pub fn host<A, F>(&self, args: A, f: F) -> Result<()>
    where
        A: HostFnArgs,
        F: for<'v> FnMut(A::Views<'v>) + Send + 'static,
    {
        let at = Location::caller();
        let site = site_at("host", "Capture::host", at);
        if !args.of(self) {
            let why = Refusal::NotAnOperand { arg: None };
            return Err(Error::NodeRefused { site, why });
        }
        let raw = SendRaw(args.raw());
        let mut f = f;
        let run: Box<dyn FnMut() + Send> = Box::new(move || {
            let raw = &raw;
            // SAFETY: see `SendRaw`: the views live only while a launch runs the closure.
            f(unsafe { A::views(raw.0) })
        });
        let reports = host_kind::call_reports().unwrap_or_default();
        let ctx = self.stream.context();
        let err = |call, error| Error::Node { site, source: CudaError { call, error } };
        make_current(ctx).map_err(|e| err("cuCtxSetCurrent", e))?;
        // SAFETY: the context is current.
        let flag = unsafe { flags::take(ctx.cu_ctx()) }
            .map_err(|e| err("cuMemHostAlloc (the host function's flag)", e))?;
        let entry = Entry { run: Mutex::new(run), pending: Mutex::new(0), flag, site, reports };
        if self.capturing {
            self.host_node(entry).map_err(|source| Error::Node { site, source })
        } else {
            self.host_eager(entry).map_err(|source| Error::Node { site, source })
        }
    }

    /// Adds `entry`'s child-graph node (host function, wait for its flag) to the graph being
    /// captured, after the stream's capture dependencies, and makes it their only one.
    fn host_node(&self, entry: Entry) -> core::result::Result<(), CudaError> {
        let flag = entry.flag;
        let s = self.current().cu_stream();
        // SAFETY: the stream is alive and its context current (`host`).
        let info = match unsafe { raw::stream_capture_info(s) }.call("cuStreamGetCaptureInfo_v3") {
            Ok(info) => info,
            Err(e) => {
                flags::give(flag);
                return Err(e);
            }
        };
        let active = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if info.status != active || Some(info.id) != self.sequence {
            flags::give(flag);
            let invalidated = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            let error = if info.status == invalidated {
                CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
            } else {
                CUresult::CUDA_ERROR_ILLEGAL_STATE
            };
            let call = "cuStreamGetCaptureInfo_v3 (the stream is not in this capture)";
            return Err(CudaError { call, error: DriverError(error) });
        }
        // SAFETY: the context is current.
        let template = match unsafe { raw::graph_create() }.call("cuGraphCreate (host function)") {
            Ok(g) => g,
            Err(e) => {
                flags::give(flag);
                return Err(e);
            }
        };
        let ctx = self.stream.context().cu_ctx();
        // SAFETY: the template is this function's, alive until destroyed below; the graph
        // being captured is this capture's (same sequence, active), `deps` its nodes.
        let added = unsafe { fill_template(template, ctx, entry) }.and_then(|()| {
            let mut p = node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH);
            p.__bindgen_anon_1.graph.graph = template;
            unsafe { raw::add_node(info.graph, &info.deps, &[], &mut p) }
                .call("cuGraphAddNode_v2 (child graph of a host function)")
        });
        // The driver copied the template into the node, with references to its user objects:
        // the template's own are released with it.
        // SAFETY: the template is this function's and used by nothing after this.
        let _ = unsafe { raw::graph_destroy(template) };
        let node = added?;
        // SAFETY: the stream is capturing (checked above) and `node` is of its graph.
        let after = unsafe { raw::stream_set_capture_dependencies(s, &[node]) }
            .call("cuStreamUpdateCaptureDependencies_v2");
        if let Err(source) = after {
            let _ = self.broken.set(source);
            return Err(source);
        }
        Ok(())
    }

    /// Runs `entry`'s closure once, in stream order on the call's stream: `cuLaunchHostFunc`
    /// (its callback hands the closure to a worker), `cuStreamWaitValue32_v2` on its flag, and a
    /// second host function returning the flag to its pool.
    fn host_eager(&self, entry: Entry) -> core::result::Result<(), CudaError> {
        let flag = entry.flag;
        let s = self.current().cu_stream();
        let gate = Arc::new(handoff::Gate::default());
        let user = Box::into_raw(Box::new((Arc::new(entry), gate.clone())));
        // SAFETY: the stream is alive and its context current (`host`); `run_eager` takes
        // ownership of `user` when the driver calls it (exactly once, after the stream's earlier
        // work) and makes no CUDA call.
        if let Err(e) = unsafe { raw::launch_host_func(s, run_eager, user.cast()) } {
            // SAFETY: the driver refused the callback: it never runs, the entry is still ours.
            drop(unsafe { Box::from_raw(user) });
            flags::give(flag);
            return Err(CudaError { call: "cuLaunchHostFunc (Capture::host)", error: e });
        }
        // SAFETY: the flag lives for the process; it is returned by the host function after the
        // wait, once the device no longer reads it. (After a refusal here, a broken context, the
        // flag is never returned: a few bytes.)
        // The callback is enqueued: before the call returns and its borrows end, the closure
        // must never run, or have ended (review 33c).
        if let Err(e) = unsafe { raw::stream_wait_value32(s, flag.device, 1) } {
            gate.give_up();
            return Err(CudaError { call: "cuStreamWaitValue32_v2", error: e });
        }
        unsafe { raw::launch_host_func(s, flags::give_back, flags::as_user(flag)) }
            .call("cuLaunchHostFunc (returning the host function's flag)")
    }
}

/// Fills `template` with `entry`'s host function node and the wait for its flag, and gives the
/// template the user objects that return the flag and drop the entry (see the module docs). On
/// error the flag and the entry are given back (by their destructors, or here).
///
/// # Safety
/// `template` is a live graph of this function's caller, `ctx` current and the flag's.
unsafe fn fill_template(
    template: CUgraph,
    ctx: CUcontext,
    entry: Entry,
) -> core::result::Result<(), CudaError> {
    let flag = entry.flag;
    // SAFETY (every call): the caller's contract; `give_back` and `drop_entry` make no CUDA call
    // and run once, on any thread.
    unsafe { raw::graph_own_user_object(template, flags::give_back, flags::as_user(flag)) }
        .call("cuUserObjectCreate / cuGraphRetainUserObject (the host function's flag)")?;
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    with_entries(|e| e.insert(id, Arc::new(entry)));
    unsafe { raw::graph_own_user_object(template, drop_entry, id as *mut c_void) }
        .call("cuUserObjectCreate / cuGraphRetainUserObject (the host function's closure)")?;
    let mut p = node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST);
    p.__bindgen_anon_1.host.fn_ = Some(run_captured);
    p.__bindgen_anon_1.host.userData = id as *mut c_void;
    let host = unsafe { raw::add_node(template, &[], &[], &mut p) }
        .call("cuGraphAddNode_v2 (host function)")?;
    // SAFETY: all-zero is a valid value of this union of plain integers.
    let mut op: CUstreamBatchMemOpParams = unsafe { core::mem::zeroed() };
    op.waitValue.operation = CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = flag.device;
    op.waitValue.__bindgen_anon_1.value = 1;
    op.waitValue.flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32;
    let mut p = node_params(CUgraphNodeType::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    p.__bindgen_anon_1.memOp =
        CUDA_BATCH_MEM_OP_NODE_PARAMS_v2 { ctx, count: 1, paramArray: &mut op, flags: 0 };
    unsafe { raw::add_node(template, &[host], &[], &mut p) }
        .call("cuGraphAddNode_v2 (batch mem op: wait for the host function)")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The hand-off of a capture's host function without a GPU: a flag over a plain word of
    //! host memory stands for the one the device's wait polls.

    use std::sync::atomic::AtomicU32;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    /// A flag over a leaked word (its device address unused: no device here), starting at 7.
    fn flag() -> &'static Flag {
        let word: &'static mut u32 = Box::leak(Box::new(7u32));
        Box::leak(Box::new(Flag { host: word, device: 0, ctx: 0 }))
    }

    fn value(f: &Flag) -> u32 {
        // SAFETY: the word is leaked (lives for the process) and only accessed atomically.
        unsafe { AtomicU32::from_ptr(f.host) }.load(Ordering::SeqCst)
    }

    #[track_caller]
    fn entry(run: impl FnMut() + Send + 'static, flag: &'static Flag) -> Arc<Entry> {
        let site = site_at("host", "Capture::host", Location::caller());
        let run: Box<dyn FnMut() + Send> = Box::new(run);
        let reports = Arc::<Reports>::default();
        Arc::new(Entry { run: Mutex::new(run), pending: Mutex::new(0), flag, site, reports })
    }

    #[track_caller]
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Review 33: a view without memory (null) stays null when split, so no part of it gets an
    /// address a host function would take as memory.
    #[test]
    fn a_null_view_stays_null_when_split() {
        let p: *const u32 = core::ptr::null();
        assert!(offset(p, 4).is_null());
        let q = 0x1000 as *const u32;
        assert_eq!(offset(q, 4) as usize, 0x1010);
    }

    /// Review 33: a pinned host operand of another context than the call's (acquired as null)
    /// is one the capture refuses (`None`, `Error::WrongContext`); one of the call's context is
    /// not foreign; a device operand of another context is (its own stream, here none).
    #[test]
    fn a_host_operand_of_another_context_is_refused_by_captures() {
        use crate::kind::CaptureOperands;
        use crate::operand::{DevRead, HostRead, HostWrite};
        let (call, other) = (0x100 as CUcontext, 0x200 as CUcontext);
        fn foreign(ops: &impl CaptureOperands, ctx: CUcontext) -> Vec<bool> {
            let mut out = Vec::new();
            ops.foreign(ctx, &mut out);
            out.iter().map(Option::is_some).collect()
        }
        let h = HostRead::<u32>::new(core::ptr::null(), 8, other);
        let w = HostWrite::<u32>::new(0x5000 as *mut c_void, 8, call);
        let d = DevRead::<u32>::new(0x7000, 8, other);
        assert_eq!(foreign(&(h,), call), [false], "refused: None");
        assert_eq!(foreign(&(w,), call), Vec::<bool>::new(), "the call's context");
        assert_eq!(foreign(&(w, h, d), call), [false, false]);
    }

    /// The callback resets the flag and returns; the closure runs on another thread, and the
    /// flag is set only after it returned.
    #[test]
    fn a_run_resets_the_flag_and_sets_it_after_the_closure_returned_on_a_worker() {
        let f = flag();
        let (go, wait) = mpsc::channel::<()>();
        let (ran, ran_on) = mpsc::channel();
        let wait = Mutex::new(wait);
        let e = entry(
            move || {
                wait.lock().unwrap().recv().unwrap();
                ran.send(std::thread::current().id()).unwrap();
            },
            f,
        );
        start(e, None);
        assert_eq!(value(f), 0, "reset by the callback before it returns");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(value(f), 0, "not set while the closure runs");
        go.send(()).unwrap();
        let on = ran_on.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_ne!(on, std::thread::current().id(), "the closure ran on a worker");
        eventually("the flag set", || value(f) == 1);
    }

    /// Two launches of one recording at once (two execs): the flag is set only once neither run
    /// is pending, and the runs do not overlap.
    #[test]
    fn with_two_runs_pending_the_flag_waits_for_both() {
        let f = flag();
        let (go, wait) = mpsc::channel::<()>();
        let wait = Mutex::new(wait);
        let done = Arc::new(AtomicU32::new(0));
        let inside = Arc::new(AtomicU32::new(0));
        let (d, i) = (done.clone(), inside.clone());
        let e = entry(
            move || {
                assert_eq!(i.fetch_add(1, Ordering::SeqCst), 0, "runs overlap");
                wait.lock().unwrap().recv().unwrap();
                i.fetch_sub(1, Ordering::SeqCst);
                d.fetch_add(1, Ordering::SeqCst);
            },
            f,
        );
        start(e.clone(), None);
        start(e.clone(), None);
        go.send(()).unwrap();
        eventually("one run done", || done.load(Ordering::SeqCst) == 1);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(value(f), 0, "one run still pending: the device must still wait");
        go.send(()).unwrap();
        eventually("both runs done and the flag set", || {
            done.load(Ordering::SeqCst) == 2 && value(f) == 1
        });
        assert_eq!(*e.pending(), 0);
    }

    /// A panic is caught on the worker, reported as the cache's next `Error::HostFunction`
    /// naming the `Capture::host` call, and the flag is set all the same (the launch goes on);
    /// the next launch runs the closure again.
    #[test]
    fn a_panic_is_reported_and_the_flag_still_set() {
        let f = flag();
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let line = line!() + 1;
        let e = entry(move || assert!(r.fetch_add(1, Ordering::SeqCst) != 0, "on purpose"), f);
        start(e.clone(), None);
        eventually("the flag set after the panic", || value(f) == 1);
        match e.reports.take() {
            Some(Error::HostFunction { site, message }) => {
                assert!(message.contains("on purpose"), "{message}");
                assert_eq!((site.text, site.line), ("Capture::host", line));
            }
            other => panic!("expected a reported panic, got {other:?}"),
        }
        start(e.clone(), None);
        eventually("the second run", || runs.load(Ordering::SeqCst) == 2 && value(f) == 1);
        assert!(e.reports.take().is_none(), "the second run did not panic");
    }

    /// Counts its drop, and on which thread.
    struct Token(mpsc::Sender<std::thread::ThreadId>);
    impl Drop for Token {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().id());
        }
    }

    /// The user object's destructor (a driver thread, where no CUDA call is allowed) removes
    /// the entry and hands the closure to a worker, which drops it; the callback of a removed
    /// entry does nothing.
    #[test]
    fn the_destructor_removes_the_entry_and_a_worker_drops_the_closure() {
        let f = flag();
        let (tx, dropped_on) = mpsc::channel();
        let token = Token(tx);
        let e = entry(
            move || {
                let _owned = &token;
            },
            f,
        );
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        with_entries(|m| m.insert(id, e));
        // SAFETY: no CUDA here; `id` is this test's entry.
        unsafe { run_captured(id as *mut c_void) };
        eventually("the run through the table", || value(f) == 1);
        // SAFETY: as above; the destructor runs once.
        unsafe { drop_entry(id as *mut c_void) };
        assert!(!with_entries(|m| m.contains_key(&id)), "removed from the table");
        let on = dropped_on.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_ne!(on, std::thread::current().id(), "dropped on a worker");
        // A callback for a number no longer in the table changes nothing.
        f.set();
        unsafe { run_captured(id as *mut c_void) };
        assert_eq!(value(f), 1);
    }
}
