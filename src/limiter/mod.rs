//! The limiter: routes a request to a group, finds the key's states, applies the group's limits.
//!
//! A decision runs in steps, each usable on its own (a Redis backend replaces only where state lives):
//! `resolve` (route the request, find the key and its effective limits, per-key quota included),
//! `evaluate` (what each limit says at an instant) and `commit` (write the admission). The steps live
//! in `decide`; the rest of this module holds the limiter's state and what decisions answer.
//!
//! The rules in force are held once, behind the reconfiguration lock; each shard keeps a reference to
//! the same rules, read under the shard's lock, so a decision needs no other synchronisation. See
//! `reconfigure` for how a change reaches the shards, and `quota` for per-key quotas.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::algorithm::Limit;
use crate::algorithm::{Outcome, Report};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::{Error, Loc, Result};
use crate::metrics::LatencyHistogram;
use crate::quota::{FetchQueue, QuotaSettings, QuotaTable};
use crate::rules::{GroupIds, Route, Rules};
use crate::state_map::region::layout::SharedRegion;
use crate::state_map::{StateMap, StatesIn};

mod adaptive;
mod decide;
mod mutate;
pub(crate) use mutate::no_fixed_window;
mod quotas;
mod reconfigure;
#[cfg(test)]
mod region_fuzz;
mod remote;
mod shard;
mod stats;
mod waits;

pub use crate::rules::{OwnedTarget, Target};
pub use crate::state_map::OnStall;
pub use adaptive::{AdaptiveAdmission, AdaptiveStats, Taken};
pub use decide::Resolution;
pub use quotas::ProviderAnswer;
pub use remote::{HeldKey, LimitMove, RemoteKey, Routed, Verdict};
pub(crate) use shard::{Held, Key, KeyLock, Locked};
pub use shard::{Kept, ShardData};
pub use stats::{GroupPolicy, GroupStats, Stats};

/// Which limits a decision takes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// The rate limits (concurrency permits are not taken).
    Rates,
    /// The rate limits and the concurrency permits, all or nothing; give the permits back with `release`.
    RatesAndPermits,
    /// Only the concurrency permits: the request already has its rate admission (it waited for it).
    Permits,
}

/// One request to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub cost: u64,
    /// A caller willing to wait this long reserves a later slot; 0: decide now.
    pub max_wait_ns: u64,
    /// Whether to compute what the key has left (`Decision::report`).
    pub report: bool,
    pub take: Take,
    /// Only look: what the decision would be, on the states as they are, writing and counting nothing
    /// (its report is what the key has left before the request).
    pub peek: bool,
    /// Whether a refusal is counted in the group's stats: not for an outgoing call's look at its turn,
    /// which it takes again until its turn comes (its transport counts its waits and refusals).
    pub counts_refusal: bool,
}

impl Request {
    /// A decision now, for `cost`, of the rate limits, without a report: what `allow` asks.
    #[must_use]
    pub const fn new(cost: u64) -> Self {
        Self { cost, max_wait_ns: 0, report: false, take: Take::Rates, peek: false, counts_refusal: true }
    }

    /// A look that decides nothing: see [`Request::peek`]. Reports.
    #[must_use]
    pub const fn peeking(cost: u64) -> Self {
        Self { cost, max_wait_ns: 0, report: true, take: Take::Rates, peek: true, counts_refusal: true }
    }

    #[must_use]
    pub const fn reporting(self) -> Self {
        Self { report: true, ..self }
    }

    /// A look at a turn that is taken again until it comes: see [`Request::counts_refusal`].
    #[must_use]
    pub const fn looking(self) -> Self {
        Self { counts_refusal: false, ..self }
    }

    /// Whether the decision goes in the group's stats.
    #[must_use]
    pub const fn counted(&self, allowed: bool) -> bool {
        !self.peek && (allowed || self.counts_refusal)
    }

    /// Lets the request reserve a slot up to `max_wait_ns` ahead.
    #[must_use]
    pub const fn waiting(self, max_wait_ns: u64) -> Self {
        Self { max_wait_ns, ..self }
    }

