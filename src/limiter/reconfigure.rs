//! Live reconfiguration: new rules in place, every key's state kept.

use std::sync::Arc;

use super::{Current, Limiter, ShardData};
use crate::algorithm::{Limit, Log, State};
use crate::config::RulesConfig;
use crate::error::{Error, Result};
use crate::rate::Rate;
use crate::rules::{Group, GroupMove, Rules};
use crate::state_map::region::attached::carry;
use crate::state_map::region::layout::SharedRegion;
use crate::state_map::StateMap;

/// The reconfigurations a remote store can replay at a key's next decision (see `Rules::moves`).
const MAX_MOVES: usize = 32;

impl Limiter {
    /// Replaces the rules, keeping every key's state: groups that keep their name keep their counters,
    /// and every key's states move to the new limits at once, keeping what they used (counted in
    /// requests, never capped), so no sequence of changes gives anybody extra admissions. Quota records
    /// follow the new limits. A change of limits costs one pass over the tracked states.
    ///
    /// # Errors
    /// As [`Limiter::new`]; the limiter is then unchanged.
    pub fn reconfigure(&self, config: RulesConfig) -> Result<()> {
        let _one_at_a_time = self.reconfiguring.lock();
        self.install_rules(config)
    }

    /// Builds the rules of `config` from those in force and hands them to every shard, moving each
    /// state of a limit that changed to the new limit as it goes. The caller holds `reconfiguring`
    /// throughout; `current` is held only while building, never while waiting for a shard (a shard's
    /// holder may need `current`).
    pub(super) fn install_rules(&self, config: RulesConfig) -> Result<()> {
        let now = self.clock.now_ns();
        let before;
        let rules = {
            let mut current = self.current.lock();
            let Current { rules, ids } = &mut *current;
            before = Arc::clone(rules);
            let version = rules.version() + 1;
            let mut built = Rules::build(config, &self.quotas, version, &self.hasher, ids, Some(rules))?;
            if let Some(bound) = self.limit_bound.get() {
                Self::check_limits(&built, *bound)?;
            }
            built.moves = Self::moves_after(rules, &built, now);
            self.note_adaptive(&built);
            *rules = Arc::new(built);
            Arc::clone(rules)
        };
        // This reconfiguration's moves (the last ones `moves_after` made) say which groups changed.
        let changed: Vec<&GroupMove> =
            rules.moves.iter().filter(|m| m.new_version == rules.version() && !m.gone).collect();
        // In a shared region, a limit gone from these rules keeps its states while another process
        // uses the group (its rules may still have the limit); this process no longer uses a group gone.
        let region = self.states.shared_region();
        let shared: Vec<bool> =
            changed.iter().map(|m| region.as_ref().is_some_and(|r| r.group_used_by_others(m.new.id))).collect();
        if let Some(region) = region {
            // By name: after a move to another region, ids of the rules before are the old region's.
            let gone = before.groups.iter().filter(|was| !rules.groups.iter().any(|g| g.name == was.name));
            for was in gone.filter(|was| region.group_name(was.id).is_some_and(|name| name == was.name)) {
                region.release_group(was.id);
            }
        }
        // Shard by shard, under its lock: its decisions see the old rules and states, or the new rules
        // and states moved at one instant, never a mix. Counters are kept by group id: nothing to move.
        for mut shard in self.states.shards() {
            for (m, &shared) in changed.iter().zip(&shared) {
                shard.change_group(m.new.id, |data, key, index, written, state, log| {
                    Self::move_state(
                        (&m.old, m.old_version),
                        (&m.new, m.new_version),
                        data,
                        (key, index, shared),
                        written,
                        state,
                        log,
                        now,
                    )
                });
            }
            shard.data.rules = Some(Arc::clone(&rules));
        }
        Ok(())
    }

    fn limits_changed(old: &Group, new: &Group) -> bool {
        old.limits != new.limits || old.failsafe != new.failsafe
    }

