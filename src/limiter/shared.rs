//! A limiter whose states live in a shared region: what it records there beyond its states (each
//! group's limits, so that a process bringing other limits carries the usage over) and what it reads
//! back (the region's counts).

use super::Limiter;
use crate::algorithm::Log;
use crate::rules::Rules;
use crate::shared::layout::RegionSummary;

impl Limiter {
    /// Records each group's limits in the region; a group whose limits the region recorded otherwise
    /// (another process, other rules) has its states moved to these limits now, keeping what they used,
    /// as a reconfiguration moves them. A limit that is gone, or changes between a rate and a
    /// concurrency limit, starts empty (as in memory).
    pub(super) fn adopt_shared_limits(&self, rules: &Rules) {
        let Some(region) = self.states.shared_region() else { return };
        let now = self.clock.now_ns();
        for group in &rules.groups {
            let Some(before) = region.swap_group_limits(group.id, &group.limits) else { continue };
            if before == group.limits {
                continue;
            }
            for mut shard in self.states.shards() {
                shard.change_group(group.id, |_, _, index, state, log| {
                    match (before.get(index), group.limits.get(index)) {
                        (Some(from), Some(to)) if from.is_concurrency() == to.is_concurrency() => {
                            if from != to {
                                *state = to.rescale(from, state, log, now);
                                if !to.uses_log() {
                                    *log = Log::new();
                                }
                            }
                            true
                        }
                        _ => false,
                    }
                });
            }
        }
    }

    /// Records the limits of `rules` in the region, its states already moved to them.
    pub(super) fn record_shared_limits(&self, rules: &Rules) {
        if let Some(region) = self.states.shared_region() {
            for group in &rules.groups {
                let _before = region.swap_group_limits(group.id, &group.limits);
            }
        }
    }

    /// What the whole shared region holds and has decided, by every process; `None` in memory.
    #[must_use]
    pub fn shared_summary(&self) -> Option<RegionSummary> {
        let region = self.states.shared_region()?;
        let names = self.current.lock().ids.clone_names();
        Some(region.summary(true, &|id| names.get(id as usize).filter(|n| !n.is_empty()).cloned()))
    }
}