    #[must_use]
    pub const fn taking(self, take: Take) -> Self {
        Self { take, ..self }
    }
}

/// Which limits an admission wrote, and at what instant: what a refund must take back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Receipt {
    pub limits: u64,
    pub at: u64,
    /// How long after the decision the reserved slot is (0: now); a wait is counted as delayed, and in
    /// the wait histogram, unless given back.
    pub wait_ns: u64,
    /// The admission took concurrency permits, which `release` must give back.
    pub permits: bool,
    /// For an admission a remote store decided: its slot's instant on that store's clock (Redis `TIME`),
    /// which names the slot when it is given back (this process's clock is not the store's). 0 otherwise.
    pub remote_at: u64,
}

/// What refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Rate,
    /// Every concurrency permit is in use: a permit frees when a request finishes.
    Concurrency,
}

/// The full answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub route: Route,
    /// The id of the group that decided (see `Limiter::group_name`); `None` unless limited.
    pub group: Option<u32>,
    pub outcome: Outcome,
    pub refused_by: Option<Refusal>,
    /// What the key has left; `None` unless asked for, and for requests no group limits.
    pub report: Option<Report>,
    /// The clock reading the decision was made at (0 when no group limits the request).
    pub now: u64,
    pub receipt: Receipt,
}

impl Decision {
    const fn free(route: Route) -> Self {
        Self {
            route,
            group: None,
            outcome: Outcome::admitted(0),
            refused_by: None,
            report: None,
            now: 0,
            receipt: Receipt { limits: 0, at: 0, wait_ns: 0, permits: false, remote_at: 0 },
        }
    }
}

/// What came of a fetch a worker finished.
#[derive(Debug, Clone, PartialEq)]
pub enum Landing {
    /// The quota is in force; when it moved the key's state, what a remote store needs to move its own.
    Landed(Option<RemoteKey>),
    /// The fetch had been superseded (timed out, or a quota was set meanwhile): ignored.
    Late,
    /// The provider knows no such key (it raised `LookupError`): the key stays on the failsafe and asks
    /// again after the TTL, not counted as a failure.
    Unknown,
    /// Counted as a failure; `first` when it starts a run of failures (log it), `reason` when the
    /// answer itself was unusable or came too late.
    Failed { first: bool, reason: Option<String> },
}

/// The rules in force and the ids of every group name seen, under the reconfiguration lock.
#[derive(Debug)]
struct Current {
    rules: Arc<Rules>,
    ids: GroupIds,
}

#[derive(Debug)]
pub struct Limiter {
    /// The one copy of the rules in force (shards hold references to it).
    current: Mutex<Current>,
    /// Serialises reconfigurations: each reads the rules in force and replaces them in every shard.
    reconfiguring: Mutex<()>,
    states: StateMap<ShardData>,
    clock: Clock,
    hasher: ahash::RandomState,
    enabled: AtomicBool,
    quotas: QuotaSettings,
    /// Whether decisions consult quota records: a provider is set, or a quota was ever set.
    quotas_active: AtomicBool,
    fetches: Arc<FetchQueue>,
    track_usage: bool,
    /// Sampled decision latencies (one decision in `LATENCY_SAMPLE` per thread).
    latency: LatencyHistogram,
    /// What every limit must satisfy where the states live (a Redis script's exact arithmetic): checked
    /// for the rules at construction and for every limit installed later (reconfigurations, quotas).
    limit_bound: std::sync::OnceLock<LimitBound>,
    /// What decides a request whose shared shard a stopped process holds (see `state_map::STALL`).
    on_stall: OnStall,
    /// Decisions made so by this process.
    stalls: std::sync::atomic::AtomicU64,
    /// The adaptive limits' gates (see `adaptive`).
    gates: adaptive::Gates,
    /// Whether rules with an adaptive limit were ever installed.
    adaptive_seen: AtomicBool,
}

/// A check of one limit against what a store can hold.
pub type LimitBound = fn(&Limit) -> Result<()>;

impl Drop for Limiter {
    fn drop(&mut self) {
        self.fetches.close();
    }
}

