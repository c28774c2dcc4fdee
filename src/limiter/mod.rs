//! The limiter: routes a request to a group, finds the key's states, applies the group's limits.
//!
//! The rules (router and groups) sit behind an `ArcSwap`, so `update_rule` and `reload` replace them
//! without stopping decisions; state keys derive from the group's name and each limit's algorithm, so
//! they survive a reconfiguration (a new algorithm starts afresh). Per-key quotas replace the rate of a
//! group's first rate limit; see `quota`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::{Mutex, MutexGuard};

use crate::algorithm::{Admit, Algorithm, Limit, Outcome, Report, State, NO_LOG};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::metrics::{GroupCounters, Stats};
use crate::quota::{FetchQueue, QuotaSettings, QuotaTable};
use crate::rules::{Route, Router};
use crate::store::{Shard, Store};

mod quotas;
mod reconfigure;

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

/// The routing part of a configuration: what `reload` replaces.
#[derive(Debug, Clone, Default)]
pub struct RulesConfig {
    pub rules: Vec<RuleSpec>,
    pub exempt_peers: Vec<String>,
    pub exempt_paths: Vec<String>,
}

/// Everything a limiter is built from.
#[derive(Debug, Clone)]
pub struct Config {
    pub rules: RulesConfig,
    pub max_keys: usize,
    pub quotas: QuotaSettings,
}

impl Default for Config {
    fn default() -> Self {
        Self { rules: RulesConfig::default(), max_keys: 1_000_000, quotas: QuotaSettings::default() }
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
    /// Mixed with the peer into the key of the group's states and quota record: the name's hash.
    seed: u64,
    /// Per limit: what tells its state apart from the group's other limits and from its own earlier
    /// versions (index, algorithm, and the rules version that last changed it).
    signatures: Vec<u32>,
    /// Limits a reconfiguration replaced, whose states a key moves from on its next decision.
    history: Vec<Previous>,
    /// The limit a per-key quota replaces: the first rate limit.
    pub primary: Option<usize>,
    /// `primary` with the failsafe's rate.
    failsafe: Option<Limit>,
}

impl Group {
    fn rate_limits(limits: &[Limit]) -> impl Iterator<Item = (usize, &Limit)> {
        limits.iter().enumerate().filter(|(_, l)| !l.is_concurrency())
    }

    fn gates(limits: &[Limit]) -> impl Iterator<Item = (usize, &Limit)> {
        limits.iter().enumerate().filter(|(_, l)| l.is_concurrency())
    }

    /// Takes over the keys of `old` (the group of the same name before a reconfiguration at `now`): the
    /// same seed, the same signature for unchanged limits, a new one (and a history entry) for changed
    /// ones. A group new in `version` gets keys of its own, so one removed and added back starts afresh.
    fn inherit(&mut self, old: Option<(&Group, u64)>, version: u64, hasher: &ahash::RandomState) {
        let Some((old, now)) = old else {
            self.seed = hasher.hash_one((&self.name, version));
            return;
        };
        self.seed = old.seed;
        self.history = old.history.iter().filter(|p| now < p.until && p.index < self.limits.len()).copied().collect();
        for (i, limit) in self.limits.iter().enumerate() {
            match old.limits.get(i) {
                Some(was) if was == limit => self.signatures[i] = old.signatures[i],
                was => {
                    self.signatures[i] = signature(i, limit, version);
                    if let Some(was) = was {
                        let previous =
                            Previous { index: i, signature: old.signatures[i], limit: *was, changed_at: now, until: 0 };
                        self.history.insert(0, previous);
                        // A state of any earlier version matters while what it holds (at most the largest
                        // burst among them) drains at the new rate: the new horizon once per new burst.
                        let versions = self.history.iter_mut().filter(|p| p.index == i);
                        let largest = versions.map(|p| p.limit.burst).max().unwrap_or(was.burst);
                        let rounds = u64::from(largest.div_ceil(limit.burst));
                        let drain = was.horizon_ns().max(limit.horizon_ns().saturating_mul(rounds));
                        for p in self.history.iter_mut().filter(|p| p.index == i) {
                            p.until = p.until.max(now.saturating_add(drain));
                        }
                    }
                }
            }
        }
        self.history.truncate(MAX_HISTORY);
    }

