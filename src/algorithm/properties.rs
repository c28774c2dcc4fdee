//! Property tests of the algorithms' invariants, on the pure-Rust core. (A module of the library's unit
//! tests rather than a file of `tests/`: `cargo test` then compiles the crate once, not twice.)

use crate::algorithm::{Admit, Kind, Limit, State, NO_LOG};
use crate::rate::Rate;
use proptest::prelude::*;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn limit(count: u64, period_ns: u64, burst: u64, kind: Kind) -> Limit {
    Limit::new(Rate::new(count, period_ns).unwrap(), Some(burst), kind).unwrap()
}

/// Decides at `now` and writes an admission; the retry time of a refusal.
fn decide(lim: &Limit, state: &mut State, now: u64, cost: u64) -> Result<(), u64> {
    match lim.evaluate(state, &NO_LOG, now, cost)? {
        Admit::State(admitted) => *state = admitted,
        Admit::Log { .. } => unreachable!("no sliding log here"),
    }
    Ok(())
}

/// Runs requests `(gap_ns, cost)` from time `start`; returns the (time, cost) of each admission.
fn admissions(lim: &Limit, start: u64, requests: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut state = State::default();
    let mut now = start;
    let mut admitted = Vec::new();
    for &(gap, cost) in requests {
        now += gap;
        if decide(lim, &mut state, now, cost).is_ok() {
            admitted.push((now, cost));
        }
    }
    admitted
}

/// For each admission at `t0`: the cost admitted in the closed window `[t0, t0 + span]` and its length.
fn max_in_window(admitted: &[(u64, u64)], span: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    admitted.iter().enumerate().map(move |(i, &(t0, _))| {
        let total: u64 = admitted[i..].iter().take_while(|(t, _)| *t <= t0 + span).map(|(_, c)| c).sum();
        let last = admitted[i..].iter().take_while(|(t, _)| *t <= t0 + span).last().map_or(t0, |(t, _)| *t);
        (total, last - t0)
    })
}

fn rates() -> impl Strategy<Value = (u64, u64, u64)> {
    // count, period (1 µs .. 10 s, often not a multiple of count), burst
    (1u64..20, 1_000u64..10_000_000_000, 1u64..20)
}

