//! GCRA (the cooldown score): one theoretical arrival time per key.
//!
//! Time is kept exactly as a rational: `tat = t + a / count` nanoseconds, so that the emission interval
//! `period / count` needs no rounding. That makes both invariants exact: in any closed window of length
//! `L`, at most `burst + floor(L × count / period)` requests are admitted, and a sender whose requests
//! are at least `period / count` apart is never refused.

use super::State;
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

    /// The constants `src/backend/decide.lua` takes: count, interval (ns, remainder), tau (ns, remainder).
    #[must_use]
    pub const fn params(&self) -> [u64; 5] {
        [self.count, self.interval_ns, self.interval_rem, self.tau_ns, self.tau_rem]
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
    fn tat(&self, state: &State, now: u64) -> Instant {
        if state.t < now {
            Instant { ns: now, rem: 0 }
        } else if u64::from(state.a) < self.count {
            Instant { ns: state.t, rem: u64::from(state.a) }
        } else {
            // Written under another rate (a live reconfiguration): round up to the next nanosecond.
            Instant { ns: state.t + 1, rem: 0 }
        }
    }

    /// The state after admitting `cost` at `at`.
    ///
    /// # Errors
    /// The wait, in nanoseconds after `at`, until it would be admitted.
    // Always: called out of line, its result came back through memory and stalled the hot path.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn evaluate(&self, state: &State, at: u64, cost: u64) -> Result<State, u64> {
        let new_tat = self.after(self.tat(state, at), cost);
        let wait = self.allowed_at(new_tat).saturating_sub(at);
        if wait > 0 {
            return Err(wait);
        }
        // rem < count <= u32::MAX.
        #[allow(clippy::cast_possible_truncation)]
        Ok(State { t: new_tat.ns, a: new_tat.rem as u32, b: 0 })
    }

    /// Moves the arrival time back by `cost` intervals, never before `now`, for an admission whose slot
    /// was at `at`. While the newest slot is now or later (a waiter holds it, or the key is at its limit),
    /// only the newest slot can be given back: moving the arrival time back under it would give a new
    /// arrival a slot already promised.
    #[must_use]
    pub fn refund(&self, state: &State, now: u64, at: u64, cost: u64) -> State {
        let tat = self.tat(state, now);
        // Unsaturated: a newest slot before the clock's zero is in the past, not at zero.
        let newest = (tat.ns + u64::from(tat.rem > self.tau_rem)).checked_sub(self.tau_ns);
        if newest.is_some_and(|newest| newest >= now && newest != at) {
            return *state;
        }
        let step = self.after(Instant { ns: 0, rem: 0 }, cost);
        let (ns, rem) = if tat.rem >= step.rem {
            (tat.ns.checked_sub(step.ns), tat.rem - step.rem)
        } else {
            (tat.ns.checked_sub(step.ns + 1), tat.rem + self.count - step.rem)
        };
        match ns {
            #[allow(clippy::cast_possible_truncation)]
            Some(ns) if ns >= now => State { t: ns, a: rem as u32, b: 0 },
            _ => State { t: now, a: 0, b: 0 },
        }
    }

    /// The state after a server said the key has `remaining` left and is full again at `reset_at`
    /// (`OpenAI`'s and `Anthropic`'s budgets, which refill as this does): the arrival time moves to the later
    /// of the two, never earlier. A stale word, or calls on their way that it does not count, cannot lift
    /// what the key used; `None` when it changes nothing.
    #[must_use]
    pub fn cap(&self, state: &State, now: u64, remaining: u64, reset_at: u64) -> Option<State> {
        let current = self.tat(state, now);
        let count = u128::from(self.count);
        // In 1/count ns: the tolerance is the burst's periods, `remaining` is that many periods less.
        let tau = u128::from(self.tau_ns) * count + u128::from(self.tau_rem);
        let lead = tau.saturating_sub(u128::from(remaining) * u128::from(self.period_ns));
        // lead <= tau, whose ns fit in 62 bits; rem < count.
        #[allow(clippy::cast_possible_truncation)]
        let by_remaining = Instant { ns: now.saturating_add((lead / count) as u64), rem: (lead % count) as u64 };
        let capped = current.max(by_remaining).max(Instant { ns: reset_at, rem: 0 });
        if capped == current {
            return None;
        }
        // rem < count <= u32::MAX.
        #[allow(clippy::cast_possible_truncation)]
        Some(State { t: capped.ns, a: capped.rem as u32, b: 0 })
    }

    /// Requests the key has used at `now`: its arrival time's lead over `now`, in emission intervals
    /// (rounded up; more than the burst when waiters reserved later slots).
    #[must_use]
    pub fn used(&self, state: &State, now: u64) -> u64 {
        let tat = self.tat(state, now);
        let lead = u128::from(tat.ns - now) * u128::from(self.count) + u128::from(tat.rem);
        u64::try_from(lead.div_ceil(u128::from(self.period_ns))).unwrap_or(u64::MAX)
    }

    /// The state of a key that has used `used` requests at `now`.
    #[must_use]
    pub fn with_used(&self, used: u64, now: u64) -> State {
        let lead = u128::from(used) * u128::from(self.period_ns);
        let count = u128::from(self.count);
        // Far beyond any horizon: saturate rather than wrap.
        let ns = u64::try_from(lead / count).unwrap_or(u64::MAX / 2).min(u64::MAX / 2);
        // rem < count <= u32::MAX.
        #[allow(clippy::cast_possible_truncation)]
        State { t: now.saturating_add(ns), a: (lead % count) as u32, b: 0 }
    }

    /// How long a state admitted at `now` constrains (the tolerance), reservations aside.
    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        self.tau_ns + 1
    }

    /// (remaining, `reset_after_ns`).
    #[must_use]
    pub fn report(&self, state: &State, now: u64) -> (u64, u64) {
        let tat = self.tat(state, now);
        // Slack = now + tau - tat, in 1/count ns; each request uses `period_ns` of it.
        let count = u128::from(self.count);
        let slack = (u128::from(now) * count + u128::from(self.tau_ns) * count + u128::from(self.tau_rem))
            .saturating_sub(u128::from(tat.ns) * count + u128::from(tat.rem));
        // slack / period <= burst, which fits u32.
        #[allow(clippy::cast_possible_truncation)]
        let remaining = (slack / u128::from(self.period_ns)) as u64;
        (remaining, (tat.ns - now) + u64::from(tat.rem > 0))
    }

    /// Time until one more request than `remaining` would be admitted: when the slack reaches the next
    /// multiple of the period (what a `RateLimit` header's `t` says for GCRA). 0 when nothing is used.
    #[must_use]
    pub fn next_unit(&self, state: &State, now: u64) -> u64 {
        let tat = self.tat(state, now);
        let count = u128::from(self.count);
        let slack = (u128::from(now) * count + u128::from(self.tau_ns) * count + u128::from(self.tau_rem))
            .saturating_sub(u128::from(tat.ns) * count + u128::from(tat.rem));
        let period = u128::from(self.period_ns);
        if tat.ns <= now {
            return 0;
        }
        let short = (slack / period + 1) * period - slack;
        u64::try_from(short.div_ceil(count)).unwrap_or(u64::MAX).min(tat.ns - now + u64::from(tat.rem > 0))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Harness;
    use super::super::Kind;

    const S: u64 = 1_000_000_000;

    fn harness(text: &str, burst: Option<u64>) -> Harness {
        Harness::new(text, burst, Kind::Gcra)
    }

    /// A server's bucket word (`OpenAI`'s): what is left, and when it is full again. The arrival time moves to
    /// the later of the two, never earlier, so a stale word or one that does not count calls on their way
    /// lifts nothing.
    #[test]
    fn a_word_moves_the_arrival_time_later_never_earlier() {
        let limit =
            crate::algorithm::Limit::new("10/min".parse().unwrap(), None, crate::algorithm::Kind::Gcra).unwrap();
        let crate::algorithm::Algorithm::Gcra(g) = limit.algorithm else { unreachable!() };
        let fresh = crate::algorithm::State::default();
        let now = 100 * S;
        // 4 left, full in 36 s: 6 used at 6 s each.
        let capped = g.cap(&fresh, now, 4, now + 36 * S).unwrap();
        assert_eq!(g.report(&capped, now), (4, 36 * S));
        // Full later than what is left says (another client spends too): the later holds.
        let later = g.cap(&fresh, now, 9, now + 50 * S).unwrap();
        assert_eq!(g.report(&later, now).1, 50 * S);
        // A stale word (more left, full sooner) changes nothing.
        assert_eq!(g.cap(&capped, now, 8, now + 12 * S), None);
        // 0 left: nothing until an interval passes.
        let spent = g.cap(&fresh, now, 0, now + 60 * S).unwrap();
        assert!(g.evaluate(&spent, now, 1).is_err());
        assert!(g.evaluate(&spent, now + 6 * S, 1).is_ok());
        // And the limit takes words through Limit::cap.
        assert!(limit.takes_word());
        assert_eq!(limit.cap(&fresh, now, 4, now + 36 * S, now), Some(capped));
    }

    /// The cooldown score's worked example: 3 per 60 s; the score delta it prints is `reset_after` for an admission
    /// and (score − now) for a refusal, whose retry time is that minus the 60 s tolerance.
    #[test]
    fn the_next_unit_comes_back_one_interval_after_the_oldest_use() {
        let limit =
            crate::algorithm::Limit::new("10/min".parse().unwrap(), None, crate::algorithm::Kind::Gcra).unwrap();
        let crate::algorithm::Algorithm::Gcra(g) = limit.algorithm else { unreachable!() };
        let s = 1_000_000_000;
        let mut state = crate::algorithm::State::default();
        assert_eq!(g.next_unit(&state, 0), 0);
        for _ in 0..3 {
            state = g.evaluate(&state, 0, 1).unwrap();
        }
        // 3 of 10 used at 0: 7 left, an 8th 6 s later, the full 10 after 18 s.
        assert_eq!(g.report(&state, 0), (7, 18 * s));
        assert_eq!(g.next_unit(&state, 0), 6 * s);
        assert_eq!(g.next_unit(&state, 4 * s), 2 * s);
        assert_eq!(g.next_unit(&state, 18 * s), 0);
    }

    #[test]
    fn three_per_minute_reset_after_transcript() {
        let mut h = harness("3/60s", None);
        let mut at = |secs: u64| {
            let out = h.decide(secs * S, 1);
            (out.allowed, h.report(secs * S).reset_after_ns / S, out.retry_after_ns / S)
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
        let mut h = harness("7/s", None);
        assert!(h.decide(0, 7).allowed);
        for k in 1..=7_000u64 {
            let due = (k * S).div_ceil(7);
            assert!(!h.decide(due - 1, 1).allowed, "request {k} admitted early");
            assert!(h.decide(due, 1).allowed, "request {k} refused on time");
        }
    }

    #[test]
    fn reserving_at_the_retry_time_queues_waiters_in_order_and_refund_frees_the_slot() {
        let mut h = harness("1/s", Some(1));
        assert_eq!(h.reserve(0, 1), Some(0));
        assert_eq!(h.reserve(0, 1), Some(S));
        assert_eq!(h.reserve(0, 1), Some(2 * S));
        h.refund(0, 2 * S, 1);
        assert_eq!(h.reserve(0, 1), Some(2 * S));
    }

    #[test]
    fn a_cancelled_slot_under_a_later_one_is_not_given_to_a_new_arrival() {
        // 10/s, burst 1: slots at 0, 0.1, 0.2, 0.3; the one at 0.2 is cancelled.
        let ms = S / 1000;
        let mut h = harness("10/s", Some(1));
        let slots: Vec<Option<u64>> = (0..4).map(|_| h.reserve(0, 1)).collect();
        assert_eq!(slots, [0, 100 * ms, 200 * ms, 300 * ms].map(Some));
        h.refund(0, 200 * ms, 1);
        assert_eq!(h.reserve(0, 1), Some(400 * ms));
        // Nor once its time has passed while the newest slot is still to come, or is now.
        h.refund(300 * ms, 100 * ms, 1);
        assert_eq!(h.reserve(300 * ms, 1), Some(200 * ms));
        // The newest slot can be given back.
        h.refund(300 * ms, 500 * ms, 1);
        assert_eq!(h.reserve(300 * ms, 1), Some(200 * ms));
    }

    #[test]
    fn refusal_reports_what_is_left() {
        let mut h = harness("10/min", None);
        for _ in 0..10 {
            assert!(h.decide(0, 1).allowed);
        }
        assert_eq!(h.decide(0, 1).retry_after_ns, 6 * S);
        let report = h.report(0);
        assert_eq!((report.remaining, report.reset_after_ns, report.limit), (0, 60 * S, 10));
        assert_eq!(h.report(12 * S).remaining, 2);
        assert_eq!(h.decide(0, 11).retry_after_ns, u64::MAX);
    }

    #[test]
    fn first_request_at_time_zero_is_admitted_for_uneven_intervals() {
        for text in ["3/s", "7/min", "6/ms"] {
            assert!(harness(text, None).decide(0, 1).allowed, "{text}");
        }
    }

    #[test]
    fn idle_once_the_arrival_time_has_passed() {
        let mut h = harness("2/s", None);
        h.decide(0, 2);
        assert!(!h.state.is_idle(S - 1));
        assert!(h.state.is_idle(S));
    }
}
