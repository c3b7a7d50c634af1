//! The recording session of a stream capture (issue 13): the [`Capture`] handed to the closure
//! of a capture (the standalone [`capture`](crate::capture()), or a `capture` statement of
//! `graph!`: `kind/captured.rs`), this thread's private origin streams that captures run on and
//! their helpers, the closure's views of the listed operands ([`CaptureSlice`],
//! [`CaptureSliceMut`]) and the aliases they are views of ([`imp::Alias`], [`imp::Listed`]).
//!
//! Below `kind`: `capture.rs` builds the standalone [`Graph`](crate::Graph) and
//! [`Exec`](crate::Exec) on it and adds [`Capture::kernel`], which takes `kind::kernel`'s
//! launches; its module docs say how a capture keeps cudarc's events out of the recording and
//! what is checked.

use core::any::TypeId;
use core::cell::{Cell, RefCell};
use core::fmt;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, Ordering};
use std::panic::Location;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUevent, CUgraph, CUresult};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr,
    DevicePtrMut, DeviceSlice, DriverError, SyncOnDrop,
};

use crate::error::{CudaError, Error, NodeSite, Refusal, Result};
use crate::operand::{DevRead, DevWrite, Guard};
use crate::raw;

/// Capture numbers, unique for the life of the process: each [`Capture`] (standalone or of a
/// `capture` statement) draws one, its [`Graph`] keeps it, and [`Exec::set_kernel`] accepts only
/// nodes of the capture its exec was instantiated from.
///
/// [`Graph`]: crate::Graph
/// [`Exec::set_kernel`]: crate::Exec::set_kernel
static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

/// A new capture number.
pub(crate) fn next_capture_id() -> u64 {
    NEXT_CAPTURE.fetch_add(1, Ordering::Relaxed)
}

/// The capture in progress, handed to the closure of [`capture`] (and of a `capture` statement
/// of `graph!`).
///
/// Besides the capturing [`stream`](Self::stream), it adds explicit, typed kernel nodes to the
/// graph being captured ([`kernel`](Self::kernel)), whose buffer arguments are handles of the
/// listed operands ([`read`](Self::read), [`write`](Self::write)); their parameters can later be
/// set on the [`Exec`] ([`Exec::set_kernel`]).
///
/// Neither `Send` nor `Sync`: explicit nodes are added to the graph being captured, a CUDA graph
/// object that is not internally synchronized, from the capturing thread only.
///
/// [`capture`]: crate::capture()
/// [`Exec`]: crate::Exec
/// [`Exec::set_kernel`]: crate::Exec::set_kernel
pub struct Capture {
    /// The stream the crate's own work for the closure goes on: while capturing, this thread's
    /// private origin stream of the context (which safe code cannot reach); eagerly, the call's
    /// stream.
    pub(crate) stream: Arc<CudaStream>,
    /// The call's stream: joined into the capture only by the `unsafe`
    /// [`stream`](Self::stream), so that safe code holding it (from the closure's environment)
    /// cannot record into the graph.
    user: Arc<CudaStream>,
    /// The streams of this capture besides `stream` that the closure's views may be used on:
    /// the helper streams of other devices' operands, `user` once joined, and the streams
    /// [`fork`](Self::fork)ed in. (`stream` itself is not in it: a capture on the call's stream
    /// alone, as every `Mode::Eager` one, then allocates nothing for it.)
    accepted: RefCell<Vec<(sys::CUstream, CUcontext)>>,
    /// Set when the `unsafe` [`stream`](Self::stream) joined `user` into the capture: the
    /// crate's own methods then enqueue on `user` ([`current`](Self::current)).
    on_user: Cell<bool>,
    /// The allocations the closure kept ([`keep`](Self::keep)): `None` where keeping is not
    /// offered (a `capture` statement of `graph!` or `GraphBuilder`, or a closure run eagerly).
    kept: RefCell<Option<Vec<KeptBuf>>>,
    /// The functions of the kernel nodes added by [`kernel`](Self::kernel): the recording keeps
    /// their modules loaded.
    pub(crate) functions: RefCell<Vec<CudaFunction>>,
    pub(crate) capturing: bool,
    /// The listed operands: their memory, access and aliases' events, in order.
    pub(crate) operands: Vec<Listed>,
    /// This capture's number (see [`next_capture_id`]).
    pub(crate) id: u64,
    /// The driver's id of the capture sequence begun for this capture (`None` when running
    /// eagerly, or if the query failed: explicit nodes are then refused).
    pub(crate) sequence: Option<u64>,
    /// The first driver error after an explicit node was added (its successors could not be
    /// set): the recording is unusable and the capture fails with this error.
    pub(crate) broken: OnceLock<CudaError>,
    /// [`Self::home`]'s stream when not capturing, made on first use.
    eager_home: std::cell::OnceCell<Arc<CudaStream>>,
    _thread: CapturingThreadOnly,
}

/// An allocation a closure kept with [`Capture::keep`]: graph memory of the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeptBuf {
    pub(crate) ptr: CUdeviceptr,
    /// Elements of the element type.
    pub(crate) len: usize,
    pub(crate) elem: TypeId,
}

/// An output a [`capture`](crate::capture())'s closure kept ([`Capture::keep`]): names it for
/// [`Exec::output`](crate::Exec::output) of an exec of that capture's graph. It holds no
/// address the program can use; only the exec hands out the memory, between launches.
pub struct Kept<T> {
    pub(crate) index: usize,
    pub(crate) capture: u64,
    _elem: PhantomData<fn() -> T>,
}

impl<T> Clone for Kept<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Kept<T> {}

impl<T> fmt::Debug for Kept<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kept")
            .field("index", &self.index)
            .field("capture", &self.capture)
            .field("elem", &core::any::type_name::<T>())
            .finish()
    }
}

/// Makes a [`Capture`] neither `Send` nor `Sync`: it adds nodes to the graph being captured,
/// which is not internally synchronized, so it stays on the capturing thread.
struct CapturingThreadOnly(PhantomData<*const ()>);

impl Capture {
    /// The capture handed to a closure, made right after the capture began on `stream` (when
    /// `capturing`; eagerly `stream` is `user`). `helpers`: the other devices' streams joined
    /// into the capture, on which their operands' views may be used.
    pub(crate) fn new(
        stream: Arc<CudaStream>,
        user: Arc<CudaStream>,
        capturing: bool,
        operands: Vec<Listed>,
        id: u64,
        helpers: &[(sys::CUstream, CUcontext)],
    ) -> Self {
        let sequence = capturing
            .then(|| {
                // SAFETY: the stream is alive (owned) and its context current (the capture just
                // began on this thread).
                let info = unsafe { raw::stream_capture_info(stream.cu_stream()) }.ok()?;
                let active = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
                (info.status == active).then_some(info.id)
            })
            .flatten();
        let cap = Capture {
            stream,
            user,
            accepted: RefCell::new(helpers.to_vec()),
            on_user: Cell::new(false),
            kept: RefCell::new(None),
            functions: RefCell::new(Vec::new()),
            capturing,
            operands,
            id,
            sequence,
            broken: OnceLock::new(),
            eager_home: std::cell::OnceCell::new(),
            _thread: CapturingThreadOnly(PhantomData),
        };
        // Eagerly every other stream the closure may use its views on (a fork, a joined
        // stream, another device's helper) is ordered after the call's stream's work so far
        // when it joins, which covers every earlier recording of the aliases' events: nothing
        // to prime (two `cuEventRecord` per operand and statement saved in `Mode::Eager`).
        if capturing {
            cap.prime();
        }
        cap
    }

    /// The stream the crate's own methods (`kernel`, `copy`, `zero`, `copy_htod`, `copy_dtoh`,
    /// `host`) enqueue on: the capture's stream, or the call's stream once the `unsafe`
    /// [`stream`](Self::stream) joined it. From the join on, the joined work and the crate's own
    /// work are on one stream, in program order (the call's stream waited for the capture's
    /// work so far when it joined), whatever cudarc does with events: cudarc records and waits
    /// on a buffer's events according to the *stream's* context object, which may manage no
    /// synchronization (event tracking off, or a second `Arc<CudaContext>` of the device that
    /// made no stream, capturing on its per-thread stream) while the origin's does.
    pub(crate) fn current(&self) -> &Arc<CudaStream> {
        if self.on_user.get() { &self.user } else { &self.stream }
    }

    /// Whether cudarc manages stream synchronization for the capture's context object: its
    /// events of the views then order the work of the capture's several streams.
    fn managed(&self) -> bool {
        self.stream.context().is_managing_stream_synchronization()
    }

