//! Operands: the buffer places a statement borrows, the handles (device or pinned host
//! pointers with their length, context and place tag) that node parameters are made of, the
//! guards that record each buffer's use after a launch, what a kernel argument can be, and the
//! tags that say which builder or `graph!` call place a handle names.
//! Everything here is plain data; the driver is only called by [`crate::cache`].

use core::cell::Cell;
use core::ffi::c_void;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytemuck::NoUninit;
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUstream};
use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    DeviceSlice, HostSlice, PinnedHostSlice, SyncOnDrop,
};

macro_rules! pointer_type {
    ($(#[$m:meta])* $name:ident, $ptr:ty) => {
        $(#[$m])*
        ///
        /// Made by `graph!` or a [`GraphBuilder`](crate::GraphBuilder) from a borrowed place; the
        /// lifetime `'a` is that borrow's, so a handle cannot outlive its buffer or coexist with
        /// another borrow that conflicts with it.
        pub struct $name<'a, T> {
            pub(crate) ptr: $ptr,
            pub(crate) len: usize,
            pub(crate) ctx: CUcontext,
            /// Which [`GraphBuilder`](crate::GraphBuilder) place this is (0 inside `graph!`).
            pub(crate) tag: u64,
            /// The stream the buffer was allocated on (device memory borrowed by `graph!`):
            /// a capture statement makes the alias of a buffer of another context than the
            /// call's stream on a stream of the buffer's own context object.
            #[allow(dead_code)] // read for device memory only
            pub(crate) own: Option<&'a CudaStream>,
            /// The id of its pinned host allocation when the buffer knows it
            /// ([`PinnedBuffer`](crate::PinnedBuffer)'s own, [`pinned_id`]), 0 when the driver
            /// is asked ([`raw::buffer_id`](crate::raw::buffer_id)); `()` for device memory.
            pub(crate) id: <$ptr as PointerKind>::Id,
            _borrow: PhantomData<(&'a (), fn() -> T)>,
        }
        impl<T> Clone for $name<'_, T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $name<'_, T> {}
        impl<T> sealed::Sealed for $name<'_, T> {}
        impl<T> ElementHandle for $name<'_, T> {
            #[inline(always)]
            fn fields(&self) -> (u64, u64, u64, u64) {
                (self.tag, self.ptr as usize as u64, self.len as u64, self.ctx as u64)
            }
        }
        impl<T> Handle for $name<'_, T> {
            fn tag(&self) -> u64 {
                self.tag
            }
            fn with_tag(mut self, tag: u64, _: sealed::Token) -> Self {
                self.tag = tag;
                self
            }
            #[inline(always)]
            fn context_word(&self) -> u64 {
                self.ctx as u64
            }
            const HOST: bool = <$ptr as PointerKind>::HOST;
            #[inline(always)]
            fn host_buffer_word(&self) -> u64 {
                PointerKind::host_buffer(self.ptr, self.id)
            }
            #[inline(always)]
            fn host_buffer_known(&self) -> u64 {
                <$ptr as PointerKind>::known(self.id)
            }
        }
        impl<'a, T> $name<'a, T> {
            pub(crate) fn new(ptr: $ptr, len: usize, ctx: CUcontext) -> Self {
                $name { ptr, len, ctx, tag: 0, own: None, id: Default::default(), _borrow: PhantomData }
            }
            /// The same handle, with its allocation's id known ([`pinned_id`]).
            #[allow(dead_code)] // used for pinned host memory only
            pub(crate) fn with_id(mut self, id: <$ptr as PointerKind>::Id) -> Self {
                self.id = id;
                self
            }
            /// The same handle, with the buffer's own stream.
            #[allow(dead_code)] // used for device memory only
            pub(crate) fn owned_by(mut self, own: &'a CudaStream) -> Self {
                self.own = Some(own);
                self
            }
            /// Length in elements.
            pub fn len(&self) -> usize {
                self.len
            }
            /// `true` when the buffer has no elements.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
        }
    };
}

pointer_type!(
    /// Device memory a node reads: a `&place` operand.
    DevRead, CUdeviceptr
);
pointer_type!(
    /// Device memory a node writes: a `&mut place` operand.
    DevWrite, CUdeviceptr
);
pointer_type!(
    /// Pinned host memory a copy reads.
    HostRead, *const c_void
);
pointer_type!(
    /// Pinned host memory a copy writes.
    HostWrite, *mut c_void
);

/// A call's guards in place order, as the cache takes them:
/// [`Guards`](crate::__private::Guards), whose inert array-element guards are made only when
/// [`made`](GuardList::made) is called (an unchanged call of guards that record nothing never
/// needs them), or a slice of made guards.
#[doc(hidden)]
pub trait GuardList<'a> {
    /// Places, made or not.
    fn places(&self) -> usize;
    /// Every place's guard, in place order.
    fn made(&mut self) -> &[Guard<'a>];
}

impl<'a> GuardList<'a> for &[Guard<'a>] {
    fn places(&self) -> usize {
        self.len()
    }
    fn made(&mut self) -> &[Guard<'a>] {
        self
    }
}

/// The write handle of an array element acquired in one loop
/// ([`acquire_mut_each`](crate::__private::acquire_mut_each)), from which its place's guard can
/// be made again: an element whose guard records nothing and whose buffer lives on the call's
/// stream is not given a guard on an unchanged call (56 bytes stored per element, 13 % of an
/// unchanged 1000-element call on the CPU stub driver); the guard is made from the handle only
/// if the call turns out to need it (`Guards::all`). Sealed.
#[doc(hidden)]
pub trait InertGuard<'a>: sealed::Sealed {
    /// Whether [`Self::inert_guard`] makes the guard an inert acquisition made.
    const REMADE: bool;
    /// What [`Self::inert_guard`] holds besides its kind: the buffer's own stream, and its
    /// address range `(start, bytes)` (written).
    fn inert_range(&self) -> (Option<&'a CudaStream>, u64, u64);
    /// The guard the acquisition of this handle's place made, when it was inert
    /// ([`Guard::is_inert`]): device memory only ([`Self::REMADE`]).
    #[inline(always)]
    fn inert_guard(&self) -> Guard<'a> {
        let (own, start, bytes) = self.inert_range();
        Guard::new(GuardKind::Nothing, own, (start, bytes), true)
    }
}

impl<'a, T> InertGuard<'a> for DevWrite<'a, T> {
    const REMADE: bool = true;
    /// As `acquire_mut` of a device place makes its guard: the buffer's own stream, its
    /// address range.
    #[inline(always)]
    fn inert_range(&self) -> (Option<&'a CudaStream>, u64, u64) {
        (self.own, self.ptr, bytes_of::<T>(self.len))
    }
}

impl<'a, T> InertGuard<'a> for HostWrite<'a, T> {
    // Pinned memory: its guards synchronize or record (never remade).
    const REMADE: bool = false;
    fn inert_range(&self) -> (Option<&'a CudaStream>, u64, u64) {
        unreachable!("a pinned host element's guard is never remade")
    }
}

