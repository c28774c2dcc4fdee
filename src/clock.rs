//! Monotonic time in integer nanoseconds, and a manual clock for tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
    /// Nanoseconds since the clock was made, from the OS monotonic clock.
    Monotonic(Instant),
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
        Self::Monotonic(Instant::now())
    }

    #[inline]
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        match self {
            // u64 nanoseconds last 584 years of uptime; the conversion cannot truncate in practice.
            #[allow(clippy::cast_possible_truncation)]
            Self::Monotonic(origin) => origin.elapsed().as_nanos() as u64,
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
