//! Stream capture (issue 13): a closure's stream work on listed device buffers, recorded into a
//! [`Graph`] that borrows those buffers, then instantiated ([`Exec`]), launched and updated.
//!
//! # Keeping cudarc's events out of the capture
//!
//! With cudarc's defaults (event tracking on, more than one stream in the context: cudarc then
//! "manages stream synchronization"), every cudarc call on a buffer makes the stream wait for
//! the buffer's last write (and read) event. Inside a capture, a wait on an event recorded
//! *outside* the capture fails with `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` and invalidates the
//! capture. So [`capture`]:
//! 1. acquires each listed operand on the stream *before* `cuStreamBeginCapture` (the waits
//!    happen outside the capture), keeping the [`Guard`]s, which record the buffers' events when
//!    dropped, until after the capture ended;
//! 2. makes for each operand an *alias*: a `CudaSlice<T>` over the same memory
//!    (`CudaStream::upgrade_device_ptr`), with fresh events that nothing outside recorded, which
//!    is never freed (its drop calls `CudaSlice::leak`);
//! 3. hands the closure views of the aliases, so that cudarc's waits and records inside the
//!    capture concern only the aliases' events;
//! 4. after the closure returned (or panicked), drops the aliases *while still capturing*
//!    (`leak` waits on their events, which are then capture-internal), then ends the capture.
//!
//! With event tracking off (cudarc then manages nothing, and the aliases have no events) a
//! capture works the same, without cudarc's waits: the crate's methods keep all of the capture's
//! work on one stream ([`Capture::current`]), and [`Capture::fork`], whose second stream only
//! cudarc's events would order, is refused.
//!
//! Driver answers this relies on, measured on an H200 (CUDA 13.0, driver 580.159, cudarc
//! 0.19.10): inside a capture, `cuStreamWaitEvent` on a never-recorded event is accepted (a
//! no-op); on an event recorded before the capture, even on the capturing stream itself, or
//! recorded on another stream during the capture, it fails with
//! `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`; after the capture ended, a wait on an event recorded
//! inside it fails with `CUDA_ERROR_INVALID_VALUE`. Hence fresh aliases, and their leak before
//! the capture ends. `cuGraphGetNodes` with a zero count and a non-null array fails with
//! `CUDA_ERROR_INVALID_VALUE` (an empty capture); the raw queries return early instead.
//!
//! # What is checked, and what is not
//!
//! The [`Graph`] and its [`Exec`] hold the borrows of the listed operands (`&` or `&mut`), so
//! those buffers outlive them and are not written (or, for `&mut`, used at all) elsewhere while
//! they exist. Each [`Exec::launch`] orders the graph with every other use of these buffers, on
//! any stream, as `graph!` does (cudarc's events, and the buffers' own streams as a ledger).
//!
//! # Only listed memory is recorded (issue 29)
//!
//! The capture runs on this thread's private origin stream of the context (relaxed mode), which
//! no safe accessor hands out. The user's stream, and any other stream safe code holds, is not
//! part of the capture: work enqueued on it inside the closure runs at once, as plain cudarc
//! (a buffer dropped there is freed, a copy to a `Vec` completes). The closure's views are
//! [`CaptureSlice`]/[`CaptureSliceMut`], whose cudarc `DevicePtr` impls panic on a stream that
//! is not one of the capture's, so they are never used unordered with the buffer's earlier
//! users. Safe code records only through the [`Capture`]'s methods, on listed operands. The
//! user's stream (for a library handle bound to it) and other streams join the capture only
//! through the `unsafe` [`Capture::stream`] and [`Capture::fork`], whose contract says what
//! the work on them may touch; [`Capture::join`] stays safe (a stream outside the capture
//! invalidates it). Kernel nodes added by [`Capture::kernel`] keep their modules loaded for as
//! long as the recording exists.

use core::any::TypeId;
use core::cell::Cell;
use core::ffi::c_void;
use core::fmt;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, Location, catch_unwind, resume_unwind};
use std::path::Path;
use std::sync::Arc;

use cudarc::driver::sys::{
    self, CUcontext, CUdeviceptr, CUgraph, CUgraphExec, CUgraphNode, CUresult,
};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DriverError,
    PinnedHostSlice, SyncOnDrop,
};

use crate::capture_host::{CaptureHostSlice, CaptureHostSliceMut, HostAlias};
use crate::error::{Call, CudaError, Error, NodeSite, Refusal, Result};
use crate::kind::host::with_call_reports;
use crate::kind::kernel::{Kernel, MAX_KERNEL_PARAMS};
use crate::kind::{KernelArgs, KernelLaunch, KernelNode, NodeKind, Reports};
use crate::ledger::Ledger;
use crate::operand::{Acquire, AcquireMut, BufferArg, DevRead, DevWrite, Guard, NO_BUFFER_ARGS};
use crate::raw;
use crate::session::imp::{self, Acquired, Alias, Held, Listed};
use crate::session::{
    Access, Capture, CaptureSlice, CaptureSliceMut, Kept, KeptBuf, begin_origin, can_capture,
    check_recording, end_origin, idle_origin, make_current, next_capture_id, site_at,
};

impl Capture {
    /// Adds `launch` to the graph being captured as a kernel node (`cuGraphAddNode_v2`,
    /// `CU_GRAPH_NODE_TYPE_KERNEL`), after the stream's current capture dependencies
    /// (`cuStreamGetCaptureInfo_v3`), and makes it the stream's only dependency
    /// (`cuStreamUpdateCaptureDependencies_v2`, `CU_STREAM_SET_CAPTURE_DEPENDENCIES`): the
    /// node runs after the work captured before it on the stream, and the work captured after it
    /// runs after it, as if it had been launched on the stream. The returned [`CapturedKernel`]
    /// names the node for [`Exec::set_kernel`].
    ///
    /// `launch` is a `kernels!` method's call (`k.affine(n, a, b, x, y).launch(cfg)`) whose
    /// buffer arguments are handles from [`read`](Self::read) and [`write`](Self::write) (or any
    /// handle whose memory lies inside a listed operand). Its edges are plain dependencies (the
    /// captured edge data, e.g. programmatic ports, are not carried over: never a weaker
    /// ordering), also for a kernel declared `#[programmatic]` (its wait then does nothing). In
    /// cudarc's multi-stream mode the node also takes part in cudarc's events of the operands it
    /// uses, as a cudarc launch would (the stream waits for the last writer,
    /// and for a written buffer the last reader, before it; the buffer's read or write event is
    /// recorded after it), so that cudarc work on other streams joined into the capture is
    /// ordered with it.
    ///
    /// When the closure runs eagerly ([`is_capturing`](Self::is_capturing) is `false`: a
    /// `capture` statement in [`Mode::Eager`](crate::Mode::Eager)) the kernel is launched on
    /// the stream at once (`cuLaunchKernel`) and the returned handle names no node
    /// ([`CapturedKernel::is_recorded`] is `false`; [`Exec::set_kernel`] refuses it).
    ///
    /// # Errors
    /// All name the kernel and this call's location; nothing was added or launched:
    /// - [`Error::NodeRefused`]: a buffer argument is not inside a listed operand
    ///   ([`Refusal::NotAnOperand`]), is written but inside `&` operands only
    ///   ([`Refusal::ReadOnly`]), or two overlap with a write ([`Refusal::Overlap`]);
    /// - [`Error::WrongContext`]: a buffer of another context than the stream's;
    /// - [`Error::ZeroDims`]: a zero grid or block dimension;
    ///   [`Error::Node`] (`CUDA_ERROR_INVALID_VALUE`): more than [`MAX_KERNEL_PARAMS`]
    ///   arguments (launch limits are the driver's to refuse: `cuGraphAddNode_v2` or
    ///   `cuLaunchKernel` then returns the error);
    /// - [`Error::Node`]: a driver call failed (`cuStreamGetCaptureInfo_v3`; the stream is not
    ///   in this capture any more, e.g. after cudarc's `end_capture` on it; `cuGraphAddNode_v2`;
    ///   `cuStreamWaitEvent`; `cuLaunchKernel` eagerly). A failure after the node was added
    ///   (`cuStreamUpdateCaptureDependencies_v2`, `cuEventRecord`) is returned too, and the
    ///   capture then fails with [`Error::CaptureInvalidated`] naming that call even if the
    ///   closure returns `Ok`: the node's successors are not known.
    #[track_caller]
    pub fn kernel<A: KernelArgs>(&self, launch: KernelLaunch<'_, A>) -> Result<CapturedKernel> {
        let at = Location::caller();
        let site = || site_at(launch.name(), "Capture::kernel", at);
        let k: &dyn KernelNode = &launch;
        Kernel::validate(&k, None, &site)?;
        refuse_conditions(k, &site)?;
        let mut bufs = NO_BUFFER_ARGS;
        let n = launch.buffers(&mut bufs);
        let bufs = &bufs[..n];
        let ctx = self.stream.context();
        if bufs.iter().any(|b| b.ctx != ctx.cu_ctx()) {
            return Err(Error::WrongContext { site: site() });
        }
        let listed: Vec<Access> = self.operands.iter().map(Listed::access).collect();
        let owners =
            check_buffers(bufs, &listed).map_err(|why| Error::NodeRefused { site: site(), why })?;
        let err = |source| Error::Node { site: site(), source };
        make_current(ctx).call("cuCtxSetCurrent").map_err(err)?;
        let managing = ctx.is_managing_stream_synchronization();
        let s = self.current().cu_stream();
        if managing {
            for (b, &o) in bufs.iter().zip(&owners) {
                let op = &self.operands[o];
                let before =
                    if b.write { [op.read_event, op.write_event] } else { [None, op.write_event] };
                for e in before.into_iter().flatten() {
                    // SAFETY: the event is the alias's, alive while the closure runs; the
                    // stream is alive and its context current.
                    unsafe { raw::wait_event(s, e) }.call("cuStreamWaitEvent").map_err(err)?;
                }
            }
        }
        let node = if self.capturing {
            // SAFETY: as above.
            let info = unsafe { raw::stream_capture_info(s) }
                .call("cuStreamGetCaptureInfo_v3")
                .map_err(err)?;
            let active = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
            if info.status != active || Some(info.id) != self.sequence {
                let invalidated = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED;
                let error = if info.status == invalidated {
                    CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                } else {
                    CUresult::CUDA_ERROR_ILLEGAL_STATE
                };
                let call = "cuStreamGetCaptureInfo_v3 (the stream is not in this capture)";
                return Err(err(CudaError { call, error: DriverError(error) }));
            }
            // SAFETY: the graph is the one this capture is recording (same sequence, active),
            // `deps` are its nodes, the context is current; the parameters were validated and
            // every buffer argument lies inside a listed operand (checked above), which the
            // resulting `Graph` borrows (or, for a `capture` statement, the `graph!` call).
            let node = launch
                .with_node_params(|p| unsafe { raw::add_node(info.graph, &info.deps, &[], p) })
                .call(Kernel::ADD)
                .map_err(err)?;
            // SAFETY: the stream is capturing (checked above) and `node` is of its graph.
            let after = unsafe { raw::stream_set_capture_dependencies(s, &[node]) }
                .call("cuStreamUpdateCaptureDependencies_v2")
                .and_then(|()| self.record_events(bufs, &owners, managing));
            if let Err(source) = after {
                let _ = self.broken.set(source);
                return Err(err(source));
            }
            Some(node)
        } else {
            // SAFETY: validated above; every buffer argument lies inside a listed operand,
            // which the `graph!` call borrows until the work it enqueued is ordered before any
            // later use (its guards).
            unsafe { Kernel::eager(&k, self.current(), &Default::default(), &site) }?;
            self.record_events(bufs, &owners, managing).map_err(err)?;
            None
        };
        self.functions.borrow_mut().push(launch.function().clone());
        Ok(CapturedKernel {
            node,
            capture: self.id,
            function: launch.function().clone(),
            arg_sizes: launch.arg_sizes().into_boxed_slice(),
            name: launch.name(),
        })
    }