/// A buffer handle as the words of a run of `graph!` compare it: an operand of the later
/// iterations that names no array element (`__private::word_handle`; an element's words are
/// its guard's and its array's contexts, `__private::acquire_mut_each`). Sealed.
#[doc(hidden)]
pub trait ElementHandle: sealed::Sealed + Copy {
    /// `(tag, address, length in elements, context)`: every field of the handle a node's
    /// parameters can depend on.
    fn fields(&self) -> (u64, u64, u64, u64);
}
impl<'a, T> DevWrite<'a, T> {
    /// The same buffer, read: for a [`GraphBuilder`](crate::GraphBuilder) node that reads a
    /// buffer registered with [`GraphBuilder::write`](crate::GraphBuilder::write).
    pub fn read(self) -> DevRead<'a, T> {
        DevRead {
            ptr: self.ptr,
            len: self.len,
            ctx: self.ctx,
            tag: self.tag,
            own: self.own,
            id: self.id,
            _borrow: PhantomData,
        }
    }
}

impl<'a, T> HostWrite<'a, T> {
    /// The same pinned host buffer, read (see [`DevWrite::read`]).
    pub fn read(self) -> HostRead<'a, T> {
        HostRead {
            ptr: self.ptr.cast_const(),
            len: self.len,
            ctx: self.ctx,
            tag: self.tag,
            own: self.own,
            id: self.id,
            _borrow: PhantomData,
        }
    }
}

pub(crate) mod sealed {
    pub trait Sealed {}
    /// The supertrait of [`Scalar`](super::Scalar), implemented here only: plain values and
    /// [`Condition`](crate::Condition).
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be a scalar kernel argument: `Scalar` is sealed",
        label = "not a plain value",
        note = "`Scalar` is implemented by `cudagraph` only, for plain values (`DeviceRepr` + `bytemuck::NoUninit`) and `Condition`; buffers are passed as `&buf` (read) or `&mut buf` (written) so that the graph orders and checks them"
    )]
    pub trait SealedScalar {}
    /// Proof of being inside this crate: only it can make one, so only it can retag a handle.
    pub struct Token(pub(crate) ());
}

/// Bits of a handle's tag that number its place within one builder; the bits above number the
/// builder.
pub(crate) const PLACE_BITS: u32 = 24;

/// Builder and `graph!` call numbers, unique for the life of the process (2^40 of them).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new builder or `graph!` call number.
#[inline]
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// The tag of place `index` (0-based) of builder or call `id`: the id above [`PLACE_BITS`], the
/// place's number from 1 below. Past 2^24 - 1 places the tag is 0, which no node accepts.
#[inline]
pub(crate) fn tag(id: u64, index: u32) -> u64 {
    if index + 1 >= 1 << PLACE_BITS { 0 } else { id << PLACE_BITS | u64::from(index + 1) }
}

/// The place index (0-based) a tag of call or builder `id` names, if it is one of `id`'s.
#[inline]
pub(crate) fn place_of(tag: u64, id: u64) -> Option<u32> {
    let place = (tag & ((1 << PLACE_BITS) - 1)) as u32;
    (tag >> PLACE_BITS == id && place != 0).then(|| place - 1)
}

/// One `graph!` call: a number unique in the process (shared with
/// [`GraphBuilder`](crate::GraphBuilder)s), which tags every handle the call makes, so the
/// cache can check that each node's buffers are the places this call borrowed for it.
/// Only [`begin_call`](crate::__private::begin_call) makes one.
pub struct CallId(pub(crate) u64);

/// A buffer handle: [`DevRead`], [`DevWrite`], [`HostRead`] or [`HostWrite`], made by
/// [`GraphBuilder::read`](crate::GraphBuilder::read) / [`write`](crate::GraphBuilder::write)
/// or inside `graph!`. Sealed.
pub trait Handle: sealed::Sealed + Copy {
    /// The [`GraphBuilder`](crate::GraphBuilder) place it names, 0 when made by `graph!`.
    #[doc(hidden)]
    fn tag(&self) -> u64;
    /// The handle naming builder place `tag` (only this crate can make the token).
    #[doc(hidden)]
    fn with_tag(self, tag: u64, _: sealed::Token) -> Self;
    /// The context of its memory, as a word (0 for a handle of no one buffer).
    #[doc(hidden)]
    #[inline(always)]
    fn context_word(&self) -> u64 {
        0
    }
    /// Whether it is a handle of pinned host memory ([`Self::host_buffer_word`]).
    #[doc(hidden)]
    const HOST: bool = false;
    /// The id of its pinned host allocation (`raw::buffer_id`, one driver query), 0 for device
    /// memory or a null host pointer.
    #[doc(hidden)]
    #[inline(always)]
    fn host_buffer_word(&self) -> u64 {
        0
    }
    /// The id of its pinned host allocation when the handle knows it without asking the
    /// driver (a `PinnedBuffer`'s), else 0: [`Self::host_buffer_word`] without the query.
    #[doc(hidden)]
    #[inline(always)]
    fn host_buffer_known(&self) -> u64 {
        0
    }
}

/// What a handle's pointer tells of its memory (see [`Handle::HOST`]).
pub(crate) trait PointerKind: Copy {
    const HOST: bool;
    /// What a handle of this memory keeps of its allocation's id: nothing for device memory.
    type Id: Copy + Default;
    /// The id of the pinned host allocation at this address: `known` when nonzero, else one
    /// driver query; 0 for device memory or a null host pointer.
    fn host_buffer(self, known: Self::Id) -> u64;
    /// The id kept in `id`, without a driver query (0: not known).
    fn known(id: Self::Id) -> u64;
}
impl PointerKind for CUdeviceptr {
    const HOST: bool = false;
    type Id = ();
    #[inline(always)]
    fn host_buffer(self, (): ()) -> u64 {
        0
    }
    #[inline(always)]
    fn known((): ()) -> u64 {
        0
    }
}
impl PointerKind for *const c_void {
    const HOST: bool = true;
    type Id = u64;
    #[inline]
    fn host_buffer(self, known: u64) -> u64 {
        if self.is_null() {
            0
        } else if known != 0 {
            known
        } else {
            crate::raw::buffer_id(self as CUdeviceptr)
        }
    }
    #[inline(always)]
    fn known(id: u64) -> u64 {
        id
    }
}
impl PointerKind for *mut c_void {
    const HOST: bool = true;
    type Id = u64;
    #[inline]
    fn host_buffer(self, known: u64) -> u64 {
        self.cast_const().host_buffer(known)
    }
    #[inline(always)]
    fn known(id: u64) -> u64 {
        id
    }
}

/// A new id for a pinned host allocation the crate made ([`PinnedBuffer`](crate::PinnedBuffer)),
/// unique in the process. It stands where the driver's `CU_POINTER_ATTRIBUTE_BUFFER_ID` would
/// (a copy's words; see `kind::memcpy::host_side`) without a driver query per call (0.11 µs on
/// the H200): a buffer freed and another allocated at the same address get two ids. The top
/// bit is set, so it never equals an id the driver gives (a counter from 1): a cudarc
/// `PinnedHostSlice` freed and a `PinnedBuffer` allocated at its address still differ.
pub(crate) fn pinned_id() -> u64 {
    static NEXT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, core::sync::atomic::Ordering::Relaxed) | 1 << 63
}

