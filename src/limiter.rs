//! The limiter: routes a request to a group, finds the key's state, applies the group's limit.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::algorithm::{Limit, Outcome, Report, State};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::metrics::{GroupCounters, ShardCounters, Stats};
use crate::rules::{Route, Router};
use crate::store::Store;

/// A rule as configured: requests whose path matches `pattern` are limited by `group`.
#[derive(Debug, Clone)]
pub struct RuleSpec {
    pub pattern: String,
    pub group: String,
    pub limit: Limit,
}

/// Everything a limiter is built from.
#[derive(Debug, Clone)]
pub struct Config {
    pub rules: Vec<RuleSpec>,
    pub exempt_peers: Vec<String>,
    pub exempt_paths: Vec<String>,
    pub max_keys: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self { rules: Vec::new(), exempt_peers: Vec::new(), exempt_paths: Vec::new(), max_keys: 1_000_000 }
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub limit: Limit,
}

/// The full answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub route: Route,
    pub outcome: Outcome,
    /// What the key has left; `None` unless asked for, and for requests no group limits.
    pub report: Option<Report>,
    /// The clock reading the decision was made at (0 when no group limits the request).
    pub now: u64,
}

impl Decision {
    const FREE: Outcome = Outcome::admitted(0);
}

#[derive(Debug)]
pub struct Limiter {
    router: Router,
    groups: Vec<Group>,
    store: Store<ShardCounters>,
    clock: Clock,
    hasher: ahash::RandomState,
    enabled: AtomicBool,
}

