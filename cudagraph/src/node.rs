//! Node parameters as the generated code produces them: buffer places and their pointers,
//! typed kernel calls, copies and memsets. Everything here is plain data; the driver is only
//! called by [`crate::exec`].

use core::ffi::c_void;
use core::marker::PhantomData;

use bytemuck::NoUninit;
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUfunction, CUstream};
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    DeviceRepr, DeviceSlice, HostSlice, LaunchConfig, PinnedHostSlice, SyncOnDrop, ValidAsZeroBits,
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
            _borrow: PhantomData<(&'a (), fn() -> T)>,
        }
        impl<T> Clone for $name<'_, T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $name<'_, T> {}
        impl<T> sealed::Sealed for $name<'_, T> {}
        impl<T> Handle for $name<'_, T> {
            fn tag(&self) -> u64 {
                self.tag
            }
            fn with_tag(mut self, tag: u64, _: sealed::Token) -> Self {
                self.tag = tag;
                self
            }
        }
        impl<T> $name<'_, T> {
            pub(crate) fn new(ptr: $ptr, len: usize, ctx: CUcontext) -> Self {
                $name { ptr, len, ctx, tag: 0, _borrow: PhantomData }
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

impl<'a, T> DevWrite<'a, T> {
    /// The same buffer, read: for a [`GraphBuilder`](crate::GraphBuilder) node that reads a
    /// buffer registered with [`GraphBuilder::write`](crate::GraphBuilder::write).
    pub fn read(self) -> DevRead<'a, T> {
        DevRead { ptr: self.ptr, len: self.len, ctx: self.ctx, tag: self.tag, _borrow: PhantomData }
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
            _borrow: PhantomData,
        }
    }
}

pub(crate) mod sealed {
    pub trait Sealed {}
    /// Proof of being inside this crate: only it can make one, so only it can retag a handle.
    pub struct Token(pub(crate) ());
}

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
}

/// A buffer that can be a graph operand: device memory (`CudaSlice`, `CudaView`, `CudaViewMut`)
/// or pinned host memory (`PinnedHostSlice`), or a reference to one. Pageable host memory
/// (`Vec<T>`, `&[T]`) is not: nothing would keep it alive and unchanged until the graph's copy
/// runs. Sealed: implemented by `cudagraph` only, since a graph relies on each implementation
/// keeping cudarc's stream-ordering events right.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a graph buffer",
    label = "not device memory or pinned host memory",
    note = "graph operands are `CudaSlice`, `CudaView`, `CudaViewMut` or pinned host memory (`PinnedHostSlice`, from `CudaContext::alloc_pinned`); pageable host memory such as `Vec<T>` or `&[T]` is not allowed"
)]
pub trait Place: sealed::Sealed + Acquire {}

/// A [`Place`] a node may write.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be written by a graph node",
    label = "not writable device memory or pinned host memory",
    note = "graph operands written with `&mut` are `CudaSlice`, `CudaViewMut` or `PinnedHostSlice`; pageable host memory such as `Vec<T>` or `&mut [T]` is not allowed (nothing would keep it alive until the graph ran)"
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
    /// a guard that records this use on `stream` when dropped, after the graph launch. A buffer
    /// of another context than the stream's is not touched (the call then fails validation).
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
}

/// One place's borrow for one call (not public API): records the buffer's use on the stream when
/// dropped, after the graph launch, and tells the cache the buffer's own stream and its address
/// range (for the ordering of [`crate::exec`]'s ledger and the aliasing check).
#[doc(hidden)]
pub struct Guard<'a> {
    kind: GuardKind<'a>,
    /// The stream the buffer was allocated on, which frees it (device memory of the stream's
    /// context only). Alive for `'a`: the borrowed buffer holds it.
    pub(crate) own: Option<CUstream>,
    /// Address range, bytes.
    pub(crate) start: u64,
    pub(crate) bytes: u64,
    /// Borrowed for writing.
    pub(crate) write: bool,
}

