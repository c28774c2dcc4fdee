//! Adaptive limits in a decision: their permits are taken before the store decides the group's other
//! limits (and given back if it refuses), and given back with a sample when the request ends.
//!
//! They are decided here, by this process, whatever the store: in memory, in a shared region (one
//! gate for all the machine's processes), and with Redis too, where a machine's adaptive limit
//! follows the latency it sees itself (the service behind it is what it measures, not a budget to
//! share). A refusal is counted as the group's, as a full concurrency gate's is.

use std::sync::atomic::Ordering;

use super::{Decision, Limiter, Receipt, Refusal, Request, Take, Target};
use crate::adaptive::{stable_hash, GateView, Per, Sample, Settings};
use crate::algorithm::{Outcome, Report};
use crate::error::Result;
use crate::rules::{Group, Route};

/// What the adaptive limits of a request's group said.
#[derive(Debug)]
pub enum AdaptiveAdmission {
    /// The request takes no permits, or its group has no adaptive limit.
    None,
    /// A gate had no free permit: the request's decision.
    Refused(Decision),
    /// Permits taken, to be given back if the store refuses (`cancel_adaptive`).
    Taken(Taken),
}

/// The permits an admission took from adaptive gates.
#[derive(Debug)]
pub struct Taken {
    gates: Vec<((u64, u64), &'static Settings)>,
    cost: u64,
    /// The clock reading they were taken at: a released request's latency is measured from it.
    pub at: u64,
}

/// One adaptive gate's numbers, for `stats()`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveStats {
    pub group: String,
    /// The limit's index among the group's adaptive limits.
    pub index: usize,
    pub controller: &'static str,
    pub per: Per,
    /// The gates of the limit: 1 per group (once used); one per key seen (`Per::Key`), whose `view`
    /// sums the limits and the requests in flight and averages the latencies.
    pub gates: usize,
    pub view: GateView,
}

/// The key of a group's adaptive limit `index` for `peer`, and the limit's own (its gates' owner):
/// the same in every process and run (it seeds the gate's RNG, and names it in a shared region).
fn gate_key(group: &Group, index: usize, settings: &Settings, peer: &str) -> (u64, u64) {
    let index = index.to_le_bytes();
    let owner = stable_hash(&[group.name.as_bytes(), &index]);
    match settings.per {
        Per::Group => (owner, owner),
        Per::Key => (stable_hash(&[group.name.as_bytes(), &index, peer.as_bytes()]), owner),
    }
}

/// The view of a per-key limit's gates together.
#[allow(clippy::cast_precision_loss)]
fn summed(views: &[GateView]) -> Option<GateView> {
    let first = *views.first()?;
    let n = views.len() as f64;
    let sum = views[1..].iter().fold(first, |a, v| GateView {
        limit: a.limit.saturating_add(v.limit),
        in_flight: a.in_flight.saturating_add(v.in_flight),
        baseline_ns: a.baseline_ns + v.baseline_ns,
        recent_ns: a.recent_ns + v.recent_ns,
        probing: a.probing || v.probing,
        samples: a.samples + v.samples,
        drops: a.drops + v.drops,
        timeouts: a.timeouts + v.timeouts,
        probes: a.probes + v.probes,
    });
    Some(GateView { baseline_ns: sum.baseline_ns / n, recent_ns: sum.recent_ns / n, ..sum })
}

impl Limiter {
    /// Whether any rules this limiter ever had held an adaptive limit: until then decisions skip them.
    #[inline]
    #[must_use]
    pub fn has_adaptive(&self) -> bool {
        self.adaptive_seen.load(Ordering::Relaxed)
    }

    pub(super) fn note_adaptive(&self, rules: &crate::rules::Rules) {
        if rules.groups.iter().any(|g| !g.adaptive.is_empty()) {
            self.adaptive_seen.store(true, Ordering::Relaxed);
        }
    }

