//! Changes to a key's states outside decisions: refunds, permits given back, manual reduction, usage
//! seen elsewhere, and forgetting keys.

use super::waits::Ledgers;
use super::{Held, KeyLock, Limiter, Receipt, Target};
use crate::algorithm::{Limit, Log, State};
use crate::config::Policy;
use crate::error::{Error, Result};
use crate::rules::Group;
use crate::state_map::Owner;

impl Limiter {
    /// Applies `change` to the states of the key's limits that `select` picks (by index), after moving
    /// its states to the limits in force.
    fn change(
        &self,
        key: &mut KeyLock<'_>,
        select: impl Fn(&Group, usize, &Limit) -> bool,
        mut change: impl FnMut(&Limit, &State, &mut Log, (u64, u64), &mut Ledgers) -> State,
    ) {
        let now = self.clock.now_ns();
        let quota = self.quota_of(&mut key.locked.held(), key.key, now, None);
        let base = key.base();
        let (_, group, shard) = key.parts();
        // The ledgers of the shard's waits, taken out while its states change.
        let mut waits = std::mem::take(&mut shard.data.waits);
        for (i, limit) in group.limits_with(quota).iter().enumerate() {
            if !select(group, i, limit) {
                continue;
            }
            let key = group.limit_key(base, i);
            if let Some(moved) = shard.reconcile(key, (limit, 0), now) {
                waits.moved(key, limit, moved, now);
            }
            if let Some(state) = shard.touch(key) {
                // Only a sliding log has stamps; others must not leave an empty log behind.
                let changed = if limit.uses_log() {
                    shard.with_log(key, |log| change(limit, &state, log, (now, key), &mut waits))
                } else {
                    change(limit, &state, &mut Log::new(), (now, key), &mut waits)
                };
                shard.store(key, changed, now, (Owner::new(group.id, i), limit));
                if limit.is_concurrency() {
                    shard.lease(key, i64::from(changed.a) - i64::from(state.a));
                }
            }
        }
        shard.data.waits = waits;
    }

