//! Open addressing with linear probing over an array of slots, each holding its key's tag beside its
//! state: the in-memory tables ([`LineTable`]) and the shared region's shards probe the same way.
//!
//! A key's slot is found by reading slots from the key's home onwards; the tag that identifies the key
//! sits in the slot itself, so a lookup usually reads one cache line. A Swiss table (hashbrown) reads
//! its control bytes, then the slot, in two arrays: two cache misses per lookup once a table is larger
//! than the caches. Homes come from a multiply-shift of the hash onto any length, so a table can be
//! sized to its bound rather than to the next power of two. Removal shifts the rest of the run back,
//! so there are no tombstones and a long-running table never degrades. Tables stay at most 7/8 full,
//! which keeps every probe run short and always leaves a free slot to end it.

/// The hash a table places an identity by: spread over all 64 bits, so that the high bits that pick its
/// home vary. The shard index comes from other bits of the key.
#[inline]
pub(crate) fn table_hash(identity: u64) -> u64 {
    identity.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A slot of a probed array.
pub(crate) trait Probed: Copy {
    /// A free slot.
    fn vacant() -> Self;
    fn occupied(&self) -> bool;
    /// The key's identity (its hash without the low byte).
    fn identity(&self) -> u64;
}

/// Where `identity` starts probing in an array of `len` slots.
#[inline]
#[allow(clippy::cast_possible_truncation)] // the product's high word is below `len`
pub(crate) fn home(identity: u64, len: usize) -> usize {
    ((u128::from(table_hash(identity)) * len as u128) >> 64) as usize
}

#[inline]
fn next(index: usize, len: usize) -> usize {
    if index + 1 == len {
        0
    } else {
        index + 1
    }
}

/// The index of the slot of `identity`, if the array holds one. At most one lap: an array with no free
/// slot (a shared region's bytes can say anything) ends the probe too.
#[inline]
pub(crate) fn find<S: Probed>(slots: &[S], identity: u64) -> Option<usize> {
    if slots.is_empty() {
        return None;
    }
    let mut index = home(identity, slots.len());
    for _ in 0..slots.len() {
        let slot = &slots[index];
        if !slot.occupied() {
            return None;
        }
        if slot.identity() == identity {
            return Some(index);
        }
        index = next(index, slots.len());
    }
    None
}

/// Writes `slot` (whose identity the array does not hold) into the first free slot of its run, and
/// returns where. The array must have a free slot.
#[inline]
pub(crate) fn place<S: Probed>(slots: &mut [S], slot: S) -> usize {
    let mut index = home(slot.identity(), slots.len());
    while slots[index].occupied() {
        index = next(index, slots.len());
    }
    slots[index] = slot;
    index
}

/// Writes `slot` as `place` does, unless the array has no free slot (a shared region's bytes can say
/// anything): `None` then, after one lap.
#[inline]
pub(crate) fn try_place<S: Probed>(slots: &mut [S], slot: S) -> Option<usize> {
    if slots.is_empty() {
        return None;
    }
    let mut index = home(slot.identity(), slots.len());
    for _ in 0..slots.len() {
        if !slots[index].occupied() {
            slots[index] = slot;
            return Some(index);
        }
        index = next(index, slots.len());
    }
    None
}

/// Empties slot `hole`, moving back the slots after it that probing would no
/// longer reach (at most one lap, for an array with no other free slot).
pub(crate) fn shift_back<S: Probed>(slots: &mut [S], mut hole: usize) {
    let len = slots.len();
    let mut index = next(hole, len);
    let mut steps = 0;
    while slots[index].occupied() && steps < len {
        steps += 1;
        let start = home(slots[index].identity(), len);
        // The slot may move into the hole if its home is not in (hole, index] (cyclically).
        let stays = if hole <= index { hole < start && start <= index } else { hole < start || start <= index };
        if !stays {
            slots[hole] = slots[index];
            hole = index;
        }
        index = next(index, len);
    }
    slots[hole] = S::vacant();
}

/// The fewest slots that hold `len` entries at most 7/8 full.
#[must_use]
pub(crate) fn slots_for(len: usize) -> usize {
    (len * 8).div_ceil(7) + 1
}

/// An in-memory probed table of slots `T`, grown by doubling up to a chosen size (see
/// [`LineTable::insert`]).
#[derive(Debug)]
pub(crate) struct LineTable<T> {
    slots: Box<[T]>,
    len: usize,
}

impl<T: Probed> LineTable<T> {
    /// An empty table; it allocates on its first insert.
    pub fn new() -> Self {
        Self { slots: Box::default(), len: 0 }
    }

    #[inline]
    pub fn get(&self, identity: u64) -> Option<&T> {
        find(&self.slots, identity).map(|index| &self.slots[index])
    }

    #[inline]
    pub fn get_mut(&mut self, identity: u64) -> Option<&mut T> {
        find(&self.slots, identity).map(|index| &mut self.slots[index])
    }

    /// Adds `entry`, whose identity the table does not hold. A table that would pass 7/8 full doubles,
    /// but not past the slots for `planned` entries (the table's share of its bound), so that a table
    /// at its bound is 7/8 full (a power of two could leave it half empty); past them (a table may hold
    /// more than its share) it grows by an eighth at a time.
    pub fn insert(&mut self, entry: T, planned: usize) -> &mut T {
        if slots_for(self.len + 1) > self.slots.len() {
            let size = self.slots.len();
            let bound = slots_for(planned);
            let grown = if size < bound { (size * 2).clamp(16, bound) } else { size + size / 8 };
            self.resize(grown.max(slots_for(self.len + 1)));
        }
        self.len += 1;
        let index = place(&mut self.slots, entry);
        &mut self.slots[index]
    }

    pub fn remove(&mut self, identity: u64) -> Option<T> {
        let index = find(&self.slots, identity)?;
        let removed = self.slots[index];
        shift_back(&mut self.slots, index);
        self.len -= 1;
        Some(removed)
    }

    /// Keeps the entries `keep` says to (it may change them, but not their identities); the others are
    /// removed, and the entries that their holes cut off from their homes are placed anew.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut T) -> bool) {
        let before = self.len;
        for slot in &mut self.slots {
            if slot.occupied() && !keep(slot) {
                *slot = T::vacant();
                self.len -= 1;
            }
        }
        if self.len != before {
            self.replace_displaced();
        }
    }

    /// Places anew every entry away from its home (a hole may now cut it off from there): each is taken
    /// out first, so that the entries left all sit at their homes, then placed as new.
    fn replace_displaced(&mut self) {
        let len = self.slots.len();
        let mut displaced = Vec::new();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.occupied() && home(slot.identity(), len) != index {
                displaced.push(std::mem::replace(slot, T::vacant()));
            }
        }
        for slot in displaced {
            place(&mut self.slots, slot);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter(|slot| slot.occupied())
    }

    pub fn clear(&mut self) {
        self.slots.fill(T::vacant());
        self.len = 0;
    }

    /// Gives back the slots beyond what `len` entries need, if the table holds a quarter more (a table
    /// a little past its share keeps its slots rather than shrinking and growing again and again).
    pub fn shrink_to(&mut self, len: usize) {
        let wanted = slots_for(len.max(self.len));
        if wanted + wanted / 4 < self.slots.len() {
            self.resize(wanted);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Places every entry anew in `size` slots.
    fn resize(&mut self, size: usize) {
        let old = std::mem::replace(&mut self.slots, vec![T::vacant(); size].into_boxed_slice());
        for slot in old.iter().filter(|slot| slot.occupied()) {
            place(&mut self.slots, *slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Entry(u64);

    const VACANT: Entry = Entry(u64::MAX);

    impl Probed for Entry {
        fn vacant() -> Self {
            VACANT
        }

        fn occupied(&self) -> bool {
            *self != VACANT
        }

        fn identity(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn every_entry_stays_reachable_through_inserts_removals_and_resizes() {
        let mut table = LineTable::new();
        let mut held = std::collections::BTreeSet::new();
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let identity = x % 3_000; // a small key space: inserts, hits and removals interleave
            if step % 3 == 0 {
                assert_eq!(table.remove(identity).is_some(), held.remove(&identity));
            } else if table.get(identity).is_none() {
                table.insert(Entry(identity), 1_000);
                held.insert(identity);
            }
            if step % 997 == 0 {
                let parity = step % 2;
                table.retain(|entry| entry.0 % 2 == parity || entry.0 % 5 == 0);
                held.retain(|identity| identity % 2 == parity || identity % 5 == 0);
                assert!(held.iter().all(|&identity| table.get(identity).is_some()), "lost after a retain at {step}");
            }
            assert_eq!(table.len(), held.len());
        }
        for identity in 0..3_000 {
            assert_eq!(table.get(identity).is_some(), held.contains(&identity), "{identity}");
        }
        assert!(table.capacity() >= slots_for(table.len()));
    }

    #[test]
    fn removing_an_eighth_of_a_full_table_again_and_again_loses_no_other_entry() {
        // As making room does: a table at its planned size, an eighth removed, refilled, many times over.
        for seed in 1..200u64 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut random = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut table = LineTable::new();
            let mut held = std::collections::BTreeSet::new();
            for _ in 0..20 {
                while held.len() < 100 {
                    let identity = random() >> 8;
                    if held.insert(identity) {
                        table.insert(Entry(identity), 100);
                    }
                }
                let cut = random();
                table.retain(|entry| (entry.0 ^ cut) % 8 != 0);
                held.retain(|identity| (identity ^ cut) % 8 != 0);
                assert!(held.iter().all(|&identity| table.get(identity).is_some()), "seed {seed}");
                assert_eq!(table.len(), held.len());
            }
        }
    }

    #[test]
    fn a_table_grows_to_its_planned_size_not_to_a_power_of_two() {
        let mut table = LineTable::new();
        for identity in 0..1_000 {
            table.insert(Entry(identity), 1_000);
        }
        assert_eq!(table.capacity(), slots_for(1_000));
        // Past its plan it still grows, by an eighth (a shard may hold more than its share of the bound).
        table.insert(Entry(1_000), 1_000);
        assert_eq!(table.capacity(), slots_for(1_000) + slots_for(1_000) / 8);
        assert!((0..=1_000).all(|identity| table.get(identity).is_some()));
        table.retain(|entry| entry.0 < 10);
        table.shrink_to(1_000);
        assert_eq!(table.capacity(), slots_for(1_000) + slots_for(1_000) / 8, "kept: within a quarter");
        table.shrink_to(10);
        assert_eq!(table.capacity(), slots_for(10));
        assert!((0..10).all(|identity| table.get(identity).is_some()));
    }
}
