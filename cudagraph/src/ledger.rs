//! The stream ledger: ordering a graph launch with its buffers' own streams, for the
//! [`GraphCache`](crate::GraphCache)'s calls and for [`Exec`](crate::Exec)'s launches.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUevent, CUstream};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

use crate::error::{Call, CudaError};
use crate::operand::per_thread;
use crate::raw;

/// The stream ledger of a graph launch, shared by [`GraphCache`](crate::GraphCache) and
/// [`Exec`](crate::Exec): before the launch, the launch stream waits for the work already on each
/// buffer's own stream (the one it was allocated on, which frees it: `cuEventRecord` there,
/// `cuStreamWaitEvent` on the launch stream); after it, each own stream waits for the launch.
/// Every graph use of a buffer so leaves its completion on the buffer's own stream: a graph
/// waits for every earlier graph use of its buffers, readers included, on any stream and
/// whatever cudarc's event mode, and a buffer dropped right after a launch is freed after it,
/// whichever context object allocated it. Nothing to do while every buffer lives on the launch
/// stream. Own streams of other contexts (buffers of another device in a multi-device call) are
/// ordered the same way, with events of their own contexts recorded on them.
#[derive(Default)]
pub(crate) struct Ledger {
    /// The own streams other than the launch stream, each once, with the index of their
    /// context's pool: scratch of one launch, filled by [`Self::before`] and used by
    /// [`Self::after`].
    own: Vec<(CUstream, usize)>,
    /// Reusable events by context: `pools[0]` is the launch stream's context (its event 0
    /// marks the launch, the others the own streams' work of that context); the others are the
    /// contexts of own streams of other devices (a multi-device call), one event per own stream.
    pools: Vec<Pool>,
    /// Whether this launch's stream is a per-thread default stream ([`per_thread`]): set by
    /// [`Self::before`], read by [`Self::after`]. Such a launch, or one with a buffer whose own
    /// stream is one, is also waited for by the context's legacy default stream (reviews 33 and
    /// 33b): every thread's per-thread default stream synchronizes with the legacy stream, so
    /// whatever is enqueued on any of them later (a graph on another thread, the buffer's free
    /// when it is dropped there) runs after the launch, whether cudarc tracks the buffers'
    /// events or not, and whatever cudarc's mode is by then.
    per_thread: bool,
}

/// Events of one context, reused from launch to launch.
struct Pool {
    ctx: CUcontext,
    /// The context object the own streams belong to (to bind it and make events).
    owner: Arc<CudaContext>,
    events: Vec<CudaEvent>,
    /// Events handed out in this launch.
    used: usize,
}

// SAFETY: `own` holds streams only between `before` and `after` of one launch, while the borrowed
// buffers that hold those streams are alive; the events and contexts are cudarc's, which are
// `Send`.
unsafe impl Send for Ledger {}

