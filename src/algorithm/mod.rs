//! The limiting algorithms. Each is a pure function of (state, time, cost): no clock, no locking.
//!
//! Every algorithm but the sliding log keeps its per-key state in one 16-byte [`State`], so that the
//! map's slots stay small. `evaluate` answers for an instant `at`: the state after admitting `cost`
//! there, or how long after `at` the same request would be admitted. The limiter decides at `now`, or,
//! for a caller willing to wait, at `now + retry` (which reserves that slot); a refusal never changes
//! the state. States may hold instants after `at` (a reservation made earlier): every algorithm counts
//! them as already used, so a reservation is never given away twice.

pub mod concurrency;
pub mod gcra;
pub mod leaky_bucket;
#[cfg(test)]
mod properties;
pub mod sliding_log;
pub mod sliding_window;
pub mod windows;

use crate::error::{Error, Result};
use crate::rate::Rate;

pub use sliding_log::Log;

/// The log of a key whose limit keeps none.
pub static NO_LOG: Log = Log::new();

/// Per-key state. The meaning of the fields depends on the algorithm, with one rule shared by all so
/// that the store can drop stale entries without knowing their algorithm: once `now >= t`, the state no
/// longer constrains anything. Dropping it then never admits more than keeping it would: for GCRA,
/// sliding windows, logs and leaky buckets the next decision is the same; windows aligned per key
/// (token bucket, fixed window) restart at the key's next request, which ends them later, not sooner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)] // also laid out in the shared region
pub struct State {
    pub t: u64,
    pub a: u32,
    pub b: u32,
}

impl State {
    /// True when forgetting this state can only make later decisions as strict or stricter.
    #[inline]
    #[must_use]
    pub fn is_idle(&self, now: u64) -> bool {
        now >= self.t
    }
}

/// What a decision says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    /// For an admission: how long the caller must wait before acting (0 unless it reserved a later slot).
    pub wait_ns: u64,
    /// For a refusal: how long until the same request would be admitted (`u64::MAX`: never).
    pub retry_after_ns: u64,
}

impl Outcome {
    #[must_use]
    pub const fn admitted(wait_ns: u64) -> Self {
        Self { allowed: true, wait_ns, retry_after_ns: 0 }
    }

    #[must_use]
    pub const fn refused(retry_after_ns: u64) -> Self {
        Self { allowed: false, wait_ns: 0, retry_after_ns }
    }
}

/// What a key has left, for headers and `Decision`; computed only when asked (not by `allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The limit these numbers are out of (the burst).
    pub limit: u64,
    /// Requests of cost 1 that would be admitted right now.
    pub remaining: u64,
    /// Time until the key is back to its full limit.
    pub reset_after_ns: u64,
    /// The window `limit` is counted over (`None` for concurrency permits); see [`Limit::window_ns`].
    pub window_ns: Option<u64>,
    /// Time until the key may make one more request than `remaining` (GCRA: exact; the other
    /// algorithms: `reset_after_ns`, when their next unit comes back at the latest). 0 when full.
    pub next_ns: u64,
}

/// The algorithms a limit can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gcra,
    TokenBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    LeakyBucket,
    Concurrency,
}

impl Kind {
    const ALL: [Self; 7] = [
        Self::Gcra,
        Self::TokenBucket,
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::SlidingLog,
        Self::LeakyBucket,
        Self::Concurrency,
    ];

    /// # Errors
    /// An unknown algorithm name.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let known: Vec<String> = Self::ALL[..6].iter().map(|k| format!("'{}'", k.name())).collect();
            Error::value("algorithm", format!("unknown algorithm {name:?}; expected one of {}", known.join(", ")))
        })
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "token_bucket",
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindow => "sliding_window",
            Self::SlidingLog => "sliding_log",
            Self::LeakyBucket => "leaky_bucket",
            Self::Concurrency => "concurrency",
        }
    }
}