    /// The group's limits for a key whose quota is `quota` (replacing the first rate limit).
    fn limits_with(&self, quota: Option<Limit>) -> Cow<'_, [Limit]> {
        match (quota, self.primary) {
            (Some(limit), Some(p)) if limit != self.limits[p] => {
                let mut limits = self.limits.clone();
                limits[p] = limit;
                Cow::Owned(limits)
            }
            _ => Cow::Borrowed(&self.limits),
        }
    }
}

/// A limit of an earlier version of the rules: keys still holding its state move to the new limit,
/// keeping what they used, on their next decision; after `until` every such state is idle.
#[derive(Debug, Clone, Copy)]
struct Previous {
    index: usize,
    signature: u32,
    limit: Limit,
    /// When the limit was replaced: usage is counted then, and drains at the new rate from then on.
    changed_at: u64,
    until: u64,
}

/// Earlier limits kept per group; a key untouched across more reconfigurations starts afresh.
const MAX_HISTORY: usize = 8;

fn signature(index: usize, limit: &Limit, generation: u64) -> u32 {
    // The first limit as first configured uses the base key itself (its quota record lives in another
    // table): no mixing on the hot path.
    if index == 0 && generation == 0 {
        return 0;
    }
    // index < 64 and kind < 16 fit the low 10 bits; never 0.
    #[allow(clippy::cast_possible_truncation)]
    let low = ((index as u32 + 1) << 4) | limit.kind() as u32;
    #[allow(clippy::cast_possible_truncation)]
    let generation = generation as u32;
    generation.wrapping_shl(10) | low
}

/// The router and groups in force, replaced whole by a reconfiguration.
#[derive(Debug)]
pub struct Rules {
    router: Router,
    pub groups: Vec<Group>,
    pub config: RulesConfig,
    version: u64,
}

impl Rules {
    /// The rules of `config`; with `previous` (a reconfiguration at `now`), groups that keep their name
    /// keep their keys, and limits that changed record the old ones for the keys to move from.
    fn build(
        config: RulesConfig,
        quotas: &QuotaSettings,
        version: u64,
        hasher: &ahash::RandomState,
        previous: Option<(&Rules, u64)>,
    ) -> Result<Self> {
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
                let mut group = Self::group(rule, quotas).map_err(|e| e.within(&format!("rules[{i}]")))?;
                let old = previous
                    .and_then(|(rules, now)| rules.groups.iter().find(|g| g.name == group.name).map(|old| (old, now)));
                group.inherit(old, version, hasher);
                groups.push(group);
                groups.len() - 1
            };
            patterns.push((rule.pattern.clone(), index));
        }
        let router = Router::new(&patterns, config.exempt_peers.clone(), &config.exempt_paths)?;
        Ok(Self { router, groups, config, version })
    }

    fn group(rule: &RuleSpec, quotas: &QuotaSettings) -> Result<Group> {
        let limits = rule.limits.clone();
        let simple = limits.len() == 1 && !limits[0].is_concurrency() && !limits[0].uses_log();
        let primary = limits.iter().position(|l| !l.is_concurrency());
        let failsafe = match (primary, quotas.failsafe) {
            (Some(p), Some(rate)) => {
                Some(limits[p].with_rate(rate, None).map_err(|e| Error::value("failsafe", e.message))?)
            }
            _ => None,
        };
        let signatures = limits.iter().enumerate().map(|(i, limit)| signature(i, limit, 0)).collect();
        Ok(Group {
            name: rule.group.clone(),
            limits,
            policy: rule.policy,
            reduction: rule.reduction,
            simple,
            seed: 0,
            signatures,
            history: Vec::new(),
            primary,
            failsafe,
        })
    }

    /// Counts reconfigurations; quota records re-derive their limit when it changes.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The index of the group named `name`.
    ///
    /// # Errors
    /// No group has that name.
    pub fn group_index(&self, name: &str) -> Result<usize> {
        self.groups.iter().position(|g| g.name == name).ok_or_else(|| {
            let known: Vec<String> = self.groups.iter().map(|g| format!("{:?}", g.name)).collect();
            Error::value("group", format!("no group named {name:?}; the groups are {}", known.join(", ")))
        })
    }
}

