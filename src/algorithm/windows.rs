//! Windows aligned to the key's first request, and after a window that ended unused to the next one:
//! the token bucket with monotonic burst windows, and the fixed window. Both grant `capacity`
//! permits at each window start; unused permits do not carry over. Aligning per key avoids the fleet-wide
//! spike at clock-aligned boundaries.
//!
//! - token bucket: windows of `burst × period / count` (rounded up, so never faster than the rate),
//!   `burst` permits each;
//! - fixed window: windows of `period`, `burst` (default: count) permits each.
//!
//! State: `t` = end of the current window (0: never used); `a` = permits left in it.

use super::State;
use crate::rate::Rate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    capacity: u64,
    window_ns: u64,
}

impl Windows {
    #[must_use]
    pub fn token_bucket(rate: Rate, burst: u32) -> Self {
        let span = u128::from(burst) * u128::from(rate.period_ns);
        // `Limit::new` checked that the window fits in 62 bits.
        #[allow(clippy::cast_possible_truncation)]
        let window_ns = span.div_ceil(u128::from(rate.count)) as u64;
        Self { capacity: u64::from(burst), window_ns }
    }

    #[must_use]
    pub fn fixed(rate: Rate, limit: u32) -> Self {
        Self { capacity: u64::from(limit), window_ns: rate.period_ns }
    }

    /// The constants `src/backend/decide.lua` takes: capacity, window.
    #[must_use]
    pub const fn params(&self) -> [u64; 5] {
        [self.capacity, self.window_ns, 0, 0, 0]
    }

    /// The window in force at `at`: (end, permits left). A state may hold a later window (reserved by a
    /// waiter); its permits can only be used once it has started. Once the key's last window has ended
    /// the key is idle, as if it had no state: its next window starts at its next request (as in Redis,
    /// where the key has expired by then).
    #[inline]
    fn current(&self, state: &State, at: u64) -> (u64, u64) {
        // An empty state (t = 0) has ended too. Chosen without a branch: as fast as the old grid, which
        // branched to a division only for later windows (a branch here cost 3-4 ns an admission).
        let ended = at >= state.t;
        let end = if ended { at + self.window_ns } else { state.t };
        // Capped: a live reconfiguration may have lowered the capacity.
        let permits = if ended { self.capacity } else { u64::from(state.a).min(self.capacity) };
        (end, permits)
    }