enum GuardKind<'a> {
    /// Nothing to record (a buffer without events: cudarc's event tracking was off when it was
    /// allocated), or cudarc's fallback guard.
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
}

impl<'a> Guard<'a> {
    fn new(kind: GuardKind<'a>, own: Option<CUstream>, range: (u64, u64), write: bool) -> Self {
        Guard { kind, own, start: range.0, bytes: range.1, write }
    }
}

#[cfg(test)]
impl Guard<'static> {
    /// A guard of no buffer, with this address range.
    pub(crate) fn for_test(start: u64, bytes: u64, write: bool) -> Self {
        Guard::new(GuardKind::Cudarc(SyncOnDrop::Sync(None)), None, (start, bytes), write)
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let GuardKind::Event(event, stream) = self.kind {
            stream.context().record_err(event.record(stream));
        }
    }
}

/// No synchronization: for a buffer of another context, which validation then refuses.
fn no_sync<'a>() -> Guard<'a> {
    Guard::new(GuardKind::Cudarc(SyncOnDrop::Sync(None)), None, (0, 0), false)
}

/// The event cudarc's guard would record, taken out (cudarc's guard then does nothing) to be
/// recorded unconditionally (see [`GuardKind::Event`]).
fn take_event<'a>(cudarc: &mut SyncOnDrop<'a>) -> Option<GuardKind<'a>> {
    match cudarc {
        SyncOnDrop::Record(target) => target.take().map(|(event, s)| GuardKind::Event(event, s)),
        SyncOnDrop::Sync(_) => None,
    }
}

/// The guard of a pinned host buffer from cudarc's.
fn pinned_guard<'a>(stream: &'a CudaStream, mut cudarc: SyncOnDrop<'a>) -> GuardKind<'a> {
    // Not what cudarc returns for pinned memory; synchronizing is always safe. (Made lazily:
    // a `SyncOnDrop::Sync` synchronizes the stream when dropped, even unused.)
    take_event(&mut cudarc).unwrap_or_else(|| GuardKind::Cudarc(SyncOnDrop::sync_stream(stream)))
}

/// The guard of a device buffer from cudarc's: its event if it has one, else nothing (cudarc's
/// guard records nothing either: the buffer was allocated with event tracking off).
fn device_guard(mut cudarc: SyncOnDrop<'_>) -> GuardKind<'_> {
    take_event(&mut cudarc).unwrap_or(GuardKind::Cudarc(cudarc))
}

/// Bytes of `len` elements of `T`.
fn bytes_of<T>(len: usize) -> u64 {
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
                let ctx = DeviceSlice::stream(self).context().cu_ctx();
                let len = DeviceSlice::len(self);
                if ctx != stream.context().cu_ctx() {
                    return (DevRead::new(0, len, ctx), no_sync());
                }
                let own = Some(DeviceSlice::stream(self).cu_stream());
                let (ptr, guard) = DevicePtr::device_ptr(self, stream);
                let range = (ptr, bytes_of::<T>(len));
                (DevRead::new(ptr, len, ctx), Guard::new(device_guard(guard), own, range, false))
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
            fn acquire_mut<'a>(
                &'a mut self,
                stream: &'a CudaStream,
            ) -> (DevRead<'a, T>, DevWrite<'a, T>, Guard<'a>) {
                let ctx = DeviceSlice::stream(self).context().cu_ctx();
                let len = DeviceSlice::len(self);
                if ctx != stream.context().cu_ctx() {
                    return (DevRead::new(0, len, ctx), DevWrite::new(0, len, ctx), no_sync());
                }
                let own = Some(DeviceSlice::stream(self).cu_stream());
                let (ptr, guard) = DevicePtrMut::device_ptr_mut(self, stream);
                let guard = Guard::new(device_guard(guard), own, (ptr, bytes_of::<T>(len)), true);
                (DevRead::new(ptr, len, ctx), DevWrite::new(ptr, len, ctx), guard)
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
        let guard =
            Guard::new(pinned_guard(stream, guard), None, (ptr as u64, bytes_of::<T>(len)), true);
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
/// the (hidden) `context` and `access`, so that the graph orders, checks and synchronizes it.
/// `cudagraph` implements it for scalars (`DeviceRepr + NoUninit`) and buffer handles.
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
/// with an address parameter is covered by `load`'s contract, like any declaration.)
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a scalar kernel argument",
    label = "not a plain value",
    note = "scalar kernel parameters take plain values (`DeviceRepr` + `bytemuck::NoUninit`: numbers, `#[derive(NoUninit)]` structs); buffers are passed as `&buf` (read) or `&mut buf` (written) so that the graph orders and checks them"
)]
pub trait Scalar {
    /// The value itself (an associated type, so that a refused argument reports one error).
    type Value;
    /// The value itself.
    fn value(self) -> Self::Value;
}
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
}

