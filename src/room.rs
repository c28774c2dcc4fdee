//! Tables bounded by eviction: the state map's shards and the quota records are both a
//! [`BoundedTable`], which tags entries with a use counter, keeps the count shared by all shards, and
//! makes room when the bound is reached; the two differ only in which entries are dead or pinned.
//!
//! A tag is `identity << 8 | uses`: the key's hash without its low byte, and a saturating count of
//! uses. Making room is one pass: drop the entries that no longer matter, halve use counts once per
//! table's worth of inserts (so old popularity decays, but a busy key is never decayed faster than it
//! is used), then, if that freed less than an eighth of the table, evict the least used until it has.
//! Last, the table is sized back to its share of the bound: evictions leave tombstones, and without
//! this a flood of new keys makes the table grow again and again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::probe::{LineTable, Probed};

/// Keys are 64-bit keyed hashes; the low byte of a tag holds the use counter instead.
pub(crate) const IDENTITY_SHIFT: u32 = 8;
/// The tag of a free slot. A use counter stops one short of 255, so no entry's tag is this.
pub(crate) const VACANT_TAG: u64 = u64::MAX;
const MAX_USES: u8 = u8::MAX - 1;

/// An entry with a tag.
pub(crate) trait Tagged: Copy {
    fn tag(&self) -> u64;
    fn set_tag(&mut self, tag: u64);
    /// A free slot (its tag is [`VACANT_TAG`]).
    fn vacant() -> Self;

    #[inline]
    fn identity(&self) -> u64 {
        self.tag() >> IDENTITY_SHIFT
    }

    #[inline]
    fn uses(&self) -> u8 {
        // The low byte.
        #[allow(clippy::cast_possible_truncation)]
        let uses = self.tag() as u8;
        uses
    }

    #[inline]
    fn touch(&mut self) {
        if self.uses() < MAX_USES {
            self.set_tag(self.tag() + 1);
        }
    }
}

impl<T: Tagged> Probed for T {
    #[inline]
    fn vacant() -> Self {
        Tagged::vacant()
    }

    #[inline]
    fn occupied(&self) -> bool {
        self.tag() != VACANT_TAG
    }

    #[inline]
    fn identity(&self) -> u64 {
        Tagged::identity(self)
    }
}

/// What one pass of making room removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Freed {
    /// Entries that no longer mattered.
    pub dropped: usize,
    /// Entries evicted as the least used.
    pub evicted: usize,
}

/// Why making room removed an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    /// It no longer mattered (`dead`): not an eviction.
    Dropped,
    /// It was among the least used.
    Evicted,
}

/// One shard's table of entries, bounded with the tables of the other shards by one shared count.
#[derive(Debug)]
pub(crate) struct BoundedTable<T> {
    table: LineTable<T>,
    /// Entries in all tables of this kind (one per shard), and their bound.
    count: Arc<AtomicUsize>,
    max: usize,
    /// When to decay use counts, and the size to shrink back to.
    room: Room,
}

impl<T: Tagged> BoundedTable<T> {
    /// The table of one of `shards` shards, which hold at most `max` entries between them.
    pub fn new(count: Arc<AtomicUsize>, max: usize, shards: usize) -> Self {
        Self { table: LineTable::new(), count, max, room: Room::new(max.div_ceil(shards.max(1))) }
    }

    /// The entry of `key`, without counting a use.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&T> {
        self.table.get(key >> IDENTITY_SHIFT)
    }

    /// The entry of `key`, counted as a use.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        let entry = self.table.get_mut(key >> IDENTITY_SHIFT)?;
        entry.touch();
        Some(entry)
    }

    /// Adds `entry` for `key` (which `get_mut` did not find), tagged with one use. When the bound is
    /// reached, `make_room` runs first (normally `make_room` below, with the caller's rules); if it
    /// frees nothing the entry goes in anyway: the bound is then exceeded by at most one per shard.
    pub fn insert(&mut self, key: u64, mut entry: T, make_room: impl FnOnce(&mut Self)) -> &mut T {
        if self.count.load(Ordering::Relaxed) >= self.max {
            make_room(self);
        }
        entry.set_tag((key >> IDENTITY_SHIFT) << IDENTITY_SHIFT | 1);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.room.inserted();
        self.table.insert(entry, self.room.share)
    }

    pub fn remove(&mut self, key: u64) -> Option<T> {
        let entry = self.table.remove(key >> IDENTITY_SHIFT)?;
        self.count.fetch_sub(1, Ordering::Relaxed);
        Some(entry)
    }

    /// Keeps the entries `keep` says to (it may change them, but not their tags).
    pub fn retain(&mut self, keep: impl FnMut(&mut T) -> bool) {
        let before = self.table.len();
        self.table.retain(keep);
        self.count.fetch_sub(before - self.table.len(), Ordering::Relaxed);
    }

    pub fn clear(&mut self) {
        self.count.fetch_sub(self.table.len(), Ordering::Relaxed);
        self.table.clear();
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// For tests of how the table is sized back.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Heap bytes of the table's slots.
    pub fn allocated_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<T>()
    }

    /// One pass of making room (see `Room::make`), keeping the shared count.
    pub fn make_room(
        &mut self,
        dead: impl Fn(&T) -> bool,
        pinned: impl Fn(&T) -> bool,
        gone: impl FnMut(&T, Removal),
    ) -> Freed {
        let freed = self.room.make(&mut self.table, dead, pinned, gone);
        self.count.fetch_sub(freed.dropped + freed.evicted, Ordering::Relaxed);
        freed
    }
}