    /// The state after admitting `cost` at `at`.
    ///
    /// # Errors
    /// The wait, in nanoseconds after `at`, until it would be admitted.
    // Always: called out of line, its result came back through memory and stalled the hot path.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn evaluate(&self, state: &State, at: u64, cost: u64) -> Result<State, u64> {
        let (end, permits) = self.current(state, at);
        if permits < cost {
            // The next window grants `capacity >= cost` permits.
            return Err(end - at);
        }
        let start = end - self.window_ns;
        if at < start {
            return Err(start - at);
        }
        // permits <= capacity <= u32::MAX.
        #[allow(clippy::cast_possible_truncation)]
        Ok(State { t: end, a: (permits - cost) as u32, b: 0 })
    }

    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        self.window_ns
    }

    /// Gives `cost` back to the window that `at` fell in, if it is the key's newest: permits of a window
    /// that ended, or of one before a later reserved window, are not given to another window.
    #[must_use]
    pub fn refund(&self, state: &State, at: u64, cost: u64) -> State {
        if state.t == 0 || at >= state.t || at < state.t.saturating_sub(self.window_ns) {
            return *state;
        }
        #[allow(clippy::cast_possible_truncation)]
        let a = (u64::from(state.a).saturating_add(cost)).min(self.capacity) as u32;
        State { a, ..*state }
    }

    /// Permits used at `now`: in the current window, and every permit of the later windows reserved.
    #[must_use]
    pub fn used(&self, state: &State, now: u64) -> u64 {
        if state.t == 0 || now >= state.t {
            return 0;
        }
        let (end, permits) = self.current(state, now);
        let ahead = (end - now - 1) / self.window_ns;
        ahead.saturating_mul(self.capacity).saturating_add(self.capacity - permits)
    }

    /// The state of a key that used `used` permits at `now`: a window starting now, and as many later
    /// windows as the permits beyond the first fill (as waiters reserving them would).
    #[must_use]
    pub fn with_used(&self, used: u64, now: u64) -> State {
        if used == 0 {
            return State::default();
        }
        let windows = used.div_ceil(self.capacity);
        let span = u128::from(windows) * u128::from(self.window_ns);
        let end = u64::try_from(u128::from(now) + span).unwrap_or(u64::MAX).min(u64::MAX / 2);
        // Below the capacity, a u32.
        #[allow(clippy::cast_possible_truncation)]
        let left = (u128::from(windows) * u128::from(self.capacity) - u128::from(used)) as u32;
        State { t: end, a: left, b: 0 }
    }

    /// (remaining, `reset_after_ns`).
    #[must_use]
    pub fn report(&self, state: &State, now: u64) -> (u64, u64) {
        let (end, permits) = self.current(state, now);
        if permits >= self.capacity {
            return (permits, 0);
        }
        // A reserved later window's permits are not there yet.
        let usable = if now < end - self.window_ns { 0 } else { permits };
        (usable, end.saturating_sub(now))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Harness;
    use super::super::Kind;

    const S: u64 = 1_000_000_000;

    #[test]
    fn windows_align_to_the_first_request_and_do_not_carry_permits() {
        let mut h = Harness::new("3/min", None, Kind::TokenBucket);
        let t0 = 7 * S;
        for _ in 0..3 {
            assert!(h.decide(t0, 1).allowed);
        }
        assert_eq!(h.decide(t0 + 10 * S, 1).retry_after_ns, 50 * S);
        // The window ends 60 s after the first request, not on a clock boundary.
        assert!(h.decide(t0 + 60 * S, 1).allowed);
        // Three windows later the key has 3 permits again, never more.
        assert_eq!(h.report(t0 + 240 * S).remaining, 3);
    }

    #[test]
    fn waiters_reserve_permits_of_later_windows_in_order() {
        let mut h = Harness::new("2/10s", None, Kind::TokenBucket);
        let waits: Vec<Option<u64>> = (0..6).map(|_| h.reserve(0, 1)).collect();
        assert_eq!(waits, [0, 0, 10 * S, 10 * S, 20 * S, 20 * S].map(Some));
        // A check now counts the reserved windows as used.
        assert_eq!(h.decide(S, 1).retry_after_ns, 29 * S);
    }

    #[test]
    fn burst_other_than_count_shortens_the_token_bucket_window() {
        let mut h = Harness::new("10/min", Some(5), Kind::TokenBucket);
        assert!(h.decide(0, 5).allowed);
        assert_eq!(h.decide(0, 1).retry_after_ns, 30 * S);
    }

    #[test]
    fn fixed_window_grants_its_limit_per_period() {
        let mut h = Harness::new("10/min", Some(4), Kind::FixedWindow);
        assert!(h.decide(5 * S, 4).allowed);
        assert_eq!(h.decide(6 * S, 1).retry_after_ns, 59 * S);
        assert!(h.decide(65 * S, 4).allowed);
        h.refund(65 * S, 65 * S, 2);
        assert_eq!(h.report(65 * S).remaining, 2);
    }

    #[test]
    fn usage_beyond_the_capacity_fills_later_windows() {
        let h = Harness::new("10/min", None, Kind::FixedWindow);
        let state = h.limit_windows().with_used(25, 0);
        assert_eq!(h.limit_windows().used(&state, 0), 25);
        // Windows of 60 s from 0: two full, the third has 5 left.
        assert_eq!(h.limit.evaluate(&state, &super::super::NO_LOG, 0, 1), Err(120 * S));
        assert!(h.limit.evaluate(&state, &super::super::NO_LOG, 120 * S, 5).is_ok());
        assert!(h.limit.evaluate(&state, &super::super::NO_LOG, 120 * S, 6).is_err());
    }

    #[test]
    fn a_cancelled_reservation_of_an_earlier_window_is_not_given_to_a_later_one() {
        let mut h = Harness::new("1/10s", None, Kind::TokenBucket);
        let waits: Vec<Option<u64>> = (0..3).map(|_| h.reserve(0, 1)).collect();
        assert_eq!(waits, [0, 10 * S, 20 * S].map(Some));
        // The wait for 10 s is cancelled: the window of 20 s keeps one permit, not two.
        h.refund(0, 10 * S, 1);
        assert_eq!(h.reserve(0, 1), Some(30 * S));
    }
}
