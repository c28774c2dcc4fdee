//! States in this process's heap: a probed table of 32-byte slots and a map of sliding-log stamps,
//! one of each per shard, bounded with the other shards by the map's `max_keys`.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::{Counts, Owner, Slots};
use crate::algorithm::{Limit, Log, State, NO_LOG};
use crate::room::{BoundedTable, Freed, Tagged, IDENTITY_SHIFT, VACANT_TAG};

/// Sliding-log timestamps, by key identity, and the heap bytes they hold (kept as they change, so that
/// `stats()` never walks them).
#[derive(Debug, Default)]
pub(super) struct Logs {
    pub(super) map: HashMap<u64, Log, ahash::RandomState>,
    pub(super) bytes: usize,
}

/// A log's heap bytes: its stamps' buffer and its map entry.
pub(super) fn log_bytes(log: &Log) -> usize {
    log.heap_bytes() + LOG_ENTRY_BYTES
}
const LOG_ENTRY_BYTES: usize = 48;

impl Logs {
    fn get(&self, identity: u64) -> Option<&Log> {
        self.map.get(&identity)
    }

    /// Runs `change` on the log of `identity` (made empty if none), counting what it grows or shrinks.
    fn with<R>(&mut self, identity: u64, change: impl FnOnce(&mut Log) -> R) -> R {
        let (log, before) = match self.map.entry(identity) {
            Entry::Occupied(entry) => {
                let log = entry.into_mut();
                let before = log_bytes(log);
                (log, before)
            }
            Entry::Vacant(entry) => (entry.insert(Log::new()), 0),
        };
        let result = change(log);
        self.bytes = self.bytes + log_bytes(log) - before;
        result
    }

    fn take(&mut self, identity: u64) -> Log {
        if self.map.is_empty() {
            return Log::new();
        }
        let Some(log) = self.map.remove(&identity) else { return Log::new() };
        self.bytes -= log_bytes(&log);
        log
    }

    fn put(&mut self, identity: u64, log: Log) {
        self.bytes += log_bytes(&log);
        if let Some(old) = self.map.insert(identity, log) {
            self.bytes -= log_bytes(&old);
        }
    }

    fn remove(&mut self, identity: u64) {
        if let Some(old) = self.map.remove(&identity) {
            self.bytes -= log_bytes(&old);
        }
    }

    fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }

    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// 32 bytes, aligned to 32: a slot never straddles two cache lines, so finding a key that sits at its
/// home reads one line (see `probe`).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
pub(super) struct Slot {
    /// `identity << 8 | uses`; set by the table.
    tag: u64,
    state: State,
    /// Whose state it is, packed (see [`Owner`]).
    owner: u32,
}

impl Slot {
    #[inline]
    fn group(&self) -> u32 {
        Owner::unpack(self.owner).group
    }

    /// The slot's whole key: its tag's identity and the low byte kept beside it.
    fn key(&self) -> u64 {
        Owner::whole_key(self.identity(), self.owner)
    }
}

impl Tagged for Slot {
    #[inline]
    fn tag(&self) -> u64 {
        self.tag
    }

    #[inline]
    fn set_tag(&mut self, tag: u64) {
        self.tag = tag;
    }

    fn vacant() -> Self {
        Self { tag: VACANT_TAG, state: State::default(), owner: 0 }
    }
}

/// One shard's states in this process's heap. A state here is always read as written under the limit
/// the caller names: one process's states follow its own limits (a reconfiguration moves them).
#[derive(Debug)]
pub struct HeapSlots {
    pub(super) table: BoundedTable<Slot>,
    /// Sliding-log timestamps, by key identity; dropped with their slot.
    pub(super) logs: Logs,
}

impl HeapSlots {
    pub(super) fn new(table: BoundedTable<Slot>) -> Self {
        Self { table, logs: Logs::default() }
    }

    /// Makes room (see `room`): idle states go first (dropping one never lets a key admit more), then
    /// the least used; no state is pinned.
    fn make_room(table: &mut BoundedTable<Slot>, logs: &mut Logs, counts: &mut Counts, now: u64) {
        let _: Freed = table.make_room(
            |slot| slot.state.is_idle(now),
            |_| false,
            |slot, removal| {
                if !logs.is_empty() {
                    logs.remove(slot.identity());
                }
                // Every stored group was seen by `insert`, which sized the counts for it.
                let index = slot.group() as usize;
                counts.group_keys[index] -= 1;
                counts.removed(index, removal);
            },
        );
    }
}

impl Slots for HeapSlots {
    #[inline]
    fn state_mut(&mut self, key: u64) -> Option<&mut State> {
        self.table.get_mut(key).map(|slot| &mut slot.state)
    }

    #[inline]
    fn find(&self, key: u64) -> Option<State> {
        self.table.get(key).map(|s| s.state)
    }

    fn insert(&mut self, key: u64, state: State, now: u64, (owner, _): (Owner, &Limit), counts: &mut Counts) {
        let index = owner.group as usize;
        counts.size_for(index);
        let Self { table, logs } = self;
        table.insert(key, Slot { tag: 0, state, owner: owner.pack(key) }, |table| {
            Self::make_room(table, logs, counts, now);
        });
        counts.group_keys[index] += 1;
    }

    fn store(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit), counts: &mut Counts) {
        if let Some(slot) = self.table.get_mut(key) {
            slot.state = state;
            return;
        }
        self.insert(key, state, now, owned, counts);
    }

    #[inline]
    fn log(&self, key: u64) -> Cow<'_, Log> {
        Cow::Borrowed(self.logs.get(key >> IDENTITY_SHIFT).unwrap_or(&NO_LOG))
    }

    fn with_log<R>(&mut self, key: u64, change: impl FnOnce(&mut Log) -> R, _: &mut Counts) -> R {
        self.logs.with(key >> IDENTITY_SHIFT, change)
    }

    fn take_log(&mut self, key: u64, _: &mut Counts) -> Log {
        self.logs.take(key >> IDENTITY_SHIFT)
    }

    fn put_log(&mut self, key: u64, log: Log, _: &mut Counts) {
        self.logs.put(key >> IDENTITY_SHIFT, log);
    }

    fn change_group<C>(
        &mut self,
        group: u32,
        data: &mut C,
        mut change: impl FnMut(&mut C, u64, usize, &mut Option<Limit>, &mut State, &mut Log) -> bool,
        counts: &mut Counts,
    ) {
        let Self { table, logs } = self;
        table.retain(|slot| {
            let owner = Owner::unpack(slot.owner);
            if owner.group != group {
                return true;
            }
            let identity = slot.identity();
            let mut log = logs.take(identity);
            let mut state = slot.state;
            let keep = change(data, slot.key(), owner.limit, &mut None, &mut state, &mut log);
            slot.state = state;
            if keep {
                if !log.is_empty() {
                    logs.put(identity, log);
                }
            } else {
                counts.group_keys[group as usize] -= 1;
            }
            keep
        });
    }

    fn remove(&mut self, key: u64, counts: &mut Counts) -> bool {
        let Some(slot) = self.table.remove(key) else { return false };
        self.logs.remove(slot.identity());
        counts.group_keys[slot.group() as usize] -= 1;
        true
    }

    fn len(&self) -> usize {
        self.table.len()
    }

    fn clear(&mut self, counts: &mut Counts) {
        self.table.clear();
        self.logs.clear();
        counts.group_keys.fill(0);
    }

    fn allocated_bytes(&self) -> usize {
        self.table.allocated_bytes() + self.logs.bytes
    }
}
