//! Windows aligned to the key's first request, and after a window that ended unused to the next one:
//! the token bucket with monotonic burst windows, and the fixed window. Both grant `capacity`
//! permits at each window start; unused permits do not carry over. Aligning per key avoids the fleet-wide
//! spike at clock-aligned boundaries.
//!
//! - token bucket: windows of `burst × period / count` (rounded up, so never faster than the rate),
//!   `burst` permits each;
//! - fixed window: windows of `period`, `burst` (default: count) permits each.
//!
//! State: `t` = end of the current window (0: never used); `a` = permits left in it; `b` = 0, or, when a
//! server said where the window ends (a fixed window capped by [`Windows::cap`]), [`ANNOUNCED`] with the
//! instant the server's window began as far as the key knows (see [`origin_stamp`]).

use super::State;
use crate::rate::Rate;

/// Bit 0 of `State::b`: a server announced where the window ends ([`Windows::cap`]); it has started,
/// however far its end (a window reserved by a waiter has not, until `t - window_ns`).
pub const ANNOUNCED: u32 = 1;

/// Milliseconds are stamped modulo 2**31 in the 31 bits above [`ANNOUNCED`].
const STAMP_MODULUS: u64 = 1 << 31;

#[inline]
const fn announced(state: &State) -> bool {
    state.b & ANNOUNCED != 0
}

/// `b` of an announced window whose server window began at `origin` (ns): a word for a request admitted
/// before it is about an older server window.
#[allow(clippy::cast_possible_truncation)] // below 2**31
const fn origin_stamp(origin: u64) -> u32 {
    (((origin / 1_000_000) % STAMP_MODULUS) as u32) << 1 | ANNOUNCED
}

/// Whether `sent_at` (ns) is before the origin `b` stamps: by 1 ms to about 6 days, on the stamps' circle.
#[allow(clippy::cast_possible_truncation)] // below 2**31
const fn sent_before_origin(b: u32, sent_at: u64) -> bool {
    let sent = ((sent_at / 1_000_000) % STAMP_MODULUS) as u32;
    let ahead = (b >> 1).wrapping_sub(sent) & (STAMP_MODULUS as u32 - 1);
    ahead != 0 && ahead < 1 << 29
}

/// How much earlier than the request that brought a server's word a window may have started, and the
/// word still be taken: the clocks read on either side of one admission differ by that much at most.
const WORD_SLACK_NS: u64 = 1_000_000;