    /// Whether the closure's views may be used on `stream` (one of this capture's streams).
    fn accepts(&self, stream: &CudaStream) -> bool {
        let id = stream_id(stream);
        id == stream_id(&self.stream) || self.accepted.borrow().contains(&id)
    }

    /// Panics unless `stream` is one of this capture's streams: a view used on another stream
    /// would run at once (eagerly, unordered with the buffer's earlier users) or pull that
    /// stream, which safe code holds, into the capture.
    #[track_caller]
    fn check_view_stream(&self, stream: &CudaStream) {
        assert!(
            self.accepts(stream),
            "a capture's view was used on a stream that is not part of the capture: use the \
             `Capture`'s own methods (`copy`, `zero`, `kernel`), or join the stream first with \
             the unsafe `Capture::stream` / `Capture::fork`"
        );
    }

    /// Whether a stream other than the capture's own and the call's was accepted for the views
    /// ([`fork`](Self::fork), or a helper of another device): the closure's work on the views
    /// may then be on it.
    pub(crate) fn forked(&self) -> bool {
        let own = [stream_id(&self.stream), stream_id(&self.user)];
        self.accepted.borrow().iter().any(|p| !own.contains(p))
    }

    /// Whether the call's stream was joined into the capture (by [`stream`](Self::stream)):
    /// it must then be joined back before the capture ends.
    pub(crate) fn joined_user(&self) -> bool {
        self.capturing && self.accepts(&self.user)
    }

    /// The functions of the kernel nodes added, whose modules the recording keeps loaded.
    pub(crate) fn take_functions(&self) -> Vec<CudaFunction> {
        self.functions.take()
    }

    /// Offers [`keep`](Self::keep) to the closure (the standalone [`capture`](crate::capture())).
    pub(crate) fn allow_keep(&self) {
        if self.capturing {
            *self.kept.borrow_mut() = Some(Vec::new());
        }
    }

    /// The allocations the closure kept, in the order it kept them.
    pub(crate) fn take_kept(&self) -> Vec<KeptBuf> {
        self.kept.take().unwrap_or_default()
    }

