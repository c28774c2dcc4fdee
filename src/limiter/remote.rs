//! Decisions whose states live elsewhere (the Redis backend): the limiter routes the request and finds
//! its limits here, the backend decides, and the verdict is counted here. No lock is held while the
//! backend answers.

use super::{Decision, Limiter, Receipt, Refusal, Request, Take, Target};
use crate::algorithm::{Limit, Outcome, Report};
use crate::config::Policy;
use crate::error::Result;
use crate::limiter::decide::combine_reports;
use crate::rules::Route;

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
        if !self.enabled() {
            return Ok(Routed::Free(Decision::free(Route::Unlimited)));
        }
        let now = self.clock.now_ns();
        let mut locked = self.lock_peer(peer);
        let route = locked.rules().route(peer, target)?;
        let Route::Group(index) = route else {
            // Counted as exempt the way a local decision counts it.
            return Ok(Routed::Free(self.decide_route(&mut locked.held(), route, peer, now, Request::new(1))));
        };
        let mut key = locked.into_key(index);
        let quota = self.quota_of(&mut key.locked.held(), key.key, now, Some(peer));
        let group = key.group();
        Ok(Routed::Limited(RemoteKey {
            group: group.name.clone(),
            id: group.id,
            index,
            limits: group.limits_with(quota).into_owned(),
            policy: group.policy,
            reduction: group.reduction,
        }))
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
        let wait_ns = if verdict.allowed { verdict.wait_ns } else { 0 };
        {
            let mut locked = self.lock_peer(peer);
            let peer_hash = locked.peer_hash;
            let data = &mut locked.held().shard.data;
            if request.take == Take::Permits {
                data.record_permits(key.id, peer, peer_hash, verdict.allowed);
            } else {
                data.record_decision(key.id, peer, peer_hash, verdict.allowed, wait_ns);
            }
        }
        let outcome =
            if verdict.allowed { Outcome::admitted(verdict.wait_ns) } else { Outcome::refused(verdict.retry_ns) };
        // As the core reports: the permits when they refused or the group has no rate limit, else the
        // rate limits.
        let gates = verdict.refused_by == Some(Refusal::Concurrency) || key.limits.iter().all(Limit::is_concurrency);
        let report = request.report.then(|| {
            let reports = reports.unwrap_or_default().into_iter().zip(&key.limits);
            combine_reports(reports.filter(|(_, l)| l.is_concurrency() == gates).map(|(r, _)| r), key.policy)
        });
        let gate_bits =
            key.limits.iter().enumerate().filter(|(_, l)| l.is_concurrency()).fold(0u64, |bits, (i, _)| bits | 1 << i);
        // `now` on this limiter's clock (the waits and refunds of this process count from it); with a
        // ManualClock it is the time the backend decided at.
        let now = self.clock.now_ns();
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
            },
        }
    }
}
