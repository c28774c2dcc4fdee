//! The region a state map is attached to: which of its shards a key's lock takes, how a map follows
//! the region's file when it is removed or replaced (the states carried into the file at the path now),
//! and every region the map lived in before, kept mapped for its life.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::file::AtPath;
use super::layout::SharedRegion;
use super::lock::Guard;
use super::slots::RegionSlots;
use super::table::RegionTable;
use crate::algorithm::State;
use crate::state_map::Owner;

/// How often a process checks that its region's file is still at its path (an `fstat` and an `lstat`,
/// about 2 µs): the longest it decides in a removed or replaced file.
pub const REGION_CHECK_NS: u64 = 250_000_000;

/// The region a map's states live in now, and every region they lived in before: kept mapped for the
/// map's life, so that a thread that read a region's address before the map moved (see
/// `StateMap::move_to`) never reads an unmapped one. A move is rare (the file was removed or replaced).
#[derive(Debug)]
pub struct Attached {
    current: Mutex<Arc<SharedRegion>>,
    /// The current region's address, for the prefetch hint (which may read any address).
    hint: AtomicPtr<SharedRegion>,
    retired: Mutex<Vec<Arc<SharedRegion>>>,
    /// A key's shard of the region is its top bits from here; each shard of the process holds
    /// `per_shard` of them.
    shift: u32,
    per_shard: usize,
    /// When (on the limiter's clock) a decision next checks that the file is still at its path.
    next_check: AtomicU64,
}

impl Attached {
    /// `region`, for a map of `process_shards` shards.
    pub(crate) fn new(region: Arc<SharedRegion>, process_shards: usize) -> Self {
        let region_shards = region.shards().max(process_shards);
        let hint = AtomicPtr::new(Arc::as_ptr(&region).cast_mut());
        Self {
            current: Mutex::new(region),
            hint,
            retired: Mutex::new(Vec::new()),
            shift: 64 - region_shards.trailing_zeros(),
            per_shard: region_shards / process_shards,
            next_check: AtomicU64::new(0),
        }
    }

    /// The slots of process shard `index`.
    pub(crate) fn slots(&self, index: usize) -> RegionSlots {
        RegionSlots::new(&self.current.lock(), index, self.per_shard)
    }

    /// The region the states live in now.
    pub(crate) fn current(&self) -> Arc<SharedRegion> {
        Arc::clone(&self.current.lock())
    }

