//! Telling a budget whose windows a reset ends from one that refills all the time, by where the server's
//! words place its stated window (IETF `RateLimit-Policy` `w`).

use crate::server_words::Budget;

/// The end of the window a key's words about an IETF budget are about, to tell windows that a reset
/// ends from a budget that refills all the time: a fixed window's words all say its end (give or take a
/// second of rounding, and the reply's way back), the next window's a window later; a refilling
/// budget's say when its next unit comes, or when it is full, anywhere in between.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Anchor {
    budget: Box<str>,
    window: f64,
    /// The window's end (epoch seconds), as the first word about it said, and that call's age: how
    /// late the figure may be.
    end: f64,
    age: f64,
    /// Words whose reset fell inside that window, clear of both its ends.
    inside: u8,
}

/// Words inside a stated window that show a budget refills ([`Anchor`]): two, so that one odd reply
/// does not decide.
const INSIDE_WORDS: u8 = 2;

impl Anchor {
    /// Places a word saying the window of `budget` ends at `end` (epoch seconds), from a call of
    /// `age`: whether the words about that window show it refills.
    pub(super) fn refills(anchors: &mut Vec<Self>, budget: &Budget, end: f64, age: f64) -> bool {
        let Some(window) = budget.window else { return false };
        let fresh = Self { budget: budget.name.as_ref().into(), window, end, age, inside: 0 };
        let Some(anchor) = anchors.iter_mut().find(|a| *a.budget == *budget.name) else {
            anchors.push(fresh);
            return false;
        };
        if anchor.window.to_bits() != window.to_bits() {
            *anchor = fresh;
            return false;
        }
        // Whole seconds round `t` by up to one either way; each figure is late by up to its call's age.
        let later_window = anchor.end + window - 1.5 - anchor.age;
        if end >= later_window {
            *anchor = fresh;
            return false;
        }
        if end > anchor.end + 1.5 + age {
            anchor.inside = anchor.inside.saturating_add(1);
        }
        anchor.inside >= INSIDE_WORDS
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
        /// order their replies come back in.
        #[test]
        fn fixed_windows_never_show_a_refill(
            window in 1u32..4_000,
            phase in 0.0f64..1.0,
            from_first_call: bool,
            rounding in prop_oneof![
                Just(Rounding::Down), Just(Rounding::Up), Just(Rounding::Nearest), Just(Rounding::Exact)
            ],
            calls in prop::collection::vec((0.0f64..2.0, 0.0f64..1.0, 0.0f64..1.0), 1..200),
        ) {
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
                replies.push((sent + age, t, age));
            }
            replies.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (mut anchors, budget) = (Vec::new(), budget(window));
            for (now, t, age) in replies {
                prop_assert!(!Anchor::refills(&mut anchors, &budget, now + t, age), "at {now}, t={t}");
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
            if Anchor::refills(&mut anchors, &budget, now + 0.01 + t, 0.01) {
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
        let unstated = Budget { window: None, ..budget(60.0) };
        assert!(!Anchor::refills(&mut anchors, &unstated, 10.0, 0.0));
        assert!(anchors.is_empty());
        let (sixty, thirty) = (budget(60.0), budget(30.0));
        assert!(!Anchor::refills(&mut anchors, &sixty, 100.0, 0.0));
        assert!(!Anchor::refills(&mut anchors, &sixty, 110.0, 0.0)); // one word inside
        assert!(!Anchor::refills(&mut anchors, &thirty, 120.0, 0.0)); // the policy changed: anchored anew
        assert!(!Anchor::refills(&mut anchors, &thirty, 130.0, 0.0));
        assert!(Anchor::refills(&mut anchors, &thirty, 131.0, 0.0));
    }
}