    /// Keeps `buf`, memory the closure allocated while captured (a library's output: a memory
    /// allocation node of the recording, on a stream joined with the `unsafe`
    /// [`stream`](Self::stream) or [`fork`](Self::fork)), as an output of the graph instead of
    /// freeing it in the closure. The crate takes the buffer (it is never freed by its drop) and
    /// gives back a [`Kept`] naming it: each launch of the graph's [`Exec`](crate::Exec)
    /// allocates it at the same address (the driver frees the previous launch's first:
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`), and between launches
    /// [`Exec::output`](crate::Exec::output) hands it out for reading, as a
    /// [`KeptOutput`](crate::KeptOutput) borrowed from the exec. The exec frees it when it is
    /// dropped (after its last launch and the output's readers). This is
    /// PyTorch's static output of a captured graph; its memory is counted in
    /// [`graph_mem_usage`](crate::graph_mem_usage) while an exec holds it.
    ///
    /// Only in [`capture`](crate::capture()): in a `capture` statement of `graph!` or
    /// [`GraphBuilder`](crate::GraphBuilder) copy a result into a listed `&mut` operand instead.
    ///
    /// # Errors
    /// [`Error::Node`] naming this call's location (`buf` is then dropped in the closure, as it
    /// would have been): keeping is not offered here (a `capture` statement, or the closure
    /// runs eagerly); `buf` belongs to another context; `buf` is not memory this recording
    /// allocated and has not freed (a buffer made before the capture or outside it: only graph
    /// memory of the recording can be kept); a driver call failed (`cuStreamGetCaptureInfo_v3`,
    /// `cuGraphGetNodes`).
    #[track_caller]
    pub fn keep<T: 'static>(&self, buf: CudaSlice<T>) -> Result<Kept<T>> {
        let at = Location::caller();
        let err = |call, error| Error::Node {
            site: site_at("keep", "Capture::keep", at),
            source: CudaError { call, error: DriverError(error) },
        };
        if self.kept.borrow().is_none() {
            let why = "Capture::keep, not done: kept outputs are for `cudagraph::capture` (its Exec \
                       owns them); in a capture statement of graph! or GraphBuilder, copy the \
                       result into a listed `&mut` operand";
            return Err(err(why, CUresult::CUDA_ERROR_NOT_SUPPORTED));
        }
        if buf.context().cu_ctx() != self.stream.context().cu_ctx() {
            let why = "Capture::keep (a buffer of another context than the capture's)";
            return Err(err(why, CUresult::CUDA_ERROR_INVALID_CONTEXT));
        }
        let len = buf.len();
        let bytes = (len as u64).saturating_mul(size_of::<T>() as u64);
        // The buffer's address, without cudarc's events (its guard would record one on the
        // buffer's stream, which need not be part of the capture).
        let ptr = {
            let (ptr, mut guard) = DevicePtr::device_ptr(&buf, buf.stream());
            disarm(&mut guard);
            ptr
        };
        // SAFETY: the origin stream is alive and its context current (the closure runs inside
        // the capture, on this thread).
        let info = unsafe { raw::stream_capture_info(self.stream.cu_stream()) }
            .map_err(|e| err("cuStreamGetCaptureInfo_v3 (Capture::keep)", e.0))?;
        let active = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if info.status != active || Some(info.id) != self.sequence {
            let why = "Capture::keep (the capture is not active: invalidated before)";
            return Err(err(why, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
        }
        // SAFETY: the graph being captured is alive while the capture is.
        let (allocs, freed) = unsafe { memory_nodes(info.graph) }
            .map_err(|e| err("cuGraphGetNodes / cuGraphNodeGetType (Capture::keep)", e.0))?;
        let recorded = live(&allocs, &freed).contains(&ptr)
            && allocs.iter().any(|&(d, b)| d == ptr && b as u64 >= bytes);
        if !recorded {
            let why = "Capture::keep (the buffer is not memory this recording allocated while \
                       captured and still holds: only graph memory of the recording can be kept)";
            return Err(err(why, CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        // Never freed by its drop: the exec allocates and frees this memory from now on. cudarc's
        // `leak` waits on the buffer's events on its stream (inside the capture, or eagerly on a
        // stream outside it), as its drop would.
        let _ = buf.leak();
        let mut kept = self.kept.borrow_mut();
        let list = kept.as_mut().expect("checked above");
        list.push(KeptBuf { ptr, len, elem: TypeId::of::<T>() });
        Ok(Kept { index: list.len() - 1, capture: self.id, _elem: PhantomData })
    }

    /// A non-capturing stream for [`DeviceSlice::stream`] of a view, of the call's context,
    /// for an operand of that context: while capturing the call's stream (not part of the
    /// capture unless joined); eagerly, where the call's stream is the capture's, one of this
    /// thread's [`eager_home`] streams of the context that this capture does not accept, which
    /// [`fork`](Self::fork) then refuses. (cudarc's
    /// `memcpy_dtod` from a view into another context's buffer takes the view's address with
    /// this stream and enqueues the copy on the other context's stream, unordered with the
    /// view's later users: with the call's stream it passed the view check eagerly; review 26.)
    #[track_caller]
    fn home(&self, ctx: CUcontext) -> &Arc<CudaStream> {
        assert!(
            ctx == self.user.context().cu_ctx(),
            "`DeviceSlice::stream` of a capture's view of another device's operand: use the \
             `Capture`'s own methods for it"
        );
        if self.capturing {
            return &self.user;
        }
        // One this capture does not accept (an eager call may be made on a home stream that
        // safe code kept from an earlier call's view: review 26b); `fork` then refuses it.
        self.eager_home.get_or_init(|| {
            eager_home(self.user.context(), |s| self.accepts(s)).unwrap_or_else(|e| {
                panic!("`DeviceSlice::stream` of a capture's view: no stream made ({e})")
            })
        })
    }

    /// Records every alias's read and write events on the stream, first thing, when capturing:
    /// inside a capture they then stand for the capture's start, so cudarc's use of a view on
    /// another stream waits on them and joins that stream into the capture (or invalidates it)
    /// instead of running at once ahead of the buffer's earlier users. (Without this the
    /// aliases' events are never recorded, and such a wait is a no-op.) Eagerly this is not
    /// needed: a stream joins the closure's work only through a fork, a join or a helper, each
    /// of which makes it wait for the call's stream's work so far, after every earlier
    /// recording of the aliases' events and every earlier user of the buffers.
    ///
    /// An operand of another device has its alias on the thread's stream of that device (see
    /// [`CapturedWork`](crate::CapturedWork)), forked into the capture before this: its events
    /// are recorded there, with that context current.
    fn prime(&self) {
        let (s, ctx) = (self.stream.cu_stream(), self.stream.context().cu_ctx());
        for l in &self.operands {
            let foreign = l.on_ctx != ctx;
            if foreign {
                // SAFETY: the context is alive (its buffer is borrowed by the call).
                let _ = unsafe { sys::cuCtxSetCurrent(l.on_ctx) };
            }
            for e in [l.read_event, l.write_event].into_iter().flatten() {
                // SAFETY: the event is an alias's, alive while the capture is (the aliases
                // outlive it); its stream is alive and of the current context. An error here
                // shows again at the end of the capture (or in cudarc's next call): ignored.
                let _ = unsafe { raw::record_event(e, if foreign { l.on } else { s }) };
            }
            if foreign {
                let _ = self.stream.context().bind_to_thread();
            }
        }
    }

    /// Makes `other` (a stream of any device, e.g. an NCCL communicator's) join the capture:
    /// it waits for the work enqueued on the capture so far (`cuEventRecord` on the capture's
    /// stream, `cuStreamWaitEvent` on `other`), so that what is enqueued on it next is
    /// recorded, ordered after that work, and the closure's views may be used on it. Eagerly it
    /// only orders `other` after it. Work joined this way must be joined back with
    /// [`join`](Self::join) before the closure returns, or the capture fails
    /// (`CUDA_ERROR_STREAM_CAPTURE_UNJOINED`, [`Error::CaptureInvalidated`]).
    ///
    /// # Safety
    /// Until it is joined back, everything enqueued on `other` is recorded, by any code that
    /// holds it: see [`stream`](Self::stream) for what the caller promises of that work (the
    /// same contract, for `other`; SAFETY.md, "Captured work"). Besides, where cudarc does not
    /// manage stream synchronization for `other`'s context object (its event tracking off, as
    /// for candle's device, or an object that made no stream), cudarc's events of the views do
    /// not order the work on `other` with the capture's other work: the caller orders it, by
    /// joining `other` back ([`join`](Self::join)) before the capture's other work uses memory
    /// that the work on `other` touches, and by not touching there memory that the capture's
    /// work after the fork writes.
    ///
    /// # Errors
    /// [`Error::Node`] naming this call's location if a driver call fails.
    #[track_caller]
    pub unsafe fn fork(&self, other: &CudaStream) -> Result<()> {
        let at = Location::caller();
        let err = |call, error| Error::Node {
            site: site_at("fork", "Capture::fork", at),
            source: CudaError { call, error },
        };
        if !self.managed() {
            let why = "Capture::fork, not done: it needs cudarc to manage stream synchronization \
                       on the capture's context object (event tracking on, its default), whose \
                       events of the views order the work of the forked stream with the \
                       capture's; the check";
            return Err(err(why, DriverError(CUresult::CUDA_ERROR_NOT_SUPPORTED)));
        }
        // The stream the views' `DeviceSlice::stream` gave (`home`) never joins. (`fork` is the
        // only way it could: `stream` joins the call's stream, which `home` never gives.)
        if self.eager_home.get().is_some_and(|h| stream_id(h) == stream_id(other)) {
            let why = "Capture::fork, not done: the stream is the one the views' \
                       `DeviceSlice::stream` gave, which never joins (cudarc takes a view's \
                       address with it for work it enqueues on other streams); the check";
            return Err(err(why, DriverError(CUresult::CUDA_ERROR_INVALID_VALUE)));
        }
        self.join_in(other).map_err(|e| err("cuEventRecord / cuStreamWaitEvent (Capture::fork)", e))
    }

    /// `other` waits for the work on the capture's stream so far (joining it into the capture)
    /// and is accepted for the closure's views from then on; the capture's context is current
    /// again after. The work of [`fork`](Self::fork) and of [`stream`](Self::stream).
    fn join_in(&self, other: &CudaStream) -> Result<(), DriverError> {
        let r = origin_stream(self.stream.context())
            .and_then(|here| order_streams(&self.stream, here.fork_event(), other));
        let _ = self.stream.context().bind_to_thread();
        r?;
        self.accepted.borrow_mut().push(stream_id(other));
        Ok(())
    }

    /// Makes the capturing stream wait for the work enqueued on `other` so far (a stream of any
    /// device: `cuEventRecord` on `other` with an event of its context, `cuStreamWaitEvent` on
    /// the capturing stream): work that `other` joined into the capture ([`fork`](Self::fork),
    /// or a view used on it) is joined back, so the recording holds it, ordered before what
    /// follows. Call it after the last work on `other`: for NCCL, after `group_end()` (the
    /// collectives of a group are enqueued there, after cudarc's guards of the views recorded
    /// their events).
    ///
    /// # Errors
    /// [`Error::Node`] naming this call's location if a driver call fails.
    #[track_caller]
    pub fn join(&self, other: &CudaStream) -> Result<()> {
        let at = Location::caller();
        let err = |error| Error::Node {
            site: site_at("join", "Capture::join", at),
            source: CudaError { call: "cuEventRecord / cuStreamWaitEvent (Capture::join)", error },
        };
        let there = origin_stream(other.context()).map_err(err)?;
        let r = order_streams(other, there.join_event(), self.current());
        let _ = self.stream.context().bind_to_thread();
        r.map_err(err)
    }

    /// The driver error that made the recording unusable, if any (see `broken`).
    pub(crate) fn broken(&self) -> Option<CudaError> {
        self.broken.get().copied()
    }

    /// The call's stream (the one given to [`capture`], or the `graph!` call's), joined into
    /// the capture by the first call: work enqueued on it from then on until the closure
    /// returns is recorded (cudarc's `launch_builder`, a cuBLAS handle made on this stream, …),
    /// ordered after the work captured so far, and the closure's views may be used on it. It is
    /// joined back when the closure returns. Eagerly ([`is_capturing`](Self::is_capturing) is
    /// `false`) it is the stream the work runs on.
    ///
    /// Until the first call the stream is not part of the capture: anything done on it runs
    /// at once, as outside a capture, and safe code (which may hold the stream) cannot record
    /// into the graph. The capture itself runs on a private stream of the crate's. Where cudarc
    /// manages no stream synchronization on the capture's context object (event tracking off),
    /// the `Capture`'s own methods enqueue on this stream from the first call on, so that they
    /// stay in program order with the work joined here (no cudarc event would order them).
    ///
    /// # Safety
    /// Until the closure returns, every piece of work enqueued on this stream (by the closure
    /// or by anything else that holds the stream) is recorded into the graph, which replays it
    /// at every launch long after the closure returned. The caller promises that this work:
    /// - reads and writes device memory only inside the closure's views, as they are listed
    ///   (`&` operands only read), or memory that stays allocated and unused elsewhere for as
    ///   long as the graph (and every exec and `graph!` cache made from it) may be launched,
    ///   such as a library's workspace set before the capture. Two `capture` statements of
    ///   one `graph!` body never run concurrently (the crate orders them), but two captures of
    ///   one [`GraphBuilder`](crate::GraphBuilder) may, unless their operands or `after`
    ///   order them: a workspace both use is then used elsewhere (order them with `after`);
    /// - uses memory it allocates on this stream while it captures (`alloc`, `alloc_zeros`,
    ///   a library's outputs and workspace: graph memory, see below) only inside the capture
    ///   (one not freed before the closure returns is refused when the capture ends), and frees
    ///   no other memory (refused too);
    /// - copies neither from nor to host memory (pageable or pinned): such a copy is recorded
    ///   and would run at each launch, after the host memory may be gone;
    /// - launches only functions whose modules stay loaded while the graph may be launched;
    /// - waits only on events recorded inside this capture.
    ///
    /// A library call that cudarc marks `unsafe` (cuBLAS GEMMs, cuFFT) is then covered by the
    /// same `unsafe` block. SAFETY.md ("Captured work") says what the crate relies on.
    ///
    /// **Allocations while captured.** `cuMemAllocAsync` on a capturing stream is a memory
    /// allocation node: the buffer's address is graph memory of the recording, which exists
    /// only inside each launch, from that node to its free node, the buffer's drop inside the
    /// closure. A recording with an allocation the closure did not free (a buffer kept past the
    /// closure by its environment or by a library) is refused when the capture ends: nothing a
    /// closure allocates outlives a launch or leaks. An output the program needs afterwards is
    /// copied into a listed `&mut` operand inside the closure or, in the standalone
    /// [`capture`], handed to the exec with [`keep`](Self::keep). The recording's allocation nodes are counted in
    /// [`Stats::capture_allocations`](crate::Stats::capture_allocations) and their bytes in
    /// [`GraphCache::graph_owned_bytes`](crate::GraphCache::graph_owned_bytes); the memory comes
    /// from the device's graph memory pool ([`graph_mem_usage`](crate::graph_mem_usage)).
    ///
    /// [`capture`]: crate::capture()
    pub unsafe fn stream(&self) -> &Arc<CudaStream> {
        if self.capturing && !self.accepts(&self.user) {
            match self.join_in(&self.user) {
                Err(error) => {
                    let call = "cuEventRecord / cuStreamWaitEvent (Capture::stream)";
                    let _ = self.broken.set(CudaError { call, error });
                }
                Ok(()) => self.on_user.set(true),
            }
        }
        &self.user
    }

    /// `false` when the closure runs eagerly instead of being recorded (a `capture` statement
    /// of a `graph!` call in [`Mode::Eager`](crate::Mode::Eager)): its work then runs at once.
    pub fn is_capturing(&self) -> bool {
        self.capturing
    }

    /// A read handle of `view` for a kernel node of this capture ([`kernel`](Self::kernel)):
    /// `view` is one of the closure's views ([`CaptureSlice`] or [`CaptureSliceMut`]) or a part of one
    /// (`slice`, `split_at`, …). The handle cannot leave the closure (its lifetime is the
    /// view's).
    ///
    /// Like a cudarc call on the view, this makes the capturing stream wait for the view's last
    /// write in the capture (cudarc's event, in its multi-stream mode); nothing else is
    /// enqueued.
    ///
    /// # Errors
    /// [`Error::NodeRefused`] naming this call's location, with nothing enqueued:
    /// [`Refusal::NotAnOperand`] when `view` is not a view of a listed operand (a buffer the
    /// closure reached otherwise, which the graph would not borrow).
    #[track_caller]
    pub fn read<'s, V: CaptureView<'s>>(&self, view: &V) -> Result<DevRead<'s, V::Elem>> {
        let at = Location::caller();
        let (ptr, len, ctx) = self.locate(view, false, at)?;
        Ok(DevRead::new(ptr, len, ctx))
    }

    /// A write handle of `view` (a [`CaptureSliceMut`] of a `&mut` operand, or a part of one) for a
    /// kernel node of this capture ([`kernel`](Self::kernel)); see [`read`](Self::read). A
    /// [`CaptureSlice`] (of a `&` operand) has no write handle: that is a compile error.
    ///
    /// # Errors
    /// [`Error::NodeRefused`] naming this call's location, with nothing enqueued:
    /// [`Refusal::NotAnOperand`] when `view` is not a view of a listed operand,
    /// [`Refusal::ReadOnly`] when it is one listed `&`.
    #[track_caller]
    pub fn write<'s, T: 'static>(
        &self,
        view: &mut CaptureSliceMut<'s, T>,
    ) -> Result<DevWrite<'s, T>> {
        let at = Location::caller();
        let (ptr, len, ctx) = self.locate(&*view, true, at)?;
        Ok(DevWrite::new(ptr, len, ctx))
    }

    /// Copies `src` into `dst` on the capture (`cuMemcpyDtoDAsync`: a memcpy node when
    /// capturing), both views of listed operands (or parts of them), of one element type and
    /// length (elements). Ordered after the closure's earlier work on either view and before
    /// its later work, on any of the capture's streams (cudarc's events of the views).
    ///
    /// # Errors
    /// [`Error::NodeRefused`] naming this call's location, with nothing enqueued:
    /// [`Refusal::NotAnOperand`] when a view is not of a listed operand of this capture (or
    /// of its device), [`Refusal::Overlap`] when the two overlap in memory;
    /// [`Error::CopyLength`] when the lengths differ; [`Error::Node`] when the driver
    /// refuses the copy.
    #[track_caller]
    pub fn copy<'s, T: 'static, V: CaptureView<'s, Elem = T>>(
        &self,
        src: &V,
        dst: &mut CaptureSliceMut<'s, T>,
    ) -> Result<()> {
        let at = Location::caller();
        let (from, n, from_ctx) = self.locate(src, false, at)?;
        let (to, m, to_ctx) = self.locate(&*dst, true, at)?;
        let site = || site_at("copy", "Capture::copy", at);
        if n != m {
            return Err(Error::CopyLength { site: site(), src: n, dst: m });
        }
        let ctx = self.stream.context().cu_ctx();
        if from_ctx != ctx || to_ctx != ctx {
            return Err(Error::WrongContext { site: site() });
        }
        let bytes = (n as u64).saturating_mul(size_of::<T>() as u64);
        if bytes > 0 && from < to.saturating_add(bytes) && to < from.saturating_add(bytes) {
            let why = Refusal::Overlap { first: 0, second: 1 };
            return Err(Error::NodeRefused { site: site(), why });
        }
        let call = "cuMemcpyDtoDAsync (Capture::copy)";
        src.copy_into(self.current(), &mut dst.view)
            .map_err(|error| Error::Node { site: site(), source: CudaError { call, error } })
    }

    /// Sets every byte of `dst` to zero on the capture (`cuMemsetD8Async`: a memset node when
    /// capturing), `dst` a view of a `&mut` operand (or a part of one); ordered as
    /// [`copy`](Self::copy).
    ///
    /// # Errors
    /// [`Error::NodeRefused`] naming this call's location, with nothing enqueued:
    /// [`Refusal::NotAnOperand`] when `dst` is not of a listed operand of this capture (or of
    /// its device); [`Error::Node`] when the driver refuses the memset.
    #[track_caller]
    pub fn zero<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + 'static>(
        &self,
        dst: &mut CaptureSliceMut<'_, T>,
    ) -> Result<()> {
        let at = Location::caller();
        let (_, _, ctx) = self.locate(&*dst, true, at)?;
        let site = || site_at("zero", "Capture::zero", at);
        if ctx != self.stream.context().cu_ctx() {
            return Err(Error::WrongContext { site: site() });
        }
        let call = "cuMemsetD8Async (Capture::zero)";
        self.current()
            .memset_zeros(&mut dst.view)
            .map_err(|error| Error::Node { site: site(), source: CudaError { call, error } })
    }

    /// The address, length and context of `view`, checked to lie inside the listed operand it
    /// is a view of (a written one when `write`).
    pub(crate) fn locate<'s, V: CaptureView<'s>>(
        &self,
        view: &V,
        write: bool,
        at: &'static Location<'static>,
    ) -> Result<(CUdeviceptr, usize, CUcontext)> {
        let (label, text) =
            if write { ("write", "Capture::write") } else { ("read", "Capture::read") };
        let refuse = |why| Error::NodeRefused { site: site_at(label, text, at), why };
        // Which alias the view is of, by the address of the alias's `stream` field, which
        // every view of it refers to: known before any driver call, so a view of another
        // buffer (whose events may have been recorded outside the capture) is refused without
        // touching the capture.
        let identity = view.identity();
        let Some(op) = self.operands.iter().find(|o| core::ptr::eq(o.identity, identity)) else {
            return Err(refuse(Refusal::NotAnOperand { arg: None }));
        };
        if write && !op.write {
            return Err(refuse(Refusal::ReadOnly { arg: None }));
        }
        let ptr = view.pointer(self.current());
        let len = view.elems();
        let bytes = (len as u64).saturating_mul(size_of::<V::Elem>() as u64);
        let inside = ptr >= op.start && bytes <= op.bytes && ptr - op.start <= op.bytes - bytes;
        if !inside {
            return Err(refuse(Refusal::NotAnOperand { arg: None }));
        }
        Ok((ptr, len, op.on_ctx))
    }
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture")
            .field("stream", &self.stream.cu_stream())
            .field("capturing", &self.capturing)
            .field("operands", &self.operands.iter().map(Listed::access).collect::<Vec<_>>())
            .finish()
    }
}

/// The site of an explicit-node call at `at`: `label` (the kernel's name, or `read`/`write`)
/// and `text` (the method).
pub(crate) fn site_at(
    label: &'static str,
    text: &'static str,
    at: &'static Location<'static>,
) -> NodeSite {
    NodeSite { label, text, file: at.file(), line: at.line(), column: at.column() }
}

/// Makes `ctx` current on this thread, without taking cudarc's recorded error out of it (as
/// `bind_to_thread` would: inside a capture, that error explains an invalidation).
pub(crate) fn make_current(ctx: &CudaContext) -> Result<(), DriverError> {
    use cudarc::driver::result::ctx as rctx;
    if rctx::get_current()? != Some(ctx.cu_ctx()) {
        // SAFETY: the context is alive (borrowed).
        unsafe { rctx::set_current(ctx.cu_ctx()) }?;
    }
    Ok(())
}

/// A listed `&` operand as a capture's closure sees it (or a part of one): read-only device
/// memory of `len()` elements of `T`, valid while the closure runs (`'s`).
///
/// Safe code uses it through the [`Capture`]'s methods ([`copy`](Capture::copy),
/// [`read`](Capture::read) for [`kernel`](Capture::kernel)) or with cudarc and libraries on
/// the capture's streams: it implements cudarc's `DevicePtr`, and panics when its pointer is
/// taken for a stream that is not part of the capture (a stream safe code holds: the work
/// would run at once, unordered with the buffer's earlier users, instead of being recorded).
/// The call's stream joins the capture through the `unsafe` [`Capture::stream`], other
/// streams through the `unsafe` [`Capture::fork`].
pub struct CaptureSlice<'s, T> {
    view: CudaView<'s, T>,
    cap: &'s Capture,
}