    /// After a kernel of [`kernel`](Self::kernel): records each buffer argument's cudarc event
    /// (read or write) on the stream, as cudarc does after a launch (multi-stream mode only).
    fn record_events(
        &self,
        bufs: &[BufferArg],
        owners: &[usize],
        managing: bool,
    ) -> Result<(), CudaError> {
        if !managing {
            return Ok(());
        }
        for (b, &o) in bufs.iter().zip(owners) {
            let op = &self.operands[o];
            if let Some(e) = if b.write { op.write_event } else { op.read_event } {
                // SAFETY: the event is the alias's, alive while the closure runs; the stream is
                // alive and its context current.
                unsafe { raw::record_event(e, self.current().cu_stream()) }
                    .call("cuEventRecord")?;
            }
        }
        Ok(())
    }
}

/// A kernel node of a capture (or set on its exec) may not take a device condition: no
/// conditional node of the recording drives it, so the kernel would get no handle.
fn refuse_conditions(k: &dyn KernelNode, site: &dyn Fn() -> NodeSite) -> Result<()> {
    let mut any = false;
    k.for_each_condition(&mut |_, _, _| any = true);
    if any {
        let why = "a captured kernel node cannot take a device condition (`Condition`): no \
                   conditional node of the recording gives it a handle"
            .into();
        return Err(Error::InvalidNode { site: site(), why });
    }
    Ok(())
}

/// For each buffer argument, the index of the operand it lies in: one whose range contains the
/// argument's, and that is written where the argument is; and no two arguments overlap where
/// one is written. Pure: the rule of [`Capture::kernel`] and [`Exec::set_kernel`].
pub(crate) fn check_buffers(
    bufs: &[BufferArg],
    operands: &[Access],
) -> Result<[usize; MAX_KERNEL_PARAMS], Refusal> {
    let mut owners = [0; MAX_KERNEL_PARAMS];
    for (owner, b) in owners.iter_mut().zip(bufs) {
        let inside = |o: &Access| {
            b.start >= o.start && b.bytes <= o.bytes && b.start - o.start <= o.bytes - b.bytes
        };
        *owner = match operands.iter().position(|o| inside(o) && (o.write || !b.write)) {
            Some(o) => o,
            None if operands.iter().any(inside) => {
                return Err(Refusal::ReadOnly { arg: Some(b.arg) });
            }
            None => return Err(Refusal::NotAnOperand { arg: Some(b.arg) }),
        };
    }
    let overlap = |a: &BufferArg, b: &BufferArg| {
        a.bytes > 0
            && b.bytes > 0
            && a.start < b.start.saturating_add(b.bytes)
            && b.start < a.start.saturating_add(a.bytes)
    };
    for (j, b) in bufs.iter().enumerate() {
        if let Some(a) = bufs[..j].iter().find(|a| (a.write || b.write) && overlap(a, b)) {
            return Err(Refusal::Overlap { first: a.arg, second: b.arg });
        }
    }
    Ok(owners)
}

/// A kernel node added by [`Capture::kernel`]: which node of which capture, and the kernel's
/// function and argument sizes, so that [`Exec::set_kernel`] can set its parameters on the exec
/// instantiated from that capture's graph. Opaque; it holds no buffer and keeps the kernel's
/// module loaded (a clone of its `CudaFunction`). `Send` and `Sync` (plain identities).
pub struct CapturedKernel {
    /// The node in the capture's graph; `None` when the kernel ran eagerly.
    node: Option<CUgraphNode>,
    /// The capture's number.
    capture: u64,
    function: CudaFunction,
    /// Each argument's size, bytes, in parameter order.
    arg_sizes: Box<[u32]>,
    name: &'static str,
}

// SAFETY: the node handle is only an identity: it is passed to the driver (by
// `Exec::set_kernel`, under the exec's rules) only for the exec instantiated from its graph,
// which keeps that graph alive; nothing is read through it here.
unsafe impl Send for CapturedKernel {}
unsafe impl Sync for CapturedKernel {}

impl CapturedKernel {
    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// `false` when the kernel ran eagerly ([`Mode::Eager`](crate::Mode::Eager)): there is then
    /// no node, and [`Exec::set_kernel`] refuses it.
    pub fn is_recorded(&self) -> bool {
        self.node.is_some()
    }
}

impl fmt::Debug for CapturedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapturedKernel")
            .field("name", &self.name)
            .field("node", &self.node)
            .field("capture", &self.capture)
            .field("arg_sizes", &self.arg_sizes)
            .finish()
    }
}

/// Device memory that can be a [`capture`] operand: `CudaSlice<T>`, `CudaView<'_, T>` or
/// `CudaViewMut<'_, T>`. Device memory only: pinned or pageable host memory cannot be listed,
/// and a captured copy from or to host memory would not be borrowed by the graph; copy host
/// data to a listed device buffer between launches instead ([`Exec::release`], cudarc's
/// `memcpy_htod`, [`Released::bind`]). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a capture operand",
    label = "not device memory",
    note = "capture operands are `&` or `&mut` borrows of `CudaSlice<T>`, `CudaView<'_, T>`, `CudaViewMut<'_, T>` or pinned host memory (`PinnedHostSlice<T>`)"
)]
pub trait DeviceBuffer: imp::Sealed {
    /// The element type.
    type Elem: 'static;
    /// [`Held::acquire`] for reading.
    #[doc(hidden)]
    fn acquire_read<'b>(&'b self, stream: &'b CudaStream) -> Acquired<'b>;
}

/// A [`DeviceBuffer`] that a capture may write: `CudaSlice<T>` or `CudaViewMut<'_, T>`. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be written by a capture",
    label = "not writable device memory",
    note = "operands borrowed `&mut` are `CudaSlice<T>` or `CudaViewMut<'_, T>`"
)]
pub trait DeviceBufferMut: DeviceBuffer {
    /// [`Held::acquire`] for writing.
    #[doc(hidden)]
    fn acquire_write<'b>(&'b mut self, stream: &'b CudaStream) -> Acquired<'b>;
}

macro_rules! device_buffer {
    ($ty:ty) => {
        impl<T: 'static> imp::Sealed for $ty {}
        impl<T: 'static> DeviceBuffer for $ty {
            type Elem = T;
            fn acquire_read<'b>(&'b self, stream: &'b CudaStream) -> Acquired<'b> {
                let (r, guard) = Acquire::acquire(self, stream);
                Acquired { ptr: r.ptr, len: r.len, ctx: r.ctx, guard }
            }
        }
    };
}
macro_rules! device_buffer_mut {
    ($ty:ty) => {
        impl<T: 'static> DeviceBufferMut for $ty {
            fn acquire_write<'b>(&'b mut self, stream: &'b CudaStream) -> Acquired<'b> {
                let (r, _, guard) = AcquireMut::acquire_mut(self, stream);
                Acquired { ptr: r.ptr, len: r.len, ctx: r.ctx, guard }
            }
        }
    };
}
device_buffer!(CudaSlice<T>);
device_buffer!(CudaView<'_, T>);
device_buffer!(CudaViewMut<'_, T>);
device_buffer_mut!(CudaSlice<T>);
device_buffer_mut!(CudaViewMut<'_, T>);

impl<P: DeviceBuffer + Sync + ?Sized> Held for &P {
    fn acquire<'b>(&'b mut self, stream: &'b CudaStream) -> Acquired<'b> {
        (**self).acquire_read(stream)
    }
    fn written(&self) -> bool {
        false
    }
    fn elem(&self) -> TypeId {
        TypeId::of::<P::Elem>()
    }
}

impl<P: DeviceBufferMut + Send + ?Sized> Held for &mut P {
    fn acquire<'b>(&'b mut self, stream: &'b CudaStream) -> Acquired<'b> {
        (**self).acquire_write(stream)
    }
    fn written(&self) -> bool {
        true
    }
    fn elem(&self) -> TypeId {
        TypeId::of::<P::Elem>()
    }
}

/// One operand of [`capture`]: `&buffer` (the closure gets a [`CaptureSlice`]) or `&mut buffer`
/// (a [`CaptureSliceMut`]) of a [`DeviceBuffer`], or `&h` / `&mut h` of a `PinnedHostSlice` (a
/// [`CaptureHostSlice`] / [`CaptureHostSliceMut`]), borrowed for `'a`, the lifetime of the
/// [`Graph`]. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a capture operand",
    label = "not `&buffer` or `&mut buffer` of device or pinned host memory",
    note = "capture operands are `&` or `&mut` borrows of `CudaSlice<T>`, `CudaView<'_, T>`, `CudaViewMut<'_, T>` or pinned host memory (`PinnedHostSlice<T>`)"
)]
pub trait Operand<'a>: imp::Sealed {
    /// The element type.
    type Elem: 'static;
    /// What the closure gets for it: `CaptureSlice<'s, Elem>` or `CaptureSliceMut<'s, Elem>`
    /// (device memory), `CaptureHostSlice<'s, Elem>` or `CaptureHostSliceMut<'s, Elem>` (pinned
    /// host memory).
    type View<'s>;
    /// What the view is made of while the closure runs (see `CaptureOperand::Alias`).
    #[doc(hidden)]
    type Alias;
    /// The borrow, as the graph holds it.
    #[doc(hidden)]
    fn into_held(self) -> Box<dyn Held + 'a>;
    /// The operand's alias over its acquired memory.
    ///
    /// # Safety
    /// As [`Operands::aliases`], for this operand.
    #[doc(hidden)]
    unsafe fn alias(stream: &Arc<CudaStream>, acquired: &Acquired<'_>) -> Self::Alias;
    /// What the [`Capture`] knows of a device operand (`None` for pinned host memory).
    #[doc(hidden)]
    fn listed(alias: &mut Self::Alias, stream: &CudaStream, written: bool) -> Option<Listed>;
    /// The closure's view of the operand's alias.
    #[doc(hidden)]
    fn view<'s>(alias: &'s mut Self::Alias, cap: &'s Capture) -> Self::View<'s>;
}

impl<P: DeviceBuffer + Sync + ?Sized> imp::Sealed for &P {}
impl<'a, P: DeviceBuffer + Sync + ?Sized + 'a> Operand<'a> for &'a P {
    type Elem = P::Elem;
    type View<'s> = CaptureSlice<'s, P::Elem>;
    type Alias = Alias<P::Elem>;
    fn into_held(self) -> Box<dyn Held + 'a> {
        Box::new(self)
    }
    unsafe fn alias(stream: &Arc<CudaStream>, a: &Acquired<'_>) -> Alias<P::Elem> {
        // SAFETY: the caller's contract.
        unsafe { Alias::new(stream, a.ptr, a.len) }
    }
    fn listed(alias: &mut Alias<P::Elem>, stream: &CudaStream, written: bool) -> Option<Listed> {
        Some(alias.listed(stream, written))
    }
    fn view<'s>(alias: &'s mut Alias<P::Elem>, cap: &'s Capture) -> CaptureSlice<'s, P::Elem> {
        alias.view(cap)
    }
}

impl<P: DeviceBufferMut + Send + ?Sized> imp::Sealed for &mut P {}
impl<'a, P: DeviceBufferMut + Send + ?Sized + 'a> Operand<'a> for &'a mut P {
    type Elem = P::Elem;
    type View<'s> = CaptureSliceMut<'s, P::Elem>;
    type Alias = Alias<P::Elem>;
    fn into_held(self) -> Box<dyn Held + 'a> {
        Box::new(self)
    }
    unsafe fn alias(stream: &Arc<CudaStream>, a: &Acquired<'_>) -> Alias<P::Elem> {
        // SAFETY: the caller's contract.
        unsafe { Alias::new(stream, a.ptr, a.len) }
    }
    fn listed(alias: &mut Alias<P::Elem>, stream: &CudaStream, written: bool) -> Option<Listed> {
        Some(alias.listed(stream, written))
    }
    fn view<'s>(alias: &'s mut Alias<P::Elem>, cap: &'s Capture) -> CaptureSliceMut<'s, P::Elem> {
        alias.view_mut(cap)
    }
}

