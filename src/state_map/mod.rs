//! The lock-striped state map: shards of `parking_lot::Mutex` over a probed table of slots, bounded by
//! `max_keys`.
//!
//! A slot is 32 bytes: a 56-bit key identity with an 8-bit use counter in the same word, the
//! algorithm's 16-byte [`State`], and the id of the key's group, so that each shard keeps per-group
//! counts of keys and evictions without walking its keys. The peer string is never stored. When the
//! map holds `max_keys` keys, the shard that inserts makes room with one pass (see `room`): it drops
//! every idle state (which never lets a key admit more than it could have; see `State`), decays use
//! counters, and evicts the least frequently used. The bound is global (one atomic count, touched only
//! on inserts and removals), so uneven shards never evict before the map is full.
//! So a flood of one-shot keys evicts one-shot keys, never a busy key, and the cost of eviction is
//! amortised to a few slot visits per insert.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::borrow::Cow;

use parking_lot::{Mutex, MutexGuard};

use crate::algorithm::{Limit, Log, State, NO_LOG};
use crate::room::{BoundedTable, Freed, Removal, Tagged, IDENTITY_SHIFT, VACANT_TAG};
use crate::shared::layout::SharedRegion;
use crate::shared::lock::Guard;
use crate::shared::table::{RegionSlot, RegionTable};

const MAX_SHARDS: usize = 64;
/// The longest a decision waits for a shared region's shard that another process holds: one stopped
/// holding it (SIGSTOP, a debugger, a frozen container) keeps it for the whole stop, and every process
/// deciding for its keys would wait as long.
pub const STALL: Duration = Duration::from_millis(50);
pub const MAX_SHARED_SHARDS: usize = 4096;
/// `related_key`'s multiplier (odd, so invertible modulo 2³²) and its inverse.
const RELATED_MIX: u32 = 0x85EB_CA6B;
const RELATED_MIX_INVERSE: u32 = {
    // Newton's iteration doubles the correct low bits each step: 5 steps reach 32.
    let mut inverse = RELATED_MIX;
    let mut step = 0;
    while step < 5 {
        inverse = inverse.wrapping_mul(2u32.wrapping_sub(RELATED_MIX.wrapping_mul(inverse)));
        step += 1;
    }
    inverse
};
/// Keys per shard below which a limiter gets fewer shards (tiny `max_keys` values).
const MIN_KEYS_PER_SHARD: usize = 256;

/// Sliding-log timestamps, by key identity, and the heap bytes they hold (kept as they change, so that
/// `stats()` never walks them).
#[derive(Debug, Default)]
struct Logs {
    map: HashMap<u64, Log, ahash::RandomState>,
    bytes: usize,
}

/// A log's heap bytes: its stamps' buffer and its map entry.
fn log_bytes(log: &Log) -> usize {
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
struct Slot {
    /// `identity << 8 | uses`; set by the table.
    tag: u64,
    state: State,
    /// Whose state it is, packed (see [`Owner`]).
    owner: u32,
}

/// Whose state a slot holds: the key's group (which per-group counts it is part of) and which of the
/// group's limits. A slot keeps both, and the low byte of its key that its tag lacks, so that a walk
/// over the store can name every key (a reconfiguration moves each state to its new limit at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub group: u32,
    pub limit: usize,
}

impl Owner {
    /// Group ids below 4096 (`rules::MAX_GROUP_NAMES`), limits below 64 (a rule's most).
    pub(crate) const GROUP_BITS: u32 = 12;
    pub(crate) const LIMIT_BITS: u32 = 6;

    #[must_use]
    pub const fn new(group: u32, limit: usize) -> Self {
        Self { group, limit }
    }

    #[inline]
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) fn pack(self, key: u64) -> u32 {
        let low_byte = (key & 0xFF) as u32;
        self.group | (self.limit as u32) << Self::GROUP_BITS | low_byte << (Self::GROUP_BITS + Self::LIMIT_BITS)
    }

    /// The whole key of a slot of `identity` whose packed owner is `packed` (which keeps the key's low
    /// byte, the one its tag lacks).
    pub(crate) fn whole_key(identity: u64, packed: u32) -> u64 {
        identity << IDENTITY_SHIFT | u64::from(packed >> (Self::GROUP_BITS + Self::LIMIT_BITS) & 0xFF)
    }

    #[inline]
    pub(crate) fn unpack(packed: u32) -> Self {
        Self { group: packed & ((1 << Self::GROUP_BITS) - 1), limit: (packed >> Self::GROUP_BITS & 0x3F) as usize }
    }
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

/// One stripe of the map, with the per-group counters that are updated under the same lock.
#[derive(Debug)]
pub struct Shard<C> {
    /// Bounded with the other shards by the store's `max_keys`.
    table: BoundedTable<Slot>,
    /// Sliding-log timestamps, by key identity; dropped with their slot.
    logs: Logs,
    /// States held and states evicted, per group id (grown when an id is first inserted). Dropping an
    /// idle state is not an eviction.
    group_keys: Vec<u64>,
    group_evictions: Vec<u64>,
    /// Idle states dropped to make room, per group id.
    group_dropped: Vec<u64>,
    pub evictions: u64,
    /// Where the states are when they live in a shared region rather than in `table` and `logs` (each
    /// method below goes there instead; the region's lock is held with this shard's).
    region: Option<RegionPart>,
    pub data: C,
}

/// The region's shards one shard of the process covers: a region has more shards than a process (see
/// `StateMap::shared_shard_count`), so each of the process's shards holds several, of which a lock of a
/// key takes one (`current`) and a walk takes all.
#[derive(Debug)]
struct RegionPart {
    tables: Box<[RegionTable]>,
    /// The table the lock of a key took.
    current: usize,
    region: Arc<SharedRegion>,
    /// The region's ids of the limits this shard has decided under, most recent first (a group's few
    /// limits and quotas: a short scan beats a hash).
    defs: Vec<(Limit, u16)>,
}

