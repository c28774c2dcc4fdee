//! Where a server's words place a budget's window: whether its resets end windows or it refills all the
//! time (told by its stated window, IETF `RateLimit-Policy` `w`), and whether its resets come on time.

use crate::server_words::Budget;

/// The end of the window a key's words about a budget are about. A fixed window's words all say its end
/// (give or take a second of rounding, and the reply's way back), the next window's a window later; a
/// refilling budget's say when its next unit comes, or when it is full, anywhere in between.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Anchor {
    budget: Box<str>,
    /// The stated window, if any.
    window: Option<f64>,
    /// The window's end (epoch seconds), as the first word about it said, and that call's age: how
    /// late the figure may be.
    end: f64,
    age: f64,
    /// The earliest end a word about it said: where a key's window ends, the words being taken in turn.
    earliest: f64,
    /// Words whose reset fell inside that window, clear of both its ends.
    inside: u8,
}

/// Words inside a stated window that show a budget refills ([`Anchor`]): two, so that one odd reply
/// does not decide.
const INSIDE_WORDS: u8 = 2;

/// What the words about a budget's window have shown of its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shown {
    Nothing,
    /// The budget refills all the time: its resets fall inside its stated window.
    Refills,
    /// The window outlasts the resets said: a call sent after the window's end, as its words put it, was
    /// counted in that window (the server rounds its reset down, or to the nearest second).
    LateResets,
}