impl<T> imp::Sealed for &PinnedHostSlice<T> {}
impl<T> imp::Sealed for &mut PinnedHostSlice<T> {}

impl<T: 'static> Held for &PinnedHostSlice<T> {
    fn acquire<'b>(&'b mut self, stream: &'b CudaStream) -> Acquired<'b> {
        let (r, guard) = Acquire::acquire(*self, stream);
        Acquired { ptr: r.ptr as usize as CUdeviceptr, len: r.len, ctx: r.ctx, guard }
    }
    fn written(&self) -> bool {
        false
    }
    fn elem(&self) -> TypeId {
        TypeId::of::<T>()
    }
    fn device(&self) -> bool {
        false
    }
}

impl<T: 'static> Held for &mut PinnedHostSlice<T> {
    fn acquire<'b>(&'b mut self, stream: &'b CudaStream) -> Acquired<'b> {
        let (r, _, guard) = AcquireMut::acquire_mut(*self, stream);
        Acquired { ptr: r.ptr as usize as CUdeviceptr, len: r.len, ctx: r.ctx, guard }
    }
    fn written(&self) -> bool {
        true
    }
    fn elem(&self) -> TypeId {
        TypeId::of::<T>()
    }
    fn device(&self) -> bool {
        false
    }
}

/// `&h` of pinned host memory: the closure gets a [`CaptureHostSlice`].
impl<'a, T: 'static> Operand<'a> for &'a PinnedHostSlice<T> {
    type Elem = T;
    type View<'s> = CaptureHostSlice<'s, T>;
    type Alias = HostAlias<T>;
    fn into_held(self) -> Box<dyn Held + 'a> {
        Box::new(self)
    }
    unsafe fn alias(_: &Arc<CudaStream>, a: &Acquired<'_>) -> HostAlias<T> {
        HostAlias::of(a.ptr as usize as *mut c_void, a.len, a.ctx)
    }
    fn listed(_: &mut HostAlias<T>, _: &CudaStream, _: bool) -> Option<Listed> {
        None
    }
    fn view<'s>(alias: &'s mut HostAlias<T>, cap: &'s Capture) -> CaptureHostSlice<'s, T> {
        alias.view(cap)
    }
}

/// `&mut h` of pinned host memory: the closure gets a [`CaptureHostSliceMut`].
impl<'a, T: 'static> Operand<'a> for &'a mut PinnedHostSlice<T> {
    type Elem = T;
    type View<'s> = CaptureHostSliceMut<'s, T>;
    type Alias = HostAlias<T>;
    fn into_held(self) -> Box<dyn Held + 'a> {
        Box::new(self)
    }
    unsafe fn alias(_: &Arc<CudaStream>, a: &Acquired<'_>) -> HostAlias<T> {
        HostAlias::of(a.ptr as usize as *mut c_void, a.len, a.ctx)
    }
    fn listed(_: &mut HostAlias<T>, _: &CudaStream, _: bool) -> Option<Listed> {
        None
    }
    fn view<'s>(alias: &'s mut HostAlias<T>, cap: &'s Capture) -> CaptureHostSliceMut<'s, T> {
        alias.view_mut(cap)
    }
}

/// The operands of [`capture`]: a tuple of 0 to 6 [`Operand`]s (`()`, `(&a,)`,
/// `(&a, &mut b)`, …). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tuple of capture operands",
    label = "expected a tuple of 0 to 6 `&buffer` / `&mut buffer` of device or pinned host memory",
    note = "write one operand as `(&x,)`, with the comma"
)]
pub trait Operands<'a>: imp::Sealed {
    /// The closure's views, one per operand, in order: `CaptureSlice<'s, T>` for `&` operands,
    /// `CaptureSliceMut<'s, T>` for `&mut` operands.
    type Views<'s>;
    /// The aliases, one per operand.
    #[doc(hidden)]
    type Aliases;
    /// The borrows, as the graph holds them, in order.
    #[doc(hidden)]
    fn into_held(self) -> Vec<Box<dyn Held + 'a>>;
    /// One alias per acquired operand, in order.
    ///
    /// # Safety
    /// `acquired` are the operands of this tuple, in order, acquired on `stream`, of its
    /// context, and stay borrowed for as long as the aliases live.
    #[doc(hidden)]
    unsafe fn aliases(stream: &Arc<CudaStream>, acquired: &[Acquired<'_>]) -> Self::Aliases;
    /// The closure's views of the aliases.
    #[doc(hidden)]
    fn views<'s>(aliases: &'s mut Self::Aliases, cap: &'s Capture) -> Self::Views<'s>;
    /// What the [`Capture`] knows of each device operand, in order (`written[i]`: operand `i`
    /// is `&mut`; pinned host operands are left out).
    #[doc(hidden)]
    fn listed(aliases: &mut Self::Aliases, stream: &CudaStream, written: &[bool]) -> Vec<Listed>;
}

macro_rules! operands {
    ($($o:ident $i:tt),*) => {
        impl<$($o),*> imp::Sealed for ($($o,)*) {}
        impl<'a, $($o: Operand<'a>),*> Operands<'a> for ($($o,)*) {
            type Views<'s> = ($($o::View<'s>,)*);
            type Aliases = ($($o::Alias,)*);
            fn into_held(self) -> Vec<Box<dyn Held + 'a>> {
                vec![$(self.$i.into_held()),*]
            }
            #[allow(unused_variables, clippy::unused_unit)]
            unsafe fn aliases(stream: &Arc<CudaStream>, acquired: &[Acquired<'_>]) -> Self::Aliases {
                // SAFETY: the caller's contract, operand by operand.
                ($(unsafe { $o::alias(stream, &acquired[$i]) },)*)
            }
            #[allow(unused_variables, clippy::unused_unit)]
            fn views<'s>(aliases: &'s mut Self::Aliases, cap: &'s Capture) -> Self::Views<'s> {
                ($($o::view(&mut aliases.$i, cap),)*)
            }
            #[allow(unused_variables, unused_mut)]
            fn listed(
                aliases: &mut Self::Aliases,
                stream: &CudaStream,
                written: &[bool],
            ) -> Vec<Listed> {
                let mut listed = Vec::new();
                $(listed.extend($o::listed(&mut aliases.$i, stream, written[$i]));)*
                listed
            }
        }
    };
}
operands!();
operands!(A 0);
operands!(A 0, B 1);
operands!(A 0, B 1, C 2);
operands!(A 0, B 1, C 2, D 3);
operands!(A 0, B 1, C 2, D 3, E 4);
operands!(A 0, B 1, C 2, D 3, E 4, F 5);

/// The allocation id ([`raw::buffer_id`]) of each pinned host operand at its acquired address,
/// 0 for device memory. The driver resolves a host address when a memcpy node is made and keeps
/// what it resolved (`kind/memcpy.rs`, `host_side`): a graph whose host copies were recorded
/// with one pinned buffer must not be launched on another one allocated at the same address
/// (after [`Released::bind`]), so the ids must match too. (A driver that cannot say gives 0
/// both times.)
fn host_buffers(devices: &[bool], accesses: &[Access]) -> Vec<u64> {
    devices
        .iter()
        .zip(accesses)
        .map(|(&d, a)| if d || a.bytes == 0 { 0 } else { raw::buffer_id(a.start) })
        .collect()
}

/// A driver error of a graph as a whole, at `file:line`.
fn graph_error(file: &'static str, line: u32, call: &'static str, error: DriverError) -> Error {
    Error::Graph { file, line, source: CudaError { call, error } }
}

