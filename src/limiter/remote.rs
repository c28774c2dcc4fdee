//! Decisions whose states live elsewhere (the Redis backend): the limiter routes the request and finds
//! its limits here, the backend decides, and the verdict is counted here. No lock is held while the
//! backend answers.

use super::shard::{Kept, KeyLock, ShardData};
use super::{Decision, Limiter, Receipt, Refusal, Request, Take, Target};
use crate::algorithm::{Limit, Outcome, Report};
use crate::config::Policy;
use crate::error::Result;
use crate::limiter::decide::combine_reports;
use crate::quota::QuotaSlot;
use crate::rate::Rate;
use crate::rules::{Group, Route, Rules};

/// Where a request goes, for a backend to decide.
#[derive(Debug, Clone, PartialEq)]
pub enum Routed {
    /// Exempt, unrouted, or the limiter is off: decided here (an exemption is counted).
    Free(Decision),
    /// Limited by a group: the backend decides.
    Limited(RemoteKey),
}

/// What a backend needs to decide one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteKey {
    pub group: String,
    pub id: u32,
    /// The group's index in the rules in force (the decision's route).
    pub index: usize,
    /// The group's limits for this key: its quota, if any, replaces the first rate limit.
    pub limits: Vec<Limit>,
    pub policy: Policy,
    /// Whether the group lets `reduce` give tokens back.
    pub reduction: bool,
    /// The moves of this key's states that memory made since its limits changed, oldest first: the
    /// store replays those its states have not seen (see `LimitMove`).
    pub moves: Vec<LimitMove>,
    /// Orders the moves: a state written now has seen every move up to this.
    pub head: u64,
}

/// A move of one limit's state from one limit to another at an instant, as memory makes it (a
/// reconfiguration moves every state at once, a quota its key's): what the key used under `from` at
/// `at` carried over to `to`. A remote store replays the moves a state has not seen, in order, so that
/// its decisions are memory's.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitMove {
    pub index: usize,
    /// Orders moves: `Limiter::head` of the rules that made it (a quota's: one more).
    pub seq: u64,
    /// On the limiter's clock.
    pub at: u64,
    pub from: Limit,
    /// `None`: the limit is gone, or became a concurrency limit: the state goes.
    pub to: Option<Limit>,
}

/// The order of the moves of rules `version`; a quota move made under it is one more.
const fn head(version: u64) -> u64 {
    version << 32
}

/// A key as `Limiter::decide_held` shows it to what decides from a lease.
#[derive(Debug, Clone, Copy)]
pub struct HeldKey<'a> {
    pub id: u32,
    /// The peer's hash (the limiter's): what the store keeps for the key is found by it.
    pub peer_hash: u64,
    pub policy: Policy,
    /// The group's limits for this key: its quota, if any, replaces the first rate limit.
    pub limits: &'a [Limit],
    /// The limiter's clock.
    pub now: u64,
}

/// What a decision needs of its key: where it routed, and its limits.
#[derive(Debug, Clone, Copy)]
struct KeyShape<'a> {
    index: usize,
    id: u32,
    limits: &'a [Limit],
    policy: Policy,
    /// The clock's reading the verdict was made at here (from a lease), which the decision keeps; `None`:
    /// the backend decided, and the clock is read when its reply landed.
    decided_at: Option<u64>,
}

/// A backend's verdict on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// For an admission: how long the caller must wait (a reserved later slot).
    pub wait_ns: u64,
    /// For a refusal: when the same request would be admitted (`u64::MAX`: never).
    pub retry_ns: u64,
    /// The instant it was decided at, on the backend's clock (Redis `TIME`, or the time it was given).
    pub now: u64,
    /// The limits the admission was written to, a bit each (what giving it back must undo).
    pub written: u64,
    /// What refused it (`None` when admitted).
    pub refused_by: Option<Refusal>,
}

