//! Per-key quotas: what each (peer, group) key is allowed, fetched off the hot path.
//!
//! A key's quota record lives in its shard beside its states, so a decision reads it under the lock it
//! already holds. The first decision of a key creates the record on the failsafe and queues one fetch
//! (single flight: the record says a fetch is running); workers outside the core take jobs from the
//! [`FetchQueue`], call the provider and hand the answer back. A fetch that fails or overruns its
//! deadline keeps the last good quota and is retried with exponential backoff; after the TTL the next
//! use re-fetches while the old quota keeps serving. Records are bounded like states: past `max_keys`,
//! records with nothing to lose go first (no quota landed, due for a fetch), then the least used of
//! the records used only once or due for a re-fetch, and only then the least used of the rest.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::algorithm::Limit;
use crate::rate::{Rate, NANOS_PER_SEC};
use crate::room::{BoundedTable, Freed, Tagged, VACANT_TAG};

/// The first retry after a failed fetch; each further failure doubles it, up to `MAX_BACKOFF_NS`.
pub const FIRST_BACKOFF_NS: u64 = NANOS_PER_SEC;
pub const MAX_BACKOFF_NS: u64 = 300 * NANOS_PER_SEC;

/// `next_at` of a record whose fetch waits for a worker: never due, so no use fails or repeats it.
pub const QUEUED: u64 = u64::MAX;

/// How quotas are obtained, fixed at construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSettings {
    /// Whether a provider answers fetches; without one, quotas come only from `set_quota`.
    pub provider: bool,
    /// The rate of a key whose first fetch has not landed (`None`: the rule's own rate).
    pub failsafe: Option<Rate>,
    pub ttl_ns: u64,
    pub timeout_ns: u64,
    /// Jobs waiting for a worker; past it, a key stays on its current quota and retries later.
    pub queue_capacity: usize,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        Self {
            provider: false,
            failsafe: None,
            ttl_ns: 300 * NANOS_PER_SEC,
            timeout_ns: 5 * NANOS_PER_SEC,
            queue_capacity: 10_000,
        }
    }
}

impl QuotaSettings {
    /// The wait before the next fetch after `failures` failures in a row.
    #[must_use]
    pub fn backoff(&self, failures: u32) -> u64 {
        let doubled = FIRST_BACKOFF_NS.saturating_mul(1u64 << failures.saturating_sub(1).min(32));
        doubled.min(MAX_BACKOFF_NS).min(self.ttl_ns.max(FIRST_BACKOFF_NS))
    }
}

/// Where a key's quota came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Provider,
    /// The first fetch has not landed (or has failed every time).
    Failsafe,
    /// The last good quota, kept while fetches fail.
    Stale,
    Set,
    /// The rule's own rate: the provider said `None`, or nothing is known and there is no failsafe.
    Rule,
}

impl Source {
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Provider => "provider",
            Self::Failsafe => "failsafe",
            Self::Stale => "stale",
            Self::Set => "set",
            Self::Rule => "rule",
        }
    }
}

/// What `quota()` reports of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaInfo {
    /// The quota's rate; `None`: the rule's own.
    pub rate: Option<Rate>,
    pub source: Source,
    /// When the quota took effect (`None`: the key has no record).
    pub since: Option<u64>,
    pub fetching: bool,
    pub failures: u32,
}

