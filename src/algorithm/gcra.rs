//! GCRA (seed 004): one theoretical arrival time per key.
//!
//! Time is kept exactly as a rational: `tat = t + a / count` nanoseconds, so that the emission interval
//! `period / count` needs no rounding. That makes both invariants exact: in any closed window of length
//! `L`, at most `burst + floor(L × count / period)` requests are admitted, and a sender whose requests
//! are at least `period / count` apart is never refused.

use super::{Outcome, Report, State};
use crate::rate::Rate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    count: u64,
    /// The emission interval `period / count` as whole nanoseconds plus a remainder in `1/count` ns.
    interval_ns: u64,
    interval_rem: u64,
    /// The tolerance `burst × period / count`, split the same way.
    tau_ns: u64,
    tau_rem: u64,
    period_ns: u64,
}

/// A point in time in nanoseconds plus `rem / count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Instant {
    ns: u64,
    rem: u64,
}

impl Gcra {
    #[must_use]
    pub fn new(rate: Rate, burst: u32) -> Self {
        let span = u128::from(burst) * u128::from(rate.period_ns);
        let count = u128::from(rate.count);
        // `Limit::new` checked that `span / count` fits in 62 bits; the remainder is below `count`.
        #[allow(clippy::cast_possible_truncation)]
        Self {
            count: rate.count,
            interval_ns: rate.period_ns / rate.count,
            interval_rem: rate.period_ns % rate.count,
            tau_ns: (span / count) as u64,
            tau_rem: (span % count) as u64,
            period_ns: rate.period_ns,
        }
    }

    /// `cost` emission intervals after `at`. `cost <= burst`, so the sum stays within `tau` of `at`.
    #[inline]
    fn after(&self, at: Instant, cost: u64) -> Instant {
        let rem = at.rem + cost * self.interval_rem;
        let (carry, rem) = if cost == 1 {
            // rem < 2 × count here: no division on the hot path.
            if rem >= self.count {
                (1, rem - self.count)
            } else {
                (0, rem)
            }
        } else {
            (rem / self.count, rem % self.count)
        };
        Instant { ns: at.ns + cost * self.interval_ns + carry, rem }
    }

    /// The earliest whole nanosecond at which `tat` is within the tolerance: `ceil(tat - tau)`, or 0.
    #[inline]
    fn allowed_at(&self, tat: Instant) -> u64 {
        // ceil((ns + rem/count) - (tau_ns + tau_rem/count)) = ns - tau_ns + [rem > tau_rem].
        (tat.ns + u64::from(tat.rem > self.tau_rem)).saturating_sub(self.tau_ns)
    }

    #[inline]
    fn tat(state: &State, now: u64) -> Instant {
        if state.t < now {
            Instant { ns: now, rem: 0 }
        } else {
            Instant { ns: state.t, rem: u64::from(state.a) }
        }
    }

    #[inline]
    pub fn decide(&self, state: &mut State, now: u64, cost: u64, max_wait_ns: u64) -> Outcome {
        let new_tat = self.after(Self::tat(state, now), cost);
        let outcome = Outcome::wait_or_refuse(self.allowed_at(new_tat).saturating_sub(now), max_wait_ns);
        if outcome.allowed {
            state.t = new_tat.ns;
            // rem < count <= u32::MAX.
            #[allow(clippy::cast_possible_truncation)]
            {
                state.a = new_tat.rem as u32;
            }
        }
        outcome
    }

    /// Moves the arrival time back by `cost` intervals, never before `now`.
    pub fn refund(&self, state: &mut State, now: u64, cost: u64) {
        let tat = Self::tat(state, now);
        let step = self.after(Instant { ns: 0, rem: 0 }, cost);
        let (ns, rem) = if tat.rem >= step.rem {
            (tat.ns.checked_sub(step.ns), tat.rem - step.rem)
        } else {
            (tat.ns.checked_sub(step.ns + 1), tat.rem + self.count - step.rem)
        };
        match ns {
            #[allow(clippy::cast_possible_truncation)]
            Some(ns) if ns >= now => {
                state.t = ns;
                state.a = rem as u32;
            }
            _ => *state = State { t: now, a: 0, b: 0 },
        }
    }

