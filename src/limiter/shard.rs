//! What a shard holds beside its states, and a shard locked for one peer or one key.

use std::collections::HashMap;
use std::sync::Arc;

use super::Limiter;
use crate::heavy_hitters::TopCounts;
use crate::metrics::GroupCounters;
use crate::quota::QuotaTable;
use crate::rules::{Group, Rules};
use crate::state_map::{Shard, ShardGuard};

/// Admissions of one key since the last `drain_pending`.
#[derive(Debug, Clone)]
pub struct Pending {
    pub peer: Box<str>,
    pub group: u32,
    pub units: u64,
}

/// What one shard holds beside its states: counters, quota records, pending usage, and the rules its
/// keys follow.
///
/// In order: what a decision reads first (its rules, its group's counters, whether a wait is ahead),
/// together in the shard's first lines (see `state_map::Shard`); the sketch of refused peers, large and
/// used only for refusals, in a box of its own, made at the shard's first refusal (a map in a shared
/// region has thousands of shards).
#[derive(Debug)]
#[repr(C)]
pub struct ShardData {
    /// The rules in force, read under the shard's lock so a decision needs no other synchronisation; a
    /// reconfiguration replaces them shard by shard. Taken out while a decision uses them.
    pub(super) rules: Option<Arc<Rules>>,
    /// By group id (see `GroupIds`), grown when a group is first counted here.
    groups: Vec<GroupCounters>,
    /// The admissions of keys with waits ahead, to give a cancelled wait back (see `waits`).
    pub(super) waits: super::waits::Ledgers,
    /// The peers refused most, by group id (grown when a group first refuses here), and in every group.
    refused: Vec<TopCounts>,
    refused_anywhere: Option<Box<TopCounts>>,
    /// Requests of exempt peers or paths that route to no group.
    pub exempt: u64,
    pub quotas: QuotaTable,
    /// Admissions by key, kept only when the limiter tracks usage.
    pub pending: HashMap<u64, Pending, ahash::RandomState>,
    /// What the store keeps beside this shard's keys (lease mode's leases), under the same lock.
    pub kept: Kept,
}

/// A store's own data in a shard, of the store's own type (found again by downcasting): what it keeps per
/// key is reached with the lock and the peer's hash the decision already has.
pub type Kept = Option<Box<dyn std::any::Any + Send>>;

impl ShardData {
    pub(super) fn new(quotas: QuotaTable, rules: &Arc<Rules>) -> Self {
        Self {
            groups: Vec::new(),
            refused: Vec::new(),
            refused_anywhere: None,
            exempt: 0,
            quotas,
            pending: HashMap::default(),
            rules: Some(Arc::clone(rules)),
            waits: super::waits::Ledgers::default(),
            kept: None,
        }
    }

    /// The counters of group `id`.
    #[inline]
    pub fn counters(&mut self, id: u32) -> &mut GroupCounters {
        let id = id as usize;
        if id >= self.groups.len() {
            self.grow(id);
        }
        &mut self.groups[id]
    }

    /// Exactly as many as needed (a `Vec` would make room for 4 at least, and a map in a shared region
    /// has thousands of shards).
    #[cold]
    fn grow(&mut self, id: usize) {
        self.groups.reserve_exact(id + 1 - self.groups.len());
        self.groups.resize(id + 1, GroupCounters::default());
    }

