//! Live reconfiguration: new rules in place, every key's state kept.

use std::sync::Arc;

use super::{Limiter, Rules, RulesConfig};
use crate::algorithm::Limit;
use crate::error::{Error, Result};
use crate::rate::Rate;

impl Limiter {
    /// Replaces the rules, keeping every key's state: groups that keep their name keep their counters,
    /// and each key moves its states to the new limits on its next decision, keeping what it used
    /// (counted in requests), so nobody gets extra admissions. Quota records follow the new limits.
    ///
    /// # Errors
    /// As [`Limiter::new`]; the limiter is then unchanged.
    pub fn reconfigure(&self, config: RulesConfig) -> Result<()> {
        let _one_at_a_time = self.reconfiguring.lock();
        let old = self.rules.load_full();
        let now = self.clock.now_ns();
        let rules = Rules::build(config, &self.quotas, old.version() + 1, &self.hasher, Some((&old, now)))?;
        let moved: Vec<Option<usize>> =
            rules.groups.iter().map(|g| old.groups.iter().position(|o| o.name == g.name)).collect();
        let rules = Arc::new(rules);
        self.rules.store(Arc::clone(&rules));
        // Shard by shard: a shard's counters are indexed by the groups of the rules it holds.
        for mut shard in self.store.shards() {
            let data = &mut shard.data;
            data.groups =
                moved.iter().map(|m| m.and_then(|i| data.groups.get(i).copied()).unwrap_or_default()).collect();
            data.rules = Some(Arc::clone(&rules));
        }
        Ok(())
    }

    /// Changes the rate and/or burst of `group`'s first rate limit in place.
    ///
    /// # Errors
    /// An unknown group, one without a rate limit, or a bad rate or burst.
    pub fn update_rule(&self, group: &str, rate: Option<Rate>, burst: Option<u64>) -> Result<()> {
        let mut config = self.rules.load().config.clone();
        let rules = self.rules.load_full();
        let index = rules.group_index(group)?;
        let Some(p) = rules.groups[index].primary else {
            return Err(Error::value("group", format!("group {group:?} has no rate limit to update")));
        };
        let current = rules.groups[index].limits[p];
        let limit = match (rate, burst) {
            (None, None) => return Ok(()),
            (rate, burst) => {
                let rate = rate.or(current.rate).ok_or_else(|| Error::value("rate", "the limit has no rate"))?;
                let keep_burst = if current.burst_set { Some(u64::from(current.burst)) } else { None };
                Limit::new(rate, burst.or(keep_burst), current.kind())?
            }
        };
        for rule in config.rules.iter_mut().filter(|r| r.group == group) {
            rule.limits[p] = limit;
        }
        self.reconfigure(config)
    }
}