/// One limit: the algorithm that enforces it, with its derived constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// `None` for a concurrency limit.
    pub rate: Option<Rate>,
    /// Requests admitted at once: the burst, window limit, bucket capacity or permits.
    pub burst: u32,
    /// Whether the burst was given, rather than following the rate's count (a new rate keeps it then).
    pub burst_set: bool,
    pub algorithm: Algorithm,
    /// See [`Limit::window_ns`]; worked out once, as a report of every `check` gives it.
    window_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Gcra(gcra::Gcra),
    /// Token bucket with burst windows and fixed windows share one implementation.
    Windows(Kind, windows::Windows),
    SlidingWindow(sliding_window::SlidingWindow),
    SlidingLog(sliding_log::SlidingLog),
    LeakyBucket(leaky_bucket::LeakyBucket),
    Concurrency(concurrency::Concurrency),
    /// Permits that move with latency (see `crate::adaptive`). Interned (see [`Limit::adaptive`]), so
    /// that a `Limit` stays as small as the other algorithms make it. A group keeps its adaptive limits
    /// apart from the limits its states follow (`Group::adaptive`): the arms for it below are never
    /// taken by a decision, and do nothing.
    Adaptive(&'static crate::adaptive::Settings),
}

/// The admission of one limit, to be written if every limit that must agree does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The state after admitting.
    State(State),
    /// A sliding log admits by appending `cost` timestamps at `at`; its slot records when it goes idle.
    Log { at: u64, cost: u64, idle_at: u64 },
}

impl Limit {
    /// A limit of `rate` allowing `burst` requests at once (default: the rate's count).
    ///
    /// # Errors
    /// A burst of zero, above `u32::MAX`, or so large that `burst × period / count` overflows.
    pub fn new(rate: Rate, burst: Option<u64>, kind: Kind) -> Result<Self> {
        let burst_set = burst.is_some();
        let burst = checked_burst(burst.unwrap_or(rate.count))?;
        let span = u128::from(burst) * u128::from(rate.period_ns) / u128::from(rate.count);
        if span > (1u128 << 62) {
            return Err(Error::value(
                "burst",
                format!("{burst} requests at {rate} span more than a century; use a smaller burst"),
            ));
        }
        let algorithm = match kind {
            Kind::Gcra => Algorithm::Gcra(gcra::Gcra::new(rate, burst)),
            Kind::TokenBucket => Algorithm::Windows(kind, windows::Windows::token_bucket(rate, burst)),
            Kind::FixedWindow => Algorithm::Windows(kind, windows::Windows::fixed(rate, burst)),
            Kind::SlidingWindow => Algorithm::SlidingWindow(sliding_window::SlidingWindow::new(rate, burst)),
            Kind::SlidingLog => Algorithm::SlidingLog(sliding_log::SlidingLog::new(rate, burst)),
            Kind::LeakyBucket => Algorithm::LeakyBucket(leaky_bucket::LeakyBucket::new(rate, burst)),
            Kind::Concurrency => {
                return Err(Error::value("algorithm", "a concurrency limit takes concurrency=N, not a rate"))
            }
        };
        let window_ns = Some(match kind {
            Kind::FixedWindow | Kind::SlidingWindow | Kind::SlidingLog | Kind::TokenBucket => rate.period_ns,
            _ => u64::try_from(span).unwrap_or(u64::MAX),
        });
        Ok(Self { rate: Some(rate), burst, burst_set, algorithm, window_ns })
    }

    /// At most `permits` requests in flight at once.
    ///
    /// # Errors
    /// Zero permits or more than `u32::MAX`.
    pub fn concurrency(permits: u64) -> Result<Self> {
        let burst = checked_burst(permits).map_err(|e| e.moved_to("concurrency"))?;
        Ok(Self {
            rate: None,
            burst,
            burst_set: true,
            algorithm: Algorithm::Concurrency(concurrency::Concurrency::new(burst)),
            window_ns: None,
        })
    }

    /// Permits that move between `settings.min_limit` and `settings.max_limit` with the latency of
    /// the requests they admit. Settings are interned: each distinct one is kept for the process's life.
    #[must_use]
    pub fn adaptive(settings: crate::adaptive::Settings) -> Self {
        Self {
            rate: None,
            burst: settings.max_limit,
            burst_set: true,
            algorithm: Algorithm::Adaptive(intern(settings)),
            window_ns: None,
        }
    }

