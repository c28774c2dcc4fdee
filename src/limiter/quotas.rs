//! Per-key quotas in the limiter: which quota a decision uses, fetch jobs, and answers landing.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Held, Key, KeyLock, Landing, Limiter, ShardData, Target};
use crate::algorithm::{Limit, Log};
use crate::error::{Error, Result};
use crate::quota::{FetchJob, FetchQueue, QuotaInfo, QuotaSlot, Source, QUEUED};
use crate::rate::Rate;
use crate::rules::Group;
use crate::state_map::{Owner, Shard};

/// What a quota provider answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderAnswer {
    /// A quota (`None`: the rule's own rate).
    Quota(Option<Rate>),
    /// No such key (the provider raised `LookupError`): keep the failsafe, ask again after the TTL.
    Unknown,
    /// The provider raised, timed out, or answered something that is not a rate.
    Failed(Option<String>),
}

impl Limiter {
    /// The quota in force for `key` (`None`: the rule's own limit). With `fetch_for` (the key's peer), a
    /// key that needs one (new, expired, backed off long enough) gets a fetch queued, and a fetch that a
    /// worker started longer than the quota timeout (`Quotas(timeout=)`) ago is failed (a queued one has no deadline yet).
    #[inline]
    pub(super) fn quota_of(&self, held: &mut Held<'_>, key: Key, now: u64, fetch_for: Option<&str>) -> Option<Limit> {
        if !self.quotas_active.load(Ordering::Relaxed) {
            return None;
        }
        let base = key.base;
        let (rules, group, shard) = held.key_parts(key);
        group.primary?;
        let settings = &self.quotas;
        let fetch_for = fetch_for.filter(|_| settings.provider);
        let slot = match shard.data.quotas.get_mut(base) {
            Some(slot) => {
                slot.reused = true;
                slot
            }
            None if fetch_for.is_some() => {
                let source = if group.failsafe.is_some() { Source::Failsafe } else { Source::Rule };
                let adopted = group.primary.is_some_and(|p| shard.find(group.limit_key(base, p)).is_some());
                let slot = shard.data.quotas.insert(base, group.failsafe, source, rules.version(), now);
                slot.adopted = adopted;
                slot
            }
            None => return None,
        };
        if slot.version != rules.version() {
            Self::rederive(slot, group, rules.version());
        }
        if let Some(peer) = fetch_for.filter(|_| now >= slot.next_at) {
            if slot.fetching {
                // The fetch overran its deadline: fail it, so a later use retries after the backoff.
                slot.fail(settings, now);
                let quota = slot.quota;
                shard.data.counters(group.id).quota_failures += 1;
                return quota;
            }
            slot.token = slot.token.wrapping_add(1);
            let job = FetchJob::new(peer.to_owned(), group.name.clone(), slot.token);
            if self.fetches.push(job) {
                slot.fetching = true;
                // No deadline until a worker starts it (`start_fetch`): the wait in the queue is no
                // fault of the provider's.
                slot.next_at = QUEUED;
                let quota = slot.quota;
                shard.data.counters(group.id).quota_fetches += 1;
                return quota;
            }
            // Queue full or closed: stay on the current quota and try again later.
            slot.next_at = now.saturating_add(settings.backoff(1));
        }
        slot.quota
    }

    /// The limit a record stands for under `group` of rules `version` (re-derived if it is older).
    pub(super) fn quota_in(slot: &QuotaSlot, group: &Group, version: u64) -> Option<Limit> {
        if slot.version == version {
            return slot.quota;
        }
        let mut again = *slot;
        Self::rederive(&mut again, group, version);
        again.quota
    }

    /// Limit `index` of `group` (rules `version`) as the key whose quota record is `record` runs on it:
    /// its quota in place of the group's first rate limit.
    pub(super) fn key_limit(group: &Group, version: u64, index: usize, record: Option<&QuotaSlot>) -> Option<Limit> {
        let limit = group.limits.get(index)?;
        Some(match record {
            Some(record) if group.primary == Some(index) => Self::quota_in(record, group, version).unwrap_or(*limit),
            _ => *limit,
        })
    }