/// The coarsest rounding of a reset that servers send (whole seconds, up or down): a server's window
/// ends within this of the reset its word says, give or take the time the word took to come back.
const RESET_GRAIN_NS: u64 = 1_000_000_000;

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
        // An announced window may end further away than a window lasts.
        let start = end.saturating_sub(self.window_ns);
        if at < start && !announced(state) {
            return Err(start - at);
        }
        // A window that ended is followed by one of this limit's own.
        let b = if at >= state.t { 0 } else { state.b };
        // permits <= capacity <= u32::MAX.
        #[allow(clippy::cast_possible_truncation)]
        Ok(State { t: end, a: (permits - cost) as u32, b })
    }

    /// The state after a server said the key has `remaining` left until `reset_at`, in a reply to a
    /// request admitted at `sent_at`: the window ends at the server's reset with at most `remaining`
    /// permits (never more than it has: other requests may be on their way); after it, windows of the
    /// limit's own follow. `None` leaves the state as it is: a word about a window that ended since the
    /// request was admitted (stale), a reset already past, or windows reserved by waiters ahead (a word
    /// does not move reservations).
    ///
    /// Resets rounded to whole seconds put an announced window's end up to a second late, and calls sent
    /// in that second land in the server's next window. A word from it shows itself: its window ends more
    /// than [`RESET_GRAIN_NS`] after the announced one, counted from its request's admission. It starts a
    /// window of what the server says is left (the announced window's permits are about a window that is
    /// over); the words from that window that follow lower it as any do (they count the other calls that
    /// crossed, which it did not). A word whose reset comes more than two grains before the announced
    /// window's end is about an earlier window (a reply that came late); one that says nothing is left
    /// makes the words for requests admitted before it stale (they cannot say less, and must not lift the
    /// wait).
    #[must_use]
    pub fn cap(&self, state: &State, now: u64, remaining: u64, reset_at: u64, sent_at: u64) -> Option<State> {
        if reset_at <= now {
            return None;
        }
        let admitted = sent_at;
        let sent_at = sent_at.saturating_add(WORD_SLACK_NS);
        // Where the server's window began, as far as the key knows.
        let b = if now < state.t {
            if announced(state) {
                // A reply to a request admitted before the window began came late.
                if sent_before_origin(state.b, sent_at) {
                    return None;
                }
                // A word from the server's next window: its window ends more than a grain after this one.
                if admitted + (reset_at - now) > state.t.saturating_add(RESET_GRAIN_NS) {
                    // remaining.min(capacity) <= u32::MAX.
                    #[allow(clippy::cast_possible_truncation)]
                    return Some(State { t: reset_at, a: remaining.min(self.capacity) as u32, b: state.b });
                }
                // A late word about an earlier window.
                if reset_at.saturating_add(2 * RESET_GRAIN_NS) < state.t {
                    return None;
                }
                state.b
            } else {
                // A window of the limit's own started at its first request.
                let start = state.t.saturating_sub(self.window_ns);
                if start > now || start > sent_at {
                    return None;
                }
                origin_stamp(start)
            }
        } else if announced(state) {
            // The announced window ended at `t`: a request admitted in it has an old word.
            if sent_at < state.t {
                return None;
            }
            origin_stamp(state.t)
        } else {
            origin_stamp(admitted)
        };
        let (_, permits) = self.current(state, now);
        // permits <= capacity <= u32::MAX.
        #[allow(clippy::cast_possible_truncation)]
        let a = permits.min(remaining) as u32;
        // After every request admitted by now.
        let b = if remaining == 0 { origin_stamp(now.saturating_add(2 * WORD_SLACK_NS)) } else { b };
        Some(State { t: reset_at, a, b })
    }

    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        self.window_ns
    }

    /// Gives `cost` back to the window that `at` fell in, if it is the key's newest: permits of a window
    /// that ended, or of one before a later reserved window, are not given to another window.
    #[must_use]
    pub fn refund(&self, state: &State, at: u64, cost: u64) -> State {
        let started = if announced(state) { 0 } else { state.t.saturating_sub(self.window_ns) };
        if state.t == 0 || at >= state.t || at < started {
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
        let ahead = if announced(state) { 0 } else { (end - now - 1) / self.window_ns };
        ahead.saturating_mul(self.capacity).saturating_add(self.capacity - permits)
    }

    /// An announced window (a server's word set its end) moved to this limit at `now`: it still ends where
    /// the server said, with what this limit leaves of the `used` permits; what was used past this limit's
    /// capacity is not carried into later windows, which the server counts afresh (a server that lowers its
    /// limit would otherwise leave the key idle for windows on end). `None` for any other state.
    #[must_use]
    pub fn rescale_announced(&self, state: &State, used: u64, now: u64) -> Option<State> {
        if !announced(state) || now >= state.t {
            return None;
        }
        // Below the capacity, a u32.
        #[allow(clippy::cast_possible_truncation)]
        let a = self.capacity.saturating_sub(used) as u32;
        Some(State { t: state.t, a, b: state.b })
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
        let usable = if now < end.saturating_sub(self.window_ns) && !announced(state) { 0 } else { permits };
        (usable, end.saturating_sub(now))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Harness;
    use super::super::{Kind, Limit};

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

    /// A server's word through the harness: at `now`, `remaining` left until `reset_at`, for a request
    /// admitted at `sent_at`; true when it was taken.
    fn hear(h: &mut Harness, now: u64, remaining: u64, reset_at: u64, sent_at: u64) -> bool {
        match h.limit.cap(&h.state, now, remaining, reset_at, sent_at) {
            Some(state) => {
                h.state = state;
                true
            }
            None => false,
        }
    }

    #[test]
    fn a_word_ends_the_window_at_the_servers_reset_with_what_it_has_left() {
        let mut h = Harness::new("100/min", None, Kind::FixedWindow);
        assert!(h.decide(0, 1).allowed);
        // The server has 3 left until 90 s, later than the key's own window would end (60 s).
        assert!(hear(&mut h, S, 3, 90 * S, 0));
        for _ in 0..3 {
            assert!(h.decide(2 * S, 1).allowed);
        }
        assert_eq!(h.decide(2 * S, 1).retry_after_ns, 88 * S);
        // Not at the key's own boundary: at the server's.
        assert_eq!(h.decide(60 * S, 1).retry_after_ns, 30 * S);
        assert!(h.decide(90 * S, 100).allowed);
    }

    #[test]
    fn a_smaller_limit_keeps_the_announced_end_and_carries_nothing_past_it() {
        // The server said its window of 20 ends at 3 s and 20 were used; then its limit drops to 5.
        let mut h = Harness::new("20/3s", None, Kind::FixedWindow);
        assert!(h.decide(0, 20).allowed);
        assert!(hear(&mut h, S / 2, 0, 3 * S, 0));
        let smaller = Limit::new("5/3s".parse().unwrap(), None, Kind::FixedWindow).unwrap();
        h.state = smaller.rescale(&h.limit, &h.state, &mut h.log, S);
        h.limit = smaller;
        // Nothing more before the server's reset, and its next window whole: not three windows of debt.
        assert_eq!(h.decide(S, 1).retry_after_ns, 2 * S);
        assert!(h.decide(3 * S, 5).allowed);
    }

    #[test]
    fn a_word_never_gives_more_than_the_window_has_left() {
        let mut h = Harness::new("10/min", None, Kind::FixedWindow);
        assert!(h.decide(0, 8).allowed);
        assert!(hear(&mut h, S, 50, 30 * S, 0));
        assert_eq!(h.report(S).remaining, 2);
        assert_eq!(h.report(S).reset_after_ns, 29 * S);
    }

    #[test]
    fn a_window_announced_far_ahead_has_started() {
        // The server's window is an hour; the limit's own is a minute.
        let mut h = Harness::new("10/min", None, Kind::FixedWindow);
        assert!(hear(&mut h, 0, 4, 3600 * S, 0));
        assert!(h.decide(S, 4).allowed);
        assert_eq!(h.report(S).remaining, 0);
        assert_eq!(h.decide(S, 1).retry_after_ns, 3599 * S);
        assert_eq!(h.limit.used(&h.state, &super::super::NO_LOG, S), 10);
        // After the server's reset, windows of the limit's own.
        assert!(h.decide(3600 * S, 10).allowed);
        assert_eq!(h.decide(3601 * S, 1).retry_after_ns, 59 * S);
    }

    #[test]
    fn a_word_about_a_window_that_ended_since_is_stale() {
        let mut h = Harness::new("10/min", None, Kind::FixedWindow);
        assert!(hear(&mut h, 0, 5, 10 * S, 0));
        // The announced window ended at 10 s; a reply to a request admitted at 9 s comes after it.
        assert!(!hear(&mut h, 11 * S, 0, 12 * S, 9 * S));
        assert!(h.decide(11 * S, 10).allowed);
        // A window of the limit's own began at 11 s: a word for a request admitted before it is stale,
        // one for a request admitted in it is not.
        assert!(!hear(&mut h, 12 * S, 0, 20 * S, 10 * S));
        assert!(hear(&mut h, 12 * S, 0, 20 * S, 11 * S));
        assert_eq!(h.decide(12 * S, 1).retry_after_ns, 8 * S);
    }

    #[test]
    fn a_late_word_about_the_window_before_an_announced_one_is_stale() {
        let mut h = Harness::new("10/min", None, Kind::FixedWindow);
        assert!(hear(&mut h, 0, 5, 10 * S, 0));
        // The announced window ended at 10 s; the next began with a request at 11 s, whose reply
        // announced it (5 left until 20 s).
        assert!(h.decide(11 * S, 1).allowed);
        assert!(hear(&mut h, 11 * S, 5, 20 * S, 11 * S));
        // A reply to a request admitted at 9 s, in the window before, comes now, its reset rounded up
        // past now: it is about that window, and changes nothing.
        let before = h.state;
        assert!(!hear(&mut h, 12 * S, 0, 13 * S, 9 * S));
        assert_eq!(h.state, before);
        // Replies to requests admitted in this window are taken, in any order.
        assert!(hear(&mut h, 12 * S, 3, 20 * S, 11 * S + 500_000_000));
        assert!(hear(&mut h, 12 * S, 2, 20 * S, 11 * S));
        assert_eq!(h.report(12 * S).remaining, 2);
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn a_word_from_the_servers_next_window_starts_one_of_what_it_says() {
        // The server's windows of 4 s end at 4 s and 8 s; it rounds its resets up to whole seconds.
        let mut h = Harness::new("100/4s", None, Kind::FixedWindow);
        assert!(h.decide(3_000 * MS, 92).allowed);
        // At 3.11 s, the word for 3.0 s: 8 left, 0.9 s rounded up to 1: the window ends at 4.11 s.
        assert!(hear(&mut h, 3_110 * MS, 8, 4_110 * MS, 3_000 * MS));
        // The last 8 go at 4.01 and 4.012 s, past the server's window: they land in its next one.
        assert!(h.decide(4_010 * MS, 1).allowed);
        assert!(h.decide(4_012 * MS, 7).allowed);
        assert_eq!(h.report(4_020 * MS).remaining, 0);
        // The word for 4.01 s: 99 left, 3.98 s rounded up to 4. Its window ends after 4.01 + 4 - 1 s, later
        // than the announced one can: the next window has the 99, not what the announced one had left.
        assert!(hear(&mut h, 4_030 * MS, 99, 8_030 * MS, 4_010 * MS));
        assert_eq!(h.report(4_030 * MS).remaining, 99);
        // The word for 4.012 s counts the 7 that crossed with it.
        assert!(hear(&mut h, 4_040 * MS, 92, 8_040 * MS, 4_012 * MS));
        assert!(h.decide(4_050 * MS, 92).allowed);
        assert_eq!(h.decide(4_050 * MS, 1).retry_after_ns, 3_990 * MS);
        // A late word for 3 s is about the window before.
        assert!(!hear(&mut h, 4_060 * MS, 0, 4_110 * MS, 3_000 * MS));
    }

    #[test]
    fn a_word_rounded_up_in_the_same_window_is_not_taken_for_the_next() {
        let mut h = Harness::new("100/4s", None, Kind::FixedWindow);
        assert!(h.decide(0, 50).allowed);
        // Exact: the server's window ends at 4 s.
        assert!(hear(&mut h, 10 * MS, 50, 4_000 * MS, 0));
        assert!(h.decide(3_900 * MS, 40).allowed);
        // The request at 3.9 s reached the server at 3.95 s: 0.05 s left, rounded up to 1 s.
        assert!(hear(&mut h, 3_950 * MS, 90, 4_950 * MS, 3_900 * MS));
        assert_eq!(h.report(3_950 * MS).remaining, 10);
    }

    #[test]
    fn a_word_about_an_earlier_window_that_came_late_is_ignored() {
        let mut h = Harness::new("100/4s", None, Kind::FixedWindow);
        assert!(h.decide(3_900 * MS, 1).allowed);
        assert!(h.decide(4_100 * MS, 1).allowed);
        // The reply to 4.1 s, in the server's window ending at 8 s, came first.
        assert!(hear(&mut h, 4_200 * MS, 99, 8_200 * MS, 4_100 * MS));
        // The reply to 3.9 s (its window ended at 4 s) comes after: it says nothing of this window.
        assert!(!hear(&mut h, 4_300 * MS, 0, 5_300 * MS, 3_900 * MS));
        assert_eq!(h.report(4_300 * MS).remaining, 98);
    }

    #[test]
    fn a_wait_is_not_lifted_by_a_word_for_a_request_sent_before_it() {
        let mut h = Harness::new("100/4s", None, Kind::FixedWindow);
        assert!(h.decide(0, 2).allowed);
        assert!(hear(&mut h, 10 * MS, 98, 4_000 * MS, 0));
        // A 429 with Retry-After: 3 for the first request: nothing until 3.02 s.
        assert!(hear(&mut h, 20 * MS, 0, 3_020 * MS, 0));
        // The other's reply says the server's next window has 97 left (the wait is the server's, not a
        // window's): it came for a request admitted before the wait, and is stale.
        assert!(!hear(&mut h, 30 * MS, 97, 8_030 * MS, 5 * MS));
        assert_eq!(h.decide(40 * MS, 1).retry_after_ns, 2_980 * MS);
    }

    #[test]
    fn origin_stamps_order_instants_across_their_wrap() {
        let wrap = super::STAMP_MODULUS * 1_000_000;
        for origin in [S, wrap - S, wrap, 5 * wrap + 7 * S] {
            let b = super::origin_stamp(origin);
            assert!(super::sent_before_origin(b, origin - 2_000_000));
            assert!(!super::sent_before_origin(b, origin));
            assert!(!super::sent_before_origin(b, origin + S));
        }
        assert!(super::sent_before_origin(super::origin_stamp(wrap + S), wrap - S));
    }

    #[test]
    fn a_word_does_not_move_reserved_windows_nor_a_past_reset() {
        let mut h = Harness::new("2/10s", None, Kind::FixedWindow);
        let waits: Vec<Option<u64>> = (0..3).map(|_| h.reserve(0, 1)).collect();
        assert_eq!(waits, [0, 0, 10 * S].map(Some));
        let reserved = h.state;
        assert!(!hear(&mut h, S, 0, 30 * S, S));
        assert_eq!(h.state, reserved);
        assert!(!hear(&mut h, 30 * S, 0, 30 * S, 30 * S));
    }

    #[test]
    fn only_a_fixed_window_takes_a_word() {
        let h = Harness::new("10/min", None, Kind::TokenBucket);
        assert!(!h.limit.takes_word());
        assert_eq!(h.limit.cap(&h.state, 0, 1, S, 0), None);
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
