//! Counters of what the limiter decided for each group. Kept per shard and updated under the shard's lock (which the
//! decision holds anyway), so counting costs no atomic and no shared cache line; `stats` sums shards.

/// What one group saw. Aligned to a cache line: the counters of different shards are separate
/// allocations that would otherwise share lines, and two threads writing them would stall each other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(align(64))]
pub struct GroupCounters {
    /// Limited requests decided (allowed + refused).
    pub requests: u64,
    pub allowed: u64,
    pub refused: u64,
    /// Admitted after a wait (`throttle`) that was not given back.
    pub delayed: u64,
    /// Requests of exempt peers or paths that route to this group.
    pub exempt: u64,
    /// Tokens given back by `reduce`.
    pub reductions: u64,
    /// Quota fetches started, and those that failed (raised, timed out, or answered nonsense).
    pub quota_fetches: u64,
    pub quota_failures: u64,
    /// Fetches the provider answered with "no such key" (`LookupError`): not failures.
    pub quota_unknown: u64,
}

impl GroupCounters {
    #[inline]
    pub fn record(&mut self, allowed: bool, waited: bool) {
        self.requests += 1;
        if allowed {
            self.allowed += 1;
            self.delayed += u64::from(waited);
        } else {
            self.refused += 1;
        }
    }

    pub fn add(&mut self, other: &Self) {
        self.requests += other.requests;
        self.allowed += other.allowed;
        self.refused += other.refused;
        self.delayed += other.delayed;
        self.exempt += other.exempt;
        self.reductions += other.reductions;
        self.quota_fetches += other.quota_fetches;
        self.quota_failures += other.quota_failures;
        self.quota_unknown += other.quota_unknown;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_sums() {
        let mut a = GroupCounters::default();
        a.record(true, false);
        a.record(true, true);
        a.record(false, false);
        let mut total = GroupCounters::default();
        total.add(&a);
        total.add(&a);
        assert_eq!(
            total,
            GroupCounters { requests: 6, allowed: 4, refused: 2, delayed: 2, ..GroupCounters::default() }
        );
    }
}