/// One key's quota record.
// Its flags are independent facts, each read on its own, not the states of one machine.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Copy)]
pub struct QuotaSlot {
    /// `identity << 8 | uses`, as in the state map; set by the table.
    tag: u64,
    /// The limit that replaces the group's first rate limit (`None`: the rule's own).
    pub quota: Option<Limit>,
    /// The rules version `quota` was derived for; a reconfiguration re-derives it.
    pub version: u64,
    /// The rules version whose moves a remote store was sent with the key's last change of quota
    /// (computed with the record as it was before): later calls send only the moves after it.
    pub moves_sent: u64,
    pub source: Source,
    /// Whether a good quota (from the provider or `set_quota`) ever landed.
    pub good: bool,
    /// The key had state before this record (its earlier record was evicted): what limit made that
    /// state is unknown, so the first quota to land reads it as it is instead of rescaling it.
    pub adopted: bool,
    /// A fetch is queued or running (single flight).
    pub fetching: bool,
    /// The key was used again after its record was made: a key worth keeping, unlike a flood's one-shot
    /// keys. Kept apart from the use count, which a long enough flood decays to nothing.
    pub reused: bool,
    /// Identifies the running fetch; an answer with another token is late and ignored.
    pub token: u32,
    pub failures: u32,
    pub since: u64,
    /// When to fetch next (TTL or backoff); while a worker runs the fetch, its deadline; while the fetch
    /// waits in the queue, [`QUEUED`]: the quota timeout (`Quotas(timeout=)`) counts from when a worker starts it.
    pub next_at: u64,
}

impl Tagged for QuotaSlot {
    #[inline]
    fn tag(&self) -> u64 {
        self.tag
    }

    #[inline]
    fn set_tag(&mut self, tag: u64) {
        self.tag = tag;
    }

    fn vacant() -> Self {
        Self { tag: VACANT_TAG, ..Self::new(None, Source::Rule, 0, 0) }
    }
}

impl QuotaSlot {
    fn new(quota: Option<Limit>, source: Source, version: u64, now: u64) -> Self {
        Self {
            tag: 0,
            quota,
            version,
            moves_sent: version,
            source,
            good: false,
            adopted: false,
            fetching: false,
            reused: false,
            token: 0,
            failures: 0,
            since: now,
            next_at: now,
        }
    }

    #[must_use]
    pub fn info(&self) -> QuotaInfo {
        QuotaInfo {
            rate: self.quota.and_then(|l| l.rate),
            source: self.source,
            since: Some(self.since),
            fetching: self.fetching,
            failures: self.failures,
        }
    }

    /// Records a failed fetch at `now`; true when it is the first of a run (worth logging).
    pub fn fail(&mut self, settings: &QuotaSettings, now: u64) -> bool {
        self.fetching = false;
        self.token = self.token.wrapping_add(1);
        self.failures = self.failures.saturating_add(1);
        if self.good {
            self.source = Source::Stale;
        }
        self.next_at = now.saturating_add(settings.backoff(self.failures));
        self.failures == 1
    }

    /// Records that the provider knows no such key: it stays on what it runs on (the failsafe) and
    /// asks again after the TTL. Not a failure: nothing is wrong with the provider.
    pub fn unknown(&mut self, settings: &QuotaSettings, now: u64) {
        self.fetching = false;
        self.token = self.token.wrapping_add(1);
        self.next_at = now.saturating_add(settings.ttl_ns);
    }

    /// Installs a good quota at `now`.
    pub fn land(&mut self, quota: Option<Limit>, source: Source, settings: &QuotaSettings, now: u64) {
        self.quota = quota;
        self.source = source;
        self.good = true;
        self.adopted = false;
        self.fetching = false;
        self.token = self.token.wrapping_add(1);
        self.failures = 0;
        self.since = now;
        self.next_at = now.saturating_add(settings.ttl_ns);
    }
}

/// One shard's quota records.
#[derive(Debug)]
pub struct QuotaTable {
    table: BoundedTable<QuotaSlot>,
}

impl QuotaTable {
    /// A table of one of `shards` shards, which hold at most `max_records` records between them.
    #[must_use]
    pub fn new(records: Arc<AtomicUsize>, max_records: usize, shards: usize) -> Self {
        Self { table: BoundedTable::new(records, max_records, shards) }
    }

    #[must_use]
    pub fn get(&self, key: u64) -> Option<&QuotaSlot> {
        self.table.get(key)
    }

