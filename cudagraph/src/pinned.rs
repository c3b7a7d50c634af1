//! [`PinnedBuffer`]: page-locked host memory whose reads after a graph call cost what the raw
//! driver's `cuStreamSynchronize` + read cost.

use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaStream, DeviceRepr, ValidAsZeroBits, result};

use crate::error::{Call, CudaError, Error};
use crate::operand::{
    Acquire, AcquireMut, Guard, HostRead, HostWrite, PinnedState, Place, PlaceMut, bytes_of,
    no_sync, pinned_id, sealed,
};

/// Page-locked host memory (`cuMemHostAlloc`, flags 0: cached, readable by the host at full
/// speed), for results a step copies back and the host reads every step.
///
/// A graph operand like cudarc's `PinnedHostSlice` (`copy(&dev, &mut host)` in `graph!`,
/// [`GraphBuilder`](crate::GraphBuilder) copies, `host` statements), with a cheaper way of
/// waiting for the device: each call that uses it records an event without timing
/// (`cuEventRecord`, 0.04 µs on the H200, where cudarc's pinned buffer's timing event costs
/// 1.6 µs), and [`as_slice`](Self::as_slice) / [`as_mut_slice`](Self::as_mut_slice) wait for
/// the device's uses themselves with one `cuEventSynchronize` (no wait when nothing used the
/// buffer since the last one). Read it right after the call:
///
/// ```no_run
/// # use cudagraph::{graph, GraphCache, PinnedBuffer};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ctx = cudagraph::context(0)?;
/// let stream = ctx.new_stream()?;
/// let residual = stream.alloc_zeros::<f32>(1)?;
/// let mut host = PinnedBuffer::<f32>::zeros(&stream, 1)?;
/// let mut cache = GraphCache::new();
/// graph!(&mut cache, &stream, {
///     copy(&residual, &mut host);
/// })?;
/// let r = host.as_slice()?[0]; // waits for the copy: no `stream.synchronize()` needed
/// # let _ = r;
/// # Ok(())
/// # }
/// ```
///
/// Do not call `stream.synchronize()` before reading: a second synchronize, or any driver
/// query of finished work, costs about 1.4 µs on the H200 (`examples/cuda/read_costs.cu`).
/// Using it on another stream than its own is allowed: the call first waits for the buffer's
/// earlier uses (`cuStreamWaitEvent`, +0.2–0.3 µs), a wait skipped on its own stream.
///
/// Where it is a place: every `graph!` statement that takes pinned host memory (`copy`,
/// `copy_2d`, `host`, and the `capture` statement's pinned operands), and
/// [`GraphBuilder`](crate::GraphBuilder) reads and writes. The standalone
/// [`capture`](crate::capture) does not list it (use cudarc's `PinnedHostSlice` there).
///
/// `Send` (when `T` is), not `Sync`: the buffer notes where its event was last recorded. To give
/// a result to another thread, copy the value out (`let r = host.as_slice()?[0];`) and send it,
/// or move the buffer; compile errors that `NonNull` or `operand::PinnedState` "cannot be shared
/// between threads safely" mean a `&PinnedBuffer` crossed threads. Hold no slice of it across a
/// call that uses it (the borrow checker refuses): copy the values out first.
///
/// Dropping it waits for the device's uses, then frees it (`cuMemFreeHost`); if that wait fails
/// (the event's last record went into a stream capture; the context faulted) the memory is
/// leaked instead, since a copy may still be pending, and the error is recorded in the context,
/// as cudarc's drops do.
///
/// # Errors
/// `as_slice`/`as_mut_slice` return [`Error::Cuda`] when the wait fails:
/// `CUDA_ERROR_CAPTURED_EVENT` when the buffer's last use was recorded into a stream capture
/// (a call on a stream that cudarc captures), or the context's fault.
pub struct PinnedBuffer<T> {
    ptr: NonNull<T>,
    len: usize,
    state: PinnedState,
    /// The allocation's id ([`pinned_id`]; 0 when nothing was allocated, `len` 0 or a
    /// zero-sized `T`): a copy's words hold it instead of the driver's (no query per call).
    id: u64,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns its memory (like a `Box<[T]>`), and its state is only touched through
// `&self`/`&mut self` on one thread at a time (it is not `Sync`); cudarc's stream and event are
// `Send`.
unsafe impl<T: Send> Send for PinnedBuffer<T> {}

impl<T: DeviceRepr> PinnedBuffer<T> {
    /// `len` elements, uninitialized, for `stream` (its context; the buffer's own stream).
    fn alloc(stream: &Arc<CudaStream>, len: usize) -> Result<Self, Error> {
        let ctx = stream.context();
        let bytes = len.checked_mul(size_of::<T>()).ok_or(CudaError {
            call: "cuMemHostAlloc (PinnedBuffer: length overflows)",
            error: cudarc::driver::DriverError(
                cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            ),
        })?;
        ctx.bind_to_thread().call("cuCtxSetCurrent")?;
        let event = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .call("cuEventCreate (PinnedBuffer)")?;
        let ptr = if bytes == 0 {
            NonNull::dangling()
        } else {
            // SAFETY: the context is current; flags 0 (portable to no other context, not
            // mapped, not write-combined). Freed in `Drop` only.
            let p = unsafe { result::malloc_host(bytes, 0) }.call("cuMemHostAlloc")?;
            NonNull::new(p.cast::<T>()).ok_or(CudaError {
                call: "cuMemHostAlloc (returned null)",
                error: cudarc::driver::DriverError(
                    cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                ),
            })?
        };
        let state = PinnedState::new(stream.clone(), event);
        let id = if bytes == 0 { 0 } else { pinned_id() };
        Ok(PinnedBuffer { ptr, len, state, id, _owns: PhantomData })
    }

