//! The lock-striped state map: shards, each over the slots of its keys behind one lock, bounded by
//! `max_keys`. Where the slots live is the map's one choice (see [`Slots`]): this process's heap
//! ([`heap`]; up to 64 shards, each behind a `parking_lot::Mutex`), or a region of shared memory every
//! worker process of the machine maps ([`region`]; the region's shards, each behind the region shard's
//! robust lock alone). The algorithms run on the slots of either.
//!
//! A slot is 32 bytes: a 56-bit key identity with an 8-bit use counter in the same word, the
//! algorithm's 16-byte [`State`], and the key's [`Owner`] (its group and limit), so that each shard
//! keeps per-group counts of keys and evictions without walking its keys. The peer string is never
//! stored. When the map holds `max_keys` keys, the shard that inserts makes room with one pass (see
//! `room`): it drops every idle state (which never lets a key admit more than it could have; see
//! `State`), decays use counters, and evicts the least frequently used. The bound is global (one atomic
//! count, touched only on inserts and removals), so uneven shards never evict before the map is full.
//! So a flood of one-shot keys evicts one-shot keys, never a busy key, and the cost of eviction is
//! amortised to a few slot visits per insert.

mod heap;
pub mod region;
mod slots;

use std::borrow::Cow;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use crate::algorithm::{Limit, Log, State};
use crate::room::{BoundedTable, Removal, IDENTITY_SHIFT};
use heap::HeapSlots;
use region::attached::Attached;
use region::layout::SharedRegion;
use region::lock::Guard;
use region::table::RegionTable;
pub use slots::{AnySlots, Slots};

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
/// The most group names a limiter (and a shared region) knows: an owner packs a group id in 12 bits.
pub const MAX_GROUP_NAMES: usize = 1 << Owner::GROUP_BITS;
/// Keys per shard below which a limiter gets fewer shards (tiny `max_keys` values).
const MIN_KEYS_PER_SHARD: usize = 256;

/// Where a map's states live.
#[derive(Debug, Clone, Default)]
pub enum StatesIn {
    /// This process's heap.
    #[default]
    Heap,
    /// A region every process that opens it shares (made for the map's `max_keys`); a decision whose
    /// shard another process holds longer than [`STALL`] is decided as `on_stall` says.
    Region(Arc<SharedRegion>, OnStall),
}

/// What decides a request whose shard of a shared region another process holds longer than
/// [`STALL`] (stopped holding it): it is admitted, or refused, without its states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStall {
    #[default]
    Allow,
    Deny,
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
    /// Group ids below [`MAX_GROUP_NAMES`], limits below 64 (a rule's most).
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

/// A shard's counts, kept under its lock: states held (in the heap; a region's are walked), evicted and
/// dropped, per group id (grown when an id is first inserted). Dropping an idle state is not an eviction.
#[derive(Debug, Default)]
pub struct Counts {
    group_keys: Vec<u64>,
    group_evictions: Vec<u64>,
    group_dropped: Vec<u64>,
    evictions: u64,
}

impl Counts {
    /// Grows the per-group counts to hold group id `index`.
    fn size_for(&mut self, index: usize) {
        if index >= self.group_evictions.len() {
            self.group_keys.resize(index + 1, 0);
            self.group_evictions.resize(index + 1, 0);
            self.group_dropped.resize(index + 1, 0);
        }
    }

    /// Counts a state of group id `index` removed to make room.
    fn removed(&mut self, index: usize, removal: Removal) {
        self.size_for(index);
        match removal {
            Removal::Evicted => {
                self.group_evictions[index] += 1;
                self.evictions += 1;
            }
            Removal::Dropped => self.group_dropped[index] += 1,
        }
    }

    /// As `removed`, for a slot whose owner is `packed`.
    fn removed_packed(&mut self, packed: u32, removal: Removal) {
        self.removed(Owner::unpack(packed).group as usize, removal);
    }

    fn allocated_bytes(&self) -> usize {
        (self.group_keys.capacity() + self.group_evictions.capacity() + self.group_dropped.capacity())
            * std::mem::size_of::<u64>()
    }
}

/// One stripe of the map: its slots, its counts, and the caller's data, updated under the same lock.
/// In order: the fields a decision reads first (the slots' place, then the data's first fields), so
/// that they share the stripe's first lines (see `Stripe`).
#[derive(Debug)]
#[repr(C)]
pub struct Shard<C> {
    slots: AnySlots,
    pub data: C,
    counts: Counts,
}