impl RegionPart {
    /// The table locked for the key the shard was locked for.
    #[inline]
    fn table(&mut self) -> &mut RegionTable {
        &mut self.tables[self.current]
    }

    #[inline]
    fn table_ref(&self) -> &RegionTable {
        &self.tables[self.current]
    }

    /// The region's id of `limit`, registered there if new (0: the region holds no more).
    #[inline]
    fn def_of(&mut self, limit: &Limit) -> u16 {
        def_in(&self.region, &mut self.defs, limit)
    }
}

/// The id of `limit` in `region`, through `defs`, the ids a shard knows (most recent first).
#[inline]
fn def_in(region: &SharedRegion, defs: &mut Vec<(Limit, u16)>, limit: &Limit) -> u16 {
    if let Some(&(_, def)) = defs.first().filter(|(known, _)| known == limit) {
        return def;
    }
    def_in_cold(region, defs, limit)
}

#[cold]
fn def_in_cold(region: &SharedRegion, defs: &mut Vec<(Limit, u16)>, limit: &Limit) -> u16 {
    let def = match defs.iter().position(|(known, _)| known == limit) {
        Some(at) => defs.remove(at).1,
        None => region.def_id(limit),
    };
    defs.truncate(15);
    defs.insert(0, (*limit, def));
    def
}

/// A slot found for a change, in memory or in a region.
enum SlotRef<'a> {
    Memory(&'a mut Slot),
    Region(&'a mut RegionSlot),
}

impl SlotRef<'_> {
    /// Its state, copied out: a change is made on the copy and written back with `set`.
    #[inline]
    fn state(&self) -> State {
        match self {
            Self::Memory(slot) => slot.state,
            Self::Region(slot) => slot.state,
        }
    }

    #[inline]
    fn set(self, state: State) {
        match self {
            Self::Memory(slot) => slot.state = state,
            Self::Region(slot) => slot.state = state,
        }
    }
}

/// Counts a state the region removed to make room, in this process's per-group counts.
fn count_removal(
    (group_evictions, group_dropped, evictions): (&mut Vec<u64>, &mut Vec<u64>, &mut u64),
    packed: u32,
    removal: Removal,
) {
    let index = Owner::unpack(packed).group as usize;
    if index >= group_evictions.len() {
        group_evictions.resize(index + 1, 0);
        group_dropped.resize(index + 1, 0);
    }
    match removal {
        Removal::Evicted => {
            group_evictions[index] += 1;
            *evictions += 1;
        }
        Removal::Dropped => group_dropped[index] += 1,
    }
}

