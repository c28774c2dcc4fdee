//! The decision pipeline: resolve the key, evaluate its limits at an instant, commit the admission.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::shard::{Held, Key, Pending};
use super::{Decision, Limiter, Receipt, Refusal, Request, Take, Target};
use crate::algorithm::{Admit, Algorithm, Limit, Log, Outcome, Report, State, NO_LOG};
use crate::config::Policy;
use crate::error::Result;
use crate::metrics::{sample_latency, LatencyBuckets};
use crate::rules::{Group, Route};
use crate::state_map::{Owner, Shard};

use super::ShardData;

/// Waiting decisions retry at the reported time; several limits may each push it further.
const MAX_ATTEMPTS: usize = 8;

/// Where a request goes and what limits it: the first step of a decision, for a backend that keeps
/// state elsewhere.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub group: String,
    pub id: u32,
    /// The group's limits for this key: its quota, if any, replaces the first rate limit.
    pub limits: Vec<Limit>,
    pub policy: Policy,
    /// The key of (peer, group) in this process (its hash is seeded per process).
    pub key: u64,
}

/// What refused an evaluation, and when to retry (after the instant evaluated; `u64::MAX`: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub retry_ns: u64,
    pub by: Refusal,
}

/// One key's states at one instant: what the steps work on, its shard locked.
pub struct KeyStates<'k> {
    pub shard: &'k mut Shard<ShardData>,
    pub group: &'k Group,
    pub base: u64,
    pub now: u64,
}

/// What the in-memory limits judged of one request (the backend's counterpart: `remote::Verdict`).
struct Judgement {
    outcome: Outcome,
    receipt: Receipt,
    refused_by: Option<Refusal>,
}

impl Judgement {
    const fn refused(retry_ns: u64, by: Refusal) -> Self {
        Self {
            outcome: Outcome::refused(retry_ns),
            receipt: Receipt { limits: 0, at: 0, wait_ns: 0, permits: false, remote_at: 0 },
            refused_by: Some(by),
        }
    }
}