/// What one shard holds beside its states: counters, quota records, and the rules its keys follow.
#[derive(Debug)]
pub struct ShardData {
    pub groups: Vec<GroupCounters>,
    /// Requests of exempt peers or paths.
    pub exempt: u64,
    pub quotas: QuotaTable,
    /// The rules in force, read under the shard's lock so a decision needs no other synchronisation; a
    /// reconfiguration replaces them shard by shard (with the counters, which they index). Taken out
    /// while a decision uses them.
    rules: Option<Arc<Rules>>,
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

/// What came of a fetch a worker finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landing {
    /// The quota is in force.
    Landed,
    /// The fetch had been superseded (timed out, or a quota was set meanwhile): ignored.
    Late,
    /// Counted as a failure; `first` when it starts a run of failures (log it), `reason` when the
    /// answer itself was unusable.
    Failed { first: bool, reason: Option<Error> },
}

/// Waiting decisions retry at the reported time; several limits may each push it further.
const MAX_ATTEMPTS: usize = 8;

#[derive(Debug)]
pub struct Limiter {
    rules: ArcSwap<Rules>,
    store: Store<ShardData>,
    clock: Clock,
    hasher: ahash::RandomState,
    enabled: AtomicBool,
    quotas: QuotaSettings,
    /// Whether decisions consult quota records: a provider is set, or a quota was ever set.
    quotas_active: AtomicBool,
    fetches: Arc<FetchQueue>,
    /// Serialises reconfigurations.
    reconfiguring: Mutex<()>,
}

impl Drop for Limiter {
    fn drop(&mut self) {
        self.fetches.close();
    }
}

impl Limiter {
    /// # Errors
    /// A bad pattern, a group defined twice with different limits, a rule without limits, a failsafe
    /// that does not fit a group's limit, or `max_keys` of zero.
    pub fn new(config: Config, clock: Clock) -> Result<Self> {
        if config.max_keys == 0 {
            return Err(Error::value("max_keys", "must be at least 1, got 0"));
        }
        let hasher = ahash::RandomState::new();
        let rules = Rules::build(config.rules, &config.quotas, 0, &hasher, None)?;
        let group_count = rules.groups.len();
        let records = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let max_keys = config.max_keys;
        let rules = Arc::new(rules);
        let store = Store::new(max_keys, || ShardData {
            groups: vec![GroupCounters::default(); group_count],
            exempt: 0,
            quotas: QuotaTable::new(Arc::clone(&records), max_keys, Store::<ShardData>::shard_count(max_keys)),
            rules: Some(Arc::clone(&rules)),
        });
        Ok(Self {
            rules: ArcSwap::new(rules),
            store,
            clock,
            hasher,
            enabled: AtomicBool::new(true),
            quotas: config.quotas,
            quotas_active: AtomicBool::new(config.quotas.provider),
            fetches: Arc::new(FetchQueue::new(config.quotas.queue_capacity)),
            reconfiguring: Mutex::new(()),
        })
    }

    /// The base key of (peer, group) from the peer's hash: its quota record's key; its states use
    /// related keys. Every key of a peer lives in the shard of the peer's hash.
    #[inline]
    fn key(peer_hash: u64, group: &Group) -> u64 {
        // A bijection of peer_hash ^ seed: distinct (peer, group) pairs keep distinct keys.
        let mixed = (peer_hash ^ group.seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        mixed ^ (mixed >> 29)
    }

    #[inline]
    fn limit_key(group: &Group, base: u64, index: usize) -> u64 {
        Store::<ShardData>::related_key(base, group.signatures[index])
    }

    /// The rules in force.
    #[must_use]
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.load_full()
    }