/// The bookkeeping of one bounded table.
#[derive(Debug)]
struct Room {
    /// Inserts since use counts were last halved.
    inserts_since_decay: usize,
    /// This table's fair part of the bound: what its buckets are sized back to.
    share: usize,
}

impl Room {
    fn new(share: usize) -> Self {
        Self { inserts_since_decay: 0, share }
    }

    #[inline]
    fn inserted(&mut self) {
        self.inserts_since_decay += 1;
    }

    /// One pass over `table`: drops the entries `dead` picks, then evicts the least used that `pinned`
    /// does not hold until an eighth (at least one) is free. `gone` sees every removed entry, and why.
    fn make<T: Tagged>(
        &mut self,
        table: &mut LineTable<T>,
        dead: impl Fn(&T) -> bool,
        pinned: impl Fn(&T) -> bool,
        mut gone: impl FnMut(&T, Removal),
    ) -> Freed {
        let before = table.len();
        let want = (before / 8).max(1);
        let decay = self.inserts_since_decay >= before.max(64);
        if decay {
            self.inserts_since_decay = 0;
        }
        table.retain(|entry| {
            if dead(entry) {
                gone(entry, Removal::Dropped);
                return false;
            }
            if decay {
                let tag = entry.tag();
                entry.set_tag((tag & !0xFF) | u64::from(entry.uses() / 2));
            }
            true
        });
        let dropped = before - table.len();
        let mut evicted = 0;
        if dropped < want && !table.is_empty() {
            let mut evictions = Evictions::new(table.iter().filter(|e| !pinned(e)).map(T::uses), want - dropped);
            let left = table.len();
            table.retain(|entry| {
                let evict = !pinned(entry) && evictions.evicts(entry.uses());
                if evict {
                    gone(entry, Removal::Evicted);
                }
                !evict
            });
            evicted = left - table.len();
        }
        table.shrink_to(self.share);
        Freed { dropped, evicted }
    }
}

/// Which entries making room evicts to free `excess` of them, least used first: every entry used fewer
/// times than a threshold, and enough of those used exactly as often (a counting sort by use), picked at
/// random wherever they sit (selection sampling). Taken in table order instead, evictions would come from
/// one end of a probed table again and again, leaving the rest packed and every probe run through it
/// long (a flood of one-shot keys made an absent key's probe read hundreds of slots).
pub(crate) struct Evictions {
    threshold: u8,
    /// Entries used `threshold` times still to evict, and still to be met.
    wanted: usize,
    candidates: usize,
    random: u64,
}

impl Evictions {
    /// Over the use counts of the entries that may be evicted, in the order `evicts` will meet them.
    pub(crate) fn new(uses: impl Iterator<Item = u8>, excess: usize) -> Self {
        let mut histogram = [0usize; 256];
        for used in uses {
            histogram[usize::from(used)] += 1;
        }
        let mut threshold = 0;
        let mut below = 0;
        while threshold < 255 && below + histogram[threshold] < excess {
            below += histogram[threshold];
            threshold += 1;
        }
        let candidates = histogram[threshold];
        #[allow(clippy::cast_possible_truncation)] // at most 255
        Self {
            threshold: threshold as u8,
            wanted: excess.saturating_sub(below).min(candidates),
            candidates,
            random: (candidates as u64 ^ 0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    /// Whether to evict the next entry that may be evicted, used `uses` times.
    pub(crate) fn evicts(&mut self, uses: u8) -> bool {
        if uses != self.threshold {
            return uses < self.threshold;
        }
        if self.candidates == 0 {
            return false;
        }
        // xorshift64: plenty for spreading evictions; nothing depends on it being unpredictable.
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        #[allow(clippy::cast_possible_truncation)] // below `candidates`
        let evict = (self.random % self.candidates as u64) < self.wanted as u64;
        self.candidates -= 1;
        if evict {
            self.wanted -= 1;
        }
        evict
    }
}