impl Limiter {
    /// Decides one request for `peer`. A refusal changes no state.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn decide(&self, peer: &str, target: Target<'_>, request: Request) -> Result<Decision> {
        match target {
            Target::Path(path) => Ok(self.decide_path(peer, path, request)),
            Target::Group(_) => {
                if !self.enabled.load(Ordering::Relaxed) {
                    return Ok(Decision::free(Route::Unlimited));
                }
                let started = sample_latency().then(Instant::now);
                let now = self.clock.now_ns();
                self.watch_region(now);
                let Some(mut locked) = self.lock_peer_deciding(peer) else {
                    let rules = self.rules();
                    return Ok(self.stalled(rules.route(peer, target)?, &rules));
                };
                let route = locked.rules().route(peer, target)?;
                let decision = self.decide_route(&mut locked.held(), route, peer, now, request);
                drop(locked);
                if let Some(started) = started {
                    self.record_latency(started);
                }
                Ok(decision)
            }
        }
    }

    /// Decides one request for `peer` routed by its `path`: the hot path, which cannot fail (and so
    /// returns its decision without a `Result` to copy it into).
    #[inline]
    pub fn decide_path(&self, peer: &str, path: Option<&str>, request: Request) -> Decision {
        if !self.enabled.load(Ordering::Relaxed) {
            return Decision::free(Route::Unlimited);
        }
        // Timed as `decide` times a group's decision, by hand: through a shared closure this path
        // measured 3-5 ns slower.
        let started = sample_latency().then(Instant::now);
        let peer_hash = self.hasher.hash_one(peer);
        self.states.prefetch(peer_hash);
        let now = self.clock.now_ns();
        self.watch_region(now);
        let Some(mut shard) = self.states.lock_deciding(peer_hash) else {
            let rules = self.rules();
            return self.stalled(rules.router.route(peer, path), &rules);
        };
        // As `Locked` does, by hand: taken out (no reference count touched) and put back. After a
        // panic between the two, the next lock of the shard takes the limiter's copy.
        let rules = shard.data.rules.take().unwrap_or_else(|| self.rules());
        let route = rules.router.route(peer, path);
        let decision =
            self.decide_route(&mut Held { shard: &mut shard, rules: &rules, peer_hash }, route, peer, now, request);
        shard.data.rules = Some(rules);
        drop(shard);
        if let Some(started) = started {
            self.record_latency(started);
        }
        decision
    }

    /// The decision of a request whose shared shard a stopped process holds: its `on_stall`'s, without
    /// its states (nothing is written, nothing to give back).
    #[cold]
    fn stalled(&self, route: Route, rules: &crate::rules::Rules) -> Decision {
        let Route::Group(index) = route else { return Decision::free(route) };
        self.stalls.fetch_add(1, Ordering::Relaxed);
        let outcome = match self.on_stall {
            super::OnStall::Allow => Outcome::admitted(0),
            #[allow(clippy::cast_possible_truncation)] // 50 ms
            super::OnStall::Deny => Outcome::refused(crate::state_map::STALL.as_nanos() as u64),
        };
        Decision {
            group: Some(rules.groups[index].id),
            refused_by: (!outcome.allowed).then_some(Refusal::Rate),
            outcome,
            ..Decision::free(route)
        }
    }

    /// Decisions this process made without their states, a stopped process holding their shared shard.
    #[must_use]
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    #[cold]
    fn record_latency(&self, started: Instant) {
        self.latency.record(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }

    /// The sampled decision latencies: one decision in `LATENCY_SAMPLE` per thread, from before its
    /// shard is locked to after it is unlocked.
    #[must_use]
    pub fn latency(&self) -> LatencyBuckets {
        self.latency.snapshot()
    }

    // Always: as a call of its own it measured 6 ns slower per decision from Python.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub(super) fn decide_route(
        &self,
        held: &mut Held<'_>,
        route: Route,
        peer: &str,
        now: u64,
        request: Request,
    ) -> Decision {
        match route {
            Route::Group(index) => {
                let key = held.key(index);
                self.decide_key(held, key, peer, now, request)
            }
            Route::Exempt(group) => {
                match group.map(|index| held.rules.groups[index].id) {
                    Some(id) => held.shard.data.counters(id).exempt += 1,
                    None => held.shard.data.exempt += 1,
                }
                Decision::free(route)
            }
            Route::Unlimited => Decision::free(route),
        }
    }

    /// The decision for one key, its shard locked.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn decide_key(&self, held: &mut Held<'_>, key: Key, peer: &str, now: u64, request: Request) -> Decision {
        let quota = self.quota_of(held, key, now, Some(peer));
        let (index, base, peer_hash) = (key.index, key.base, held.peer_hash);
        let (_, group, shard) = held.key_parts(key);
        let mut states = KeyStates { shard, group, base, now };
        let judgement = states.decide(quota.as_ref(), request);
        if request.counted(judgement.outcome.allowed) {
            states.shard.count_shared(judgement.outcome.allowed, peer, peer_hash);
            let data = &mut states.shard.data;
            if request.take == Take::Permits {
                data.record_permits(group.id, peer, peer_hash, judgement.outcome.allowed);
            } else {
                data.record_decision(group.id, peer, peer_hash, judgement.outcome.allowed, judgement.receipt.wait_ns);
            }
        }
        let data = &mut states.shard.data;
        if self.track_usage && judgement.outcome.allowed && request.take != Take::Permits && !request.peek {
            let pending =
                data.pending.entry(base).or_insert_with(|| Pending { peer: peer.into(), group: group.id, units: 0 });
            pending.units = pending.units.saturating_add(request.cost);
        }
        let report = request.report.then(|| states.report(&group.limits_with(quota), judgement.refused_by));
        Decision {
            route: Route::Group(index),
            group: Some(group.id),
            outcome: judgement.outcome,
            refused_by: judgement.refused_by,
            report,
            now,
            receipt: judgement.receipt,
        }
    }

    /// The name of the group the rules route `path` of `peer` to, as `resolve` would name it, without
    /// locking the key (the outgoing transports route every call): `None` when the request is exempt,
    /// routed nowhere, or the limiter is off.
    #[must_use]
    pub fn routed_group(&self, peer: &str, path: Option<&str>) -> Option<String> {
        if !self.enabled() {
            return None;
        }
        let rules = self.rules();
        match rules.router.route(peer, path) {
            Route::Group(index) => rules.groups.get(index).map(|g| g.name.clone()),
            Route::Exempt(_) | Route::Unlimited => None,
        }
    }

    /// Where `peer`'s request goes and what limits it (its quota applied; a key new to a provider's
    /// quotas queues its fetch). `None`: exempt, not limited, or the limiter is off.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn resolve(&self, peer: &str, target: Target<'_>) -> Result<Option<Resolution>> {
        if !self.enabled() {
            return Ok(None);
        }
        let Some(mut key) = self.lock_key(peer, target)? else { return Ok(None) };
        let quota = self.quota_of(&mut key.locked.held(), key.key, self.clock.now_ns(), Some(peer));
        let group = key.group();
        Ok(Some(Resolution {
            group: group.name.clone(),
            id: group.id,
            limits: group.limits_with(quota).into_owned(),
            policy: group.policy,
            key: key.base(),
        }))
    }
}

