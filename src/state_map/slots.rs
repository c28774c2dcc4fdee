//! Where one shard's states live, behind one interface: [`Slots`], implemented by this process's heap
//! ([`HeapSlots`]) and by a region of shared memory ([`RegionSlots`]). The algorithms run on the slots
//! of either. [`AnySlots`] dispatches with a `match`, not a trait object, so that the decision's hot
//! path stays inlined; a new place for states is one implementation and one variant.

use std::borrow::Cow;

use super::heap::HeapSlots;
use super::region::RegionSlots;
use super::{Counts, Owner};
use crate::algorithm::{Limit, Log, State};

/// What a shard does with its states, wherever they live. `counts` are the shard's per-group counts,
/// which an implementation updates as it inserts, removes and evicts. The methods with a default are
/// what only a region shared with other processes needs (states another process wrote under other
/// limits, region-wide counts, permits of processes that die).
pub trait Slots {
    /// The state of `key`, counted as a use.
    fn state_mut(&mut self, key: u64) -> Option<&mut State>;

    /// The state of `key`, counted as a use, to be read as written under `limit` (region id `def`, 0:
    /// looked up): a state another limit wrote is converted first (see [`Slots::reconcile`]).
    #[inline]
    fn state_under(&mut self, key: u64, limit: (&Limit, u16), now: u64, counts: &mut Counts) -> Option<&mut State> {
        let _ = (limit, now, counts);
        self.state_mut(key)
    }

    /// The state of `key` if it has one, without counting a use.
    fn find(&self, key: u64) -> Option<State>;

    /// Makes the state of `key` (if any) one written under `limit`: converted as a reconfiguration
    /// converts it when another process wrote it under another limit (other rules in a rolling deploy, a
    /// `reload()`, another quota). The state before and after, when converted.
    fn reconcile(&mut self, key: u64, limit: (&Limit, u16), now: u64, counts: &mut Counts) -> Option<(State, State)> {
        let _ = (key, limit, now, counts);
        None
    }

    /// Stores the state of a key `state_mut` did not find, written under `limit`, making room first when
    /// the map is full.
    fn insert(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit), counts: &mut Counts);

    /// Writes `state` for `key`, written under `limit`, inserting it for `owner` if needed.
    fn store(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit), counts: &mut Counts);

    /// The timestamps of a sliding-log key (empty if none).
    fn log(&self, key: u64) -> Cow<'_, Log>;

    /// Runs `change` on the timestamps of `key` (empty if none).
    fn with_log<R>(&mut self, key: u64, change: impl FnOnce(&mut Log) -> R, counts: &mut Counts) -> R;

    /// Takes the timestamps of `key` out (empty if none).
    fn take_log(&mut self, key: u64, counts: &mut Counts) -> Log;

    /// Stores `log` as the timestamps of `key`.
    fn put_log(&mut self, key: u64, log: Log, counts: &mut Counts);

    /// Runs `change` on every state of `group` (see `Shard::change_group`).
    fn change_group<C>(
        &mut self,
        group: u32,
        data: &mut C,
        change: impl FnMut(&mut C, u64, usize, &mut Option<Limit>, &mut State, &mut Log) -> bool,
        counts: &mut Counts,
    );

    /// Forgets the state of `key`; whether it had one.
    fn remove(&mut self, key: u64, counts: &mut Counts) -> bool;

    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every state.
    fn clear(&mut self, counts: &mut Counts);

    /// Heap bytes held (a region's are in its file, counted by its summary).
    fn allocated_bytes(&self) -> usize;

    /// How many states of each group id these slots hold, walked, when no per-group count is kept
    /// here (`None`: see `counts`).
    fn walked_group_keys(&self) -> Option<Vec<u64>> {
        None
    }

    /// Counts a decision for every process to read (and a refusal of `peer` among those refused most).
    #[inline]
    fn count_decision(&mut self, allowed: bool, peer: &str, hash: u64) {
        let _ = (allowed, peer, hash);
    }

    /// Records permits of `key` this process took (`delta` > 0) or gave back, so that they come back
    /// when the process dies holding them.
    fn lease(&mut self, key: u64, delta: i64) {
        let _ = (key, delta);
    }

    /// Whether permits of `key` this process takes now can be recorded (false when every lease is in use).
    fn reserve_lease(&mut self, key: u64) -> bool {
        let _ = key;
        true
    }

    /// The permits of `key` held by processes that have ended, forgotten.
    fn take_dead_leases(&mut self, key: u64) -> u64 {
        let _ = key;
        0
    }
}