fn traffic() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..3_000_000_000, 1u64..4), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn gcra_never_admits_more_than_burst_plus_rate_in_any_window(
        (count, period, burst) in rates(), start in 0u64..1_000_000_000_000, requests in traffic()
    ) {
        let lim = limit(count, period, burst, Kind::Gcra);
        let admitted = admissions(&lim, start, &requests);
        for (total, length) in max_in_window(&admitted, u64::MAX / 4) {
            // In [t_i, t_j]: at most burst + floor((t_j - t_i) × count / period).
            let bound = u128::from(burst) + u128::from(length) * u128::from(count) / u128::from(period);
            prop_assert!(u128::from(total) <= bound, "{total} admitted in {length} ns, bound {bound}");
        }
    }

    #[test]
    fn gcra_never_refuses_a_sender_within_its_rate(
        (count, period, burst) in rates(), start in 0u64..1_000_000_000_000,
        extra in prop::collection::vec(0u64..1_000_000, 1..100)
    ) {
        let lim = limit(count, period, burst, Kind::Gcra);
        let interval = period.div_ceil(count);
        let requests: Vec<(u64, u64)> = extra.iter().enumerate().map(|(i, e)| (if i == 0 { 0 } else { interval + e }, 1)).collect();
        prop_assert_eq!(admissions(&lim, start, &requests).len(), requests.len());
    }

    #[test]
    fn token_bucket_admits_at_most_burst_per_window_and_twice_that_in_any_window(
        (count, period, burst) in rates(), start in 0u64..1_000_000_000_000, requests in traffic()
    ) {
        let lim = limit(count, period, burst, Kind::TokenBucket);
        let window = u64::try_from((u128::from(burst) * u128::from(period)).div_ceil(u128::from(count))).unwrap();
        let admitted = admissions(&lim, start, &requests);
        // A window starts at the first admission after the last one ended (idle, the key starts afresh).
        let mut windows: Vec<(u64, u64)> = Vec::new();
        for &(t, c) in &admitted {
            match windows.last_mut() {
                Some((start, n)) if t < *start + window => *n += c,
                _ => windows.push((t, c)),
            }
        }
        prop_assert!(windows.iter().all(|&(_, n)| n <= burst), "{windows:?}, burst {burst}");
        for (total, _) in max_in_window(&admitted, window - 1) {
            prop_assert!(total <= 2 * burst);
        }
    }

    #[test]
    fn token_bucket_never_refuses_a_sender_within_its_rate(
        (count, period, burst) in rates(), start in 0u64..1_000_000_000_000,
        extra in prop::collection::vec(0u64..1_000_000, 1..100)
    ) {
        let lim = limit(count, period, burst, Kind::TokenBucket);
        let interval = period.div_ceil(count);
        let requests: Vec<(u64, u64)> = extra.iter().enumerate().map(|(i, e)| (if i == 0 { 0 } else { interval + e }, 1)).collect();
        prop_assert_eq!(admissions(&lim, start, &requests).len(), requests.len());
    }

    #[test]
    fn retry_after_is_exact(
        (count, period, burst) in rates(),
        kind in prop::sample::select(vec![Kind::Gcra, Kind::TokenBucket, Kind::FixedWindow, Kind::SlidingWindow, Kind::LeakyBucket]),
        requests in traffic()
    ) {
        // A refused request is still refused a nanosecond before its retry time and admitted at it.
        let lim = limit(count, period, burst, kind);
        let mut state = State::default();
        let mut now = 0;
        for (gap, cost) in requests {
            now += gap;
            match decide(&lim, &mut state, now, cost) {
                Ok(()) => {}
                Err(u64::MAX) => prop_assert!(cost > burst),
                Err(retry) => {
                    let before = state;
                    prop_assert!(retry > 0);
                    prop_assert_eq!(decide(&lim, &mut state, now + retry - 1, cost).is_err(), true);
                    prop_assert_eq!(state, before, "a refusal changed the state");
                    prop_assert!(decide(&lim, &mut state, now + retry, cost).is_ok(), "not admitted at its retry time");
                    now += retry;
                }
            }
        }
    }

    #[test]
    fn a_caller_obeying_a_fixed_window_servers_words_is_never_refused_and_uses_every_window(
        capacity in 1u64..30, window_s in 3u64..30, phase_frac in 0u64..1000, start_frac in 0u64..1000,
        delays in prop::collection::vec((0u64..1000, 0u64..1000), 200)
    ) {
        // A server of `capacity` calls per window (windows from `phase`), whose replies say what is left and
        // the seconds to its window's end rounded up to whole seconds (the IETF `t`), and refuse past the
        // limit; one caller, one call at a time, each reaching it and coming back within `latency`, on a
        // fixed window of the server's size that takes every reply's word.
        let window = window_s * S;
        let latency = (200 * MS).min(window / (8 * capacity));
        let phase = window * phase_frac / 1000;
        let lim = limit(capacity, window, capacity, Kind::FixedWindow);
        let mut counted: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        let (mut state, start) = (State::default(), phase + window * start_frac / 1000);
        let mut now = start;
        for &(to, back) in delays.iter().take(usize::try_from(6 * capacity).unwrap()) {
            if let Err(wait) = decide(&lim, &mut state, now, 1) {
                now += wait;
                prop_assert!(decide(&lim, &mut state, now, 1).is_ok(), "not admitted at its retry time");
            }
            let (sent, arrived) = (now, now + latency * to / 1000);
            let index = (arrived - phase) / window;
            let count = counted.entry(index).or_default();
            prop_assert!(*count < capacity, "refused: window {} full at {} ns", index, arrived);
            *count += 1;
            let reset_after = (phase + (index + 1) * window - arrived).div_ceil(S) * S;
            now = arrived + latency * back / 1000;
            if let Some(capped) = lim.cap(&state, now, capacity - *count, now + reset_after, sent) {
                state = capped;
            }
        }
        // Every window of the server that the calls covered whole was used whole.
        for (&index, &count) in &counted {
            let (begins, ends) = (phase + index * window, phase + (index + 1) * window);
            if start <= begins && ends <= now {
                prop_assert_eq!(count, capacity, "window {} of {:?}", index, counted);
            }
        }
    }
}