/// Records `f`'s stream work on `operands` into a [`Graph`], by stream capture
/// (`cuStreamBeginCapture_v2` in `CU_STREAM_CAPTURE_MODE_RELAXED` on a private stream of the
/// crate's, `cuStreamEndCapture`).
///
/// `operands` is a tuple of 0 to 6 borrows of device buffers (`CudaSlice<T>`, `CudaView<'_, T>`,
/// `CudaViewMut<'_, T>`) or pinned host buffers (`PinnedHostSlice<T>`): `&x` for buffers the
/// work only reads, `&mut x` for buffers it writes. `f` gets the [`Capture`] and, in the same
/// order, a [`CaptureSlice`] of each `&` device operand and a [`CaptureSliceMut`] of each `&mut`
/// one, a [`CaptureHostSlice`] / [`CaptureHostSliceMut`] of each pinned one, by value: they
/// cannot leave the closure. Host views serve [`Capture::copy_htod`], [`Capture::copy_dtoh`]
/// and [`Capture::host`] (docs/capture.md, "Host work inside a capture"). The returned graph holds the borrows of `operands` (so they outlive it,
/// and its [`Exec`]) and the modules of its explicit kernel nodes, and is run by
/// [`instantiate`](Graph::instantiate) and [`Exec::launch`].
///
/// What `f` records: in safe code, only work on the listed operands, through the capture's
/// methods ([`Capture::copy`], [`Capture::zero`], [`Capture::kernel`], [`Capture::copy_htod`],
/// [`Capture::copy_dtoh`], [`Capture::host`]). Library calls
/// (cuBLAS, cuFFT, NCCL) and cudarc launches go on the call's stream, which joins the capture
/// through the `unsafe` [`Capture::stream`] (its contract: SAFETY.md, "Captured work"). Safe
/// code that uses `stream` (or any other stream) without joining it runs at once, as outside a
/// capture, and a view used on such a stream panics: nothing the crate did not list can enter
/// the recording. A value moved into `f` and dropped there is freed (or unloaded) at once, not
/// captured.
///
/// The views are views of aliases of the operands' memory with events of their own, so cudarc's
/// stream synchronization (its events, in multi-stream mode) works inside the capture: before
/// the capture begins, `stream` waits for the operands' earlier users, outside the capture;
/// inside, cudarc's waits concern only the aliases (see the module docs in `capture.rs`).
///
/// `f` lives as long as the graph (`F: 'a`): everything it borrows stays borrowed while the graph
/// and its exec may replay the recording. A value the closure hands out (an explicit node's
/// [`CapturedKernel`]) goes through a shared cell (`std::cell::OnceCell`) declared before it.
///
/// `f` returns `Result<(), E>` for any `E` that converts into `Box<dyn Error + Send + Sync>`:
/// every `std::error::Error + Send + Sync + 'static` type, so cudarc's `DriverError`,
/// `CublasError` and `NvrtcError` and this crate's [`Error`] as they are, and `String` or
/// `&str`. The bound keeps `Send + Sync` because `f`'s error is kept in [`Error::Capture`], and
/// [`Error`] must stay `Send + Sync` so that callers can move it across threads and return it
/// through `?` as `Box<dyn Error + Send + Sync>` or `anyhow::Error`; an error that is not (a
/// `Box<dyn Error>`, one holding an `Rc`) is refused at compile time: turn it into its message,
/// `.map_err(|e| e.to_string())`. A closure using `?` on several error types needs one `E`,
/// named in its last expression: `Ok::<(), cudagraph::Error>(())` takes the crate's errors and
/// cudarc's `DriverError` (`From<DriverError>`), `Ok::<(), Box<dyn std::error::Error + Send +
/// Sync>>(())` any mix (cuBLAS's with the driver's). cudarc's `NcclError` implements no
/// `std::error::Error`: map it (`.map_err(|e| format!("{e:?}"))`).
///
/// # Errors
/// All name this call's source location, and after each the capture has ended, no graph is
/// kept and `stream` is usable:
/// - [`Error::Capture`]: `f` returned an error, and the capture was not invalidated or, if it
///   was, neither cudarc nor `f` reported a driver error (`f`'s own error is then kept);
/// - [`Error::CaptureInvalidated`]: the driver invalidated the capture (a call inside `f` that
///   cannot be captured, such as `stream.synchronize()`, a wait on an event recorded outside the
///   capture, a view used on a stream outside the capture, a stream forked and not joined
///   back). Its source is the first that exists of: the error cudarc recorded in the context
///   instead of returning it during `f` or the aliases' drop (its waits on buffer events; e.g.
///   `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, taken out of the context), the
///   driver error `f` returned (a `DriverError`, [`CudaError`] or [`Error::Cuda`]), and
///   `cuStreamEndCapture`'s error;
/// - [`Error::Graph`]: `stream` is already capturing, is a stream that cannot capture (the
///   legacy default stream: use one from `ctx.new_stream()`), the recording kept memory it
///   allocated while captured past the closure, or freed memory it did not allocate (see
///   [`Capture::stream`]), an operand belongs to another context than
///   `stream`, or a driver call failed (`cuStreamIsCapturing`, `cuStreamBeginCapture`).
///
/// After an invalidated capture, `capture` synchronizes the context (`cuCtxSynchronize`), so
/// that nothing `f` enqueued outside the capture still runs on the operands when their borrows
/// end.
///
/// # Panics
/// A panic in `f` ends the capture, destroys what was recorded and continues unwinding; the
/// stream and the buffers are then usable.
///
/// # Example
/// ```no_run
/// use cudagraph::cudarc::driver::{LaunchConfig, PushKernelArg};
///
/// # fn main() -> cudagraph::Result<()> {
/// # let src = "";
/// let ctx = cudagraph::context(0)?;
/// let stream = ctx.new_stream()?;
/// let module = ctx.load_module(cudagraph::cudarc::nvrtc::compile_ptx(src)?)?;
/// let scale = module.load_function("scale")?;
/// let n = 1024u32;
/// let x = stream.clone_htod(&vec![1.0f32; n as usize])?;
/// let mut y = stream.alloc_zeros::<f32>(n as usize)?;
/// let graph = cudagraph::capture(&stream, (&x, &mut y), |s, (x, mut y)| {
///     s.zero(&mut y)?; // safe: a memset node of a listed operand
///     // SAFETY: `scale(n, x, y)` reads n elements of x and writes n of y, the listed views;
///     // the module outlives the graph; nothing else uses `stream` while `f` runs.
///     unsafe {
///         let mut launch = s.stream().launch_builder(&scale);
///         launch.arg(&n).arg(x.as_cuda_view()).arg(y.as_cuda_view_mut());
///         launch.launch(LaunchConfig::for_num_elems(n))?;
///     }
///     Ok::<(), cudagraph::Error>(())
/// })?;
/// let mut exec = graph.instantiate()?;
/// for _ in 0..10 {
///     exec.launch(&stream)?; // waits for earlier writers of x and y; later users wait for it
/// }
/// drop(exec); // ends the borrows of x and y
/// let y = stream.clone_dtoh(&y)?;
/// # Ok(()) }
/// ```
#[track_caller]
pub fn capture<'a, Ops, F, E>(stream: &Arc<CudaStream>, operands: Ops, f: F) -> Result<Graph<'a>>
where
    Ops: Operands<'a>,
    F: for<'s> FnOnce(&'s Capture, Ops::Views<'s>) -> Result<(), E> + 'a,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let at = Location::caller();
    let (file, line) = (at.file(), at.line());
    let err = |call, error| graph_error(file, line, call, error);
    let ctx = stream.context();
    ctx.bind_to_thread().map_err(|e| err("cuCtxSetCurrent", e))?;
    // SAFETY: the stream is alive (borrowed) and its context current.
    unsafe { can_capture(stream) }.map_err(|(call, e)| err(call, e))?;
    let mut held = operands.into_held();
    let id = next_capture_id();
    let reports = Arc::<Reports>::default();
    let (functions, kept);
    let (result, end, accesses, recorded, broken) = {
        // Outside the capture: `stream` waits for the operands' earlier users. The guards record
        // the operands' events when dropped, after the capture ended (harmless then: nothing ran).
        let acquired: Vec<Acquired<'_>> = held.iter_mut().map(|h| h.acquire(stream)).collect();
        if acquired.iter().any(|a| a.ctx != ctx.cu_ctx()) {
            let error = DriverError(CUresult::CUDA_ERROR_INVALID_CONTEXT);
            let call =
                "cuStreamBeginCapture (an operand belongs to another context than the stream)";
            return Err(err(call, error));
        }
        // Made before the capture begins: `upgrade_device_ptr` creates events and panics if it
        // cannot, and a panic here leaves no capture behind.
        // SAFETY: each alias covers exactly the memory of its operand (pointer and length as
        // acquired, of `stream`'s context: checked above), which `held` keeps borrowed for as
        // long as `acquired` lives, and so for longer than `aliases` (dropped below, before
        // `acquired`). An alias is never freed (its drop leaks it), and never outlives the
        // borrow. The closure gets only views of the aliases, by value, for a lifetime `'s` it
        // must accept for any `'s` (`for<'s>`): they cannot be kept past the closure, nor can the
        // aliases be swapped out.
        let origin = idle_origin(ctx).map_err(|e| {
            err("cuStreamCreate / cuStreamIsCapturing (capture origin; a capture inside another capture's closure on this thread is refused)", e)
        })?;
        // On the origin: the capture runs there, and the user's stream (which safe code holds)
        // stays out of it unless the closure joins it (`Capture::stream`, `unsafe`).
        let mut aliases = unsafe { Ops::aliases(origin.stream(), &acquired) };
        // Also before the capture: what the `Capture` knows of each operand for its explicit
        // nodes (the aliases' memory, identities and events).
        let written: Vec<bool> = acquired.iter().map(|a| a.guard.write).collect();
        let listed = Ops::listed(&mut aliases, origin.stream(), &written);
        // SAFETY: the origin is this thread's own, alive and not capturing; its context current.
        unsafe { begin_origin(&origin) }.map_err(|e| err("cuStreamBeginCapture", e))?;
        let cap = Capture::new(origin.stream().clone(), stream.clone(), true, listed, id, &[]);
        cap.allow_keep();
        // Host functions the closure records (`Capture::host`) report their panics to the graph.
        // SAFETY: `reports` (an `Arc`) lives until the end of this function.
        let result = unsafe {
            with_call_reports(Arc::as_ptr(&reports), || {
                catch_unwind(AssertUnwindSafe(|| f(&cap, Ops::views(&mut aliases, &cap))))
            })
        };
        let broken = cap.broken();
        // What cudarc recorded instead of returning it (its waits on buffer events) during the
        // closure: a wait that invalidated the capture, say. Taken out here (cudarc's next call
        // would return it) and put back below unless it explains an invalidated capture.
        let recorded = ctx.check_err().err();
        // Still capturing: the aliases' `leak` waits on their events, recorded (if at all)
        // inside this capture. In a capture invalidated before, these waits fail with
        // `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, a consequence: dropped.
        drop(aliases);
        let invalidated = CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        let recorded = recorded.or(ctx.check_err().err().filter(|e| e.0 != invalidated));
        let _ = ctx.bind_to_thread();
        let joined = cap.joined_user().then_some(&**stream);
        functions = cap.take_functions();
        kept = cap.take_kept();
        drop(cap);
        // SAFETY: this thread began the capture on `origin` (and joined `stream` if `joined`),
        // both alive. The capture ends whatever the result.
        let end = unsafe { end_origin(&origin, joined) };
        let accesses = acquired.iter().map(Access::of).collect::<Vec<_>>();
        drop(acquired);
        (result, end, accesses, recorded, broken)
    };
    let destroy = |graph| {
        // SAFETY: `graph` came from this capture and is not used afterwards.
        ctx.record_err(unsafe { raw::graph_destroy(graph) })
    };
    // The cause of an invalidated capture: what cudarc recorded during the closure.
    let recorded_cause = |recorded: Option<DriverError>| {
        let call = "a cudarc call inside the capture (recorded by cudarc)";
        recorded.map(|error| CudaError { call, error })
    };
    if end.is_err() {
        // Work the closure enqueued on streams outside the capture (a view used on another
        // stream, which invalidates the capture in multi-stream mode) finishes before the
        // borrows end.
        ctx.record_err(ctx.synchronize());
    }
    match (result, end) {
        (Err(panic), end) => {
            end.map(destroy).ok();
            ctx.record_err(recorded.map_or(Ok(()), Err));
            resume_unwind(panic)
        }
        (Ok(Err(e)), Ok(graph)) => {
            destroy(graph);
            ctx.record_err(recorded.map_or(Ok(()), Err));
            Err(Error::Capture { file, line, source: e.into() })
        }
        (Ok(Err(e)), Err(_)) => Err(match recorded_cause(recorded).ok_or(e.into()) {
            Ok(source) => Error::CaptureInvalidated { file, line, source },
            Err(e) => match driver_error(e) {
                Ok(source) => Error::CaptureInvalidated { file, line, source },
                Err(source) => Error::Capture { file, line, source },
            },
        }),
        (Ok(Ok(())), Ok(raw)) => {
            ctx.record_err(recorded.map_or(Ok(()), Err));
            if let Some(source) = broken {
                // An explicit node whose successors could not be set: unusable.
                destroy(raw);
                return Err(Error::CaptureInvalidated { file, line, source });
            }
            let kept_at: Vec<CUdeviceptr> = kept.iter().map(|k| k.ptr).collect();
            let memory = match check_recording(raw, &kept_at) {
                Ok(memory) => memory,
                Err(why) => {
                    destroy(raw);
                    let error = DriverError(CUresult::CUDA_ERROR_NOT_SUPPORTED);
                    return Err(graph_error(file, line, why, error));
                }
            };
            let elems = held.iter().map(|h| h.elem()).collect();
            let devices: Vec<bool> = held.iter().map(|h| h.device()).collect();
            let buffers = host_buffers(&devices, &accesses);
            let ctx = ctx.clone();
            let handle = GraphHandle {
                raw,
                ctx,
                accesses,
                elems,
                devices,
                buffers,
                file,
                line,
                id,
                functions,
                reports,
                memory: memory.any(),
                kept,
                stream: stream.clone(),
            };
            Ok(Graph { handle, operands: held })
        }
        (Ok(Ok(())), Err(error)) => {
            let source =
                recorded_cause(recorded).unwrap_or(CudaError { call: "cuStreamEndCapture", error });
            Err(Error::CaptureInvalidated { file, line, source })
        }
    }
}

/// The driver error that the closure of an invalidated capture returned, if its error is one
/// (a `DriverError`, a [`CudaError`] or an [`Error::Cuda`]); else its own error back.
fn driver_error(
    source: Box<dyn std::error::Error + Send + Sync>,
) -> Result<CudaError, Box<dyn std::error::Error + Send + Sync>> {
    let source = match source.downcast::<DriverError>() {
        Ok(error) => {
            return Ok(CudaError { call: "a driver call inside the capture", error: *error });
        }
        Err(other) => other,
    };
    let source = match source.downcast::<CudaError>() {
        Ok(source) => return Ok(*source),
        Err(other) => other,
    };
    match source.downcast::<Error>() {
        Ok(e) => match *e {
            Error::Cuda(source) => Ok(source),
            e => Err(Box::new(e)),
        },
        Err(source) => Err(source),
    }
}

/// The owned `CUgraph` (destroyed on drop), its context, the memory of its operands and where
/// it was captured.
struct GraphHandle {
    raw: CUgraph,
    ctx: Arc<CudaContext>,
    accesses: Vec<Access>,
    /// The operands' element types, in order: a later binding must have the same.
    elems: Vec<TypeId>,
    /// Whether each operand is device memory (else pinned host memory), in order: a later
    /// binding must have the same.
    devices: Vec<bool>,
    /// The allocation id of each pinned host operand (0 for device memory): a later binding
    /// must have the same allocation, not another one at the same address (see
    /// [`host_buffers`]).
    buffers: Vec<u64>,
    /// Where the panics of the graph's host functions go ([`Capture::host`]): returned by the
    /// next [`Exec::launch`].
    reports: Arc<Reports>,
    /// The capture's number (see [`next_capture_id`]).
    id: u64,
    /// Where the `capture` call is.
    file: &'static str,
    line: u32,
    /// The functions of the kernel nodes added by [`Capture::kernel`]: their modules stay
    /// loaded while the graph (and so its execs) exists. Dropped after the graph.
    #[allow(dead_code)] // held for its drop only
    functions: Vec<CudaFunction>,
    /// The recording has memory allocation nodes (what the closure allocated while captured).
    memory: bool,
    /// The outputs the closure kept ([`Capture::keep`]), in order.
    kept: Vec<KeptBuf>,
    /// The `capture` call's stream: the kept outputs' own stream (see [`ExecHandle`]).
    stream: Arc<CudaStream>,
}