    /// Re-derives a record's limit after a reconfiguration changed the group's first rate limit.
    fn rederive(slot: &mut QuotaSlot, group: &Group, version: u64) {
        slot.version = version;
        let Some(p) = group.primary else { return };
        slot.quota = slot.quota.and_then(|q| q.rate).and_then(|rate| group.limits[p].with_rate(rate, None).ok());
        if slot.source == Source::Failsafe {
            slot.quota = group.failsafe;
        }
    }

    /// Moves the key's primary state from limit `old` to `new`, keeping what it used.
    fn rescale(shard: &mut Shard<ShardData>, group: &Group, base: u64, old: &Limit, new: &Limit, now: u64) {
        if old == new {
            return;
        }
        let Some(p) = group.primary else { return };
        let key = group.limit_key(base, p);
        if shard.in_region() {
            // A region's state says what it was written under (`old`, or another process's limit).
            if let Some(moved) = shard.reconcile(key, (new, 0), now) {
                shard.data.waits.moved(key, new, moved, now);
            }
            return;
        }
        let Some(state) = shard.touch(key) else { return };
        let rescaled = if new.uses_log() {
            shard.with_log(key, |log| new.rescale(old, &state, log, now))
        } else {
            new.rescale(old, &state, &mut Log::new(), now)
        };
        shard.data.waits.moved(key, new, (state, rescaled), now);
        shard.store(key, rescaled, now, (Owner::new(group.id, p), new));
    }

    /// Installs `quota` for the key (provider answers and `set_quota`), rescaling its state; the
    /// limits it moved the key from and to (for a remote store to move its state the same way).
    fn install(key: &mut KeyLock<'_>, quota: Option<Limit>, now: u64) -> Option<(Limit, Limit)> {
        let base = key.base();
        let (rules, group, shard) = key.parts();
        let p = group.primary?;
        // The record as the rules in force derive it: a reconfiguration moved the key's state to that.
        let version = rules.version();
        let (current, adopted) =
            shard.data.quotas.get(base).map_or((None, false), |s| (Self::quota_in(s, group, version), s.adopted));
        if adopted {
            return None;
        }
        let old = current.unwrap_or(group.limits[p]);
        let new = quota.unwrap_or(group.limits[p]);
        Self::rescale(shard, group, base, &old, &new, now);
        (old != new).then_some((old, new))
    }

    /// The quota in force for the key now, as its record says (read only: no fetch, no use counted).
    pub(super) fn quota_now(key: &mut KeyLock<'_>) -> Option<Limit> {
        let base = key.base();
        let (rules, group, shard) = key.parts();
        shard.data.quotas.get(base).and_then(|slot| Self::quota_in(slot, group, rules.version()))
    }

    /// The quota limit for `rate` in `group` (`None` rate: the rule's own).
    fn derive(&self, group: &Group, rate: Option<Rate>) -> Result<Option<Limit>> {
        match (rate, group.primary) {
            (Some(rate), Some(p)) => {
                let limit = group.limits[p].with_rate(rate, None)?;
                self.check_bound(&limit)?;
                Ok(Some(limit))
            }
            _ => Ok(None),
        }
    }

    /// Sets the quota of `peer` in `group` directly (a billing event, an admin); `None`: the rule's rate.
    /// Supersedes a running fetch for the key.
    ///
    /// # Errors
    /// An unknown group, a group with no rate limit, or a rate that does not fit the group's burst.
    pub fn set_quota(&self, peer: &str, group: &str, rate: Option<Rate>) -> Result<()> {
        let mut key = self.lock_group(peer, group)?;
        self.set_quota_locked(&mut key, rate).map(drop)
    }