    /// The moves `new` keeps: the recent ones of `old`, and one for each group whose limits changed now.
    /// A move is kept while states written before it may still be in a remote store (four horizons of
    /// its limits), and no more than `MAX_MOVES` of earlier ones: a state older than the moves kept is
    /// rescaled from the limit it was written under to the one in force, at its next decision.
    fn moves_after(old: &Rules, new: &Rules, now: u64) -> Vec<GroupMove> {
        let horizon = |g: &Group| g.limits.iter().filter(|l| !l.is_concurrency()).map(Limit::horizon_ns).max();
        // Once a group's move is kept, every later one of that group is too: a state written before the
        // kept one is moved through all that follow it, and a gap would leave it under a limit no move
        // starts from (a short limit between two long ones expires first).
        let mut kept_groups = std::collections::HashSet::new();
        let mut moves: Vec<GroupMove> = old
            .moves
            .iter()
            .filter(|m| {
                let within =
                    now.saturating_sub(m.at) <= horizon(&m.old).max(horizon(&m.new)).unwrap_or(0).saturating_mul(4);
                (within && kept_groups.insert(m.new.id)) || kept_groups.contains(&m.new.id)
            })
            .cloned()
            .collect();
        let kept = moves.len();
        for was in &old.groups {
            let now_is = new.groups.iter().find(|g| g.id == was.id && g.seed == was.seed);
            if now_is.is_some_and(|group| !Self::limits_changed(was, group)) {
                continue;
            }
            moves.push(GroupMove {
                at: now,
                old: was.clone(),
                old_version: old.version(),
                new: now_is.unwrap_or(was).clone(),
                new_version: new.version(),
                gone: now_is.is_none(),
            });
        }
        // The oldest go first; this reconfiguration's always stay (memory moves its states by them).
        let excess = moves.len().saturating_sub(MAX_MOVES).min(kept);
        moves.drain(..excess);
        moves
    }

    /// Moves the state of limit `index` of a key from the old group's limit to the new one's at `now`,
    /// keeping what it used (each through the key's quota, where one replaces the limit); false: the
    /// limit is gone. A state that says what it was written under (`written`, in a shared region: maybe
    /// another process's limit) is moved from that, and `written` becomes the new limit; one of a limit
    /// gone stays when the group is `shared` with another running process.
    #[allow(clippy::too_many_arguments)]
    fn move_state(
        (old, old_version): (&Group, u64),
        (new, new_version): (&Group, u64),
        data: &mut ShardData,
        (key, index, shared): (u64, usize, bool),
        written: &mut Option<Limit>,
        state: &mut State,
        log: &mut Log,
        now: u64,
    ) -> bool {
        let base = StateMap::<ShardData>::unrelated_key(key, Group::signature(index));
        let record = data.quotas.get(base);
        let from = written.or_else(|| Self::key_limit(old, old_version, index, record));
        let (Some(from), Some(to)) = (from, Self::key_limit(new, new_version, index, record)) else {
            return written.is_some() && shared;
        };
        *written = Some(to);
        if from != to {
            let before = *state;
            *state = to.rescale(&from, state, log, now);
            data.waits.moved(key, &to, (before, *state), now);
            if !to.uses_log() {
                *log = Log::new();
            }
        }
        true
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

impl Limiter {
    /// Checks, at a decision `REGION_CHECK_NS` or more after the last check, that the shared region's
    /// file is still at its path; moves the states to the file there now if not. Called with no lock held.
    #[inline]
    pub(super) fn watch_region(&self, now: u64) {
        if let Some(region) = self.states.watch_region(now) {
            // A file that cannot be made or attached to (a foreign file put there): decided in the
            // region mapped, and tried again at the next check.
            let _ = self.move_region(&region);
        }
    }

    /// Moves the states to the region at `old`'s path (made now if the path is empty), carrying what
    /// each key used: a state of the old region is added to the new one's (its usage charged to it),
    /// or copied when the new one has none. The first process to move carries every state and empties
    /// the old region, so that those moving after it carry nothing twice. Group ids and seeds are the
    /// new region's from then on.
    ///
    /// # Errors
    /// The file at the path cannot be made or attached to.
    #[cold]
    pub fn move_region(&self, old: &Arc<SharedRegion>) -> Result<()> {
        let new = Arc::new(SharedRegion::open(old.path(), old.max_keys(), old.log_entries())?);
        if new.seeds() != old.seeds() {
            // Made before the machine restarted, or by another user: its keys are not this process's.
            return Err(Error::value(
                "path",
                format!("{} now names a region hashing peers otherwise: restart the workers", old.path().display()),
            ));
        }
        let names = self.current.lock().ids.clone_names();
        let now = self.clock.now_ns();
        self.states.move_to(&new, |old, from, to| carry((old, &new), from, to, &names, now));
        // Times are the new region's from here (its clock tracks the kernel's as the old one's did).
        if let crate::clock::Clock::Region(clock) = &self.clock {
            clock.follow(&new);
        }
        let _one_at_a_time = self.reconfiguring.lock();
        self.current.lock().ids = Self::region_ids(&new);
        let config = self.rules().config.clone();
        self.install_rules(config)
    }

    /// Forces the check of the region's file at the next decision (tests on a manual clock).
    pub fn check_region_now(&self) {
        self.states.check_region_now();
    }
}