/// A listed `&mut` operand as a capture's closure sees it (or a part of one): device memory of
/// `len()` elements of `T` that the capture may write; see [`CaptureSlice`]. It implements
/// cudarc's `DevicePtr` and `DevicePtrMut`.
pub struct CaptureSliceMut<'s, T> {
    view: CudaViewMut<'s, T>,
    cap: &'s Capture,
}

impl<'s, T> CaptureSlice<'s, T> {
    /// Length, elements.
    pub fn len(&self) -> usize {
        self.view.len()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.view.len() == 0
    }

    /// The elements in `range`.
    ///
    /// # Panics
    /// When `range` is out of bounds (as cudarc's `CudaView::slice`).
    pub fn slice(&self, range: impl core::ops::RangeBounds<usize>) -> CaptureSlice<'s, T> {
        CaptureSlice { view: self.view.slice(range), cap: self.cap }
    }

    /// The underlying cudarc view, for an `unsafe` cudarc call (a `launch_builder` argument).
    ///
    /// # Safety
    /// The view is used only on the capture's streams, as [`Capture::stream`]'s contract says;
    /// cudarc does not check which stream it is used on.
    pub unsafe fn as_cuda_view(&self) -> &CudaView<'s, T> {
        &self.view
    }
}

impl<'s, T> CaptureSliceMut<'s, T> {
    /// Length, elements.
    pub fn len(&self) -> usize {
        self.view.len()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.view.len() == 0
    }

