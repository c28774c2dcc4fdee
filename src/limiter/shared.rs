//! A limiter whose states live in a shared region: what it reads back (the region's counts), and how
//! it follows the region's file when it is removed or replaced. Its states say what limit wrote them,
//! and decisions convert those another process wrote under other limits (see `Shard::reconcile`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Limiter;
use crate::algorithm::State;
use crate::error::{Error, Result};
use crate::rules::GroupIds;
use crate::shared::layout::{RegionSummary, SharedRegion};
use crate::shared::region::AtPath;
use crate::shared::table::RegionTable;
use crate::state_map::Owner;

/// How often a process checks that its region's file is still at its path (an `fstat` and an `lstat`,
/// about 2 µs): the longest it decides in a removed or replaced file.
pub const REGION_CHECK_NS: u64 = 250_000_000;

impl Limiter {
    /// What the whole shared region holds and has decided, by every process; `None` in memory.
    #[must_use]
    pub fn shared_summary(&self) -> Option<RegionSummary> {
        let region = self.states.shared_region()?;
        let names = self.current.lock().ids.clone_names();
        let mut summary = region.summary(true, &|id| names.get(id as usize).filter(|n| !n.is_empty()).cloned());
        summary.stalls = self.stalls();
        Some(summary)
    }

    /// Group ids and seeds given by `region`.
    pub(super) fn region_ids(region: &Arc<SharedRegion>) -> GroupIds {
        let (registry, defs) = (Arc::clone(region), Arc::clone(region));
        GroupIds::registered(Arc::new(move |name| registry.group_id(name)), Arc::new(move |limit| defs.def_id(limit)))
    }

    /// Checks, at a decision `REGION_CHECK_NS` or more after the last check, that the region's file is
    /// still at its path; moves the states to the file there now if not. Called with no lock held.
    #[inline]
    pub(super) fn watch_region(&self, now: u64) {
        let next = self.next_region_check.load(Ordering::Relaxed);
        if now >= next {
            self.check_region(now, next);
        }
    }

    #[cold]
    fn check_region(&self, now: u64, next: u64) {
        let later = now.saturating_add(REGION_CHECK_NS);
        // One thread checks; the others decide meanwhile.
        if self.next_region_check.compare_exchange(next, later, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return;
        }
        let Some(region) = self.states.shared_region() else { return };
        if matches!(region.still_at_path(), Ok(AtPath::Removed | AtPath::Replaced)) {
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
        self.states.move_to(&new, |old, from, to| carry(old, &new, from, to, &names, now));
        let _one_at_a_time = self.reconfiguring.lock();
        self.current.lock().ids = Self::region_ids(&new);
        let config = self.rules().config.clone();
        self.install_rules(config)
    }

    /// Forces the check of the region's file at the next decision (tests on a manual clock).
    pub fn check_region_now(&self) {
        if self.next_region_check.load(Ordering::Relaxed) != u64::MAX {
            self.next_region_check.store(0, Ordering::Relaxed);
        }
    }
}

/// Carries every state of `from` (a shard of the region `old`) into `to` (the same shard of `new`),
/// emptying `from`. A state keeps its key (the regions at one path hash peers alike: see
/// `layout::seeds_for_user`); its group and limit are named anew in `new`. One whose group's keys differ in
/// `new` (the group was dropped and taken up again in one region) or whose limit `old` cannot name is
/// dropped.
fn carry(
    old: &SharedRegion,
    new: &SharedRegion,
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