// SAFETY: the graph handle is owned (no other copy) and every driver call on it goes through
// this value, so moving it to another thread moves all access with it. Not `Sync` (the raw
// handle is not): CUDA graph objects are not internally synchronized, even for queries.
unsafe impl Send for GraphHandle {}

impl Drop for GraphHandle {
    fn drop(&mut self) {
        // SAFETY: owned, alive, not used afterwards; execs instantiated from it stay valid.
        self.ctx.record_err(unsafe { raw::graph_destroy(self.raw) });
    }
}

impl GraphHandle {
    fn error(&self, call: &'static str, error: DriverError) -> Error {
        graph_error(self.file, self.line, call, error)
    }
}

/// The owned `CUgraphExec` (destroyed on drop) and its context. An exec whose graph has memory
/// nodes waits for its last launch before it is destroyed (`done`): destroying it under a
/// running launch lets the driver take that launch's graph memory back (measured under
/// racecheck for the cache's variants, docs/graph-owned-memory.md). The outputs a closure kept
/// ([`Capture::keep`]) are graph memory that each launch allocates and the next one frees first
/// (`CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`): after a launch the exec owns them, hands
/// them out for reading between launches ([`Exec::output`]), and frees them when dropped.
struct ExecHandle {
    raw: CUgraphExec,
    ctx: Arc<CudaContext>,
    /// Recorded on the launch's stream after each launch of an exec whose graph has memory nodes
    /// (made by the first); null otherwise.
    done: sys::CUevent,
    /// Records `done` after each launch.
    memory: bool,
    /// The kept outputs, in [`Capture::keep`]'s order.
    kept: Vec<KeptBuf>,
    /// A launch allocated the kept outputs, and nothing freed them since.
    live: bool,
    /// A [`KeptOutput`] enqueued work on some stream since the last launch: the next launch
    /// (which frees and writes the outputs) and the drop (which frees them) first wait for the
    /// whole context (`cuCtxSynchronize`), whatever streams the readers used, dropped or not.
    read: Cell<bool>,
}

// SAFETY: as for `GraphHandle`.
unsafe impl Send for ExecHandle {}

/// After a launch on `stream` of an exec with memory nodes (`memory`): records its `done`
/// event, made by the first (the cache's variants' `Driver::record_done`).
fn record_done(
    done: &mut sys::CUevent,
    memory: bool,
    stream: &CudaStream,
) -> Result<(), CudaError> {
    if !memory {
        return Ok(());
    }
    // SAFETY: the context is current (the launch just ran on it), the stream alive; `done` is
    // null or the exec's own event.
    unsafe { raw::Driver::record_done(&mut raw::Cuda, done, stream.cu_stream()) }
        .call("cuEventCreate / cuEventRecord")
}

impl Drop for ExecHandle {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: the event is null or ours and alive, and not used again. The exec's last
        // launch is over after this, so its graph memory is not taken back from under it.
        unsafe { raw::Driver::wait_done(&mut raw::Cuda, self.done, true) };
        if self.live {
            // The outputs' readers are over after this (or the memory is leaked, never freed
            // under them).
            let readers_done = !self.read.get() || self.ctx.synchronize().is_ok();
            for k in &self.kept {
                if readers_done {
                    // SAFETY: a graph allocation of this exec that its last launch made and
                    // nothing freed (`live`); that launch and every reader are over (above).
                    // Synchronous, on no stream: it cannot join a capture of the user's.
                    self.ctx.record_err(unsafe { raw::mem_free(k.ptr) });
                }
            }
        }
        // SAFETY: owned, alive, not used afterwards.
        self.ctx.record_err(unsafe { raw::exec_destroy(self.raw) });
    }
}

/// A kept output of an [`Exec`] ([`Exec::output`]), as its last launch left it: `len` elements
/// of `T` of graph memory that the exec owns. It implements cudarc's [`DevicePtr`] and
/// [`DeviceSlice`], so cudarc's copies read it (`stream.clone_dtoh(&out)`,
/// `stream.memcpy_dtod(&out, &mut dst)`) on any stream of the exec's context; the stream first
/// waits for the exec's last launch. It borrows the exec, so no launch can run while it exists,
/// and the next launch (and the exec's drop) waits for the whole context if it was read, so work
/// enqueued on it is over before the memory is freed or written again, whichever stream it
/// used. Not `Send`.
///
/// [`DevicePtr`]: cudarc::driver::DevicePtr
/// [`DeviceSlice`]: cudarc::driver::DeviceSlice
pub struct KeptOutput<'e, T> {
    ptr: CUdeviceptr,
    len: usize,
    done: sys::CUevent,
    ctx: CUcontext,
    read: &'e Cell<bool>,
    stream: &'e Arc<CudaStream>,
    _elem: core::marker::PhantomData<&'e [T]>,
}

impl<T> fmt::Debug for KeptOutput<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeptOutput").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl<T> cudarc::driver::DeviceSlice<T> for KeptOutput<'_, T> {
    fn len(&self) -> usize {
        self.len
    }
    /// The `capture` call's stream.
    fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }
}

impl<T> cudarc::driver::DevicePtr<T> for KeptOutput<'_, T> {
    /// Makes `stream` wait for the exec's last launch (`cuStreamWaitEvent`) and marks the
    /// output read (the next launch and the drop wait for the context). Panics for a stream of
    /// another context than the exec's, which that wait would not cover.
    #[track_caller]
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        assert!(
            stream.context().cu_ctx() == self.ctx,
            "a kept output used on a stream of another context than its exec's"
        );
        self.read.set(true);
        // SAFETY: the event is the exec's (alive: the exec is borrowed), recorded after its last
        // launch; the stream is alive and of its context.
        let waited = stream
            .context()
            .bind_to_thread()
            .and_then(|()| unsafe { raw::wait_event(stream.cu_stream(), self.done) });
        // An error is recorded in the context, as cudarc records its own waits' errors; the
        // read may then run early, but never after the memory is freed or written again.
        stream.context().record_err(waited);
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

/// A captured `CUgraph`, made by [`capture`]; it owns the graph (`cuGraphDestroy` on drop) and
/// holds the borrows of the capture's operands for `'a`, so those buffers outlive it and are not
/// written elsewhere while it exists (nor used at all, for `&mut` operands).
///
/// `Send`, not `Sync`: CUDA graph objects are not internally synchronized, and even its queries
/// must not run on two threads at once.
pub struct Graph<'a> {
    handle: GraphHandle,
    operands: Vec<Box<dyn Held + 'a>>,
}

impl fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.handle;
        f.debug_struct("Graph")
            .field("raw", &h.raw)
            .field("operands", &h.accesses)
            .field("captured_at", &format_args!("{}:{}", h.file, h.line))
            .finish()
    }
}

impl<'a> Graph<'a> {
    /// The number of nodes the capture recorded (`cuGraphGetNodes`).
    ///
    /// # Errors
    /// [`Error::Graph`] (naming the `capture` call) if the driver call fails.
    pub fn nodes(&self) -> Result<usize> {
        let h = &self.handle;
        // SAFETY: the graph is alive while `self` is.
        let nodes =
            unsafe { raw::graph_nodes(h.raw) }.map_err(|e| h.error("cuGraphGetNodes", e))?;
        Ok(nodes.len())
    }

    /// The edges between the nodes, as `(from, to)` indices into the driver's node list (the
    /// order of `cuGraphGetNodes`, stable for an unchanged graph), from `cuGraphGetEdges_v2`.
    ///
    /// # Errors
    /// [`Error::Graph`] (naming the `capture` call) if a driver call fails.
    pub fn edges(&self) -> Result<Vec<(usize, usize)>> {
        let h = &self.handle;
        // SAFETY: the graph is alive while `self` is.
        let nodes =
            unsafe { raw::graph_nodes(h.raw) }.map_err(|e| h.error("cuGraphGetNodes", e))?;
        let edges =
            unsafe { raw::graph_edges(h.raw) }.map_err(|e| h.error("cuGraphGetEdges_v2", e))?;
        let index: HashMap<_, _> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let find = |n| {
            index.get(&n).copied().ok_or_else(|| {
                let call = "cuGraphGetEdges_v2 (an edge's node is not in the node list)";
                h.error(call, DriverError(CUresult::CUDA_ERROR_UNKNOWN))
            })
        };
        edges.into_iter().map(|(from, to, _)| Ok((find(from)?, find(to)?))).collect()
    }

    /// Each node's kind and main parameters and the edges, as the driver reports them (see
    /// [`GraphInfo`](crate::GraphInfo)); node indices as in [`edges`](Self::edges).
    ///
    /// # Errors
    /// [`Error::Graph`] (naming the `capture` call) if a driver call fails.
    pub fn node_info(&self) -> Result<crate::GraphInfo> {
        let h = &self.handle;
        // SAFETY: the graph is alive while `self` is.
        let (_, info) =
            unsafe { crate::introspect::describe(h.raw) }.map_err(|(call, e)| h.error(call, e))?;
        Ok(info)
    }

    /// A copy of the graph (`cuGraphClone`) with lookup of this graph's nodes in it
    /// ([`ClonedGraph::find`](crate::ClonedGraph::find), `cuGraphNodeFindInClone`).
    ///
    /// # Errors
    /// [`Error::Graph`] if the driver refuses.
    pub fn clone_graph(&self) -> Result<crate::ClonedGraph<'_>> {
        let h = &self.handle;
        h.ctx.bind_to_thread().map_err(|e| h.error("cuCtxSetCurrent", e))?;
        // SAFETY: the graph is alive while the clone borrows `self`; its context is current.
        unsafe { crate::ClonedGraph::of(h.raw, (h.file, h.line)) }
    }

    /// Writes the driver's Graphviz DOT of the graph (`cuGraphDebugDotPrint`, verbose) to
    /// `path`, given as the path's own bytes (a non-UTF-8 path is written as given on Unix).
    ///
    /// # Errors
    /// [`Error::Graph`] (naming the `capture` call) if the path contains a NUL byte (or, outside
    /// Unix, is not UTF-8) or the driver cannot write the file.
    pub fn debug_dot_print(&self, path: &Path) -> Result<()> {
        let h = &self.handle;
        let c = raw::dot_path(path)
            .map_err(|why| h.error(why, DriverError(CUresult::CUDA_ERROR_INVALID_VALUE)))?;
        // SAFETY: the graph is alive while `self` is; `c` is NUL-terminated.
        unsafe { raw::debug_dot_print(h.raw, c.as_ptr()) }
            .map_err(|e| h.error("cuGraphDebugDotPrint", e))
    }

    /// Instantiates the graph (`cuGraphInstantiateWithFlags`, no flags) into an [`Exec`], which
    /// takes over the graph and its borrows.
    ///
    /// # Errors
    /// [`Error::Graph`] (naming the `capture` call) if the driver refuses (the graph is
    /// dropped).
    pub fn instantiate(self) -> Result<Exec<'a>> {
        let h = &self.handle;
        h.ctx.bind_to_thread().map_err(|e| h.error("cuCtxSetCurrent", e))?;
        // Kept outputs are allocations the graph does not free: each launch frees the previous
        // launch's first.
        let flags = if h.kept.is_empty() {
            0
        } else {
            sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64
        };
        // SAFETY: the graph is alive and its context current; no upload flag.
        let raw = unsafe { raw::instantiate_with(h.raw, flags, core::ptr::null_mut()) }
            .map_err(|e| h.error("cuGraphInstantiateWithFlags", e))?;
        let (ctx, memory, kept) = (h.ctx.clone(), h.memory, h.kept.clone());
        let done = core::ptr::null_mut();
        let exec = ExecHandle { raw, ctx, done, memory, kept, live: false, read: Cell::new(false) };
        let origin = Origin { id: self.handle.id, graph: None };
        Ok(Exec { exec, graph: self, origin, ledger: Ledger::default() })
    }

    /// The raw graph, owned by `self` (for embedding as a child graph): do not destroy it.
    #[allow(dead_code)] // for child-graph nodes (issue 13)
    pub(crate) fn raw(&self) -> CUgraph {
        self.handle.raw
    }

    /// The context the graph was captured in.
    #[allow(dead_code)] // for child-graph nodes (issue 13)
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.handle.ctx
    }

    /// The operands' memory and accesses, in `capture`'s order.
    #[allow(dead_code)] // for child-graph nodes (issue 13)
    pub(crate) fn accesses(&self) -> &[Access] {
        &self.handle.accesses
    }

    /// Acquires every operand on `stream` (see [`Exec::launch`]) and checks that each is the
    /// memory the graph was captured with, borrowed at least as the capture borrowed it. The
    /// guards must be dropped after the work that uses the graph is enqueued on `stream`.
    pub(crate) fn acquire_operands<'b>(
        &'b mut self,
        stream: &'b CudaStream,
        refused: &'static str,
    ) -> Result<Vec<Acquired<'b>>> {
        let h = &self.handle;
        let elems_same = self.operands.len() == h.elems.len()
            && self.operands.iter().zip(&h.elems).all(|(o, &t)| o.elem() == t)
            && self.operands.iter().zip(&h.devices).all(|(o, &d)| o.device() == d);
        let devices: Vec<bool> = self.operands.iter().map(|o| o.device()).collect();
        let acquired: Vec<_> = self.operands.iter_mut().map(|o| o.acquire(stream)).collect();
        let now: Vec<Access> = acquired.iter().map(Access::of).collect();
        let buffers_same = host_buffers(&devices, &now) == h.buffers;
        let same = elems_same
            && buffers_same
            && acquired.len() == h.accesses.len()
            && acquired.iter().zip(&h.accesses).all(|(a, c)| {
                let now = Access::of(a);
                a.ctx == h.ctx.cu_ctx()
                    && (now.start, now.bytes) == (c.start, c.bytes)
                    && (now.write || !c.write)
            });
        if !same {
            return Err(h.error(refused, DriverError(CUresult::CUDA_ERROR_INVALID_VALUE)));
        }
        Ok(acquired)
    }
}