/// A kernel parameter declared `&[T]` in `kernels!`: a `&place` of device memory of `T`.
#[diagnostic::on_unimplemented(
    message = "this kernel parameter reads device memory of `{T}`: pass `&buffer`",
    label = "expected `&buffer` of device memory of `{T}`, found `{Self}`",
    note = "`&mut buffer` is rejected where the kernel only reads; host memory cannot be a kernel argument"
)]
pub trait ReadArg<'a, T> {
    /// The device pointer.
    fn into_read(self) -> DevRead<'a, T>;
}
impl<'a, T> ReadArg<'a, T> for DevRead<'a, T> {
    fn into_read(self) -> DevRead<'a, T> {
        self
    }
}

/// A kernel parameter declared `&mut [T]` in `kernels!`: a `&mut place` of device memory of `T`.
#[diagnostic::on_unimplemented(
    message = "this kernel parameter writes device memory of `{T}`: pass `&mut buffer`",
    label = "expected `&mut buffer` of device memory of `{T}`, found `{Self}`",
    note = "a `&buffer` operand is read-only; host memory cannot be a kernel argument"
)]
pub trait WriteArg<'a, T> {
    /// The device pointer.
    fn into_write(self) -> DevWrite<'a, T>;
}
impl<'a, T> WriteArg<'a, T> for DevWrite<'a, T> {
    fn into_write(self) -> DevWrite<'a, T> {
        self
    }
}

/// The argument tuple of a kernel call.
pub trait KernelArgs {
    /// Number of arguments.
    const LEN: usize;
    /// Calls `f` with each argument's bytes, in parameter order.
    fn for_each(&self, f: &mut dyn FnMut(&[u8]));
    /// Calls `f` with the context of each buffer argument.
    fn for_each_context(&self, f: &mut dyn FnMut(CUcontext));
    /// Each buffer argument's [`KernelArg::access`] and context, in order, into `out`; returns
    /// how many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
}

/// A node's buffer operands `(tag, written, context)` (see [`Handle`]): at most one per kernel
/// parameter.
#[doc(hidden)]
pub type Accesses = [(u64, bool, CUcontext); 16];

/// An empty [`Accesses`].
pub(crate) const NO_ACCESSES: Accesses = [(0, false, core::ptr::null_mut()); 16];

macro_rules! kernel_args {
    ($($t:ident $i:tt),*) => {
        impl<$($t: KernelArg),*> KernelArgs for ($($t,)*) {
            const LEN: usize = 0 $(+ { let _ = $i; 1 })*;
            #[allow(unused_variables)]
            fn for_each(&self, f: &mut dyn FnMut(&[u8])) {
                $(f(self.$i.bytes());)*
            }
            #[allow(unused_variables)]
            fn for_each_context(&self, f: &mut dyn FnMut(CUcontext)) {
                $(if let Some(c) = self.$i.context() { f(c) })*
            }
            #[allow(unused_variables, unused_mut)]
            #[inline]
            fn accesses(&self, out: &mut Accesses) -> usize {
                let mut n = 0;
                $(if let (Some((t, w)), Some(c)) = (self.$i.access(), self.$i.context()) {
                    out[n] = (t, w, c);
                    n += 1;
                })*
                n
            }
        }
    };
}
kernel_args!();
kernel_args!(A 0);
kernel_args!(A 0, B 1);
kernel_args!(A 0, B 1, C 2);
kernel_args!(A 0, B 1, C 2, D 3);
kernel_args!(A 0, B 1, C 2, D 3, E 4);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
kernel_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

