//! Sliding window counter: the count of the current window plus the previous window's count
//! weighted by how much of it the sliding window still overlaps. Windows are aligned to the clock's
//! zero. Exact integer arithmetic: admit iff
//! `(current + cost) × W + previous × (W − elapsed) <= limit × W`.
//!
//! It approximates a true sliding window: at most `limit` per aligned window, at most `2 × limit` in
//! any window of length `W`.
//!
//! State: `t` = start of the current window + 2W (when it stops mattering; 0: never used);
//! `a` = current count; `b` = previous count.

use super::State;
use crate::rate::Rate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: u64,
    window_ns: u64,
}

/// One window's view: its start and the two counts.
#[derive(Debug, Clone, Copy)]
struct View {
    start: u64,
    current: u64,
    previous: u64,
}

impl SlidingWindow {
    #[must_use]
    pub fn new(rate: Rate, limit: u32) -> Self {
        Self { limit: u64::from(limit), window_ns: rate.period_ns }
    }

    /// The constants `src/backend/decide.lua` takes: limit, window.
    #[must_use]
    pub const fn params(&self) -> [u64; 5] {
        [self.limit, self.window_ns, 0, 0, 0]
    }

    fn view(&self, state: &State, at: u64) -> View {
        let w = self.window_ns;
        let start = at - at % w;
        if state.t == 0 {
            return View { start, current: 0, previous: 0 };
        }
        // Saturating: a state read from a shared region's file may be any bytes.
        let stored = state.t.saturating_sub(2 * w);
        let (current, previous) = (u64::from(state.a), u64::from(state.b));
        if stored >= start {
            // This window, or a later one a waiter reserved (its start is then after `at`).
            View { start: stored, current, previous }
        } else if stored + w == start {
            View { start, current: 0, previous: current }
        } else {
            View { start, current: 0, previous: 0 }
        }
    }

    /// The earliest offset into the window at which `cost` fits, if any.
    fn earliest(&self, view: View, cost: u64) -> Option<u64> {
        let w = u128::from(self.window_ns);
        let room = self.limit.checked_sub(view.current + cost)?;
        if view.previous == 0 {
            return Some(0);
        }
        // previous × (W − e) <= room × W  ⇔  e >= W − floor(room × W / previous).
        let fits = u128::from(room) * w / u128::from(view.previous);
        // fits < W + 1 here unless room >= previous, when the offset is 0.
        #[allow(clippy::cast_possible_truncation)]
        let offset = w.saturating_sub(fits) as u64;
        (offset < self.window_ns).then_some(offset)
    }