impl Limiter {
    /// # Errors
    /// A bad pattern, a group defined twice with different limits, or `max_keys` of zero.
    pub fn new(config: Config, clock: Clock) -> Result<Self> {
        if config.max_keys == 0 {
            return Err(Error::value("max_keys", "must be at least 1, got 0"));
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut patterns = Vec::with_capacity(config.rules.len());
        for (i, rule) in config.rules.iter().enumerate() {
            let index = if let Some(index) = groups.iter().position(|g| g.name == rule.group) {
                if groups[index].limit != rule.limit {
                    return Err(Error::value(
                        format!("rules[{i}].group"),
                        format!("group {:?} is already defined with another limit by an earlier rule", rule.group),
                    ));
                }
                index
            } else {
                groups.push(Group { name: rule.group.clone(), limit: rule.limit });
                groups.len() - 1
            };
            patterns.push((rule.pattern.clone(), index));
        }
        let router = Router::new(&patterns, config.exempt_peers, &config.exempt_paths)?;
        let group_count = groups.len();
        let store = Store::new(config.max_keys, || ShardCounters {
            groups: vec![GroupCounters::default(); group_count],
            exempt: 0,
        });
        Ok(Self { router, groups, store, clock, hasher: ahash::RandomState::new(), enabled: AtomicBool::new(true) })
    }

    #[inline]
    fn key(&self, peer: &str, group: usize) -> u64 {
        self.hasher.hash_one((peer, group))
    }

    /// Decides one request. `max_wait_ns` > 0 lets it reserve a later slot (a waiter); `report` asks
    /// for what the key has left.
    #[inline]
    pub fn decide(&self, peer: &str, path: Option<&str>, cost: u64, max_wait_ns: u64, report: bool) -> Decision {
        if !self.enabled.load(Ordering::Relaxed) {
            return Decision { route: Route::Unlimited, outcome: Decision::FREE, report: None, now: 0 };
        }
        let route = self.router.route(peer, path);
        let group = match route {
            Route::Unlimited => return Decision { route, outcome: Decision::FREE, report: None, now: 0 },
            Route::Exempt => {
                self.store.lock(self.hasher.hash_one(peer)).counters.exempt += 1;
                return Decision { route, outcome: Decision::FREE, report: None, now: 0 };
            }
            Route::Group(group) => group,
        };
        let limit = &self.groups[group].limit;
        let key = self.key(peer, group);
        let now = self.clock.now_ns();
        let mut shard = self.store.lock(key);
        let (outcome, state) = if let Some(state) = shard.get_mut(key) {
            (limit.decide(state, now, cost, max_wait_ns), *state)
        } else {
            let mut state = State::default();
            let outcome = limit.decide(&mut state, now, cost, max_wait_ns);
            if outcome.allowed {
                shard.insert(key, state, now);
            }
            (outcome, state)
        };
        shard.counters.groups[group].record(outcome.allowed, outcome.wait_ns > 0);
        drop(shard);
        let report = report.then(|| limit.report(&state, now));
        Decision { route, outcome, report, now }
    }

    /// Gives back `cost` reserved by a wait that was cancelled.
    pub fn refund(&self, peer: &str, path: Option<&str>, cost: u64) {
        if let Route::Group(group) = self.router.route(peer, path) {
            let key = self.key(peer, group);
            let now = self.clock.now_ns();
            if let Some(state) = self.store.lock(key).get_mut(key) {
                self.groups[group].limit.refund(state, now, cost);
            }
        }
    }

    /// Forgets the state of `peer` in every group, or of every peer.
    pub fn reset(&self, peer: Option<&str>) {
        match peer {
            Some(peer) => {
                for group in 0..self.groups.len() {
                    let key = self.key(peer, group);
                    self.store.lock(key).remove(key);
                }
            }
            None => self.store.shards().for_each(|mut s| s.clear()),
        }
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    #[must_use]
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    #[must_use]
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Tracked keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.store.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    #[must_use]
    pub fn max_keys(&self) -> usize {
        self.store.max_keys()
    }

    /// Approximate heap bytes of the state map.
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        self.store.shards().map(|s| s.allocated_bytes()).sum()
    }

    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut stats = Stats { groups: vec![GroupCounters::default(); self.groups.len()], ..Stats::default() };
        for shard in self.store.shards() {
            for (total, counters) in stats.groups.iter_mut().zip(&shard.counters.groups) {
                total.add(counters);
            }
            stats.exempt += shard.counters.exempt;
            stats.keys += shard.len();
            stats.evictions += shard.evictions;
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::algorithm::Kind;
    use crate::clock::ManualClock;

    const S: u64 = 1_000_000_000;

    fn rule(pattern: &str, group: &str, rate: &str) -> RuleSpec {
        RuleSpec {
            pattern: pattern.into(),
            group: group.into(),
            limit: Limit::new(rate.parse().unwrap(), None, Kind::Gcra).unwrap(),
        }
    }

    fn limiter(rules: Vec<RuleSpec>) -> (Limiter, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(0));
        let config = Config {
            rules,
            exempt_peers: vec!["admin".into()],
            exempt_paths: vec!["^/health".into()],
            ..Config::default()
        };
        (Limiter::new(config, Clock::Manual(clock.clone())).unwrap(), clock)
    }

    fn allowed(lim: &Limiter, peer: &str, path: Option<&str>) -> bool {
        lim.decide(peer, path, 1, 0, false).outcome.allowed
    }

    #[test]
    fn peers_and_groups_are_limited_separately() {
        let (lim, clock) = limiter(vec![rule("^/api/", "api", "2/s"), rule("", "default", "1/s")]);
        assert!(allowed(&lim, "a", Some("/api/x")));
        assert!(allowed(&lim, "a", Some("/api/y")));
        assert!(!allowed(&lim, "a", Some("/api/z")));
        assert!(allowed(&lim, "b", Some("/api/z")));
        assert!(allowed(&lim, "a", Some("/other")));
        assert!(!allowed(&lim, "a", None));
        clock.advance_ns(S);
        assert!(allowed(&lim, "a", None));
        let stats = lim.stats();
        assert_eq!(stats.groups[0], GroupCounters { requests: 4, allowed: 3, refused: 1, delayed: 0 });
        assert_eq!(stats.keys, 3);
    }

    #[test]
    fn exempt_and_disabled_requests_touch_no_state() {
        let (lim, _) = limiter(vec![rule("", "default", "1/min")]);
        for _ in 0..5 {
            assert!(allowed(&lim, "admin", Some("/x")));
            assert!(allowed(&lim, "p", Some("/health")));
        }
        assert_eq!(lim.len(), 0);
        assert_eq!(lim.stats().exempt, 10);
        lim.set_enabled(false);
        assert!(allowed(&lim, "p", None) && allowed(&lim, "p", None));
        assert_eq!(lim.len(), 0);
        lim.set_enabled(true);
        assert!(allowed(&lim, "p", None));
        assert!(!allowed(&lim, "p", None));
    }

    #[test]
    fn reset_forgets_one_peer_or_all() {
        let (lim, _) = limiter(vec![rule("", "default", "1/min")]);
        assert!(allowed(&lim, "a", None) && allowed(&lim, "b", None));
        lim.reset(Some("a"));
        assert!(allowed(&lim, "a", None));
        assert!(!allowed(&lim, "b", None));
        lim.reset(None);
        assert!(lim.is_empty());
    }

    #[test]
    fn a_group_defined_twice_must_agree() {
        let err = Limiter::new(
            Config { rules: vec![rule("^/a", "g", "1/s"), rule("^/b", "g", "2/s")], ..Config::default() },
            Clock::monotonic(),
        )
        .unwrap_err();
        assert_eq!(err.field, "rules[1].group");
    }

    #[test]
    fn refund_returns_a_reserved_slot() {
        let (lim, _) = limiter(vec![rule("", "default", "1/s")]);
        assert_eq!(lim.decide("a", None, 1, u64::MAX, false).outcome.wait_ns, 0);
        assert_eq!(lim.decide("a", None, 1, u64::MAX, false).outcome.wait_ns, S);
        lim.refund("a", None, 1);
        assert_eq!(lim.decide("a", None, 1, u64::MAX, false).outcome.wait_ns, S);
        assert_eq!(lim.stats().groups[0].delayed, 2);
    }
}