impl<C> Shard<C> {
    /// The slot of `key`, wherever the states live, counted as a use.
    #[inline]
    fn slot_mut(&mut self, key: u64) -> Option<SlotRef<'_>> {
        match &mut self.region {
            Some(region) => region.table().get_mut(key).map(SlotRef::Region),
            None => self.table.get_mut(key).map(SlotRef::Memory),
        }
    }

    /// The state of `key` (a copy), counted as a use.
    #[inline]
    pub fn touch(&mut self, key: u64) -> Option<State> {
        self.slot_mut(key).map(|slot| slot.state())
    }

    /// In a shared region, makes the state of `key` (if any) one written under `limit`: a state another
    /// process wrote under another limit (other rules in a rolling deploy, a `reload()`, another quota)
    /// is converted as a reconfiguration converts it, keeping what it used, never read as if written
    /// under this one. Nothing in memory, where one process's states follow its limits. `def`: the
    /// region's id of `limit` when known (0: looked up). The state before and after, when converted.
    #[inline]
    pub fn reconcile(&mut self, key: u64, (limit, def): (&Limit, u16), now: u64) -> Option<(State, State)> {
        let region = self.region.as_mut()?;
        let def = if def == 0 { region.def_of(limit) } else { def };
        let was = region.table_ref().get(key).map(RegionSlot::def)?;
        if was == def {
            return None;
        }
        self.convert(key, was, limit, def, now)
    }

    /// Whether the states live in a shared region (where `reconcile` converts them).
    #[inline]
    #[must_use]
    pub const fn in_region(&self) -> bool {
        self.region.is_some()
    }

    /// Converts the region state of `key`, written under limit `was`, to `limit` (id `def`).
    #[cold]
    fn convert(&mut self, key: u64, was: u16, limit: &Limit, def: u16, now: u64) -> Option<(State, State)> {
        let region = self.region.as_mut()?;
        // An unrecorded writer (the region held no more ids), or one the region cannot read back: read
        // as written under `limit`, as every state was before states said what wrote them.
        let from = region.region.limit_def(was);
        let table = region.table();
        let slot = table.get_mut(key)?;
        slot.set_def(def);
        let from = from?;
        let state = slot.state;
        let logs = from.uses_log() || limit.uses_log();
        let mut log = if logs { table.log(key) } else { Log::new() };
        let converted = limit.rescale(&from, &state, &mut log, now);
        if let Some(slot) = table.get_mut(key) {
            slot.state = converted;
        }
        if logs {
            let Self { group_evictions, group_dropped, evictions, region: Some(region), .. } = self else {
                return Some((state, converted));
            };
            let kept = if limit.uses_log() { log } else { Log::new() };
            region.table().set_log(key, &kept, now, |p, r| {
                count_removal((group_evictions, group_dropped, evictions), p, r);
            });
        }
        Some((state, converted))
    }

    /// [`Shard::update`] of a state to be read as written under `limit` (region id `def`, 0: looked up):
    /// in a shared region the slot's writer is checked in the same lookup, and a state another limit
    /// wrote is converted first ([`Shard::reconcile`]): the decision's hot path, one probe of the table.
    #[inline]
    pub fn update_under<E>(
        &mut self,
        key: u64,
        (limit, def): (&Limit, u16),
        now: u64,
        change: impl FnOnce(&State) -> Result<State, E>,
    ) -> Option<Result<(), E>> {
        if let Some(region) = &mut self.region {
            let def = if def == 0 { region.def_of(limit) } else { def };
            let slot = region.table().get_mut(key)?;
            if slot.def() == def {
                return Some(change(&slot.state).map(|changed| slot.state = changed));
            }
            let _ = self.reconcile(key, (limit, def), now);
        }
        self.update(key, change)
    }

    /// Replaces the state of `key` by what `change` makes of it, counted as a use; `None`: no such
    /// key; `Some(Err)`: `change` declined and nothing was written. One lookup for both.
    #[inline]
    pub fn update<E>(&mut self, key: u64, change: impl FnOnce(&State) -> Result<State, E>) -> Option<Result<(), E>> {
        // `change` is called in one place, so that it is inlined (called from two, it was not: 4 ns).
        let slot = self.slot_mut(key)?;
        Some(change(&slot.state()).map(|changed| slot.set(changed)))
    }

    /// Stores the state of a key of `group` that `get_mut` did not find, written under `limit`, making
    /// room first if the store is full. Group ids index the per-group counts, so they should be small (a
    /// group's index).
    pub fn insert(&mut self, key: u64, state: State, now: u64, (owner, limit): (Owner, &Limit)) {
        debug_assert!(owner.group < 1 << Owner::GROUP_BITS && owner.limit < 1 << Owner::LIMIT_BITS);
        if let Some(region) = &mut self.region {
            let def = region.def_of(limit);
            let Self { group_evictions, group_dropped, evictions, .. } = self;
            region.table().insert(key, state, owner.pack(key), def, now, |packed, removal| {
                count_removal((group_evictions, group_dropped, evictions), packed, removal);
            });
            return;
        }
        let index = owner.group as usize;
        if index >= self.group_keys.len() {
            self.group_keys.resize(index + 1, 0);
            self.group_evictions.resize(index + 1, 0);
            self.group_dropped.resize(index + 1, 0);
        }
        let Self { table, logs, group_keys, group_evictions, group_dropped, evictions, .. } = self;
        table.insert(key, Slot { tag: 0, state, owner: owner.pack(key) }, |table| {
            *evictions += Self::make_room(table, logs, group_keys, (group_evictions, group_dropped), now);
        });
        group_keys[index] += 1;
    }

    /// The timestamps of a sliding-log key (empty if none): borrowed from memory, read out of a region.
    #[inline]
    #[must_use]
    pub fn log(&self, key: u64) -> Cow<'_, Log> {
        if let Some(region) = &self.region {
            return Self::region_log(region.table_ref(), key);
        }
        Cow::Borrowed(self.logs.get(key >> IDENTITY_SHIFT).unwrap_or(&NO_LOG))
    }

    #[inline(never)]
    fn region_log(table: &RegionTable, key: u64) -> Cow<'_, Log> {
        if table.has_log(key) {
            Cow::Owned(table.log(key))
        } else {
            Cow::Borrowed(&NO_LOG)
        }
    }

    /// Runs `change` on the timestamps of `key` (empty if none). A region keeps a log with its key's
    /// state: there the state is stored first (a log of a key without one is not kept).
    pub fn with_log<R>(&mut self, key: u64, change: impl FnOnce(&mut Log) -> R) -> R {
        let Some(region) = &mut self.region else { return self.logs.with(key >> IDENTITY_SHIFT, change) };
        let table = region.table();
        let mut log = table.log(key);
        let result = change(&mut log);
        let Self { group_evictions, group_dropped, evictions, .. } = self;
        table.set_log(key, &log, 0, |p, r| count_removal((group_evictions, group_dropped, evictions), p, r));
        result
    }

    /// Takes the timestamps of `key` out (empty if none), e.g. to move them to another key.
    pub fn take_log(&mut self, key: u64) -> Log {
        if self.region.is_some() {
            return self.with_log(key, std::mem::take);
        }
        self.logs.take(key >> IDENTITY_SHIFT)
    }

    /// Stores `log` as the timestamps of `key`.
    pub fn put_log(&mut self, key: u64, log: Log) {
        if self.region.is_some() {
            return self.with_log(key, |stamps| *stamps = log);
        }
        self.logs.put(key >> IDENTITY_SHIFT, log);
    }

    /// The state of `key` (a copy, or a fresh state), without counting a use.
    #[inline]
    #[must_use]
    pub fn load(&self, key: u64) -> State {
        self.find(key).unwrap_or_default()
    }

    /// Counts a decision region-wide (and a refusal of `peer` among those refused most), when the
    /// states live in a region.
    #[inline]
    pub fn count_shared(&mut self, allowed: bool, peer: &str, hash: u64) {
        if let Some(region) = &mut self.region {
            region.table().count(allowed, peer, hash);
        }
    }

    /// Records permits of `key` this process took (`delta` > 0) or gave back, when the states live in
    /// a region: a process that dies holding them gives them back through `take_dead_leases`.
    pub fn lease(&mut self, key: u64, delta: i64) {
        if let Some(region) = &mut self.region {
            // Room was made first (`reserve_lease`) for what a decision takes; a give-back always fits.
            let _recorded = region.table().lease(key, delta);
        }
    }

    /// Whether permits of `key` this process takes now can be recorded in the region, so that its
    /// death gives them back (always in memory): false when every lease is in use.
    #[must_use]
    pub fn reserve_lease(&mut self, key: u64) -> bool {
        self.region.as_mut().is_none_or(|region| region.table().reserve_lease(key))
    }

    /// The permits of `key` held by processes that have ended (0 in memory), forgotten.
    pub fn take_dead_leases(&mut self, key: u64) -> u64 {
        self.region.as_mut().map_or(0, |region| region.table().take_dead_leases(key))
    }

    /// The state of `key` if it has one, without counting a use.
    #[inline]
    #[must_use]
    pub fn find(&self, key: u64) -> Option<State> {
        if let Some(region) = &self.region {
            return region.table_ref().get(key).map(|s| s.state);
        }
        self.table.get(key).map(|s| s.state)
    }

    /// Writes `state` for `key`, written under `limit`, inserting it for `owner` if needed (a stored key
    /// keeps its owner).
    pub fn store(&mut self, key: u64, state: State, now: u64, (owner, limit): (Owner, &Limit)) {
        if let Some(region) = &mut self.region {
            let def = region.def_of(limit);
            if let Some(slot) = region.table().get_mut(key) {
                slot.state = state;
                slot.set_def(def);
                return;
            }
        } else if let Some(slot) = self.table.get_mut(key) {
            slot.state = state;
            return;
        }
        self.insert(key, state, now, (owner, limit));
    }

    /// Runs `change` on every state of `group` with the shard's data, its key, its limit's index, the
    /// limit it was written under, and its log (empty for limits that keep none); a state `change`
    /// declines (false) is removed. The limit written under is known in a shared region (`None` in
    /// memory, or unrecorded): `change` sets it to the limit the state is now written under.
    pub fn change_group(
        &mut self,
        group: u32,
        mut change: impl FnMut(&mut C, u64, usize, &mut Option<Limit>, &mut State, &mut Log) -> bool,
    ) {
        if let Some(part) = &mut self.region {
            let data = &mut self.data;
            let RegionPart { tables, region, defs, .. } = part;
            for table in tables.iter_mut() {
                table.retain(|slot, log| {
                    let owner = Owner::unpack(slot.packed_owner());
                    if owner.group != group {
                        return true;
                    }
                    let mut written = region.limit_def(slot.def());
                    let key = Owner::whole_key(slot.identity(), slot.packed_owner());
                    let keep = change(data, key, owner.limit, &mut written, &mut slot.state, log);
                    if let Some(limit) = written {
                        slot.set_def(def_in(region, defs, &limit));
                    }
                    keep
                });
            }
            return;
        }
        let Self { table, logs, group_keys, data, .. } = self;
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
                group_keys[group as usize] -= 1;
            }
            keep
        });
    }

    pub fn remove(&mut self, key: u64) -> bool {
        if let Some(region) = &mut self.region {
            return region.table().remove(key).is_some();
        }
        let Some(slot) = self.table.remove(key) else { return false };
        self.logs.remove(slot.identity());
        self.group_keys[slot.group() as usize] -= 1;
        true
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.region.as_ref().map_or_else(|| self.table.len(), |region| region.tables.iter().map(RegionTable::len).sum())
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every state; evictions stay counted.
    pub fn clear(&mut self) {
        if let Some(region) = &mut self.region {
            region.tables.iter_mut().for_each(RegionTable::clear);
        }
        self.table.clear();
        self.logs.clear();
        self.group_keys.fill(0);
    }

    /// How many states of each group id this shard holds (by id), in one walk, when its states are in a
    /// region (which keeps no per-group counts: every process inserts and evicts there).
    #[must_use]
    pub fn region_group_keys(&self) -> Option<Vec<u64>> {
        let region = self.region.as_ref()?;
        let mut keys = Vec::new();
        for slot in region.tables.iter().flat_map(RegionTable::iter) {
            let id = Owner::unpack(slot.packed_owner()).group as usize;
            if id >= keys.len() {
                keys.resize(id + 1, 0);
            }
            keys[id] += 1;
        }
        Some(keys)
    }

    /// How many states of `group` this shard holds.
    #[must_use]
    pub fn group_keys(&self, group: u32) -> u64 {
        if let Some(keys) = self.region_group_keys() {
            return keys.get(group as usize).copied().unwrap_or(0);
        }
        self.group_keys.get(group as usize).copied().unwrap_or(0)
    }

    /// How many states of `group` this shard has evicted (idle states dropped are not counted).
    #[must_use]
    pub fn group_evictions(&self, group: u32) -> u64 {
        self.group_evictions.get(group as usize).copied().unwrap_or(0)
    }

    /// How many idle states of `group` this shard has dropped to make room (a drop never lets a key
    /// admit more than it could have).
    #[must_use]
    pub fn group_dropped(&self, group: u32) -> u64 {
        self.group_dropped.get(group as usize).copied().unwrap_or(0)
    }

    /// Makes room (see `room`): idle states go first (dropping one never lets a key admit more), then
    /// the least used; no state is pinned. Returns how many were evicted.
    fn make_room(
        table: &mut BoundedTable<Slot>,
        logs: &mut Logs,
        group_keys: &mut [u64],
        (group_evictions, group_dropped): (&mut [u64], &mut [u64]),
        now: u64,
    ) -> u64 {
        let Freed { evicted, .. } = table.make_room(
            |slot| {
                let state = slot.state;
                state.is_idle(now)
            },
            |_| false,
            |slot, removal| {
                if !logs.is_empty() {
                    logs.remove(slot.identity());
                }
                // Every stored group was seen by `insert`, which sized the counts for it.
                let index = slot.group() as usize;
                group_keys[index] -= 1;
                match removal {
                    Removal::Evicted => group_evictions[index] += 1,
                    Removal::Dropped => group_dropped[index] += 1,
                }
            },
        );
        evicted as u64
    }

    /// Approximate heap bytes held by this shard's table, logs and per-group counts.
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        let logs = self.logs.bytes;
        let groups = (self.group_keys.capacity() + self.group_evictions.capacity() + self.group_dropped.capacity())
            * std::mem::size_of::<u64>();
        self.table.allocated_bytes() + logs + groups
    }
}

