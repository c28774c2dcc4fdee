//! Sliding log (seed 000): the exact timestamps of the last window; admit iff fewer than `limit` (minus
//! the cost) fall in `(at − W, at]`. Memory is O(limit) per key: expired stamps are dropped as new ones
//! come, and at most `limit` are live. A decision is a binary search (O(log limit)) and an append.
//!
//! The timestamps live beside the slot (the store keeps them by key); the slot's state records when
//! the last one leaves the window, so that the store drops idle logs like any other state.

use std::collections::VecDeque;

use super::{Admit, State};
use crate::rate::Rate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    window_ns: u64,
}

impl SlidingLog {
    #[must_use]
    pub fn new(rate: Rate, limit: u32) -> Self {
        Self { limit: u64::from(limit), window_ns: rate.period_ns }
    }

    /// The constants `src/backend/decide.lua` takes: limit, window.
    #[must_use]
    pub const fn params(&self) -> [u64; 5] {
        [self.limit, self.window_ns, 0, 0, 0]
    }

    /// The index of the first stamp still in the window at `at`. Stamps after `at` (reserved by
    /// waiters) count as live: a reservation is never given away.
    fn first_live(&self, log: &VecDeque<u64>, at: u64) -> usize {
        log.partition_point(|&t| t + self.window_ns <= at)
    }

    /// The admission of `cost` at `at`.
    ///
    /// # Errors
    /// The wait, in nanoseconds after `at`, until it would be admitted.
    #[inline]
    pub fn evaluate(&self, log: &VecDeque<u64>, at: u64, cost: u64) -> Result<Admit, u64> {
        let first = self.first_live(log, at);
        let live = (log.len() - first) as u64;
        if live + cost <= self.limit {
            let last = log.back().map_or(at, |&t| t.max(at));
            return Ok(Admit::Log { at, cost, idle_at: last + self.window_ns });
        }
        // The stamp whose leaving makes room for `cost`.
        #[allow(clippy::cast_possible_truncation)]
        let index = first + (live + cost - self.limit - 1) as usize;
        Err(log[index] + self.window_ns - at)
    }

    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        self.window_ns
    }

    /// Records an admission of `cost` at `at`, dropping stamps that left the window by `now`.
    pub fn append(&self, log: &mut VecDeque<u64>, now: u64, at: u64, cost: u64) {
        let expired = self.first_live(log, now);
        log.drain(..expired);
        let position = log.partition_point(|&t| t <= at);
        for _ in 0..cost {
            log.insert(position, at);
        }
    }

    /// Removes `cost` stamps made at `at` (a cancelled wait or a manual reduction: the newest ones then).
    #[must_use]
    pub fn refund(&self, state: &State, log: &mut VecDeque<u64>, at: u64, cost: u64) -> State {
        for _ in 0..cost {
            let found = log.iter().rposition(|&t| t == at).or_else(|| log.len().checked_sub(1));
            if let Some(index) = found {
                log.remove(index);
            }
        }
        *state
    }

    /// (remaining, `reset_after_ns`).
    #[must_use]
    pub fn report(&self, log: &VecDeque<u64>, now: u64) -> (u64, u64) {
        let live = (log.len() - self.first_live(log, now)) as u64;
        let reset = log.back().map_or(0, |&t| (t + self.window_ns).saturating_sub(now));
        (self.limit.saturating_sub(live), if live == 0 { 0 } else { reset })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Harness;
    use super::super::Kind;

    const MS: u64 = 1_000_000;

    #[test]
    fn exact_window_of_timestamps() {
        // Seed 000: 4 per 30 s window; the fifth waits until the first stamp leaves.
        let mut h = Harness::new("4/30s", None, Kind::SlidingLog);
        for ms in [0, 1_000, 2_000, 3_000] {
            assert!(h.decide(ms * MS, 1).allowed);
        }
        assert_eq!(h.decide(4_000 * MS, 1).retry_after_ns, 26_000 * MS);
        assert!(h.decide(30_000 * MS, 1).allowed);
        assert_eq!(h.decide(30_000 * MS, 1).retry_after_ns, 1_000 * MS);
        assert_eq!(h.log.len(), 4);
        // At 40 s only the stamp made at 30 s is still in the window.
        assert_eq!(h.report(40_000 * MS).remaining, 3);
    }

    #[test]
    fn cost_needs_that_many_stamps_to_leave() {
        let mut h = Harness::new("3/10s", None, Kind::SlidingLog);
        assert!(h.decide(0, 1).allowed);
        assert!(h.decide(MS, 1).allowed);
        assert!(h.decide(2 * MS, 1).allowed);
        assert_eq!(h.decide(5 * MS, 2).retry_after_ns, 10_000 * MS + MS - 5 * MS);
    }

    #[test]
    fn reservations_count_before_their_time() {
        let mut h = Harness::new("1/10s", None, Kind::SlidingLog);
        assert_eq!(h.reserve(0, 1), Some(0));
        assert_eq!(h.reserve(0, 1), Some(10_000 * MS));
        assert!(!h.decide(5_000 * MS, 1).allowed);
        h.refund(0, 10_000 * MS, 1);
        assert_eq!(h.log.len(), 1);
    }
}
