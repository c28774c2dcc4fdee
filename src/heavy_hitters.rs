//! Who is refused most: a Space-Saving sketch (Metwally, Agrawal, El Abbadi, 2005) of fixed size.
//!
//! `CAPACITY` counters; a peer already counted gains one, a new peer takes a free counter or else the
//! smallest one, inheriting its count (the peer's `error`). So memory is bounded whatever the number
//! of peers, and after `n` observations:
//! - a peer's count over-estimates its true count by at most its `error`, which is at most `n / CAPACITY`;
//! - every peer observed more than `n / CAPACITY` times holds a counter.
//!
//! One sketch per shard and group, updated under the shard's lock when a request is refused. A peer
//! always lands in the same shard, so the shards' sketches count disjoint peers and merge by
//! concatenation.

/// Counters per sketch: 16 per shard (64 shards for a large limiter: 1,024 per group).
pub const CAPACITY: usize = 16;

/// One counter: `count` observations of `peer`, of which at most `error` were another peer's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub peer: String,
    pub count: u64,
    pub error: u64,
    /// The peer's hash (compared before the string).
    hash: u64,
}

/// The sketch; `observed`: how many observations it has seen (the `n` of its error bound).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopCounts {
    counters: Vec<Counted>,
    pub observed: u64,
}

impl TopCounts {
    /// Counts one observation of `peer` (whose hash is `hash`).
    pub fn observe(&mut self, peer: &str, hash: u64) {
        self.observed += 1;
        if let Some(counted) = self.counters.iter_mut().find(|c| c.hash == hash && c.peer == peer) {
            counted.count += 1;
            return;
        }
        if self.counters.len() < CAPACITY {
            self.counters.push(Counted { peer: peer.to_owned(), count: 1, error: 0, hash });
            return;
        }
        // `CAPACITY` counters, so there is a smallest.
        if let Some(smallest) = self.counters.iter_mut().min_by_key(|c| c.count) {
            // The string's buffer is reused: a flood of new peers allocates only when one is longer.
            smallest.peer.clear();
            smallest.peer.push_str(peer);
            smallest.hash = hash;
            smallest.error = smallest.count;
            smallest.count += 1;
        }
    }

    /// The counters, in no order.
    #[must_use]
    pub fn counters(&self) -> &[Counted] {
        &self.counters
    }

    /// The largest over-estimate any of its counts may hold: `observed / CAPACITY` at most.
    #[must_use]
    pub fn error_bound(&self) -> u64 {
        if self.counters.len() < CAPACITY {
            0
        } else {
            self.counters.iter().map(|c| c.count).min().unwrap_or(0)
        }
    }

    /// Approximate heap bytes.
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        self.counters.capacity() * std::mem::size_of::<Counted>()
            + self.counters.iter().map(|c| c.peer.capacity()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observe(sketch: &mut TopCounts, peer: &str, times: u64) {
        for _ in 0..times {
            sketch.observe(peer, peer.len() as u64);
        }
    }

    fn count_of(sketch: &TopCounts, peer: &str) -> Option<u64> {
        sketch.counters().iter().find(|c| c.peer == peer).map(|c| c.count)
    }

    #[test]
    fn below_capacity_counts_are_exact() {
        let mut sketch = TopCounts::default();
        observe(&mut sketch, "a", 3);
        observe(&mut sketch, "bb", 5);
        assert_eq!((count_of(&sketch, "a"), count_of(&sketch, "bb")), (Some(3), Some(5)));
        assert_eq!((sketch.observed, sketch.error_bound()), (8, 0));
    }

    #[test]
    fn a_heavy_peer_survives_a_flood_of_one_off_peers_within_the_bound() {
        let mut sketch = TopCounts::default();
        for i in 0..10_000u64 {
            let peer = format!("one-off-{i}");
            sketch.observe(&peer, i);
            if i % 10 == 0 {
                sketch.observe("heavy", u64::MAX);
            }
        }
        let heavy = sketch.counters().iter().find(|c| c.peer == "heavy").expect("the heavy peer is kept");
        // True count 1,000; over-estimated by at most its error, itself at most n / CAPACITY.
        assert!(heavy.count - heavy.error <= 1_000 && 1_000 <= heavy.count);
        assert!(heavy.error <= sketch.observed / CAPACITY as u64);
        assert_eq!(sketch.counters().len(), CAPACITY);
    }

    #[test]
    fn the_same_hash_for_two_peers_keeps_them_apart() {
        let mut sketch = TopCounts::default();
        sketch.observe("x", 1);
        sketch.observe("y", 1);
        sketch.observe("x", 1);
        assert_eq!((count_of(&sketch, "x"), count_of(&sketch, "y")), (Some(2), Some(1)));
    }
}
