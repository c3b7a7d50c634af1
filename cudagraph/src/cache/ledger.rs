//! The cache's use of the stream ledger ([`Ledger`](crate::ledger::Ledger): ordering a call
//! with its buffers' own streams) and the aliasing check of the call's buffer ranges.

use cudarc::driver::CudaStream;

use super::{GraphCache, GraphCall, Shape, Site};
use crate::error::{CudaError, Error, Result};
use crate::operand::{Guard, GuardList};
use crate::plan::Plan;
use crate::raw::Driver;

impl<D: Driver> GraphCache<D> {
    /// The ledger before the launch (see [`Ledger`](crate::ledger::Ledger)), counted in
    /// `stream_waits`.
    pub(super) fn order_before(
        &mut self,
        stream: &CudaStream,
        guards: &[Guard<'_>],
    ) -> Result<(), CudaError> {
        let owns = Guard::leaves(guards).map(|(_, g)| g.own);
        self.stats.stream_waits += self.ledger.before(stream, owns)?;
        Ok(())
    }

    /// The ledger after the launch (see [`Ledger`](crate::ledger::Ledger); `unlisted`: the call
    /// ran captured work), counted in `stream_waits`.
    pub(super) fn order_after(
        &mut self,
        stream: &CudaStream,
        unlisted: bool,
    ) -> Result<(), CudaError> {
        self.stats.stream_waits += self.ledger.after(stream, unlisted)?;
        Ok(())
    }

    /// [`Self::check_aliasing`] of a changed call, skipped when the call is `guarded` (its
    /// words hold every place's guard) and its words up to its first node equal those of one
    /// of the last two calls of its plan that passed it: then the check holds without this
    /// call's guards (an array's elements' are made only if asked for).
    pub(super) fn check_call_aliasing(
        &mut self,
        call: &GraphCall<'_>,
        guarded: bool,
        guards: &mut dyn GuardList<'_>,
    ) -> Result<()> {
        let by_words = match call.site {
            Site::Plan(plan) if guarded => {
                self.guard_words_end().map(|end| (plan as *const Plan as usize, end))
            }
            _ => None,
        };
        if by_words.is_some_and(|(plan, end)| self.checked_by_words(plan, end)) {
            return Ok(());
        }
        self.check_aliasing(call.shape, guards.made())?;
        if let Some((plan, end)) = by_words {
            self.keep_checked_words(plan, end);
        }
        Ok(())
    }

    /// Where the words of this changed `graph!` call (kept in `packed` by
    /// [`Self::unchanged_words`]) reach its first node: the words before it are the call's tag
    /// and, when the words are `guarded`, every place's guard (address, bytes, written) in the
    /// order the body acquired them, and the contexts of arrays' elements. `None` when the
    /// call's words are not kept (not this call's, or a node did not pack) or hold no node.
    fn guard_words_end(&self) -> Option<usize> {
        if !self.packed_ok {
            return None;
        }
        let first = self.packed_items.iter().find(|i| i.nodes != 0)?;
        (first.start <= self.packed.len()).then_some(first.start)
    }

    /// Whether the words of this call up to `end` ([`Self::guard_words_end`]) equal those of
    /// one of the last two calls of plan `plan` that passed [`Self::check_aliasing`]: the same
    /// places with the same address ranges, so the same result.
    fn checked_by_words(&self, plan: usize, end: usize) -> bool {
        let w = &self.packed[..end];
        self.checked_words.iter().any(|(p, c)| *p == plan && c[..] == w[..])
    }

    /// Keeps this call's words up to `end` as a passed check's ([`Self::checked_by_words`]),
    /// replacing the older of the two.
    fn keep_checked_words(&mut self, plan: usize, end: usize) {
        self.checked_words.swap(0, 1);
        let (p, c) = &mut self.checked_words[1];
        c.clear();
        c.extend_from_slice(&self.packed[..end]);
        *p = plan;
    }

    /// Errors when two places of the call overlap in memory and one of them is written: the
    /// graph would have no edge between their nodes. Borrows prove places distinct for buffers
    /// made by safe code; this catches views of one allocation that cudarc hands out more than
    /// once. Checked only when the ranges or their places differ from both of the last two checked
    /// calls'.
    pub(crate) fn check_aliasing(&mut self, shape: &dyn Shape, guards: &[Guard<'_>]) -> Result<()> {
        // Keyed on each range's place as well: the same ranges as other places (a child graph's
        // operands regrouped) can overlap across places where they did not before.
        let same = |c: &Vec<(usize, u64, u64, bool)>| {
            let mut leaves = Guard::leaves(guards);
            c.iter()
                .all(|c| leaves.next().is_some_and(|(p, g)| *c == (p, g.start, g.bytes, g.write)))
                && leaves.next().is_none()
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
        self.checked[1].extend(Guard::leaves(guards).map(|(p, g)| (p, g.start, g.bytes, g.write)));
        Ok(())
    }
}
