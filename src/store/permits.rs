//! Lease mode's concurrency permits: a process takes several of a key's permits from Redis at once
//! (members of the key's sorted set, named by the lease and expiring after `lease_ttl` as exact mode's
//! do), hands them to its requests and takes them back here, and releases in Redis the leases that stay
//! unused for a span. The permits held by all processes are members of one set that never holds more
//! than the limit, and a request holds one of this process's: never more in flight than the limit.

/// One lease of permits: its members' name, how many, and how many of them requests hold now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitLease {
    /// The members' prefix in Redis (`"<node>~<n>"`; each member is `"<prefix>#<j>"`).
    pub prefix: String,
    pub granted: u64,
    pub in_flight: u64,
    /// When its members expire in Redis (on this process's clock, counted from when it was asked for):
    /// past it they no longer count there, and no longer here.
    pub expires: u64,
    pub last_used: u64,
}

/// The permit leases of one key.
#[derive(Debug, Default)]
pub struct Permits {
    leases: Vec<PermitLease>,
    /// No lease is asked for before this (Redis had no permit a moment ago).
    pub quiet_until: u64,
    /// A lease is on its way, asked for in the background (a group of rates and permits: see `leased`).
    pub fetching: bool,
}

impl Permits {
    /// Takes `cost` permits from a lease that has them free; false when none has.
    pub fn take(&mut self, cost: u64, now: u64) -> bool {
        self.leases.retain(|l| now < l.expires);
        let Some(lease) = self.leases.iter_mut().find(|l| l.granted - l.in_flight >= cost) else { return false };
        lease.in_flight += cost;
        lease.last_used = now;
        true
    }

    /// Whether a lease has `cost` permits free (those expired dropped).
    pub fn has_free(&mut self, cost: u64, now: u64) -> bool {
        self.leases.retain(|l| now < l.expires);
        self.leases.iter().any(|l| l.granted - l.in_flight >= cost)
    }

    /// Gives back `cost` permits a request held; false when no lease here holds that many in flight.
    pub fn release(&mut self, cost: u64, now: u64) -> bool {
        let Some(lease) = self.leases.iter_mut().rev().find(|l| l.in_flight >= cost) else { return false };
        lease.in_flight -= cost;
        lease.last_used = now;
        true
    }

    /// How many to ask for: as many as are held (a lease doubles what the key has), at least `cost`.
    pub fn size(&self, cost: u64) -> u64 {
        self.leases.iter().map(|l| l.granted).sum::<u64>().max(cost)
    }

    /// A lease that landed.
    pub fn grant(&mut self, lease: PermitLease) {
        self.quiet_until = 0;
        self.leases.push(lease);
    }

    /// Takes out the leases no request holds that were idle for `span_ns` (every unused one with
    /// `everything`), to release in Redis; drops those expired there.
    pub fn idle(&mut self, now: u64, span_ns: u64, everything: bool) -> Vec<PermitLease> {
        let mut idle = Vec::new();
        self.leases.retain(|l| {
            let unused = l.in_flight == 0 && (everything || now.saturating_sub(l.last_used) >= span_ns);
            if unused && now < l.expires {
                idle.push(l.clone());
            }
            !unused && now < l.expires
        });
        idle
    }

    /// The key's limits changed: no lease takes another request (what requests hold stays theirs, and
    /// goes back once released and idle).
    pub fn retire(&mut self) {
        for lease in &mut self.leases {
            lease.granted = lease.in_flight;
        }
    }

    /// Permits free here.
    pub fn free(&self) -> u64 {
        self.leases.iter().map(|l| l.granted - l.in_flight).sum()
    }

    /// Whether no lease is held.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(prefix: &str, granted: u64, expires: u64) -> PermitLease {
        PermitLease { prefix: prefix.into(), granted, in_flight: 0, expires, last_used: 0 }
    }

    #[test]
    fn requests_hold_at_most_what_was_granted() {
        let mut permits = Permits::default();
        assert!(!permits.take(1, 0));
        permits.grant(lease("a", 2, 100));
        assert!(permits.take(1, 1));
        assert!(permits.take(1, 1));
        assert!(!permits.take(1, 1));
        assert!(permits.release(1, 2));
        assert!(permits.take(1, 3));
        assert_eq!(permits.size(1), 2);
    }

    #[test]
    fn expired_leases_count_no_longer_here_either() {
        let mut permits = Permits::default();
        permits.grant(lease("a", 1, 10));
        assert!(permits.take(1, 5));
        assert!(!permits.take(1, 10));
        assert!(permits.is_empty());
    }

    #[test]
    fn only_unused_leases_idle_for_a_span_go_back() {
        let mut permits = Permits::default();
        permits.grant(lease("a", 1, 1_000));
        permits.grant(lease("b", 1, 1_000));
        assert!(permits.take(1, 0));
        assert!(permits.idle(5, 10, false).is_empty());
        let back = permits.idle(20, 10, false);
        assert_eq!(back.iter().map(|l| l.prefix.as_str()).collect::<Vec<_>>(), ["b"]);
        assert!(!permits.is_empty());
        assert!(permits.release(1, 30));
        assert_eq!(permits.idle(31, 10, true).len(), 1);
        assert!(permits.is_empty());
    }
}
