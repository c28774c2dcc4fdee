//! Sliding log (seed 000): the exact admissions of the last window; admit iff fewer than `limit` (minus
//! the cost) units fall in `(at − W, at]`. An admission is one run (its stamp and its units), whatever
//! its cost, so memory is O(admissions in the window) per key, never O(units): a cost of 2³² − 1 is one
//! run. Runs carry cumulative counts, so counting the units after any stamp is a binary search, and a
//! decision is O(log runs) plus an append.
//!
//! The runs live beside the slot (the store keeps them by key); the slot's state records when the last
//! one leaves the window, so that the store drops idle logs like any other state.

use std::collections::VecDeque;

use super::{Admit, State};
use crate::rate::Rate;

/// One admission's stamp and the units counted from the log's origin through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    at: u64,
    end: u64,
}

/// A key's admissions as runs in stamp order (stamps after now are waiters' reservations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log {
    runs: VecDeque<Run>,
    /// The units counted before the first run (those dropped from the front).
    start: u64,
}

impl Log {
    #[must_use]
    pub const fn new() -> Self {
        Self { runs: VecDeque::new(), start: 0 }
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Heap bytes of the runs' buffer.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<Run>()
    }

    pub fn shrink_to_fit(&mut self) {
        self.runs.shrink_to_fit();
    }

    /// Units in the log.
    #[must_use]
    pub fn units(&self) -> u64 {
        self.end() - self.start
    }

    /// The stamp of the newest run.
    #[must_use]
    pub fn last_at(&self) -> Option<u64> {
        self.runs.back().map(|r| r.at)
    }

    fn end(&self) -> u64 {
        self.runs.back().map_or(self.start, |r| r.end)
    }

    fn before(&self, index: usize) -> u64 {
        if index == 0 {
            self.start
        } else {
            self.runs[index - 1].end
        }
    }

    /// Units in the runs from `index` on.
    fn units_from(&self, index: usize) -> u64 {
        self.end() - self.before(index)
    }

    /// The index of the first run whose stamp is not `before`.
    fn first_where(&self, before: impl Fn(u64) -> bool) -> usize {
        self.runs.partition_point(|r| before(r.at))
    }

    /// The stamp of the `n`-th unit (from 1) counted from run `index`.
    fn stamp_of_unit(&self, index: usize, n: u64) -> u64 {
        let target = self.before(index).saturating_add(n);
        let found = self.runs.partition_point(|r| r.end < target).min(self.runs.len() - 1);
        self.runs[found].at
    }

    fn drop_front(&mut self, count: usize) {
        if count > 0 {
            self.start = self.runs[count - 1].end;
            self.runs.drain(..count);
        }
    }

    /// Adds `units` stamped `at`, in stamp order (one run per stamp).
    pub fn insert(&mut self, at: u64, units: u64) {
        if units == 0 {
            return;
        }
        // Stamps mostly come in order: then the new run goes last, with nothing after it to move.
        match self.runs.back_mut() {
            Some(last) if last.at == at => {
                last.end = last.end.saturating_add(units);
                return;
            }
            Some(last) if last.at < at => {
                let end = last.end.saturating_add(units);
                self.runs.push_back(Run { at, end });
                return;
            }
            None => {
                self.runs.push_back(Run { at, end: self.start.saturating_add(units) });
                return;
            }
            Some(_) => {}
        }
        let position = self.first_where(|t| t <= at);
        let shift_from = if position > 0 && self.runs[position - 1].at == at {
            position - 1
        } else {
            let end = self.before(position);
            self.runs.insert(position, Run { at, end });
            position
        };
        // Later runs (reservations) move up by `units`: usually none.
        for run in self.runs.range_mut(shift_from..) {
            run.end = run.end.saturating_add(units);
        }
    }

    /// Removes up to `units` of the run stamped `at`, later runs moving down; returns how many it removed.
    fn remove_at(&mut self, at: u64, units: u64) -> u64 {
        let position = self.first_where(|t| t <= at);
        if position == 0 || self.runs[position - 1].at != at {
            return 0;
        }
        let index = position - 1;
        let held = self.runs[index].end - self.before(index);
        let taken = held.min(units);
        for run in self.runs.range_mut(index..) {
            run.end -= taken;
        }
        if taken == held {
            self.runs.remove(index);
        }
        taken
    }