impl Ledger {
    /// Before the launch on `stream`: `owns` are the launch's buffers' own streams (`None` for a
    /// buffer without one), of any context. Returns how many `cuStreamWaitEvent`s it made.
    pub(crate) fn before<'s>(
        &mut self,
        stream: &CudaStream,
        owns: impl IntoIterator<Item = Option<&'s CudaStream>>,
    ) -> Result<u64, CudaError> {
        self.own.clear();
        self.per_thread = per_thread(stream.cu_stream());
        let (launch_raw, launch_ctx) = (stream.cu_stream(), stream.context().cu_ctx());
        // The own stream of the place before, already looked at.
        let mut prev: *const CudaStream = stream;
        for o in owns.into_iter().flatten() {
            // The launch stream itself, or the stream the place before was made on (the common
            // cases: one look, no pointer chasing).
            if core::ptr::eq(o, prev) || core::ptr::eq(o, stream) {
                continue;
            }
            prev = o;
            let raw = o.cu_stream();
            // Two streams of two contexts may both be a legacy default stream (null).
            let ctx = o.context().cu_ctx();
            let same = |&(s, p): &(CUstream, usize)| s == raw && self.pools[p].ctx == ctx;
            if (raw == launch_raw && ctx == launch_ctx) || self.own.iter().any(same) {
                continue;
            }
            let pool = self.pool(stream, o.context())?;
            self.own.push((raw, pool));
        }
        if self.own.is_empty() {
            return Ok(0);
        }
        for p in &mut self.pools {
            p.used = 0;
        }
        // Event 0 of the launch context marks the launch (see `after`).
        self.pools[0].used = 1;
        let launch_ctx = stream.context();
        for i in 0..self.own.len() {
            let (o, p) = self.own[i];
            let e = self.event(p)?;
            let pool = &self.pools[p];
            let foreign = p != 0;
            if foreign {
                // A legacy default stream (null) is the current context's: bind the own one.
                pool.owner.bind_to_thread().call("cuCtxSetCurrent")?;
            }
            // SAFETY: `o` is alive (the borrowed buffer holds it) and of the pool's context,
            // which is current, as is the event; the launch stream waits for it whatever its
            // context (`cuStreamWaitEvent` accepts an event of another context).
            let recorded = unsafe { raw::record_event(e, o) }.call("cuEventRecord");
            if foreign {
                launch_ctx.bind_to_thread().call("cuCtxSetCurrent")?;
            }
            recorded?;
            unsafe { raw::wait_event(stream.cu_stream(), e) }.call("cuStreamWaitEvent")?;
        }
        Ok(self.own.len() as u64)
    }

    /// After the launch on `stream`: each own stream that [`Self::before`] found for this launch
    /// waits for it. With `unlisted` (the launch ran captured work, whose closure may have used
    /// buffers it did not list), the context's legacy default stream waits for it too: such a
    /// buffer, of a `CudaContext` object cudarc does not track (one that made no stream), lives
    /// on the legacy default stream, or on the per-thread one, which waits for the legacy one, and
    /// so is freed after the launch. Safe code in a closure records only on listed operands;
    /// joined work that touches other memory breaks the contract of the `unsafe`
    /// `Capture::stream`/`fork`. The legacy stream also waits when the launch stream or an own
    /// stream is a per-thread default stream (see [`per_thread`]), and for an own per-thread
    /// stream of another context, that context's legacy stream. Returns how many
    /// `cuStreamWaitEvent`s it made.
    pub(crate) fn after(&mut self, stream: &CudaStream, unlisted: bool) -> Result<u64, CudaError> {
        if self.own.is_empty() && !unlisted && !self.per_thread {
            return Ok(0);
        }
        self.pool(stream, stream.context())?;
        if self.pools[0].events.is_empty() {
            self.pools[0].used = 0;
            self.event(0)?;
        }
        let done = self.pools[0].events[0].cu_event();
        // SAFETY: as in `before`; the null stream is the current context's legacy default
        // stream, which always exists.
        unsafe { raw::record_event(done, stream.cu_stream()) }.call("cuEventRecord")?;
        let launch_ctx = stream.context();
        // The launch context's legacy default stream waits too: for `unlisted`, or a
        // per-thread default stream as the launch stream or an own stream (see `per_thread`).
        let mut legacy = unlisted || self.per_thread;
        let mut waits = self.own.len() as u64;
        for &(o, p) in &self.own {
            if p == 0 {
                unsafe { raw::wait_event(o, done) }.call("cuStreamWaitEvent")?;
                legacy |= per_thread(o);
                continue;
            }
            // A stream of another context waits for the launch's event (of the launch
            // context): accepted by `cuStreamWaitEvent`; its context is bound for a null stream
            // (and for its per-thread one, whose legacy stream then waits as well).
            self.pools[p].owner.bind_to_thread().call("cuCtxSetCurrent")?;
            let mut waited = unsafe { raw::wait_event(o, done) }.call("cuStreamWaitEvent");
            if waited.is_ok() && per_thread(o) {
                waits += 1;
                waited = unsafe { raw::wait_event(core::ptr::null_mut(), done) }
                    .call("cuStreamWaitEvent");
            }
            launch_ctx.bind_to_thread().call("cuCtxSetCurrent")?;
            waited?;
        }
        if legacy {
            unsafe { raw::wait_event(core::ptr::null_mut(), done) }.call("cuStreamWaitEvent")?;
        }
        Ok(waits + u64::from(legacy))
    }

    /// The pool of `ctx`'s events; the launch stream's context is always pool 0 (the pools are
    /// dropped when the launch stream's context changes).
    fn pool(&mut self, stream: &CudaStream, ctx: &Arc<CudaContext>) -> Result<usize, CudaError> {
        let launch = stream.context();
        if self.pools.first().is_none_or(|p| p.ctx != launch.cu_ctx()) {
            self.pools.clear();
            let owner = launch.clone();
            self.pools.push(Pool { ctx: owner.cu_ctx(), owner, events: Vec::new(), used: 0 });
        }
        if let Some(i) = self.pools.iter().position(|p| p.ctx == ctx.cu_ctx()) {
            return Ok(i);
        }
        let owner = ctx.clone();
        self.pools.push(Pool { ctx: owner.cu_ctx(), owner, events: Vec::new(), used: 0 });
        Ok(self.pools.len() - 1)
    }

    /// The next unused event of pool `p` in this launch, made when needed.
    fn event(&mut self, p: usize) -> Result<CUevent, CudaError> {
        let pool = &mut self.pools[p];
        while pool.events.len() <= pool.used {
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
            pool.events.push(pool.owner.new_event(Some(flags)).call("cuEventCreate")?);
        }
        pool.used += 1;
        Ok(pool.events[pool.used - 1].cu_event())
    }
}
