//! The stream ledger (ordering a call with its buffers' own streams) and the aliasing check
//! of the call's buffer ranges.

use cudarc::driver::sys::{self, CUcontext, CUstream};
use cudarc::driver::{CudaEvent, CudaStream};

use super::{GraphCache, Shape};
use crate::error::{Call, CudaError, Error, Result};
use crate::operand::Guard;
use crate::raw::{self, Driver};

/// The stream ledger of a graph launch, shared by [`GraphCache`] and
/// [`Exec`](crate::Exec): before the launch, the launch stream waits for the work already on each
/// buffer's own stream (the one it was allocated on, which frees it: `cuEventRecord` there,
/// `cuStreamWaitEvent` on the launch stream); after it, each own stream waits for the launch.
/// Every graph use of a buffer so leaves its completion on the buffer's own stream: a graph
/// waits for every earlier graph use of its buffers, readers included, on any stream and
/// whatever cudarc's event mode, and a buffer dropped right after a launch is freed after it,
/// whichever context object allocated it. Nothing to do while every buffer lives on the launch
/// stream.
pub(crate) struct Ledger {
    /// The own streams other than the launch stream, each once: scratch of one launch, filled
    /// by [`Self::before`] and used by [`Self::after`].
    own: Vec<CUstream>,
    /// `events[0]` marks the launch, `events[1..]` the own streams' work; of context
    /// `events_ctx`, reused from launch to launch.
    events: Vec<CudaEvent>,
    events_ctx: CUcontext,
}

// SAFETY: `own` holds streams only between `before` and `after` of one launch, while the borrowed
// buffers that hold those streams are alive; the events are cudarc's, which are `Send`.
unsafe impl Send for Ledger {}

impl Default for Ledger {
    fn default() -> Self {
        Ledger { own: Vec::new(), events: Vec::new(), events_ctx: core::ptr::null_mut() }
    }
}

impl Ledger {
    /// Before the launch on `stream`: `owns` are the launch's buffers' own streams (`None` for a
    /// buffer without one). Returns how many `cuStreamWaitEvent`s it made.
    pub(crate) fn before(
        &mut self,
        stream: &CudaStream,
        owns: impl IntoIterator<Item = Option<CUstream>>,
    ) -> Result<u64, CudaError> {
        self.own.clear();
        for o in owns.into_iter().flatten() {
            if o != stream.cu_stream() && !self.own.contains(&o) {
                self.own.push(o);
            }
        }
        if self.own.is_empty() {
            return Ok(0);
        }
        self.events(stream, self.own.len() + 1)?;
        for (&o, e) in self.own.iter().zip(&self.events[1..]) {
            // SAFETY: `o` is alive (the borrowed buffer holds it) and of the context of
            // `stream`, which is current (the callers bind it), as is the event.
            unsafe { raw::record_event(e.cu_event(), o) }.call("cuEventRecord")?;
            unsafe { raw::wait_event(stream.cu_stream(), e.cu_event()) }
                .call("cuStreamWaitEvent")?;
        }
        Ok(self.own.len() as u64)
    }

    /// After the launch on `stream`: each own stream that [`Self::before`] found for this launch
    /// waits for it. With `unlisted` (the launch ran captured work, whose closure may have used
    /// buffers it did not list), the context's legacy default stream waits for it too: such a
    /// buffer, of a `CudaContext` object cudarc does not track (one that made no stream), lives
    /// on the legacy default stream, or on the per-thread one, which waits for the legacy one, and
    /// so is freed after the launch. Buffers of tracked context objects cannot be unlisted (the
    /// capture is refused). Returns how many `cuStreamWaitEvent`s it made.
    pub(crate) fn after(&mut self, stream: &CudaStream, unlisted: bool) -> Result<u64, CudaError> {
        if self.own.is_empty() && !unlisted {
            return Ok(0);
        }
        self.events(stream, 1)?;
        let done = self.events[0].cu_event();
        // SAFETY: as in `before`; the null stream is the current context's legacy default
        // stream, which always exists.
        unsafe { raw::record_event(done, stream.cu_stream()) }.call("cuEventRecord")?;
        for &o in &self.own {
            unsafe { raw::wait_event(o, done) }.call("cuStreamWaitEvent")?;
        }
        if unlisted {
            unsafe { raw::wait_event(core::ptr::null_mut(), done) }.call("cuStreamWaitEvent")?;
        }
        Ok(self.own.len() as u64 + u64::from(unlisted))
    }