impl<C> Shard<C> {
    /// The state of `key` (a copy), counted as a use.
    #[inline]
    pub fn touch(&mut self, key: u64) -> Option<State> {
        self.slots.state_mut(key).map(|state| *state)
    }

    /// Makes the state of `key` (if any) one written under `limit` (see [`Slots::reconcile`]); nothing in
    /// the heap, where one process's states follow its limits. `def`: the region's id of `limit` when
    /// known (0: looked up). The state before and after, when converted.
    #[inline]
    pub fn reconcile(&mut self, key: u64, limit: (&Limit, u16), now: u64) -> Option<(State, State)> {
        self.slots.reconcile(key, limit, now, &mut self.counts)
    }

    /// Whether the states live in a shared region (where `reconcile` converts them).
    #[inline]
    #[must_use]
    pub const fn in_region(&self) -> bool {
        matches!(self.slots, AnySlots::Region(_))
    }

    /// Replaces the state of `key`, read as written under `limit` (region id `def`, 0: looked up), by what
    /// `change` makes of it, counted as a use; `None`: no such key; `Some(Err)`: `change` declined and
    /// nothing was written. In a shared region the slot's writer is checked in the same lookup, and a
    /// state another limit wrote is converted first ([`Shard::reconcile`]): the decision's hot path, one
    /// probe of the table.
    #[inline]
    pub fn update_under<E>(
        &mut self,
        key: u64,
        limit: (&Limit, u16),
        now: u64,
        change: impl FnOnce(&State) -> Result<State, E>,
    ) -> Option<Result<(), E>> {
        // `change` is called in one place, so that it is inlined.
        let state = self.slots.state_under(key, limit, now, &mut self.counts)?;
        Some(change(state).map(|changed| *state = changed))
    }

    /// Stores the state of a key of `group` that `update` did not find, written under `limit`, making
    /// room first if the map is full. Group ids index the per-group counts, so they should be small (a
    /// group's index).
    pub fn insert(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit)) {
        debug_assert!(owned.0.group < 1 << Owner::GROUP_BITS && owned.0.limit < 1 << Owner::LIMIT_BITS);
        self.slots.insert(key, state, now, owned, &mut self.counts);
    }

    /// The timestamps of a sliding-log key (empty if none): borrowed from the heap, read out of a region.
    #[inline]
    #[must_use]
    pub fn log(&self, key: u64) -> Cow<'_, Log> {
        self.slots.log(key)
    }

    /// Runs `change` on the timestamps of `key` (empty if none).
    pub fn with_log<R>(&mut self, key: u64, change: impl FnOnce(&mut Log) -> R) -> R {
        self.slots.with_log(key, change, &mut self.counts)
    }

    /// Takes the timestamps of `key` out (empty if none), e.g. to move them to another key.
    pub fn take_log(&mut self, key: u64) -> Log {
        self.slots.take_log(key, &mut self.counts)
    }

    /// Stores `log` as the timestamps of `key`.
    pub fn put_log(&mut self, key: u64, log: Log) {
        self.slots.put_log(key, log, &mut self.counts);
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
        self.slots.count_decision(allowed, peer, hash);
    }

    /// Records permits of `key` this process took (`delta` > 0) or gave back, when the states live in
    /// a region: a process that dies holding them gives them back through `take_dead_leases`.
    pub fn lease(&mut self, key: u64, delta: i64) {
        self.slots.lease(key, delta);
    }

    /// Whether permits of `key` this process takes now can be recorded in the region, so that its
    /// death gives them back (always in the heap): false when every lease is in use.
    #[must_use]
    pub fn reserve_lease(&mut self, key: u64) -> bool {
        self.slots.reserve_lease(key)
    }

    /// The permits of `key` held by processes that have ended (0 in the heap), forgotten.
    pub fn take_dead_leases(&mut self, key: u64) -> u64 {
        self.slots.take_dead_leases(key)
    }

    /// The state of `key` if it has one, without counting a use.
    #[inline]
    #[must_use]
    pub fn find(&self, key: u64) -> Option<State> {
        self.slots.find(key)
    }

    /// Writes `state` for `key`, written under `limit`, inserting it for `owner` if needed (a stored key
    /// keeps its owner).
    pub fn store(&mut self, key: u64, state: State, now: u64, owned: (Owner, &Limit)) {
        self.slots.store(key, state, now, owned, &mut self.counts);
    }

    /// Runs `change` on every state of `group` with the shard's data, its key, its limit's index, the
    /// limit it was written under, and its log (empty for limits that keep none); a state `change`
    /// declines (false) is removed. The limit written under is known in a shared region (`None` in
    /// the heap, or unrecorded): `change` sets it to the limit the state is now written under.
    pub fn change_group(
        &mut self,
        group: u32,
        change: impl FnMut(&mut C, u64, usize, &mut Option<Limit>, &mut State, &mut Log) -> bool,
    ) {
        self.slots.change_group(group, &mut self.data, change, &mut self.counts);
    }

    pub fn remove(&mut self, key: u64) -> bool {
        self.slots.remove(key, &mut self.counts)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every state; evictions stay counted.
    pub fn clear(&mut self) {
        self.slots.clear(&mut self.counts);
    }

    /// How many states of each group id this shard holds (by id), in one walk, when its states are in a
    /// region (which keeps no per-group counts: every process inserts and evicts there).
    #[must_use]
    pub fn region_group_keys(&self) -> Option<Vec<u64>> {
        self.slots.walked_group_keys()
    }

    /// How many states of `group` this shard holds.
    #[must_use]
    pub fn group_keys(&self, group: u32) -> u64 {
        if let Some(keys) = self.region_group_keys() {
            return keys.get(group as usize).copied().unwrap_or(0);
        }
        self.counts.group_keys.get(group as usize).copied().unwrap_or(0)
    }

    /// How many states of `group` this shard has evicted (idle states dropped are not counted).
    #[must_use]
    pub fn group_evictions(&self, group: u32) -> u64 {
        self.counts.group_evictions.get(group as usize).copied().unwrap_or(0)
    }

    /// How many idle states of `group` this shard has dropped to make room (a drop never lets a key
    /// admit more than it could have).
    #[must_use]
    pub fn group_dropped(&self, group: u32) -> u64 {
        self.counts.group_dropped.get(group as usize).copied().unwrap_or(0)
    }

    /// How many states this shard has evicted.
    #[must_use]
    pub const fn evictions(&self) -> u64 {
        self.counts.evictions
    }

    /// Approximate heap bytes held by this shard's slots, logs and per-group counts.
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        self.slots.allocated_bytes() + self.counts.allocated_bytes()
    }
}

