//! One shard's states in a region of shared memory: each shard of a process whose states live in a
//! region is one of the region's shards (as many, see `StateMap::shared_shard_count`), guarded by that
//! shard's robust lock alone. A state here says which limit wrote it (the region's id of that limit),
//! so that a process reading a state another process wrote under other limits converts it first.

use std::borrow::Cow;
use std::sync::Arc;

use super::layout::SharedRegion;
use super::table::{RegionSlot, RegionTable};
use crate::algorithm::{Limit, Log, State, NO_LOG};
use crate::state_map::{Counts, Owner, Slots};

#[derive(Debug)]
#[repr(C)]
pub struct RegionSlots {
    pub(super) table: RegionTable,
    pub(super) region: Arc<SharedRegion>,
    /// The region's ids of the limits this shard has decided under, most recent first (a group's few
    /// limits and quotas: a short scan beats a hash).
    pub(super) defs: Vec<(Limit, u16)>,
}

impl RegionSlots {
    /// The slots of shard `index` (the process's and the region's).
    pub(crate) fn new(region: &Arc<SharedRegion>, index: usize) -> Self {
        Self { table: region.table(index), region: Arc::clone(region), defs: Vec::new() }
    }

    /// The shard's table.
    #[inline]
    pub(crate) fn table(&mut self) -> &mut RegionTable {
        &mut self.table
    }

    #[inline]
    fn table_ref(&self) -> &RegionTable {
        &self.table
    }

    /// The region's id of `limit`, registered there if new (0: the region holds no more).
    #[inline]
    fn def_of(&mut self, limit: &Limit) -> u16 {
        def_in(&self.region, &mut self.defs, limit)
    }

    /// Converts the state of `key`, written under limit `was`, to `limit` (id `def`).
    #[cold]
    fn convert(
        &mut self,
        key: u64,
        was: u16,
        limit: &Limit,
        def: u16,
        now: u64,
        counts: &mut Counts,
    ) -> Option<(State, State)> {
        // An unrecorded writer (the region held no more ids), or one the region cannot read back: read
        // as written under `limit`, as every state was before states said what wrote them.
        let from = self.region.limit_def(was);
        let table = self.table();
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
            let kept = if limit.uses_log() { log } else { Log::new() };
            table.set_log(key, &kept, now, |packed, removal| counts.removed_packed(packed, removal));
        }
        Some((state, converted))
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
    // One more at a time: a map in a shared region has thousands of shards, most knowing one limit.
    defs.reserve_exact(1);
    defs.insert(0, (*limit, def));
    def
}

impl Slots for RegionSlots {
    #[inline]
    fn state_mut(&mut self, key: u64) -> Option<&mut State> {
        self.table().get_mut(key).map(|slot| &mut slot.state)
    }

    #[inline]
    fn state_under(
        &mut self,
        key: u64,
        (limit, def): (&Limit, u16),
        now: u64,
        counts: &mut Counts,
    ) -> Option<&mut State> {
        let def = if def == 0 { self.def_of(limit) } else { def };
        let slot: *mut RegionSlot = self.table().get_mut(key)?;
        // SAFETY: `slot` is the slot just found in the locked table, and nothing touches the table before
        // it is returned. (A pointer, because returning the borrow on one path and reusing `self` on the
        // other is what the borrow checker cannot yet tell apart.)
        if unsafe { (*slot).def() } == def {
            return Some(unsafe { &mut (*slot).state });
        }
        let _ = self.reconcile(key, (limit, def), now, counts);
        self.state_mut(key)
    }

    #[inline]
    fn find(&self, key: u64) -> Option<State> {
        self.table_ref().get(key).map(|s| s.state)
    }

    #[inline]
    fn reconcile(
        &mut self,
        key: u64,
        (limit, def): (&Limit, u16),
        now: u64,
        counts: &mut Counts,
    ) -> Option<(State, State)> {
        let def = if def == 0 { self.def_of(limit) } else { def };
        let was = self.table_ref().get(key).map(RegionSlot::def)?;
        if was == def {
            return None;
        }
        self.convert(key, was, limit, def, now, counts)
    }

    fn insert(&mut self, key: u64, state: State, now: u64, (owner, limit): (Owner, &Limit), counts: &mut Counts) {
        let def = self.def_of(limit);
        self.table().insert(key, state, owner.pack(key), def, now, |packed, removal| {
            counts.removed_packed(packed, removal);
        });
    }

    fn store(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit), counts: &mut Counts) {
        let def = self.def_of(owned.1);
        if let Some(slot) = self.table().get_mut(key) {
            slot.state = state;
            slot.set_def(def);
            return;
        }
        self.insert(key, state, now, owned, counts);
    }

    #[inline]
    fn log(&self, key: u64) -> Cow<'_, Log> {
        region_log(self.table_ref(), key)
    }

    /// A region keeps a log with its key's state: there the state is stored first (a log of a key
    /// without one is not kept).
    fn with_log<R>(&mut self, key: u64, change: impl FnOnce(&mut Log) -> R, counts: &mut Counts) -> R {
        let table = self.table();
        let mut log = table.log(key);
        let result = change(&mut log);
        table.set_log(key, &log, 0, |packed, removal| counts.removed_packed(packed, removal));
        result
    }

    fn take_log(&mut self, key: u64, counts: &mut Counts) -> Log {
        self.with_log(key, std::mem::take, counts)
    }

    fn put_log(&mut self, key: u64, log: Log, counts: &mut Counts) {
        self.with_log(key, |stamps| *stamps = log, counts);
    }

    fn change_group<C>(
        &mut self,
        group: u32,
        data: &mut C,
        mut change: impl FnMut(&mut C, u64, usize, &mut Option<Limit>, &mut State, &mut Log) -> bool,
        _: &mut Counts,
    ) {
        let Self { table, region, defs } = self;
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

    fn remove(&mut self, key: u64, _: &mut Counts) -> bool {
        self.table().remove(key).is_some()
    }

    fn len(&self) -> usize {
        self.table.len()
    }

    fn clear(&mut self, _: &mut Counts) {
        self.table.clear();
    }

    fn allocated_bytes(&self) -> usize {
        0
    }

    /// A region keeps no per-group counts (every process inserts and evicts there): they are walked.
    fn walked_group_keys(&self) -> Option<Vec<u64>> {
        let mut keys = Vec::new();
        for slot in self.table.iter() {
            let id = Owner::unpack(slot.packed_owner()).group as usize;
            if id >= keys.len() {
                keys.resize(id + 1, 0);
            }
            keys[id] += 1;
        }
        Some(keys)
    }

    #[inline]
    fn count_decision(&mut self, allowed: bool, peer: &str, hash: u64) {
        self.table().count(allowed, peer, hash);
    }

    fn lease(&mut self, key: u64, delta: i64) {
        // Room was made first (`reserve_lease`) for what a decision takes; a give-back always fits.
        let _recorded = self.table().lease(key, delta);
    }

    fn reserve_lease(&mut self, key: u64) -> bool {
        self.table().reserve_lease(key)
    }

    fn take_dead_leases(&mut self, key: u64) -> u64 {
        self.table().take_dead_leases(key)
    }
}

#[inline(never)]
fn region_log(table: &RegionTable, key: u64) -> Cow<'_, Log> {
    if table.has_log(key) {
        Cow::Owned(table.log(key))
    } else {
        Cow::Borrowed(&NO_LOG)
    }
}