    /// Gives back `cost` that an admission took (`receipt`), e.g. for a cancelled wait; a wait given
    /// back is no longer counted as delayed.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn refund(&self, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        let Some(mut key) = self.lock_key(peer, target)? else { return Ok(()) };
        self.change(
            &mut key,
            |_, i, _| receipt.limits & (1 << i) != 0,
            |limit, state, log, (now, limit_key), waits| {
                let recorded = if limit.uses_log() {
                    None // a sliding log removes its own stamps
                } else {
                    waits.give_back(limit_key, state, (receipt.at, cost), now)
                };
                recorded.unwrap_or_else(|| limit.refund(state, log, now, receipt.at, cost))
            },
        );
        let base = key.base();
        let (_, group, shard) = key.parts();
        if receipt.wait_ns > 0 {
            shard.data.counters(group.id).given_back();
        }
        // Not admitted after all: not usage to report (unless a drain already took it).
        if let Some(pending) = shard.data.pending.get_mut(&base) {
            pending.units = pending.units.saturating_sub(cost);
            if pending.units == 0 {
                shard.data.pending.remove(&base);
            }
        }
        Ok(())
    }

    /// Returns the concurrency permits taken with `Take::Permits` or `Take::RatesAndPermits`.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn release(&self, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        if let Some(mut key) = self.lock_key(peer, target)? {
            self.change(
                &mut key,
                |_, _, l| l.is_concurrency(),
                |limit, state, log, (now, _), _| limit.refund(state, log, now, now, cost),
            );
        }
        Ok(())
    }

    /// Gives `tokens` back (a handler's manual reduction): under `all` to every rate limit of the group;
    /// under `fallback` to the last one, the fallback (the leaky tokens), since the limits
    /// before it admitted nothing the fallback had to take. False when no group limits the request or
    /// the group disables reduction.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn reduce(&self, peer: &str, target: Target<'_>, tokens: u64) -> Result<bool> {
        let Some(mut key) = self.lock_key(peer, target)? else { return Ok(false) };
        let group = key.group();
        if !group.reduction {
            return Ok(false);
        }
        let last = Group::rate_limits(&group.limits).last().map(|(i, _)| i);
        let policy = group.policy;
        self.change(
            &mut key,
            |_, i, l| !l.is_concurrency() && (policy == Policy::All || Some(i) == last),
            |limit, state, log, (now, _), _| limit.reduce(state, log, now, tokens),
        );
        let (_, group, shard) = key.parts();
        shard.data.counters(group.id).reductions += 1;
        Ok(true)
    }

    /// A server's word for `peer`: at most `remaining` more before `reset_after_ns` from now, heard in
    /// reply to a request admitted `age_ns` ago; taken by the group's fixed-window and GCRA limits
    /// ([`Limit::cap`]). True when one of them took it; false when none did (a stale word, a reset
    /// already past) or no group limits the request.
    ///
    /// # Errors
    /// A `Target::Group` that names no group; a group without a fixed-window limit.
    pub fn cap(
        &self,
        peer: &str,
        target: Target<'_>,
        remaining: u64,
        reset_after_ns: u64,
        age_ns: u64,
    ) -> Result<bool> {
        let Some(mut key) = self.lock_key(peer, target)? else { return Ok(false) };
        let now = self.clock.now_ns();
        let quota = self.quota_of(&mut key.locked.held(), key.key, now, None);
        let base = key.base();
        let (_, group, shard) = key.parts();
        let (reset_at, sent_at) = (now.saturating_add(reset_after_ns), now.saturating_sub(age_ns));
        let (mut heard, mut capped) = (false, false);
        for (i, limit) in group.limits_with(quota).iter().enumerate().filter(|(_, l)| l.takes_word()) {
            heard = true;
            let state_key = group.limit_key(base, i);
            // A new state: the ledgers of the key's waits no longer lead to it, and are dropped.
            let _ = shard.reconcile(state_key, (limit, 0), now);
            if let Some(state) = limit.cap(&shard.load(state_key), now, remaining, reset_at, sent_at) {
                shard.store(state_key, state, now, (Owner::new(group.id, i), limit));
                capped = true;
            }
        }
        if !heard {
            return Err(no_fixed_window(&group.name));
        }
        Ok(capped)
    }

    /// Counts `units` used by `peer` in `group` elsewhere (another node) as used now: the building
    /// block of syncing usage between nodes. The key may be refused until they drain.
    ///
    /// # Errors
    /// An unknown group.
    pub fn absorb(&self, peer: &str, group: &str, units: u64) -> Result<()> {
        let mut key = self.lock_group(peer, group)?;
        let now = self.clock.now_ns();
        // A key with no state yet gets one to charge.
        let quota = self.quota_of(&mut key.locked.held(), key.key, now, None);
        let base = key.base();
        let (_, g, shard) = key.parts();
        for (i, limit) in Group::rate_limits(&g.limits_with(quota)) {
            let state_key = g.limit_key(base, i);
            // A charge writes the state: the ledgers of its waits are stale anyway.
            let _ = shard.reconcile(state_key, (limit, 0), now);
            let state = shard.load(state_key);
            let mut log = if limit.uses_log() { shard.log(state_key).into_owned() } else { Log::new() };
            let charged = limit.charge(&state, &mut log, now, units);
            // The state first: a region keeps a log only with its key's state.
            shard.store(state_key, charged, now, (Owner::new(g.id, i), limit));
            if limit.uses_log() {
                shard.put_log(state_key, log);
            }
        }
        Ok(())
    }

    /// Each key's admissions since the last drain, as (peer, group, units); only with `track_usage`.
    /// Reads one shard at a time.
    ///
    /// # Errors
    /// The limiter does not track usage.
    pub fn drain_pending(&self) -> Result<Vec<(String, String, u64)>> {
        if !self.track_usage {
            return Err(Error::value("track_usage", "drain_pending needs Limiter(..., track_usage=True)"));
        }
        let mut drained = Vec::new();
        for mut shard in self.states.shards() {
            drained.extend(std::mem::take(&mut shard.data.pending).into_values());
        }
        let current = self.current.lock();
        Ok(drained
            .into_iter()
            .map(|p| (p.peer.into_string(), current.ids.name(p.group).unwrap_or("?").to_owned(), p.units))
            .collect())
    }

    /// Forgets the state (and quota record) of `peer` in every group, or of every peer.
    pub fn reset(&self, peer: Option<&str>) {
        if peer.is_none() {
            self.reset_adaptive();
        }
        match peer {
            Some(peer) => {
                let mut locked = self.lock_peer(peer);
                let Held { shard, rules, peer_hash } = locked.held();
                for group in &rules.groups {
                    let base = Self::key(peer_hash, group.seed);
                    for i in 0..group.limits.len() {
                        shard.remove(group.limit_key(base, i));
                    }
                    shard.data.quotas.remove(base);
                    shard.data.pending.remove(&base);
                }
            }
            None => self.states.shards().for_each(|mut s| {
                s.clear();
                s.data.quotas.clear();
                s.data.pending.clear();
            }),
        }
    }
}

/// The error of a server's word for a group that has no fixed window (or GCRA) to take it.
pub(crate) fn no_fixed_window(group: &str) -> Error {
    Error::value("group", format!("group {group:?} has no fixed_window or gcra limit for a server's word to cap"))
}
