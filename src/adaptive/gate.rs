//! One adaptive limit's state and its controllers (see the module above for what they do and why).

use super::{Controller, Outcome, Sample, Settings};

/// The share of the permits the window's peak in flight must reach for the limit to be "in use": below
/// it the load, not the service, bounds the requests in flight, and the limit must not grow (else it
/// drifts up without bound under light load).
const IN_USE: f64 = 0.75;
/// Windows at the floor in a row after which the baseline is re-learned at once (it may be too low:
/// the service got slower for good, and every window looks overloaded).
const FLOOR_WINDOWS: u32 = 5;
/// The weight of a window's mean latency in the recent latency (reported only).
const RECENT_WEIGHT: f64 = 0.3;

/// One adaptive limit's whole state: fixed-size, no pointers, so that it may live in a shared region.
/// Every field is written by the methods below only.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gate {
    /// The limit, continuous (permits are its floor within the bounds); 0 in a gate never used.
    limit: f64,
    /// The unloaded latency (ns), learned by probes; 0: unknown.
    baseline_ns: f64,
    /// A moving mean of the windows' mean latency (ns), for observability.
    recent_ns: f64,
    window_sum_ns: f64,
    probe_sum_ns: f64,
    /// When the current window may end (once it has a sample).
    window_end: u64,
    /// When the next probe starts.
    next_probe_at: u64,
    /// While probing: requests admitted at or after this instant are measured; `u64::MAX` while the
    /// requests admitted before the probe drain.
    probe_from: u64,
    rng: u64,
    /// The last admission or release, for evicting idle gates.
    pub last_used: u64,
    /// What limit the gate is of (a hash of its group's name and the limit's index), for `stats()`.
    pub owner: u64,
    samples: u64,
    drops: u64,
    timeouts: u64,
    probes: u64,
    in_flight: u32,
    window_ok: u32,
    window_bad: u32,
    window_peak: u32,
    probe_ok: u32,
    probe_seen: u32,
    floor_windows: u32,
    probing: u32,
}

/// What a gate reports: `stats()` and a refusal's numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateView {
    /// Permits now.
    pub limit: u32,
    pub in_flight: u32,
    /// The learned unloaded latency (ns); 0 before the first probe ends.
    pub baseline_ns: f64,
    /// A moving mean of recent windows' mean latency (ns); 0 before the first window ends.
    pub recent_ns: f64,
    pub probing: bool,
    pub samples: u64,
    pub drops: u64,
    pub timeouts: u64,
    pub probes: u64,
}

impl Gate {
    /// A gate seen for the first time at `now`: `initial` permits, and a probe of the baseline first
    /// (nothing is in flight yet, so it measures from now).
    #[must_use]
    pub fn fresh(settings: &Settings, seed: u64, now: u64) -> Self {
        let mut gate = Self {
            limit: f64::from(settings.initial),
            rng: seed | 1,
            probing: 1,
            probe_from: now,
            last_used: now,
            ..Self::default()
        };
        gate.window_end = now.saturating_add(gate.jittered(settings.window_ns, settings.jitter));
        gate
    }

    /// Whether the gate was ever set up (a zeroed slot of a shared table is not).
    #[must_use]
    pub fn is_fresh_slot(&self) -> bool {
        self.limit == 0.0
    }

    /// Permits now: the floor while probing, else the limit within the bounds.
    #[must_use]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped within u32 bounds
    pub fn permits(&self, settings: &Settings) -> u32 {
        if self.probing != 0 {
            return settings.min_limit;
        }
        let limit = self.limit.clamp(f64::from(settings.min_limit), f64::from(settings.max_limit));
        limit as u32
    }

    #[must_use]
    pub const fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Takes `cost` permits at `now`; false (nothing taken) when they are not free.
    pub fn admit(&mut self, settings: &Settings, cost: u64, now: u64) -> bool {
        let wanted = u64::from(self.in_flight) + cost;
        if wanted > u64::from(self.permits(settings)) {
            return false;
        }
        #[allow(clippy::cast_possible_truncation)] // at most the permits, a u32
        let in_flight = wanted as u32;
        self.in_flight = in_flight;
        self.window_peak = self.window_peak.max(in_flight);
        self.last_used = self.last_used.max(now);
        true
    }

    /// Gives back `cost` permits taken but not used (the request was refused by another limit): no sample.
    pub fn cancel(&mut self, cost: u64) {
        self.in_flight = self.in_flight.saturating_sub(u32::try_from(cost).unwrap_or(u32::MAX));
    }