/// A buffer that can be a graph operand: device memory (`CudaSlice`, `CudaView`, `CudaViewMut`)
/// or pinned host memory (`PinnedHostSlice`), or a reference to one. Pageable host memory
/// (`Vec<T>`, `&[T]`) is not: nothing would keep it alive and unchanged until the graph's copy
/// runs. Sealed: implemented by `cudagraph` only, since a graph relies on each implementation
/// keeping cudarc's stream-ordering events right.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a graph buffer",
    label = "not device memory or pinned host memory",
    note = "graph operands are `CudaSlice`, `CudaView`, `CudaViewMut` or pinned host memory (`cudagraph::PinnedBuffer`, or cudarc's `PinnedHostSlice` from `alloc_pinned_with_flags(n, 0)`); pageable host memory such as `Vec<T>` or `&[T]` is not allowed"
)]
pub trait Place: sealed::Sealed + Acquire {}

/// A [`Place`] a node may write.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be written by a graph node",
    label = "not writable device memory or pinned host memory",
    note = "graph operands written with `&mut` are `CudaSlice`, `CudaViewMut`, `PinnedBuffer` or `PinnedHostSlice`; pageable host memory such as `Vec<T>` or `&mut [T]` is not allowed (nothing would keep it alive until the graph ran): for a host result, make a `cudagraph::PinnedBuffer::<T>::zeros(&stream, n)?` and read it with `as_slice()?`"
)]
pub trait PlaceMut: Place + AcquireMut {}

/// How `graph!` borrows a place for one call (not public API: used by generated code only).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a graph buffer",
    label = "not device memory or pinned host memory"
)]
pub trait Acquire {
    /// The read handle.
    type Read<'a>: Handle
    where
        Self: 'a;
    /// Makes `stream` wait for earlier writers (cudarc's events) and returns the read handle and
    /// a guard that records this use on `stream` when dropped, after the graph launch. Device
    /// memory of another context than the stream's is acquired on its own stream instead (the
    /// cache's ledger orders that stream with the graph's); pinned host memory of another
    /// context is not touched (the call then fails validation).
    fn acquire<'a>(&'a self, stream: &'a CudaStream) -> (Self::Read<'a>, Guard<'a>);
}

/// [`Acquire`] for writing (not public API).
#[doc(hidden)]
pub trait AcquireMut: Acquire {
    /// The write handle.
    type Write<'a>: Handle
    where
        Self: 'a;
    /// Makes `stream` wait for earlier readers and writers and returns both handles and a guard
    /// that records this use on `stream` when dropped, after the graph launch.
    fn acquire_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (Self::Read<'a>, Self::Write<'a>, Guard<'a>);
    /// [`Self::acquire_mut`] of an element of an array acquired in one loop
    /// ([`acquire_mut_each`](crate::__private::acquire_mut_each)): the write handle, and the
    /// guard unless it is the inert one [`InertGuard::inert_guard`] makes from the handle
    /// (`None`), so that the loop need not hold the guard (its seven words were spilled to
    /// the stack per element, `.ci/host-profile`).
    #[doc(hidden)]
    #[inline(always)]
    fn acquire_mut_element<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (Self::Write<'a>, Option<Guard<'a>>) {
        let (_, w, g) = self.acquire_mut(stream);
        (w, Some(g))
    }
    /// The write handle [`Self::acquire_mut_element`] gave for this place, made again without
    /// acquiring it (nothing waited for, nothing recorded): for an array acquired in one loop
    /// whose elements' handles are made only when a statement asks for them
    /// ([`EachStore`](crate::__private::EachStore)). `None` for places whose handles are never
    /// made so (pinned host memory: [`InertGuard::REMADE`] is `false`).
    ///
    /// # Safety
    /// `acquire_mut_element` of this place gave no guard (the buffer has no events: cudarc
    /// makes a buffer's read and write events together or not at all), in the exclusive
    /// borrow of the place that `'a` is part of, and the place has not changed since.
    #[doc(hidden)]
    #[inline(always)]
    unsafe fn inert_write<'a>(&'a self) -> Option<Self::Write<'a>> {
        None
    }
}

impl<P: Place + ?Sized> sealed::Sealed for &P {}
impl<P: Place + ?Sized> Place for &P {}
impl<P: Place + ?Sized> Acquire for &P {
    type Read<'a>
        = P::Read<'a>
    where
        Self: 'a;
    fn acquire<'a>(&'a self, stream: &'a CudaStream) -> (Self::Read<'a>, Guard<'a>) {
        (**self).acquire(stream)
    }
}
impl<P: Place + ?Sized> sealed::Sealed for &mut P {}
impl<P: Place + ?Sized> Place for &mut P {}
impl<P: Place + ?Sized> Acquire for &mut P {
    type Read<'a>
        = P::Read<'a>
    where
        Self: 'a;
    fn acquire<'a>(&'a self, stream: &'a CudaStream) -> (Self::Read<'a>, Guard<'a>) {
        (**self).acquire(stream)
    }
}
impl<P: PlaceMut + ?Sized> PlaceMut for &mut P {}
impl<P: PlaceMut + ?Sized> AcquireMut for &mut P {
    type Write<'a>
        = P::Write<'a>
    where
        Self: 'a;
    fn acquire_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (Self::Read<'a>, Self::Write<'a>, Guard<'a>) {
        (**self).acquire_mut(stream)
    }
    #[inline(always)]
    fn acquire_mut_element<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (Self::Write<'a>, Option<Guard<'a>>) {
        (**self).acquire_mut_element(stream)
    }
    #[inline(always)]
    unsafe fn inert_write<'a>(&'a self) -> Option<Self::Write<'a>> {
        // SAFETY: the caller's contract, for the place this one borrows.
        unsafe { (**self).inert_write() }
    }
}

/// Where the event of a [`PinnedBuffer`](crate::PinnedBuffer) was last recorded (see [`PinnedState`]). Either way
/// that record follows every use so far: each use first waited for the event, or was enqueued
/// on the stream of its last record, after it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LastUse {
    /// No use since the host last waited: nothing to wait for.
    Idle,
    /// Recorded last on the buffer's own stream: a next use there needs no `cuStreamWaitEvent`.
    Home,
    /// Recorded last on another stream.
    Elsewhere,
}

/// What the guard of a [`PinnedBuffer`](crate::PinnedBuffer)'s place needs (no element type, so that [`Guard`] is
/// not generic): the buffer's own stream, its event and where it was last used.
pub(crate) struct PinnedState {
    /// The stream the buffer was made for: its context is the buffer's, and it is kept alive
    /// (so never replaced by another stream at the same address) as long as the buffer.
    home: Arc<CudaStream>,
    /// Recorded after each use (`CU_EVENT_DISABLE_TIMING`, no blocking sync: waiting on it
    /// spins as `cuStreamSynchronize` does in the default scheduling mode, and costs what that
    /// costs: 8.68 against 8.72 µs per launch + wait + read on the H200, `read_costs.cu`).
    event: CudaEvent,
    last: Cell<LastUse>,
    /// For a [`LastUse::Home`] on a per-thread default stream ([`per_thread`]): the thread
    /// whose stream that was (the one object names each thread's own stream; review 33).
    home_thread: Cell<Option<std::thread::ThreadId>>,
    /// How many times the event was recorded ([`Self::used`]): a guard notes it when its use is
    /// ordered ([`Self::order`]), and a different count when it records means that another use
    /// (on another stream) recorded the event in between (review 31: two builders holding the
    /// buffer, or a call made inside another call's body), whose record this one would replace.
    records: Cell<u64>,
    /// Waits [`Self::used`] made for an overlapping use (unit tests).
    #[cfg(test)]
    pub(crate) late_waits: Cell<u32>,
    /// Waits [`Self::order`] made (unit tests, review 33).
    #[cfg(test)]
    pub(crate) order_waits: Cell<u32>,
}