    /// The settings of an adaptive limit.
    #[must_use]
    pub const fn adaptive_settings(&self) -> Option<&'static crate::adaptive::Settings> {
        match self.algorithm {
            Algorithm::Adaptive(settings) => Some(settings),
            _ => None,
        }
    }

    #[must_use]
    pub const fn is_adaptive(&self) -> bool {
        matches!(self.algorithm, Algorithm::Adaptive(_))
    }

    #[must_use]
    pub const fn kind(&self) -> Kind {
        match self.algorithm {
            Algorithm::Gcra(_) => Kind::Gcra,
            Algorithm::Windows(kind, _) => kind,
            Algorithm::SlidingWindow(_) => Kind::SlidingWindow,
            Algorithm::SlidingLog(_) => Kind::SlidingLog,
            Algorithm::LeakyBucket(_) => Kind::LeakyBucket,
            Algorithm::Concurrency(_) | Algorithm::Adaptive(_) => Kind::Concurrency,
        }
    }

    #[must_use]
    pub const fn is_concurrency(&self) -> bool {
        matches!(self.algorithm, Algorithm::Concurrency(_))
    }

    #[must_use]
    pub const fn uses_log(&self) -> bool {
        matches!(self.algorithm, Algorithm::SlidingLog(_))
    }

    /// The name and constants of this limit's algorithm as `src/backend/decide.lua` runs it.
    #[must_use]
    pub const fn script_params(&self) -> Option<(&'static str, [u64; 5])> {
        match &self.algorithm {
            Algorithm::Gcra(g) => Some(("gcra", g.params())),
            Algorithm::Windows(_, w) => Some(("windows", w.params())),
            Algorithm::SlidingWindow(s) => Some(("sliding_window", s.params())),
            Algorithm::LeakyBucket(l) => Some(("leaky_bucket", l.params())),
            Algorithm::SlidingLog(s) => Some(("sliding_log", s.params())),
            Algorithm::Concurrency(c) => Some(("concurrency", c.params())),
            Algorithm::Adaptive(_) => None,
        }
    }

    /// Admits `cost` at `at`, or says how long after `at` it would be admitted (`u64::MAX`: never).
    /// `log` is the key's timestamps, for a sliding log only.
    ///
    /// # Errors
    /// The retry time, in nanoseconds after `at`.
    // Always: the decision path is large enough that the compiler would otherwise call it, which
    // measured 8 ns slower per decision.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn evaluate(&self, state: &State, log: &Log, at: u64, cost: u64) -> std::result::Result<Admit, u64> {
        if cost > u64::from(self.burst) {
            return Err(u64::MAX);
        }
        match &self.algorithm {
            Algorithm::Gcra(g) => g.evaluate(state, at, cost).map(Admit::State),
            Algorithm::Windows(_, w) => w.evaluate(state, at, cost).map(Admit::State),
            Algorithm::SlidingWindow(s) => s.evaluate(state, at, cost).map(Admit::State),
            Algorithm::SlidingLog(s) => s.evaluate(log, at, cost),
            Algorithm::LeakyBucket(l) => l.evaluate(state, at, cost).map(Admit::State),
            Algorithm::Concurrency(c) => c.acquire(state, cost).map(Admit::State),
            Algorithm::Adaptive(_) => Ok(Admit::State(*state)),
        }
    }

    /// Gives back `cost` admitted at `at` but not used (a cancelled wait, a manual reduction, the end of
    /// a concurrent request). Returns the new state; a sliding log removes its own timestamps.
    #[must_use]
    pub fn refund(&self, state: &State, log: &mut Log, now: u64, at: u64, cost: u64) -> State {
        match &self.algorithm {
            Algorithm::Gcra(g) => g.refund(state, now, at, cost),
            Algorithm::Windows(_, w) => w.refund(state, at, cost),
            Algorithm::SlidingWindow(s) => s.refund(state, at, cost),
            Algorithm::SlidingLog(s) => s.refund(state, log, at, cost),
            Algorithm::LeakyBucket(l) => l.refund(state, now, cost),
            Algorithm::Concurrency(c) => c.release(state, cost),
            Algorithm::Adaptive(_) => *state,
        }
    }

    #[must_use]
    pub fn report(&self, state: &State, log: &Log, now: u64) -> Report {
        let (remaining, reset_after_ns) = match &self.algorithm {
            Algorithm::Gcra(g) => g.report(state, now),
            Algorithm::Windows(_, w) => w.report(state, now),
            Algorithm::SlidingWindow(s) => s.report(state, now),
            Algorithm::SlidingLog(s) => s.report(log, now),
            Algorithm::LeakyBucket(l) => l.report(state, now),
            Algorithm::Concurrency(c) => (c.available(state), 0),
            Algorithm::Adaptive(_) => (u64::from(self.burst), 0),
        };
        let next_ns = match &self.algorithm {
            Algorithm::Gcra(g) => g.next_unit(state, now),
            _ => reset_after_ns,
        };
        Report { limit: u64::from(self.burst), remaining, reset_after_ns, window_ns: self.window_ns(), next_ns }
    }

    /// The window the limit's burst is counted over, as a `RateLimit-Policy` header states it: the
    /// time a full burst takes to come back at the rate (`"10/min"`: 60 s; `"10/s"` with burst 20:
    /// 2 s); a window algorithm's window. `None` for concurrency permits.
    #[inline]
    #[must_use]
    pub const fn window_ns(&self) -> Option<u64> {
        self.window_ns
    }
}