/// An instantiated captured graph (`CUgraphExec`), made by [`Graph::instantiate`]; it owns the
/// exec (`cuGraphExecDestroy` on drop; launches already enqueued still run) and the [`Graph`]
/// with its borrows, so the buffers it uses outlive it. [`release`](Self::release) ends the
/// borrows for a while (to write an input from the host between launches, say) and
/// [`Released::bind`] takes them again.
///
/// The parameters of a kernel node added by [`Capture::kernel`] can be set on the exec with
/// [`set_kernel`](Self::set_kernel), with buffer handles of the operands it holds from
/// [`read`](Self::read) and [`write`](Self::write).
///
/// `Send`, not `Sync` (CUDA's rule for graph objects: every call that changes the exec takes
/// `&mut self`, except [`set_kernel`](Self::set_kernel), which takes `&self` so that handles
/// borrowed from the exec can be its arguments; not being `Sync`, an exec is still used by one
/// thread at a time).
pub struct Exec<'a> {
    // Dropped first: the exec, then the graph.
    exec: ExecHandle,
    graph: Graph<'a>,
    origin: Origin,
    ledger: Ledger,
}

/// The graph an exec was instantiated from: its capture number (the nodes
/// [`Exec::set_kernel`] accepts) and, once [`Exec::update`] replaced it, the graph itself, kept
/// so that its node handles stay valid (the driver identifies the exec's nodes by them).
struct Origin {
    id: u64,
    graph: Option<GraphHandle>,
}

impl fmt::Debug for Exec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exec").field("exec", &self.exec.raw).field("graph", &self.graph).finish()
    }
}

/// A refused [`Exec::update`]: the error ([`Error::GraphUpdateRefused`], or [`Error::Graph`] for
/// a graph of another context) and the graph, given back with its borrows.
#[derive(Debug)]
pub struct UpdateRefused<'a> {
    /// Why.
    pub error: Error,
    /// The graph that was not taken.
    pub graph: Graph<'a>,
}

impl From<UpdateRefused<'_>> for Error {
    /// The error alone (the graph is dropped), so that `?` works in functions returning
    /// [`Result`].
    fn from(refused: UpdateRefused<'_>) -> Self {
        refused.error
    }
}

impl<'a> Exec<'a> {
    /// Checks that `stream` can take this exec's work: of the exec's context (else `calls[0]`,
    /// `CUDA_ERROR_INVALID_CONTEXT`) and not capturing (else `calls[1]`: a captured launch would
    /// record this exec's buffers into another graph, which would not borrow them); binds the
    /// context.
    fn check_stream(&self, stream: &CudaStream, calls: [&'static str; 2]) -> Result<()> {
        let h = &self.graph.handle;
        if stream.context().cu_ctx() != h.ctx.cu_ctx() {
            return Err(h.error(calls[0], DriverError(CUresult::CUDA_ERROR_INVALID_CONTEXT)));
        }
        stream.context().bind_to_thread().map_err(|e| h.error("cuCtxSetCurrent", e))?;
        // SAFETY: the stream is alive (borrowed) and its context current.
        let status = unsafe { raw::stream_capture_status(stream.cu_stream()) }
            .map_err(|e| h.error("cuStreamIsCapturing", e))?;
        if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(h.error(calls[1], DriverError(CUresult::CUDA_ERROR_ILLEGAL_STATE)));
        }
        Ok(())
    }

    /// Launches the graph on `stream` (`cuGraphLaunch`).
    ///
    /// Before the launch, `stream` waits for the earlier users of every operand (cudarc's
    /// events: for `&mut` operands readers and writers, for `&` operands writers) and for the
    /// work on each operand's own stream (the stream it was allocated on); after it, the
    /// operands' events are recorded and their own streams wait for the graph. So the graph is
    /// ordered with every other use of its buffers, on any stream, and a buffer dropped after
    /// the exec is freed after the graph ran, as for `graph!`.
    ///
    /// # Errors
    /// [`Error::Graph`] naming the `capture` call, nothing enqueued: `stream` belongs to another
    /// context or is capturing; after [`Released::bind`], an operand is not the memory the graph
    /// was captured with (`CUDA_ERROR_INVALID_VALUE`); or a driver call failed
    /// (`cuGraphLaunch`; `cuEventRecord`, `cuStreamWaitEvent` for operands of other streams).
    /// [`Error::HostFunction`], nothing enqueued: a host function of the graph
    /// ([`Capture::host`]) panicked in an earlier launch (the first panic since the last
    /// launch; the launch after it runs normally).
    pub fn launch(&mut self, stream: &CudaStream) -> Result<()> {
        self.check_stream(
            stream,
            [
                "cuGraphLaunch (stream of another context)",
                "cuGraphLaunch (the stream is capturing)",
            ],
        )?;
        if let Some(panicked) = self.host_panic() {
            return Err(panicked);
        }
        let (file, line) = (self.graph.handle.file, self.graph.handle.line);
        let err = |source| Error::Graph { file, line, source };
        let exec = self.exec.raw;
        let refused = "cuGraphLaunch (an operand is not the memory the graph was captured with)";
        let acquired = self.graph.acquire_operands(stream, refused)?;
        // The kept outputs, which this launch frees and allocates again: after their readers,
        // on whatever stream they ran.
        if self.exec.read.get() {
            self.exec
                .ctx
                .synchronize()
                .call("cuCtxSynchronize (readers of kept outputs)")
                .map_err(err)?;
            self.exec.read.set(false);
        }
        self.ledger.before(stream, acquired.iter().map(|a| a.guard.own)).map_err(err)?;
        // SAFETY: exec and stream are alive and of one context (checked), which is current;
        // every pointer the exec uses is in an operand borrowed by `self.graph` (checked above to
        // be the captured memory), ordered with its other users by the guards and the ledger,
        // or graph memory of its own (kept outputs: no view of them is borrowed, `&mut self`).
        unsafe { raw::launch(exec, stream.cu_stream()) }.call("cuGraphLaunch").map_err(err)?;
        self.exec.live |= !self.exec.kept.is_empty();
        let done = record_done(&mut self.exec.done, self.exec.memory, stream);
        // The closure may have used buffers it did not list (see `Ledger::after`).
        self.ledger.after(stream, true).map_err(err)?;
        drop(acquired); // records the operands' events after the launch
        done.map_err(err)
    }

    /// The first panic of a host function of the exec's graphs (the one it runs, and the one it
    /// was instantiated from) since the last launch, as [`Error::HostFunction`].
    fn host_panic(&self) -> Option<Error> {
        let first = self.origin.graph.as_ref().and_then(|g| g.reports.take());
        first.or_else(|| self.graph.handle.reports.take())
    }

    /// Uploads the exec's work to the device ahead of its next launch on `stream`
    /// (`cuGraphUpload`), so that launch does not pay for it.
    ///
    /// # Errors
    /// [`Error::Graph`] naming the `capture` call: `stream` belongs to another context, is
    /// capturing, or the driver call failed.
    pub fn upload(&mut self, stream: &CudaStream) -> Result<()> {
        self.check_stream(
            stream,
            [
                "cuGraphUpload (stream of another context)",
                "cuGraphUpload (the stream is capturing)",
            ],
        )?;
        // SAFETY: exec and stream are alive and of one context (checked), which is current.
        unsafe { raw::upload(self.exec.raw, stream.cu_stream()) }
            .map_err(|e| self.graph.handle.error("cuGraphUpload", e))
    }