impl PinnedState {
    /// A buffer's state: made for `home`, with `event` (`CU_EVENT_DISABLE_TIMING`), no use yet.
    pub(crate) fn new(home: Arc<CudaStream>, event: CudaEvent) -> Self {
        PinnedState {
            home,
            event,
            last: Cell::new(LastUse::Idle),
            home_thread: Cell::new(None),
            records: Cell::new(0),
            #[cfg(test)]
            late_waits: Cell::new(0),
            #[cfg(test)]
            order_waits: Cell::new(0),
        }
    }

    /// The buffer's own stream.
    pub(crate) fn home(&self) -> &Arc<CudaStream> {
        &self.home
    }

    /// Orders a use on `stream` after the uses so far: `cuStreamWaitEvent` unless they were all
    /// on `stream` itself, the buffer's own stream (for a per-thread default stream: on this
    /// thread's). Returns the count of records so far, for [`Self::used`].
    #[inline]
    pub(crate) fn order(&self, stream: &CudaStream) -> u64 {
        let same = self.last.get() == LastUse::Home
            && core::ptr::eq(stream, &*self.home)
            && (!per_thread(stream.cu_stream())
                || self.home_thread.get() == Some(std::thread::current().id()));
        if self.last.get() != LastUse::Idle && !same {
            stream.context().record_err(stream.wait(&self.event));
            #[cfg(test)]
            self.order_waits.set(self.order_waits.get() + 1);
        }
        self.records.get()
    }

    /// After a use on `stream` was enqueued (the guard's drop): records the event there. `seen`
    /// is what [`Self::order`] returned for this use: when another use recorded the event
    /// since (uses of one buffer can overlap: two [`GraphBuilder`](crate::GraphBuilder)s that
    /// read it, or a call made inside another call's body), `stream` first waits for that
    /// record, so that the event's last record follows every use, as `as_slice`, `as_mut_slice`,
    /// `drop` and the own-stream shortcut of [`Self::order`] assume (review 31: the later record
    /// replaced the earlier one, and the host wrote the buffer while a copy still read it).
    #[inline]
    pub(crate) fn used(&self, stream: &CudaStream, seen: u64) {
        if self.records.get() != seen {
            stream.context().record_err(stream.wait(&self.event));
            #[cfg(test)]
            self.late_waits.set(self.late_waits.get() + 1);
        }
        stream.context().record_err(self.event.record(stream));
        self.records.set(self.records.get().wrapping_add(1));
        let home = core::ptr::eq(stream, &*self.home);
        if home && per_thread(stream.cu_stream()) {
            self.home_thread.set(Some(std::thread::current().id()));
        }
        self.last.set(if home { LastUse::Home } else { LastUse::Elsewhere });
    }

    /// Blocks until every use so far finished: `cuEventSynchronize` on the event recorded after
    /// the last one (only that work: not later work on the stream, and not a host node that
    /// waits for the calling thread, so a host closure that owns the buffer can read it).
    pub(crate) fn wait(&self) -> Result<(), crate::error::CudaError> {
        if self.last.get() != LastUse::Idle {
            crate::error::Call::call(
                self.event.synchronize(),
                "cuEventSynchronize (PinnedBuffer)",
            )?;
            self.last.set(LastUse::Idle);
        }
        Ok(())
    }
}

/// One place's borrow for one call (not public API): records the buffer's use on the stream when
/// dropped, after the graph launch, and tells the cache the buffer's own stream and its address
/// range (for the ordering of [`crate::cache`]'s ledger and the aliasing check).
///
/// Only `kind` may own anything: `Guards::drop` forgets a guard of kind [`GuardKind::Nothing`]
/// instead of dropping it ([`Guard::is_inert`]), so every other field must need no drop.
#[doc(hidden)]
pub struct Guard<'a> {
    kind: GuardKind<'a>,
    /// The stream the buffer was allocated on, which frees it (device memory only). Borrowed
    /// for `'a` from the buffer, which holds it.
    pub(crate) own: Option<&'a CudaStream>,
    /// Address range, bytes.
    pub(crate) start: u64,
    pub(crate) bytes: u64,
    /// Borrowed for writing.
    pub(crate) write: bool,
}