    /// `set_quota` on a locked key; the limits it moved the key's state from and to.
    pub(super) fn set_quota_locked(&self, key: &mut KeyLock<'_>, rate: Option<Rate>) -> Result<Option<(Limit, Limit)>> {
        let group = &key.group().name.clone();
        let g = key.group();
        if g.primary.is_none() {
            return Err(Error::value("group", format!("group {group:?} has no rate limit to set a quota for")));
        }
        let quota = self.derive(g, rate).map_err(|e| e.within("rate"))?;
        let now = self.clock.now_ns();
        self.quotas_active.store(true, Ordering::Relaxed);
        let moved = Self::install(key, quota, now);
        let base = key.base();
        let (rules, _, shard) = key.parts();
        let quotas = &mut shard.data.quotas;
        let slot = match quotas.get_mut(base) {
            Some(slot) => slot,
            None => quotas.insert(base, quota, Source::Set, rules.version(), now),
        };
        slot.version = rules.version();
        slot.moves_sent = rules.version();
        slot.land(quota, Source::Set, &self.quotas, now);
        self.fetches.notify_landed();
        Ok(moved)
    }

    /// What `peer`'s key in `group` runs on, and the rule's own rate. Starts no fetch.
    ///
    /// # Errors
    /// An unknown group.
    pub fn quota(&self, peer: &str, group: &str) -> Result<(QuotaInfo, Option<Rate>)> {
        let mut key = self.lock_group(peer, group)?;
        let base = key.base();
        let (rules, g, shard) = key.parts();
        let rule_rate = g.primary.and_then(|p| g.limits[p].rate);
        if let Some(slot) = shard.data.quotas.get_mut(base) {
            if slot.version != rules.version() {
                Self::rederive(slot, g, rules.version());
            }
            return Ok((slot.info(), rule_rate));
        }
        let failsafe = self.quotas.provider && g.failsafe.is_some();
        let info = QuotaInfo {
            rate: if failsafe { g.failsafe.and_then(|l| l.rate) } else { None },
            source: if failsafe { Source::Failsafe } else { Source::Rule },
            since: None,
            fetching: false,
            failures: 0,
        };
        Ok((info, rule_rate))
    }

    /// The queue workers take fetch jobs from.
    #[must_use]
    pub fn fetches(&self) -> &Arc<FetchQueue> {
        &self.fetches
    }

    /// A worker starts `job`: its the quota timeout (`Quotas(timeout=)`) counts from now, on the limiter's clock for the
    /// key's next uses (as the worker counts it in real time). False when the job is no longer wanted
    /// (`set_quota` superseded it, the key was reset): the worker skips the provider.
    pub fn start_fetch(&self, job: &FetchJob) -> bool {
        let Ok(mut key) = self.lock_group(&job.peer, &job.group) else { return false };
        let now = self.clock.now_ns();
        let base = key.base();
        let (_, _, shard) = key.parts();
        match shard.data.quotas.get_mut(base) {
            Some(slot) if slot.fetching && slot.token == job.token => {
                slot.next_at = now.saturating_add(self.quotas.timeout_ns);
                true
            }
            _ => false,
        }
    }