    /// Updates the whole exec from `graph` (`cuGraphExecUpdate_v2`): a graph of the same
    /// topology whose nodes differ only in what the driver can update in place (kernel
    /// arguments and pointers, copy and memset addresses, …), typically a capture of the same
    /// work on other buffers. The next launch runs `graph`'s parameters.
    ///
    /// It takes `graph` by value because from then on the exec uses *that* graph's buffers, so
    /// it must hold their borrows: on success the exec holds `graph` (and its borrows) instead of
    /// the old one, which is dropped (its borrows end; launches already enqueued are ordered
    /// with later users of those buffers by [`launch`](Self::launch)'s events and ledger). Every
    /// node's parameters become `graph`'s, including those [`set_kernel`](Self::set_kernel) set.
    /// The exec's nodes keep their identity: [`set_kernel`](Self::set_kernel) still takes the
    /// [`CapturedKernel`]s of the first capture (the exec keeps that graph, without its borrows,
    /// for their node handles), not `graph`'s.
    ///
    /// # Errors
    /// On refusal the exec is unchanged (the driver performs no part of a refused update) and
    /// `graph` is given back in [`UpdateRefused`], with [`Error::GraphUpdateRefused`] carrying
    /// the driver's `CUgraphExecUpdateResult` (for instance
    /// `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`) and naming this call's location;
    /// [`Error::Graph`] for a graph of another context.
    #[track_caller]
    #[allow(clippy::result_large_err)] // rare, and the graph must come back
    pub fn update(&mut self, graph: Graph<'a>) -> Result<(), UpdateRefused<'a>> {
        let at = Location::caller();
        let (file, line) = (at.file(), at.line());
        let ctx = &graph.handle.ctx;
        if ctx.cu_ctx() != self.exec.ctx.cu_ctx() {
            let error = DriverError(CUresult::CUDA_ERROR_INVALID_CONTEXT);
            let call = "cuGraphExecUpdate (graph of another context)";
            return Err(UpdateRefused { error: graph_error(file, line, call, error), graph });
        }
        if let Err(error) = ctx.bind_to_thread() {
            let error = graph_error(file, line, "cuCtxSetCurrent", error);
            return Err(UpdateRefused { error, graph });
        }
        if !self.exec.kept.is_empty() || !graph.handle.kept.is_empty() {
            let error = DriverError(CUresult::CUDA_ERROR_NOT_SUPPORTED);
            let error = graph_error(file, line, KEPT_UPDATE, error);
            return Err(UpdateRefused { error, graph });
        }
        // SAFETY: both are alive and of the current context.
        match unsafe { raw::exec_update(self.exec.raw, graph.handle.raw) } {
            Ok(()) => {
                let old = core::mem::replace(&mut self.graph, graph);
                // The first graph is kept (without its borrows: the exec no longer uses its
                // buffers) for its node handles; a later one is dropped.
                if self.origin.graph.is_none() {
                    self.origin.graph = Some(old.handle);
                }
                Ok(())
            }
            Err((error, info)) => {
                let source = CudaError { call: "cuGraphExecUpdate_v2", error };
                let error = Error::GraphUpdateRefused { file, line, result: info.result, source };
                Err(UpdateRefused { error, graph })
            }
        }
    }

    /// Sets the parameters of kernel node `node` (added by [`Capture::kernel`] to the capture
    /// this exec was instantiated from) to `launch`'s arguments and launch dimensions, for the
    /// exec's next launches (`cuGraphExecNodeSetParams`; launches already enqueued keep the old
    /// ones). Only the exec changes: its [`graph`](Self::graph) keeps the captured parameters,
    /// and a later [`update`](Self::update) replaces these with the new graph's.
    ///
    /// `launch` is a call of the node's own kernel (the same function, so the same signature)
    /// whose buffer arguments are handles from [`read`](Self::read) and [`write`](Self::write):
    /// every buffer it names lies inside an operand the exec holds, written only inside one
    /// the graph writes (listed `&mut` and held `&mut`), so the exec never uses memory it does
    /// not borrow. After [`update`](Self::update), the nodes are still those of the first
    /// capture (the driver identifies an exec's nodes by the graph it was instantiated from,
    /// which the exec keeps); the updated graph's own nodes are refused.
    ///
    /// Takes `&self` (the exec is not `Sync`) so that handles borrowed from the exec can be
    /// arguments: `exec.set_kernel(&node, k.affine(n, 2, 1, exec.read(0)?, exec.write(1)?)
    /// .launch(cfg))`.
    ///
    /// # Errors
    /// All name the kernel and this call's location, and leave the exec unchanged:
    /// - [`Error::NodeRefused`]: [`Refusal::OtherGraph`] (a node of another capture, of a
    ///   `capture` statement, or of a graph this exec was only updated from),
    ///   [`Refusal::NotRecorded`] (a kernel run eagerly), [`Refusal::OtherFunction`] (another
    ///   kernel, or arguments of other sizes), [`Refusal::NotAnOperand`] (a buffer the exec does
    ///   not hold), [`Refusal::ReadOnly`] (written, inside operands held or captured `&` only),
    ///   [`Refusal::Overlap`] (two buffers overlapping with a write);
    /// - [`Error::WrongContext`]: a buffer of another context than the exec's;
    /// - [`Error::ZeroDims`], or [`Error::Node`] for more than [`MAX_KERNEL_PARAMS`] arguments;
    /// - [`Error::Node`]: the driver refused (`cuGraphExecKernelNodeSetParams_v2`, e.g. launch
    ///   dimensions over the device's limits), with its error.
    #[track_caller]
    pub fn set_kernel<A: KernelArgs>(
        &self,
        node: &CapturedKernel,
        launch: KernelLaunch<'_, A>,
    ) -> Result<()> {
        let at = Location::caller();
        let site = || site_at(launch.name(), "Exec::set_kernel", at);
        let refuse = |why| Error::NodeRefused { site: site(), why };
        let Some(handle) = node.node else {
            return Err(refuse(Refusal::NotRecorded));
        };
        if node.capture != self.origin.id {
            return Err(refuse(Refusal::OtherGraph));
        }
        if launch.function().cu_function() != node.function.cu_function()
            || launch.arg_sizes()[..] != node.arg_sizes[..]
        {
            return Err(refuse(Refusal::OtherFunction));
        }
        let k: &dyn KernelNode = &launch;
        Kernel::validate(&k, None, &site)?;
        refuse_conditions(k, &site)?;
        let mut bufs = NO_BUFFER_ARGS;
        let n = launch.buffers(&mut bufs);
        let bufs = &bufs[..n];
        let ctx = &self.exec.ctx;
        if bufs.iter().any(|b| b.ctx != ctx.cu_ctx()) {
            return Err(Error::WrongContext { site: site() });
        }
        check_buffers(bufs, &self.held()).map_err(refuse)?;
        let err = |source| Error::Node { site: site(), source };
        make_current(ctx).call("cuCtxSetCurrent").map_err(err)?;
        // SAFETY: the exec is alive and of the current context; `handle` is a kernel node of
        // the graph it was instantiated from (same capture number; that graph is alive: held
        // by `self.graph` or kept in `self.origin`); the parameters were validated, the function
        // is the node's, and every buffer lies inside an operand the exec holds (written only
        // inside one captured and held `&mut`), which each launch acquires again and checks to
        // be the captured memory.
        launch
            .with_node_params(|p| unsafe { raw::exec_node_set_params(self.exec.raw, handle, p) })
            .call(Kernel::SET)
            .map_err(err)
    }

    /// The operands' memory as [`set_kernel`](Self::set_kernel) may use it: each captured
    /// range, written where the graph was captured writing it and the exec holds it `&mut`.
    fn held(&self) -> Vec<Access> {
        let h = &self.graph.handle;
        h.accesses
            .iter()
            .zip(&self.graph.operands)
            .filter(|(_, o)| o.device())
            .map(|(a, o)| Access { write: a.write && o.written(), ..*a })
            .collect()
    }

    /// A read handle of operand `index` (its position in the `capture` call's tuple, or the
    /// last [`update`](Self::update)'s) for [`set_kernel`](Self::set_kernel): the whole operand
    /// as captured, with element type `T`. It borrows the exec, so it cannot outlive the
    /// operand's borrow.
    ///
    /// # Errors
    /// [`Error::NodeRefused`] naming this call's location: [`Refusal::NoOperand`],
    /// [`Refusal::HostMemory`] (a pinned host operand: a kernel takes device memory),
    /// [`Refusal::ElementType`] (the operand held is not of `T`s).
    #[track_caller]
    pub fn read<T: 'static>(&self, index: usize) -> Result<DevRead<'_, T>> {
        let (start, len) = self.operand::<T>(index, false, Location::caller())?;
        Ok(DevRead::new(start, len, self.exec.ctx.cu_ctx()))
    }

    /// A write handle of operand `index` for [`set_kernel`](Self::set_kernel); see
    /// [`read`](Self::read).
    ///
    /// # Errors
    /// As [`read`](Self::read), and [`Refusal::NotWritten`] for an operand the graph does not
    /// write (captured `&`, or held `&`).
    #[track_caller]
    pub fn write<T: 'static>(&self, index: usize) -> Result<DevWrite<'_, T>> {
        let (start, len) = self.operand::<T>(index, true, Location::caller())?;
        Ok(DevWrite::new(start, len, self.exec.ctx.cu_ctx()))
    }

    /// Operand `index`'s captured address and length in `T`s, checked.
    fn operand<T: 'static>(
        &self,
        index: usize,
        write: bool,
        at: &'static Location<'static>,
    ) -> Result<(CUdeviceptr, usize)> {
        let (label, text) = if write { ("write", "Exec::write") } else { ("read", "Exec::read") };
        let refuse = |why| Error::NodeRefused { site: site_at(label, text, at), why };
        let accesses = &self.graph.handle.accesses;
        let (Some(a), Some(o)) = (accesses.get(index), self.graph.operands.get(index)) else {
            let operands = accesses.len().min(self.graph.operands.len());
            return Err(refuse(Refusal::NoOperand { index, operands }));
        };
        if !o.device() {
            return Err(refuse(Refusal::HostMemory { index }));
        }
        if o.elem() != TypeId::of::<T>() {
            return Err(refuse(Refusal::ElementType { index }));
        }
        if write && !(a.write && o.written()) {
            return Err(refuse(Refusal::NotWritten { index }));
        }
        let len = a.bytes.checked_div(size_of::<T>() as u64).unwrap_or(0) as usize;
        Ok((a.start, len))
    }

    /// The output `kept` as the last launch left it: memory the closure allocated while captured
    /// and kept ([`Capture::keep`]), which each launch allocates again at the same address (the
    /// previous launch's freed first) and writes. `kept` is the [`Kept`] that `keep` returned in
    /// the capture of this exec's graph. The [`KeptOutput`] borrows the exec, so the next
    /// [`launch`](Self::launch) (`&mut self`) comes after it; work that cudarc enqueues on it (a
    /// copy to the host or to another buffer, on any stream of the exec's context) waits for the
    /// last launch, and the next launch and the exec's drop wait for the context when it was
    /// used (`cuCtxSynchronize`), so the memory is never freed or written under a reader.
    ///
    /// # Errors
    /// [`Error::Node`] naming this call's location: `kept` is of another capture than this
    /// exec's graph, or of another element type (`CUDA_ERROR_INVALID_VALUE`), or the exec was not
    /// launched yet (the memory exists from the first launch on: `CUDA_ERROR_NOT_READY`).
    #[track_caller]
    pub fn output<T: 'static>(&self, kept: &Kept<T>) -> Result<KeptOutput<'_, T>> {
        let at = Location::caller();
        let refuse = |call, error| Error::Node {
            site: site_at("output", "Exec::output", at),
            source: CudaError { call, error: DriverError(error) },
        };
        let k = self
            .exec
            .kept
            .get(kept.index)
            .filter(|k| kept.capture == self.origin.id && k.elem == TypeId::of::<T>());
        let Some(k) = k else {
            let call = "Exec::output (an output kept by another capture than this exec's graph)";
            return Err(refuse(call, CUresult::CUDA_ERROR_INVALID_VALUE));
        };
        if !self.exec.live || self.exec.done.is_null() {
            let call =
                "Exec::output (not launched yet: a kept output exists from the first launch on)";
            return Err(refuse(call, CUresult::CUDA_ERROR_NOT_READY));
        }
        Ok(KeptOutput {
            ptr: k.ptr,
            len: k.len,
            done: self.exec.done,
            ctx: self.exec.ctx.cu_ctx(),
            read: &self.exec.read,
            stream: &self.graph.handle.stream,
            _elem: core::marker::PhantomData,
        })
    }

    /// The graph the exec runs (the captured one, or the last one [`update`](Self::update)
    /// took), for [`Graph::nodes`], [`Graph::edges`] and [`Graph::debug_dot_print`].
    pub fn graph(&self) -> &Graph<'a> {
        &self.graph
    }

    /// Ends the exec's borrows of its buffers, keeping the instantiated exec: until
    /// [`Released::bind`] takes them again, the buffers can be used as any others (written from
    /// the host with cudarc's `memcpy_htod` between launches, say; cudarc's events order that
    /// with the launches before and after). Launches already enqueued are ordered with those
    /// uses as after a `graph!` call.
    pub fn release(self) -> Released {
        let Exec { exec, graph, origin, ledger } = self;
        Released { exec, graph: graph.handle, origin, ledger }
    }
}

/// An [`Exec`] without its borrows ([`Exec::release`]): it cannot launch until
/// [`bind`](Self::bind) gives it its buffers again. `Send`, not `Sync`.
pub struct Released {
    // Dropped first: the exec, then the graph.
    exec: ExecHandle,
    graph: GraphHandle,
    origin: Origin,
    ledger: Ledger,
}

impl fmt::Debug for Released {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Released")
            .field("exec", &self.exec.raw)
            .field("operands", &self.graph.accesses)
            .finish()
    }
}