enum GuardKind<'a> {
    /// Nothing to record: a buffer without events (cudarc's event tracking was off when it was
    /// allocated), a graph-owned buffer, or a place refused later. (Not a `Cudarc` guard that
    /// does nothing: dropping that is a call into cudarc per place, 3 % of an unchanged
    /// 1000-place call, `.ci/host-profile`.)
    Nothing,
    /// cudarc's guard (a pinned host buffer's stream synchronization).
    Cudarc(#[allow(dead_code)] SyncOnDrop<'a>),
    /// The buffer's event that cudarc's guard would record (a device buffer's read or write
    /// event; a pinned buffer's one event, which its `as_slice`, `as_mut_slice` and `drop` wait
    /// for), recorded on drop whatever cudarc's mode is then. cudarc records it only while the
    /// *stream's* context object manages synchronization (event tracking on and more than one
    /// stream), while later users wait on it according to the *buffer's* context object: the two
    /// differ with two `Arc<CudaContext>` of one device, and the mode can change between the
    /// acquire and the drop (a stream dropped). Recording it always keeps every later user that
    /// waits on the event ordered after the graph.
    Event(&'a CudaEvent, &'a CudaStream),
    /// A [`PinnedBuffer`](crate::PinnedBuffer)'s: its event recorded on the stream, and the
    /// stream noted as its last use (see `pinned.rs`).
    Pinned(&'a PinnedState, &'a CudaStream, u64),
    /// A cudarc `PinnedHostSlice`'s event, recorded as [`GuardKind::Event`] after the stream
    /// waited for it (its last record may be another use's: [`SLICE_RECORDS_LOCK`]).
    PinnedSlice(&'a CudaEvent, &'a CudaStream),
    /// A place made of several buffers (a captured [`Graph`](crate::Graph) embedded with
    /// `child`): their guards; this guard itself then covers no range. (A variant rather than a
    /// field of every guard: a smaller guard is less to move and drop per place.)
    Parts(Box<[Guard<'a>]>),
    /// A guard that counts its drops (unit tests of `Guards`' drop).
    #[cfg(test)]
    Counted(&'a core::cell::Cell<usize>),
}

impl<'a> Guard<'a> {
    #[inline(always)]
    fn new(
        kind: GuardKind<'a>,
        own: Option<&'a CudaStream>,
        range: (u64, u64),
        write: bool,
    ) -> Self {
        Guard { kind, own, start: range.0, bytes: range.1, write }
    }

    /// The guard of a [`PinnedBuffer`](crate::PinnedBuffer)'s place used on `stream`.
    #[inline(always)]
    pub(crate) fn pinned(
        state: &'a PinnedState,
        stream: &'a CudaStream,
        seen: u64,
        range: (u64, u64),
        write: bool,
    ) -> Self {
        Guard::new(GuardKind::Pinned(state, stream, seen), None, range, write)
    }

    /// The guard of a place made of several buffers: `children`'s.
    pub(crate) fn of_parts(children: Box<[Guard<'a>]>, write: bool) -> Self {
        Guard::new(GuardKind::Parts(children), None, (0, 0), write)
    }

    /// Whether it records nothing and owns nothing ([`GuardKind::Nothing`]): dropping it does
    /// nothing, so it may be forgotten instead.
    #[inline(always)]
    pub(crate) fn is_inert(&self) -> bool {
        // Every field but `kind` needs no drop (see the struct's doc).
        const _: () = assert!(
            !core::mem::needs_drop::<Option<&CudaStream>>() && !core::mem::needs_drop::<u64>()
        );
        matches!(self.kind, GuardKind::Nothing)
    }

    /// Whether the stream ledger may have to order its buffer with `stream`: its buffer lives
    /// on another stream, or it is a place of several buffers.
    #[inline(always)]
    pub(crate) fn foreign_to(&self, stream: &CudaStream) -> bool {
        self.own.is_some_and(|o| !core::ptr::eq(o, stream))
            || matches!(self.kind, GuardKind::Parts(_))
    }

    /// The guards of a place made of several buffers ([`Self::of_parts`]); empty otherwise.
    #[inline(always)]
    pub(crate) fn children(&self) -> &[Guard<'a>] {
        match &self.kind {
            GuardKind::Parts(c) => c,
            _ => &[],
        }
    }

    /// The buffers' guards, each with its place index: a place's own guard, or its children's.
    pub(crate) fn leaves<'g>(guards: &'g [Guard<'a>]) -> Leaves<'g, 'a> {
        Leaves { guards, place: 0, child: 0 }
    }
}

/// [`Guard::leaves`]: one step per guard for places of one buffer (a `flat_map` over a
/// `chain` cost a few nanoseconds per place of an unchanged 1000-place call,
/// `.ci/host-profile`).
pub(crate) struct Leaves<'g, 'a> {
    guards: &'g [Guard<'a>],
    place: usize,
    /// The next child of `guards[place]` (a place of several buffers).
    child: usize,
}

impl<'g, 'a> Iterator for Leaves<'g, 'a> {
    type Item = (usize, &'g Guard<'a>);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let g = self.guards.get(self.place)?;
            let p = self.place;
            let children = g.children();
            if children.is_empty() {
                self.place += 1;
                return Some((p, g));
            }
            if let Some(c) = children.get(self.child) {
                self.child += 1;
                return Some((p, c));
            }
            self.place += 1;
            self.child = 0;
        }
    }
}

#[cfg(test)]
impl Guard<'static> {
    /// A guard of no buffer, with this address range.
    pub(crate) fn for_test(start: u64, bytes: u64, write: bool) -> Self {
        Guard::new(GuardKind::Nothing, None, (start, bytes), write)
    }
}

#[cfg(test)]
impl<'a> Guard<'a> {
    /// A guard that is not inert and adds one to `drops` when dropped (unit tests).
    pub(crate) fn counted_for_test(drops: &'a core::cell::Cell<usize>) -> Self {
        Guard::new(GuardKind::Counted(drops), None, (0, 8), false)
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        match self.kind {
            GuardKind::Event(event, stream) => stream.context().record_err(event.record(stream)),
            GuardKind::PinnedSlice(event, stream) => slice_used(event, stream),
            GuardKind::Pinned(state, stream, seen) => state.used(stream, seen),
            #[cfg(test)]
            GuardKind::Counted(drops) => drops.set(drops.get() + 1),
            _ => {}
        }
    }
}

/// Whether `stream` is the handle of a per-thread default stream (cudarc's
/// `per_thread_stream()`, `CU_STREAM_PER_THREAD`): one handle that names the calling thread's
/// own stream, so a different stream on each thread (review 33; see also `Ledger::after`).
#[inline(always)]
pub(crate) fn per_thread(stream: CUstream) -> bool {
    stream as usize == 0x2
}

/// No synchronization: for a pinned host buffer of another context, which validation then
/// refuses.
pub(crate) fn no_sync<'a>() -> Guard<'a> {
    Guard::new(GuardKind::Nothing, None, (0, 0), false)
}

/// The guard of a graph-owned buffer's place (`alloc` in `graph!`): nothing to order, no
/// address range for the aliasing check (no other place can overlap it).
pub(crate) fn scratch_guard<'a>() -> Guard<'a> {
    Guard::new(GuardKind::Nothing, None, (0, 0), true)
}

/// The event cudarc's guard would record, taken out (cudarc's guard then does nothing) to be
/// recorded unconditionally (see [`GuardKind::Event`]).
#[inline(always)]
fn take_event<'a>(cudarc: &mut SyncOnDrop<'a>) -> Option<GuardKind<'a>> {
    match cudarc {
        SyncOnDrop::Record(target) => target.take().map(|(event, s)| GuardKind::Event(event, s)),
        SyncOnDrop::Sync(_) => None,
    }
}

/// The guard of a pinned host buffer from cudarc's.
fn pinned_guard<'a>(stream: &'a CudaStream, mut cudarc: SyncOnDrop<'a>) -> GuardKind<'a> {
    match &mut cudarc {
        SyncOnDrop::Record(target) if target.is_some() => {
            let (event, s) = target.take().expect("checked just above");
            GuardKind::PinnedSlice(event, s)
        }
        // Not what cudarc returns for pinned memory; synchronizing is always safe. (Made
        // lazily: a `SyncOnDrop::Sync` synchronizes the stream when dropped, even unused.)
        _ => GuardKind::Cudarc(SyncOnDrop::sync_stream(stream)),
    }
}

/// The records of cudarc pinned slices' events made by the crate's guards (reviews 31 and
/// 31b). Uses of one `PinnedHostSlice` can overlap: two [`GraphBuilder`](crate::GraphBuilder)s
/// that read it, a call made inside another call's body, calls on two threads (the slice is
/// `Sync`), and plain cudarc calls made while a guard holds it (between `GraphBuilder::read`
/// and `launch`, in a `graph!` scalar, in a `capture` closure). Each waits for the slice's one
/// event when acquired and records it when done, so a guard's record made last would replace
/// the others', and cudarc's `as_mut_slice` (which waits for the last record only) let the host
/// write while another use still read. Review 31 counted the crate's own records to tell when
/// a wait was needed; a plain cudarc call records the event without that count (review 31b), so
/// a guard now always makes its stream wait for the event before recording it: the last record
/// then follows every use (one `cuStreamWaitEvent` per cudarc pinned slice per call; the
/// crate's [`PinnedBuffer`](crate::PinnedBuffer), whose event only the crate records, keeps its
/// count instead). Under one lock, so that no guard of the crate records between another's
/// wait and record (plain cudarc calls on other threads at the same time remain cudarc's own).
static SLICE_RECORDS_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A cudarc pinned slice's guard dropping (see [`SLICE_RECORDS_LOCK`]): `stream` waits for
/// `event`, then records it.
fn slice_used(event: &CudaEvent, stream: &CudaStream) {
    let _t = SLICE_RECORDS_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    stream.context().record_err(stream.wait(event));
    #[cfg(test)]
    SLICE_WAITS.fetch_add(1, Ordering::SeqCst);
    stream.context().record_err(event.record(stream));
}

