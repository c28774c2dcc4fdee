//! Live reconfiguration: new rules in place, every key's state kept.

use std::sync::Arc;

use super::{Current, Limiter};
use crate::algorithm::Limit;
use crate::config::RulesConfig;
use crate::error::{Error, Result};
use crate::rate::Rate;
use crate::rules::Rules;

impl Limiter {
    /// Replaces the rules, keeping every key's state: groups that keep their name keep their counters,
    /// and each key moves its states to the new limits on its next decision, keeping what it used
    /// (counted in requests), so nobody gets extra admissions. Quota records follow the new limits.
    ///
    /// # Errors
    /// As [`Limiter::new`]; the limiter is then unchanged.
    pub fn reconfigure(&self, config: RulesConfig) -> Result<()> {
        let _one_at_a_time = self.reconfiguring.lock();
        self.install_rules(config)
    }

    /// Builds the rules of `config` from those in force and hands them to every shard. The caller holds
    /// `reconfiguring` throughout; `current` is held only while building, never while waiting for a
    /// shard (a shard's holder may need `current`).
    fn install_rules(&self, config: RulesConfig) -> Result<()> {
        let rules = {
            let mut current = self.current.lock();
            let Current { rules, ids } = &mut *current;
            let now = self.clock.now_ns();
            let version = rules.version() + 1;
            let built = Rules::build(config, &self.quotas, version, &self.hasher, ids, Some((rules, now)))?;
            *rules = Arc::new(built);
            Arc::clone(rules)
        };
        // Shard by shard: counters are kept by group id, so they need no moving.
        for mut shard in self.store.shards() {
            shard.data.rules = Some(Arc::clone(&rules));
        }
        Ok(())
    }

    /// Changes the rate and/or burst of `group`'s first rate limit in place. Reads and replaces the
    /// rules under the reconfiguration lock, so concurrent updates of different groups all take effect.
    ///
    /// # Errors
    /// An unknown group, one without a rate limit, or a bad rate or burst.
    pub fn update_rule(&self, group: &str, rate: Option<Rate>, burst: Option<u64>) -> Result<()> {
        let _one_at_a_time = self.reconfiguring.lock();
        let rules = self.rules();
        let index = rules.group_index(group)?;
        let Some(p) = rules.groups[index].primary else {
            return Err(Error::value("group", format!("group {group:?} has no rate limit to update")));
        };
        let current_limit = rules.groups[index].limits[p];
        let limit = match (rate, burst) {
            (None, None) => return Ok(()),
            (rate, burst) => {
                let rate = rate.or(current_limit.rate).ok_or_else(|| Error::value("rate", "the limit has no rate"))?;
                let keep_burst = if current_limit.burst_set { Some(u64::from(current_limit.burst)) } else { None };
                Limit::new(rate, burst.or(keep_burst), current_limit.kind())?
            }
        };
        let mut config = rules.config.clone();
        for rule in config.rules.iter_mut().filter(|r| r.group == group) {
            rule.limits[p] = limit;
        }
        self.install_rules(config)
    }
}