/// A padded shard, so that two threads on neighbouring shards do not share a cache line.
#[repr(align(128))]
#[derive(Debug)]
struct Padded<T>(T);

/// The whole map: `max_keys` spread over a power-of-two number of shards.
#[derive(Debug)]
pub struct StateMap<C> {
    shards: Box<[Padded<Mutex<Shard<C>>>]>,
    shard_shift: u32,
    keys: Arc<AtomicUsize>,
    max_keys: usize,
    /// The regions the states live in, when processes share them.
    region: Option<Regions>,
    /// A key's shard of the region is its top bits from here; each shard of the process holds
    /// `region_per_shard` of them.
    region_shift: u32,
    region_per_shard: usize,
}

/// The region a store's states live in now, and every region they lived in before: kept mapped for
/// the store's life, so that a thread that read a region's address before the store moved (see
/// `StateMap::move_to`) never reads an unmapped one. A move is rare (the file was removed or replaced).
#[derive(Debug)]
struct Regions {
    current: Mutex<Arc<SharedRegion>>,
    /// The current region's address, for the prefetch hint (which may read any address).
    hint: std::sync::atomic::AtomicPtr<SharedRegion>,
    retired: Mutex<Vec<Arc<SharedRegion>>>,
}

impl Regions {
    fn new(region: Arc<SharedRegion>) -> Self {
        let hint = std::sync::atomic::AtomicPtr::new(Arc::as_ptr(&region).cast_mut());
        Self { current: Mutex::new(region), hint, retired: Mutex::new(Vec::new()) }
    }
}