/// A padded shard, so that two threads on neighbouring shards do not share a cache line.
#[repr(align(128))]
#[derive(Debug)]
struct Padded<T>(T);

/// One stripe of the map: a shard and what guards it. In the heap, the process's `lock`; in a shared
/// region, the robust lock of the region's shard of the same index alone (it serialises this process's
/// threads as it does other processes'), found through `region`: the region the shard's states live in
/// now, which a move (`StateMap::move_to`) changes under the locks of both regions' shards.
///
/// Laid out in order, the fields a decision reads first: a map in a region has thousands of stripes, of
/// which a decision over many keys finds its own out of the caches; `StateMap::prefetch` asks for its
/// first lines early.
#[derive(Debug)]
#[repr(C)]
struct Stripe<C> {
    lock: Mutex<()>,
    region: AtomicPtr<SharedRegion>,
    shard: UnsafeCell<Shard<C>>,
}

// SAFETY: the shard is reached only under the stripe's lock (heap) or its region shard's lock (region),
// each of which one thread holds at a time: the same access a `Mutex<Shard<C>>` gives.
unsafe impl<C: Send> Sync for Stripe<C> {}

/// The whole map: `max_keys` spread over a power-of-two number of shards.
#[derive(Debug)]
pub struct StateMap<C> {
    stripes: Box<[Padded<Stripe<C>>]>,
    shard_shift: u32,
    keys: Arc<AtomicUsize>,
    max_keys: usize,
    /// The region the states live in, when processes share them.
    region: Option<Attached>,
}

/// A shard locked for this thread: by the process's lock in the heap, by the region shard's robust lock
/// when the states live in a region (one lock either way).
pub struct ShardGuard<'a, C> {
    _region: Option<Guard<'a>>,
    _heap: Option<MutexGuard<'a, ()>>,
    shard: &'a mut Shard<C>,
}

impl<C> std::ops::Deref for ShardGuard<'_, C> {
    type Target = Shard<C>;

    #[inline]
    fn deref(&self) -> &Shard<C> {
        self.shard
    }
}

impl<C> std::ops::DerefMut for ShardGuard<'_, C> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shard<C> {
        self.shard
    }
}