    /// The state after admitting `cost` at `at`.
    ///
    /// # Errors
    /// The wait, in nanoseconds after `at`, until it would be admitted.
    // Always: called out of line, its result came back through memory and stalled the hot path.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn evaluate(&self, state: &State, at: u64, cost: u64) -> Result<State, u64> {
        let view = self.view(state, at);
        let elapsed = at.saturating_sub(view.start);
        match self.earliest(view, cost) {
            Some(offset) if offset <= elapsed && at >= view.start =>
            {
                #[allow(clippy::cast_possible_truncation)]
                Ok(State {
                    t: view.start + 2 * self.window_ns,
                    a: (view.current + cost) as u32,
                    b: view.previous as u32,
                })
            }
            Some(offset) => Err(view.start + offset - at),
            None => {
                let next = View { start: view.start + self.window_ns, current: 0, previous: view.current };
                let offset = self.earliest(next, cost).unwrap_or(self.window_ns);
                Err(next.start + offset - at)
            }
        }
    }

    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        2 * self.window_ns
    }

    /// Takes `cost` off the window that `at` fell in, if it is still current or previous.
    #[must_use]
    pub fn refund(&self, state: &State, at: u64, cost: u64) -> State {
        if state.t == 0 {
            return *state;
        }
        let stored = state.t - 2 * self.window_ns;
        let mut state = *state;
        #[allow(clippy::cast_possible_truncation)]
        let cost = cost.min(u64::from(u32::MAX)) as u32;
        if at >= stored {
            state.a = state.a.saturating_sub(cost);
        } else if at + self.window_ns >= stored {
            state.b = state.b.saturating_sub(cost);
        }
        state
    }

    /// Requests used at `now`: the current count and the previous window's by its overlap, rounded up
    /// (a reserved later window counts whole).
    #[must_use]
    pub fn used(&self, state: &State, now: u64) -> u64 {
        let view = self.view(state, now);
        let w = u128::from(self.window_ns);
        let elapsed = u128::from(now.saturating_sub(view.start)).min(w);
        let weighted = u128::from(view.current) * w + u128::from(view.previous) * (w - elapsed);
        u64::try_from(weighted.div_ceil(w)).unwrap_or(u64::MAX)
    }

    /// The state of a key that used `used` at `now`, all counted in the current window (beyond the
    /// limit too: refused until it slides out).
    #[must_use]
    pub fn with_used(&self, used: u64, now: u64) -> State {
        if used == 0 {
            return State::default();
        }
        let start = now - now % self.window_ns;
        #[allow(clippy::cast_possible_truncation)]
        State { t: start + 2 * self.window_ns, a: used.min(u64::from(u32::MAX)) as u32, b: 0 }
    }

    /// (remaining, `reset_after_ns`).
    #[must_use]
    pub fn report(&self, state: &State, now: u64) -> (u64, u64) {
        let view = self.view(state, now);
        let w = u128::from(self.window_ns);
        let elapsed = u128::from(now.saturating_sub(view.start)).min(w);
        let used = u128::from(view.current) * w + u128::from(view.previous) * (w - elapsed);
        let remaining = (u128::from(self.limit) * w).saturating_sub(used) / w;
        let reset = if view.current > 0 {
            view.start + 2 * self.window_ns
        } else if view.previous > 0 {
            view.start + self.window_ns
        } else {
            now
        };
        // remaining <= limit, a u32.
        #[allow(clippy::cast_possible_truncation)]
        let remaining = remaining as u64;
        (remaining, reset.saturating_sub(now))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Harness;
    use super::super::Kind;

    const S: u64 = 1_000_000_000;

    #[test]
    fn ten_per_minute_admits_ten_and_spares_other_keys() {
        // 10 per minute: ten requests pass, the eleventh reaches the limit; other keys are unaffected.
        let mut h = Harness::new("10/min", None, Kind::SlidingWindow);
        for _ in 0..10 {
            assert!(h.decide(S, 1).allowed);
        }
        // At the next window the ten weigh less than nine after 6 s: retry at 66 s.
        assert_eq!(h.decide(S, 1).retry_after_ns, 65 * S);
        assert!(Harness::new("10/min", None, Kind::SlidingWindow).decide(S, 1).allowed);
    }

    #[test]
    fn previous_window_counts_by_its_overlap() {
        let mut h = Harness::new("10/min", None, Kind::SlidingWindow);
        assert!(h.decide(0, 10).allowed);
        // 25 % into the next window, 7.5 of the previous 10 still count: two more fit, not three.
        assert!(h.decide(75 * S, 2).allowed);
        let refused = h.decide(75 * S, 1);
        assert!(!refused.allowed);
        // 0.5 more must slide out: 3 s more of the previous window.
        assert_eq!(refused.retry_after_ns, 3 * S);
        assert!(h.decide(78 * S, 1).allowed);
        assert_eq!(h.report(78 * S).remaining, 0);
        // Two windows later nothing counts.
        assert_eq!(h.report(180 * S).remaining, 10);
        assert!(h.state.is_idle(180 * S));
    }

    #[test]
    fn a_reserved_later_window_is_not_spent_early() {
        let mut h = Harness::new("2/min", None, Kind::SlidingWindow);
        assert_eq!(h.reserve(0, 2), Some(0));
        let wait = h.reserve(0, 2).unwrap();
        assert_eq!(wait, 120 * S);
        // The reservation sits in a later window: a check now waits for it to start and then some.
        assert!(!h.decide(S, 1).allowed);
    }
}