    /// `len` zeroed elements of page-locked host memory in `stream`'s context, which is the
    /// buffer's own stream (`cuMemHostAlloc`, then a host `memset`).
    ///
    /// # Errors
    /// [`Error::Cuda`] from `cuEventCreate` or `cuMemHostAlloc` (out of page-locked memory).
    pub fn zeros(stream: &Arc<CudaStream>, len: usize) -> Result<Self, Error>
    where
        T: ValidAsZeroBits,
    {
        let b = Self::alloc(stream, len)?;
        // SAFETY: `len` elements were allocated; all-zero bits are a valid `T`.
        unsafe { core::ptr::write_bytes(b.ptr.as_ptr(), 0, len) };
        Ok(b)
    }

    /// A copy of `data` in page-locked host memory of `stream`'s context (see [`Self::zeros`]).
    ///
    /// # Errors
    /// As [`Self::zeros`].
    pub fn from_slice(stream: &Arc<CudaStream>, data: &[T]) -> Result<Self, Error>
    where
        T: Copy,
    {
        let b = Self::alloc(stream, data.len())?;
        // SAFETY: `data.len()` elements were allocated; they do not overlap `data`.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), b.ptr.as_ptr(), data.len()) };
        Ok(b)
    }
}

impl<T> PinnedBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer's own stream (the one it was made for).
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.state.home()
    }

    /// The contents, after every use of the buffer by the device so far finished: no wait when
    /// there was none since the last wait, else `cuEventSynchronize` on the event recorded
    /// after the last use (which waits for that work only, not for later work on its stream).
    ///
    /// # Errors
    /// [`Error::Cuda`] from that wait (a kernel faulted; the stream is capturing).
    pub fn as_slice(&self) -> Result<&[T], Error> {
        self.state.wait()?;
        // SAFETY: `len` initialized elements (made by `zeros`/`from_slice`, written since by
        // the host or by device copies of `T`s, which finished: waited for above). No device
        // use can start while the slice lives without a new borrow of `self`, and a shared one
        // only reads.
        Ok(unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The contents, writable, after every use so far finished (as [`Self::as_slice`]).
    ///
    /// # Errors
    /// As [`Self::as_slice`].
    pub fn as_mut_slice(&mut self) -> Result<&mut [T], Error> {
        self.state.wait()?;
        // SAFETY: as in `as_slice`; the borrow is exclusive, so no graph call uses the buffer
        // while the slice lives.
        Ok(unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// A use on `stream` (for [`Acquire`] and [`AcquireMut`]): the memory's context, its
    /// address, its allocation's id and the guard of the use, after ordering it after the
    /// earlier uses. Memory of another context than the stream's gets a null address and a
    /// guard that orders nothing (validation then refuses the call).
    fn use_on<'a>(
        &'a self,
        stream: &'a CudaStream,
        write: bool,
    ) -> (cudarc::driver::sys::CUcontext, *mut c_void, u64, Guard<'a>) {
        let ctx = self.state.home().context().cu_ctx();
        if ctx != stream.context().cu_ctx() {
            return (ctx, core::ptr::null_mut(), 0, no_sync());
        }
        let seen = self.state.order(stream);
        let ptr: *mut c_void = self.ptr.as_ptr().cast();
        let range = (ptr as u64, bytes_of::<T>(self.len));
        (ctx, ptr, self.id, Guard::pinned(&self.state, stream, seen, range, write))
    }
}

impl<T> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let ctx = self.state.home().context().clone();
        // Every device use finished before the memory goes back. When the wait fails (its
        // last record went into a stream capture, the context faulted), a copy may still be
        // pending: the memory is leaked, not freed, and the error recorded in the context, as
        // cudarc's drops record theirs.
        if let Err(e) = self.state.wait() {
            ctx.record_err(Err::<(), _>(e.error));
            return;
        }
        if self.len > 0 && size_of::<T>() > 0 {
            ctx.record_err(ctx.bind_to_thread());
            // SAFETY: allocated by `cuMemHostAlloc` in `alloc`, not freed before; no device
            // use is pending (waited for above) and no slice of it outlives `&mut self`.
            ctx.record_err(unsafe { result::free_host(self.ptr.as_ptr().cast()) });
        }
    }
}

