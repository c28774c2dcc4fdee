//! What a cancelled wait gives back.
//!
//! A waiter reserves a later slot: the key's state then counts its admission at that instant, and
//! every admission after it is placed around it. When the waiter gives up, the state its key should
//! have is the one it would have if that waiter had never asked, every other admission kept at its
//! instant (the later waiters sleep until the slots they were promised). An algorithm cannot compute
//! that from its state alone (a GCRA arrival time, say, cannot tell whose slot is whose), so a key
//! with waits ahead keeps a ledger: the state before its oldest admission still ahead, and every
//! admission since, in order. A wait given back is taken out of the ledger and the rest replayed.
//!
//! Replaying keeps every promise: with an admission taken out, every later one still admits at its
//! instant (an algorithm's usage only ever makes it stricter), and the state is the one those
//! admissions alone lead to, so nothing is admitted above the limit. When every waiter of a key has
//! given up, in whatever order, the key is as if none had asked.
//!
//! A change of the key's limit (a reconfiguration, a quota) is an entry too: the replay moves the state
//! at that instant as the change did, so a wait given back after it restores what it would have before.
//!
//! A ledger is only trusted while the key's state is the one it leads to: any other change (a manual
//! reduction, another process writing a shared region's state) makes it stale, and
//! the wait is then given back by the algorithm's own rule (its newest slot only). The sliding log
//! keeps no ledger: its stamps are its ledger, and a wait given back removes its own.

use std::collections::HashMap;

use crate::algorithm::{Admit, Limit, Log, State, NO_LOG};

/// Admissions a ledger keeps at most (a key with more waiters ahead gives back by the algorithm's rule).
const MAX_ENTRIES: usize = 256;
/// Ledgers a shard keeps at most: keys with waiters ahead at once.
const MAX_LEDGERS: usize = 256;

/// One admission (its instant and cost), or a change of the key's limit at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Admitted { at: u64, cost: u64 },
    Moved { at: u64, to: Limit },
}

impl Entry {
    const fn at(&self) -> u64 {
        match self {
            Self::Admitted { at, .. } | Self::Moved { at, .. } => *at,
        }
    }

    /// The state and limit after this entry over `state` under `limit`; `None` if an admission no longer
    /// admits (it cannot: usage only ever makes an algorithm stricter, but a ledger that could not say is
    /// not trusted).
    fn apply(&self, (state, limit): (State, Limit)) -> Option<(State, Limit)> {
        match *self {
            Self::Admitted { at, cost } => match limit.evaluate(&state, &NO_LOG, at, cost) {
                Ok(Admit::State(next)) => Some((next, limit)),
                _ => None,
            },
            Self::Moved { at, to } => Some((to.rescale(&limit, &state, &mut Log::new(), at), to)),
        }
    }
}

/// The admissions of one limit key since the oldest still ahead.
#[derive(Debug, Clone)]
struct Ledger {
    /// The state before the first entry, and the limit it is under.
    base: (State, Limit),
    entries: Vec<Entry>,
    /// The state the entries lead to: the key's state while nothing else has written it.
    expected: State,
}

impl Ledger {
    /// The state `base` and `entries` lead to (see `Entry::apply`).
    fn replay(&self) -> Option<State> {
        self.entries.iter().try_fold(self.base, |state, entry| entry.apply(state)).map(|(state, _)| state)
    }

    /// Folds the leading entries whose instant has come into the base: they can no longer be waited for.
    fn fold_passed(&mut self, now: u64) -> Option<()> {
        let passed = self.entries.iter().take_while(|entry| entry.at() <= now).count();
        for entry in self.entries.drain(..passed) {
            self.base = entry.apply(self.base)?;
        }
        Some(())
    }

    /// Whether an admission it holds is still ahead at `now`: a wait that may yet be given back.
    fn ahead(&self, now: u64) -> bool {
        self.entries.iter().any(|entry| matches!(entry, Entry::Admitted { at, .. } if *at > now))
    }
}

/// The ledgers of one shard's keys with waits ahead.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Ledgers {
    /// The latest instant a wait recorded here was promised: none is ahead from then on (read first, at
    /// every decision).
    until: u64,
    /// Keyed by state keys, which are already seeded hashes: a fixed hasher, so that an empty `Ledgers`
    /// (taken out of a shard at every `change`) costs nothing to make.
    by_key: HashMap<u64, Ledger, std::hash::BuildHasherDefault<ahash::AHasher>>,
}

impl Ledgers {
    /// Whether a wait recorded here may still be ahead at `now`: every admission is then recorded.
    #[inline]
    #[must_use]
    pub fn ahead(&self, now: u64) -> bool {
        now < self.until
    }