impl Limiter {
    /// A limiter with `config`'s rules, deciding on `clock`, whose states live where `states` says. In a
    /// shared region (`StatesIn::Region`) every process that opens it shares them: keys hash alike (the
    /// region's seeds), group ids are the region's, and each state says what limit wrote it, so that
    /// processes with other rules for a group convert each other's states as `update_rule` does, keeping
    /// what they used.
    ///
    /// # Errors
    /// A group defined twice with different limits, a rule without limits, a bad exempt path, a
    /// failsafe that does not fit a group's limit, or `max_keys` of zero; a region made for another
    /// `max_keys`, or holding no more group names.
    pub fn new(config: Config, clock: Clock, states: StatesIn) -> Result<Self> {
        if config.max_keys == 0 {
            return Err(Error::value("max_keys", "must be at least 1, got 0"));
        }
        let (hasher, mut ids, on_stall) = match &states {
            StatesIn::Heap => (ahash::RandomState::new(), GroupIds::default(), OnStall::Allow),
            StatesIn::Region(region, on_stall) => {
                let [a, b, c, d] = region.seeds();
                (ahash::RandomState::with_seeds(a, b, c, d), Self::region_ids(region), *on_stall)
            }
        };
        let rules = Arc::new(Rules::build(config.rules, &config.quotas, 0, &hasher, &mut ids, None)?);
        let max_keys = config.max_keys;
        let shards = match &states {
            StatesIn::Heap => StateMap::<ShardData>::shard_count(max_keys),
            StatesIn::Region(region, _) => region.shards(),
        };
        let records = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let data = || ShardData::new(QuotaTable::new(Arc::clone(&records), max_keys, shards), &rules);
        // On a real clock each process's adaptive gates jitter their own way; on a manual one, a run repeats.
        let salt = if matches!(clock, Clock::Manual(_)) { 0 } else { fastrand::u64(..) };
        let gates = adaptive::Gates::new(&states, max_keys, salt);
        let states = StateMap::new(max_keys, data, states)?;
        let adaptive_seen = AtomicBool::new(rules.groups.iter().any(|g| !g.adaptive.is_empty()));
        Ok(Self {
            current: Mutex::new(Current { rules, ids }),
            reconfiguring: Mutex::new(()),
            states,
            clock,
            hasher,
            enabled: AtomicBool::new(true),
            quotas: config.quotas,
            quotas_active: AtomicBool::new(config.quotas.provider),
            fetches: Arc::new(FetchQueue::new(config.quotas.queue_capacity)),
            track_usage: config.track_usage,
            latency: LatencyHistogram::default(),
            limit_bound: std::sync::OnceLock::new(),
            on_stall,
            stalls: std::sync::atomic::AtomicU64::new(0),
            gates,
            adaptive_seen,
        })
    }

    /// Group ids and seeds given by `region`.
    fn region_ids(region: &Arc<SharedRegion>) -> GroupIds {
        let (registry, defs) = (Arc::clone(region), Arc::clone(region));
        GroupIds::registered(Arc::new(move |name| registry.group_id(name)), Arc::new(move |limit| defs.def_id(limit)))
    }

    /// Holds every limit, now and installed later, to `bound` (once; a second bound is ignored).
    ///
    /// # Errors
    /// A limit of the rules in force that `bound` refuses, located at its group.
    pub fn bound_limits(&self, bound: LimitBound) -> Result<()> {
        Self::check_limits(&self.rules(), bound)?;
        // Only the first bound counts: a limiter's store is chosen once, at construction.
        let _ = self.limit_bound.set(bound);
        Ok(())
    }

    /// Every limit of `rules` (failsafes too) against `bound`, an error located at its group.
    fn check_limits(rules: &Rules, bound: LimitBound) -> Result<()> {
        for group in &rules.groups {
            let place = |e: Error, last: Loc| {
                let mut loc =
                    vec![Loc::Key("rules".into()), Loc::Key(group.name.clone()), Loc::Key("limits".into()), last];
                loc.extend(e.loc.iter().cloned());
                Error { loc, ..e }
            };
            for (i, limit) in group.limits.iter().enumerate() {
                bound(limit).map_err(|e| place(e, Loc::Index(i)))?;
            }
            if let Some(failsafe) = &group.failsafe {
                bound(failsafe).map_err(|e| e.within("failsafe"))?;
            }
        }
        Ok(())
    }