impl<T> sealed::Sealed for PinnedBuffer<T> {}
impl<T> Place for PinnedBuffer<T> {}
impl<T> Acquire for PinnedBuffer<T> {
    type Read<'a>
        = HostRead<'a, T>
    where
        Self: 'a;
    fn acquire<'a>(&'a self, stream: &'a CudaStream) -> (HostRead<'a, T>, Guard<'a>) {
        let (ctx, ptr, id, guard) = self.use_on(stream, false);
        (HostRead::new(ptr.cast_const(), self.len, ctx).with_id(id), guard)
    }
}
impl<T> PlaceMut for PinnedBuffer<T> {}
impl<T> AcquireMut for PinnedBuffer<T> {
    type Write<'a>
        = HostWrite<'a, T>
    where
        Self: 'a;
    fn acquire_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (HostRead<'a, T>, HostWrite<'a, T>, Guard<'a>) {
        let len = self.len;
        let (ctx, ptr, id, guard) = self.use_on(stream, true);
        let read = HostRead::new(ptr.cast_const(), len, ctx).with_id(id);
        (read, HostWrite::new(ptr, len, ctx).with_id(id), guard)
    }
}

/// Review 31: uses of one buffer that overlap (two builders holding it, a call made inside
/// another call's body) must leave the event's last record after both.
#[cfg(test)]
mod review31 {
    use super::PinnedBuffer;

    use crate::operand::Acquire;
    use cudarc::driver::{CudaStream, PinnedHostSlice};
    use std::sync::Arc;

    /// The cudarc-slice tests count `SLICE_WAITS`, the process's: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Two streams of device 0's context and a cudarc pinned slice of 16 elements.
    fn slice_on_two_streams() -> (Arc<CudaStream>, Arc<CudaStream>, PinnedHostSlice<u32>) {
        let ctx = cudarc::driver::CudaContext::new(0).expect("context");
        let (a, b) = (ctx.new_stream().expect("stream"), ctx.new_stream().expect("stream"));
        // SAFETY: only its address is used (no kernel runs on it here).
        let p = unsafe { ctx.alloc_pinned::<u32>(16) }.expect("pinned");
        (a, b, p)
    }

    /// Use 1 ordered on A, use 2 ordered and recorded on B, then use 1 recorded: A waits for
    /// the event (use 2's record) before recording, once; uses that do not overlap wait for
    /// nothing more. Needs a driver: the CPU stub driver (`.ci/stub-driver`, `LD_LIBRARY_PATH`)
    /// or a GPU.
    #[test]
    #[ignore = "needs a CUDA driver (the CPU stub driver is enough)"]
    fn a_use_recorded_after_an_overlapping_one_waits_for_it_first() {
        let ctx = cudarc::driver::CudaContext::new(0).expect("context");
        let (a, b) = (ctx.new_stream().expect("stream"), ctx.new_stream().expect("stream"));
        let pb = PinnedBuffer::<u32>::zeros(&a, 16).expect("pinned");
        let (_, g1) = pb.acquire(&a);
        let (_, g2) = pb.acquire(&b);
        drop(g2);
        assert_eq!(pb.state.late_waits.get(), 0, "use 2 recorded first: nothing in between");
        drop(g1);
        assert_eq!(pb.state.late_waits.get(), 1, "use 1 waits for use 2's record");
        for s in [&a, &b, &a] {
            let (_, g) = pb.acquire(s);
            drop(g);
        }
        assert_eq!(pb.state.late_waits.get(), 1, "uses one after another: no extra wait");
        let (_, g1) = pb.acquire(&b);
        let (_, g2) = pb.acquire(&a);
        drop(g1);
        drop(g2);
        assert_eq!(pb.state.late_waits.get(), 2, "the other order");
    }