/// Waits [`slice_used`] made, one per cudarc pinned slice per call (unit tests).
#[cfg(test)]
pub(crate) static SLICE_WAITS: AtomicU64 = AtomicU64::new(0);

/// The guard of a device buffer from cudarc's: its event if it has one, else nothing (cudarc's
/// guard records nothing either: the buffer was allocated with event tracking off).
#[inline(always)]
fn device_guard(mut cudarc: SyncOnDrop<'_>) -> GuardKind<'_> {
    let kind = match take_event(&mut cudarc) {
        Some(kind) => kind,
        None if matches!(cudarc, SyncOnDrop::Record(None)) => GuardKind::Nothing,
        None => return GuardKind::Cudarc(cudarc),
    };
    // cudarc's guard is `Record(None)` now, whose drop does nothing: skipped (a call into
    // cudarc per place).
    core::mem::forget(cudarc);
    kind
}

/// A buffer's own stream (`DeviceSlice::stream`) for `'a`, detached from the borrow of the
/// buffer it was read from: it points into the stream's `Arc` allocation.
///
/// # Safety
/// The buffer holding `s` is borrowed for `'a` and neither drops nor replaces its stream
/// meanwhile (cudarc's `device_ptr`/`device_ptr_mut` do not), so the `Arc` keeps the stream
/// alive for `'a`.
unsafe fn own_stream<'a>(s: &Arc<CudaStream>) -> &'a CudaStream {
    // SAFETY: the caller's contract.
    unsafe { &*Arc::as_ptr(s) }
}

/// Bytes of `len` elements of `T`.
pub(crate) fn bytes_of<T>(len: usize) -> u64 {
    (len as u64).saturating_mul(size_of::<T>() as u64)
}

macro_rules! device_place {
    ($ty:ty) => {
        impl<T> sealed::Sealed for $ty {}
        impl<T> Place for $ty {}
        impl<T> Acquire for $ty {
            type Read<'a>
                = DevRead<'a, T>
            where
                Self: 'a;
            fn acquire<'a>(&'a self, stream: &'a CudaStream) -> (DevRead<'a, T>, Guard<'a>) {
                // SAFETY: the buffer holds its stream for `'a` (it is borrowed that long).
                let own: &'a CudaStream = unsafe { own_stream(DeviceSlice::stream(self)) };
                let ctx = own.context().cu_ctx();
                let len = DeviceSlice::len(self);
                // A buffer of another context (another device, for a kernel of that device or
                // a peer copy) is acquired on its own stream: cudarc's events of that context
                // are waited for and recorded there, and the cache's ledger orders the own
                // stream with the graph's stream both ways.
                let on = if ctx == stream.context().cu_ctx() { stream } else { own };
                let (ptr, guard) = DevicePtr::device_ptr(self, on);
                let range = (ptr, bytes_of::<T>(len));
                let guard = Guard::new(device_guard(guard), Some(own), range, false);
                (DevRead::new(ptr, len, ctx).owned_by(own), guard)
            }
        }
    };
}
macro_rules! device_place_mut {
    ($ty:ty) => {
        impl<T> PlaceMut for $ty {}
        impl<T> AcquireMut for $ty {
            type Write<'a>
                = DevWrite<'a, T>
            where
                Self: 'a;
            #[inline]
            fn acquire_mut<'a>(
                &'a mut self,
                stream: &'a CudaStream,
            ) -> (DevRead<'a, T>, DevWrite<'a, T>, Guard<'a>) {
                // SAFETY: the buffer holds its stream for `'a` (it is borrowed that long), and
                // `device_ptr_mut` neither drops nor replaces it: the reference points into the
                // stream's `Arc` allocation, not into the mutably borrowed buffer.
                let own: &'a CudaStream = unsafe { own_stream(DeviceSlice::stream(&*self)) };
                let ctx = own.context().cu_ctx();
                let len = DeviceSlice::len(self);
                // See `acquire`: a buffer of another context is acquired on its own stream.
                let on = if ctx == stream.context().cu_ctx() { stream } else { own };
                let (ptr, guard) = DevicePtrMut::device_ptr_mut(self, on);
                let guard =
                    Guard::new(device_guard(guard), Some(own), (ptr, bytes_of::<T>(len)), true);
                let (r, w) = (DevRead::new(ptr, len, ctx), DevWrite::new(ptr, len, ctx));
                (r.owned_by(own), w.owned_by(own), guard)
            }
            #[inline(always)]
            fn acquire_mut_element<'a>(
                &'a mut self,
                stream: &'a CudaStream,
            ) -> (DevWrite<'a, T>, Option<Guard<'a>>) {
                // As `acquire_mut`, the inert guard left to `InertGuard::inert_guard`.
                // SAFETY: as in `acquire_mut`.
                let own: &'a CudaStream = unsafe { own_stream(DeviceSlice::stream(&*self)) };
                let ctx = own.context().cu_ctx();
                let len = DeviceSlice::len(self);
                let on = if ctx == stream.context().cu_ctx() { stream } else { own };
                let (ptr, guard) = DevicePtrMut::device_ptr_mut(self, on);
                let w = DevWrite::new(ptr, len, ctx).owned_by(own);
                match device_guard(guard) {
                    GuardKind::Nothing => (w, None),
                    kind => (w, Some(Guard::new(kind, Some(own), (ptr, bytes_of::<T>(len)), true))),
                }
            }
            #[inline(always)]
            unsafe fn inert_write<'a>(&'a self) -> Option<DevWrite<'a, T>> {
                // SAFETY: as in `acquire_mut`; the place is borrowed for `'a`.
                let own: &'a CudaStream = unsafe { own_stream(DeviceSlice::stream(self)) };
                let ctx = own.context().cu_ctx();
                let len = DeviceSlice::len(self);
                // The buffer has no events (the caller's contract): `device_ptr` waits for
                // nothing, and its guard records nothing (`Record(None)`; not dropped, which
                // would be a call into cudarc).
                let (ptr, guard) = DevicePtr::device_ptr(self, own);
                debug_assert!(matches!(guard, SyncOnDrop::Record(None)));
                core::mem::forget(guard);
                Some(DevWrite::new(ptr, len, ctx).owned_by(own))
            }
        }
    };
}
device_place!(CudaSlice<T>);
device_place!(CudaView<'_, T>);
device_place!(CudaViewMut<'_, T>);
device_place_mut!(CudaSlice<T>);
device_place_mut!(CudaViewMut<'_, T>);

impl<T> sealed::Sealed for PinnedHostSlice<T> {}
impl<T> Place for PinnedHostSlice<T> {}
impl<T> Acquire for PinnedHostSlice<T> {
    type Read<'a>
        = HostRead<'a, T>
    where
        Self: 'a;
    fn acquire<'a>(&'a self, stream: &'a CudaStream) -> (HostRead<'a, T>, Guard<'a>) {
        let ctx = self.context().cu_ctx();
        if ctx != stream.context().cu_ctx() {
            return (HostRead::new(core::ptr::null(), self.len(), ctx), no_sync());
        }
        // SAFETY: the slice is used only by the graph launched on `stream` before `guard` drops;
        // the guard then records the slice's event on `stream`, so later host access waits.
        let (s, guard) = unsafe { self.stream_synced_slice(stream) };
        let range = (s.as_ptr() as u64, bytes_of::<T>(s.len()));
        let guard = Guard::new(pinned_guard(stream, guard), None, range, false);
        (HostRead::new(s.as_ptr().cast(), s.len(), ctx), guard)
    }
}

impl<T> PlaceMut for PinnedHostSlice<T> {}
impl<T> AcquireMut for PinnedHostSlice<T> {
    type Write<'a>
        = HostWrite<'a, T>
    where
        Self: 'a;
    fn acquire_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (HostRead<'a, T>, HostWrite<'a, T>, Guard<'a>) {
        let ctx = self.context().cu_ctx();
        let len = self.len();
        if ctx != stream.context().cu_ctx() {
            let (r, w) = (core::ptr::null(), core::ptr::null_mut());
            return (HostRead::new(r, len, ctx), HostWrite::new(w, len, ctx), no_sync());
        }
        // SAFETY: as in `acquire`.
        let (s, guard) = unsafe { self.stream_synced_mut_slice(stream) };
        let ptr = s.as_mut_ptr();
        let range = (ptr as u64, bytes_of::<T>(len));
        let guard = Guard::new(pinned_guard(stream, guard), None, range, true);
        (
            HostRead::new(ptr.cast_const().cast(), len, ctx),
            HostWrite::new(ptr.cast(), len, ctx),
            guard,
        )
    }
}

/// A value passed to a kernel parameter: its bytes, as the kernel receives them.
///
/// # Safety
/// `bytes` is the kernel parameter exactly as the kernel reads it, of the same length on every
/// call, with no uninitialized bytes; a value that carries a device address reports it through
/// the (hidden) `context`, `access` and `range`, so that the graph orders, checks and
/// synchronizes it. `cudagraph` implements it for scalars (`DeviceRepr + NoUninit`) and buffer
/// handles.
pub unsafe trait KernelArg {
    /// The argument's bytes (`size_of` of the parameter type).
    fn bytes(&self) -> &[u8];
    /// The context of the memory it points to, for buffers.
    fn context(&self) -> Option<CUcontext> {
        None
    }
    /// For buffers: the [`GraphBuilder`](crate::GraphBuilder) place (see [`Handle`]) and
    /// whether the kernel writes it.
    #[doc(hidden)]
    fn access(&self) -> Option<(u64, bool)> {
        None
    }
    /// For buffers: the device address range it points at, `(start, bytes)`, which explicit
    /// kernel nodes of a capture check against the capture's (or exec's) operands.
    #[doc(hidden)]
    fn range(&self) -> Option<(u64, u64)> {
        None
    }
    /// For a [`DeviceScalar`]: the number of elements of its buffer (which must be 1).
    #[doc(hidden)]
    fn device_scalar_len(&self) -> Option<usize> {
        None
    }
    /// For a [`Condition`](crate::Condition): its slot in the call, whose conditional handle
    /// replaces the bytes when the node is sent to the driver.
    #[doc(hidden)]
    fn condition(&self) -> Option<(u32, u64)> {
        None
    }
}

/// Scalars: any `DeviceRepr` without padding bytes (`bytemuck::NoUninit`: every primitive, and
/// `#[derive(NoUninit)]` `#[repr(C)]` structs), since the cache compares argument bytes between
/// calls and padding bytes are uninitialized.
// SAFETY: `NoUninit` types have no padding; the bytes are the value's own.
unsafe impl<T: DeviceRepr + NoUninit> KernelArg for T {
    fn bytes(&self) -> &[u8] {
        bytemuck::bytes_of(self)
    }
}

/// A value a scalar kernel parameter takes: a plain value without padding bytes
/// (`bytemuck::NoUninit`), never a buffer handle, guard or view. `graph!` passes every argument
/// that is not written `&place` or `&mut place` through this bound, and `kernels!` requires it
/// of every declared scalar parameter type, so that no buffer the crate hands out reaches a
/// kernel without the graph knowing it. (A raw address is a plain value too: a kernel declared
/// with an address parameter is covered by `load`'s contract, like any declaration.) Sealed:
/// implemented by `cudagraph` only (plain values and [`Condition`](crate::Condition)), so that no
/// type of the user's holding a handle passes as a scalar.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a scalar kernel argument",
    label = "not a plain value (a buffer is an argument `&buf` or `&mut buf`, for a parameter `&[T]`, `&mut [T]`, `&T` or `&mut T`)",
    note = "scalar kernel parameters take plain values (`DeviceRepr` + `bytemuck::NoUninit`: numbers, `#[derive(NoUninit)]` structs); buffers are passed as `&buf` (read) or `&mut buf` (written) so that the graph orders and checks them"
)]
pub trait Scalar: sealed::SealedScalar {
    /// The value itself (an associated type, so that a refused argument reports one error).
    type Value;
    /// The value itself.
    fn value(self) -> Self::Value;
}
// Not listed in errors (`do_not_recommend`): a refused argument then reports `Scalar`'s own
// message, not `bytemuck::Pod`'s and its list of implementing types.
#[diagnostic::do_not_recommend]
impl<T: NoUninit> sealed::SealedScalar for T {}
#[diagnostic::do_not_recommend]
impl<T: NoUninit> Scalar for T {
    type Value = T;
    #[inline(always)]
    fn value(self) -> T {
        self
    }
}