/// A shard's slots, wherever they live. Laid out in order (tag, then the slots' first fields), so that a
/// decision's reads of them come first in its shard's memory (see `state_map::Stripe`).
#[derive(Debug)]
#[repr(C, u8)]
pub enum AnySlots {
    Heap(HeapSlots),
    Region(RegionSlots),
}

/// Calls the same method on whichever slots these are.
macro_rules! each {
    ($slots:expr, $s:ident => $call:expr) => {
        match $slots {
            AnySlots::Heap($s) => $call,
            AnySlots::Region($s) => $call,
        }
    };
}

impl Slots for AnySlots {
    #[inline]
    fn state_mut(&mut self, key: u64) -> Option<&mut State> {
        each!(self, s => s.state_mut(key))
    }

    #[inline]
    fn state_under(&mut self, key: u64, limit: (&Limit, u16), now: u64, counts: &mut Counts) -> Option<&mut State> {
        each!(self, s => s.state_under(key, limit, now, counts))
    }

    #[inline]
    fn find(&self, key: u64) -> Option<State> {
        each!(self, s => s.find(key))
    }

    #[inline]
    fn reconcile(&mut self, key: u64, limit: (&Limit, u16), now: u64, counts: &mut Counts) -> Option<(State, State)> {
        each!(self, s => s.reconcile(key, limit, now, counts))
    }

    fn insert(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit), counts: &mut Counts) {
        each!(self, s => s.insert(key, state, now, owned, counts));
    }

    fn store(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit), counts: &mut Counts) {
        each!(self, s => s.store(key, state, now, owned, counts));
    }

    #[inline]
    fn log(&self, key: u64) -> Cow<'_, Log> {
        each!(self, s => s.log(key))
    }

    fn with_log<R>(&mut self, key: u64, change: impl FnOnce(&mut Log) -> R, counts: &mut Counts) -> R {
        each!(self, s => s.with_log(key, change, counts))
    }

    fn take_log(&mut self, key: u64, counts: &mut Counts) -> Log {
        each!(self, s => s.take_log(key, counts))
    }

    fn put_log(&mut self, key: u64, log: Log, counts: &mut Counts) {
        each!(self, s => s.put_log(key, log, counts));
    }

    fn change_group<C>(
        &mut self,
        group: u32,
        data: &mut C,
        change: impl FnMut(&mut C, u64, usize, &mut Option<Limit>, &mut State, &mut Log) -> bool,
        counts: &mut Counts,
    ) {
        each!(self, s => s.change_group(group, data, change, counts));
    }

    fn remove(&mut self, key: u64, counts: &mut Counts) -> bool {
        each!(self, s => s.remove(key, counts))
    }

    fn len(&self) -> usize {
        each!(self, s => s.len())
    }

    fn clear(&mut self, counts: &mut Counts) {
        each!(self, s => s.clear(counts));
    }

    fn allocated_bytes(&self) -> usize {
        each!(self, s => s.allocated_bytes())
    }

    fn walked_group_keys(&self) -> Option<Vec<u64>> {
        each!(self, s => s.walked_group_keys())
    }

    #[inline]
    fn count_decision(&mut self, allowed: bool, peer: &str, hash: u64) {
        each!(self, s => s.count_decision(allowed, peer, hash));
    }

    fn lease(&mut self, key: u64, delta: i64) {
        each!(self, s => s.lease(key, delta));
    }

    fn reserve_lease(&mut self, key: u64) -> bool {
        each!(self, s => s.reserve_lease(key))
    }

    fn take_dead_leases(&mut self, key: u64) -> u64 {
        each!(self, s => s.take_dead_leases(key))
    }
}