    /// Hands back the answer to `job`. An answer that comes after the quota timeout (`Quotas(timeout=)`) (counted from when a
    /// worker took the job) is a failure. The worker then calls `fetches().done()`, once it has logged
    /// what it must: `wait_quotas` returns when every job is done.
    /// With `replay` (a store that replays moves, see `StateStore::replays_moves`), a landing that
    /// moved the key's state says what that store must move.
    pub fn finish_fetch(&self, job: &FetchJob, answer: ProviderAnswer, replay: bool) -> Landing {
        let Ok(mut key) = self.lock_group(&job.peer, &job.group) else { return Landing::Late };
        let now = self.clock.now_ns();
        let base = key.base();
        let timeout = Duration::from_nanos(self.quotas.timeout_ns);
        let answer = match job.taken.map(|taken| taken.elapsed()) {
            Some(took) if took > timeout => ProviderAnswer::Failed(Some(format!(
                "answered after {:.3} s, over Quotas(timeout={})",
                took.as_secs_f64(),
                timeout.as_secs_f64()
            ))),
            _ => answer,
        };
        {
            let (rules, g, shard) = key.parts();
            match shard.data.quotas.get_mut(base) {
                Some(slot) if slot.fetching && slot.token == job.token => {
                    if slot.version != rules.version() {
                        Self::rederive(slot, g, rules.version());
                    }
                }
                _ => return Landing::Late,
            }
        }
        let derived = match answer {
            ProviderAnswer::Quota(rate) => {
                self.derive(key.group(), rate).map_err(|e| Some(e.within("quota").to_string()))
            }
            ProviderAnswer::Unknown => {
                let (_, g, shard) = key.parts();
                if let Some(slot) = shard.data.quotas.get_mut(base) {
                    slot.unknown(&self.quotas, now);
                }
                shard.data.counters(g.id).quota_unknown += 1;
                return Landing::Unknown;
            }
            ProviderAnswer::Failed(reason) => Err(reason),
        };
        match derived {
            Ok(quota) => {
                // Computed before the quota changes: the moves so far went with the old record.
                let remote = replay.then(|| {
                    let before = Self::quota_now(&mut key);
                    Self::remote_key(&mut key, before)
                });
                let installed = Self::install(&mut key, quota, now);
                let moved = remote.and_then(|remote| Self::quota_changed(remote, installed, now));
                let source = if quota.is_some() { Source::Provider } else { Source::Rule };
                let (rules, _, shard) = key.parts();
                if let Some(slot) = shard.data.quotas.get_mut(base) {
                    slot.land(quota, source, &self.quotas, now);
                    slot.moves_sent = rules.version();
                }
                Landing::Landed(moved)
            }
            Err(reason) => {
                let (_, g, shard) = key.parts();
                let first = shard.data.quotas.get_mut(base).is_some_and(|slot| slot.fail(&self.quotas, now));
                shard.data.counters(g.id).quota_failures += 1;
                Landing::Failed { first, reason }
            }
        }
    }

    /// Whether `peer`'s first fetch for its group is still running (what `quota_wait` waits for);
    /// queues it if the key is new. When it runs: the landings seen before the check, to pass to
    /// `wait_first_fetch`.
    pub fn first_fetch_pending(&self, peer: &str, target: Target<'_>) -> Option<u64> {
        if !self.quotas.provider || !self.enabled() {
            return None;
        }
        let seen = self.fetches.landed();
        let mut key = self.lock_key(peer, target).ok()??;
        let now = self.clock.now_ns();
        self.quota_of(&mut key.locked.held(), key.key, now, Some(peer));
        let base = key.base();
        let (_, _, shard) = key.parts();
        shard.data.quotas.get(base).is_some_and(|s| s.fetching && !s.good).then_some(seen)
    }