    /// Removes the newest `units` (all of them if fewer): a binary search and a truncation.
    fn remove_newest(&mut self, units: u64) {
        let keep = self.end().saturating_sub(units).max(self.start);
        let index = self.runs.partition_point(|r| r.end <= keep);
        self.runs.truncate(index + 1);
        if let Some(run) = self.runs.get_mut(index) {
            run.end = keep;
            if keep == self.before(index) {
                self.runs.truncate(index);
            }
        }
    }
}

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

    /// The index of the first run still in the window at `at`. Runs after `at` (reserved by waiters)
    /// count as live: a reservation is never given away.
    fn first_live(&self, log: &Log, at: u64) -> usize {
        log.first_where(|t| t.saturating_add(self.window_ns) <= at)
    }

    /// Units in the window at `at`, reservations included.
    #[must_use]
    pub fn live(&self, log: &Log, at: u64) -> u64 {
        log.units_from(self.first_live(log, at))
    }

    /// The admission of `cost` at `at`.
    ///
    /// # Errors
    /// The wait, in nanoseconds after `at`, until it would be admitted.
    #[inline]
    pub fn evaluate(&self, log: &Log, at: u64, cost: u64) -> Result<Admit, u64> {
        let first = self.first_live(log, at);
        let live = log.units_from(first);
        if live.saturating_add(cost) <= self.limit {
            let last = log.last_at().map_or(at, |t| t.max(at));
            return Ok(Admit::Log { at, cost, idle_at: last.saturating_add(self.window_ns) });
        }
        // The unit whose leaving makes room for `cost`: the (live + cost − limit)-th live one.
        let stamp = log.stamp_of_unit(first, live + cost - self.limit);
        Err(stamp.saturating_add(self.window_ns) - at)
    }

    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        self.window_ns
    }

    /// Records an admission of `cost` at `at`, dropping runs that left the window by `now`.
    pub fn append(&self, log: &mut Log, now: u64, at: u64, cost: u64) {
        let expired = self.first_live(log, now);
        log.drop_front(expired);
        log.insert(at, cost);
    }

    /// Removes `cost` units stamped `at` (a cancelled wait), the newest ones for what is not there.
    #[must_use]
    pub fn refund(&self, state: &State, log: &mut Log, at: u64, cost: u64) -> State {
        let removed = log.remove_at(at, cost);
        log.remove_newest(cost - removed);
        *state
    }

    /// Removes the newest `units` (a manual reduction), in O(log runs) whatever `units`.
    #[must_use]
    pub fn reduce(&self, state: &State, log: &mut Log, units: u64) -> State {
        log.remove_newest(units);
        *state
    }

    /// The state of a log: idle once its newest run has left the window.
    #[must_use]
    pub fn state_of(&self, log: &Log) -> State {
        State { t: log.last_at().map_or(0, |t| t.saturating_add(self.window_ns)), a: 0, b: 0 }
    }

    /// (remaining, `reset_after_ns`).
    #[must_use]
    pub fn report(&self, log: &Log, now: u64) -> (u64, u64) {
        let live = self.live(log, now);
        let reset = log.last_at().map_or(0, |t| t.saturating_add(self.window_ns).saturating_sub(now));
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
        assert_eq!(h.log.units(), 4);
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
        assert_eq!(h.log.units(), 1);
    }

    #[test]
    fn a_huge_cost_is_one_run_and_a_huge_reduction_one_truncation() {
        let max = u64::from(u32::MAX);
        let mut h = Harness::new("4294967295/s", None, Kind::SlidingLog);
        assert!(h.decide(0, max).allowed);
        assert!(!h.decide(1, 1).allowed);
        assert_eq!(h.log.units(), max);
        assert!(h.log.heap_bytes() <= 64);
        h.state = h.limit.reduce(&h.state, &mut h.log, 1, u64::MAX >> 1);
        assert_eq!(h.log.units(), 0);
        assert!(h.decide(1, 1).allowed);
    }

    #[test]
    fn runs_count_units_across_stamps_and_refunds() {
        let mut h = Harness::new("10/10s", None, Kind::SlidingLog);
        assert!(h.decide(0, 3).allowed);
        assert!(h.decide(1_000 * MS, 4).allowed);
        assert!(h.decide(2_000 * MS, 3).allowed);
        // Room for 2 when the first run (3 units) leaves at 10 s.
        assert_eq!(h.decide(3_000 * MS, 2).retry_after_ns, 7_000 * MS);
        // Giving back 2 of the middle run leaves 8 in the window.
        h.refund(3_000 * MS, 1_000 * MS, 2);
        assert_eq!(h.report(3_000 * MS).remaining, 2);
        assert_eq!(h.report(10_000 * MS).remaining, 5);
        assert_eq!(h.report(11_000 * MS).remaining, 7);
    }
}