/// A shard locked for this thread: the process's lock, and the region's when the states live there
/// (taken second, always, so two threads never wait on each other crosswise; given back first).
pub struct ShardGuard<'a, C> {
    _region: RegionHeld<'a>,
    shard: MutexGuard<'a, Shard<C>>,
}

/// The region's locks a shard guard holds: the key's region shard, or for a walk all of the process
/// shard's, taken in order (another holder never waits for a second lock while holding one). Held only
/// to be given back when dropped.
#[allow(dead_code)]
enum RegionHeld<'a> {
    None,
    One(Guard<'a>),
    All(Vec<Guard<'a>>),
}

impl<C> std::ops::Deref for ShardGuard<'_, C> {
    type Target = Shard<C>;

    #[inline]
    fn deref(&self) -> &Shard<C> {
        &self.shard
    }
}

impl<C> std::ops::DerefMut for ShardGuard<'_, C> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shard<C> {
        &mut self.shard
    }
}

impl<C> StateMap<C> {
    /// A store for at most `max_keys` keys; `data` makes each shard's data (counters, quota records).
    pub fn new(max_keys: usize, data: impl Fn() -> C) -> Self {
        Self::build(max_keys, data, None)
    }

    /// A store whose states live in `region` (made for `max_keys`), shared with other processes.
    pub fn in_region(max_keys: usize, data: impl Fn() -> C, region: Arc<SharedRegion>) -> Self {
        Self::build(max_keys, data, Some(region))
    }

    fn build(max_keys: usize, data: impl Fn() -> C, region: Option<Arc<SharedRegion>>) -> Self {
        let max_keys = max_keys.max(1);
        let wanted = Self::shard_count(max_keys);
        let region_shards = region.as_ref().map_or(wanted, |r| r.shards().max(wanted));
        let region_per_shard = region_shards / wanted;
        let keys = Arc::new(AtomicUsize::new(0));
        let shards = (0..wanted)
            .map(|index| {
                Padded(Mutex::new(Shard {
                    table: BoundedTable::new(Arc::clone(&keys), max_keys, wanted),
                    logs: Logs::default(),
                    group_keys: Vec::new(),
                    group_evictions: Vec::new(),
                    group_dropped: Vec::new(),
                    evictions: 0,
                    region: region.as_ref().map(|r| RegionPart {
                        tables: (0..region_per_shard).map(|part| r.table(index * region_per_shard + part)).collect(),
                        current: 0,
                        region: Arc::clone(r),
                        defs: Vec::new(),
                    }),
                    data: data(),
                }))
            })
            .collect();
        let shard_shift = 64 - wanted.trailing_zeros();
        let region_shift = 64 - region_shards.trailing_zeros();
        let region = region.map(Regions::new);
        Self { shards, shard_shift, keys, max_keys, region, region_shift, region_per_shard }
    }

    /// The region the states live in now, if shared.
    #[must_use]
    pub fn shared_region(&self) -> Option<Arc<SharedRegion>> {
        self.region.as_ref().map(|regions| Arc::clone(&regions.current.lock()))
    }

