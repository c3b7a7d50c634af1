//! Host time of each phase of a call, for diagnostics (feature `phase-times`, read with
//! [`crate::__private::phase_times`]); without the feature every operation here is empty.

/// `cuCtxSetCurrent` and the launch limits.
pub(crate) const BIND: usize = 0;
/// Each node's parameters, contexts and handles checked (`validate`).
pub(crate) const VALIDATE: usize = 1;
/// The aliasing check of the call's buffer ranges.
pub(crate) const ALIASING: usize = 2;
/// Peer access and each node's `prepare` (captured work recorded).
pub(crate) const PREPARE: usize = 3;
/// The stream ledger, before and after the launch.
pub(crate) const LEDGER: usize = 4;
/// The update ladder: the variant found, each node compared (and updated), host work handed on.
pub(crate) const LADDER_LAUNCH: usize = 5;
/// `cuGraphLaunch`.
pub(crate) const LAUNCH: usize = 6;

/// The phases' names, by index.
#[cfg(feature = "phase-times")]
pub(crate) const NAMES: [&str; 7] =
    ["bind + limits", "validate", "aliasing check", "prepare", "ledger", "ladder", "cuGraphLaunch"];

#[cfg(feature = "phase-times")]
mod on {
    use std::cell::Cell;
    use std::time::Instant;

    thread_local! {
        /// Nanoseconds per phase on this thread since the last read.
        pub(super) static TOTALS: Cell<[i64; 7]> = const { Cell::new([0; 7]) };
    }

    /// A running lap clock.
    pub(crate) struct Clock(Instant);

    impl Clock {
        pub(crate) fn start() -> Clock {
            Clock(Instant::now())
        }
        /// Charges the time since the last lap to `phase`.
        pub(crate) fn lap(&mut self, phase: usize) {
            let now = Instant::now();
            add(phase, (now - self.0).as_nanos() as i64);
            self.0 = now;
        }
        /// Charges the time since the start to `phase`, taking it out of `within`'s.
        pub(crate) fn charge(&self, phase: usize, within: usize) {
            let ns = self.0.elapsed().as_nanos() as i64;
            add(phase, ns);
            add(within, -ns);
        }
    }

    fn add(phase: usize, ns: i64) {
        TOTALS.with(|t| {
            let mut v = t.get();
            v[phase] += ns;
            t.set(v);
        });
    }
}
#[cfg(feature = "phase-times")]
pub(crate) use on::Clock;

/// The phases' totals on this thread since the last call, nanoseconds, and resets them.
#[cfg(feature = "phase-times")]
pub(crate) fn take() -> [(&'static str, i64); 7] {
    let v = on::TOTALS.with(|t| t.replace([0; 7]));
    core::array::from_fn(|i| (NAMES[i], v[i]))
}

/// Without the feature: nothing.
#[cfg(not(feature = "phase-times"))]
pub(crate) struct Clock;

#[cfg(not(feature = "phase-times"))]
impl Clock {
    #[inline(always)]
    pub(crate) fn start() -> Clock {
        Clock
    }
    #[inline(always)]
    pub(crate) fn lap(&mut self, _phase: usize) {}
    #[inline(always)]
    pub(crate) fn charge(&self, _phase: usize, _within: usize) {}
}