impl Limit {
    /// This limit with another rate (a per-key quota, a reconfigured rule): same algorithm, and the
    /// burst given explicitly, else the new rate's count.
    ///
    /// # Errors
    /// As [`Limit::new`]; a concurrency limit has no rate to change.
    pub fn with_rate(&self, rate: Rate, burst: Option<u64>) -> Result<Self> {
        if self.is_concurrency() {
            return Err(Error::value("rate", "a concurrency limit has no rate"));
        }
        let burst = burst.or_else(|| self.burst_set.then_some(u64::from(self.burst)));
        Self::new(rate, burst, self.kind())
    }

    /// How long a state written now may still constrain a decision (reservations by waiters aside):
    /// after it, a state of this limit is idle. Concurrency permits are held until released.
    #[must_use]
    pub fn horizon_ns(&self) -> u64 {
        match &self.algorithm {
            Algorithm::Gcra(g) => g.horizon_ns(),
            Algorithm::Windows(_, w) => w.horizon_ns(),
            Algorithm::SlidingWindow(s) => s.horizon_ns(),
            Algorithm::SlidingLog(s) => s.horizon_ns(),
            Algorithm::LeakyBucket(l) => l.horizon_ns(),
            Algorithm::Concurrency(_) | Algorithm::Adaptive(_) => u64::MAX,
        }
    }

    /// Requests the key has used under this limit at `now`, reservations included, however many: what
    /// a change of limit carries over. Exact for every algorithm (a sliding window counts its previous
    /// window by its overlap, rounded up), and never capped at the burst, so usage is never forgotten.
    #[must_use]
    pub fn used(&self, state: &State, log: &Log, now: u64) -> u64 {
        match &self.algorithm {
            Algorithm::Gcra(g) => g.used(state, now),
            Algorithm::Windows(_, w) => w.used(state, now),
            Algorithm::SlidingWindow(s) => s.used(state, now),
            Algorithm::SlidingLog(s) => s.live(log, now),
            Algorithm::LeakyBucket(l) => l.used(state, now),
            Algorithm::Concurrency(_) => u64::from(state.a),
            Algorithm::Adaptive(_) => 0,
        }
    }