    /// Records an admission to `key` under `limit` at `at` for `cost`, which wrote `after` over `before`,
    /// decided at `now`: a wait (`at > now`) starts or extends the key's ledger; an admission now extends
    /// one, if the key has one.
    pub fn record(
        &mut self,
        key: u64,
        limit: &Limit,
        (before, after): (State, State),
        (at, cost): (u64, u64),
        now: u64,
    ) {
        if !self.ahead(now) {
            self.by_key.clear(); // every wait recorded has come: nothing left to give back
        }
        if limit.uses_log() || limit.is_concurrency() {
            return;
        }
        let wait = at > now;
        let ledger = match self.by_key.get_mut(&key) {
            Some(ledger) if ledger.expected == before => ledger,
            // Another change wrote the state: start afresh from it (a wait), or forget the ledger.
            Some(_) if !wait => {
                self.by_key.remove(&key);
                return;
            }
            _ if !wait => return,
            found => {
                if found.is_none() && self.by_key.len() >= MAX_LEDGERS {
                    self.by_key.retain(|_, ledger| ledger.ahead(now));
                    if self.by_key.len() >= MAX_LEDGERS {
                        return;
                    }
                }
                let fresh = Ledger { base: (before, *limit), entries: Vec::new(), expected: before };
                self.by_key.insert(key, fresh);
                self.by_key.get_mut(&key).unwrap_or_else(|| unreachable!("inserted above"))
            }
        };
        ledger.entries.push(Entry::Admitted { at, cost });
        ledger.expected = after;
        if ledger.fold_passed(now).is_none() || ledger.entries.len() > MAX_ENTRIES || !ledger.ahead(now) {
            self.by_key.remove(&key);
        }
        self.until = self.until.max(at);
    }

    /// The key's state moved from `before` to `after` by a change of its limit to `to` at `now` (a
    /// reconfiguration, a quota): a ledger that led to `before` goes on with the move; a stale one, or
    /// one moving to a sliding log or permits, is forgotten.
    pub fn moved(&mut self, key: u64, to: &Limit, (before, after): (State, State), now: u64) {
        if self.by_key.is_empty() {
            return;
        }
        match self.by_key.get_mut(&key) {
            Some(ledger) if ledger.expected == before && !to.uses_log() && !to.is_concurrency() => {
                ledger.entries.push(Entry::Moved { at: now, to: *to });
                ledger.expected = after;
            }
            Some(_) => {
                self.by_key.remove(&key);
            }
            None => {}
        }
    }