// SAFETY: the pointer's 8 bytes, with its context and place reported.
unsafe impl<T> KernelArg for DevRead<'_, T> {
    fn bytes(&self) -> &[u8] {
        self.ptr.bytes()
    }
    fn context(&self) -> Option<CUcontext> {
        Some(self.ctx)
    }
    fn access(&self) -> Option<(u64, bool)> {
        Some((self.tag, false))
    }
    fn range(&self) -> Option<(u64, u64)> {
        Some((self.ptr, bytes_of::<T>(self.len)))
    }
}

// SAFETY: as for `DevRead`.
unsafe impl<T> KernelArg for DevWrite<'_, T> {
    fn bytes(&self) -> &[u8] {
        self.ptr.bytes()
    }
    fn context(&self) -> Option<CUcontext> {
        Some(self.ctx)
    }
    fn access(&self) -> Option<(u64, bool)> {
        Some((self.tag, true))
    }
    fn range(&self) -> Option<(u64, u64)> {
        Some((self.ptr, bytes_of::<T>(self.len)))
    }
}

/// A device scalar argument: a kernel parameter declared `&T` (read) or `&mut T` (written) in
/// `kernels!`, whose kernel receives a `const T*` / `T*` to one value in device memory (a
/// solver's `alpha` or residual that never leaves the device). It is made from a buffer operand
/// (`&alpha` / `&mut alpha` in `graph!`; a [`GraphBuilder`](crate::GraphBuilder)'s handle,
/// `g.read(&alpha)` / `g.write(&mut alpha)`), with the same borrow, hazard and aliasing rules as a
/// buffer; the buffer must have exactly one element (else [`Error::InvalidNode`](crate::Error)
/// naming the statement, nothing enqueued).
#[derive(Clone, Copy, Debug)]
pub struct DeviceScalar<H>(H);