/// Grid, block and dynamic shared memory of a kernel launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchDims {
    /// Grid dimensions, blocks.
    pub grid: (u32, u32, u32),
    /// Block dimensions, threads.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory, bytes.
    pub shared_bytes: u32,
}

impl From<LaunchConfig> for LaunchDims {
    fn from(c: LaunchConfig) -> Self {
        LaunchDims { grid: c.grid_dim, block: c.block_dim, shared_bytes: c.shared_mem_bytes }
    }
}
impl From<(u32, u32)> for LaunchDims {
    /// `(grid, block)`, 1-D.
    fn from((g, b): (u32, u32)) -> Self {
        LaunchDims { grid: (g, 1, 1), block: (b, 1, 1), shared_bytes: 0 }
    }
}
impl From<(u32, u32, u32)> for LaunchDims {
    /// `(grid, block, shared_bytes)`, 1-D.
    fn from((g, b, s): (u32, u32, u32)) -> Self {
        LaunchDims { grid: (g, 1, 1), block: (b, 1, 1), shared_bytes: s }
    }
}
impl From<((u32, u32, u32), (u32, u32, u32))> for LaunchDims {
    /// `(grid, block)`, 3-D.
    fn from((grid, block): ((u32, u32, u32), (u32, u32, u32))) -> Self {
        LaunchDims { grid, block, shared_bytes: 0 }
    }
}
impl From<((u32, u32, u32), (u32, u32, u32), u32)> for LaunchDims {
    /// `(grid, block, shared_bytes)`, 3-D.
    fn from((grid, block, shared_bytes): ((u32, u32, u32), (u32, u32, u32), u32)) -> Self {
        LaunchDims { grid, block, shared_bytes }
    }
}

/// A typed kernel call made by a `kernels!` method, waiting for `.launch(cfg)`.
#[must_use = "a kernel call does nothing until `.launch(cfg)` inside `graph!`"]
pub struct KernelCall<'f, A> {
    function: &'f CudaFunction,
    name: &'static str,
    args: A,
}

impl<'f, A: KernelArgs> KernelCall<'f, A> {
    /// Made by the methods of a [`kernels!`](crate::kernels) struct.
    ///
    /// # Safety
    /// `function` takes exactly the parameters `A` passes (their types, in order), and reads
    /// only the buffers passed as [`DevRead`] and writes only those passed as [`DevWrite`],
    /// within their lengths: the contract of `kernels!`'s `load`.
    #[doc(hidden)]
    pub unsafe fn new(function: &'f CudaFunction, name: &'static str, args: A) -> Self {
        KernelCall { function, name, args }
    }

    /// Launch configuration: a cudarc `LaunchConfig`, `(grid, block)` or
    /// `(grid, block, shared_bytes)` with `u32` or `(u32, u32, u32)` dimensions.
    pub fn launch(self, cfg: impl Into<LaunchDims>) -> KernelLaunch<'f, A> {
        KernelLaunch { call: self, dims: cfg.into() }
    }
}

/// A kernel launch: function, arguments and launch dimensions of one kernel node.
pub struct KernelLaunch<'f, A> {
    call: KernelCall<'f, A>,
    dims: LaunchDims,
}

