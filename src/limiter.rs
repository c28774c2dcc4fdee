//! The limiter: routes a request to a group, finds the key's states, applies the group's limits.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::MutexGuard;

use crate::algorithm::{Admit, Algorithm, Limit, Outcome, Report, State, NO_LOG};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::metrics::{GroupCounters, ShardCounters, Stats};
use crate::rules::{Route, Router};
use crate::store::{Shard, Store};

/// How a group's rate limits combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Every limit must admit ("10/s and 1000/hour"); a refusal by one consumes nothing from the others.
    All,
    /// The first limit that admits takes the request (seed 003: sliding window, then leaky tokens).
    Fallback,
}

impl Policy {
    /// # Errors
    /// An unknown policy name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "all" => Ok(Self::All),
            "fallback" => Ok(Self::Fallback),
            _ => Err(Error::value("policy", format!("unknown policy {name:?}; expected 'all' or 'fallback'"))),
        }
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Fallback => "fallback",
        }
    }
}

/// A rule as configured: requests whose path matches `pattern` are limited by `group`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    pub pattern: String,
    pub group: String,
    /// Rate limits, combined by `policy`, and concurrency limits, which are gates taken by `acquire`.
    pub limits: Vec<Limit>,
    pub policy: Policy,
    /// Whether `reduce` may give tokens back (seed 003's `is_manual_reduction_disabled`, inverted).
    pub reduction: bool,
}

impl RuleSpec {
    /// A rule with one limit.
    #[must_use]
    pub fn single(pattern: &str, group: &str, limit: Limit) -> Self {
        Self { pattern: pattern.into(), group: group.into(), limits: vec![limit], policy: Policy::All, reduction: true }
    }
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
    pub limits: Vec<Limit>,
    pub policy: Policy,
    pub reduction: bool,
    /// One plain rate limit: decided in place, no copies.
    simple: bool,
}

impl Group {
    fn rate_limits(&self) -> impl Iterator<Item = (usize, &Limit)> {
        self.limits.iter().enumerate().filter(|(_, l)| !l.is_concurrency())
    }

    fn gates(&self) -> impl Iterator<Item = (usize, &Limit)> {
        self.limits.iter().enumerate().filter(|(_, l)| l.is_concurrency())
    }
}

/// Which limits an admission wrote, and at what instant: what a refund must take back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Receipt {
    pub limits: u64,
    pub at: u64,
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
    pub receipt: Receipt,
}

impl Decision {
    const fn free(route: Route) -> Self {
        Self { route, outcome: Outcome::admitted(0), report: None, now: 0, receipt: Receipt { limits: 0, at: 0 } }
    }
}