    /// Takes the permits of the adaptive limits of `peer`'s group, for a request that takes permits.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn admit_adaptive(&self, peer: &str, target: Target<'_>, request: Request) -> Result<AdaptiveAdmission> {
        if !self.has_adaptive() || request.take == Take::Rates || request.peek || !self.enabled() {
            return Ok(AdaptiveAdmission::None);
        }
        let Some(mut key) = self.lock_key(peer, target)? else { return Ok(AdaptiveAdmission::None) };
        if key.group().adaptive.is_empty() {
            return Ok(AdaptiveAdmission::None);
        }
        let now = self.clock.now_ns();
        let peer_hash = key.locked.peer_hash;
        let index = key.key.index;
        let (_, group, shard) = key.parts();
        let mut taken = Taken { gates: Vec::with_capacity(group.adaptive.len()), cost: request.cost, at: now };
        for (i, &settings) in group.adaptive.iter().enumerate() {
            let gate = gate_key(group, i, settings, peer);
            if !self.gates.admit(gate, settings, request.cost, now) {
                self.cancel_adaptive(&taken);
                if request.take == Take::Permits {
                    shard.data.record_permits(group.id, peer, peer_hash, false);
                } else {
                    shard.data.record_decision(group.id, peer, peer_hash, false, 0);
                }
                shard.count_shared(false, peer, peer_hash);
                let permits = self.gates.view(gate.0, settings).map_or(settings.initial, |v| v.limit);
                let report = request.report.then_some(Report {
                    limit: u64::from(permits),
                    remaining: 0,
                    reset_after_ns: 0,
                    window_ns: None,
                    next_ns: 0,
                });
                return Ok(AdaptiveAdmission::Refused(Decision {
                    route: Route::Group(index),
                    group: Some(group.id),
                    outcome: Outcome::refused(0),
                    refused_by: Some(Refusal::Concurrency),
                    report,
                    now,
                    receipt: Receipt::default(),
                }));
            }
            taken.gates.push((gate, settings));
        }
        Ok(AdaptiveAdmission::Taken(taken))
    }

    /// Gives back permits `admit_adaptive` took for a request the store then refused: no sample.
    pub fn cancel_adaptive(&self, taken: &Taken) {
        for &(gate, _) in &taken.gates {
            self.gates.cancel(gate.0, taken.cost);
        }
    }

    /// The decision of a store for a request whose adaptive permits were `taken`: a refusal gives them
    /// back; an admission holds permits to release (and is measured from when they were taken).
    pub fn settle_adaptive(&self, taken: &Taken, decision: &mut Decision) {
        if decision.outcome.allowed {
            decision.receipt.permits = true;
            decision.now = taken.at;
        } else {
            self.cancel_adaptive(taken);
        }
    }

    /// Gives back `cost` permits of `peer`'s adaptive limits, learning from `sample` (a request ended).
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn release_adaptive(&self, peer: &str, target: Target<'_>, cost: u64, sample: Option<Sample>) -> Result<()> {
        if !self.has_adaptive() {
            return Ok(());
        }
        let rules = self.rules();
        let index = match target {
            Target::Group(name) => rules.group_index(name)?,
            Target::Path(path) => match rules.router.route(peer, path) {
                Route::Group(index) => index,
                Route::Exempt(_) | Route::Unlimited => return Ok(()),
            },
        };
        let group = &rules.groups[index];
        let now = self.clock.now_ns();
        for (i, &settings) in group.adaptive.iter().enumerate() {
            self.gates.release(gate_key(group, i, settings, peer).0, settings, cost, sample, now);
        }
        Ok(())
    }

    /// The adaptive gates of the rules in force that exist: per group, or per key (unnamed).
    #[must_use]
    pub fn adaptive_stats(&self) -> Vec<AdaptiveStats> {
        let rules = self.rules();
        let mut out = Vec::new();
        for group in &rules.groups {
            for (i, &settings) in group.adaptive.iter().enumerate() {
                let views = self.gates.views_of(gate_key(group, i, settings, "").1, settings);
                // A limit not used yet: its initial permits, nothing learned.
                let fresh = || GateView {
                    limit: settings.initial,
                    probing: false,
                    ..crate::adaptive::Gate::default().view(settings)
                };
                out.push(AdaptiveStats {
                    group: group.name.clone(),
                    index: i,
                    controller: settings.controller.name(),
                    per: settings.per,
                    gates: views.len(),
                    view: summed(&views).unwrap_or_else(fresh),
                });
            }
        }
        out
    }

    /// Forgets what every adaptive gate learned (a `reset()` of every peer).
    pub(super) fn reset_adaptive(&self) {
        self.gates.clear();
    }
}
