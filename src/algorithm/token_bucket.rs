//! Token bucket with monotonic burst windows (seed 002).
//!
//! Windows of `burst × period / count` (rounded up to a whole nanosecond, so never faster than the
//! rate) are aligned to the key's first request; at each window start the key gets `burst` permits,
//! and unused permits do not carry over. A waiter may reserve permits of later windows: the permit
//! count then goes negative and each new window pays that debt first.
//!
//! State: `t` = end of the current window (0: never used); `(a, b)` = permits left, as an `i64`.

use super::{Outcome, Report, State};
use crate::rate::Rate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    burst: i64,
    window_ns: u64,
}

impl TokenBucket {
    #[must_use]
    pub fn new(rate: Rate, burst: u32) -> Self {
        let span = u128::from(burst) * u128::from(rate.period_ns);
        let count = u128::from(rate.count);
        // `Limit::new` checked that the window fits in 62 bits.
        #[allow(clippy::cast_possible_truncation)]
        let window_ns = span.div_ceil(count) as u64;
        Self { burst: i64::from(burst), window_ns }
    }

    #[inline]
    fn permits(state: &State) -> i64 {
        // (a, b) hold the two halves of an i64.
        #[allow(clippy::cast_possible_wrap)]
        let permits = (u64::from(state.b) << 32 | u64::from(state.a)) as i64;
        permits
    }

    #[inline]
    fn set_permits(state: &mut State, permits: i64) {
        #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
        {
            state.a = permits as u64 as u32;
            state.b = ((permits as u64) >> 32) as u32;
        }
    }

    /// The window in force at `now`, and its permits: windows that started since pay debt, then refill.
    #[inline]
    fn current(&self, state: &State, now: u64) -> (u64, i64) {
        if state.t == 0 {
            return (now + self.window_ns, self.burst);
        }
        let (end, permits) = (state.t, Self::permits(state));
        if now < end {
            return (end, permits);
        }
        let started = (now - end) / self.window_ns + 1;
        // Saturate: after enough windows every debt is paid and the key is full.
        let refill = i64::try_from(started).unwrap_or(i64::MAX).saturating_mul(self.burst);
        (end + started * self.window_ns, permits.saturating_add(refill).min(self.burst))
    }

    #[inline]
    pub fn decide(&self, state: &mut State, now: u64, cost: u64, max_wait_ns: u64) -> Outcome {
        let (end, permits) = self.current(state, now);
        // cost <= burst (checked by `Limit::decide`), so it fits in i64.
        #[allow(clippy::cast_possible_wrap)]
        let cost = cost as i64;
        let left = permits - cost;
        let wait_ns = if left >= 0 {
            0
        } else {
            // The window in which the last of the missing permits is granted.
            #[allow(clippy::cast_sign_loss)]
            let windows_ahead = ((-left) as u64).div_ceil(self.burst.unsigned_abs());
            end + (windows_ahead - 1) * self.window_ns - now
        };
        let outcome = Outcome::wait_or_refuse(wait_ns, max_wait_ns);
        if outcome.allowed {
            state.t = end;
            Self::set_permits(state, left);
        }
        outcome
    }

    /// Returns permits to the current window (a cancelled reservation), up to the burst.
    pub fn refund(&self, state: &mut State, cost: u64) {
        if state.t != 0 {
            let permits = Self::permits(state).saturating_add(i64::try_from(cost).unwrap_or(i64::MAX));
            Self::set_permits(state, permits.min(self.burst));
        }
    }

    #[must_use]
    pub fn report(&self, state: &State, now: u64) -> Report {
        let (end, permits) = self.current(state, now);
        if permits >= self.burst {
            return Report { remaining: permits.unsigned_abs(), reset_after_ns: 0 };
        }
        #[allow(clippy::cast_sign_loss)]
        let debt_windows = if permits < 0 { ((-permits) as u64).div_ceil(self.burst.unsigned_abs()) } else { 0 };
        Report {
            remaining: u64::try_from(permits).unwrap_or(0),
            reset_after_ns: end + debt_windows * self.window_ns - now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Kind, Limit};
    use super::*;

    const S: u64 = 1_000_000_000;

    fn limit(text: &str, burst: Option<u64>) -> Limit {
        Limit::new(text.parse().unwrap(), burst, Kind::TokenBucket).unwrap()
    }

    #[test]
    fn windows_align_to_the_first_request_and_do_not_carry_permits() {
        let lim = limit("3/min", None);
        let mut state = State::default();
        let t0 = 7 * S;
        for _ in 0..3 {
            assert!(lim.decide(&mut state, t0, 1, 0).allowed);
        }
        assert_eq!(lim.decide(&mut state, t0 + 10 * S, 1, 0), Outcome::refused(50 * S));
        // The window ends 60 s after the first request, not on a clock boundary.
        assert!(lim.decide(&mut state, t0 + 60 * S, 1, 0).allowed);
        // Three windows later the key has 3 permits again, never more.
        assert_eq!(lim.report(&state, t0 + 240 * S).remaining, 3);
    }

    #[test]
    fn waiters_borrow_from_later_windows_in_order() {
        let lim = limit("2/10s", None);
        let mut state = State::default();
        let waits: Vec<u64> = (0..6).map(|_| lim.decide(&mut state, 0, 1, u64::MAX).wait_ns).collect();
        assert_eq!(waits, [0, 0, 10 * S, 10 * S, 20 * S, 20 * S]);
        assert_eq!(lim.report(&state, 0), Report { remaining: 0, reset_after_ns: 30 * S });
        lim.refund(&mut state, 0, 1);
        assert_eq!(lim.decide(&mut state, 0, 1, u64::MAX).wait_ns, 20 * S);
        // In the second window, the debt is paid before anything is free.
        assert_eq!(lim.decide(&mut state, 10 * S, 1, 0), Outcome::refused(20 * S));
        assert!(!state.is_idle(10 * S));
        assert!(lim.decide(&mut state, 30 * S, 1, 0).allowed);
    }

    #[test]
    fn burst_other_than_count_shortens_the_window() {
        let lim = limit("10/min", Some(5));
        let mut state = State::default();
        assert!(lim.decide(&mut state, 0, 5, 0).allowed);
        assert_eq!(lim.decide(&mut state, 0, 1, 0), Outcome::refused(30 * S));
    }
}