/// Waiting decisions retry at the reported time; several limits may each push it further.
const MAX_ATTEMPTS: usize = 8;

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
    /// A bad pattern, a group defined twice with different limits, a rule without limits, or
    /// `max_keys` of zero.
    pub fn new(config: Config, clock: Clock) -> Result<Self> {
        if config.max_keys == 0 {
            return Err(Error::value("max_keys", "must be at least 1, got 0"));
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut patterns = Vec::with_capacity(config.rules.len());
        for (i, rule) in config.rules.iter().enumerate() {
            if rule.limits.is_empty() {
                return Err(Error::value(format!("rules[{i}].limits"), "a rule needs at least one limit"));
            }
            if rule.limits.len() > 64 {
                return Err(Error::value(format!("rules[{i}].limits"), "a rule takes at most 64 limits"));
            }
            let index = if let Some(index) = groups.iter().position(|g| g.name == rule.group) {
                let g = &groups[index];
                if g.limits != rule.limits || g.policy != rule.policy || g.reduction != rule.reduction {
                    return Err(Error::value(
                        format!("rules[{i}].group"),
                        format!("group {:?} is already defined with other limits by an earlier rule", rule.group),
                    ));
                }
                index
            } else {
                let simple = rule.limits.len() == 1 && !rule.limits[0].is_concurrency() && !rule.limits[0].uses_log();
                groups.push(Group {
                    name: rule.group.clone(),
                    limits: rule.limits.clone(),
                    policy: rule.policy,
                    reduction: rule.reduction,
                    simple,
                });
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

    /// The key of (peer, group); the group's other limits use related keys in the same shard.
    #[inline]
    fn key(&self, peer: &str, group: usize) -> u64 {
        self.hasher.hash_one((peer, group))
    }

    #[inline]
    fn limit_key(base: u64, index: usize) -> u64 {
        // index < 64, checked at construction.
        #[allow(clippy::cast_possible_truncation)]
        Store::<ShardCounters>::related_key(base, index as u32)
    }

    /// Decides one request against the group's rate limits. `max_wait_ns` > 0 lets it reserve a later
    /// slot (a waiter); `report` asks for what the key has left.
    #[inline]
    pub fn decide(&self, peer: &str, path: Option<&str>, cost: u64, max_wait_ns: u64, report: bool) -> Decision {
        self.run(peer, path, cost, max_wait_ns, report, false)
    }

    /// As `decide`, and also takes the group's concurrency permits; give them back with `release`.
    pub fn acquire(&self, peer: &str, path: Option<&str>, cost: u64, report: bool) -> Decision {
        self.run(peer, path, cost, 0, report, true)
    }

    #[inline]
    fn run(&self, peer: &str, path: Option<&str>, cost: u64, max_wait: u64, report: bool, acquire: bool) -> Decision {
        if !self.enabled.load(Ordering::Relaxed) {
            return Decision::free(Route::Unlimited);
        }
        let route = self.router.route(peer, path);
        let index = match route {
            Route::Unlimited => return Decision::free(route),
            Route::Exempt => {
                self.store.lock(self.hasher.hash_one(peer)).counters.exempt += 1;
                return Decision::free(route);
            }
            Route::Group(index) => index,
        };
        let group = &self.groups[index];
        let base = self.key(peer, index);
        let now = self.clock.now_ns();
        let mut shard = self.store.lock(base);
        let simple =
            if group.simple { Some(Self::decide_simple(&mut shard, &group.limits[0], base, now, cost)) } else { None };
        let (outcome, receipt) = match simple {
            Some(Ok(admitted)) => admitted,
            // Refused, and the caller cannot wait that long: no second evaluation.
            Some(Err(retry)) if retry > max_wait => (Outcome::refused(retry), Receipt::default()),
            _ => Self::decide_group(&mut shard, group, base, now, cost, max_wait, acquire),
        };
        shard.counters.groups[index].record(outcome.allowed, outcome.wait_ns > 0);
        let report = report.then(|| Self::report(&shard, group, base, now));
        drop(shard);
        Decision { route, outcome, report, now, receipt }
    }

    /// The hot path: one plain limit decided in place at `now`. The retry time when refused (a waiter may
    /// still reserve a later slot through `decide_group`).
    #[inline]
    fn decide_simple(
        shard: &mut Shard<ShardCounters>,
        limit: &Limit,
        key: u64,
        now: u64,
        cost: u64,
    ) -> std::result::Result<(Outcome, Receipt), u64> {
        let receipt = Receipt { limits: 1, at: now };
        let simple = |admit| match admit {
            Admit::State(admitted) => admitted,
            Admit::Log { .. } => unreachable!("a simple group has no sliding log"),
        };
        if let Some(state) = shard.get_mut(key) {
            *state = simple(limit.evaluate(state, &NO_LOG, now, cost)?);
        } else {
            let admitted = simple(limit.evaluate(&State::default(), &NO_LOG, now, cost)?);
            shard.insert(key, admitted, now);
        }
        Ok((Outcome::admitted(0), receipt))
    }

    /// Every limit of the group at `now`, or for a waiter at the first instant all admit.
    fn decide_group(
        shard: &mut Shard<ShardCounters>,
        group: &Group,
        base: u64,
        now: u64,
        cost: u64,
        max_wait: u64,
        acquire: bool,
    ) -> (Outcome, Receipt) {
        let mut wait = 0u64;
        for _ in 0..MAX_ATTEMPTS {
            let at = now.saturating_add(wait);
            match Self::evaluate_group(shard, group, base, at, cost, acquire) {
                Ok(admits) => {
                    let mut receipt = Receipt { limits: 0, at };
                    for (index, admit) in admits {
                        Self::commit(shard, &group.limits[index], Self::limit_key(base, index), now, admit);
                        receipt.limits |= 1 << index;
                    }
                    return (Outcome::admitted(wait), receipt);
                }
                // Never (cost above a burst), or a concurrency gate: waiting does not help.
                Err(retry) if retry == u64::MAX || retry == 0 => return (Outcome::refused(retry), Receipt::default()),
                Err(retry) => {
                    let total = wait.saturating_add(retry);
                    if total > max_wait {
                        return (Outcome::refused(total), Receipt::default());
                    }
                    wait = total;
                }
            }
        }
        (Outcome::refused(wait), Receipt::default())
    }

    /// The admissions of the group's limits at `at`, or the time after `at` to retry.
    fn evaluate_group(
        shard: &Shard<ShardCounters>,
        group: &Group,
        base: u64,
        at: u64,
        cost: u64,
        acquire: bool,
    ) -> std::result::Result<Vec<(usize, Admit)>, u64> {
        let evaluate = |index: usize, limit: &Limit| {
            let key = Self::limit_key(base, index);
            limit.evaluate(&shard.load(key), shard.log(key), at, cost)
        };
        let mut admits = Vec::with_capacity(group.limits.len());
        if acquire {
            for (index, gate) in group.gates() {
                admits.push((index, evaluate(index, gate)?));
            }
        }
        match group.policy {
            Policy::All => {
                let mut retry = None;
                for (index, limit) in group.rate_limits() {
                    match evaluate(index, limit) {
                        Ok(admit) => admits.push((index, admit)),
                        Err(r) => retry = Some(retry.map_or(r, |w: u64| w.max(r))),
                    }
                }
                retry.map_or(Ok(admits), Err)
            }
            Policy::Fallback => {
                let mut retry = u64::MAX;
                for (index, limit) in group.rate_limits() {
                    match evaluate(index, limit) {
                        Ok(admit) => {
                            admits.push((index, admit));
                            return Ok(admits);
                        }
                        Err(r) => retry = retry.min(r),
                    }
                }
                // A group of gates only admits once they do.
                if group.rate_limits().next().is_none() {
                    return Ok(admits);
                }
                Err(retry)
            }
        }
    }

    fn commit(shard: &mut Shard<ShardCounters>, limit: &Limit, key: u64, now: u64, admit: Admit) {
        match (admit, &limit.algorithm) {
            (Admit::State(state), _) => shard.store(key, state, now),
            (Admit::Log { at, cost, idle_at }, Algorithm::SlidingLog(log)) => {
                log.append(shard.log_mut(key), now, at, cost);
                shard.store(key, State { t: idle_at, a: 0, b: 0 }, now);
            }
            (Admit::Log { .. }, _) => unreachable!("only a sliding log admits into a log"),
        }
    }

    /// What the key has left under the group's rate limits: the tightest under `all`, the sum under
    /// `fallback`; a group of gates only reports its free permits.
    fn report(shard: &Shard<ShardCounters>, group: &Group, base: u64, now: u64) -> Report {
        let only_gates = group.rate_limits().next().is_none();
        let reports =
            group.limits.iter().enumerate().filter(|(_, l)| l.is_concurrency() == only_gates).map(|(index, limit)| {
                let key = Self::limit_key(base, index);
                limit.report(&shard.load(key), shard.log(key), now)
            });
        let mut combined: Option<Report> = None;
        for r in reports {
            combined = Some(match (combined, group.policy) {
                (None, _) => r,
                (Some(c), Policy::All) => {
                    let tightest = if r.remaining < c.remaining { r } else { c };
                    Report { reset_after_ns: c.reset_after_ns.max(r.reset_after_ns), ..tightest }
                }
                (Some(c), Policy::Fallback) => Report {
                    limit: c.limit + r.limit,
                    remaining: c.remaining + r.remaining,
                    reset_after_ns: c.reset_after_ns.max(r.reset_after_ns),
                },
            });
        }
        combined.unwrap_or(Report { limit: 0, remaining: 0, reset_after_ns: 0 })
    }

    /// Applies `change` to the states of the limits of group `index` that `select` picks, and returns
    /// the shard, still locked, for the caller's counters.
    fn change(
        &self,
        peer: &str,
        index: usize,
        select: impl Fn(usize, &Limit) -> bool,
        change: impl Fn(&Limit, &State, &mut VecDeque<u64>, u64) -> State,
    ) -> MutexGuard<'_, Shard<ShardCounters>> {
        let base = self.key(peer, index);
        let now = self.clock.now_ns();
        let mut shard = self.store.lock(base);
        for (i, limit) in self.groups[index].limits.iter().enumerate() {
            if !select(i, limit) {
                continue;
            }
            let key = Self::limit_key(base, i);
            if let Some(state) = shard.get_mut(key).map(|s| *s) {
                // Only a sliding log has stamps; others must not leave an empty log behind.
                let changed = if limit.uses_log() {
                    let mut log = std::mem::take(shard.log_mut(key));
                    let changed = change(limit, &state, &mut log, now);
                    *shard.log_mut(key) = log;
                    changed
                } else {
                    change(limit, &state, &mut VecDeque::new(), now)
                };
                shard.store(key, changed, now);
            }
        }
        shard
    }

    /// Gives back `cost` that an admission took (`receipt`), e.g. for a cancelled wait.
    pub fn refund(&self, peer: &str, path: Option<&str>, cost: u64, receipt: Receipt) {
        if let Route::Group(index) = self.router.route(peer, path) {
            drop(self.change(
                peer,
                index,
                |i, _| receipt.limits & (1 << i) != 0,
                |limit, state, log, now| limit.refund(state, log, now, receipt.at, cost),
            ));
        }
    }

    /// Returns the concurrency permits taken by `acquire`.
    pub fn release(&self, peer: &str, path: Option<&str>, cost: u64) {
        if let Route::Group(index) = self.router.route(peer, path) {
            drop(self.change(
                peer,
                index,
                |_, l| l.is_concurrency(),
                |limit, state, log, now| limit.refund(state, log, now, now, cost),
            ));
        }
    }

    /// Gives `tokens` back to the rate limits of `peer`'s group (seed 003's manual reduction).
    /// False when no group limits the path or the group disables reduction.
    pub fn reduce(&self, peer: &str, path: Option<&str>, tokens: u64) -> bool {
        let Route::Group(index) = self.router.route(peer, path) else { return false };
        if !self.groups[index].reduction {
            return false;
        }
        let mut shard = self.change(
            peer,
            index,
            |_, l| !l.is_concurrency(),
            |limit, state, log, now| limit.refund(state, log, now, now, tokens),
        );
        shard.counters.groups[index].reductions += 1;
        true
    }

    /// Forgets the state of `peer` in every group, or of every peer.
    pub fn reset(&self, peer: Option<&str>) {
        match peer {
            Some(peer) => {
                for (index, group) in self.groups.iter().enumerate() {
                    let base = self.key(peer, index);
                    let mut shard = self.store.lock(base);
                    for i in 0..group.limits.len() {
                        shard.remove(Self::limit_key(base, i));
                    }
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

    /// Tracked states (one per key and limit).
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

    fn limit(rate: &str, kind: Kind) -> Limit {
        Limit::new(rate.parse().unwrap(), None, kind).unwrap()
    }

    fn rule(pattern: &str, group: &str, rate: &str) -> RuleSpec {
        RuleSpec::single(pattern, group, limit(rate, Kind::Gcra))
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
        assert_eq!(stats.groups[0], GroupCounters { requests: 4, allowed: 3, refused: 1, delayed: 0, reductions: 0 });
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
        let second = lim.decide("a", None, 1, u64::MAX, false);
        assert_eq!(second.outcome.wait_ns, S);
        lim.refund("a", None, 1, second.receipt);
        assert_eq!(lim.decide("a", None, 1, u64::MAX, false).outcome.wait_ns, S);
        assert_eq!(lim.stats().groups[0].delayed, 2);
    }

    fn group(limits: Vec<Limit>, policy: Policy) -> (Limiter, Arc<ManualClock>) {
        limiter(vec![RuleSpec { pattern: String::new(), group: "g".into(), limits, policy, reduction: true }])
    }

    #[test]
    fn all_policy_is_all_or_nothing() {
        // 2/s and 3/min: the per-minute limit refuses the fourth request without the per-second one
        // spending anything.
        let (lim, clock) = group(vec![limit("2/s", Kind::Gcra), limit("3/min", Kind::SlidingWindow)], Policy::All);
        assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
        assert!(!allowed(&lim, "a", None));
        clock.advance_ns(S);
        assert!(allowed(&lim, "a", None));
        let refused = lim.decide("a", None, 1, 0, true);
        assert!(!refused.outcome.allowed);
        // Refused by the minute limit: the second limit still has both its slots.
        assert_eq!(refused.report.unwrap().remaining, 0);
        clock.advance_ns(119 * S);
        assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
    }

    #[test]
    fn fallback_policy_tries_the_next_limit() {
        // Seed 003: a sliding window of 2/s, then a leaky bucket of 3 tokens leaking 3 per 30 s.
        let (lim, clock) =
            group(vec![limit("2/s", Kind::SlidingWindow), limit("3/30s", Kind::LeakyBucket)], Policy::Fallback);
        let admitted = (0..10).filter(|_| allowed(&lim, "a", None)).count();
        assert_eq!(admitted, 5);
        clock.advance_ns(S);
        let report = lim.decide("a", None, 1, 0, true).report.unwrap();
        assert_eq!((report.limit, report.remaining), (5, 0));
        assert!(lim.reduce("a", None, 2));
        assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
    }

    #[test]
    fn waiters_reserve_across_all_limits_at_one_instant() {
        let (lim, _) = group(vec![limit("1/s", Kind::Gcra), limit("2/10s", Kind::FixedWindow)], Policy::All);
        let waits: Vec<u64> = (0..4).map(|_| lim.decide("a", None, 1, u64::MAX, false).outcome.wait_ns).collect();
        assert_eq!(waits, [0, S, 10 * S, 11 * S]);
    }

    #[test]
    fn concurrency_permits_are_gates_taken_by_acquire() {
        let (lim, _) = group(vec![limit("100/s", Kind::Gcra), Limit::concurrency(2).unwrap()], Policy::All);
        assert!(lim.acquire("a", None, 1, false).outcome.allowed);
        assert!(lim.acquire("a", None, 1, false).outcome.allowed);
        let third = lim.acquire("a", None, 1, false);
        assert_eq!(third.outcome, Outcome::refused(0));
        // Plain decisions do not take permits.
        assert!(allowed(&lim, "a", None));
        lim.release("a", None, 1);
        assert!(lim.acquire("a", None, 1, false).outcome.allowed);
    }

    #[test]
    fn sliding_log_keys_keep_their_stamps_beside_the_slot() {
        let (lim, clock) = group(vec![limit("2/10s", Kind::SlidingLog)], Policy::All);
        assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
        assert_eq!(lim.decide("a", None, 1, 0, false).outcome.retry_after_ns, 10 * S);
        clock.advance_ns(10 * S);
        assert!(allowed(&lim, "a", None));
        lim.reset(Some("a"));
        assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
    }

    #[test]
    fn reduction_can_be_disabled() {
        let (lim, _) = limiter(vec![RuleSpec {
            pattern: String::new(),
            group: "g".into(),
            limits: vec![limit("1/min", Kind::LeakyBucket)],
            policy: Policy::All,
            reduction: false,
        }]);
        assert!(allowed(&lim, "a", None));
        assert!(!lim.reduce("a", None, 1));
        assert!(!allowed(&lim, "a", None));
    }
}