impl Anchor {
    /// Places a word saying the window of `budget` ends at `end` (epoch seconds), from a call sent at
    /// `sent` that took `age` to come back: what the words about that window show.
    pub(super) fn place(anchors: &mut Vec<Self>, budget: &Budget, end: f64, (sent, age): (f64, f64)) -> Shown {
        let window = budget.window;
        let fresh = Self { budget: budget.name.as_ref().into(), window, end, age, earliest: end, inside: 0 };
        let Some(anchor) = anchors.iter_mut().find(|a| *a.budget == *budget.name) else {
            anchors.push(fresh);
            return Shown::Nothing;
        };
        if anchor.window.map(f64::to_bits) != window.map(f64::to_bits) {
            *anchor = fresh;
            return Shown::Nothing;
        }
        // Whole seconds round a reset by up to one either way; each figure is late by up to its call's
        // age. A window of no stated length is taken to last more than a second or two: a word that ends
        // clear of this one's is the next window's.
        let later_window = match window {
            Some(window) => anchor.end + window - 1.5 - anchor.age,
            None => anchor.earliest + 1.5 + age,
        };
        if end >= later_window {
            *anchor = fresh;
            return Shown::Nothing;
        }
        if window.is_some() && end > anchor.end + 1.5 + age {
            anchor.inside = anchor.inside.saturating_add(1);
            return if anchor.inside >= INSIDE_WORDS { Shown::Refills } else { Shown::Nothing };
        }
        // A call sent after the window's end, as a word said it, and counted in that window: the end came
        // later (a reset rounded up, or exact, is never early). A rounded-down one is early by under a
        // second; a refilling budget's next unit, rounded up, comes a second or more after the call.
        let late = sent > anchor.earliest && end < anchor.earliest + 1.0 + age;
        anchor.earliest = anchor.earliest.min(end);
        if late {
            Shown::LateResets
        } else {
            Shown::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use proptest::prelude::*;

    use super::*;

    fn budget(window: f64) -> Budget {
        Budget { name: Cow::Borrowed("api"), remaining: 0, reset_after: 0.0, limit: Some(20), window: Some(window) }
    }

    /// How a server turns seconds to a window's end into its whole `t`.
    #[derive(Debug, Clone, Copy)]
    enum Rounding {
        Down,
        Up,
        Nearest,
        Exact,
    }

    fn whole(seconds: f64, rounding: Rounding) -> f64 {
        match rounding {
            Rounding::Down => seconds.floor(),
            Rounding::Up => seconds.ceil(),
            Rounding::Nearest => seconds.round(),
            Rounding::Exact => seconds,
        }
    }

    proptest! {
        // Cheap cases; the edges (a word a whole second late) are rare among them.
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// A server of fixed windows (on a grid, or each from the first call after the last ended) is
        /// never taken for a refilling one, whatever its rounding, the calls' times and ages, and the
        /// order their replies come back in; nor for one whose resets come late unless it rounds its
        /// `t` down (or to the nearest second), which makes them come late.
        #[test]
        fn fixed_windows_never_show_a_refill(
            window in 1u32..4_000,
            stated: bool,
            phase in 0.0f64..1.0,
            from_first_call: bool,
            rounding in prop_oneof![
                Just(Rounding::Down), Just(Rounding::Up), Just(Rounding::Nearest), Just(Rounding::Exact)
            ],
            calls in prop::collection::vec((0.0f64..2.0, 0.0f64..1.0, 0.0f64..1.0), 1..200),
        ) {
            // A window of no stated length is told from the next only when it lasts a few seconds.
            prop_assume!(stated || window >= 4);
            let window = f64::from(window);
            let mut sent = 1e9;
            let mut end = sent + phase * window; // the window in force before the first call
            let mut replies = Vec::new();
            for (gap, age, at_server) in calls {
                // Gaps of up to two windows: calls in the same window, the next, or later.
                sent += gap * gap * window;
                let age = age * age; // mostly short, up to a second
                let seen = sent + at_server * age; // when the server reads its window
                if seen >= end {
                    end = if from_first_call { seen + window } else { end + ((seen - end) / window).floor().mul_add(window, window) };
                }
                let t = whole(end - seen, rounding);
                replies.push((sent, age, t));
            }
            replies.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
            let (mut anchors, budget) = (Vec::new(), Budget { window: stated.then_some(window), ..budget(window) });
            let rounds_down = matches!(rounding, Rounding::Down | Rounding::Nearest);
            for (sent, age, t) in replies {
                let shown = Anchor::place(&mut anchors, &budget, sent + age + t, (sent, age));
                prop_assert!(shown != Shown::Refills, "sent at {sent}, t={t}");
                prop_assert!(rounds_down || shown == Shown::Nothing, "sent at {sent}, t={t}: {shown:?}");
            }
        }
    }

    /// The words of a budget refilled at `rate` a second up to `size`, called every `gap` seconds while
    /// a unit is left, saying `t` as `next`: the first moment a word shows it refills, if one does
    /// within `span` seconds.
    fn first_shown(window: f64, size: f64, gap: f64, next: fn(level: f64, size: f64, rate: f64) -> f64) -> Option<f64> {
        let rate = size / window;
        let (mut anchors, budget) = (Vec::new(), budget(window));
        let (mut level, mut now) = (size, 1e9);
        while now < 1e9 + 6.0 * window {
            if level >= 1.0 {
                level -= 1.0;
            }
            let t = next(level, size, rate).ceil();
            if Anchor::place(&mut anchors, &budget, now + 0.01 + t, (now, 0.01)) == Shown::Refills {
                return Some(now - 1e9);
            }
            now += gap;
            level = (level + gap * rate).min(size);
        }
        None
    }

    #[test]
    fn a_budget_whose_t_is_its_next_unit_shows_it_refills_within_its_first_windows() {
        let next_unit =
            |level: f64, size: f64, rate: f64| if level >= size { 0.0 } else { (1.0 - level.fract()) / rate };
        // The QA server: 20 per 4 s, called flat out; an API's 100 a minute, a call a second.
        assert!(first_shown(4.0, 20.0, 0.05, next_unit).is_some_and(|at| at < 8.0));
        assert!(first_shown(60.0, 100.0, 1.0, next_unit).is_some_and(|at| at < 60.0));
    }

    #[test]
    fn a_budget_whose_t_is_when_it_is_full_shows_it_refills() {
        let full = |level: f64, size: f64, rate: f64| (size - level) / rate;
        assert!(first_shown(60.0, 100.0, 0.5, full).is_some_and(|at| at < 60.0));
    }

    #[test]
    fn a_window_too_short_to_tell_never_decides() {
        let next_unit = |level: f64, _: f64, rate: f64| (1.0 - level.fract()) / rate;
        assert_eq!(first_shown(3.0, 30.0, 0.05, next_unit), None);
    }

    #[test]
    fn a_budget_of_no_stated_window_or_a_new_window_starts_again() {
        let mut anchors = Vec::new();
        let mut place = |budget: &Budget, end: f64| Anchor::place(&mut anchors, budget, end, (0.0, 0.0));
        let unstated = Budget { window: None, ..budget(60.0) };
        assert_eq!(place(&unstated, 10.0), Shown::Nothing);
        let (sixty, thirty) = (budget(60.0), budget(30.0));
        assert_eq!(place(&sixty, 100.0), Shown::Nothing);
        assert_eq!(place(&sixty, 110.0), Shown::Nothing); // one word inside
        assert_eq!(place(&thirty, 120.0), Shown::Nothing); // the policy changed: anchored anew
        assert_eq!(place(&thirty, 130.0), Shown::Nothing);
        assert_eq!(place(&thirty, 131.0), Shown::Refills);
        assert_eq!(anchors.len(), 1);
    }

    #[test]
    fn a_window_of_no_stated_length_shows_late_resets_and_never_a_refill() {
        // X-RateLimit-Reset as int(end - now): the window ends at 104.5, a minute long.
        let (mut anchors, unstated) = (Vec::new(), Budget { window: None, ..budget(60.0) });
        let mut place = |end: f64, sent: f64| Anchor::place(&mut anchors, &unstated, end, (sent, 0.01));
        assert_eq!(place(100.01 + 4.0, 100.0), Shown::Nothing);
        assert_eq!(place(102.01 + 2.0, 102.0), Shown::Nothing);
        assert_eq!(place(104.11, 104.1), Shown::LateResets); // sent after 104.01, counted in the window
        assert_eq!(place(104.61 + 59.0, 104.6), Shown::Nothing); // the next window
        assert_eq!(place(130.01 + 34.0, 130.0), Shown::Nothing);
    }

    #[test]
    fn the_earliest_end_said_is_the_one_a_call_may_be_sent_after() {
        // A window that began with the call: its first word says all of it (t=5), the next ones a second
        // less (4.99 rounded down). The key's window ends at the earliest; a call sent then is in it still.
        let (mut anchors, budget) = (Vec::new(), budget(5.0));
        assert_eq!(Anchor::place(&mut anchors, &budget, 100.0 + 5.0, (99.99, 0.01)), Shown::Nothing);
        assert_eq!(Anchor::place(&mut anchors, &budget, 100.01 + 4.0, (100.0, 0.01)), Shown::Nothing);
        assert_eq!(Anchor::place(&mut anchors, &budget, 104.02 + 0.0, (104.015, 0.005)), Shown::LateResets);
    }

    #[test]
    fn a_call_sent_after_the_end_said_and_counted_in_that_window_shows_the_resets_come_late() {
        // A server that rounds its t down: at 100.3 its window (ending at 104) has "3" left to it.
        let (mut anchors, budget) = (Vec::new(), budget(60.0));
        assert_eq!(Anchor::place(&mut anchors, &budget, 100.3 + 3.0, (100.25, 0.05)), Shown::Nothing);
        // Sent before that end: nothing to tell.
        assert_eq!(Anchor::place(&mut anchors, &budget, 102.9 + 1.0, (102.85, 0.05)), Shown::Nothing);
        // Sent after it (103.3), and still in the window: its replies said its end a second early.
        assert_eq!(Anchor::place(&mut anchors, &budget, 103.6 + 0.0, (103.55, 0.05)), Shown::LateResets);
        // A call after the server's own end is in its next window, which tells nothing of the kind.
        assert_eq!(Anchor::place(&mut anchors, &budget, 104.1 + 59.0, (104.05, 0.05)), Shown::Nothing);
    }
}