    /// Moves the states to `new`, a region for the same `max_keys` (the file at the path now), one
    /// process shard at a time: under the process shard's lock and the locks of its part of both
    /// regions, `carry` moves each state of the old part into the new one (and empties the old, so that
    /// another process moving too carries nothing twice); from then on the shard decides in `new`.
    /// A no-op in memory, or when `new` has another number of shards (it cannot: same `max_keys`).
    pub fn move_to(
        &self,
        new: &Arc<SharedRegion>,
        mut carry: impl FnMut(&SharedRegion, &mut RegionTable, &mut RegionTable),
    ) {
        let Some(regions) = &self.region else { return };
        let old = Arc::clone(&regions.current.lock());
        if Arc::ptr_eq(&old, new) || old.shards() != new.shards() {
            return;
        }
        for index in 0..self.shards.len() {
            let mut shard = self.shards[index].0.lock();
            let first = index * self.region_per_shard;
            let parts = first..first + self.region_per_shard;
            // Old before new, in index order, as every process that moves takes them.
            let old_held: Vec<Guard<'_>> = parts.clone().map(|i| old.lock(i)).collect();
            let new_held: Vec<Guard<'_>> = parts.clone().map(|i| new.lock(i)).collect();
            let Some(part) = &mut shard.region else { continue };
            for (i, (old_guard, new_guard)) in parts.clone().zip(old_held.iter().zip(&new_held)) {
                let mut from = old.table(i);
                let mut to = new.table(i);
                if old_guard.recovered {
                    from.repair();
                }
                if new_guard.recovered {
                    to.repair();
                }
                carry(&old, &mut from, &mut to);
            }
            part.tables = parts.map(|i| new.table(i)).collect();
            part.region = Arc::clone(new);
            part.defs.clear();
            drop(new_held);
            drop(old_held);
        }
        regions.hint.store(Arc::as_ptr(new).cast_mut(), Ordering::Release);
        regions.retired.lock().push(old);
        *regions.current.lock() = Arc::clone(new);
    }

