//! The region a state map is attached to: which of its shards a key's lock takes, how a map follows
//! the region's file when it is removed or replaced (the states carried into the file at the path now),
//! and every region the map lived in before, kept mapped for its life.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::file::AtPath;
use super::layout::SharedRegion;
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
    /// A key's shard (the region's, and the process's: as many) is its top bits from here.
    shift: u32,
    /// When (on the limiter's clock) a decision next checks that the file is still at its path.
    next_check: AtomicU64,
}

impl Attached {
    /// `region`, for a map with as many shards as the region.
    pub(crate) fn new(region: Arc<SharedRegion>) -> Self {
        let hint = AtomicPtr::new(Arc::as_ptr(&region).cast_mut());
        Self {
            shift: 64 - region.shards().trailing_zeros(),
            current: Mutex::new(region),
            hint,
            retired: Mutex::new(Vec::new()),
            next_check: AtomicU64::new(0),
        }
    }

    /// The slots of shard `index`.
    pub(crate) fn slots(&self, index: usize) -> RegionSlots {
        RegionSlots::new(&self.current.lock(), index)
    }

    /// The region the states live in now.
    pub(crate) fn current(&self) -> Arc<SharedRegion> {
        Arc::clone(&self.current.lock())
    }

    /// Starts fetching the region's lock and slots for `key` (see `SharedRegion::prefetch`).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        // SAFETY: every region the map has lived in stays mapped for its life.
        let region = unsafe { &*self.hint.load(Ordering::Relaxed) };
        #[allow(clippy::cast_possible_truncation)]
        region.prefetch(key.checked_shr(self.shift).unwrap_or(0) as usize);
    }

    /// Carries shard `index` of `old` into the same shard of `new` (see `StateMap::move_to`), both
    /// locked by the caller (`recovered`: whether each lock's last holder died holding it), and makes
    /// `slots` the new shard's.
    pub(crate) fn move_shard(
        (old, new): (&Arc<SharedRegion>, &Arc<SharedRegion>),
        index: usize,
        recovered: (bool, bool),
        slots: &mut RegionSlots,
        carry: &mut impl FnMut(&SharedRegion, &mut RegionTable, &mut RegionTable),
    ) {
        let mut from = old.table(index);
        let mut to = new.table(index);
        if recovered.0 {
            from.repair();
        }
        if recovered.1 {
            to.repair();
        }
        carry(old, &mut from, &mut to);
        *slots = RegionSlots::new(new, index);
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
