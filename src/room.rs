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

use hashbrown::HashTable;

/// Keys are 64-bit keyed hashes; the low byte of a tag holds the use counter instead.
pub(crate) const IDENTITY_SHIFT: u32 = 8;

/// The hash hashbrown sees: the identity spread over all 64 bits, so that both its bucket index (low
/// bits) and its control tag (top 7 bits) vary. The shard index comes from other bits of the key.
#[inline]
pub(crate) fn table_hash(identity: u64) -> u64 {
    identity.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// An entry with a tag.
pub(crate) trait Tagged {
    fn tag(&self) -> u64;
    fn set_tag(&mut self, tag: u64);

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
        if self.uses() < u8::MAX {
            self.set_tag(self.tag() + 1);
        }
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
    table: HashTable<T>,
    /// Entries in all tables of this kind (one per shard), and their bound.
    count: Arc<AtomicUsize>,
    max: usize,
    /// When to decay use counts, and the size to shrink back to.
    room: Room,
}

impl<T: Tagged> BoundedTable<T> {
    /// The table of one of `shards` shards, which hold at most `max` entries between them.
    pub fn new(count: Arc<AtomicUsize>, max: usize, shards: usize) -> Self {
        Self { table: HashTable::new(), count, max, room: Room::new(max.div_ceil(shards.max(1))) }
    }

    /// The entry of `key`, without counting a use.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&T> {
        let identity = key >> IDENTITY_SHIFT;
        self.table.find(table_hash(identity), |e| e.identity() == identity)
    }

    /// The entry of `key`, counted as a use.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        let identity = key >> IDENTITY_SHIFT;
        let entry = self.table.find_mut(table_hash(identity), |e| e.identity() == identity)?;
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
        self.table.insert_unique(table_hash(entry.identity()), entry, |e| table_hash(e.identity())).into_mut()
    }

    pub fn remove(&mut self, key: u64) -> Option<T> {
        let identity = key >> IDENTITY_SHIFT;
        let entry = self.table.find_entry(table_hash(identity), |e| e.identity() == identity).ok()?;
        self.count.fetch_sub(1, Ordering::Relaxed);
        Some(entry.remove().0)
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

    /// Approximate heap bytes: hashbrown's buckets, each an entry and a control byte.
    pub fn allocated_bytes(&self) -> usize {
        let buckets = if self.table.capacity() == 0 { 0 } else { (self.table.capacity() * 8 / 7).next_power_of_two() };
        buckets * (std::mem::size_of::<T>() + 1)
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
        table: &mut HashTable<T>,
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
            let movable = table.iter().filter(|e| !pinned(e)).map(T::uses);
            let (threshold, mut at_threshold) = lfu_threshold(movable, want - dropped);
            let left = table.len();
            table.retain(|entry| {
                let uses = usize::from(entry.uses());
                let evict = !pinned(entry) && (uses < threshold || (uses == threshold && at_threshold > 0));
                if evict {
                    if uses == threshold {
                        at_threshold -= 1;
                    }
                    gone(entry, Removal::Evicted);
                }
                !evict
            });
            evicted = left - table.len();
        }
        table.shrink_to(self.share.max(table.len()), |e| table_hash(e.identity()));
        Freed { dropped, evicted }
    }
}

/// Which entries to evict to free `excess` of them, least used first: every entry used fewer times
/// than the returned threshold, and that many of those used exactly as often (a counting sort by use).
pub(crate) fn lfu_threshold(uses: impl Iterator<Item = u8>, excess: usize) -> (usize, usize) {
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
    (threshold, excess.saturating_sub(below))
}