    /// The region's lock of the shard of `key`, taken with the process's shard (whose slots are
    /// `slots`), waited for at most `deadline` (`None`: when a holder keeps it longer).
    pub(crate) fn lock_key<'a>(
        &'a self,
        slots: &mut RegionSlots,
        key: u64,
        deadline: Option<Duration>,
    ) -> Option<Guard<'a>> {
        // SAFETY: every region the map has lived in stays mapped for the life of `self`; the shard's
        // slots name the one their tables are in, read under the shard's lock.
        let region: &'a SharedRegion = unsafe { &*Arc::as_ptr(&slots.region) };
        #[allow(clippy::cast_possible_truncation)]
        let index = key.checked_shr(self.shift).unwrap_or(0) as usize;
        let held = region.lock_within(index, deadline)?;
        slots.current = index % self.per_shard;
        if held.recovered {
            // The last holder died mid-write: make the shard whole before anything reads it.
            slots.table().repair();
        }
        Some(held)
    }

    /// Every region shard of process shard `index`, locked in order, for a walk.
    pub(crate) fn lock_all<'a>(&'a self, slots: &mut RegionSlots, index: usize) -> Vec<Guard<'a>> {
        // SAFETY: as in `lock_key`.
        let region: &'a SharedRegion = unsafe { &*Arc::as_ptr(&slots.region) };
        let first = index * self.per_shard;
        let held: Vec<Guard<'a>> = (first..first + self.per_shard).map(|i| region.lock(i)).collect();
        for (table, guard) in slots.tables.iter_mut().zip(&held) {
            if guard.recovered {
                table.repair();
            }
        }
        held
    }

    /// Starts fetching the region's lock and slots for `key` (see `SharedRegion::prefetch`).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        // SAFETY: every region the map has lived in stays mapped for its life.
        let region = unsafe { &*self.hint.load(Ordering::Relaxed) };
        #[allow(clippy::cast_possible_truncation)]
        region.prefetch(key.checked_shr(self.shift).unwrap_or(0) as usize);
    }

    /// Carries process shard `index`'s part of `old` into `new` (see `StateMap::move_to`): under the
    /// locks of both parts, old before new in index order as every process that moves takes them.
    pub(crate) fn move_shard(
        &self,
        (old, new): (&Arc<SharedRegion>, &Arc<SharedRegion>),
        index: usize,
        slots: &mut RegionSlots,
        carry: &mut impl FnMut(&SharedRegion, &mut RegionTable, &mut RegionTable),
    ) {
        let first = index * self.per_shard;
        let parts = first..first + self.per_shard;
        let old_held: Vec<Guard<'_>> = parts.clone().map(|i| old.lock(i)).collect();
        let new_held: Vec<Guard<'_>> = parts.clone().map(|i| new.lock(i)).collect();
        for (i, (old_guard, new_guard)) in parts.clone().zip(old_held.iter().zip(&new_held)) {
            let mut from = old.table(i);
            let mut to = new.table(i);
            if old_guard.recovered {
                from.repair();
            }
            if new_guard.recovered {
                to.repair();
            }
            carry(old, &mut from, &mut to);
        }
        *slots = RegionSlots::new(new, index, self.per_shard);
        drop(new_held);
        drop(old_held);
    }

    /// Makes `new` the region decisions go to; `old` stays mapped.
    pub(crate) fn moved(&self, old: Arc<SharedRegion>, new: &Arc<SharedRegion>) {
        self.hint.store(Arc::as_ptr(new).cast_mut(), Ordering::Release);
        self.retired.lock().push(old);
        *self.current.lock() = Arc::clone(new);
    }

    /// The region to move away from, when a decision at `now` is the first `REGION_CHECK_NS` or more
    /// after the last check and the file at the path is no longer the one mapped (removed or replaced).
    #[inline]
    pub(crate) fn watch(&self, now: u64) -> Option<Arc<SharedRegion>> {
        let next = self.next_check.load(Ordering::Relaxed);
        if now >= next {
            return self.check(now, next);
        }
        None
    }

    #[cold]
    fn check(&self, now: u64, next: u64) -> Option<Arc<SharedRegion>> {
        let later = now.saturating_add(REGION_CHECK_NS);
        // One thread checks; the others decide meanwhile.
        if self.next_check.compare_exchange(next, later, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return None;
        }
        let region = self.current();
        matches!(region.still_at_path(), Ok(AtPath::Removed | AtPath::Replaced)).then_some(region)
    }

    /// Forces the check of the file at the next decision (tests on a manual clock).
    pub(crate) fn check_now(&self) {
        self.next_check.store(0, Ordering::Relaxed);
    }
}

/// Carries every state of `from` (a shard of the region `old`) into `to` (the same shard of `new`),
/// emptying `from`. A state keeps its key (the regions at one path hash peers alike: see
/// `layout::seeds_for_user`); its group and limit are named anew in `new`. One whose group's keys differ
/// in `new` (the group was dropped and taken up again in one region) or whose limit `old` cannot name is
/// dropped. `names`: this process's group names by id; `now`: the limiter's clock.
pub fn carry(
    (old, new): (&SharedRegion, &SharedRegion),
    from: &mut RegionTable,
    to: &mut RegionTable,
    names: &[String],
    now: u64,
) {
    from.retain(|slot, log| {
        let owner = Owner::unpack(slot.packed_owner());
        let key = Owner::whole_key(slot.identity(), slot.packed_owner());
        let Some(limit) = old.limit_def(slot.def()) else { return false };
        let Some((name, seed)) = old.group_whole(owner.group) else { return false };
        let known = names.get(owner.group as usize).is_some_and(|mine| *mine == name);
        let registered = if known { new.group_id(&name) } else { new.group_id_unused(&name) };
        let Ok((group, new_seed)) = registered else { return false };
        if new_seed != seed {
            return false;
        }
        let packed = Owner::new(group, owner.limit).pack(key);
        let Some(existing) = to.get(key).copied() else {
            to.insert(key, slot.state, packed, new.def_id(&limit), now, |_, _| {});
            if !log.is_empty() {
                to.set_log(key, log, now, |_, _| {});
            }
            return false;
        };
        // The new region decided for the key too: this usage is added to its own.
        let target = new.limit_def(existing.def()).unwrap_or(limit);
        let mut target_log = to.log(key);
        let merged = if target.is_concurrency() && limit.is_concurrency() {
            State { a: existing.state.a.saturating_add(slot.state.a), ..existing.state }
        } else {
            target.charge(&existing.state, &mut target_log, now, limit.used(&slot.state, log, now))
        };
        if let Some(existing) = to.get_mut(key) {
            existing.state = merged;
        }
        if target.uses_log() {
            to.set_log(key, &target_log, now, |_, _| {});
        }
        false
    });
}
