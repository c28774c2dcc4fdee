//! Keys move their states from limits a reconfiguration replaced, keeping what they used.

use super::decide::KeyStates;
use super::shard::ShardData;
use crate::algorithm::Limit;
use crate::rules::MAX_HISTORY;
use crate::store::Store;

impl KeyStates<'_> {
    /// Moves the key's states from limits a reconfiguration replaced to the current ones, keeping what
    /// it used: through every limit in force since, each from the instant it took over, so usage drains
    /// at the rates that were in force (a quota in force replaces the first rate limit throughout).
    #[cold]
    pub fn migrate(&mut self, quota: Option<&Limit>) {
        let (group, base, now) = (self.group, self.base, self.now);
        let effective = |limit: &Limit, index: usize| match quota.filter(|_| group.primary == Some(index)) {
            Some(q) => q.rate.and_then(|rate| limit.with_rate(rate, None).ok()).unwrap_or(*limit),
            None => *limit,
        };
        let shard = &mut *self.shard;
        for index in 0..group.limits.len() {
            // This limit's earlier versions, newest first.
            let mut chain = [0usize; MAX_HISTORY];
            let mut versions = 0;
            for (position, previous) in group.history.iter().enumerate() {
                if previous.index == index {
                    chain[versions] = position;
                    versions += 1;
                }
            }
            let held = chain[..versions].iter().position(|&h| {
                let previous = &group.history[h];
                now < previous.until && shard.find(Store::<ShardData>::related_key(base, previous.signature)).is_some()
            });
            let Some(held) = held else { continue };
            let old_key = Store::<ShardData>::related_key(base, group.history[chain[held]].signature);
            let Some(mut state) = shard.find(old_key) else { continue };
            let mut log = shard.take_log(old_key);
            shard.remove(old_key);
            let new_key = group.limit_key(base, index);
            if shard.find(new_key).is_some() {
                continue;
            }
            let current = quota.filter(|_| group.primary == Some(index)).copied().unwrap_or(group.limits[index]);
            for step in (0..=held).rev() {
                let previous = &group.history[chain[step]];
                let from = effective(&previous.limit, index);
                let to = if step == 0 { current } else { effective(&group.history[chain[step - 1]].limit, index) };
                state = to.rescale(&from, &state, &mut log, previous.changed_at.min(now));
            }
            shard.store(new_key, state, now, group.id);
            if current.uses_log() && !log.is_empty() {
                shard.put_log(new_key, log);
            }
        }
    }
}