    /// The record of `key`, counted as a use.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut QuotaSlot> {
        self.table.get_mut(key)
    }

    /// A new record for `key` (which `get_mut` did not find), made room for first. Records without a
    /// good quota that are due for a fetch go first (the next use fetches anyway: nothing is lost).
    /// Then the least used of the expendable ones: used once (a flood of one-shot keys evicts its own
    /// records) or due for a re-fetch. Only if that frees too little, the least used of any. A busy
    /// key's use count alone would not protect it: a flood of several times the bound between two of
    /// its uses halves the count to nothing, below a new key's one use. A record whose fetch is queued
    /// or running stays: its answer must find it.
    pub fn insert(&mut self, key: u64, quota: Option<Limit>, source: Source, version: u64, now: u64) -> &mut QuotaSlot {
        self.table.insert(key, QuotaSlot::new(quota, source, version, now), |table| {
            let due = |slot: &QuotaSlot| now >= slot.next_at;
            let want = (table.len() / 8).max(1);
            let Freed { dropped, evicted } = table.make_room(
                |slot| !slot.fetching && !slot.good && due(slot),
                |slot| slot.fetching || (slot.reused && !due(slot)),
                |_, _| (),
            );
            if dropped + evicted < want {
                table.make_room(|_| false, |slot| slot.fetching, |_, _| ());
            }
        })
    }

    pub fn remove(&mut self, key: u64) {
        self.table.remove(key);
    }

    pub fn clear(&mut self) {
        self.table.clear();
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.table.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Approximate heap bytes.
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        self.table.allocated_bytes()
    }
}

/// A fetch for a worker to run: call the provider for (peer, group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchJob {
    pub peer: String,
    pub group: String,
    pub token: u32,
    /// When a worker took it: the quota timeout (`Quotas(timeout=)`) counts from there, in real time (the limiter's clock
    /// may be a manual one, while the provider's I/O takes real time).
    pub taken: Option<Instant>,
}

impl FetchJob {
    #[must_use]
    pub fn new(peer: String, group: String, token: u32) -> Self {
        Self { peer, group, token, taken: None }
    }
}

#[derive(Debug, Default)]
struct QueueState {
    jobs: VecDeque<FetchJob>,
    /// Jobs taken by workers and not yet finished.
    running: usize,
    closed: bool,
}

/// Fetch jobs between the decisions that queue them and the workers that run them.
#[derive(Debug)]
pub struct FetchQueue {
    state: Mutex<QueueState>,
    /// Signalled when a job is queued or the queue closes.
    ready: Condvar,
    /// Signalled when a fetch lands or the queue closes.
    landed: Condvar,
    /// Counts finished fetches (changed under `state`'s lock, read without it), so a waiter never
    /// misses one that lands between its check and its wait.
    landings: AtomicU64,
    capacity: usize,
}