impl Released {
    /// Borrows `operands` for the exec again: the same buffers as the capture's (or the last
    /// [`Exec::update`]'s) operands, in the same order, `&mut` where those were. Each
    /// [`Exec::launch`] checks that every operand is exactly the memory the graph was captured
    /// with (device address, size in bytes, context) and borrowed at least as the capture did;
    /// if not, that launch is an error and enqueues nothing.
    pub fn bind<'b, Ops: Operands<'b>>(self, operands: Ops) -> Exec<'b> {
        let Released { exec, graph, origin, ledger } = self;
        let graph = Graph { handle: graph, operands: operands.into_held() };
        Exec { exec, graph, origin, ledger }
    }

    /// Updates the whole exec from `graph` (`cuGraphExecUpdate_v2`), a new recording with
    /// borrows of its own (typically a capture of the same work made after
    /// [`Exec::release`], with other scalars or on the same or other buffers), and gives the
    /// exec back holding `graph` and its borrows: re-capture and update every iteration, as
    /// NVIDIA's samples do in C++:
    ///
    /// ```no_run
    /// # fn main() -> cudagraph::Result<()> {
    /// # let ctx = cudagraph::context(0)?;
    /// # let stream = ctx.new_stream()?;
    /// let (x, mut y) = (stream.alloc_zeros::<f32>(1024)?, stream.alloc_zeros::<f32>(1024)?);
    /// let step = |s: &cudagraph::Capture, (x, mut y): (cudagraph::CaptureSlice<'_, f32>, cudagraph::CaptureSliceMut<'_, f32>)| s.copy(&x, &mut y);
    /// let mut exec = cudagraph::capture(&stream, (&x, &mut y), step)?.instantiate()?;
    /// for _ in 0..10 {
    ///     exec.launch(&stream)?;
    ///     let released = exec.release(); // the borrows of x and y end
    ///     let graph = cudagraph::capture(&stream, (&x, &mut y), step)?;
    ///     exec = released.update(graph)?; // the exec now holds the new borrows
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// The driver rules are [`Exec::update`]'s: same topology, parameters it can update in
    /// place. The exec's nodes keep their identity ([`Exec::set_kernel`] still takes the first
    /// capture's [`CapturedKernel`]s).
    ///
    /// # Errors
    /// On refusal the exec is unchanged and both come back in [`ReleasedUpdateRefused`]: the
    /// released exec, the graph with its borrows, and [`Error::GraphUpdateRefused`] with the
    /// driver's `CUgraphExecUpdateResult` (for instance
    /// `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`) naming this call's location, or
    /// [`Error::Graph`] for a graph of another context.
    #[track_caller]
    #[allow(clippy::result_large_err)] // rare, and the exec and the graph must come back
    pub fn update<'b>(self, graph: Graph<'b>) -> Result<Exec<'b>, ReleasedUpdateRefused<'b>> {
        let at = Location::caller();
        let (file, line) = (at.file(), at.line());
        let ctx = &graph.handle.ctx;
        let refused = |released, error, graph| ReleasedUpdateRefused { released, error, graph };
        if ctx.cu_ctx() != self.exec.ctx.cu_ctx() {
            let error = DriverError(CUresult::CUDA_ERROR_INVALID_CONTEXT);
            let call = "cuGraphExecUpdate (graph of another context)";
            return Err(refused(self, graph_error(file, line, call, error), graph));
        }
        if let Err(error) = ctx.bind_to_thread() {
            return Err(refused(self, graph_error(file, line, "cuCtxSetCurrent", error), graph));
        }
        if !self.exec.kept.is_empty() || !graph.handle.kept.is_empty() {
            let error = DriverError(CUresult::CUDA_ERROR_NOT_SUPPORTED);
            return Err(refused(self, graph_error(file, line, KEPT_UPDATE, error), graph));
        }
        // SAFETY: both are alive and of the current context.
        match unsafe { raw::exec_update(self.exec.raw, graph.handle.raw) } {
            Ok(()) => {
                let Released { exec, graph: old, mut origin, ledger } = self;
                // The first graph is kept for its node handles (see `Exec::update`).
                if origin.graph.is_none() {
                    origin.graph = Some(old);
                }
                Ok(Exec { exec, graph, origin, ledger })
            }
            Err((error, info)) => {
                let source = CudaError { call: "cuGraphExecUpdate_v2", error };
                let error = Error::GraphUpdateRefused { file, line, result: info.result, source };
                Err(refused(self, error, graph))
            }
        }
    }
}

/// A refused [`Released::update`]: the error, the released exec (unchanged) and the graph
/// (with its borrows), both given back.
#[derive(Debug)]
pub struct ReleasedUpdateRefused<'a> {
    /// Why: [`Error::GraphUpdateRefused`], or [`Error::Graph`] for a graph of another context.
    pub error: Error,
    /// The released exec, unchanged.
    pub released: Released,
    /// The graph that was not taken.
    pub graph: Graph<'a>,
}

impl From<ReleasedUpdateRefused<'_>> for Error {
    /// The error alone (the exec and the graph are dropped), so that `?` works in functions
    /// returning [`Result`].
    fn from(refused: ReleasedUpdateRefused<'_>) -> Self {
        refused.error
    }
}

/// Why an exec or a graph with kept outputs is never updated.
const KEPT_UPDATE: &str = "cuGraphExecUpdate_v2, not called: an exec or a graph with kept outputs \
    (Capture::keep) is never updated (the exec's launches allocate its outputs at its own \
    addresses); instantiate the new graph";

/// Why `child(&mut g)` refuses a graph whose operands were bound to other memory.
const NOT_CAPTURED_MEMORY: &str = "the graph's operands are not the memory it was captured with";
/// Why `child(&mut g)` refuses a graph with kept outputs.
const KEPT_CHILD: &str = "the graph keeps outputs (Capture::keep): graph memory that only its \
    own Exec allocates, hands out and frees; launch it with `instantiate` and `Exec::launch`";

// A captured graph as a `graph!` operand: `child(&mut g)` embeds it as a child-graph node. Its
// acquisition acquires every operand it holds on the call's stream (waits for earlier users; the
// guards record the call's use after the launch), as `Exec::launch` does.
impl crate::operand::sealed::Sealed for Graph<'_> {}
impl crate::operand::Place for Graph<'_> {}
impl crate::operand::Acquire for Graph<'_> {
    type Read<'b>
        = crate::kind::NoGraphRead<'b>
    where
        Self: 'b;
    /// A graph is never only read: nothing is acquired, and the handle makes no node.
    fn acquire<'b>(&'b self, _: &'b CudaStream) -> (Self::Read<'b>, Guard<'b>) {
        let read = crate::kind::NoGraphRead { tag: 0, _borrow: core::marker::PhantomData };
        (read, Guard::of_parts(Box::default(), false))
    }
}
impl crate::operand::PlaceMut for Graph<'_> {}
impl crate::operand::AcquireMut for Graph<'_> {
    type Write<'b>
        = crate::kind::GraphRef<'b>
    where
        Self: 'b;
    fn acquire_mut<'b>(
        &'b mut self,
        stream: &'b CudaStream,
    ) -> (Self::Read<'b>, Self::Write<'b>, Guard<'b>) {
        let (raw, ctx, id) = (self.handle.raw, self.handle.ctx.cu_ctx(), self.handle.id);
        let read = crate::kind::NoGraphRead { tag: 0, _borrow: core::marker::PhantomData };
        let kept = !self.handle.kept.is_empty();
        let (refused, guards) = match self.acquire_operands(stream, "child") {
            Ok(_) if kept => (Some(KEPT_CHILD), Box::default()),
            Ok(acquired) => (None, acquired.into_iter().map(|a| a.guard).collect()),
            Err(_) => (Some(NOT_CAPTURED_MEMORY), Box::default()),
        };
        let _borrow = core::marker::PhantomData;
        let g = crate::kind::GraphRef { raw, id, ctx, refused, tag: 0, _borrow };
        (read, g, Guard::of_parts(guards, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(arg: usize, start: u64, bytes: u64, write: bool) -> BufferArg {
        BufferArg { arg, start, bytes, write, ctx: core::ptr::null_mut() }
    }

    fn op(start: u64, bytes: u64, write: bool) -> Access {
        Access { start, bytes, write }
    }

    #[test]
    fn a_buffer_must_lie_inside_one_operand_written_where_it_is_written() {
        let ops = [op(0x1000, 0x100, false), op(0x2000, 0x100, true)];
        // Whole operands, parts of them, empty ranges at their ends.
        let ok = [
            buf(0, 0x1000, 0x100, false),
            buf(1, 0x2000, 0x100, true),
            buf(2, 0x1080, 0x80, false),
            buf(3, 0x2100, 0, true),
        ];
        assert_eq!(check_buffers(&ok, &ops).map(|o| o[..4].to_vec()), Ok(vec![0, 1, 0, 1]));
        // A written part of a read operand; the read part of a written one is fine.
        assert_eq!(
            check_buffers(&[buf(4, 0x1000, 4, true)], &ops),
            Err(Refusal::ReadOnly { arg: Some(4) })
        );
        assert!(check_buffers(&[buf(0, 0x2010, 4, false)], &ops).is_ok());
        // Past the end, straddling two operands, before the first, far away, overflowing.
        for (start, bytes) in
            [(0x1000, 0x101), (0x10ff, 2), (0xfff, 4), (0x9000, 4), (u64::MAX - 1, 4)]
        {
            assert_eq!(
                check_buffers(&[buf(7, start, bytes, false)], &ops),
                Err(Refusal::NotAnOperand { arg: Some(7) }),
                "{start:#x} + {bytes:#x}"
            );
        }
        assert_eq!(
            check_buffers(&[buf(0, 0x1000, 4, false)], &[]),
            Err(Refusal::NotAnOperand { arg: Some(0) })
        );
    }

    #[test]
    fn the_written_operand_is_chosen_when_a_read_one_covers_the_same_memory() {
        // Two listed views of one allocation: `&` first, `&mut` second.
        let ops = [op(0x1000, 0x100, false), op(0x1000, 0x100, true)];
        let owners = check_buffers(&[buf(0, 0x1000, 0x10, true), buf(1, 0x1080, 4, false)], &ops);
        assert_eq!(owners.map(|o| (o[0], o[1])), Ok((1, 0)));
    }

    #[test]
    fn overlapping_buffers_of_one_kernel_are_refused_when_one_is_written() {
        let ops = [op(0x1000, 0x100, true)];
        let (a, b) = (buf(1, 0x1000, 0x80, false), buf(3, 0x107c, 8, true));
        assert_eq!(check_buffers(&[a, b], &ops), Err(Refusal::Overlap { first: 1, second: 3 }));
        // Reads may overlap; adjacent ranges and empty ones do not overlap.
        assert!(check_buffers(&[a, buf(2, 0x1000, 0x100, false)], &ops).is_ok());
        assert!(check_buffers(&[a, buf(2, 0x1080, 0x80, true)], &ops).is_ok());
        assert!(check_buffers(&[buf(0, 0x1010, 0, true), a], &ops).is_ok());
        // The same written buffer twice.
        let w = buf(0, 0x1000, 0x100, true);
        assert_eq!(
            check_buffers(&[w, buf(1, 0x1000, 0x100, true)], &ops),
            Err(Refusal::Overlap { first: 0, second: 1 })
        );
    }

    #[test]
    fn refusals_say_which_argument_and_why() {
        let e = Error::NodeRefused {
            site: NodeSite {
                label: "affine",
                text: "Exec::set_kernel",
                file: "f.rs",
                line: 3,
                column: 9,
            },
            why: Refusal::NotAnOperand { arg: Some(4) },
        };
        assert_eq!(
            e.to_string(),
            "node `affine` (`Exec::set_kernel`) at f.rs:3:9: buffer argument 4 is not inside one \
             listed operand of the capture (or one the exec holds)"
        );
        assert!(Refusal::ReadOnly { arg: None }.to_string().starts_with("the view is written"));
        assert!(Refusal::OtherGraph.to_string().contains("instantiated from"));
    }

    #[test]
    fn capture_numbers_are_unique() {
        let (a, b) = (next_capture_id(), next_capture_id());
        assert!(b > a && a > 0);
    }
}
