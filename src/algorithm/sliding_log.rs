//! Sliding log: the exact admissions of the last window; admit iff fewer than `limit` (minus
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

/// A key's admissions in stamp order (stamps after now are waiters' reservations): one stamp per
/// admission while every admission is of one unit (8 bytes each, the common case), runs of (stamp,
/// units) from the first admission of more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Log {
    Stamps(VecDeque<u64>),
    Runs(Runs),
}

impl Default for Log {
    fn default() -> Self {
        Self::new()
    }
}

impl Log {
    #[must_use]
    pub const fn new() -> Self {
        Self::Stamps(VecDeque::new())
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Stamps(stamps) => stamps.is_empty(),
            Self::Runs(runs) => runs.is_empty(),
        }
    }

    /// Heap bytes of the stamps' or runs' buffer.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        match self {
            Self::Stamps(stamps) => stamps.capacity() * std::mem::size_of::<u64>(),
            Self::Runs(runs) => runs.heap_bytes(),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        match self {
            Self::Stamps(stamps) => stamps.shrink_to_fit(),
            Self::Runs(runs) => runs.shrink_to_fit(),
        }
    }

    /// Units in the log.
    #[must_use]
    pub fn units(&self) -> u64 {
        match self {
            Self::Stamps(stamps) => stamps.len() as u64,
            Self::Runs(runs) => runs.units(),
        }
    }

    /// The newest stamp.
    #[must_use]
    pub fn last_at(&self) -> Option<u64> {
        match self {
            Self::Stamps(stamps) => stamps.back().copied(),
            Self::Runs(runs) => runs.last_at(),
        }
    }

    /// Units from entry `index` on.
    fn units_from(&self, index: usize) -> u64 {
        match self {
            Self::Stamps(stamps) => (stamps.len() - index) as u64,
            Self::Runs(runs) => runs.units_from(index),
        }
    }

    /// The index of the first entry whose stamp is not `before`.
    fn first_where(&self, before: impl Fn(u64) -> bool) -> usize {
        match self {
            Self::Stamps(stamps) => stamps.partition_point(|&t| before(t)),
            Self::Runs(runs) => runs.first_where(before),
        }
    }

    /// The stamp of the `n`-th unit (from 1) counted from entry `index`.
    fn stamp_of_unit(&self, index: usize, n: u64) -> u64 {
        match self {
            Self::Stamps(stamps) => {
                let offset = usize::try_from(n.saturating_sub(1)).unwrap_or(usize::MAX);
                stamps[index.saturating_add(offset).min(stamps.len() - 1)]
            }
            Self::Runs(runs) => runs.stamp_of_unit(index, n),
        }
    }

    fn drop_front(&mut self, count: usize) {
        match self {
            Self::Stamps(stamps) => {
                stamps.drain(..count);
            }
            Self::Runs(runs) => runs.drop_front(count),
        }
    }

    /// Its admissions as (stamp, units), in stamp order: what the shared store keeps of a log.
    #[must_use]
    pub fn entries(&self) -> Vec<(u64, u64)> {
        match self {
            Self::Stamps(stamps) => stamps.iter().map(|&at| (at, 1)).collect(),
            Self::Runs(runs) => {
                let mut before = runs.start;
                runs.runs
                    .iter()
                    .map(|run| {
                        let units = run.end - before;
                        before = run.end;
                        (run.at, units)
                    })
                    .collect()
            }
        }
    }

    /// The log of `entries` (as [`Log::entries`] gives them).
    #[must_use]
    pub fn from_entries(entries: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut log = Self::new();
        for (at, units) in entries {
            log.insert(at, units);
        }
        log
    }

    /// Adds `units` stamped `at`, in stamp order.
    pub fn insert(&mut self, at: u64, units: u64) {
        match self {
            Self::Stamps(stamps) if units == 1 => {
                if stamps.back().is_none_or(|&last| last <= at) {
                    stamps.push_back(at);
                } else {
                    let position = stamps.partition_point(|&t| t <= at);
                    stamps.insert(position, at);
                }
            }
            Self::Stamps(_) if units == 0 => {}
            Self::Stamps(stamps) => {
                let mut runs = Runs::from_stamps(std::mem::take(stamps));
                runs.insert(at, units);
                *self = Self::Runs(runs);
            }
            Self::Runs(runs) => runs.insert(at, units),
        }
    }

    /// Removes up to `units` stamped `at`; returns how many it removed.
    fn remove_at(&mut self, at: u64, units: u64) -> u64 {
        match self {
            Self::Stamps(stamps) => {
                let (low, high) = (stamps.partition_point(|&t| t < at), stamps.partition_point(|&t| t <= at));
                let taken = (high - low).min(usize::try_from(units).unwrap_or(usize::MAX));
                stamps.drain(high - taken..high);
                taken as u64
            }
            Self::Runs(runs) => runs.remove_at(at, units),
        }
    }

    /// Removes the newest `units` (all of them if fewer), whatever `units`.
    fn remove_newest(&mut self, units: u64) {
        match self {
            Self::Stamps(stamps) => {
                let taken = stamps.len().min(usize::try_from(units).unwrap_or(usize::MAX));
                stamps.truncate(stamps.len() - taken);
            }
            Self::Runs(runs) => runs.remove_newest(units),
        }
    }
}

/// Admissions as runs: one per stamp, with the units counted from the log's origin through it, so
/// that counting the units after any stamp is a binary search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runs {
    runs: VecDeque<Run>,
    /// The units counted before the first run (those dropped from the front).
    start: u64,
}

impl Runs {
    /// The runs of one-unit stamps (equal stamps merged).
    fn from_stamps(stamps: VecDeque<u64>) -> Self {
        let mut runs = Self::default();
        for at in stamps {
            runs.insert(at, 1);
        }
        runs
    }

    fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn heap_bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<Run>()
    }

    fn shrink_to_fit(&mut self) {
        self.runs.shrink_to_fit();
    }

    fn units(&self) -> u64 {
        self.end() - self.start
    }

    fn last_at(&self) -> Option<u64> {
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
    fn insert(&mut self, at: u64, units: u64) {
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
        // ar_rate_limiter's case: 4 per 30 s window; the fifth waits until the first stamp leaves.
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

    #[test]
    fn one_unit_admissions_stay_stamps_until_a_heavier_one_turns_the_log_into_runs() {
        let mut h = Harness::new("10/10s", None, Kind::SlidingLog);
        for ms in [0, 0, 1_000, 2_000] {
            assert!(h.decide(ms * MS, 1).allowed);
        }
        assert!(matches!(h.log, super::Log::Stamps(_)));
        assert_eq!(h.log.heap_bytes() % 8, 0);
        // A cancelled wait at 1 s and a reduction of the newest, on stamps.
        h.refund(2_000 * MS, 1_000 * MS, 1);
        h.state = h.limit.reduce(&h.state, &mut h.log, 2_000 * MS, 1);
        assert_eq!(h.log.units(), 2);
        assert!(h.decide(3_000 * MS, 5).allowed);
        assert!(matches!(h.log, super::Log::Runs(_)));
        // 2 stamped at 0 and 5 at 3 s: 3 fit now, 5 more once the two of 0 s leave at 10 s.
        assert_eq!(h.report(3_000 * MS).remaining, 3);
        assert_eq!(h.decide(3_000 * MS, 5).retry_after_ns, 7_000 * MS);
        assert_eq!(h.report(10_000 * MS).remaining, 5);
    }
}