    /// The elements in `range`, read-only.
    ///
    /// # Panics
    /// When `range` is out of bounds.
    pub fn slice(&self, range: impl core::ops::RangeBounds<usize>) -> CaptureSlice<'_, T> {
        CaptureSlice { view: self.view.slice(range), cap: self.cap }
    }

    /// The elements in `range`.
    ///
    /// # Panics
    /// When `range` is out of bounds.
    pub fn slice_mut(
        &mut self,
        range: impl core::ops::RangeBounds<usize>,
    ) -> CaptureSliceMut<'_, T> {
        CaptureSliceMut { view: self.view.slice_mut(range), cap: self.cap }
    }

    /// The elements before `mid` and from `mid` on.
    ///
    /// # Panics
    /// When `mid > len()`.
    pub fn split_at_mut(&mut self, mid: usize) -> (CaptureSliceMut<'_, T>, CaptureSliceMut<'_, T>) {
        let (a, b) = self.view.split_at_mut(mid);
        (CaptureSliceMut { view: a, cap: self.cap }, CaptureSliceMut { view: b, cap: self.cap })
    }

    /// The underlying cudarc view, for an `unsafe` cudarc call (a `launch_builder` argument).
    ///
    /// # Safety
    /// As [`CaptureSlice::as_cuda_view`].
    pub unsafe fn as_cuda_view_mut(&mut self) -> &mut CudaViewMut<'s, T> {
        &mut self.view
    }
}

impl<T> fmt::Debug for CaptureSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureSlice").field("len", &self.view.len()).finish()
    }
}

impl<T> fmt::Debug for CaptureSliceMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureSliceMut").field("len", &self.view.len()).finish()
    }
}

impl<T> DeviceSlice<T> for CaptureSlice<'_, T> {
    fn len(&self) -> usize {
        self.view.len()
    }
    /// The call's stream, which is not part of the capture unless joined.
    ///
    /// # Panics
    /// For a view of another device's operand.
    fn stream(&self) -> &Arc<CudaStream> {
        self.cap.home(DeviceSlice::stream(&self.view).context().cu_ctx())
    }
}

impl<T> DeviceSlice<T> for CaptureSliceMut<'_, T> {
    fn len(&self) -> usize {
        self.view.len()
    }
    /// As [`CaptureSlice`]'s.
    fn stream(&self) -> &Arc<CudaStream> {
        self.cap.home(DeviceSlice::stream(&self.view).context().cu_ctx())
    }
}

impl<T> DevicePtr<T> for CaptureSlice<'_, T> {
    /// The view's address for work on `stream` (cudarc's events of the view order it).
    ///
    /// # Panics
    /// When `stream` is not part of the capture.
    #[track_caller]
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        self.cap.check_view_stream(stream);
        self.view.device_ptr(stream)
    }
}

impl<T> DevicePtr<T> for CaptureSliceMut<'_, T> {
    /// As [`CaptureSlice`]'s.
    #[track_caller]
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        self.cap.check_view_stream(stream);
        self.view.device_ptr(stream)
    }
}

impl<T> DevicePtrMut<T> for CaptureSliceMut<'_, T> {
    /// As [`CaptureSlice`]'s `device_ptr`, for writing.
    #[track_caller]
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        self.cap.check_view_stream(stream);
        self.view.device_ptr_mut(stream)
    }
}

/// A view the closure of a capture can make a handle of with [`Capture::read`] or copy from
/// with [`Capture::copy`]: a [`CaptureSlice`] or [`CaptureSliceMut`]. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a view a capture can make a handle of",
    label = "expected a `CaptureSlice` or `CaptureSliceMut` of a listed operand",
    note = "`Capture::read` takes `&view` of the closure's views (or parts of them); `Capture::write` takes `&mut` of a `CaptureSliceMut`"
)]
pub trait CaptureView<'s>: imp::Sealed {
    /// The element type.
    type Elem: 'static;
    /// The address of the `stream` field of the `CudaSlice` the view is of.
    #[doc(hidden)]
    fn identity(&self) -> *const Arc<CudaStream>;
    /// The device address (the stream waits for the view's last write, as cudarc's
    /// `device_ptr` makes it; the read event is not recorded).
    #[doc(hidden)]
    fn pointer(&self, stream: &CudaStream) -> CUdeviceptr;
    /// Length in elements.
    #[doc(hidden)]
    fn elems(&self) -> usize;
    /// cudarc's `memcpy_dtod` of the view into `dst` on `stream` (checked by the caller).
    #[doc(hidden)]
    fn copy_into(
        &self,
        stream: &Arc<CudaStream>,
        dst: &mut CudaViewMut<'_, Self::Elem>,
    ) -> Result<(), DriverError>;
}

macro_rules! capture_view {
    ($ty:ident) => {
        impl<T> imp::Sealed for $ty<'_, T> {}
        impl<'s, T: 'static> CaptureView<'s> for $ty<'s, T> {
            type Elem = T;
            fn identity(&self) -> *const Arc<CudaStream> {
                DeviceSlice::stream(&self.view)
            }
            fn pointer(&self, stream: &CudaStream) -> CUdeviceptr {
                let (ptr, mut guard) = DevicePtr::device_ptr(&self.view, stream);
                disarm(&mut guard);
                ptr
            }
            fn elems(&self) -> usize {
                DeviceSlice::len(&self.view)
            }
            fn copy_into(
                &self,
                stream: &Arc<CudaStream>,
                dst: &mut CudaViewMut<'_, T>,
            ) -> Result<(), DriverError> {
                stream.memcpy_dtod(&self.view, dst)
            }
        }
    };
}
capture_view!(CaptureSlice);
capture_view!(CaptureSliceMut);

/// Takes cudarc's event out of its guard, so that dropping it records nothing; returns it.
fn disarm(guard: &mut SyncOnDrop<'_>) -> Option<CUevent> {
    match guard {
        SyncOnDrop::Record(target) => target.take().map(|(event, _)| event.cu_event()),
        SyncOnDrop::Sync(target) => {
            target.take();
            None
        }
    }
}

/// Crate-private parts of the public traits (`CaptureView` here; `DeviceBuffer`, `Operand` and
/// `Operands` in `capture.rs`), nameable only inside the crate.
pub(crate) mod imp {
    use super::*;

    pub trait Sealed {}