    /// The state of `key` (now `state`) with the admission at `at` for `cost` taken out and every other
    /// entry kept at its instant. `None` when the ledger cannot say (no ledger, none such recorded, or
    /// another change wrote the state): the caller gives back by the algorithm's own rule.
    pub fn give_back(&mut self, key: u64, state: &State, (at, cost): (u64, u64), now: u64) -> Option<State> {
        let ledger = self.by_key.get_mut(&key)?;
        // Another change wrote the state, or every wait it holds has come: nothing is waited for any more.
        if ledger.expected != *state || !ledger.ahead(now) {
            self.by_key.remove(&key);
            return None;
        }
        let index = ledger.entries.iter().rposition(|entry| *entry == Entry::Admitted { at, cost })?;
        ledger.entries.remove(index);
        let Some(replayed) = ledger.replay() else {
            self.by_key.remove(&key);
            return None;
        };
        ledger.expected = replayed;
        if !ledger.ahead(now) {
            self.by_key.remove(&key);
        }
        Some(replayed)
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Kind;

    const MS: u64 = 1_000_000;

    /// One key under one limit deciding as the limiter does, waits recorded: a model of a store.
    struct Key {
        limit: Limit,
        state: State,
        waits: Ledgers,
    }

    impl Key {
        fn new(rate: &str, burst: u64, kind: Kind) -> Self {
            Self {
                limit: Limit::new(rate.parse().unwrap(), Some(burst), kind).unwrap(),
                state: State::default(),
                waits: Ledgers::default(),
            }
        }

        /// Reserves `cost` at `now`: the instant it may act (`None`: never within 10 tries).
        fn reserve(&mut self, now: u64, cost: u64) -> Option<u64> {
            let mut at = now;
            for _ in 0..10 {
                match self.limit.evaluate(&self.state, &NO_LOG, at, cost) {
                    Ok(Admit::State(after)) => {
                        self.waits.record(1, &self.limit, (self.state, after), (at, cost), now);
                        self.state = after;
                        return Some(at);
                    }
                    Ok(Admit::Log { .. }) => unreachable!("no log here"),
                    Err(u64::MAX) => return None,
                    Err(retry) => at += retry,
                }
            }
            None
        }

        /// A change of the key's limit at `now` (`update_rule`, a quota).
        fn set_limit(&mut self, rate: &str, burst: u64, now: u64) {
            let to = Limit::new(rate.parse().unwrap(), Some(burst), Kind::Gcra).unwrap();
            let after = to.rescale(&self.limit, &self.state, &mut crate::algorithm::Log::new(), now);
            self.waits.moved(1, &to, (self.state, after), now);
            (self.limit, self.state) = (to, after);
        }

        fn cancel(&mut self, now: u64, at: u64, cost: u64) {
            self.state = match self.waits.give_back(1, &self.state, (at, cost), now) {
                Some(state) => state,
                None => self.limit.refund(&self.state, &mut crate::algorithm::Log::new(), now, at, cost),
            };
        }
    }

    /// `x/time/rate`'s reservation tests at 10/s (a token each 100 ms): when each reservation acts.
    /// Where the ledger gives back more than Go's rule, the act time is earlier and the limit still holds.
    #[test]
    fn go_reservation_tests_act_as_go_or_earlier_within_the_limit() {
        let t = |n: u64| n * 100 * MS;
        // TestCancelLast: the newest cancelled gives its 2 tokens back.
        let mut key = Key::new("10/s", 2, Kind::Gcra);
        assert_eq!(key.reserve(t(0), 2), Some(t(0)));
        let r = key.reserve(t(0), 2).unwrap();
        assert_eq!(r, t(2));
        key.cancel(t(1), r, 2);
        assert_eq!(key.reserve(t(1), 2), Some(t(2)));
        // TestCancel0Tokens: cancelled under a later one, nothing to give back at once.
        let mut key = Key::new("10/s", 2, Kind::Gcra);
        key.reserve(t(0), 2);
        let r = key.reserve(t(0), 1).unwrap();
        assert_eq!(r, t(1));
        assert_eq!(key.reserve(t(0), 1), Some(t(2)));
        key.cancel(t(0), r, 1);
        // Go: t3. The ledger: as if r had never asked, the one at t2 kept there, a token is free at t2.
        assert_eq!(key.reserve(t(0), 1), Some(t(2)));
        // TestCancel1Token: one token back, as Go.
        let mut key = Key::new("10/s", 2, Kind::Gcra);
        key.reserve(t(0), 2);
        let r = key.reserve(t(0), 2).unwrap();
        assert_eq!(r, t(2));
        assert_eq!(key.reserve(t(0), 1), Some(t(3)));
        key.cancel(t(2), r, 2);
        assert_eq!(key.reserve(t(2), 2), Some(t(4)));
        // TestCancelMulti: Go gives 2 of rA's 3 back and acts at t5; every one of them comes back here.
        let mut key = Key::new("10/s", 4, Kind::Gcra);
        key.reserve(t(0), 4);
        let ra = key.reserve(t(0), 3).unwrap();
        assert_eq!(ra, t(3));
        assert_eq!(key.reserve(t(0), 1), Some(t(4)));
        let rc = key.reserve(t(0), 1).unwrap();
        assert_eq!(rc, t(5));
        key.cancel(t(1), rc, 1);
        key.cancel(t(1), ra, 3);
        assert_eq!(key.reserve(t(1), 3), Some(t(4)));
        // TestReserveSetLimitCancel: 5/s, then 10/s from t2; the wait given back after the change comes
        // back whole, as Go's: the next acts at t3.
        let mut key = Key::new("5/s", 2, Kind::Gcra);
        key.reserve(t(0), 2);
        let r = key.reserve(t(0), 2).unwrap();
        assert_eq!(r, t(4));
        key.set_limit("10/s", 2, t(2));
        key.cancel(t(2), r, 2);
        assert_eq!(key.reserve(t(2), 2), Some(t(3)));
    }

    #[test]
    fn waiters_cancelled_oldest_first_leave_the_key_as_if_none_had_asked() {
        for kind in [Kind::Gcra, Kind::TokenBucket, Kind::FixedWindow, Kind::SlidingWindow, Kind::LeakyBucket] {
            let mut key = Key::new("10/s", 1, kind);
            assert_eq!(key.reserve(0, 1), Some(0));
            let before = key.state;
            let slots: Vec<u64> = (0..30).map(|_| key.reserve(MS, 1).unwrap()).collect();
            assert!(slots.iter().all(|&at| at > MS), "{kind:?}");
            for &at in &slots {
                key.cancel(2 * MS, at, 1);
            }
            assert_eq!(key.state, before, "{kind:?}");
            assert!(key.waits.is_empty());
        }
    }

    #[test]
    fn a_stale_ledger_is_not_trusted() {
        let mut key = Key::new("10/s", 1, Kind::Gcra);
        key.reserve(0, 1);
        let first = key.reserve(0, 1).unwrap();
        let second = key.reserve(0, 1).unwrap();
        // Another writer admits without the ledger seeing it (another process, in a shared region).
        let Ok(Admit::State(unseen)) = key.limit.evaluate(&key.state, &NO_LOG, 10 * MS * 100, 1) else { panic!() };
        key.state = unseen;
        key.cancel(0, first, 1); // given back by the algorithm's own rule
        let by_rule = key.limit.refund(&unseen, &mut crate::algorithm::Log::new(), 0, first, 1);
        assert_eq!(key.state, by_rule);
        assert!(key.waits.is_empty());
        let _ = second;
    }
}
