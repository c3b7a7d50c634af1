//! The stream ledger (ordering a call with its buffers' own streams) and the aliasing check
//! of the call's buffer ranges.

use cudarc::driver::CudaStream;
use cudarc::driver::sys;

use super::{GraphCache, Shape};
use crate::error::{Call, CudaError, Error, Result};
use crate::operand::Guard;
use crate::raw::{self, Driver};

impl<D: Driver> GraphCache<D> {
    /// Fills `self.own` with the streams other than `stream` that own a buffer of the call,
    /// each once.
    fn own_streams(&mut self, stream: &CudaStream, guards: &[Guard<'_>]) {
        self.own.clear();
        for (_, g) in Guard::leaves(guards) {
            if let Some(o) = g.own
                && o != stream.cu_stream()
                && !self.own.contains(&o)
            {
                self.own.push(o);
            }
        }
    }

    /// `n` reusable events of `stream`'s context.
    fn ledger_events(&mut self, stream: &CudaStream, n: usize) -> Result<(), CudaError> {
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

    /// The ledger, before the launch: `stream` waits for the work already on each buffer's own
    /// stream (`cuEventRecord` there, `cuStreamWaitEvent` here). Every graph use of a buffer
    /// leaves its completion on the buffer's own stream ([`Self::order_after`]), so a graph
    /// waits for every earlier graph use of its buffers, readers included, on any stream and
    /// whatever cudarc's event mode. Nothing to do while every buffer lives on `stream`.
    pub(super) fn order_before(
        &mut self,
        stream: &CudaStream,
        guards: &[Guard<'_>],
    ) -> Result<(), CudaError> {
        self.own_streams(stream, guards);
        if self.own.is_empty() {
            return Ok(());
        }
        self.ledger_events(stream, self.own.len() + 1)?;
        for (&o, e) in self.own.iter().zip(&self.events[1..]) {
            // SAFETY: `o` is alive (the borrowed buffer holds it) and of the context of
            // `stream`, which is current (`run_call`), as is the event.
            unsafe { raw::record_event(e.cu_event(), o) }.call("cuEventRecord")?;
            unsafe { raw::wait_event(stream.cu_stream(), e.cu_event()) }
                .call("cuStreamWaitEvent")?;
            self.stats.stream_waits += 1;
        }
        Ok(())
    }

    /// The ledger, after the launch: each buffer's own stream waits for the graph
    /// (`cuEventRecord` on `stream`, `cuStreamWaitEvent` there). cudarc frees a buffer on its
    /// own stream (`cuMemFreeAsync`, or after synchronizing it), so a buffer dropped right
    /// after the call is freed after the graph, whichever context object allocated it and
    /// whatever cudarc's stream mode is by then; later work on the own stream waits too. Uses the
    /// own streams and events that [`Self::order_before`] found and made for this call.
    pub(super) fn order_after(&mut self, stream: &CudaStream) -> Result<(), CudaError> {
        if self.own.is_empty() {
            return Ok(());
        }
        let done = self.events[0].cu_event();
        // SAFETY: as in `order_before`.
        unsafe { raw::record_event(done, stream.cu_stream()) }.call("cuEventRecord")?;
        for &o in &self.own {
            unsafe { raw::wait_event(o, done) }.call("cuStreamWaitEvent")?;
            self.stats.stream_waits += 1;
        }
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