impl<'f, A: KernelArgs> KernelLaunch<'f, A> {
    pub(crate) fn parts(&self) -> (&'f CudaFunction, &A) {
        (self.call.function, &self.call.args)
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.call.name
    }
    /// The CUDA function.
    pub fn function(&self) -> &CudaFunction {
        self.call.function
    }
    /// Grid, block and shared memory.
    pub fn dims(&self) -> LaunchDims {
        self.dims
    }
}

/// Object-safe view of a [`KernelLaunch`], used by the cache (sealed).
pub trait KernelNode: sealed::Sealed {
    /// The CUDA function's handle.
    fn function(&self) -> CUfunction;
    /// The function itself, which keeps its module loaded while a graph holds it.
    fn function_owner(&self) -> Option<&CudaFunction> {
        None
    }
    /// Grid, block and shared memory.
    fn dims(&self) -> LaunchDims;
    /// Number of arguments.
    fn arg_count(&self) -> usize;
    /// Calls `f` with each argument's bytes, in order.
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8]));
    /// Each buffer argument's `(tag, written, context)` (see [`Handle`]) into `out`; returns how
    /// many.
    #[doc(hidden)]
    fn accesses(&self, out: &mut Accesses) -> usize;
}

impl<A: KernelArgs> KernelNode for KernelLaunch<'_, A> {
    fn function(&self) -> CUfunction {
        self.call.function.cu_function()
    }
    fn function_owner(&self) -> Option<&CudaFunction> {
        Some(self.call.function)
    }
    fn dims(&self) -> LaunchDims {
        self.dims
    }
    fn arg_count(&self) -> usize {
        A::LEN
    }
    fn for_each_arg(&self, f: &mut dyn FnMut(&[u8])) {
        self.call.args.for_each(f)
    }
    fn accesses(&self, out: &mut Accesses) -> usize {
        self.call.args.accesses(out)
    }
}

/// One side of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Device memory at this address.
    Device(CUdeviceptr),
    /// Pinned host memory at this address.
    Host(*const c_void),
}

/// A 1-D copy of `len` elements of `elem_size` bytes: what the cache stores and compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Memcpy {
    pub(crate) src: Memory,
    pub(crate) dst: Memory,
    pub(crate) src_len: usize,
    pub(crate) dst_len: usize,
    pub(crate) elem_size: usize,
    pub(crate) src_ctx: CUcontext,
    pub(crate) dst_ctx: CUcontext,
}

/// A 1-D memset of `len` elements of `elem_size` (1, 2 or 4) bytes to `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Memset {
    pub(crate) dst: CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) elem_size: u32,
    pub(crate) value: u32,
    pub(crate) ctx: CUcontext,
}

/// A memcpy node's parameters, made by `copy(&src, &mut dst)` in `graph!` ([`CopyTo::memcpy`]
/// of two handles).
///
/// Built only from handles, with private fields, and it borrows them (`'a`): it cannot outlive
/// the buffers it points into, and safe code cannot aim it at an address no handle vouches for.
#[derive(Clone, Copy, Debug)]
pub struct MemcpyParams<'a> {
    pub(crate) raw: Memcpy,
    /// The handles' tags ([`Handle`]): which place of which call each side is.
    pub(crate) src_tag: u64,
    pub(crate) dst_tag: u64,
    _borrow: PhantomData<&'a ()>,
}

impl MemcpyParams<'_> {
    /// Parameters recorded earlier (by a [`GraphBuilder`](crate::GraphBuilder)), whose
    /// accesses the recording already holds.
    pub(crate) fn recorded(raw: Memcpy) -> Self {
        MemcpyParams { raw, src_tag: 0, dst_tag: 0, _borrow: PhantomData }
    }
}

/// A memset node's parameters, made by `memset(&mut dst, value)` or `zero(&mut dst)` in
/// `graph!`; borrows its buffer like [`MemcpyParams`].
#[derive(Clone, Copy, Debug)]
pub struct MemsetParams<'a> {
    pub(crate) raw: Memset,
    pub(crate) dst_tag: u64,
    _borrow: PhantomData<&'a ()>,
}