    /// The state of a key that has used `used` at `now` under this limit (beyond its burst too: the key
    /// is then refused until the excess drains). A sliding log gets one run of `used` stamped `now`.
    #[must_use]
    pub fn with_used(&self, used: u64, log: &mut Log, now: u64) -> State {
        match &self.algorithm {
            Algorithm::Gcra(g) => g.with_used(used, now),
            Algorithm::Windows(_, w) => w.with_used(used, now),
            Algorithm::SlidingWindow(s) => s.with_used(used, now),
            Algorithm::SlidingLog(s) => {
                *log = Log::new();
                log.insert(now, used);
                s.state_of(log)
            }
            Algorithm::LeakyBucket(l) => l.with_used(used, now),
            #[allow(clippy::cast_possible_truncation)]
            Algorithm::Concurrency(_) => {
                let in_use = used.min(u64::from(u32::MAX)) as u32;
                State { t: if in_use == 0 { 0 } else { u64::MAX }, a: in_use, b: 0 }
            }
            Algorithm::Adaptive(_) => State::default(),
        }
    }

    /// The state of a key that moves from limit `old` to this one at `now` (its quota or its rule
    /// changed), keeping what it has used, counted in requests and never capped: 2 used of a 2/min limit
    /// leave 98 under 100/min, and 20 used of 20/s leave a key under 10/min refused until 10 drain, so
    /// no sequence of changes admits more than the largest burst in force at one instant. A sliding log
    /// keeps its stamps; permits in use stay in use. A change between a rate and a concurrency limit
    /// starts empty: permits count requests in flight, which a rate's usage says nothing of.
    #[must_use]
    pub fn rescale(&self, old: &Limit, state: &State, log: &mut Log, now: u64) -> State {
        // The same constants (another rate that works out alike, e.g. a window limit kept): the state
        // means the same, as the Redis script sees it (it compares limits by these).
        if self == old || (self.burst == old.burst && self.script_params() == old.script_params()) {
            return *state;
        }
        match &self.algorithm {
            Algorithm::SlidingLog(sliding) if old.uses_log() => sliding.state_of(log),
            Algorithm::Concurrency(_) if old.is_concurrency() => *state,
            _ if self.is_concurrency() || old.is_concurrency() => {
                *log = Log::new();
                State::default()
            }
            _ => {
                let used = old.used(state, log, now);
                if let (Algorithm::Windows(_, to), Algorithm::Windows(..)) = (&self.algorithm, &old.algorithm) {
                    if let Some(kept) = to.rescale_announced(state, used, now) {
                        return kept;
                    }
                }
                self.with_used(used, log, now)
            }
        }
    }

    /// Gives back `units` of the newest usage (a handler's manual reduction), in O(1) or O(log runs)
    /// whatever `units`.
    #[must_use]
    pub fn reduce(&self, state: &State, log: &mut Log, now: u64, units: u64) -> State {
        match &self.algorithm {
            Algorithm::SlidingLog(s) => s.reduce(state, log, units),
            Algorithm::Windows(_, w) => w.refund(state, state.t.saturating_sub(1), units),
            _ => self.refund(state, log, now, now, units),
        }
    }
}

impl Limit {
    /// Whether a server's word ([`Limit::cap`]) applies to this limit: a fixed window, whose window
    /// can end where the server's does, or a GCRA, refilling as a server's bucket does.
    #[must_use]
    pub const fn takes_word(&self) -> bool {
        matches!(self.algorithm, Algorithm::Windows(Kind::FixedWindow, _) | Algorithm::Gcra(_))
    }

    /// Whether this limit is a fixed window (a word moves where its window ends).
    #[must_use]
    pub const fn is_fixed_window(&self) -> bool {
        matches!(self.algorithm, Algorithm::Windows(Kind::FixedWindow, _))
    }

    /// The state after a server said the key has `remaining` left until `reset_at`, in reply to a request
    /// admitted at `sent_at` (see [`windows::Windows::cap`]; for a GCRA, [`gcra::Gcra::cap`]: full again at
    /// `reset_at`); `None` when it changes nothing, or the limit does not [take a word](Limit::takes_word).
    #[must_use]
    pub fn cap(&self, state: &State, now: u64, remaining: u64, reset_at: u64, sent_at: u64) -> Option<State> {
        match &self.algorithm {
            Algorithm::Windows(Kind::FixedWindow, w) => w.cap(state, now, remaining, reset_at, sent_at),
            Algorithm::Gcra(g) => g.cap(state, now, remaining, reset_at),
            _ => None,
        }
    }
}