impl<C> StateMap<C> {
    /// A map for at most `max_keys` keys whose states live where `states` says; `data` makes each
    /// shard's data (counters, quota records). In a region the map has the region's shards.
    ///
    /// # Errors
    /// A region made for another `max_keys`.
    pub fn new(max_keys: usize, data: impl Fn() -> C, states: StatesIn) -> crate::error::Result<Self> {
        let max_keys = max_keys.max(1);
        let region = match states {
            StatesIn::Heap => None,
            StatesIn::Region(region, _) => {
                if region.max_keys() != max_keys {
                    return Err(crate::error::Error::value(
                        "max_keys",
                        format!(
                            "the shared region {} was made for max_keys={}, this limiter has {max_keys}",
                            region.path().display(),
                            region.max_keys(),
                        ),
                    ));
                }
                Some(Attached::new(region))
            }
        };
        let wanted = match &region {
            None => Self::shard_count(max_keys),
            Some(attached) => attached.current().shards(),
        };
        let current = region.as_ref().map(Attached::current);
        let keys = Arc::new(AtomicUsize::new(0));
        let stripes = (0..wanted)
            .map(|index| {
                let slots = match &region {
                    None => AnySlots::Heap(HeapSlots::new(BoundedTable::new(Arc::clone(&keys), max_keys, wanted))),
                    Some(attached) => AnySlots::Region(attached.slots(index)),
                };
                let at = current.as_ref().map_or(std::ptr::null_mut(), |r| Arc::as_ptr(r).cast_mut());
                Padded(Stripe {
                    lock: Mutex::new(()),
                    region: AtomicPtr::new(at),
                    shard: UnsafeCell::new(Shard { slots, counts: Counts::default(), data: data() }),
                })
            })
            .collect();
        let shard_shift = 64 - wanted.trailing_zeros();
        Ok(Self { stripes, shard_shift, keys, max_keys, region })
    }

    /// The region the states live in now, if shared.
    #[must_use]
    pub fn shared_region(&self) -> Option<Arc<SharedRegion>> {
        self.region.as_ref().map(Attached::current)
    }

    /// The region to move the states away from, when a decision at `now` finds that its file is no
    /// longer at its path (checked at most every `REGION_CHECK_NS`); `None` in the heap.
    #[inline]
    pub fn watch_region(&self, now: u64) -> Option<Arc<SharedRegion>> {
        self.region.as_ref()?.watch(now)
    }

    /// Forces the check of the region's file at the next decision (tests on a manual clock).
    pub fn check_region_now(&self) {
        if let Some(attached) = &self.region {
            attached.check_now();
        }
    }

    /// Moves the states to `new`, a region for the same `max_keys` (the file at the path now), one
    /// shard at a time: under the locks of the shard in both regions (the old first, as every process
    /// that moves takes them), `carry` moves each state of the old shard into the new one (and empties
    /// the old, so that another process moving too carries nothing twice); from then on the shard
    /// decides in `new`. A thread that found the shard in the old region and waited for its lock sees,
    /// once it holds it, that the shard moved, and takes the new region's. A no-op in the heap, or when
    /// `new` has another number of shards (it cannot: same `max_keys`).
    pub fn move_to(
        &self,
        new: &Arc<SharedRegion>,
        mut carry: impl FnMut(&SharedRegion, &mut RegionTable, &mut RegionTable),
    ) {
        let Some(attached) = &self.region else { return };
        let old = attached.current();
        if Arc::ptr_eq(&old, new) || old.shards() != new.shards() {
            return;
        }
        for (index, stripe) in self.stripes.iter().enumerate() {
            let stripe = &stripe.0;
            let old_held = old.lock(index);
            let new_held = new.lock(index);
            if !std::ptr::eq(stripe.region.load(Ordering::Relaxed), Arc::as_ptr(&old)) {
                continue;
            }
            // SAFETY: the shard's region lock is held (the old region's, where it lives until the store below).
            let shard = unsafe { &mut *stripe.shard.get() };
            if let AnySlots::Region(slots) = &mut shard.slots {
                let recovered = (old_held.recovered, new_held.recovered);
                Attached::move_shard((&old, new), index, recovered, slots, &mut carry);
            }
            stripe.region.store(Arc::as_ptr(new).cast_mut(), Ordering::Release);
            drop(new_held);
            drop(old_held);
        }
        attached.moved(old, new);
    }