impl MemsetParams<'_> {
    /// See [`MemcpyParams::recorded`].
    pub(crate) fn recorded(raw: Memset) -> Self {
        MemsetParams { raw, dst_tag: 0, _borrow: PhantomData }
    }
}

/// A copy direction the DSL allows: device→device, pinned host→device, device→pinned host,
/// with the same element type on both sides.
#[diagnostic::on_unimplemented(
    message = "cannot copy from `{Self}` to `{D}`",
    label = "not a valid copy",
    note = "`copy(&src, &mut dst)` needs the same element type on both sides and one of: device to device, pinned host to device, device to pinned host"
)]
pub trait CopyTo<D> {
    /// The memcpy parameters, borrowing both sides.
    fn memcpy<'x>(self, dst: D) -> MemcpyParams<'x>
    where
        Self: 'x,
        D: 'x;
}

macro_rules! copy_to {
    ($src:ident => $dst:ident, $s:ident, $d:ident) => {
        impl<'a, 'b, T> CopyTo<$dst<'b, T>> for $src<'a, T> {
            fn memcpy<'x>(self, dst: $dst<'b, T>) -> MemcpyParams<'x>
            where
                Self: 'x,
                $dst<'b, T>: 'x,
            {
                let raw = Memcpy {
                    src: Memory::$s(self.ptr as _),
                    dst: Memory::$d(dst.ptr as _),
                    src_len: self.len,
                    dst_len: dst.len,
                    elem_size: size_of::<T>(),
                    src_ctx: self.ctx,
                    dst_ctx: dst.ctx,
                };
                MemcpyParams { raw, src_tag: self.tag, dst_tag: dst.tag, _borrow: PhantomData }
            }
        }
    };
}
/// Never constructed: a second `CopyTo` impl for each source type, so rustc reports an invalid
/// copy as "cannot copy from … to …" instead of guessing the one valid destination type.
#[doc(hidden)]
pub enum NoCopy<T> {
    #[doc(hidden)]
    _Never(core::convert::Infallible, PhantomData<T>),
}
macro_rules! no_copy {
    ($($src:ident),*) => {$(
        #[diagnostic::do_not_recommend]
        impl<T> CopyTo<NoCopy<T>> for $src<'_, T> {
            fn memcpy<'x>(self, dst: NoCopy<T>) -> MemcpyParams<'x>
            where
                Self: 'x,
                NoCopy<T>: 'x,
            {
                match dst {
                    NoCopy::_Never(never, _) => match never {},
                }
            }
        }
    )*};
}
no_copy!(DevRead, HostRead);

copy_to!(DevRead => DevWrite, Device, Device);
copy_to!(HostRead => DevWrite, Host, Device);
copy_to!(DevRead => HostWrite, Device, Host);

/// The value of a `memset`: a type of 1, 2 or 4 bytes.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a memset value",
    label = "not a 1, 2 or 4-byte value",
    note = "memset values are u8, i8, u16, i16, u32, i32 or f32 (the driver sets 1, 2 or 4-byte elements); use `zero(&mut buf)` to clear any type"
)]
pub trait MemsetValue: sealed::Sealed + Copy {
    /// The value's bits, zero-extended to 32 bits.
    fn bits(self) -> u32;
}
macro_rules! memset_value {
    ($($t:ty => $u:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl MemsetValue for $t {
            fn bits(self) -> u32 {
                <$u>::from_ne_bytes(self.to_ne_bytes()) as u32
            }
        }
    )*};
}
memset_value!(u8 => u8, i8 => u8, u16 => u16, i16 => u16, u32 => u32, i32 => u32, f32 => u32);

