//! Tables bounded by eviction: the state map's shards and the quota records share one way of tagging
//! entries with a use counter and of making room when the bound is reached.
//!
//! A tag is `identity << 8 | uses`: the key's hash without its low byte, and a saturating count of
//! uses. Making room is one pass: drop the entries that no longer matter, halve use counts once per
//! table's worth of inserts (so old popularity decays, but a busy key is never decayed faster than it
//! is used), then, if that freed less than an eighth of the table, evict the least used until it has.
//! Last, the table is sized back to its share of the bound: evictions leave tombstones, and without
//! this a flood of new keys makes the table grow again and again.

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
    fn tag_mut(&mut self) -> &mut u64;

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
            *self.tag_mut() += 1;
        }
    }
}

/// The tag of a new entry for `key`: one use.
#[inline]
pub(crate) fn new_tag(key: u64) -> u64 {
    (key >> IDENTITY_SHIFT) << IDENTITY_SHIFT | 1
}

/// Finds the entry of `key` in `table`.
#[inline]
pub(crate) fn find<T: Tagged>(table: &HashTable<T>, key: u64) -> Option<&T> {
    let identity = key >> IDENTITY_SHIFT;
    table.find(table_hash(identity), |e| e.identity() == identity)
}

/// Finds the entry of `key` in `table`, counted as a use.
#[inline]
pub(crate) fn find_mut<T: Tagged>(table: &mut HashTable<T>, key: u64) -> Option<&mut T> {
    let identity = key >> IDENTITY_SHIFT;
    let entry = table.find_mut(table_hash(identity), |e| e.identity() == identity)?;
    entry.touch();
    Some(entry)
}

/// What one pass of making room removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Freed {
    /// Entries that no longer mattered.
    pub dropped: usize,
    /// Entries evicted as the least used.
    pub evicted: usize,
}

/// The bookkeeping of one bounded table.
#[derive(Debug)]
pub(crate) struct Room {
    /// Inserts since use counts were last halved.
    inserts_since_decay: usize,
    /// This table's fair part of the bound: what its buckets are sized back to.
    share: usize,
}

impl Room {
    pub fn new(share: usize) -> Self {
        Self { inserts_since_decay: 0, share }
    }

    #[inline]
    pub fn inserted(&mut self) {
        self.inserts_since_decay += 1;
    }

    /// One pass over `table`: drops the entries `dead` picks, then evicts the least used that `pinned`
    /// does not hold until an eighth (at least one) is free. `gone` sees every removed entry.
    pub fn make<T: Tagged>(
        &mut self,
        table: &mut HashTable<T>,
        dead: impl Fn(&T) -> bool,
        pinned: impl Fn(&T) -> bool,
        mut gone: impl FnMut(&T),
    ) -> Freed {
        let before = table.len();
        let want = (before / 8).max(1);
        let decay = self.inserts_since_decay >= before.max(64);
        if decay {
            self.inserts_since_decay = 0;
        }
        table.retain(|entry| {
            if dead(entry) {
                gone(entry);
                return false;
            }
            if decay {
                let tag = entry.tag();
                *entry.tag_mut() = (tag & !0xFF) | u64::from(entry.uses() / 2);
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
                    gone(entry);
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
fn lfu_threshold(uses: impl Iterator<Item = u8>, excess: usize) -> (usize, usize) {
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