impl FetchQueue {
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::default(),
            ready: Condvar::new(),
            landed: Condvar::new(),
            landings: AtomicU64::new(0),
            capacity: capacity.max(1),
        }
    }

    /// Queues a job; false when the queue is full or closed.
    pub fn push(&self, job: FetchJob) -> bool {
        let mut state = self.state.lock();
        if state.closed || state.jobs.len() >= self.capacity {
            return false;
        }
        state.jobs.push_back(job);
        drop(state);
        self.ready.notify_one();
        true
    }

    /// The next job, waiting up to `timeout` for one; `None` on timeout or once closed.
    pub fn take(&self, timeout: Duration) -> Option<FetchJob> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        loop {
            if state.closed {
                return None;
            }
            if let Some(mut job) = state.jobs.pop_front() {
                state.running += 1;
                job.taken = Some(Instant::now());
                return Some(job);
            }
            if self.ready.wait_until(&mut state, deadline).timed_out() {
                return None;
            }
        }
    }

    /// A worker is done with a job it took (whatever came of it).
    pub fn done(&self) {
        let mut state = self.state.lock();
        state.running = state.running.saturating_sub(1);
        self.landings.fetch_add(1, Ordering::Release);
        drop(state);
        self.landed.notify_all();
    }

    /// Wakes quota waiters after a quota was set directly.
    pub fn notify_landed(&self) {
        let state = self.state.lock();
        self.landings.fetch_add(1, Ordering::Release);
        drop(state);
        self.landed.notify_all();
    }

    /// How many fetches have landed so far; read it before checking a key, then `wait_landed` on it.
    #[must_use]
    pub fn landed(&self) -> u64 {
        self.landings.load(Ordering::Acquire)
    }

    /// Waits until a fetch lands after `seen` (`landed()`), or `deadline`. False on timeout or close.
    pub fn wait_landed(&self, seen: u64, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        while self.landed() == seen && !state.closed {
            if self.landed.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        self.landed() != seen
    }

    /// Waits until no job is queued or running, or `deadline`; true when idle.
    pub fn wait_idle(&self, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        while !(state.closed || state.jobs.is_empty() && state.running == 0) {
            if self.landed.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        state.jobs.is_empty() && state.running == 0
    }

    /// Stops the workers: `take` returns `None` from now on; queued jobs are dropped.
    pub fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        state.jobs.clear();
        drop(state);
        self.ready.notify_all();
        self.landed.notify_all();
    }

    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// (queued, running).
    #[must_use]
    pub fn load(&self) -> (usize, usize) {
        let state = self.state.lock();
        (state.jobs.len(), state.running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = NANOS_PER_SEC;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_the_ttl() {
        let settings = QuotaSettings { ttl_ns: 60 * S, ..QuotaSettings::default() };
        let waits: Vec<u64> = (1..=8).map(|f| settings.backoff(f) / S).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(QuotaSettings::default().backoff(40), 300 * S);
    }

    #[test]
    fn a_full_queue_refuses_and_a_closed_one_wakes_its_workers() {
        let queue = FetchQueue::new(1);
        let job = FetchJob::new("p".into(), "g".into(), 1);
        assert!(queue.push(job.clone()));
        assert!(!queue.push(job.clone()));
        let taken = queue.take(Duration::ZERO).unwrap();
        assert_eq!((taken.token, taken.taken.is_some()), (1, true));
        assert_eq!(queue.load(), (0, 1));
        queue.done();
        assert!(queue.wait_idle(Instant::now()));
        queue.close();
        assert_eq!(queue.take(Duration::from_secs(5)), None);
    }

    #[test]
    fn one_shot_records_make_room_for_each_other_and_reused_ones_stay() {
        let records = Arc::new(AtomicUsize::new(0));
        let mut table = QuotaTable::new(Arc::clone(&records), 64, 1);
        let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
        let busy: Vec<u64> = (0..8u64).map(|i| hasher.hash_one(("busy", i))).collect();
        for &key in &busy {
            let slot = table.insert(key, None, Source::Set, 0, 0);
            (slot.good, slot.reused, slot.next_at) = (true, true, u64::MAX);
        }
        // Never used again: their use counts decay to nothing, yet the flood evicts only its own records.
        for i in 0..10_000u64 {
            table.insert(hasher.hash_one(i), None, Source::Failsafe, 0, 0).next_at = 1;
        }
        assert!(busy.iter().all(|&key| table.get(key).is_some()));
        assert!(table.len() <= 64, "{}", table.len());
        // With only reused records left to evict, the least used of them go: the bound holds.
        for i in 0..10_000u64 {
            let slot = table.insert(hasher.hash_one(("reused", i)), None, Source::Set, 0, 0);
            (slot.good, slot.reused, slot.next_at) = (true, true, u64::MAX);
        }
        assert!(table.len() <= 64, "{}", table.len());
        assert_eq!(records.load(Ordering::Relaxed), table.len());
    }

    #[test]
    fn records_are_bounded() {
        let records = Arc::new(AtomicUsize::new(0));
        let mut table = QuotaTable::new(Arc::clone(&records), 64, 1);
        let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
        for i in 0..10_000u64 {
            let slot = table.insert(hasher.hash_one(i), None, Source::Failsafe, 0, 0);
            slot.next_at = 1;
        }
        assert!(table.len() <= 64, "{}", table.len());
        // Sized back to its share after every pass, whatever the churn.
        assert!(table.table.capacity() < 128, "{}", table.table.capacity());
        assert_eq!(records.load(Ordering::Relaxed), table.len());
    }
}
