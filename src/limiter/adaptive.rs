//! Adaptive limits in a decision: their permits are taken before the store decides the group's other
//! limits (and given back if it refuses), and given back with a sample when the request ends.
//!
//! They are decided here, by this process, whatever the store: in memory, in a shared region (one
//! gate for all the machine's processes), and with Redis too, where a machine's adaptive limit
//! follows the latency it sees itself (the service behind it is what it measures, not a budget to
//! share). A refusal is counted as the group's, as a full concurrency gate's is.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Decision, Limiter, Receipt, Refusal, Request, Take, Target};
use crate::adaptive::table::HeapGates;
use crate::adaptive::{stable_hash, GateView, Per, Sample, Settings};
use crate::algorithm::{Outcome, Report};
use crate::error::Result;
use crate::rules::{Group, Route};
use crate::state_map::region::layout::SharedRegion;
use crate::state_map::StatesIn;

/// Where a limiter's adaptive gates live: this process's memory, or a shared region (one gate for every
/// process of the machine; a gate the region has no room for is kept in memory).
#[derive(Debug)]
pub(crate) enum Gates {
    Heap(HeapGates),
    Region(Arc<SharedRegion>, HeapGates),
}

impl Gates {
    /// `salt`: mixed into the seeds of this process's gates (see `HeapGates`); a region's gates are
    /// seeded by their names alone (one gate for the machine).
    pub(crate) fn new(states: &StatesIn, capacity: usize, salt: u64) -> Self {
        match states {
            StatesIn::Heap => Self::Heap(HeapGates::new(capacity, salt)),
            StatesIn::Region(region, _) => Self::Region(Arc::clone(region), HeapGates::new(capacity, salt)),
        }
    }

    #[allow(clippy::cast_possible_truncation)] // a permit count is at most the ceiling, a u32
    fn admit(&self, key: (u64, u64), settings: &Settings, cost: u64, now: u64) -> bool {
        match self {
            Self::Heap(heap) => heap.admit(key, settings, cost, now),
            Self::Region(region, spill) => {
                let admit = |reclaim| {
                    region.with_gate(key, settings, now, reclaim, |gate, held| {
                        let admitted = gate.admit(settings, cost, now);
                        if admitted {
                            *held = held.saturating_add(cost as u32);
                        }
                        admitted
                    })
                };
                match admit(false) {
                    Some(true) => true,
                    // Full: permits of processes that ended may be held still; given back, asked again.
                    Some(false) => admit(true) == Some(true),
                    None => spill.admit(key, settings, cost, now),
                }
            }
        }
    }

    #[allow(clippy::cast_possible_truncation)]
    fn release(&self, key: (u64, u64), settings: &Settings, cost: u64, sample: Option<Sample>, now: u64) {
        match self {
            Self::Heap(heap) => heap.release(key.0, settings, cost, sample, now),
            Self::Region(region, spill) => {
                let released = region.with_gate(key, settings, now, false, |gate, held| {
                    *held = held.saturating_sub(cost as u32);
                    gate.release(settings, cost, sample, now);
                });
                if released.is_none() {
                    spill.release(key.0, settings, cost, sample, now);
                }
            }
        }
    }

    fn cancel(&self, key: (u64, u64), settings: &Settings, cost: u64, now: u64) {
        self.release(key, settings, cost, None, now);
    }

    fn view(&self, key: (u64, u64), settings: &Settings, now: u64) -> Option<GateView> {
        match self {
            Self::Heap(heap) => heap.view(key.0, settings),
            Self::Region(region, spill) => region
                .with_gate(key, settings, now, false, |gate, _| gate.view(settings))
                .or_else(|| spill.view(key.0, settings)),
        }
    }

    fn views_of(&self, owner: u64, settings: &Settings) -> Vec<GateView> {
        match self {
            Self::Heap(heap) => heap.views_of(owner, settings),
            Self::Region(region, spill) => {
                let mut views = region.gate_views(owner, settings);
                views.extend(spill.views_of(owner, settings));
                views
            }
        }
    }

    fn clear(&self) {
        match self {
            Self::Heap(heap) => heap.clear(),
            Self::Region(region, spill) => {
                region.clear_gates();
                spill.clear();
            }
        }
    }
}

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
    /// What an admission reports for a group without rate limits (its states hold only the gate of
    /// the adaptive ceiling, whose numbers say nothing): the first adaptive limit's permits and what is
    /// left of them. `None` when the group's rate limits report.
    report: Option<Report>,
    /// The group's states hold only the gate of the adaptive ceiling (`Group::ceiling_only`): decided
    /// in this process whatever the store.
    pub ceiling_only: bool,
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

    /// Whether `request` may pass adaptive limits here (the cheap test before `admit_adaptive`, kept
    /// inline so that `allow` and `check`, which take rate limits only, pay no call for it).
    #[inline]
    #[must_use]
    pub fn adaptive_may_apply(&self, request: Request) -> bool {
        request.take != Take::Rates && self.has_adaptive()
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
        let mut taken = Taken {
            gates: Vec::with_capacity(group.adaptive.len()),
            cost: request.cost,
            at: now,
            report: None,
            ceiling_only: group.ceiling_only,
        };
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
                let permits = self.gates.view(gate, settings, now).map_or(settings.initial, |v| v.limit);
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
        let reports_gate = request.report && Group::rate_limits(&group.limits).next().is_none();
        if let Some(&(gate, settings)) = taken.gates.first().filter(|_| reports_gate) {
            taken.report = self.gates.view(gate, settings, now).map(|view| Report {
                limit: u64::from(view.limit),
                remaining: u64::from(view.limit.saturating_sub(view.in_flight)),
                reset_after_ns: 0,
                window_ns: None,
                next_ns: 0,
            });
        }
        Ok(AdaptiveAdmission::Taken(taken))
    }

    /// Gives back permits `admit_adaptive` took for a request the store then refused: no sample.
    pub fn cancel_adaptive(&self, taken: &Taken) {
        for &(gate, settings) in &taken.gates {
            self.gates.cancel(gate, settings, taken.cost, taken.at);
        }
    }

    /// The decision of a store for a request whose adaptive permits were `taken`: a refusal gives them
    /// back; an admission holds permits to release (and is measured from when they were taken).
    pub fn settle_adaptive(&self, taken: &Taken, decision: &mut Decision) {
        if decision.outcome.allowed {
            decision.receipt.permits = true;
            decision.now = taken.at;
            if decision.report.is_some() && taken.report.is_some() {
                decision.report = taken.report;
            }
        } else {
            self.cancel_adaptive(taken);
        }
    }

    /// Gives back `cost` permits of `peer`'s adaptive limits, learning from `sample` (a request ended):
    /// true when the group's states hold only the adaptive ceiling's gate (`Group::ceiling_only`),
    /// whose permits this process keeps whatever the store.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn release_adaptive(&self, peer: &str, target: Target<'_>, cost: u64, sample: Option<Sample>) -> Result<bool> {
        if !self.has_adaptive() {
            return Ok(false);
        }
        let rules = self.rules();
        let index = match target {
            Target::Group(name) => rules.group_index(name)?,
            Target::Path(path) => match rules.router.route(peer, path) {
                Route::Group(index) => index,
                Route::Exempt(_) | Route::Unlimited => return Ok(false),
            },
        };
        let group = &rules.groups[index];
        let now = self.clock.now_ns();
        for (i, &settings) in group.adaptive.iter().enumerate() {
            self.gates.release(gate_key(group, i, settings, peer), settings, cost, sample, now);
        }
        Ok(group.ceiling_only)
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
