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

/// The sketch; `observed`: how many observations it has seen (the `n` of its error bound). Laid out by
/// field (hashes, then counts) so that a refusal scans two cache lines, not sixteen entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopCounts {
    len: usize,
    hashes: [u64; CAPACITY],
    counts: [u64; CAPACITY],
    /// How much of each count may be another peer's: the count its counter had when it was taken over.
    errors: [u64; CAPACITY],
    peers: [String; CAPACITY],
    pub observed: u64,
}

impl Default for TopCounts {
    fn default() -> Self {
        Self {
            len: 0,
            hashes: [0; CAPACITY],
            counts: [0; CAPACITY],
            errors: [0; CAPACITY],
            peers: std::array::from_fn(|_| String::new()),
            observed: 0,
        }
    }
}

impl TopCounts {
    /// Counts one observation of `peer` (whose hash is `hash`).
    pub fn observe(&mut self, peer: &str, hash: u64) {
        self.observed += 1;
        let len = self.len;
        if let Some(i) = (0..len).find(|&i| self.hashes[i] == hash && self.peers[i] == peer) {
            self.counts[i] += 1;
            return;
        }
        let i = if len < CAPACITY {
            self.len += 1;
            self.errors[len] = 0;
            self.counts[len] = 0;
            len
        } else {
            let smallest = (0..CAPACITY).min_by_key(|&i| self.counts[i]).unwrap_or(0);
            self.errors[smallest] = self.counts[smallest];
            smallest
        };
        self.hashes[i] = hash;
        self.counts[i] += 1;
        // The string's buffer is reused: a flood of new peers allocates only when one is longer.
        self.peers[i].clear();
        self.peers[i].push_str(peer);
    }

    /// The counters, in no order: (peer, count, error).
    pub fn counters(&self) -> impl Iterator<Item = (&str, u64, u64)> {
        (0..self.len).map(|i| (self.peers[i].as_str(), self.counts[i], self.errors[i]))
    }

    /// The largest over-estimate any of its counts may hold: `observed / CAPACITY` at most.
    #[must_use]
    pub fn error_bound(&self) -> u64 {
        if self.len < CAPACITY {
            0
        } else {
            self.counts.iter().copied().min().unwrap_or(0)
        }
    }

    /// Approximate heap bytes (the strings; the sketch itself is inline).
    #[must_use]
    pub fn allocated_bytes(&self) -> usize {
        self.peers.iter().map(String::capacity).sum()
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
        sketch.counters().find(|c| c.0 == peer).map(|c| c.1)
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
        let (_, count, error) = sketch.counters().find(|c| c.0 == "heavy").expect("the heavy peer is kept");
        // True count 1,000; over-estimated by at most its error, itself at most n / CAPACITY.
        assert!(count - error <= 1_000 && 1_000 <= count);
        assert!(error <= sketch.observed / CAPACITY as u64);
        assert!(sketch.error_bound() <= sketch.observed / CAPACITY as u64);
        assert_eq!(sketch.counters().count(), CAPACITY);
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
