//! Counters of what the limiter decided for each group. Kept per shard and updated under the shard's lock (which the
//! decision holds anyway), so counting costs no atomic and no shared cache line; `stats` sums shards. Also the
//! histograms: waits per group (under the same lock) and the sampled decision latency (atomics, touched by one
//! decision in `LATENCY_SAMPLE`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the wait histogram's buckets, in nanoseconds: 1 ms to 60 s (then `+Inf`).
pub const WAIT_BOUNDS_NS: [u64; 14] = [
    1_000_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
];

/// Upper bounds of the decision latency histogram's buckets, in nanoseconds: 100 ns to 100 ms (then `+Inf`):
/// a decision in memory takes tens of nanoseconds, one in Redis a round trip.
pub const LATENCY_BOUNDS_NS: [u64; 14] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000, 10_000_000, 100_000_000];

/// One decision in this many is timed (per thread): timing every one would cost two clock reads each.
pub const LATENCY_SAMPLE: u32 = 64;

/// Observations in buckets (`counts[i]`: those at most `bounds[i]` and above `bounds[i - 1]`; the last:
/// above every bound), their sum and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets<const N: usize> {
    pub counts: [u64; N],
    pub sum_ns: u64,
}

impl<const N: usize> Default for Buckets<N> {
    fn default() -> Self {
        Self { counts: [0; N], sum_ns: 0 }
    }
}

impl<const N: usize> Buckets<N> {
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn add(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }
}

/// The bucket of `ns` among `bounds` (`bounds.len()`: above them all).
#[inline]
fn bucket(bounds: &[u64], ns: u64) -> usize {
    bounds.partition_point(|&bound| bound < ns)
}

/// The waits of one group: `WAIT_BOUNDS_NS` and `+Inf`.
pub type WaitBuckets = Buckets<{ WAIT_BOUNDS_NS.len() + 1 }>;
/// Decision latencies: `LATENCY_BOUNDS_NS` and `+Inf`.
pub type LatencyBuckets = Buckets<{ LATENCY_BOUNDS_NS.len() + 1 }>;

/// What one group saw. Aligned to a cache line: the counters of different shards are separate
/// allocations that would otherwise share lines, and two threads writing them would stall each other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(align(64))]
pub struct GroupCounters {
    /// Limited requests decided (allowed + refused).
    pub requests: u64,
    pub allowed: u64,
    pub refused: u64,
    /// Admitted after a wait (`throttle`) that was not given back.
    pub delayed: u64,
    /// Requests of exempt peers or paths that route to this group.
    pub exempt: u64,
    /// Tokens given back by `reduce`.
    pub reductions: u64,
    /// Quota fetches started, and those that failed (raised, timed out, or answered nonsense).
    pub quota_fetches: u64,
    pub quota_failures: u64,
    /// Fetches the provider answered with "no such key" (`LookupError`): not failures.
    pub quota_unknown: u64,
    /// Waits given back (a timeout, a cancelled task): no longer counted as delayed.
    pub abandoned: u64,
    /// Every wait granted, given back or not: how long after its decision each one's slot was. Never
    /// decreases, as a Prometheus histogram must not.
    pub waits: WaitBuckets,
}

impl GroupCounters {
    /// One decision; `wait_ns`: how long an admission waits for its slot (0: none).
    #[inline]
    pub fn record(&mut self, allowed: bool, wait_ns: u64) {
        self.requests += 1;
        if allowed {
            self.allowed += 1;
            if wait_ns > 0 {
                self.record_wait(wait_ns);
            }
        } else {
            self.refused += 1;
        }
    }

    #[cold]
    fn record_wait(&mut self, wait_ns: u64) {
        self.delayed += 1;
        self.waits.counts[bucket(&WAIT_BOUNDS_NS, wait_ns)] += 1;
        self.waits.sum_ns = self.waits.sum_ns.saturating_add(wait_ns);
    }

    /// A wait given back (a timeout, a cancelled task): it no longer counts as delayed.
    pub fn given_back(&mut self) {
        if self.delayed > 0 {
            self.delayed -= 1;
            self.abandoned += 1;
        }
    }

    pub fn add(&mut self, other: &Self) {
        self.requests += other.requests;
        self.allowed += other.allowed;
        self.refused += other.refused;
        self.delayed += other.delayed;
        self.exempt += other.exempt;
        self.reductions += other.reductions;
        self.quota_fetches += other.quota_fetches;
        self.quota_failures += other.quota_failures;
        self.quota_unknown += other.quota_unknown;
        self.abandoned += other.abandoned;
        self.waits.add(&other.waits);
    }
}

/// A latency histogram many threads record into: relaxed atomics, touched only by sampled decisions.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    counts: [AtomicU64; LATENCY_BOUNDS_NS.len() + 1],
    sum_ns: AtomicU64,
}

impl LatencyHistogram {
    pub fn record(&self, ns: u64) {
        self.counts[bucket(&LATENCY_BOUNDS_NS, ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The buckets now (not one instant's snapshot while decisions go on).
    #[must_use]
    pub fn snapshot(&self) -> LatencyBuckets {
        LatencyBuckets {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

thread_local! {
    static SAMPLE_TICK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this thread's decision is one to time: one in `LATENCY_SAMPLE`, the first included.
#[inline]
#[must_use]
pub fn sample_latency() -> bool {
    SAMPLE_TICK.with(|tick| {
        let n = tick.get();
        tick.set(if n + 1 == LATENCY_SAMPLE { 0 } else { n + 1 });
        n == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_sums() {
        let mut a = GroupCounters::default();
        a.record(true, 0);
        a.record(true, 7_000_000);
        a.record(false, 0);
        let mut total = GroupCounters::default();
        total.add(&a);
        total.add(&a);
        let mut waits = WaitBuckets::default();
        waits.counts[2] = 2; // 7 ms: above 5 ms, at most 10 ms
        waits.sum_ns = 14_000_000;
        assert_eq!(
            total,
            GroupCounters { requests: 6, allowed: 4, refused: 2, delayed: 2, waits, ..GroupCounters::default() }
        );
        total.given_back();
        assert_eq!((total.delayed, total.abandoned, total.waits.count()), (1, 1, 2));
    }

    #[test]
    fn a_bound_belongs_to_its_bucket_and_beyond_the_last_goes_to_inf() {
        assert_eq!(bucket(&WAIT_BOUNDS_NS, 1), 0);
        assert_eq!(bucket(&WAIT_BOUNDS_NS, 1_000_000), 0);
        assert_eq!(bucket(&WAIT_BOUNDS_NS, 1_000_001), 1);
        assert_eq!(bucket(&WAIT_BOUNDS_NS, u64::MAX), WAIT_BOUNDS_NS.len());
        let latency = LatencyHistogram::default();
        latency.record(90);
        latency.record(300);
        latency.record(u64::MAX / 2);
        let snapshot = latency.snapshot();
        assert_eq!((snapshot.counts[0], snapshot.counts[2], snapshot.counts[LATENCY_BOUNDS_NS.len()]), (1, 1, 1));
    }

    #[test]
    fn one_decision_in_the_sample_size_is_timed() {
        let sampled = (0..LATENCY_SAMPLE * 3).filter(|_| sample_latency()).count();
        assert_eq!(sampled, 3);
    }
}