    /// Gives back `cost` permits of a request that ended at `now`, learning from its `sample` if any.
    pub fn release(&mut self, settings: &Settings, cost: u64, sample: Option<Sample>, now: u64) {
        self.cancel(cost);
        self.last_used = self.last_used.max(now);
        let Some(sample) = sample else { return };
        self.samples += 1;
        match sample.outcome {
            Outcome::Ok => {}
            Outcome::Dropped => self.drops += 1,
            Outcome::Timeout => self.timeouts += 1,
        }
        if self.probing != 0 {
            self.probe_sample(settings, sample, now);
            return;
        }
        #[allow(clippy::cast_precision_loss)] // latencies far below 2^53 ns
        match sample.outcome {
            Outcome::Ok => {
                self.window_sum_ns += sample.latency_ns as f64;
                self.window_ok += 1;
            }
            // Their latency says nothing of the service's (a fast error, a give-up): counted, not measured.
            Outcome::Dropped | Outcome::Timeout => self.window_bad += 1,
        }
        if now >= self.window_end {
            self.end_window(settings, now);
        }
    }

    fn probe_sample(&mut self, settings: &Settings, sample: Sample, now: u64) {
        if self.probe_from == u64::MAX {
            // Draining: once no more than the floor is in flight, requests admitted from now are the probe's.
            if self.in_flight <= settings.min_limit {
                self.probe_from = now;
            }
            return;
        }
        if now.saturating_sub(sample.latency_ns) < self.probe_from {
            return; // admitted before the drain ended: it queued behind the load
        }
        self.probe_seen += 1;
        if sample.outcome == Outcome::Ok {
            #[allow(clippy::cast_precision_loss)]
            let latency = sample.latency_ns as f64;
            self.probe_sum_ns += latency;
            self.probe_ok += 1;
        }
        if self.probe_seen >= settings.probe_samples {
            self.end_probe(settings, now);
        }
    }

    fn start_probe(&mut self) {
        self.probing = 1;
        self.probe_from = u64::MAX;
        self.probe_sum_ns = 0.0;
        self.probe_ok = 0;
        self.probe_seen = 0;
    }

    fn end_probe(&mut self, settings: &Settings, now: u64) {
        // A probe of drops only (the service is failing) keeps the baseline it had.
        if self.probe_ok > 0 {
            self.baseline_ns = self.probe_sum_ns / f64::from(self.probe_ok);
        }
        self.probing = 0;
        self.probes += 1;
        self.floor_windows = 0;
        self.next_probe_at = now.saturating_add(self.jittered(settings.probe_interval_ns, settings.jitter));
        self.reset_window(settings, now);
    }

    fn reset_window(&mut self, settings: &Settings, now: u64) {
        self.window_sum_ns = 0.0;
        self.window_ok = 0;
        self.window_bad = 0;
        self.window_peak = self.in_flight;
        self.window_end = now.saturating_add(self.jittered(settings.window_ns, settings.jitter));
    }

    /// The controller's step at the end of a window.
    fn end_window(&mut self, settings: &Settings, now: u64) {
        let permits = f64::from(self.permits(settings));
        let in_use = f64::from(self.window_peak) >= IN_USE * permits;
        let mean = (self.window_ok > 0).then(|| self.window_sum_ns / f64::from(self.window_ok));
        if let Some(mean) = mean {
            self.recent_ns =
                if self.recent_ns == 0.0 { mean } else { self.recent_ns + RECENT_WEIGHT * (mean - self.recent_ns) };
            // Between probes the baseline only goes down: a window faster than it is closer to unloaded.
            // (No probe at once when it drops: a server shedding load on its own event loop is slowed
            // most by the refusals while its limit is pinned low, and would re-learn a baseline too high.)
            if self.baseline_ns == 0.0 || mean < self.baseline_ns {
                self.baseline_ns = mean;
            }
        }
        let bad = self.window_bad > 0;
        // A window of nothing but drops and timeouts halves the limit, as TCP collapses its window on a
        // retransmission timeout: timeouts end in bursts, one window each, and a factor of 0.9 a burst
        // would take the limit down by 10 % a timeout's length only.
        let backoff = if mean.is_none() { 0.5f64.min(settings.backoff) } else { settings.backoff };
        let tolerated = self.baseline_ns * (1.0 + settings.tolerance);
        let limit = self.limit;
        let next = match settings.controller {
            Controller::Aimd => {
                #[allow(clippy::cast_precision_loss)]
                let threshold = if settings.threshold_ns > 0 { settings.threshold_ns as f64 } else { tolerated };
                if bad || mean.is_some_and(|m| m > threshold) {
                    limit * backoff
                } else if in_use {
                    limit + 1.0
                } else {
                    limit
                }
            }
            Controller::Gradient => match mean {
                _ if bad => limit * backoff,
                Some(mean) if mean > tolerated => {
                    let gradient = (tolerated / mean).clamp(0.5, 1.0);
                    limit + settings.smoothing * (limit * gradient - limit)
                }
                _ if in_use => limit + limit.sqrt().max(1.0),
                _ => limit,
            },
        };
        self.limit = next.clamp(f64::from(settings.min_limit), f64::from(settings.max_limit));
        self.floor_windows = if self.permits(settings) <= settings.min_limit { self.floor_windows + 1 } else { 0 };
        self.reset_window(settings, now);
        if now >= self.next_probe_at || self.floor_windows >= FLOOR_WINDOWS {
            self.start_probe();
        }
    }