    /// The shard of `peer`, locked, with the rules it follows and the group `route` picks.
    fn lock(&self, peer: &str, mut route: impl FnMut(&Rules) -> Option<usize>) -> Option<Locked<'_>> {
        let peer_hash = self.hasher.hash_one(peer);
        let shard = self.store.lock(peer_hash);
        let rules = shard.data.rules.clone().unwrap_or_else(|| self.rules.load_full());
        let index = route(&rules)?;
        let base = Self::key(peer_hash, &rules.groups[index]);
        Some(Locked { rules, shard, index, base })
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
        let peer_hash = self.hasher.hash_one(peer);
        let now = self.clock.now_ns();
        let mut shard = self.store.lock(peer_hash);
        // Taken out for the decision (no reference count touched) and put back; after a panic it is
        // restored from the limiter's copy.
        let rules = shard.data.rules.take().unwrap_or_else(|| self.rules.load_full());
        let decision = match rules.router.route(peer, path) {
            Route::Group(index) => {
                let base = Self::key(peer_hash, &rules.groups[index]);
                self.decide_locked(&mut shard, &rules, index, base, peer, now, (cost, max_wait), report, acquire)
            }
            Route::Exempt => {
                shard.data.exempt += 1;
                Decision::free(Route::Exempt)
            }
            Route::Unlimited => Decision::free(Route::Unlimited),
        };
        shard.data.rules = Some(rules);
        decision
    }

    /// A decision for the key `base` of group `index`, its shard locked.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn decide_locked(
        &self,
        shard: &mut Shard<ShardData>,
        rules: &Rules,
        index: usize,
        base: u64,
        peer: &str,
        now: u64,
        (cost, max_wait): (u64, u64),
        report: bool,
        acquire: bool,
    ) -> Decision {
        let group = &rules.groups[index];
        let quota = self.quota_of(shard, rules, index, base, peer, now, true);
        if !group.history.is_empty() {
            Self::migrate(shard, group, quota.as_ref(), base, now);
        }
        let (outcome, receipt) = Self::decide_in(shard, group, quota.as_ref(), base, now, cost, max_wait, acquire);
        shard.data.groups[index].record(outcome.allowed, outcome.wait_ns > 0);
        let report = report.then(|| Self::report(shard, group, &group.limits_with(quota), base, now));
        Decision { route: Route::Group(index), outcome, report, now, receipt }
    }

    /// Moves the key's states from limits a reconfiguration replaced to the current ones, keeping what
    /// it used: through every limit in force since, each from the instant it took over, so usage drains
    /// at the rates that were in force (a quota in force replaces the first rate limit throughout).
    #[cold]
    fn migrate(shard: &mut Shard<ShardData>, group: &Group, quota: Option<&Limit>, base: u64, now: u64) {
        let effective = |limit: &Limit, index: usize| match quota.filter(|_| group.primary == Some(index)) {
            Some(q) => q.rate.and_then(|rate| limit.with_rate(rate, None).ok()).unwrap_or(*limit),
            None => *limit,
        };
        for index in 0..group.limits.len() {
            // This limit's earlier versions, newest first.
            let mut chain = [0usize; MAX_HISTORY];
            let mut versions = 0;
            for (position, previous) in group.history.iter().enumerate() {
                if previous.index == index {
                    chain[versions] = position;
                    versions += 1;
                }
            }
            let held = chain[..versions].iter().position(|&h| {
                let previous = &group.history[h];
                now < previous.until && shard.find(Store::<ShardData>::related_key(base, previous.signature)).is_some()
            });
            let Some(held) = held else { continue };
            let old_key = Store::<ShardData>::related_key(base, group.history[chain[held]].signature);
            let Some(mut state) = shard.find(old_key) else { continue };
            let mut log = std::mem::take(shard.log_mut(old_key));
            shard.remove(old_key);
            let new_key = Self::limit_key(group, base, index);
            if shard.find(new_key).is_some() {
                continue;
            }
            let current = quota.filter(|_| group.primary == Some(index)).copied().unwrap_or(group.limits[index]);
            for step in (0..=held).rev() {
                let previous = &group.history[chain[step]];
                let from = effective(&previous.limit, index);
                let to = if step == 0 { current } else { effective(&group.history[chain[step - 1]].limit, index) };
                state = to.rescale(&from, &state, &mut log, previous.changed_at.min(now));
            }
            shard.store(new_key, state, now);
            if current.uses_log() && !log.is_empty() {
                *shard.log_mut(new_key) = log;
            }
        }
    }

    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn decide_in(
        shard: &mut Shard<ShardData>,
        group: &Group,
        quota: Option<&Limit>,
        base: u64,
        now: u64,
        cost: u64,
        max_wait: u64,
        acquire: bool,
    ) -> (Outcome, Receipt) {
        let simple = if group.simple {
            // A simple group's only limit is its first rate limit: the one a quota replaces.
            let limit = quota.unwrap_or(&group.limits[0]);
            Some(Self::decide_simple(shard, limit, Self::limit_key(group, base, 0), now, cost))
        } else {
            None
        };
        match simple {
            Some(Ok(admitted)) => admitted,
            // Refused, and the caller cannot wait that long: no second evaluation.
            Some(Err(retry)) if retry > max_wait => (Outcome::refused(retry), Receipt::default()),
            _ => {
                Self::decide_group(shard, group, &group.limits_with(quota.copied()), base, now, cost, max_wait, acquire)
            }
        }
    }

    /// The hot path: one plain limit decided in place at `now`. The retry time when refused (a waiter may
    /// still reserve a later slot through `decide_group`).
    #[inline]
    fn decide_simple(
        shard: &mut Shard<ShardData>,
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
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn decide_group(
        shard: &mut Shard<ShardData>,
        group: &Group,
        limits: &[Limit],
        base: u64,
        now: u64,
        cost: u64,
        max_wait: u64,
        acquire: bool,
    ) -> (Outcome, Receipt) {
        let mut wait = 0u64;
        for _ in 0..MAX_ATTEMPTS {
            let at = now.saturating_add(wait);
            match Self::evaluate_group(shard, group, limits, base, at, cost, acquire) {
                Ok(admits) => {
                    let mut receipt = Receipt { limits: 0, at };
                    for (index, admit) in admits {
                        Self::commit(shard, &limits[index], Self::limit_key(group, base, index), now, admit);
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
        shard: &Shard<ShardData>,
        group: &Group,
        limits: &[Limit],
        base: u64,
        at: u64,
        cost: u64,
        acquire: bool,
    ) -> std::result::Result<Vec<(usize, Admit)>, u64> {
        let evaluate = |index: usize, limit: &Limit| {
            let key = Self::limit_key(group, base, index);
            limit.evaluate(&shard.load(key), shard.log(key), at, cost)
        };
        let mut admits = Vec::with_capacity(limits.len());
        if acquire {
            for (index, gate) in Group::gates(limits) {
                admits.push((index, evaluate(index, gate)?));
            }
        }
        match group.policy {
            Policy::All => {
                let mut retry = None;
                for (index, limit) in Group::rate_limits(limits) {
                    match evaluate(index, limit) {
                        Ok(admit) => admits.push((index, admit)),
                        Err(r) => retry = Some(retry.map_or(r, |w: u64| w.max(r))),
                    }
                }
                retry.map_or(Ok(admits), Err)
            }
            Policy::Fallback => {
                let mut retry = u64::MAX;
                for (index, limit) in Group::rate_limits(limits) {
                    match evaluate(index, limit) {
                        Ok(admit) => {
                            admits.push((index, admit));
                            return Ok(admits);
                        }
                        Err(r) => retry = retry.min(r),
                    }
                }
                // A group of gates only admits once they do.
                if Group::rate_limits(limits).next().is_none() {
                    return Ok(admits);
                }
                Err(retry)
            }
        }
    }

    fn commit(shard: &mut Shard<ShardData>, limit: &Limit, key: u64, now: u64, admit: Admit) {
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
    fn report(shard: &Shard<ShardData>, group: &Group, limits: &[Limit], base: u64, now: u64) -> Report {
        let only_gates = Group::rate_limits(limits).next().is_none();
        let reports =
            limits.iter().enumerate().filter(|(_, l)| l.is_concurrency() == only_gates).map(|(index, limit)| {
                let key = Self::limit_key(group, base, index);
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
}

/// A shard locked under the rules it follows, for one key.
struct Locked<'a> {
    rules: Arc<Rules>,
    shard: MutexGuard<'a, Shard<ShardData>>,
    index: usize,
    base: u64,
}

impl Limiter {
    /// Applies `change` to the states of the limits of `peer`'s group (routed from `path`) that `select`
    /// picks, and returns the shard, still locked, for the caller's counters. `None`: not limited.
    fn change(
        &self,
        peer: &str,
        path: Option<&str>,
        select: impl Fn(&Group, usize, &Limit) -> bool,
        change: impl Fn(&Limit, &State, &mut VecDeque<u64>, u64) -> State,
    ) -> Option<Locked<'_>> {
        let mut locked = self.lock(peer, |rules| match rules.router.route(peer, path) {
            Route::Group(index) => Some(index),
            _ => None,
        })?;
        let Locked { rules, shard, index, base } = &mut locked;
        let now = self.clock.now_ns();
        let group = &rules.groups[*index];
        let quota = self.quota_of(shard, rules, *index, *base, peer, now, false);
        if !group.history.is_empty() {
            Self::migrate(shard, group, quota.as_ref(), *base, now);
        }
        for (i, limit) in group.limits_with(quota).iter().enumerate() {
            if !select(group, i, limit) {
                continue;
            }
            let key = Self::limit_key(group, *base, i);
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
        Some(locked)
    }

    /// Gives back `cost` that an admission took (`receipt`), e.g. for a cancelled wait.
    pub fn refund(&self, peer: &str, path: Option<&str>, cost: u64, receipt: Receipt) {
        drop(self.change(
            peer,
            path,
            |_, i, _| receipt.limits & (1 << i) != 0,
            |limit, state, log, now| limit.refund(state, log, now, receipt.at, cost),
        ));
    }

    /// Returns the concurrency permits taken by `acquire`.
    pub fn release(&self, peer: &str, path: Option<&str>, cost: u64) {
        drop(self.change(
            peer,
            path,
            |_, _, l| l.is_concurrency(),
            |limit, state, log, now| limit.refund(state, log, now, now, cost),
        ));
    }

    /// Gives `tokens` back to the rate limits of `peer`'s group (seed 003's manual reduction).
    /// False when no group limits the path or the group disables reduction.
    pub fn reduce(&self, peer: &str, path: Option<&str>, tokens: u64) -> bool {
        let changed = self.change(
            peer,
            path,
            |group, _, l| group.reduction && !l.is_concurrency(),
            |limit, state, log, now| limit.refund(state, log, now, now, tokens),
        );
        match changed {
            Some(mut locked) if locked.rules.groups[locked.index].reduction => {
                locked.shard.data.groups[locked.index].reductions += 1;
                true
            }
            _ => false,
        }
    }

    /// Forgets the state (and quota record) of `peer` in every group, or of every peer.
    pub fn reset(&self, peer: Option<&str>) {
        let rules = self.rules.load_full();
        match peer {
            Some(peer) => {
                let peer_hash = self.hasher.hash_one(peer);
                let mut shard = self.store.lock(peer_hash);
                for group in &rules.groups {
                    let base = Self::key(peer_hash, group);
                    for i in 0..group.limits.len() {
                        shard.remove(Self::limit_key(group, base, i));
                    }
                    for previous in &group.history {
                        shard.remove(Store::<ShardData>::related_key(base, previous.signature));
                    }
                    shard.data.quotas.remove(base);
                }
            }
            None => self.store.shards().for_each(|mut s| {
                s.clear();
                s.data.quotas.clear();
            }),
        }
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The limiter's clock reading.
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    #[must_use]
    pub fn quota_settings(&self) -> &QuotaSettings {
        &self.quotas
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

    /// Approximate heap bytes of the state map and the quota records.
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        self.store.shards().map(|s| s.allocated_bytes() + s.data.quotas.allocated_bytes()).sum()
    }

    /// Counters by group, in the order of `rules().groups` (read from the same snapshot).
    #[must_use]
    pub fn stats(&self) -> (Arc<Rules>, Stats) {
        let shards: Vec<_> = self.store.shards().collect();
        let rules = self.rules.load_full();
        let mut stats = Stats { groups: vec![GroupCounters::default(); rules.groups.len()], ..Stats::default() };
        for shard in &shards {
            for (total, counters) in stats.groups.iter_mut().zip(&shard.data.groups) {
                total.add(counters);
            }
            stats.exempt += shard.data.exempt;
            stats.keys += shard.len();
            stats.evictions += shard.evictions;
            stats.quota_records += shard.data.quotas.len();
        }
        (rules, stats)
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
            rules: RulesConfig { rules, exempt_peers: vec!["admin".into()], exempt_paths: vec!["^/health".into()] },
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
        let (_, stats) = lim.stats();
        assert_eq!(
            stats.groups[0],
            GroupCounters { requests: 4, allowed: 3, refused: 1, delayed: 0, ..GroupCounters::default() }
        );
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
        assert_eq!(lim.stats().1.exempt, 10);
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
            Config {
                rules: RulesConfig {
                    rules: vec![rule("^/a", "g", "1/s"), rule("^/b", "g", "2/s")],
                    ..RulesConfig::default()
                },
                ..Config::default()
            },
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
        assert_eq!(lim.stats().1.groups[0].delayed, 2);
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