    /// Counts one decision of group `id` for `peer` (hashed `hash`), made here or in a backend:
    /// `wait_ns` is how long an admission waits for its slot; a refusal goes to the refused sketches.
    // Always: it sits in the decision's hot path, where a call of its own costs a few ns.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn record_decision(&mut self, id: u32, peer: &str, hash: u64, allowed: bool, wait_ns: u64) {
        self.counters(id).record(allowed, wait_ns);
        if !allowed {
            self.observe_refusal(id, peer, hash);
        }
    }

    /// Counts a decision that took only concurrency permits (`Take::Permits`): the second step of a
    /// request whose rate admission was counted already (it waited for its slot), so not a new request.
    /// Admitted, it adds nothing; refused, that request is refused after all: one request, one count.
    #[cold]
    pub fn record_permits(&mut self, id: u32, peer: &str, hash: u64, allowed: bool) {
        if allowed {
            return;
        }
        let counters = self.counters(id);
        if counters.allowed > 0 {
            counters.allowed -= 1;
        } else {
            // No admission counted before it (permits taken alone): a request of its own.
            counters.requests += 1;
        }
        counters.refused += 1;
        self.observe_refusal(id, peer, hash);
    }

    /// Counts a refusal of `peer` (hashed `hash`) by group `id` in the sketch of who is refused most.
    #[cold]
    fn observe_refusal(&mut self, id: u32, peer: &str, hash: u64) {
        let id = id as usize;
        if id >= self.refused.len() {
            self.refused.resize_with(id + 1, TopCounts::default);
        }
        self.refused[id].observe(peer, hash);
        self.refused_anywhere.get_or_insert_default().observe(peer, hash);
    }

    /// The sketch of group `id`'s refused peers (`None`: of every group's), if it refused any here.
    #[must_use]
    pub fn refused(&self, id: Option<u32>) -> Option<&TopCounts> {
        match id {
            Some(id) => self.refused.get(id as usize),
            None => self.refused_anywhere.as_deref(),
        }
    }

    /// Approximate heap bytes of the refused peers' sketches.
    #[must_use]
    pub fn sketch_bytes(&self) -> usize {
        self.refused.iter().chain(self.refused_anywhere.as_deref()).map(TopCounts::allocated_bytes).sum()
    }

    /// The counters of group `id`, if this shard has counted it.
    #[must_use]
    pub fn counted(&self, id: u32) -> Option<&GroupCounters> {
        self.groups.get(id as usize)
    }
}

/// A peer's shard, locked, with the rules it follows taken out of it (and put back on drop), so
/// reading them costs no reference count. The hot path (`decide_path`) does the same by hand, to keep
/// the drop's call out of it; both hand a `Held` to the steps.
pub(crate) struct Locked<'a> {
    pub shard: ShardGuard<'a, ShardData>,
    rules: Option<Arc<Rules>>,
    pub peer_hash: u64,
}

impl<'a> Locked<'a> {
    /// `current` gives the rules when the shard holds none (only after a panic in the hot path);
    /// it must not wait for a shard.
    #[inline]
    pub fn new(mut shard: ShardGuard<'a, ShardData>, peer_hash: u64, current: impl FnOnce() -> Arc<Rules>) -> Self {
        let rules = shard.data.rules.take().unwrap_or_else(current);
        Self { shard, rules: Some(rules), peer_hash }
    }

    #[inline]
    pub fn rules(&self) -> &Rules {
        self.rules.as_deref().expect("rules are present until drop")
    }

    /// The shard and its rules, for the steps.
    #[inline]
    pub fn held(&mut self) -> Held<'_> {
        let rules = self.rules.as_deref().expect("rules are present until drop");
        Held { shard: &mut self.shard, rules, peer_hash: self.peer_hash }
    }

    /// This lock, for the key of this peer in group `index`.
    #[inline]
    pub fn into_key(mut self, index: usize) -> KeyLock<'a> {
        let key = self.held().key(index);
        KeyLock { locked: self, key }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.shard.data.rules = self.rules.take();
    }
}

/// A locked shard and the rules its keys follow, borrowed for the steps of one call.
pub(crate) struct Held<'s> {
    pub shard: &'s mut Shard<ShardData>,
    pub rules: &'s Rules,
    pub peer_hash: u64,
}

impl Held<'_> {
    /// The key of this peer in group `index`.
    #[inline]
    pub fn key(&self, index: usize) -> Key {
        Key { index, base: Limiter::key(self.peer_hash, self.rules.groups[index].seed) }
    }

    /// The rules, the group of `key` and the shard, borrowed apart.
    #[inline]
    pub fn key_parts(&mut self, key: Key) -> (&Rules, &Group, &mut Shard<ShardData>) {
        (self.rules, &self.rules.groups[key.index], &mut *self.shard)
    }
}

/// One (peer, group) key of a locked shard: its group's index and its base key (its quota record's
/// key; its states use keys related to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub index: usize,
    pub base: u64,
}

/// A key with its shard locked, for the calls that lock one key.
pub(crate) struct KeyLock<'a> {
    pub locked: Locked<'a>,
    pub key: Key,
}

impl KeyLock<'_> {
    /// The rules, the group and the shard, borrowed apart.
    #[inline]
    pub fn parts(&mut self) -> (&Rules, &Group, &mut Shard<ShardData>) {
        let rules = self.locked.rules.as_deref().expect("rules are present until drop");
        (rules, &rules.groups[self.key.index], &mut self.locked.shard)
    }

    #[inline]
    pub fn group(&self) -> &Group {
        &self.locked.rules().groups[self.key.index]
    }

    #[inline]
    pub fn base(&self) -> u64 {
        self.key.base
    }
}