    /// The region's lock of the shard of `key`, taken with the process's shard (held in `shard`), waited
    /// for at most `deadline` (`None`: when a holder keeps it longer). Out of line: the in-memory hot path
    /// keeps only the test for a region.
    #[inline(never)]
    fn lock_region<'a>(&'a self, shard: &mut Shard<C>, key: u64, deadline: Option<Duration>) -> Option<RegionHeld<'a>> {
        let Some(part) = &shard.region else { return Some(RegionHeld::None) };
        // SAFETY: every region the store has lived in stays mapped for its life (`Regions`); the
        // shard's part names the one its tables are in, read under the shard's lock.
        let region: &'a SharedRegion = unsafe { &*Arc::as_ptr(&part.region) };
        #[allow(clippy::cast_possible_truncation)]
        let index = key.checked_shr(self.region_shift).unwrap_or(0) as usize;
        let held = region.lock_within(index, deadline)?;
        if let Some(part) = &mut shard.region {
            part.current = index % self.region_per_shard;
            if held.recovered {
                // The last holder died mid-write: make the shard whole before anything reads it.
                part.table().repair();
            }
        }
        Some(RegionHeld::One(held))
    }

    /// Every region shard of process shard `index`, locked in order, for a walk.
    fn lock_region_part<'a>(&'a self, shard: &mut Shard<C>, index: usize) -> RegionHeld<'a> {
        let Some(part) = &shard.region else { return RegionHeld::None };
        // SAFETY: as in `lock_region`.
        let region: &'a SharedRegion = unsafe { &*Arc::as_ptr(&part.region) };
        let first = index * self.region_per_shard;
        let held: Vec<Guard<'a>> = (first..first + self.region_per_shard).map(|i| region.lock(i)).collect();
        if let Some(part) = &mut shard.region {
            for (table, guard) in part.tables.iter_mut().zip(&held) {
                if guard.recovered {
                    table.repair();
                }
            }
        }
        RegionHeld::All(held)
    }

    /// How many shards a store for `max_keys` keys has.
    #[must_use]
    pub fn shard_count(max_keys: usize) -> usize {
        (max_keys.max(1) / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS).next_power_of_two().min(MAX_SHARDS)
    }

    /// How many shards a shared region for `max_keys` keys has: more than memory's, so that processes
    /// deciding for different keys seldom take the same shard's lock, whose cache line would move
    /// between their cores at each decision (in one process, 64 shards are enough for its threads).
    #[must_use]
    pub fn shared_shard_count(max_keys: usize) -> usize {
        (max_keys.max(1) / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARED_SHARDS).next_power_of_two().min(MAX_SHARED_SHARDS)
    }

    /// Starts fetching the region's lock and slots for `key` (see `SharedRegion::prefetch`); nothing
    /// for a store in memory, whose shards are few and stay in the caches.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if let Some(regions) = &self.region {
            // SAFETY: every region the store has lived in stays mapped for its life (`Regions`).
            let region = unsafe { &*regions.hint.load(Ordering::Relaxed) };
            #[allow(clippy::cast_possible_truncation)]
            region.prefetch(key.checked_shr(self.region_shift).unwrap_or(0) as usize);
        }
    }

    /// The shard that holds `key`, locked. The shard comes from the key's top bits (a table places
    /// by a mix of them all), and keys that share their top 32 bits share a shard: see [`StateMap::related_key`].
    #[inline]
    #[must_use]
    pub fn lock(&self, key: u64) -> ShardGuard<'_, C> {
        // shard_shift == 64 for a single shard: checked_shr gives None -> shard 0.
        #[allow(clippy::cast_possible_truncation)]
        let index = key.checked_shr(self.shard_shift).unwrap_or(0) as usize;
        let mut shard = self.shards[index].0.lock();
        let region = match &self.region {
            None => RegionHeld::None,
            // Without a deadline the region's lock is always taken.
            Some(_) => self.lock_region(&mut shard, key, None).unwrap_or(RegionHeld::None),
        };
        ShardGuard { _region: region, shard }
    }

    /// As [`StateMap::lock`], for a decision: a shared region's lock is waited for at most `STALL`;
    /// `None` when a holder keeps it longer (a process stopped holding it), for the caller to decide
    /// without the states.
    #[allow(clippy::inline_always)] // the hot path: as a call of its own it cost a copy of the guard
    #[inline(always)]
    #[must_use]
    pub fn lock_deciding(&self, key: u64) -> Option<ShardGuard<'_, C>> {
        #[allow(clippy::cast_possible_truncation)]
        let index = key.checked_shr(self.shard_shift).unwrap_or(0) as usize;
        let mut shard = self.shards[index].0.lock();
        let region = match &self.region {
            None => RegionHeld::None,
            Some(_) => self.lock_region(&mut shard, key, Some(STALL))?,
        };
        Some(ShardGuard { _region: region, shard })
    }

    /// A key for another state of the same owner (e.g. the second limit of a rule) that lives in the
    /// same shard, so that one lock covers both.
    #[inline]
    #[must_use]
    pub fn related_key(key: u64, index: u32) -> u64 {
        if index == 0 {
            key
        } else {
            #[allow(clippy::cast_possible_truncation)]
            let low = (key as u32 ^ index.wrapping_mul(0x9E37_79B9)).wrapping_mul(RELATED_MIX);
            (key & 0xFFFF_FFFF_0000_0000) | u64::from(low.rotate_left(13) ^ index)
        }
    }

    /// The key `related_key(key, index)` was made from.
    #[must_use]
    pub fn unrelated_key(related: u64, index: u32) -> u64 {
        if index == 0 {
            return related;
        }
        #[allow(clippy::cast_possible_truncation)]
        let low = (related as u32 ^ index).rotate_right(13).wrapping_mul(RELATED_MIX_INVERSE)
            ^ index.wrapping_mul(0x9E37_79B9);
        (related & 0xFFFF_FFFF_0000_0000) | u64::from(low)
    }

    /// Every shard in turn, locked whole (with every region shard it holds), for walks over all states.
    pub fn shards(&self) -> impl Iterator<Item = ShardGuard<'_, C>> {
        (0..self.shards.len()).map(|index| {
            let mut shard = self.shards[index].0.lock();
            let region = match &self.region {
                None => RegionHeld::None,
                Some(_) => self.lock_region_part(&mut shard, index),
            };
            ShardGuard { _region: region, shard }
        })
    }

    #[must_use]
    pub fn len(&self) -> usize {
        if let Some(regions) = &self.region {
            return usize::try_from(regions.current.lock().keys()).unwrap_or(usize::MAX);
        }
        self.keys.load(Ordering::Relaxed)
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[must_use]
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> u64 {
        ahash::RandomState::with_seeds(1, 2, 3, 4).hash_one(i)
    }

    /// An owner, and the limit its state is written under (which only a shared region records).
    fn owned(group: u32, limit: usize) -> (Owner, &'static Limit) {
        static WRITTEN: std::sync::LazyLock<Limit> = std::sync::LazyLock::new(|| {
            Limit::new(crate::rate::Rate::new(10, 1_000_000_000).unwrap(), None, crate::algorithm::Kind::Gcra).unwrap()
        });
        (Owner::new(group, limit), &WRITTEN)
    }

    fn busy(now: u64) -> State {
        State { t: now + 1_000, a: 0, b: 0 }
    }

    #[test]
    fn log_bytes_are_kept_as_logs_change_and_equal_a_walk() {
        let store: StateMap<()> = StateMap::new(10_000, || ());
        let mut shard = store.lock(key(1));
        let walk = |shard: &Shard<()>| shard.logs.map.values().map(log_bytes).sum::<usize>();
        for i in 0..50 {
            shard.insert(key(i), busy(0), 0, owned(0, 0));
            shard.with_log(key(i), |log| (0..i).for_each(|at| log.insert(at, 1)));
        }
        assert_eq!(shard.logs.bytes, walk(&shard));
        let moved = shard.take_log(key(7));
        shard.put_log(key(60), moved);
        shard.with_log(key(3), Log::shrink_to_fit);
        assert!(shard.remove(key(9)));
        assert_eq!(shard.logs.bytes, walk(&shard));
        shard.clear();
        assert_eq!((shard.logs.bytes, walk(&shard)), (0, 0));
    }

    #[test]
    fn holds_at_most_max_keys() {
        let store: StateMap<()> = StateMap::new(1_000, || ());
        for i in 0..100_000 {
            let mut shard = store.lock(key(i));
            if shard.touch(key(i)).is_none() {
                shard.insert(key(i), busy(0), 0, owned(0, 0));
            }
        }
        assert!(store.len() <= 1_000, "{}", store.len());
        // Sized back to the bound after every pass (tombstones would otherwise grow the tables).
        let bytes: usize = store.shards().map(|s| s.allocated_bytes()).sum();
        assert!(bytes <= 2 * 2048 * 25, "{bytes}");
        assert!(store.len() >= 875, "{}", store.len());
        assert_eq!(store.len(), store.shards().map(|s| s.len()).sum::<usize>());
    }

    #[test]
    fn a_flood_of_one_shot_keys_never_evicts_a_busy_key() {
        // Several hash seeds (shard sizes random-walk differently) and busy keys used once per
        // 20 to 100 one-shot keys.
        for seed in 0..8u64 {
            for every in [20, 50, 100] {
                let hasher = ahash::RandomState::with_seeds(seed, 2, 3, 4);
                let key = |i: u64| hasher.hash_one(i);
                let store: StateMap<()> = StateMap::new(2_000, || ());
                let hot = key(u64::MAX);
                store.lock(hot).insert(hot, busy(0), 0, owned(0, 0));
                for i in 0..100_000 {
                    if i % every == 0 {
                        assert!(store.lock(hot).touch(hot).is_some(), "seed {seed}, 1 use per {every}: evicted at {i}");
                    }
                    store.lock(key(i)).insert(key(i), busy(0), 0, owned(0, 0));
                }
                let evictions: u64 = store.shards().map(|s| s.evictions).sum();
                assert!(evictions > 95_000 && store.len() <= 2_000);
            }
        }
    }

    #[test]
    fn idle_states_are_dropped_before_anything_is_evicted() {
        let store: StateMap<()> = StateMap::new(256, || ());
        for i in 0..256 {
            store.lock(key(i)).insert(key(i), State { t: 10, a: 0, b: 0 }, 0, owned(0, 0));
        }
        // At time 10 every state is idle: making room drops them without counting evictions.
        store.lock(key(1_000)).insert(key(1_000), busy(10), 10, owned(0, 0));
        assert_eq!(store.shards().map(|s| s.evictions).sum::<u64>(), 0);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn related_keys_share_a_shard_but_not_a_slot() {
        let store: StateMap<()> = StateMap::new(1_000_000, || ());
        let k = key(7);
        let r = StateMap::<()>::related_key(k, 1);
        assert_ne!(k >> IDENTITY_SHIFT, r >> IDENTITY_SHIFT);
        assert_eq!(k >> store.shard_shift, r >> store.shard_shift);
        let mut shard = store.lock(k);
        shard.store(k, busy(0), 0, owned(0, 0));
        assert_eq!(shard.load(r), State::default());
        assert!(shard.remove(k));
        assert!(!shard.remove(k));
    }

    /// Per group: (keys held, evictions), summed over the shards.
    fn group_counts(store: &StateMap<()>, group: u32) -> (u64, u64) {
        store.shards().fold((0, 0), |(k, e), s| (k + s.group_keys(group), e + s.group_evictions(group)))
    }

    #[test]
    fn keys_are_counted_per_group() {
        let store: StateMap<()> = StateMap::new(1_000_000, || ());
        for i in 0..30 {
            let group = u32::from(i % 3 == 0);
            store.lock(key(i)).insert(key(i), busy(0), 0, owned(group, 0));
        }
        assert_eq!(group_counts(&store, 0), (20, 0));
        assert_eq!(group_counts(&store, 1), (10, 0));
        assert_eq!(group_counts(&store, 7), (0, 0));
        // Writing an existing state keeps its group.
        store.lock(key(0)).store(key(0), busy(5), 5, owned(0, 0));
        assert_eq!(group_counts(&store, 1), (10, 0));

        assert!(store.lock(key(0)).remove(key(0)));
        assert!(store.lock(key(1)).remove(key(1)));
        assert!(!store.lock(key(1)).remove(key(1)));
        assert_eq!(group_counts(&store, 0), (19, 0));
        assert_eq!(group_counts(&store, 1), (9, 0));

        store.shards().for_each(|mut s| s.clear());
        assert_eq!(group_counts(&store, 0), (0, 0));
        assert_eq!(group_counts(&store, 1), (0, 0));
        store.lock(key(3)).insert(key(3), busy(0), 0, owned(1, 0));
        assert_eq!(group_counts(&store, 1), (1, 0));
    }

    #[test]
    fn a_flood_counts_evictions_per_group_and_drops_as_none() {
        let store: StateMap<()> = StateMap::new(1_000, || ());
        for i in 0..1_000 {
            store.lock(key(i)).insert(key(i), State { t: 10, a: 0, b: 0 }, 0, owned(2, 0));
        }
        // At time 10 every state of group 2 is idle: dropped, not evicted.
        for i in 1_000..20_000 {
            let group = u32::try_from(i % 2).unwrap();
            store.lock(key(i)).insert(key(i), busy(10), 10, owned(group, 0));
        }
        assert_eq!(group_counts(&store, 2), (0, 0));
        let (keys_0, evicted_0) = group_counts(&store, 0);
        let (keys_1, evicted_1) = group_counts(&store, 1);
        assert!(evicted_0 > 0 && evicted_1 > 0, "{evicted_0} {evicted_1}");
        for shard in store.shards() {
            assert_eq!((0..3).map(|g| shard.group_keys(g)).sum::<u64>(), shard.len() as u64);
            assert_eq!((0..3).map(|g| shard.group_evictions(g)).sum::<u64>(), shard.evictions);
        }
        assert_eq!(keys_0 + keys_1, store.len() as u64);
        assert_eq!(evicted_0 + evicted_1, store.shards().map(|s| s.evictions).sum::<u64>());
    }

    #[test]
    fn slots_are_32_bytes_and_never_straddle_a_cache_line() {
        assert_eq!((std::mem::size_of::<Slot>(), std::mem::align_of::<Slot>()), (32, 32));
    }

    #[test]
    fn unrelated_key_undoes_related_key() {
        for key in [0u64, 1, 0xDEAD_BEEF_1234_5678, u64::MAX] {
            for index in [0u32, 1, 17, 0x3FF, u32::MAX] {
                assert_eq!(StateMap::<()>::unrelated_key(StateMap::<()>::related_key(key, index), index), key);
            }
        }
    }

    #[test]
    fn a_group_walk_names_each_key_and_limit_and_removes_what_it_declines() {
        let store: StateMap<()> = StateMap::new(1_000, || ());
        let mut shard = store.lock(0);
        for i in 0..10u64 {
            shard.insert(i << 8 | 0xAB, busy(0), 0, owned(3, usize::try_from(i % 4).unwrap()));
        }
        shard.insert(99 << 8, busy(0), 0, owned(4, 0));
        let mut seen = Vec::new();
        shard.change_group(3, |(), key, limit, _, state, _| {
            seen.push((key, limit));
            state.a = 7;
            limit != 3
        });
        seen.sort_unstable();
        let expected: Vec<(u64, usize)> =
            (0..10u64).map(|i| (i << 8 | 0xAB, usize::try_from(i % 4).unwrap())).collect();
        assert_eq!(seen, expected);
        assert_eq!((shard.group_keys(3), shard.group_keys(4)), (8, 1));
        assert_eq!(shard.find(0xAB).map(|s| s.a), Some(7));
        assert_eq!(store.len(), 9);
    }
}