    /// `n` reusable events of `stream`'s context.
    fn events(&mut self, stream: &CudaStream, n: usize) -> Result<(), CudaError> {
        let ctx = stream.context();
        if self.events_ctx != ctx.cu_ctx() {
            self.events.clear();
            self.events_ctx = ctx.cu_ctx();
        }
        while self.events.len() < n {
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
            self.events.push(ctx.new_event(Some(flags)).call("cuEventCreate")?);
        }
        Ok(())
    }
}

impl<D: Driver> GraphCache<D> {
    /// The ledger before the launch (see [`Ledger`]), counted in `stream_waits`.
    pub(super) fn order_before(
        &mut self,
        stream: &CudaStream,
        guards: &[Guard<'_>],
    ) -> Result<(), CudaError> {
        let owns = Guard::leaves(guards).map(|(_, g)| g.own);
        self.stats.stream_waits += self.ledger.before(stream, owns)?;
        Ok(())
    }

    /// The ledger after the launch (see [`Ledger`]; `unlisted`: the call ran captured work),
    /// counted in `stream_waits`.
    pub(super) fn order_after(
        &mut self,
        stream: &CudaStream,
        unlisted: bool,
    ) -> Result<(), CudaError> {
        self.stats.stream_waits += self.ledger.after(stream, unlisted)?;
        Ok(())
    }

    /// Errors when two places of the call overlap in memory and one of them is written: the
    /// graph would have no edge between their nodes. Borrows prove places distinct for buffers
    /// made by safe code; this catches views of one allocation that cudarc hands out more than
    /// once. Checked only when the ranges differ from both of the last two checked calls'.
    pub(crate) fn check_aliasing(&mut self, shape: &dyn Shape, guards: &[Guard<'_>]) -> Result<()> {
        let same = |c: &Vec<(u64, u64, bool)>| {
            c.len() == Guard::leaves(guards).count()
                && c.iter()
                    .zip(Guard::leaves(guards))
                    .all(|(c, (_, g))| *c == (g.start, g.bytes, g.write))
        };
        if self.checked.iter().any(same) {
            return Ok(());
        }
        self.stats.alias_checks += 1;
        let mut order = core::mem::take(&mut self.scratch);
        order.clear();
        order.extend(
            Guard::leaves(guards)
                .filter(|(_, g)| g.bytes > 0)
                .map(|(p, g)| (g.start, g.start.saturating_add(g.bytes), g.write, p)),
        );
        order.sort_unstable();
        let overlap = order.iter().enumerate().find_map(|(i, a)| {
            let mut later = order[i + 1..].iter().take_while(|b| b.0 < a.1);
            // Buffers of one place (a child graph's operands) are ordered inside it.
            later.find(|b| (a.2 || b.2) && a.3 != b.3).map(|b| (a.3.min(b.3), a.3.max(b.3)))
        });
        self.scratch = order;
        if let Some((first, second)) = overlap {
            let (first, second) = (shape.place_site(first), shape.place_site(second));
            return Err(Error::Aliasing { first, second });
        }
        // The new set replaces the older one.
        self.checked.swap(0, 1);
        self.checked[1].clear();
        self.checked[1].extend(Guard::leaves(guards).map(|(_, g)| (g.start, g.bytes, g.write)));
        Ok(())
    }
}