impl Limit {
    /// The state after `units` more were used at `now` somewhere else (another node): counted as used
    /// now, whatever the limit allows, so the key may be refused until they drain. A concurrency
    /// limit is not a rate: unchanged.
    #[must_use]
    pub fn charge(&self, state: &State, log: &mut Log, now: u64, units: u64) -> State {
        match &self.algorithm {
            Algorithm::Concurrency(_) | Algorithm::Adaptive(_) => *state,
            Algorithm::SlidingLog(sliding) => {
                sliding.append(log, now, now, units);
                sliding.state_of(log)
            }
            _ => {
                let used = self.used(state, log, now).saturating_add(units);
                self.with_used(used, log, now)
            }
        }
    }
}

/// The one copy of `settings` for the process: a `Limit` is `Copy` and compared by value, and settings
/// are few (one per distinct adaptive limit ever made), so each is kept for good.
fn intern(settings: crate::adaptive::Settings) -> &'static crate::adaptive::Settings {
    static INTERNED: parking_lot::Mutex<Vec<&'static crate::adaptive::Settings>> = parking_lot::Mutex::new(Vec::new());
    let mut interned = INTERNED.lock();
    if let Some(found) = interned.iter().find(|s| ***s == settings) {
        return found;
    }
    let kept: &'static crate::adaptive::Settings = Box::leak(Box::new(settings));
    interned.push(kept);
    kept
}

fn checked_burst(burst: u64) -> Result<u32> {
    u32::try_from(burst)
        .ok()
        .filter(|&b| b >= 1)
        .ok_or_else(|| Error::value("burst", format!("must be between 1 and {}, got {burst}", u32::MAX)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{Admit, Kind, Limit, Log, Outcome, Report, State};

    /// One key under one limit, with the commit the store does.
    pub struct Harness {
        pub limit: Limit,
        pub state: State,
        pub log: Log,
    }

    impl Harness {
        pub fn new(rate: &str, burst: Option<u64>, kind: Kind) -> Self {
            let limit = Limit::new(rate.parse().unwrap(), burst, kind).unwrap();
            Self { limit, state: State::default(), log: Log::new() }
        }

        fn commit(&mut self, admit: Admit, now: u64) {
            match admit {
                Admit::State(state) => self.state = state,
                Admit::Log { at, cost, idle_at } => {
                    let super::Algorithm::SlidingLog(log) = &self.limit.algorithm else { unreachable!() };
                    log.append(&mut self.log, now, at, cost);
                    self.state.t = idle_at;
                }
            }
        }

        /// Decides at `at` and writes the admission.
        pub fn decide(&mut self, at: u64, cost: u64) -> Outcome {
            match self.limit.evaluate(&self.state, &self.log, at, cost) {
                Ok(admit) => {
                    self.commit(admit, at);
                    Outcome::admitted(0)
                }
                Err(retry) => Outcome::refused(retry),
            }
        }

        /// As the limiter does for a waiter: decide at `now + retry`; returns the wait.
        pub fn reserve(&mut self, now: u64, cost: u64) -> Option<u64> {
            let mut wait = 0;
            for _ in 0..4 {
                match self.limit.evaluate(&self.state, &self.log, now + wait, cost) {
                    Ok(admit) => {
                        self.commit(admit, now);
                        return Some(wait);
                    }
                    Err(u64::MAX) => return None,
                    Err(retry) => wait += retry,
                }
            }
            None
        }

        pub fn refund(&mut self, now: u64, at: u64, cost: u64) {
            self.state = self.limit.refund(&self.state, &mut self.log, now, at, cost);
        }

        pub fn report(&self, now: u64) -> Report {
            self.limit.report(&self.state, &self.log, now)
        }

        pub fn limit_windows(&self) -> super::windows::Windows {
            let super::Algorithm::Windows(_, w) = self.limit.algorithm else { panic!("not a window limit") };
            w
        }
    }
}