    /// The same with cudarc's `PinnedHostSlice`: every guard of a cudarc pinned slice makes its
    /// stream wait for the slice's event before recording it (review 31b: a plain cudarc use in
    /// between records it without the crate knowing), so overlapping uses in either order keep
    /// the last record after both.
    #[test]
    #[ignore = "needs a CUDA driver (the CPU stub driver is enough)"]
    fn a_cudarc_pinned_slice_use_recorded_after_an_overlapping_one_waits_for_it_first() {
        let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (a, b, p) = slice_on_two_streams();
        let waits = || crate::operand::SLICE_WAITS.load(core::sync::atomic::Ordering::SeqCst);
        let w0 = waits();
        let (_, g1) = p.acquire(&a);
        let (_, g2) = p.acquire(&b);
        drop(g2);
        drop(g1);
        assert_eq!(waits() - w0, 2, "each record waits for the one before");
        let ((_, g1), (_, g2)) = (p.acquire(&b), p.acquire(&a));
        drop(g1);
        drop(g2);
        assert_eq!(waits() - w0, 4, "the other order");
    }

    /// Review 31b: a plain cudarc use of a `PinnedHostSlice` (here `memcpy_htod` on another
    /// stream, which waits for the slice's event and records it) made while a guard of the
    /// crate holds the slice (between `GraphBuilder::read(&p)` and `launch`, or in a `graph!`
    /// scalar) records the event without the crate knowing: the guard's record must still
    /// follow it, or cudarc's `as_mut_slice` waits for the guard's stream only while the plain
    /// copy still reads the slice.
    #[test]
    #[ignore = "needs a CUDA driver (the CPU stub driver is enough)"]
    fn a_cudarc_pinned_slice_used_by_plain_cudarc_inside_a_guard_is_waited_for() {
        let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (a, b, p) = slice_on_two_streams();
        let mut d = b.alloc_zeros::<u32>(16).expect("device");
        let waits = || crate::operand::SLICE_WAITS.load(core::sync::atomic::Ordering::SeqCst);
        let w0 = waits();
        let (_, g1) = p.acquire(&a);
        // Plain cudarc, safe: `b` waits for the event, copies, records the event on `b`.
        b.memcpy_htod(&p, &mut d).expect("plain cudarc copy");
        drop(g1);
        assert_eq!(waits() - w0, 1, "the guard's stream waits for cudarc's record first");
    }
}

/// Review 33: the own-stream shortcut of [`PinnedState::order`](crate::operand::PinnedState)
/// compares `CudaStream` *objects* (`core::ptr::eq`), but one object can name several streams:
/// cudarc's `per_thread_stream()` is the handle `CU_STREAM_PER_THREAD` (0x2), which the driver
/// reads as the per-thread default stream *of the calling thread*. A `PinnedBuffer` made for
/// such a stream, used on thread 1, then moved (it is `Send`, and so is the `Arc<CudaStream>`)
/// to thread 2 and used there through the same object, is a use on another stream: it must
/// wait for the event recorded by thread 1's use. The shortcut skips that wait, so thread 2's
/// copy into the buffer runs concurrently with thread 1's (still queued behind a slow kernel),
/// and `as_slice` on thread 2 waits for thread 2's record only: the host reads (and holds a
/// `&[T]` of) memory that thread 1's copy is still going to write. GPU test:
/// `tests/tests/review_session33.rs` `review33_a_pinned_buffer_on_a_per_thread_stream_moved_to_another_thread`.
#[cfg(test)]
mod review33 {
    use super::PinnedBuffer;

    use crate::operand::Acquire;

    /// Same thread, same per-thread stream object: the shortcut is right (one stream), no wait.
    /// Another thread, same object: another stream, which must wait for the event.
    #[test]
    #[ignore = "needs a CUDA driver (the CPU stub driver is enough)"]
    fn a_use_through_a_per_thread_stream_object_on_another_thread_waits_for_the_event() {
        let ctx = cudarc::driver::CudaContext::new(0).expect("context");
        let s = ctx.per_thread_stream();
        let pb = PinnedBuffer::<u32>::zeros(&s, 16).expect("pinned");
        // Use 1, on this thread's per-thread stream; recorded there.
        drop(pb.acquire(&s).1);
        // Use 2 on this thread again: the same stream, no wait needed.
        drop(pb.acquire(&s).1);
        assert_eq!(pb.state.order_waits.get(), 0, "one thread's per-thread stream: no wait");
        // Use 3, on another thread, through the same stream object.
        let waits = std::thread::scope(|sc| {
            sc.spawn(|| {
                let pb = pb;
                let before = pb.state.order_waits.get();
                drop(pb.acquire(&s).1);
                pb.state.order_waits.get() - before
            })
            .join()
            .expect("thread 2")
        });
        assert_eq!(
            waits, 1,
            "a use on thread 2's per-thread stream (same `CudaStream` object as thread 1's use, \
             another stream for the driver) skipped its wait for thread 1's use"
        );
    }
}