    /// The gate as `settings` (maybe changed by a reconfiguration) bound it now.
    pub fn rebound(&mut self, settings: &Settings) {
        self.limit = self.limit.clamp(f64::from(settings.min_limit), f64::from(settings.max_limit));
    }

    #[must_use]
    pub fn view(&self, settings: &Settings) -> GateView {
        GateView {
            limit: self.permits(settings),
            in_flight: self.in_flight,
            baseline_ns: self.baseline_ns,
            recent_ns: self.recent_ns,
            probing: self.probing != 0,
            samples: self.samples,
            drops: self.drops,
            timeouts: self.timeouts,
            probes: self.probes,
        }
    }

    /// `span` varied by up to ± `jitter` of it, from the gate's RNG (fastrand's, its state kept in the gate:
    /// fixed-size, so that it can live in a shared region).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    fn jittered(&mut self, span: u64, jitter: f64) -> u64 {
        let mut rng = fastrand::Rng::with_seed(self.rng);
        let unit = rng.f64(); // [0, 1)
        self.rng = rng.get_seed();
        let factor = 1.0 + jitter * (2.0 * unit - 1.0);
        (span as f64 * factor).max(1.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn settings(controller: Controller) -> Settings {
        Settings::new(controller).checked(false).unwrap()
    }

    /// Drives a gate with `clients` closed-loop clients against a service of `knee` workers taking
    /// `base` each (queueing past the knee), for `secs`; returns the mean permits over the last half.
    fn drive(s: &Settings, clients: u32, knee: u32, base: u64, secs: u64, timeouts: bool) -> (Gate, f64) {
        let mut gate = Gate::fresh(s, 7, 0);
        let (mut now, mut sum, mut count) = (0u64, 0.0, 0.0);
        let step = base;
        while now < secs * 1000 * MS {
            // One "round": every admitted request takes base × max(1, in_flight / knee).
            let mut admitted = 0;
            while admitted < clients && gate.admit(s, 1, now) {
                admitted += 1;
            }
            let latency = base * u64::from(admitted.max(knee)) / u64::from(knee);
            now += latency.max(step);
            let outcome = if timeouts { Outcome::Timeout } else { Outcome::Ok };
            for _ in 0..admitted {
                gate.release(s, 1, Some(Sample { latency_ns: latency, outcome }), now);
            }
            if now > secs * 500 * MS {
                sum += f64::from(gate.permits(s));
                count += 1.0;
            }
        }
        (gate, sum / count)
    }

    #[test]
    fn both_controllers_settle_near_the_knee() {
        for controller in [Controller::Aimd, Controller::Gradient] {
            let (gate, mean) = drive(&settings(controller), 500, 50, 10 * MS, 60, false);
            assert!((40.0..=60.0).contains(&mean), "{controller:?} settled at {mean}");
            let baseline = gate.view(&settings(controller)).baseline_ns;
            assert!((baseline - 1e7).abs() < 1e6, "{controller:?} learned a baseline of {baseline}");
        }
    }

    #[test]
    fn light_load_does_not_grow_the_limit() {
        for controller in [Controller::Aimd, Controller::Gradient] {
            let (gate, _) = drive(&settings(controller), 4, 50, 10 * MS, 60, false);
            assert!(
                gate.permits(&settings(controller)) <= 10,
                "{controller:?}: {}",
                gate.permits(&settings(controller))
            );
        }
    }

    #[test]
    fn timeouts_take_the_limit_to_its_floor() {
        for controller in [Controller::Aimd, Controller::Gradient] {
            let (gate, _) = drive(&settings(controller), 500, 50, 10 * MS, 20, true);
            assert_eq!(gate.permits(&settings(controller)), 1, "{controller:?}");
        }
    }

    #[test]
    fn admission_respects_permits_and_cancel_gives_back() {
        let s = settings(Controller::Aimd);
        let mut gate = Gate::fresh(&s, 1, 0);
        assert!(gate.admit(&s, 1, 0), "a probe admits the floor");
        assert!(!gate.admit(&s, 1, 0), "and no more");
        gate.cancel(1);
        assert_eq!(gate.in_flight(), 0);
        assert!(!gate.admit(&s, 2, 0), "a cost above the permits is refused");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// One step of a run: admit `cost`, release one held request with a latency and outcome, or let time pass.
        #[derive(Debug, Clone)]
        enum Step {
            Admit(u64),
            Release { latency_ms: u64, outcome: u8 },
            Wait(u64),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                (1u64..4).prop_map(Step::Admit),
                (0u64..500, 0u8..3).prop_map(|(latency_ms, outcome)| Step::Release { latency_ms, outcome }),
                (0u64..300).prop_map(Step::Wait),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]

            /// Whatever happens: the permits stay within the bounds, requests in flight are exactly those
            /// admitted and not released, and an admission never passes the permits.
            #[test]
            fn permits_stay_bounded_and_in_flight_is_exact(
                aimd in any::<bool>(),
                min in 1u32..5,
                span in 0u32..50,
                steps in proptest::collection::vec(step(), 1..400),
            ) {
                let mut s = settings(if aimd { Controller::Aimd } else { Controller::Gradient });
                s.min_limit = min;
                s.max_limit = min + span;
                let s = s.checked(false).unwrap();
                let mut gate = Gate::fresh(&s, 3, 0);
                let (mut now, mut held): (u64, Vec<u64>) = (0, Vec::new());
                for step in steps {
                    match step {
                        Step::Admit(cost) => {
                            let before = gate.in_flight();
                            if gate.admit(&s, cost, now) {
                                held.push(cost);
                                prop_assert!(gate.in_flight() <= gate.permits(&s).max(before));
                            }
                        }
                        Step::Release { latency_ms, outcome } => {
                            if let Some(cost) = held.pop() {
                                let outcome = [Outcome::Ok, Outcome::Dropped, Outcome::Timeout][usize::from(outcome)];
                                let sample = Sample { latency_ns: latency_ms * MS, outcome };
                                gate.release(&s, cost, Some(sample), now);
                            }
                        }
                        Step::Wait(ms) => now += ms * MS,
                    }
                    prop_assert!((s.min_limit..=s.max_limit).contains(&gate.permits(&s)));
                    prop_assert_eq!(u64::from(gate.in_flight()), held.iter().sum::<u64>());
                }
            }

            /// Drops and timeouts never raise the limit, whatever their latency.
            #[test]
            fn bad_samples_never_raise_the_limit(
                aimd in any::<bool>(),
                latencies in proptest::collection::vec(0u64..2000, 1..300),
            ) {
                let s = settings(if aimd { Controller::Aimd } else { Controller::Gradient });
                let mut gate = Gate::fresh(&s, 5, 0);
                // Past the first probe, at a limit of 10 in full use.
                gate.probing = 0;
                gate.baseline_ns = 1e7;
                gate.next_probe_at = u64::MAX;
                let mut now = 0;
                for (i, latency) in latencies.into_iter().enumerate() {
                    let before = gate.limit;
                    while gate.admit(&s, 1, now) {}
                    now += 50 * MS;
                    let outcome = if i % 2 == 0 { Outcome::Dropped } else { Outcome::Timeout };
                    gate.release(&s, 1, Some(Sample { latency_ns: latency * MS, outcome }), now);
                    prop_assert!(gate.limit <= before, "{} grew to {}", before, gate.limit);
                    gate.cancel(u64::from(gate.in_flight()));
                }
            }
        }
    }

    #[test]
    fn jitter_stays_within_its_share_and_is_seeded() {
        let mut a = Gate { rng: 42, ..Gate::default() };
        let mut b = Gate { rng: 42, ..Gate::default() };
        for _ in 0..1000 {
            let x = a.jittered(1000, 0.1);
            assert_eq!(x, b.jittered(1000, 0.1));
            assert!((900..=1100).contains(&x), "{x}");
        }
    }
}