/// A statement's node parameters, as handed to the cache.
#[derive(Clone, Copy)]
pub enum NodeParams<'a> {
    /// Kernel node.
    Kernel(&'a dyn KernelNode),
    /// Memcpy node.
    Memcpy(MemcpyParams<'a>),
    /// Memset node.
    Memset(MemsetParams<'a>),
}

impl NodeParams<'_> {
    /// Each buffer operand's `(tag, written, context)` (see [`Handle`]) into `out`; returns
    /// how many.
    pub(crate) fn accesses(&self, out: &mut Accesses) -> usize {
        match self {
            NodeParams::Kernel(k) => k.accesses(out),
            NodeParams::Memcpy(c) => {
                out[0] = (c.src_tag, false, c.raw.src_ctx);
                out[1] = (c.dst_tag, true, c.raw.dst_ctx);
                2
            }
            NodeParams::Memset(m) => {
                out[0] = (m.dst_tag, true, m.raw.ctx);
                1
            }
        }
    }
}

/// What a statement evaluates to inside `graph!` (sealed: a kernel launch made by a
/// `kernels!` method, or the parameters of `copy`, `memset` and `zero`).
pub trait IntoNode: sealed::Sealed {
    /// The node parameters.
    fn node(&self) -> NodeParams<'_>;
}
impl<A: KernelArgs> sealed::Sealed for KernelLaunch<'_, A> {}
impl<A: KernelArgs> IntoNode for KernelLaunch<'_, A> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Kernel(self)
    }
}
impl sealed::Sealed for MemcpyParams<'_> {}
impl IntoNode for MemcpyParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Memcpy(*self)
    }
}
impl sealed::Sealed for MemsetParams<'_> {}
impl IntoNode for MemsetParams<'_> {
    fn node(&self) -> NodeParams<'_> {
        NodeParams::Memset(*self)
    }
}

/// A kernel statement's value in `graph!`: only a [`KernelLaunch`], made by a
/// [`kernels!`](crate::kernels) method and `.launch(cfg)` (sealed).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel launch made by a `kernels!` method",
    label = "a kernel statement must be `KERNELS.name(args…).launch(cfg)` with a kernel declared in `kernels!`",
    note = "methods of your own on a `kernels!` struct cannot be graph statements: the graph could not see which buffers they use"
)]
pub trait LaunchNode: sealed::Sealed {
    /// The launch itself (an associated type, so that a refused statement reports one error).
    type Launch: IntoNode;
    /// The launch itself.
    fn into_statement(self) -> Self::Launch;
}
impl<'f, A: KernelArgs> LaunchNode for KernelLaunch<'f, A> {
    type Launch = Self;
    #[inline(always)]
    fn into_statement(self) -> Self {
        self
    }
}

/// `copy(&src, &mut dst)`.
pub fn copy<'x, S: CopyTo<D> + 'x, D: 'x>(src: S, dst: D) -> MemcpyParams<'x> {
    src.memcpy(dst)
}

/// `memset(&mut dst, value)`: every element of `dst` set to `value`.
pub fn memset<'a, T: MemsetValue>(dst: impl WriteArg<'a, T>, value: T) -> MemsetParams<'a> {
    let dst = dst.into_write();
    let raw = Memset {
        dst: dst.ptr,
        len: dst.len,
        elem_size: size_of::<T>() as u32,
        value: value.bits(),
        ctx: dst.ctx,
    };
    MemsetParams { raw, dst_tag: dst.tag, _borrow: PhantomData }
}

/// `zero(&mut dst)`: every byte of `dst` set to 0, whatever its element type.
pub fn zero<'a, T: ValidAsZeroBits>(dst: impl WriteArg<'a, T>) -> MemsetParams<'a> {
    let dst = dst.into_write();
    let bytes = dst.len * size_of::<T>();
    let elem_size = [4u32, 2, 1]
        .into_iter()
        .find(|&w| bytes.is_multiple_of(w as usize) && dst.ptr.is_multiple_of(u64::from(w)))
        .unwrap_or(1);
    let raw =
        Memset { dst: dst.ptr, len: bytes / elem_size as usize, elem_size, value: 0, ctx: dst.ctx };
    MemsetParams { raw, dst_tag: dst.tag, _borrow: PhantomData }
}