impl<H> DeviceScalar<H> {
    /// The device scalar of handle `h` (generated code).
    #[doc(hidden)]
    pub fn new(h: H) -> Self {
        DeviceScalar(h)
    }
}

macro_rules! device_scalar_arg {
    ($($h:ident),*) => {$(
        // SAFETY: the handle's own bytes, context, access and range (a one-element buffer is
        // checked before any driver call by `validate`).
        unsafe impl<T> KernelArg for DeviceScalar<$h<'_, T>> {
            fn bytes(&self) -> &[u8] {
                self.0.bytes()
            }
            fn context(&self) -> Option<CUcontext> {
                self.0.context()
            }
            fn access(&self) -> Option<(u64, bool)> {
                self.0.access()
            }
            fn range(&self) -> Option<(u64, u64)> {
                self.0.range()
            }
            fn device_scalar_len(&self) -> Option<usize> {
                Some(self.0.len)
            }
        }
    )*};
}
device_scalar_arg!(DevRead, DevWrite);

/// What a kernel method generated by [`kernels!`](crate::kernels) takes for a parameter
/// declared `&[T]`: a read handle of device memory of `T` ([`DevRead`], 8 bytes: the device
/// address, plus the element count, context and the place it was borrowed as).
///
/// You never name or implement it (only [`DevRead`] implements it, and only `cudagraph` makes
/// those): in `graph!` and `eager!` you write `&buffer`, and the macro borrows the buffer for
/// the call (cudarc's event synchronization, one borrow per place) and passes its handle; with a
/// [`GraphBuilder`](crate::GraphBuilder) you pass the handle `g.read(&buffer)` returns; inside a
/// [`capture`](crate::capture), [`Capture::read`](crate::Capture::read). A `CudaSlice`, a
/// `&CudaSlice`, a host slice or a raw address is refused at compile time with a message saying
/// which of these to write. The handle's lifetime `'a` is the borrow's, so a handle cannot
/// outlive the call that made it.
#[diagnostic::on_unimplemented(
    message = "this kernel parameter reads device memory of `{T}`: pass `&buffer` where `buffer` holds `{T}` (in `graph!`) or a read handle (with a `GraphBuilder`)",
    label = "expected a read handle of device memory of `{T}`, found `{Self}`",
    note = "in `graph!`, write `&buffer` (`&mut buffer` is rejected where the kernel only reads); with a `GraphBuilder`, pass the handle of `g.read(&buffer)` (or `g.write(&mut buffer).read()`), not the buffer itself",
    note = "a `HostRead`/`HostWrite` found here is pinned host memory (a `PinnedBuffer` or `PinnedHostSlice`), which a kernel cannot take: copy it to a device buffer first (`copy(&host, &mut dev)`) and pass `&dev`"
)]
pub trait ReadArg<'a, T> {
    /// The device pointer.
    fn into_read(self) -> DevRead<'a, T>;
}
// Not listed as "implemented for" in errors: the trait's own message says what to pass,
// and the listing pointed into this file.
#[diagnostic::do_not_recommend]
impl<'a, T> ReadArg<'a, T> for DevRead<'a, T> {
    fn into_read(self) -> DevRead<'a, T> {
        self
    }
}

/// What a kernel method generated by [`kernels!`](crate::kernels) takes for a parameter
/// declared `&mut [T]` (and what `memset`, `zero` and `fill` take for their destination): a
/// write handle of device memory of `T` ([`DevWrite`]).
///
/// As for [`ReadArg`]: write `&mut buffer` in `graph!` and `eager!` (a `&buffer` there is
/// refused where the kernel writes), pass `g.write(&mut buffer)` to a
/// [`GraphBuilder`](crate::GraphBuilder), [`Capture::write`](crate::Capture::write) inside a
/// capture. A write handle also reads (`DevWrite::read`), never the other way round.
#[diagnostic::on_unimplemented(
    message = "this kernel parameter writes device memory of `{T}`: pass `&mut buffer` where `buffer` holds `{T}` (in `graph!`) or a write handle (with a `GraphBuilder`)",
    label = "expected a write handle of device memory of `{T}`, found `{Self}`",
    note = "in `graph!`, write `&mut buffer` (a `&buffer` operand is read-only); with a `GraphBuilder`, pass the handle of `g.write(&mut buffer)`, not the buffer itself",
    note = "a `HostRead`/`HostWrite` found here is pinned host memory (a `PinnedBuffer` or `PinnedHostSlice`), which a kernel cannot write: pass a device buffer (`&mut dev`) and copy it to the host after the kernel (`copy(&dev, &mut host)`)"
)]
pub trait WriteArg<'a, T> {
    /// The device pointer.
    fn into_write(self) -> DevWrite<'a, T>;
}
// Not listed as "implemented for" in errors: the trait's own message says what to pass,
// and the listing pointed into this file.
#[diagnostic::do_not_recommend]
impl<'a, T> WriteArg<'a, T> for DevWrite<'a, T> {
    fn into_write(self) -> DevWrite<'a, T> {
        self
    }
}

/// A node's buffer operands `(tag, written, context)` (see [`Handle`]): at most one per kernel
/// parameter.
#[doc(hidden)]
pub type Accesses = [(u64, bool, CUcontext); 16];

/// One buffer argument of a kernel call (not public API): its parameter index, the device
/// address range it points at, whether the kernel writes it, and its context.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct BufferArg {
    pub(crate) arg: usize,
    pub(crate) start: u64,
    pub(crate) bytes: u64,
    pub(crate) write: bool,
    pub(crate) ctx: CUcontext,
}

/// A kernel call's buffer arguments: at most one per kernel parameter (not public API).
#[doc(hidden)]
pub type BufferArgs = [BufferArg; 16];

/// An empty [`BufferArgs`].
pub(crate) const NO_BUFFER_ARGS: BufferArgs =
    [BufferArg { arg: 0, start: 0, bytes: 0, write: false, ctx: core::ptr::null_mut() }; 16];

/// An empty [`Accesses`].
pub(crate) const NO_ACCESSES: Accesses = [(0, false, core::ptr::null_mut()); 16];

/// Review 33e: call and builder numbers are shifted left by [`PLACE_BITS`] into a `u64` tag,
/// so only 2^40 of them fit, and `next_id` does not stop there. A wrapped tag fails closed:
/// [`place_of`] compares the tag's high bits with the whole id, so a call numbered 2^40 or more
/// accepts no handle (every node `Error::InvalidNode`), neither its own nor one kept from the
/// call 2^40 before it (whose tag bits are equal). Not a hole; a call past 2^40 (about 13 days
/// of 1 µs calls in one process) would fail.
#[cfg(test)]
mod review33e_tests {
    use super::{PLACE_BITS, place_of, tag};

    #[test]
    fn tags_of_calls_past_2_pow_40_fail_closed() {
        let old = 7u64;
        let new = old + (1u64 << (64 - PLACE_BITS));
        assert_eq!(tag(new, 3), tag(old, 3), "the tag bits wrap");
        assert_eq!(place_of(tag(old, 3), old), Some(3));
        assert_eq!(place_of(tag(old, 3), new), None, "an old call's handle is refused");
        assert_eq!(place_of(tag(new, 3), new), None, "so is the call's own");
    }
}