impl Limiter {
    /// Each group's horizon: how long a state written now may constrain its decisions (the longest
    /// of its rate limits'), by group name.
    #[must_use]
    pub fn group_horizons(&self) -> std::collections::HashMap<String, u64> {
        self.rules()
            .groups
            .iter()
            .map(|g| {
                (
                    g.name.clone(),
                    g.limits.iter().filter(|l| !l.is_concurrency()).map(Limit::horizon_ns).max().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Routes `peer`'s request: decided here when nothing limits it, else what a backend needs.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn route_remote(&self, peer: &str, target: Target<'_>) -> Result<Routed> {
        self.decide_held(peer, target, Request::new(1), |_, _| None)
    }

    /// Runs `f` on what the store keeps in `peer`'s shard, with the peer's hash, under the shard's lock.
    pub fn with_kept<R>(&self, peer: &str, f: impl FnOnce(&mut Kept, u64) -> R) -> R {
        let mut locked = self.lock_peer(peer);
        let peer_hash = locked.peer_hash;
        f(&mut locked.shard.data.kept, peer_hash)
    }

    /// Runs `f` on what the store keeps in each shard, one shard locked at a time.
    pub fn each_kept(&self, mut f: impl FnMut(&mut Kept)) {
        for mut shard in self.states.shards() {
            f(&mut shard.data.kept);
        }
    }

    /// Routes `peer`'s request and, under the peer's lock, lets `held` decide it from what this process
    /// holds (lease mode): `held` sees the group's id, policy and limits (its quota in place), the peer's
    /// hash and the clock, and what the store keeps in the peer's shard; it gives the verdict and, when
    /// asked, the reports; the decision is then counted as a backend's is. When `held` cannot decide,
    /// what the backend needs to.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn decide_held(
        &self,
        peer: &str,
        target: Target<'_>,
        request: Request,
        held: impl FnOnce(HeldKey<'_>, &mut Kept) -> Option<(Verdict, Option<Vec<Report>>)>,
    ) -> Result<Routed> {
        if !self.enabled() {
            return Ok(Routed::Free(Decision::free(Route::Unlimited)));
        }
        let now = self.clock.now_ns();
        let mut locked = self.lock_peer(peer);
        let route = locked.rules().route(peer, target)?;
        let Route::Group(index) = route else {
            // Counted as exempt the way a local decision counts it.
            return Ok(Routed::Free(self.decide_route(&mut locked.held(), route, peer, now, request)));
        };
        let mut key = locked.into_key(index);
        let quota = self.quota_of(&mut key.locked.held(), key.key, now, Some(peer));
        let peer_hash = key.locked.peer_hash;
        let (_, group, shard) = key.parts();
        let limits = group.limits_with(quota);
        let view = HeldKey { id: group.id, peer_hash, policy: group.policy, limits: &limits, now };
        let Some((verdict, reports)) = held(view, &mut shard.data.kept) else {
            drop(limits);
            return Ok(Routed::Limited(Self::remote_key(&mut key, quota)));
        };
        let id = group.id;
        Self::count_remote(&mut shard.data, id, peer, peer_hash, verdict, request);
        let shape = KeyShape { index, id, limits: &limits, policy: group.policy, decided_at: Some(now) };
        Ok(Routed::Free(self.remote_decision(shape, verdict, reports, request)))
    }

    /// What a remote store needs to decide for `key`, under `quota`.
    pub(super) fn remote_key(key: &mut KeyLock<'_>, quota: Option<Limit>) -> RemoteKey {
        let base = key.base();
        let index = key.key.index;
        let (rules, group, shard) = key.parts();
        RemoteKey {
            group: group.name.clone(),
            id: group.id,
            index,
            limits: group.limits_with(quota).into_owned(),
            policy: group.policy,
            reduction: group.reduction,
            moves: Self::key_moves(rules, group, shard.data.quotas.get(base)),
            head: head(rules.version()),
        }
    }

    /// The moves of a key of `group` (whose quota record is `record`) that memory made at the
    /// reconfigurations `rules` remembers: as `move_state` makes them, through the key's quota.
    fn key_moves(rules: &Rules, group: &Group, record: Option<&QuotaSlot>) -> Vec<LimitMove> {
        let mut moves = Vec::new();
        // The moves of the group's name: of its earlier lives too, each ending in its removal (added back,
        // a group starts empty), so that a state of an earlier life is moved through them to its end.
        // Those before the key's last change of quota went with it (`QuotaSlot::moves_sent`).
        let sent = record.map_or(0, |r| r.moves_sent);
        for m in rules.moves.iter().filter(|m| m.new.id == group.id && (record.is_none() || m.new_version > sent)) {
            // Concurrency permits are not moved: a remote store keeps them apart from rate states.
            let effective = |g: &Group, version: u64, i: usize| {
                Self::key_limit(g, version, i, record).filter(|l| !l.is_concurrency())
            };
            for i in 0..m.old.limits.len() {
                let Some(from) = effective(&m.old, m.old_version, i) else { continue };
                let to = if m.gone { None } else { effective(&m.new, m.new_version, i) };
                if to != Some(from) {
                    moves.push(LimitMove { index: i, seq: head(m.new_version), at: m.at, from, to });
                }
            }
        }
        moves
    }

    /// Sets `peer`'s quota in `group` as [`Limiter::set_quota`] does; what a remote store needs to move
    /// the key's states as memory has (the moves so far, and the quota's when its limit changed).
    ///
    /// # Errors
    /// As [`Limiter::set_quota`].
    pub fn set_quota_moving(&self, peer: &str, group: &str, rate: Option<Rate>) -> Result<Option<RemoteKey>> {
        let mut key = self.lock_group(peer, group)?;
        let before = Self::quota_now(&mut key);
        let remote = Self::remote_key(&mut key, before);
        let moved = self.set_quota_locked(&mut key, rate)?;
        Ok(Self::quota_changed(remote, moved, self.clock.now_ns()))
    }

    /// What a remote store must do when a key's quota changed: replay the moves computed with the old
    /// record (later calls compute them with the new one and skip these), then the quota's own move.
    pub(super) fn quota_changed(mut remote: RemoteKey, moved: Option<(Limit, Limit)>, at: u64) -> Option<RemoteKey> {
        // The quota replaces the first rate limit.
        let primary = remote.limits.iter().position(|l| !l.is_concurrency());
        if let (Some((from, to)), Some(index)) = (moved, primary) {
            remote.limits[index] = to;
            remote.moves.push(LimitMove { index, seq: remote.head + 1, at, from, to: Some(to) });
        }
        (!remote.moves.is_empty()).then_some(remote)
    }

    /// Counts a reduction the backend made for `peer` in `key`'s group.
    pub fn record_reduction(&self, peer: &str, key: &RemoteKey) {
        self.lock_peer(peer).held().shard.data.counters(key.id).reductions += 1;
    }

    /// The decision a backend's `verdict` makes, counted in the group's stats. `reports`: what each
    /// limit has left after it, when asked for.
    pub fn record_remote(
        &self,
        peer: &str,
        key: &RemoteKey,
        verdict: Verdict,
        reports: Option<Vec<Report>>,
        request: Request,
    ) -> Decision {
        if !request.peek {
            let mut locked = self.lock_peer(peer);
            let peer_hash = locked.peer_hash;
            Self::count_remote(&mut locked.held().shard.data, key.id, peer, peer_hash, verdict, request);
        }
        let shape =
            KeyShape { index: key.index, id: key.id, limits: &key.limits, policy: key.policy, decided_at: None };
        self.remote_decision(shape, verdict, reports, request)
    }

    /// Counts a backend's verdict in the group's stats.
    fn count_remote(data: &mut ShardData, id: u32, peer: &str, peer_hash: u64, verdict: Verdict, request: Request) {
        if !request.counted(verdict.allowed) {
            return;
        }
        let wait_ns = if verdict.allowed { verdict.wait_ns } else { 0 };
        if request.take == Take::Permits {
            data.record_permits(id, peer, peer_hash, verdict.allowed);
        } else {
            data.record_decision(id, peer, peer_hash, verdict.allowed, wait_ns);
        }
    }

    /// The decision a backend's verdict makes for a key of this shape.
    fn remote_decision(
        &self,
        key: KeyShape<'_>,
        verdict: Verdict,
        reports: Option<Vec<Report>>,
        request: Request,
    ) -> Decision {
        let wait_ns = if verdict.allowed { verdict.wait_ns } else { 0 };
        let outcome =
            if verdict.allowed { Outcome::admitted(verdict.wait_ns) } else { Outcome::refused(verdict.retry_ns) };
        // As the core reports: the permits when they refused or the group has no rate limit, else the
        // rate limits.
        let gates = verdict.refused_by == Some(Refusal::Concurrency) || key.limits.iter().all(Limit::is_concurrency);
        let report = request.report.then(|| {
            let reports = reports.unwrap_or_default().into_iter().zip(key.limits);
            combine_reports(reports.filter(|(_, l)| l.is_concurrency() == gates).map(|(r, _)| r), key.policy)
        });
        let gate_bits =
            key.limits.iter().enumerate().filter(|(_, l)| l.is_concurrency()).fold(0u64, |bits, (i, _)| bits | 1 << i);
        // `now` on this limiter's clock (the waits and refunds of this process count from it): with a
        // ManualClock the time the backend decided at (the clock may have moved while the reply was on
        // its way); otherwise when the reply landed (the wait counts from then: never shorter). A verdict
        // made here keeps the reading it was made at (no second read of the clock on lease mode's hot path).
        let now = match key.decided_at {
            Some(now) => now,
            None if self.manual_now().is_some() => verdict.now,
            None => self.clock.now_ns(),
        };
        Decision {
            route: Route::Group(key.index),
            group: Some(key.id),
            outcome,
            refused_by: if verdict.allowed { None } else { Some(verdict.refused_by.unwrap_or(Refusal::Rate)) },
            report,
            now,
            receipt: Receipt {
                limits: verdict.written,
                at: now.saturating_add(verdict.wait_ns),
                wait_ns,
                permits: verdict.written & gate_bits != 0,
                remote_at: verdict.now.saturating_add(wait_ns),
            },
        }
    }
}