    /// One operand acquired on a stream for one use (a capture or a launch): its device
    /// pointer, length in elements and context, and the guard that records the buffer's events
    /// on the stream when dropped (after the capture ended or the graph was launched).
    pub struct Acquired<'b> {
        pub(crate) ptr: CUdeviceptr,
        pub(crate) len: usize,
        pub(crate) ctx: CUcontext,
        pub(crate) guard: Guard<'b>,
    }

    /// A listed operand as a [`Graph`] holds it: the `&'a P` or `&'a mut P` borrow itself, so
    /// that each launch can acquire it again.
    ///
    /// [`Graph`]: crate::Graph
    pub trait Held: Send {
        /// Makes `stream` wait for the buffer's earlier users (for a written operand: readers
        /// and writers; else writers) and returns its pointer and guard.
        fn acquire<'b>(&'b mut self, stream: &'b CudaStream) -> Acquired<'b>;
        /// Borrowed `&mut` (the graph may write it).
        fn written(&self) -> bool;
        /// The element type.
        fn elem(&self) -> TypeId;
        /// Whether it is device memory (else pinned host memory, `capture_host.rs`).
        fn device(&self) -> bool {
            true
        }
    }

    /// A listed operand as a [`Capture`] knows it: its memory and access, the identity of its
    /// alias (the address of the alias's `stream` field, which every view of the alias refers
    /// to) and the alias's cudarc events. Raw handles, valid while the alias lives (the whole
    /// closure).
    #[derive(Clone, Copy, Debug)]
    pub struct Listed {
        pub(crate) start: u64,
        pub(crate) bytes: u64,
        pub(crate) write: bool,
        pub(crate) identity: *const Arc<CudaStream>,
        pub(crate) read_event: Option<CUevent>,
        pub(crate) write_event: Option<CUevent>,
        /// The alias's stream and its context: the capturing stream for an operand of its
        /// context, else the thread's stream of the operand's context (device).
        pub(crate) on: sys::CUstream,
        pub(crate) on_ctx: CUcontext,
    }

    // SAFETY: plain addresses and event handles, only compared or passed to thread-safe driver
    // calls (`cuStreamWaitEvent`, `cuEventRecord`) by the `Capture` that holds them, which is
    // neither `Send` nor `Sync` itself.
    unsafe impl Send for Listed {}
    unsafe impl Sync for Listed {}

    impl Listed {
        pub(crate) fn access(&self) -> Access {
            Access { start: self.start, bytes: self.bytes, write: self.write }
        }
    }

    /// A `CudaSlice<T>` over memory that an operand owns: never freed (its drop leaks it, or
    /// gives it back to this thread's pool of eager aliases, [`Alias::pooled`]).
    pub struct Alias<T: 'static> {
        /// Boxed: [`Listed::identity`] is the address of its `stream` field, which a pooled
        /// alias keeps across calls.
        slice: Option<Box<Leaky<T>>>,
        /// Where the drop puts it back (`None`: leaked), and its `Listed` then.
        pool: Option<(PoolKey, Option<Listed>)>,
    }

    /// A `CudaSlice<T>` whose drop never frees its memory (cudarc's `leak`): what a pool or an
    /// alias drops, however it is dropped (a pool's eviction, a thread's exit).
    pub struct Leaky<T>(Option<CudaSlice<T>>);

    impl<T> Leaky<T> {
        fn get(&mut self) -> &mut CudaSlice<T> {
            self.0.as_mut().expect("emptied only by its drop")
        }
    }

    impl<T> Drop for Leaky<T> {
        fn drop(&mut self) {
            if let Some(slice) = self.0.take() {
                // Waits on the alias's events (in multi-stream mode), frees nothing.
                let _ = slice.leak();
            }
        }
    }

    /// A pooled alias's key: its stream (the `Arc`'s address: the alias holds that `Arc`, so
    /// the address is not reused while it is pooled), context, address, length, element type
    /// and whether it was made with cudarc's event tracking on (it then has events).
    type PoolKey = (usize, CUcontext, CUdeviceptr, usize, TypeId, bool);

    /// A pooled alias: its key, its `Box<Leaky<T>>`, its `Listed`.
    type Pooled = (PoolKey, Box<dyn core::any::Any>, Listed);

    /// How many eager aliases a thread keeps (beyond it, the one at the front of the pool is
    /// leaked: one of the older, since a reuse moves the last one into the reused one's place).
    const POOL: usize = 64;

    std::thread_local! {
        /// This thread's eager aliases not in use: `Box<CudaSlice<T>>` with its `Listed`.
        static EAGER: RefCell<Vec<Pooled>> =
            const { RefCell::new(Vec::new()) };
        /// Set by the caller before eager aliases are dropped when the closure's work may be on
        /// other streams than the call's (a fork, a helper): their drop then makes the call's
        /// stream wait on their events, as a leaked alias does.
        static EAGER_JOIN: Cell<bool> = const { Cell::new(false) };
    }

    /// Whether the eager aliases dropped next must make their stream wait on their events.
    pub(crate) fn eager_join(join: bool) {
        EAGER_JOIN.with(|j| j.set(join));
    }

    impl<T: 'static> Alias<T> {
        /// The alias of `len` elements at `ptr`.
        ///
        /// # Safety
        /// `ptr` is device memory of `stream`'s context with room for `len` elements of `T`,
        /// and stays borrowed (so allocated) for as long as the alias lives.
        pub(crate) unsafe fn new(stream: &Arc<CudaStream>, ptr: CUdeviceptr, len: usize) -> Self {
            // SAFETY: the caller's contract; the memory is never freed through the alias (drop
            // leaks it), and holds valid `T`s: it is the operand's own memory.
            let slice = Box::new(Leaky(Some(unsafe { stream.upgrade_device_ptr(ptr, len) })));
            Alias { slice: Some(slice), pool: None }
        }

        /// [`new`](Self::new) for a closure run eagerly (`Mode::Eager`) on `stream`: taken from
        /// this thread's pool when an alias of the same memory on the same stream is there, and
        /// given back by the drop. Saves the two `cuEventCreate`, the waits of `listed` and the
        /// alias's `leak`, and the two `cuEventDestroy` per operand and call. Eagerly nothing is
        /// captured, so waits on events recorded by an earlier call are harmless: those
        /// recordings are on the call's stream, or on a stream joined back into it at that
        /// call's end, so before the call's stream's current work.
        ///
        /// # Safety
        /// As [`new`](Self::new).
        pub(crate) unsafe fn pooled(
            stream: &Arc<CudaStream>,
            ptr: CUdeviceptr,
            len: usize,
        ) -> Self {
            let ctx = stream.context();
            let key: PoolKey = (
                Arc::as_ptr(stream) as usize,
                ctx.cu_ctx(),
                ptr,
                len,
                TypeId::of::<T>(),
                ctx.is_event_tracking(),
            );
            let found = EAGER.with(|p| {
                let mut p = p.borrow_mut();
                let at = p.iter().rposition(|(k, _, _)| *k == key)?;
                // Not `remove`: the entries after it would move (128 bytes each; 6 % of an eager
                // call of four capture statements, callgrind).
                Some(p.swap_remove(at))
            });
            if let Some((_, any, listed)) = found
                && let Ok(slice) = any.downcast::<Leaky<T>>()
            {
                return Alias { slice: Some(slice), pool: Some((key, Some(listed))) };
            }
            // SAFETY: the caller's contract.
            let mut alias = unsafe { Self::new(stream, ptr, len) };
            alias.pool = Some((key, None));
            alias
        }

        pub(crate) fn slice(&mut self) -> &mut CudaSlice<T> {
            self.slice.as_mut().expect("an alias is emptied only by its drop").get()
        }

        /// The closure's read-only view of the alias.
        pub(crate) fn view<'s>(&'s mut self, cap: &'s Capture) -> CaptureSlice<'s, T> {
            CaptureSlice { view: self.slice().as_view(), cap }
        }

        /// The closure's view of the alias.
        pub(crate) fn view_mut<'s>(&'s mut self, cap: &'s Capture) -> CaptureSliceMut<'s, T> {
            CaptureSliceMut { view: self.slice().as_view_mut(), cap }
        }

        /// What a [`Capture`] knows of this alias's operand (`write`: listed `&mut`). Takes the
        /// alias's events out of cudarc's guards, whose waits (in multi-stream mode) are on
        /// events never recorded yet: no-ops, inside a capture or not (a pooled alias's, whose
        /// `Listed` is kept, are not asked again).
        pub(crate) fn listed(&mut self, stream: &CudaStream, write: bool) -> Listed {
            if let Some((_, Some(listed))) = &self.pool {
                return Listed { write, ..*listed };
            }
            let slice = self.slice.as_mut().expect("an alias is emptied only by its drop").get();
            let identity: *const Arc<CudaStream> = DeviceSlice::stream(&*slice);
            let on = DeviceSlice::stream(&*slice).cu_stream();
            let on_ctx = DeviceSlice::stream(&*slice).context().cu_ctx();
            let bytes = slice.num_bytes() as u64;
            let (start, mut guard) = DevicePtr::device_ptr(&*slice, stream);
            let read_event = disarm(&mut guard);
            drop(guard);
            let (_, mut guard) = DevicePtrMut::device_ptr_mut(slice, stream);
            let write_event = disarm(&mut guard);
            drop(guard);
            let listed =
                Listed { start, bytes, write, identity, read_event, write_event, on, on_ctx };
            if let Some((_, cached)) = &mut self.pool {
                *cached = Some(listed);
            }
            listed
        }
    }

    impl<T: 'static> Drop for Alias<T> {
        fn drop(&mut self) {
            let Some(mut slice) = self.slice.take() else { return };
            let Some((key, Some(listed))) = self.pool.take() else {
                return; // `Leaky`'s drop: waits on its events (multi-stream mode), frees nothing
            };
            if EAGER_JOIN.with(Cell::get) {
                // As `leak` would: the stream waits for the closure's work on the alias on
                // other streams (cudarc's events of the view).
                let s = DeviceSlice::stream(slice.get());
                // Its context current first: a per-thread or legacy default stream's handle
                // names the current context's stream, and another context may be current here
                // (the closure's last call, or the `leak` of an alias of another device that an
                // earlier drop evicted from the pool; review 26).
                match s.context().bind_to_thread() {
                    Ok(()) => {
                        for e in [listed.read_event, listed.write_event].into_iter().flatten() {
                            // SAFETY: the alias's event, alive (the alias holds it); its
                            // stream alive, its context current.
                            let r = unsafe { raw::wait_event(s.cu_stream(), e) };
                            s.context().record_err(r);
                        }
                    }
                    // The context is unusable: its sticky error fails the call's next step.
                    Err(e) => s.context().record_err(Err::<(), _>(e)),
                }
            }
            let any: Box<dyn core::any::Any> = slice;
            // The oldest beyond the bound is dropped outside the borrow (`Leaky`: never freed).
            let old = EAGER.with(|p| {
                let mut p = p.borrow_mut();
                p.push((key, any, listed));
                (p.len() > POOL).then(|| p.remove(0))
            });
            drop(old);
        }
    }
}

