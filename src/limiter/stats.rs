//! What the limiter reports about itself: counters by group, and each group's policy.

use std::sync::Arc;

use super::{Limiter, ShardData};
use crate::algorithm::Limit;
use crate::config::Policy;
use crate::error::Result;
use crate::metrics::GroupCounters;
use crate::state_map::region::layout::RegionSummary;

/// One group's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStats {
    pub name: String,
    pub limits: Vec<Limit>,
    pub policy: Policy,
    pub counters: GroupCounters,
    /// States the group holds now (one per key and limit).
    pub keys: u64,
    pub evictions: u64,
    /// Idle states dropped to make room (not evictions: a drop never lets a key admit more).
    pub dropped: u64,
}

/// The peers refused most (see `heavy_hitters`): each count over-estimates the true count by at most
/// `error_bound`; every peer refused more than `error_bound` times is among the sketches' counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopRefused {
    /// Most refused first; ties by peer.
    pub peers: Vec<(String, u64)>,
    pub error_bound: u64,
    /// Refusals the sketches have seen.
    pub refusals: u64,
}

/// A snapshot of the whole limiter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// In the order of the rules in force.
    pub groups: Vec<GroupStats>,
    /// Exempt requests, those routed to a group included.
    pub exempt: u64,
    pub keys: usize,
    pub evictions: u64,
    pub quota_records: usize,
}

/// What a `RateLimit-Policy` header says of a group: `quota` requests per `window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPolicy {
    pub group: String,
    pub quota: u64,
    /// `None` for a group of concurrency permits only (a quota of concurrent requests).
    pub window_ns: Option<u64>,
}

impl Limiter {
    /// Counters by group, summed over the shards one shard at a time (decisions go on meanwhile).
    #[must_use]
    pub fn stats(&self) -> Stats {
        let rules = Arc::clone(&self.current.lock().rules);
        let mut stats = Stats {
            groups: rules
                .groups
                .iter()
                .map(|g| GroupStats {
                    name: g.name.clone(),
                    limits: g.limits.clone(),
                    policy: g.policy,
                    counters: GroupCounters::default(),
                    keys: 0,
                    evictions: 0,
                    dropped: 0,
                })
                .collect(),
            ..Stats::default()
        };
        for shard in self.states.shards() {
            let data: &ShardData = &shard.data;
            // A region's shard counts its groups' keys in one walk, not one per group.
            let region_keys = shard.region_group_keys();
            for (total, group) in stats.groups.iter_mut().zip(&rules.groups) {
                if let Some(counters) = data.counted(group.id) {
                    total.counters.add(counters);
                }
                total.keys += match &region_keys {
                    Some(keys) => keys.get(group.id as usize).copied().unwrap_or(0),
                    None => shard.group_keys(group.id),
                };
                total.evictions += shard.group_evictions(group.id);
                total.dropped += shard.group_dropped(group.id);
            }
            stats.exempt += data.exempt;
            stats.keys += shard.len();
            stats.evictions += shard.evictions();
            stats.quota_records += data.quotas.len();
        }
        stats.exempt += stats.groups.iter().map(|g| g.counters.exempt).sum::<u64>();
        stats
    }

    /// The `n` peers refused most, in `group` or (`None`) in every group together, from the sketches
    /// the shards keep (no walk over keys). A peer always lands in the same shard, so the shards'
    /// sketches count disjoint peers and the global top `n` is among the shards' top `n`.
    ///
    /// # Errors
    /// An unknown group.
    pub fn top_refused(&self, n: usize, group: Option<&str>) -> Result<TopRefused> {
        let id = self.refused_sketch(group)?;
        let most_first = |a: &(&str, u64), b: &(&str, u64)| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0));
        let mut top = TopRefused::default();
        for shard in self.states.shards() {
            let Some(sketch) = shard.data.refused(id) else { continue };
            top.refusals += sketch.observed;
            top.error_bound = top.error_bound.max(sketch.error_bound());
            let mut ranked: Vec<(&str, u64)> = sketch.counters().map(|(peer, count, _)| (peer, count)).collect();
            if ranked.len() > n && n > 0 {
                ranked.select_nth_unstable_by(n - 1, most_first);
            }
            ranked.truncate(n);
            top.peers.extend(ranked.into_iter().map(|(peer, count)| (peer.to_owned(), count)));
        }
        top.peers.sort_unstable_by(|a, b| most_first(&(a.0.as_str(), a.1), &(b.0.as_str(), b.1)));
        top.peers.truncate(n);
        Ok(top)
    }

    /// The sketch `top_refused` reads: a group's id, or `None` for every group's.
    fn refused_sketch(&self, group: Option<&str>) -> Result<Option<u32>> {
        let Some(name) = group else { return Ok(None) };
        let rules = self.rules();
        Ok(Some(rules.groups[rules.group_index(name)?].id))
    }

    /// The policy of `group` as a `RateLimit-Policy` header states it: its first rate limit's burst and
    /// window (with `peer`, that peer's quota replacing it), or its permits for a group of permits only.
    /// No walk over keys: with a peer, one shard is locked.
    ///
    /// # Errors
    /// An unknown group.
    pub fn group_policy(&self, group: &str, peer: Option<&str>) -> Result<GroupPolicy> {
        let limit = if let Some(peer) = peer {
            let mut key = self.lock_group(peer, group)?;
            let quota = self.quota_of(&mut key.locked.held(), key.key, self.clock.now_ns(), None);
            let g = key.group();
            quota.or_else(|| g.primary.map(|p| g.limits[p])).unwrap_or(g.limits[0])
        } else {
            let rules = self.rules();
            let g = &rules.groups[rules.group_index(group)?];
            g.primary.map_or(g.limits[0], |p| g.limits[p])
        };
        Ok(GroupPolicy { group: group.to_owned(), quota: u64::from(limit.burst), window_ns: limit.window_ns() })
    }
}

impl Limiter {
    /// What the whole shared region holds and has decided, by every process; `None` in the heap.
    #[must_use]
    pub fn shared_summary(&self) -> Option<RegionSummary> {
        let region = self.states.shared_region()?;
        let names = self.current.lock().ids.clone_names();
        let mut summary = region.summary(true, &|id| names.get(id as usize).filter(|n| !n.is_empty()).cloned());
        summary.stalls = self.stalls();
        Some(summary)
    }
}
