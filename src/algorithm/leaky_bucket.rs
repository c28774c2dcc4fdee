//! Leaky bucket: each request adds `cost` tokens; every `tick_interval` the bucket loses
//! `tick_reduction` tokens; a request that would overflow the capacity is refused. A rate `R/T` means
//! R tokens leak every T; the burst is the capacity (default R). Ticks are aligned to the moment the
//! bucket last started filling from empty.
//!
//! State: `t` = the instant the bucket will be empty (idle from then on); `a` = tokens in it. The last
//! tick is derived: `t − ceil(level / reduction) × interval`.

use super::State;
use crate::rate::Rate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    capacity: u64,
    reduction: u64,
    interval_ns: u64,
}

impl LeakyBucket {
    #[must_use]
    pub fn new(rate: Rate, capacity: u32) -> Self {
        Self { capacity: u64::from(capacity), reduction: rate.count, interval_ns: rate.period_ns }
    }

    /// The constants `src/backend/decide.lua` takes: capacity, reduction per tick, tick interval.
    #[must_use]
    pub const fn params(&self) -> [u64; 5] {
        [self.capacity, self.reduction, self.interval_ns, 0, 0]
    }

    /// (last tick, level) at `at`, after the ticks since; a later base (reserved) is returned as is.
    fn level_at(&self, state: &State, at: u64) -> (u64, u64) {
        let level = u64::from(state.a);
        if level == 0 || at >= state.t {
            return (at, 0);
        }
        let base = state.t - level.div_ceil(self.reduction) * self.interval_ns;
        if at < base {
            return (base, level);
        }
        let ticks = (at - base) / self.interval_ns;
        (base + ticks * self.interval_ns, level - ticks * self.reduction)
    }

    fn state(&self, base: u64, level: u64) -> State {
        let drained = level.div_ceil(self.reduction).saturating_mul(self.interval_ns);
        #[allow(clippy::cast_possible_truncation)]
        State { t: base.saturating_add(drained), a: level as u32, b: 0 }
    }

    /// Tokens in the bucket at `now` (reserved ones too).
    #[must_use]
    pub fn used(&self, state: &State, now: u64) -> u64 {
        self.level_at(state, now).1
    }

    /// The state of a key that used `used` at `now`: that many tokens (beyond the capacity too).
    #[must_use]
    pub fn with_used(&self, used: u64, now: u64) -> State {
        if used == 0 {
            return State::default();
        }
        self.state(now, used.min(u64::from(u32::MAX)))
    }

    /// The state after admitting `cost` at `at`.
    ///
    /// # Errors
    /// The wait, in nanoseconds after `at`, until it would be admitted.
    // Always: called out of line, its result came back through memory and stalled the hot path.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn evaluate(&self, state: &State, at: u64, cost: u64) -> Result<State, u64> {
        let (base, level) = self.level_at(state, at);
        if at < base {
            // Tokens reserved for later ticks: decide at that tick.
            return Err(base - at + self.evaluate(state, base, cost).err().unwrap_or(0));
        }
        if level + cost <= self.capacity {
            return Ok(self.state(base, level + cost));
        }
        let ticks = (level + cost - self.capacity).div_ceil(self.reduction);
        Err(base + ticks * self.interval_ns - at)
    }

    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        self.capacity.div_ceil(self.reduction).saturating_mul(self.interval_ns)
    }

    /// Takes `cost` tokens out (a handler's manual reduction, or a cancelled wait).
    #[must_use]
    pub fn refund(&self, state: &State, now: u64, cost: u64) -> State {
        let (base, level) = self.level_at(state, now);
        let left = level.saturating_sub(cost);
        if left == 0 && base > now {
            // Reserved tokens all given back: until `base` the bucket still holds what it held before
            // them, at most one tick's leak (else they would have been reserved at an earlier tick). An
            // empty state would forget it, and admit at once what the bucket admits only at `base`.
            #[allow(clippy::cast_possible_truncation)] // capacity <= u32::MAX
            return State { t: base, a: self.reduction.min(self.capacity) as u32, b: 0 };
        }
        self.state(base, left)
    }

    /// (remaining, `reset_after_ns`).
    #[must_use]
    pub fn report(&self, state: &State, now: u64) -> (u64, u64) {
        let (_, level) = self.level_at(state, now);
        (self.capacity.saturating_sub(level), if level == 0 { 0 } else { state.t.saturating_sub(now) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Harness;
    use super::super::Kind;

    const S: u64 = 1_000_000_000;

    #[test]
    fn fills_to_capacity_and_leaks_per_tick() {
        // The node limiter's `metrics` group: capacity 2, 2 tokens leak every 30 s.
        let mut h = Harness::new("2/30s", None, Kind::LeakyBucket);
        assert!(h.decide(S, 1).allowed);
        assert!(h.decide(2 * S, 1).allowed);
        assert_eq!(h.decide(3 * S, 1).retry_after_ns, 28 * S);
        assert!(h.decide(31 * S, 2).allowed);
        assert!(!h.state.is_idle(60 * S));
        assert!(h.state.is_idle(61 * S));
    }

    #[test]
    fn a_reservation_given_back_leaves_what_the_bucket_held_before_it() {
        let bucket = super::LeakyBucket::new("1/10s".parse().unwrap(), 1);
        let held = bucket.evaluate(&super::State::default(), 0, 1).unwrap();
        let wait = bucket.evaluate(&held, 0, 1).unwrap_err();
        assert_eq!(wait, 10 * S);
        let reserved = bucket.evaluate(&held, wait, 1).unwrap();
        let given_back = bucket.refund(&reserved, 0, 1);
        // As before the reservation: the next one waits for the same tick, not none.
        assert_eq!(bucket.evaluate(&given_back, 0, 1), Err(10 * S));
        assert_eq!(bucket.evaluate(&given_back, 5 * S, 1), Err(5 * S));
        assert!(bucket.evaluate(&given_back, 10 * S, 1).is_ok());
    }

    #[test]
    fn partial_leaks_take_several_ticks() {
        let mut h = Harness::new("1/10s", Some(3), Kind::LeakyBucket);
        assert!(h.decide(0, 3).allowed);
        assert_eq!(h.decide(0, 2).retry_after_ns, 20 * S);
        assert_eq!(h.report(15 * S).remaining, 1);
    }

    #[test]
    fn manual_reduction_takes_tokens_out() {
        let mut h = Harness::new("5/min", None, Kind::LeakyBucket);
        assert!(h.decide(0, 5).allowed);
        assert!(!h.decide(S, 1).allowed);
        h.refund(S, S, 3);
        assert_eq!(h.report(S).remaining, 3);
        assert!(h.decide(S, 3).allowed);
    }
}
