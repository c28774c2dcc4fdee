//! Whether Redis answers, as exact mode's decisions and sync mode's task both count it: errors, outages
//! and round trips.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::metrics::{LatencyBuckets, LatencyHistogram};

/// Up or down, counted in transitions: even while Redis answers, odd during an outage. A round trip
/// reads it when it starts ([`Health::seen`]) and moves it only from that reading (compare-exchange): a
/// reply that lands after the state moved on (a call in flight when an outage began or ended, on a
/// connection that died with the old server) is counted as an error or not, and changes nothing. So
/// one outage is one transition down and one up, logged once each, however many callers were in flight.
#[derive(Debug, Default)]
pub struct Health {
    transitions: AtomicU64,
    errors: AtomicU64,
    /// Outages begun: transitions from up to down.
    outages: AtomicU64,
    /// Every round trip (shared with the replies that land on the client's runtime).
    latency: Arc<LatencyHistogram>,
}

/// What `stats()` shows of a store's health.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// Round trips that failed (each decided by `on_error`, or a sync whose usage was kept).
    pub errors: u64,
    /// Whether the last round trip failed and none has been answered since.
    pub down: bool,
    pub outages: u64,
    pub latency: LatencyBuckets,
    /// Lease mode's standing share this process holds (1-based), if any.
    pub standing_share: Option<u32>,
}

impl Health {
    /// The state a round trip starts from.
    pub fn seen(&self) -> u64 {
        self.transitions.load(Ordering::Acquire)
    }

    /// Counts a failed round trip that started at `seen`; whether it began an outage (only the first
    /// failure of round trips started while up does).
    pub fn failed(&self, seen: u64) -> bool {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let began = seen.is_multiple_of(2)
            && self.transitions.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if began {
            self.outages.fetch_add(1, Ordering::Relaxed);
        }
        began
    }

    /// Counts a failure that moves no state (a give-back: the decisions around it begin and end the
    /// outage).
    pub fn count_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes an answer to a round trip that started at `seen`; whether it ended an outage (only the
    /// first answer to round trips started while down does).
    pub fn answered(&self, seen: u64) -> bool {
        !seen.is_multiple_of(2)
            && self.transitions.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// A timer for a round trip started now, to hand to [`RoundTrip::done`] when its reply lands.
    pub fn round_trip(&self) -> RoundTrip {
        RoundTrip { latency: Arc::clone(&self.latency), started: Instant::now() }
    }

    pub fn report(&self) -> HealthReport {
        HealthReport {
            errors: self.errors.load(Ordering::Relaxed),
            down: !self.seen().is_multiple_of(2),
            outages: self.outages.load(Ordering::Relaxed),
            latency: self.latency.snapshot(),
            standing_share: None,
        }
    }
}

/// A round trip under way (sendable to the thread its reply lands on).
pub struct RoundTrip {
    latency: Arc<LatencyHistogram>,
    started: Instant,
}

impl RoundTrip {
    pub fn done(self) {
        self.latency.record(u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::Health;

    #[test]
    fn an_outage_begins_and_ends_once_however_many_round_trips_were_in_flight() {
        let health = Health::default();
        let (first, second) = (health.seen(), health.seen());
        assert!(health.failed(first));
        assert!(!health.failed(second), "a second failure of the same outage begins nothing");
        assert!(health.report().down);
        let (third, fourth) = (health.seen(), health.seen());
        // A reply to a call sent before the outage began changes nothing.
        assert!(!health.answered(first));
        assert!(health.answered(third));
        assert!(!health.answered(fourth));
        let report = health.report();
        assert_eq!((report.errors, report.down, report.outages), (2, false, 1));
    }
}