    /// Blocks until `peer`'s pending first fetch (`first_fetch_pending` gave `seen`) lands or fails, or
    /// `timeout` passes. Call without the GIL.
    pub fn wait_first_fetch(&self, peer: &str, target: Target<'_>, mut seen: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.fetches.wait_landed(seen, deadline) {
            // Some fetch landed: this key's, or another's.
            match self.first_fetch_pending(peer, target) {
                Some(now_seen) => seen = now_seen,
                None => return,
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::algorithm::{Kind, Outcome};
    use crate::clock::Clock;
    use crate::clock::ManualClock;
    use crate::config::{Config, RuleSpec, RulesConfig};
    use crate::limiter::tests::decide;
    use crate::quota::QuotaSettings;

    const S: u64 = 1_000_000_000;

    fn limiter(rate: &str, failsafe: Option<&str>) -> (Limiter, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(0));
        let limit = Limit::new(rate.parse().unwrap(), None, Kind::Gcra).unwrap();
        let config = Config {
            rules: RulesConfig { rules: vec![RuleSpec::single("", "g", limit).unwrap()], ..RulesConfig::default() },
            quotas: QuotaSettings {
                provider: true,
                failsafe: failsafe.map(|f| f.parse().unwrap()),
                ttl_ns: 60 * S,
                timeout_ns: 5 * S,
                queue_capacity: 100,
            },
            ..Config::default()
        };
        (Limiter::new(config, Clock::Manual(clock.clone()), crate::state_map::StatesIn::Heap).unwrap(), clock)
    }

    fn remaining(lim: &Limiter, peer: &str) -> u64 {
        decide(lim, peer, None, 1, 0, true).report.unwrap().remaining
    }

    /// The next job, started as a worker starts it.
    fn take(lim: &Limiter) -> Option<FetchJob> {
        let job = lim.fetches().take(Duration::ZERO)?;
        assert!(lim.start_fetch(&job));
        Some(job)
    }

    #[test]
    fn first_decisions_run_on_the_failsafe_and_queue_one_fetch() {
        let (lim, _) = limiter("60/min", Some("2/min"));
        assert_eq!(remaining(&lim, "a"), 1);
        let job = take(&lim).unwrap();
        assert_eq!((job.peer.as_str(), job.group.as_str()), ("a", "g"));
        // Single flight: the second decision queues nothing.
        assert_eq!(remaining(&lim, "a"), 0);
        assert_eq!(take(&lim), None);
        // 2 used of 2/min carry over: 98 left of 100/min.
        assert!(matches!(
            lim.finish_fetch(&job, ProviderAnswer::Quota(Some("100/min".parse().unwrap())), false),
            Landing::Landed(_)
        ));
        assert_eq!(decide(&lim, "a", None, 1, 0, true).report.unwrap().remaining, 97);
        assert_eq!(lim.quota("a", "g").unwrap().0.source, Source::Provider);
    }

    #[test]
    fn lowering_a_quota_keeps_the_debt() {
        let (lim, clock) = limiter("100/min", None);
        lim.set_quota("a", "g", Some("100/min".parse().unwrap())).unwrap();
        for _ in 0..80 {
            assert!(decide(&lim, "a", None, 1, 0, false).outcome.allowed);
        }
        lim.set_quota("a", "g", Some("50/min".parse().unwrap())).unwrap();
        // 80 requests at 50/min are 96 s of debt against a 60 s burst: the next admission is at 36 s.
        let refused = decide(&lim, "a", None, 1, 0, false).outcome;
        assert_eq!(refused, Outcome::refused(36 * S + 1_200_000_000));
        clock.advance_ns(37_200_000_000);
        assert!(decide(&lim, "a", None, 1, 0, false).outcome.allowed);
    }

    #[test]
    fn a_fetch_past_its_deadline_fails_and_its_late_answer_is_ignored() {
        let (lim, clock) = limiter("60/min", Some("5/min"));
        decide(&lim, "a", None, 1, 0, false);
        let job = take(&lim).unwrap();
        clock.advance_ns(5 * S);
        decide(&lim, "a", None, 1, 0, false);
        let (info, _) = lim.quota("a", "g").unwrap();
        assert_eq!((info.source, info.fetching, info.failures), (Source::Failsafe, false, 1));
        assert_eq!(lim.finish_fetch(&job, ProviderAnswer::Quota(None), false), Landing::Late);
        // Backoff: no new fetch before 1 s, one after.
        decide(&lim, "a", None, 1, 0, false);
        assert_eq!(take(&lim), None);
        clock.advance_ns(S);
        decide(&lim, "a", None, 1, 0, false);
        assert!(take(&lim).is_some());
    }

    #[test]
    fn a_queued_fetch_has_no_deadline_until_a_worker_starts_it() {
        let (lim, clock) = limiter("60/min", Some("5/min"));
        decide(&lim, "a", None, 1, 0, false);
        // Long past the quota timeout and any backoff, the job still waits: no failure, no second job.
        for _ in 0..5 {
            clock.advance_ns(10 * S);
            decide(&lim, "a", None, 1, 0, false);
        }
        let (info, _) = lim.quota("a", "g").unwrap();
        assert_eq!((info.fetching, info.failures), (true, 0));
        assert_eq!(lim.fetches().load(), (1, 0));
        // Started now: its deadline is the quota timeout from here.
        let job = take(&lim).unwrap();
        clock.advance_ns(5 * S - 1);
        decide(&lim, "a", None, 1, 0, false);
        assert_eq!(lim.quota("a", "g").unwrap().0.failures, 0);
        clock.advance_ns(1);
        decide(&lim, "a", None, 1, 0, false);
        assert_eq!(lim.quota("a", "g").unwrap().0.failures, 1);
        assert_eq!(lim.finish_fetch(&job, ProviderAnswer::Quota(None), false), Landing::Late);
    }

    #[test]
    fn a_job_superseded_while_queued_is_not_started() {
        let (lim, _) = limiter("60/min", Some("5/min"));
        decide(&lim, "a", None, 1, 0, false);
        lim.set_quota("a", "g", Some("10/min".parse().unwrap())).unwrap();
        let job = lim.fetches().take(Duration::ZERO).unwrap();
        assert!(!lim.start_fetch(&job));
    }

    #[test]
    fn failures_after_a_good_quota_keep_it_stale_and_the_ttl_refetches() {
        let (lim, clock) = limiter("60/min", Some("5/min"));
        decide(&lim, "a", None, 1, 0, false);
        let job = take(&lim).unwrap();
        lim.finish_fetch(&job, ProviderAnswer::Quota(Some("10/s".parse().unwrap())), false);
        clock.advance_ns(60 * S);
        decide(&lim, "a", None, 1, 0, false);
        let refetch = take(&lim).unwrap();
        assert_eq!(
            lim.finish_fetch(&refetch, ProviderAnswer::Failed(None), false),
            Landing::Failed { first: true, reason: None }
        );
        let (info, _) = lim.quota("a", "g").unwrap();
        assert_eq!((info.source, info.rate), (Source::Stale, Some("10/s".parse().unwrap())));
    }

    #[test]
    fn update_rule_carries_what_each_key_used() {
        let (lim, clock) = limiter("10/min", None);
        for _ in 0..10 {
            assert!(decide(&lim, "b", None, 1, 0, false).outcome.allowed);
        }
        // 10 used of 10/min: 10 left under 20/min, none more.
        lim.update_rule("g", Some("20/min".parse().unwrap()), None).unwrap();
        assert_eq!((0..15).filter(|_| decide(&lim, "b", None, 1, 0, false).outcome.allowed).count(), 10);
        // 20 used, lowered to 5/min: refused until the usage drains at 12 s a request (to 4 used).
        lim.update_rule("g", Some("5/min".parse().unwrap()), None).unwrap();
        assert_eq!(decide(&lim, "b", None, 1, 0, false).outcome, Outcome::refused(192 * S));
        clock.advance_ns(192 * S);
        assert!(decide(&lim, "b", None, 1, 0, false).outcome.allowed);
        assert!(lim.update_rule("nope", None, Some(3)).unwrap_err().message.contains("\"g\""));
    }

    #[test]
    fn usage_drains_at_the_new_rate_from_the_change_not_from_the_next_decision() {
        // Seen by a property test: 10 used of 20/s (burst 10), changed to 10/min (burst 5); 0.35 s later
        // the key must not have drained 7 requests at the old rate.
        let (lim, clock) = limiter("20/s", None);
        assert_eq!((0..10).filter(|_| decide(&lim, "d", None, 1, 0, false).outcome.allowed).count(), 10);
        lim.update_rule("g", Some("10/min".parse().unwrap()), Some(5)).unwrap();
        clock.advance_ns(350_000_000);
        assert!(!decide(&lim, "d", None, 1, 0, false).outcome.allowed);
    }

    #[test]
    fn a_longer_period_lets_no_burst_through() {
        // Seen by a property test: 20 used of 20/s, then 10/min, must not admit 9 more at once.
        let (lim, _) = limiter("20/s", None);
        assert_eq!((0..20).filter(|_| decide(&lim, "c", None, 1, 0, false).outcome.allowed).count(), 20);
        lim.update_rule("g", Some("10/min".parse().unwrap()), None).unwrap();
        assert!(!decide(&lim, "c", None, 1, 0, false).outcome.allowed);
    }
}
