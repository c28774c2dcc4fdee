//! Monotonic time in integer nanoseconds, and a manual clock for tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::state_map::region::clock::{kernel_now_ns, RegionClock, DRIFT_BOUND_NS};

/// The latest instant a manual clock may be set or moved to: 2**62 ns, about 146 years. Past 2**64 ns
/// the time would saturate (and read as infinity, where every request is admitted); the margin keeps
/// deadlines (an instant plus a wait) and the algorithms' sums far from it.
pub const MAX_MANUAL_NS: u64 = 1 << 62;

/// The latest deadline a wait may move a manual clock to: `MAX_MANUAL_NS` plus more than any wait.
pub const MAX_DEADLINE_NS: u64 = 1 << 63;

/// A clock advanced by hand: tests move time instead of sleeping (as governor's `FakeRelativeClock`).
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    #[must_use]
    pub fn new(start_ns: u64) -> Self {
        Self { nanos: AtomicU64::new(start_ns) }
    }

    pub fn now_ns(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }

    pub fn advance_ns(&self, by: u64) {
        self.nanos.fetch_add(by, Ordering::AcqRel);
    }

    /// Moves the clock `by` nanoseconds forward unless that would carry it past `MAX_MANUAL_NS`;
    /// returns the new time, or `None` (and leaves the clock) if it would.
    pub fn try_advance_ns(&self, by: u64) -> Option<u64> {
        let moved = |now: u64| now.checked_add(by).filter(|&t| t <= MAX_MANUAL_NS);
        self.nanos.fetch_update(Ordering::AcqRel, Ordering::Acquire, moved).ok().and_then(moved)
    }

    /// Moves the clock to `deadline` unless it is already past it; what a wait on this clock does,
    /// so that several waiters ending at different instants leave the clock at the latest one.
    pub fn advance_to_ns(&self, deadline: u64) {
        self.nanos.fetch_max(deadline, Ordering::AcqRel);
    }
}

/// Where a limiter reads the time. An enum rather than a trait object: the hot path stays inlinable.
#[derive(Debug, Clone)]
pub enum Clock {
    /// Nanoseconds since the clock was made. `quanta` reads the TSC where it is invariant (about
    /// 11 ns here, where the vDSO `clock_gettime` behind `Instant` takes 23 ns) and falls back to the
    /// OS monotonic clock elsewhere.
    Monotonic {
        clock: quanta::Clock,
        origin: u64,
    },
    Manual(Arc<ManualClock>),
    /// The kernel's monotonic clock (`CLOCK_MONOTONIC`): one origin for every process of the machine,
    /// so states a shared region holds compare across processes (quanta's origin is per process).
    Machine,
    /// A shared region's clock: the TSC through one calibration in the region's header, which every
    /// process of the region reads, within `DRIFT_BOUND_NS` of `CLOCK_MONOTONIC` (or that clock itself
    /// where the TSC cannot be trusted); see `state_map::region::clock`.
    Region(Arc<RegionClock>),
}

impl Default for Clock {
    fn default() -> Self {
        Self::monotonic()
    }
}

impl Clock {
    #[must_use]
    pub fn monotonic() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self::Monotonic { clock, origin }
    }

    #[inline]
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        match self {
            Self::Monotonic { clock, origin } => clock.delta_as_nanos(*origin, clock.raw()),
            Self::Manual(clock) => clock.now_ns(),
            Self::Machine => kernel_now_ns(),
            Self::Region(clock) => clock.now_ns(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward_to_deadlines() {
        let clock = ManualClock::new(10);
        clock.advance_ns(5);
        assert_eq!(clock.now_ns(), 15);
        clock.advance_to_ns(12);
        assert_eq!(clock.now_ns(), 15);
        clock.advance_to_ns(40);
        assert_eq!(clock.now_ns(), 40);
    }

    #[test]
    fn manual_clock_stops_short_of_its_end() {
        let clock = ManualClock::new(MAX_MANUAL_NS - 10);
        assert_eq!(clock.try_advance_ns(10), Some(MAX_MANUAL_NS));
        assert_eq!(clock.try_advance_ns(1), None);
        assert_eq!(clock.try_advance_ns(u64::MAX), None);
        assert_eq!(clock.now_ns(), MAX_MANUAL_NS);
    }

    #[test]
    fn the_machine_clock_is_one_clock_for_every_process() {
        let mine = Clock::Machine.now_ns();
        // SAFETY: the child only reads the clock and ends.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let theirs = Clock::Machine.now_ns();
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(i32::from(theirs < mine)) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &raw mut status, 0) };
        assert_eq!(status, 0, "a forked process read an earlier time");
        assert!(Clock::Machine.now_ns() >= mine);
    }

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let clock = Clock::monotonic();
        let a = clock.now_ns();
        let b = clock.now_ns();
        assert!(b >= a);
    }
}
