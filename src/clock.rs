//! Monotonic time in integer nanoseconds, and a manual clock for tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    fn monotonic_clock_does_not_go_back() {
        let clock = Clock::monotonic();
        let a = clock.now_ns();
        let b = clock.now_ns();
        assert!(b >= a);
    }
}