    /// How many shards a map for `max_keys` keys has.
    #[must_use]
    pub fn shard_count(max_keys: usize) -> usize {
        (max_keys.max(1) / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS).next_power_of_two().min(MAX_SHARDS)
    }

    /// How many shards a shared region for `max_keys` keys has: more than the heap's, so that processes
    /// deciding for different keys seldom take the same shard's lock, whose cache line would move
    /// between their cores at each decision (in one process, 64 shards are enough for its threads).
    /// A map in the region has as many, so that the region shard's lock is the only lock a decision takes.
    #[must_use]
    pub fn shared_shard_count(max_keys: usize) -> usize {
        (max_keys.max(1) / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARED_SHARDS).next_power_of_two().min(MAX_SHARED_SHARDS)
    }

    /// Starts fetching what a decision for `key` reads first, when the states live in a region: the
    /// region's lock and slots of its shard (see `SharedRegion::prefetch`), and the lines of its stripe
    /// holding the shard's slots' place and its data's first fields (see `Stripe`). Nothing in the
    /// heap, whose shards are few and stay in the caches.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if let Some(attached) = &self.region {
            let stripe = &self.stripes[self.index(key)].0;
            region::layout::prefetch_line(std::ptr::from_ref(stripe).cast());
            // SAFETY: the address of a field, computed without reading the shard.
            let data = unsafe { &raw const (*stripe.shard.get()).data };
            region::layout::prefetch_line(data.cast());
            attached.prefetch(key);
        }
    }

    /// The shard of `key`: its index.
    #[inline]
    fn index(&self, key: u64) -> usize {
        // shard_shift == 64 for a single shard: checked_shr gives None -> shard 0.
        #[allow(clippy::cast_possible_truncation)]
        let index = key.checked_shr(self.shard_shift).unwrap_or(0) as usize;
        index
    }

    /// Shard `index` of a map in a region, under the region shard's lock alone, waited for at most
    /// `deadline` (`None`: as long as it takes). A shard that moved to another region while this thread
    /// waited for the old one's lock is looked up again. Out of line: the heap's hot path keeps only the
    /// test for a region.
    #[inline(never)]
    fn lock_region(&self, index: usize, deadline: Option<Duration>) -> Option<ShardGuard<'_, C>> {
        let stripe = &self.stripes[index].0;
        loop {
            let at = stripe.region.load(Ordering::Acquire);
            // SAFETY: every region the map has lived in stays mapped for its life (see `Attached`).
            let region: &SharedRegion = unsafe { &*at };
            let held = region.lock_within(index, deadline)?;
            // Written under this lock by a move: read after taking it, it says where the shard is now.
            if !std::ptr::eq(stripe.region.load(Ordering::Relaxed), at) {
                continue;
            }
            // SAFETY: the shard's region lock is held, by this thread alone of every thread of every process.
            let shard = unsafe { &mut *stripe.shard.get() };
            if held.recovered {
                // The last holder died mid-write: make the shard whole before anything reads it.
                if let AnySlots::Region(slots) = &mut shard.slots {
                    slots.table().repair();
                }
            }
            return Some(ShardGuard { _region: Some(held), _heap: None, shard });
        }
    }

    /// Shard `index` of a map in the heap, under the process's lock.
    #[inline]
    fn lock_heap(&self, index: usize) -> ShardGuard<'_, C> {
        let stripe = &self.stripes[index].0;
        let held = stripe.lock.lock();
        // SAFETY: the stripe's lock is held: a map in the heap reaches its shards only under it.
        let shard = unsafe { &mut *stripe.shard.get() };
        ShardGuard { _region: None, _heap: Some(held), shard }
    }

    /// The shard that holds `key`, locked. The shard comes from the key's top bits (a table places
    /// by a mix of them all), and keys that share their top 32 bits share a shard: see [`StateMap::related_key`].
    #[inline]
    #[must_use]
    pub fn lock(&self, key: u64) -> ShardGuard<'_, C> {
        let index = self.index(key);
        if self.region.is_none() {
            return self.lock_heap(index);
        }
        // Without a deadline the region's lock is always taken.
        self.lock_region(index, None).unwrap_or_else(|| unreachable!("no deadline"))
    }

    /// As [`StateMap::lock`], for a decision: a shared region's lock is waited for at most `STALL`;
    /// `None` when a holder keeps it longer (a process stopped holding it), for the caller to decide
    /// without the states.
    #[allow(clippy::inline_always)] // the hot path: as a call of its own it cost a copy of the guard
    #[inline(always)]
    #[must_use]
    pub fn lock_deciding(&self, key: u64) -> Option<ShardGuard<'_, C>> {
        let index = self.index(key);
        if self.region.is_none() {
            return Some(self.lock_heap(index));
        }
        self.lock_region(index, Some(STALL))
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

    /// Every shard in turn, locked, for walks over all states.
    pub fn shards(&self) -> impl Iterator<Item = ShardGuard<'_, C>> {
        (0..self.stripes.len()).map(|index| {
            if self.region.is_none() {
                return self.lock_heap(index);
            }
            self.lock_region(index, None).unwrap_or_else(|| unreachable!("no deadline"))
        })
    }

    #[must_use]
    pub fn len(&self) -> usize {
        if let Some(attached) = &self.region {
            return usize::try_from(attached.current().keys()).unwrap_or(usize::MAX);
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
    use heap::{log_bytes, Slot};

    /// The heap slots of a shard of a map in the heap.
    fn heap(shard: &Shard<()>) -> &HeapSlots {
        let AnySlots::Heap(heap) = &shard.slots else { panic!("in a region") };
        heap
    }

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
        let store: StateMap<()> = StateMap::new(10_000, || (), StatesIn::Heap).unwrap();
        let mut shard = store.lock(key(1));
        let walk = |shard: &Shard<()>| heap(shard).logs.map.values().map(log_bytes).sum::<usize>();
        for i in 0..50 {
            shard.insert(key(i), busy(0), 0, owned(0, 0));
            shard.with_log(key(i), |log| (0..i).for_each(|at| log.insert(at, 1)));
        }
        assert_eq!(heap(&shard).logs.bytes, walk(&shard));
        let moved = shard.take_log(key(7));
        shard.put_log(key(60), moved);
        shard.with_log(key(3), Log::shrink_to_fit);
        assert!(shard.remove(key(9)));
        assert_eq!(heap(&shard).logs.bytes, walk(&shard));
        shard.clear();
        assert_eq!((heap(&shard).logs.bytes, walk(&shard)), (0, 0));
    }

    #[test]
    fn holds_at_most_max_keys() {
        let store: StateMap<()> = StateMap::new(1_000, || (), StatesIn::Heap).unwrap();
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
                let store: StateMap<()> = StateMap::new(2_000, || (), StatesIn::Heap).unwrap();
                let hot = key(u64::MAX);
                store.lock(hot).insert(hot, busy(0), 0, owned(0, 0));
                for i in 0..100_000 {
                    if i % every == 0 {
                        assert!(store.lock(hot).touch(hot).is_some(), "seed {seed}, 1 use per {every}: evicted at {i}");
                    }
                    store.lock(key(i)).insert(key(i), busy(0), 0, owned(0, 0));
                }
                let evictions: u64 = store.shards().map(|s| s.evictions()).sum();
                assert!(evictions > 95_000 && store.len() <= 2_000);
            }
        }
    }

    #[test]
    fn idle_states_are_dropped_before_anything_is_evicted() {
        let store: StateMap<()> = StateMap::new(256, || (), StatesIn::Heap).unwrap();
        for i in 0..256 {
            store.lock(key(i)).insert(key(i), State { t: 10, a: 0, b: 0 }, 0, owned(0, 0));
        }
        // At time 10 every state is idle: making room drops them without counting evictions.
        store.lock(key(1_000)).insert(key(1_000), busy(10), 10, owned(0, 0));
        assert_eq!(store.shards().map(|s| s.evictions()).sum::<u64>(), 0);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn related_keys_share_a_shard_but_not_a_slot() {
        let store: StateMap<()> = StateMap::new(1_000_000, || (), StatesIn::Heap).unwrap();
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
        let store: StateMap<()> = StateMap::new(1_000_000, || (), StatesIn::Heap).unwrap();
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
        let store: StateMap<()> = StateMap::new(1_000, || (), StatesIn::Heap).unwrap();
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
            assert_eq!((0..3).map(|g| shard.group_evictions(g)).sum::<u64>(), shard.evictions());
        }
        assert_eq!(keys_0 + keys_1, store.len() as u64);
        assert_eq!(evicted_0 + evicted_1, store.shards().map(|s| s.evictions()).sum::<u64>());
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
        let store: StateMap<()> = StateMap::new(1_000, || (), StatesIn::Heap).unwrap();
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