    /// `limit` against the store's bound, if any.
    fn check_bound(&self, limit: &Limit) -> Result<()> {
        self.limit_bound.get().map_or(Ok(()), |bound| bound(limit))
    }

    /// The base key of (peer, group) from the peer's hash: its quota record's key; its states use
    /// related keys. Every key of a peer lives in the shard of the peer's hash.
    #[inline]
    fn key(peer_hash: u64, seed: u64) -> u64 {
        // A bijection of peer_hash ^ seed: distinct (peer, group) pairs keep distinct keys.
        let mixed = (peer_hash ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        mixed ^ (mixed >> 29)
    }

    /// The rules in force.
    #[must_use]
    pub fn rules(&self) -> Arc<Rules> {
        Arc::clone(&self.current.lock().rules)
    }

    /// The name of the group with id `id` (ids stay with their name for the limiter's life).
    #[must_use]
    pub fn group_name(&self, id: u32) -> Option<String> {
        self.current.lock().ids.name(id).map(str::to_owned)
    }

    /// As `lock_peer`, for a decision: `None` when a stopped process holds the peer's shared shard.
    #[inline]
    fn lock_peer_deciding(&self, peer: &str) -> Option<Locked<'_>> {
        let peer_hash = self.hasher.hash_one(peer);
        let shard = self.states.lock_deciding(peer_hash)?;
        Some(Locked::new(shard, peer_hash, || self.rules()))
    }

    /// The shard of `peer`, locked, with the rules it follows.
    #[inline]
    fn lock_peer(&self, peer: &str) -> Locked<'_> {
        let peer_hash = self.hasher.hash_one(peer);
        let shard = self.states.lock(peer_hash);
        Locked::new(shard, peer_hash, || self.rules())
    }

    /// The key of `peer` in the group `target` names or routes to, its shard locked; `Ok(None)`: the
    /// request is exempt or not limited.
    ///
    /// # Errors
    /// An unknown group name.
    fn lock_key(&self, peer: &str, target: Target<'_>) -> Result<Option<KeyLock<'_>>> {
        let locked = self.lock_peer(peer);
        match locked.rules().route(peer, target)? {
            Route::Group(index) => Ok(Some(locked.into_key(index))),
            Route::Exempt(_) | Route::Unlimited => Ok(None),
        }
    }

    /// The key of `peer` in the group named `group`, its shard locked, exemptions ignored.
    fn lock_group(&self, peer: &str, group: &str) -> Result<KeyLock<'_>> {
        let locked = self.lock_peer(peer);
        let index = locked.rules().group_index(group)?;
        Ok(locked.into_key(index))
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

    /// The time of a limiter on a `ManualClock`, which a remote store then decides at; `None` on the
    /// monotonic clock (the store's own clock decides).
    #[must_use]
    pub fn manual_now(&self) -> Option<u64> {
        match &self.clock {
            Clock::Manual(clock) => Some(clock.now_ns()),
            Clock::Monotonic { .. } | Clock::Machine | Clock::Region(_) => None,
        }
    }

    #[must_use]
    pub fn quota_settings(&self) -> &QuotaSettings {
        &self.quotas
    }

    #[must_use]
    pub fn tracks_usage(&self) -> bool {
        self.track_usage
    }

    /// Tracked states (one per key and limit).
    #[must_use]
    pub fn len(&self) -> usize {
        self.states.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    #[must_use]
    pub fn max_keys(&self) -> usize {
        self.states.max_keys()
    }

    /// Approximate heap bytes of the state map and the quota records.
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        self.states
            .shards()
            .map(|s| s.allocated_bytes() + s.data.quotas.allocated_bytes() + s.data.sketch_bytes())
            .sum()
    }
}

#[cfg(test)]
pub(crate) mod tests;