    #[must_use]
    pub fn report(&self, state: &State, now: u64) -> Report {
        let tat = Self::tat(state, now);
        // Slack = now + tau - tat, in 1/count ns; each request uses `period_ns` of it.
        let count = u128::from(self.count);
        let slack = (u128::from(now) * count + u128::from(self.tau_ns) * count + u128::from(self.tau_rem))
            .saturating_sub(u128::from(tat.ns) * count + u128::from(tat.rem));
        // slack / period <= burst, which fits u32.
        #[allow(clippy::cast_possible_truncation)]
        let remaining = (slack / u128::from(self.period_ns)) as u64;
        let reset_after_ns = (tat.ns - now) + u64::from(tat.rem > 0);
        Report { remaining, reset_after_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Kind, Limit};
    use super::*;

    const S: u64 = 1_000_000_000;

    fn limit(text: &str, burst: Option<u64>) -> Limit {
        Limit::new(text.parse().unwrap(), burst, Kind::Gcra).unwrap()
    }

    /// Seed 004's transcript: 3 per 60 s; the score delta it prints is `reset_after` for an admission
    /// and (score − now) for a refusal, whose retry time is that minus the 60 s tolerance.
    #[test]
    fn seed_004_transcript() {
        let lim = limit("3/60s", None);
        let mut state = State::default();
        let mut at = |secs: u64| {
            let now = secs * S;
            let out = lim.decide(&mut state, now, 1, 0);
            (out.allowed, lim.report(&state, now).reset_after_ns / S, out.retry_after_ns / S)
        };
        assert_eq!(at(0), (true, 20, 0));
        assert_eq!(at(0), (true, 40, 0));
        assert_eq!(at(0), (true, 60, 0));
        // REJECT 59, 55, 50, 45: each refusal can retry at t = 20 s.
        assert_eq!(at(1), (false, 59, 19));
        assert_eq!(at(5), (false, 55, 15));
        assert_eq!(at(10), (false, 50, 10));
        assert_eq!(at(15), (false, 45, 5));
        assert_eq!(at(21), (true, 59, 0)); // ALLOW 59
        assert_eq!(at(22), (false, 58, 18)); // REJECT 58
    }

    #[test]
    fn exact_rate_without_rounding_drift() {
        // 7 per second does not divide 1 s evenly. After a full burst, request k of a steady sender is
        // due at exactly k/7 s: admitted at ceil(k/7 s), refused a nanosecond earlier, with no drift
        // (a truncated interval would admit 6 µs early by k = 7000).
        let lim = limit("7/s", None);
        let mut state = State::default();
        assert!(lim.decide(&mut state, 0, 7, 0).allowed);
        for k in 1..=7_000u64 {
            let due = (k * S).div_ceil(7);
            assert!(!lim.decide(&mut state, due - 1, 1, 0).allowed, "request {k} admitted early");
            assert!(lim.decide(&mut state, due, 1, 0).allowed, "request {k} refused on time");
        }
    }

    #[test]
    fn reservation_queues_waiters_in_order_and_refund_frees_the_slot() {
        let lim = limit("1/s", Some(1));
        let mut state = State::default();
        assert_eq!(lim.decide(&mut state, 0, 1, u64::MAX), Outcome::admitted(0));
        assert_eq!(lim.decide(&mut state, 0, 1, u64::MAX), Outcome::admitted(S));
        assert_eq!(lim.decide(&mut state, 0, 1, u64::MAX), Outcome::admitted(2 * S));
        // A waiter that would have to wait past its limit is refused without reserving.
        assert_eq!(lim.decide(&mut state, 0, 1, S), Outcome::refused(3 * S));
        lim.refund(&mut state, 0, 1);
        assert_eq!(lim.decide(&mut state, 0, 1, u64::MAX), Outcome::admitted(2 * S));
    }

    #[test]
    fn refusal_changes_nothing_and_report_counts_what_is_left() {
        let lim = limit("10/min", None);
        let mut state = State::default();
        for _ in 0..10 {
            assert!(lim.decide(&mut state, 0, 1, 0).allowed);
        }
        let before = state;
        assert_eq!(lim.decide(&mut state, 0, 1, 0), Outcome::refused(6 * S));
        assert_eq!(state, before);
        assert_eq!(lim.report(&state, 0), Report { remaining: 0, reset_after_ns: 60 * S });
        assert_eq!(lim.report(&state, 12 * S).remaining, 2);
        assert!(lim.decide(&mut state, 0, 11, u64::MAX).retry_after_ns == u64::MAX);
    }

    #[test]
    fn first_request_at_time_zero_is_admitted_for_uneven_intervals() {
        for text in ["3/s", "7/min", "6/ms"] {
            let lim = limit(text, None);
            assert!(lim.decide(&mut State::default(), 0, 1, 0).allowed, "{text}");
        }
    }

    #[test]
    fn idle_once_the_arrival_time_has_passed() {
        let lim = limit("2/s", None);
        let mut state = State::default();
        lim.decide(&mut state, 0, 2, 0);
        assert!(!state.is_idle(S - 1));
        assert!(state.is_idle(S));
    }
}