impl KeyStates<'_> {
    #[inline]
    fn limit_key(&self, index: usize) -> u64 {
        self.group.limit_key(self.base, index)
    }

    /// Decides `request` under the group's limits, `quota` replacing the first rate limit.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn decide(&mut self, quota: Option<&Limit>, request: Request) -> Judgement {
        // While a wait is ahead in this shard every admission is recorded (see `waits`): not in place.
        let simple = self.group.simple
            && request.take != Take::Permits
            && !request.peek
            && !self.shard.data.waits.ahead(self.now);
        // A simple group's one limit is reconciled by `decide_simple` in its own lookup.
        if self.shard.in_region() && !simple {
            self.reconcile(&self.group.limits_with(quota.copied()));
        }
        if request.peek {
            return self.peek(&self.group.limits_with(quota.copied()), request);
        }
        if simple {
            // A simple group's only limit is its first rate limit: the one a quota replaces.
            let limit = quota.unwrap_or(&self.group.limits[0]);
            match self.decide_simple(limit, request.cost) {
                Ok(()) => {
                    let receipt = Receipt { limits: 1, at: self.now, wait_ns: 0, permits: false, remote_at: 0 };
                    return Judgement { outcome: Outcome::admitted(0), receipt, refused_by: None };
                }
                // Refused, and the caller cannot wait that long: no second evaluation.
                Err(retry) if retry > request.max_wait_ns => return Judgement::refused(retry, Refusal::Rate),
                Err(_) => {}
            }
        }
        let group = self.group;
        self.decide_group(&group.limits_with(quota.copied()), request)
    }

    /// What `request` would be told now, the states left as they are.
    #[cold]
    fn peek(&self, limits: &[Limit], request: Request) -> Judgement {
        match self.evaluate(limits, self.now, request.cost, request.take) {
            Ok(_) => Judgement {
                outcome: Outcome::admitted(0),
                receipt: Receipt { limits: 0, at: self.now, wait_ns: 0, permits: false, remote_at: 0 },
                refused_by: None,
            },
            Err(refused) => Judgement::refused(refused.retry_ns, refused.by),
        }
    }

    /// Makes each limit's state one written under that limit (a shared region's states may have been
    /// written by a process with other rules: see `Shard::reconcile`).
    #[inline(never)]
    pub fn reconcile(&mut self, limits: &[Limit]) {
        for (index, limit) in limits.iter().enumerate() {
            let key = self.limit_key(index);
            if let Some(moved) = self.shard.reconcile(key, (limit, 0), self.now) {
                self.shard.data.waits.moved(key, limit, moved, self.now);
            }
        }
    }

    /// The hot path: one plain limit decided in place at `now`. The retry time when refused (a waiter may
    /// still reserve a later slot through `decide_group`).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn decide_simple(&mut self, limit: &Limit, cost: u64) -> std::result::Result<(), u64> {
        let key = self.limit_key(0);
        let simple = |admit| match admit {
            Admit::State(admitted) => admitted,
            Admit::Log { .. } => unreachable!("a simple group has no sliding log"),
        };
        let now = self.now;
        // The group's own limit has its region id at hand; a quota's is looked up.
        let def = if std::ptr::eq(limit, self.group.limits.as_ptr()) { self.group.first_def } else { 0 };
        // One lookup: the state, converted first if another limit wrote it (a shared region). No wait
        // is ahead here (else the decision is not simple): nothing to tell the ledgers.
        let decide = |state: &State| limit.evaluate(state, &NO_LOG, now, cost).map(simple);
        if let Some(decided) = self.shard.update_under(key, (limit, def), now, decide) {
            return decided;
        }
        let admitted = simple(limit.evaluate(&State::default(), &NO_LOG, now, cost)?);
        self.shard.insert(key, admitted, now, (Owner::new(self.group.id, 0), limit));
        Ok(())
    }

    /// Every limit the request takes, at `now`, or for a waiter at the first instant all admit.
    #[inline(never)]
    fn decide_group(&mut self, limits: &[Limit], request: Request) -> Judgement {
        let judgement = self.decide_group_at(limits, request);
        if !judgement.outcome.allowed {
            // A refusal writes nothing, but it is a use of the key (an admission counts through its
            // write): a key refused again and again is busy, and must not be evicted as least used.
            for index in 0..limits.len() {
                self.shard.touch(self.limit_key(index));
            }
        }
        judgement
    }

    fn decide_group_at(&mut self, limits: &[Limit], request: Request) -> Judgement {
        let mut wait = 0u64;
        for _ in 0..MAX_ATTEMPTS {
            let at = self.now.saturating_add(wait);
            match self.evaluate(limits, at, request.cost, request.take) {
                // A permit a shared region could not record (every lease in use) is refused, as a full
                // gate refuses: granted unrecorded, its holder's death would never give it back.
                Ok(admits) if !self.leases_reserved(limits, &admits) => {
                    return Judgement::refused(0, Refusal::Concurrency);
                }
                Ok(admits) => {
                    let mut receipt = self.commit(limits, &admits, (at, request.cost));
                    receipt.wait_ns = wait;
                    return Judgement { outcome: Outcome::admitted(wait), receipt, refused_by: None };
                }
                // Permits held by processes that died (a shared region): given back, then decided again.
                Err(refused) if refused.by == Refusal::Concurrency && self.reclaim_permits(limits) => {}
                // Never (cost above a burst), or a concurrency gate: waiting does not help.
                Err(refused) if refused.retry_ns == u64::MAX || refused.by == Refusal::Concurrency => {
                    return Judgement::refused(refused.retry_ns, refused.by);
                }
                Err(refused) => {
                    let total = wait.saturating_add(refused.retry_ns);
                    if total > request.max_wait_ns {
                        return Judgement::refused(total, Refusal::Rate);
                    }
                    wait = total;
                }
            }
        }
        Judgement::refused(wait, Refusal::Rate)
    }

    /// Whether the permits `admits` takes can be recorded (see `Shard::reserve_lease`).
    fn leases_reserved(&mut self, limits: &[Limit], admits: &[(usize, Admit)]) -> bool {
        admits
            .iter()
            .filter(|&&(index, _)| limits[index].is_concurrency())
            .all(|&(index, _)| self.shard.reserve_lease(self.limit_key(index)))
    }

    /// Gives back the permits of the key's gates that ended processes held; whether there were any.
    #[cold]
    fn reclaim_permits(&mut self, limits: &[Limit]) -> bool {
        let mut reclaimed = false;
        for (index, gate) in Group::gates(limits) {
            let key = self.limit_key(index);
            let freed = self.shard.take_dead_leases(key);
            if freed > 0 {
                let state = gate.refund(&self.shard.load(key), &mut Log::new(), self.now, self.now, freed);
                self.shard.store(key, state, self.now, (Owner::new(self.group.id, index), gate));
                reclaimed = true;
            }
        }
        reclaimed
    }

    /// The admissions of the limits `take` names at `at`, or what refused and when to retry.
    ///
    /// # Errors
    /// The refusal: a concurrency gate (retry 0), or a rate limit (retry after `at`).
    pub fn evaluate(
        &self,
        limits: &[Limit],
        at: u64,
        cost: u64,
        take: Take,
    ) -> std::result::Result<Vec<(usize, Admit)>, Refused> {
        let evaluate = |index: usize, limit: &Limit| {
            let key = self.limit_key(index);
            limit.evaluate(&self.shard.load(key), &self.shard.log(key), at, cost)
        };
        let mut admits = Vec::with_capacity(limits.len());
        if take != Take::Rates {
            for (index, gate) in Group::gates(limits) {
                let admit = evaluate(index, gate).map_err(|retry_ns| Refused { retry_ns, by: Refusal::Concurrency })?;
                admits.push((index, admit));
            }
            if take == Take::Permits {
                return Ok(admits);
            }
        }
        let rate = |retry_ns| Refused { retry_ns, by: Refusal::Rate };
        match self.group.policy {
            Policy::All => {
                let mut retry = None;
                for (index, limit) in Group::rate_limits(limits) {
                    match evaluate(index, limit) {
                        Ok(admit) => admits.push((index, admit)),
                        Err(r) => retry = Some(retry.map_or(r, |w: u64| w.max(r))),
                    }
                }
                retry.map_or(Ok(admits), |r| Err(rate(r)))
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
                Err(rate(retry))
            }
        }
    }

    /// Writes `admits` (from `evaluate` of `cost` at `at`); the receipt says what a refund must take back.
    pub fn commit(&mut self, limits: &[Limit], admits: &[(usize, Admit)], (at, cost): (u64, u64)) -> Receipt {
        let mut receipt = Receipt { limits: 0, at, wait_ns: 0, permits: false, remote_at: 0 };
        let recorded = at > self.now || self.shard.data.waits.ahead(self.now);
        for &(index, admit) in admits {
            let key = self.limit_key(index);
            // Permits held before, to record what this admission took (see `Shard::lease`).
            let held = if limits[index].is_concurrency() { self.shard.find(key).map_or(0, |s| s.a) } else { 0 };
            match (admit, &limits[index].algorithm) {
                (Admit::State(state), _) => {
                    // `record` itself passes over permits and logs, which keep no ledger.
                    if recorded {
                        let before = self.shard.load(key);
                        self.shard.data.waits.record(key, &limits[index], (before, state), (at, cost), self.now);
                    }
                    self.shard.store(key, state, self.now, (Owner::new(self.group.id, index), &limits[index]));
                }
                (Admit::Log { at, cost, idle_at }, Algorithm::SlidingLog(log)) => {
                    let owner = (Owner::new(self.group.id, index), &limits[index]);
                    self.shard.store(key, State { t: idle_at, a: 0, b: 0 }, self.now, owner);
                    self.shard.with_log(key, |stamps| log.append(stamps, self.now, at, cost));
                }
                (Admit::Log { .. }, _) => unreachable!("only a sliding log admits into a log"),
            }
            receipt.limits |= 1 << index;
            if limits[index].is_concurrency() {
                receipt.permits = true;
                self.shard.lease(key, i64::from(self.shard.load(key).a) - i64::from(held));
            }
        }
        receipt
    }

    /// What the key has left under the group's rate limits: the tightest under `all`, the sum under
    /// `fallback`; its free permits when a gate refused it or it has no rate limit.
    #[inline]
    pub fn report(&self, limits: &[Limit], refused_by: Option<Refusal>) -> Report {
        let gates = refused_by == Some(Refusal::Concurrency) || Group::rate_limits(limits).next().is_none();
        let reports = limits.iter().enumerate().filter(|(_, l)| l.is_concurrency() == gates).map(|(index, limit)| {
            let key = self.limit_key(index);
            limit.report(&self.shard.load(key), &self.shard.log(key), self.now)
        });
        combine_reports(reports, self.group.policy)
    }
}

/// One report of several limits' reports: the tightest under `all`, the sum under `fallback`.
pub fn combine_reports(reports: impl Iterator<Item = Report>, policy: Policy) -> Report {
    let mut combined: Option<Report> = None;
    for r in reports {
        combined = Some(match (combined, policy) {
            (None, _) => r,
            (Some(c), Policy::All) => {
                let tightest = if r.remaining < c.remaining { r } else { c };
                Report { reset_after_ns: c.reset_after_ns.max(r.reset_after_ns), ..tightest }
            }
            (Some(c), Policy::Fallback) => Report {
                limit: c.limit + r.limit,
                remaining: c.remaining + r.remaining,
                reset_after_ns: c.reset_after_ns.max(r.reset_after_ns),
                window_ns: c.window_ns.max(r.window_ns),
                next_ns: c.next_ns.min(r.next_ns),
            },
        });
    }
    combined.unwrap_or(Report { limit: 0, remaining: 0, reset_after_ns: 0, window_ns: None, next_ns: 0 })
}