use imp::{Acquired, Listed};

/// The memory one operand was captured with: device address and size in bytes, and whether it
/// was borrowed `&mut`. A launch checks its operands against these (see [`Released::bind`]).
///
/// [`Released::bind`]: crate::Released::bind
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) start: u64,
    pub(crate) bytes: u64,
    pub(crate) write: bool,
}

impl Access {
    pub(crate) fn of(a: &Acquired<'_>) -> Self {
        Access { start: a.guard.start, bytes: a.guard.bytes, write: a.guard.write }
    }
}

/// This thread's origin stream of `ctx` (see [`origin_stream`]), checked not to be capturing:
/// a capture, or another device's eager work, begun inside a capture closure of this thread on
/// the same context is refused (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`) before anything is
/// made on the origin, instead of being enqueued into the outer capture.
pub(crate) fn idle_origin(ctx: &Arc<CudaContext>) -> Result<CaptureOrigin, DriverError> {
    let origin = origin_stream(ctx)?;
    // SAFETY: the origin stream is alive (held by the thread-local table and `origin`).
    let status = unsafe { raw::stream_capture_status(origin.stream.cu_stream()) }?;
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Err(DriverError(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
    }
    Ok(origin)
}

/// The private origin stream of this thread's captures in `ctx`'s context: made once per thread
/// and context with `new_stream`, kept for the thread's life (with its `Arc<CudaContext>`).
///
/// A capture begins on it; the user's stream joins it only through the `unsafe`
/// [`Capture::stream`] (an event recorded in the capture, waited on by the user's stream), so
/// the user's stream is never the capture's origin: cudarc's own `end_capture` called on it
/// inside the closure fails (`CUDA_ERROR_STREAM_CAPTURE_UNMATCHED`) instead of handing out a
/// graph of the closure's work that borrows nothing.
pub(crate) fn origin_stream(ctx: &Arc<CudaContext>) -> Result<CaptureOrigin, DriverError> {
    thread_local! {
        static ORIGINS: std::cell::RefCell<Vec<CaptureOrigin>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    ORIGINS.with(|o| {
        let mut o = o.borrow_mut();
        if let Some(s) = o.iter().find(|s| s.stream.context().cu_ctx() == ctx.cu_ctx()) {
            return Ok(s.clone());
        }
        let flags = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
        let s = CaptureOrigin {
            stream: ctx.new_stream()?,
            fork: Arc::new(ctx.new_event(flags)?),
            join: Arc::new(ctx.new_event(flags)?),
        };
        o.push(s.clone());
        Ok(s)
    })
}

/// What identifies a stream for [`Capture::accepts`]: its handle with its context (a per-thread
/// default stream, `CU_STREAM_PER_THREAD`, is one handle for every context).
pub(crate) fn stream_id(s: &CudaStream) -> (sys::CUstream, CUcontext) {
    (s.cu_stream(), s.context().cu_ctx())
}

/// A stream of `ctx`'s context for [`DeviceSlice::stream`] of a view of an eager capture
/// closure ([`Capture::home`]) that the capture does not accept (`accepted`): one of this
/// thread's home streams of the context, made with `new_stream` when none is free (one, unless
/// a call is made on a home stream or joins one), kept for the thread's life, and never used
/// by the crate otherwise. Safe code may hold one: to it, it is a stream like any other.
fn eager_home(
    ctx: &Arc<CudaContext>,
    accepted: impl Fn(&CudaStream) -> bool,
) -> Result<Arc<CudaStream>, DriverError> {
    thread_local! {
        static HOMES: std::cell::RefCell<Vec<Arc<CudaStream>>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    HOMES.with(|h| {
        let mut h = h.borrow_mut();
        let free = h.iter().find(|s| s.context().cu_ctx() == ctx.cu_ctx() && !accepted(s));
        if let Some(s) = free {
            return Ok(s.clone());
        }
        let s = ctx.new_stream()?;
        h.push(s.clone());
        Ok(s)
    })
}

/// A capture origin: the stream and the two events that fork the user's stream into its capture
/// and join it back (made once, reused by every capture of the thread in that context).
#[derive(Clone)]
pub(crate) struct CaptureOrigin {
    stream: Arc<CudaStream>,
    fork: Arc<CudaEvent>,
    join: Arc<CudaEvent>,
}

impl CaptureOrigin {
    /// The stream: also the thread's helper stream of its context, on which eager work of
    /// another device runs and aliases of that device's capture operands are made.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The event that orders other streams after work on this origin's context's streams.
    pub(crate) fn fork_event(&self) -> &CudaEvent {
        &self.fork
    }

    /// The event that orders other streams after work on this origin's stream.
    pub(crate) fn join_event(&self) -> &CudaEvent {
        &self.join
    }
}

/// `to` waits for the work enqueued on `from` so far, the two of any contexts (devices):
/// `cuEventRecord` of `event` (of `from`'s context) on `from`, then `cuStreamWaitEvent` on `to`,
/// each with its stream's context current (a legacy default stream is the current context's).
/// Inside a capture this joins `to` into it (when `from` is capturing), or `from`'s work back
/// into `to`'s capture. Leaves `to`'s context current.
pub(crate) fn order_streams(
    from: &CudaStream,
    event: &CudaEvent,
    to: &CudaStream,
) -> Result<(), DriverError> {
    from.context().bind_to_thread()?;
    // SAFETY: both streams and the event are alive (borrowed); the event is of `from`'s
    // context, which is current; `cuStreamWaitEvent` accepts an event of another context.
    unsafe { raw::record_event(event.cu_event(), from.cu_stream()) }?;
    to.context().bind_to_thread()?;
    unsafe { raw::wait_event(to.cu_stream(), event.cu_event()) }
}

/// `cuStreamBeginCapture_v2` on the origin, in `CU_STREAM_CAPTURE_MODE_RELAXED`: the closure
/// may make any CUDA call that does not touch the capture (a buffer or module dropped inside it
/// is freed or unloaded at once, not refused), and the user's stream stays out of the capture
/// until [`Capture::stream`] joins it.
///
/// # Safety
/// The origin is this thread's, alive, of the current context, and not capturing.
pub(crate) unsafe fn begin_origin(origin: &CaptureOrigin) -> Result<(), DriverError> {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: the caller's contract.
    unsafe { raw::stream_begin_capture(origin.stream.cu_stream(), mode) }
}

/// `joined` (the user's stream, when [`Capture::stream`] joined it) joins back into the origin
/// (`cuEventRecord` on it, `cuStreamWaitEvent` on the origin), then `cuStreamEndCapture` on the
/// origin: the recording.
///
/// # Safety
/// This thread began the capture with [`begin_origin`] on `origin`; `joined` is alive, of the
/// current context, and was joined into the capture.
pub(crate) unsafe fn end_origin(
    origin: &CaptureOrigin,
    joined: Option<&CudaStream>,
) -> Result<CUgraph, DriverError> {
    let o = origin.stream.cu_stream();
    if let Some(s) = joined {
        // An error here (an invalidated capture) shows in the end of the capture.
        // SAFETY: the caller's contract.
        let _ = unsafe { raw::record_event(origin.join.cu_event(), s.cu_stream()) }
            .and_then(|()| unsafe { raw::wait_event(o, origin.join.cu_event()) });
    }
    // SAFETY: the caller's contract.
    unsafe { raw::stream_end_capture(o) }
}

/// The addresses still allocated after a recording's allocations and frees: the driver hands
/// an address freed inside the graph to a later allocation of the same graph, so an address is
/// live when it was allocated more often than freed (once more, at most; measured on the H200:
/// a library's scratch freed, then its next output at the same address).
fn live(allocs: &[(CUdeviceptr, usize)], freed: &[CUdeviceptr]) -> Vec<CUdeviceptr> {
    let mut out: Vec<CUdeviceptr> = Vec::new();
    for &(d, _) in allocs {
        let made = allocs.iter().filter(|a| a.0 == d).count();
        let gone = freed.iter().filter(|&&f| f == d).count();
        if made > gone && !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

/// A graph's memory allocation nodes `(address, bytes)` and its free nodes' addresses.
type MemoryNodes = (Vec<(CUdeviceptr, usize)>, Vec<CUdeviceptr>);

/// The memory allocation nodes `(address, bytes)` and the addresses of the memory free nodes of
/// `graph` (its top level: a recording's).
///
/// # Safety
/// `graph` is alive.
unsafe fn memory_nodes(graph: CUgraph) -> Result<MemoryNodes, DriverError> {
    let (mut allocs, mut freed) = (Vec::new(), Vec::new());
    // SAFETY: the caller's contract.
    for n in unsafe { raw::graph_nodes(graph) }? {
        // SAFETY: `n` is a node of the live graph, of the type asked.
        match unsafe { raw::node_type(n) }? {
            sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                allocs.push(unsafe { raw::mem_alloc_node(n) }?)
            }
            sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => {
                freed.push(unsafe { raw::mem_free_node(n) }?)
            }
            _ => {}
        }
    }
    Ok((allocs, freed))
}

/// The graph memory of a recording: its memory allocation nodes, each freed by a free node of
/// the recording (a buffer the closure allocated while captured and dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordingMemory {
    /// How many allocation nodes.
    pub(crate) allocations: u32,
    /// Their sizes summed, in bytes: what each launch of the recording allocates from the
    /// device's graph memory pool (allocations whose lifetimes do not overlap may share it).
    pub(crate) bytes: u64,
}

impl RecordingMemory {
    /// Whether the recording has memory nodes (which a child-graph node holds only with its
    /// graph moved in, and an exec updates only by a new instantiation).
    pub(crate) fn any(&self) -> bool {
        self.allocations > 0
    }
}

/// Whether a capture may begin on `stream`, else the refusal (the call to name and the error):
/// the stream is already capturing, or it is the legacy default stream, which cannot capture.
///
/// cudarc's event tracking is not needed: safe code in the closure records only through the
/// [`Capture`]'s methods, on listed operands, on one stream (the capture's, or the call's once
/// the `unsafe` [`Capture::stream`] joined it: [`Capture::current`]); a buffer the closure did
/// not list cannot be recorded, with or without cudarc's events. Only [`Capture::fork`] (a
/// second stream whose work on the views cudarc's events order) and another device's helper
/// stream ([`require_tracking`]) need them.
///
/// # Safety
/// `stream` is alive and its context current.
pub(crate) unsafe fn can_capture(stream: &CudaStream) -> Result<(), (&'static str, DriverError)> {
    let s = stream.cu_stream();
    // SAFETY: the caller's contract.
    let status =
        unsafe { raw::stream_capture_status(s) }.map_err(|e| ("cuStreamIsCapturing", e))?;
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        let error = DriverError(CUresult::CUDA_ERROR_ILLEGAL_STATE);
        return Err(("cuStreamBeginCapture (the stream is already capturing)", error));
    }
    if s.is_null() {
        return Err((LEGACY_STREAM, DriverError(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)));
    }
    Ok(())
}

/// Whether cudarc manages stream synchronization for `stream`'s context object (event tracking
/// on, its default, and a stream made with `new_stream` on it), as the helper stream of another
/// device's operands needs: its work on that device's views is ordered with the capture's by
/// cudarc's events of the views.
pub(crate) fn require_tracking(stream: &CudaStream) -> Result<(), &'static str> {
    if stream.context().is_managing_stream_synchronization() {
        Ok(())
    } else {
        Err("cuStreamBeginCapture, not called: an operand of another device needs cudarc to \
             manage stream synchronization on that device's context object (event tracking on, \
             its default, and a stream made with `ctx.new_stream()` on that object), whose \
             events order the work of that device's stream with the capture's; the check")
    }
}

/// The legacy default stream cannot capture.
pub(crate) const LEGACY_STREAM: &str = "cuStreamBeginCapture, not called: the legacy default \
    stream (`ctx.default_stream()`) cannot capture; use a stream from `ctx.new_stream()`; the check";

/// Checks a recording's memory nodes and returns its graph memory. What the closure allocated
/// while captured (on a stream joined with the `unsafe` [`Capture::stream`] or
/// [`Capture::fork`]) is graph memory of the recording, which exists only inside each launch:
/// accepted when the closure freed every such buffer (dropped it: a free node), so that nothing
/// it allocated outlives a launch. Refused:
/// - an allocation no free node frees: a buffer that outlived the closure (kept by its
///   environment, or by a library across calls) would point into the recording's graph memory,
///   which is not allocated outside a launch and is freed again by the next one (and a graph
///   with a live allocation cannot be launched again);
/// - a free node of memory the recording did not allocate (a buffer made before the capture and
///   dropped in the closure: every launch would free memory the recording does not own).
///
/// `kept`: the addresses the closure kept ([`Capture::keep`], the standalone capture only),
/// allocations of the recording that no free node frees by design: each must be live at the
/// end (it is: `keep` leaked the buffer), and is not counted as a buffer that outlived the
/// closure.
pub(crate) fn check_recording(
    graph: CUgraph,
    kept: &[CUdeviceptr],
) -> core::result::Result<RecordingMemory, &'static str> {
    // SAFETY: the graph is alive (just recorded, owned by the caller).
    let (allocs, freed) =
        unsafe { memory_nodes(graph) }.map_err(|_| "cuGraphGetNodes / cuGraphNodeGetType")?;
    let made = |d: &CUdeviceptr| allocs.iter().filter(|a| a.0 == *d).count();
    if freed.iter().any(|d| freed.iter().filter(|&f| f == d).count() > made(d)) {
        return Err("cuStreamEndCapture (the closure freed device memory while captured that it \
                    did not allocate in the capture: a buffer dropped in the closure would be \
                    freed by every launch of the recording, which does not own it; drop buffers \
                    after the capture)");
    }
    let mut live = live(&allocs, &freed);
    for k in kept {
        let Some(i) = live.iter().position(|d| d == k) else {
            return Err("cuStreamEndCapture (an output the closure kept with Capture::keep was \
                        freed in the recording after all)");
        };
        live.swap_remove(i);
    }
    if !live.is_empty() {
        return Err("cuStreamEndCapture (the closure allocated device memory while captured and \
                    did not free it: a buffer that outlives the closure, kept by its environment \
                    or by a library across calls, would point into the recording's graph memory; \
                    drop every buffer allocated in the closure before it returns, copying a \
                    result into a listed `&mut` operand (or, in cudagraph::capture, keeping it \
                    with Capture::keep), or give the library memory made before the capture, \
                    e.g. cublasSetWorkspace)");
    }
    let bytes = allocs.iter().map(|&(_, b)| b as u64).sum();
    Ok(RecordingMemory { allocations: allocs.len() as u32, bytes })
}
