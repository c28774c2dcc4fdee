//! The limiting algorithms. Each is a pure function of (state, now, cost): no clock, no locking.
//!
//! Every algorithm keeps its per-key state in one 16-byte [`State`] so that the map's slots stay small.
//! A decision either admits (now, or after `wait_ns` when the caller accepts waiting, which reserves the
//! slot) or refuses; a refusal never changes the state.

pub mod gcra;
pub mod token_bucket;

use crate::error::{Error, Result};
use crate::rate::Rate;

/// Per-key state. The meaning of the fields depends on the algorithm, with one rule shared by all so
/// that the store can drop stale entries without knowing their algorithm: once `now >= t`, the state no
/// longer constrains anything (it equals a fresh state) unless `b`'s sign bit is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    pub t: u64,
    pub a: u32,
    pub b: u32,
}

impl State {
    /// True when forgetting this state loses nothing: the next decision would be the same.
    #[inline]
    #[must_use]
    pub fn is_idle(&self, now: u64) -> bool {
        now >= self.t && self.b >> 31 == 0
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

    /// Admit after `wait_ns` if the caller accepts waiting that long, else refuse.
    #[must_use]
    pub const fn wait_or_refuse(wait_ns: u64, max_wait_ns: u64) -> Self {
        if wait_ns <= max_wait_ns {
            Self::admitted(wait_ns)
        } else {
            Self::refused(wait_ns)
        }
    }
}

/// What a key has left, for headers and `Decision`; computed only when asked (not by `allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Requests of cost 1 that would be admitted right now.
    pub remaining: u64,
    /// Time until the key is back to its full burst.
    pub reset_after_ns: u64,
}

/// The algorithms a limit can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gcra,
    TokenBucket,
}

impl Kind {
    /// # Errors
    /// An unknown algorithm name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "gcra" => Ok(Self::Gcra),
            "token_bucket" => Ok(Self::TokenBucket),
            _ => Err(Error::value(
                "algorithm",
                format!("unknown algorithm {name:?}; expected one of 'gcra', 'token_bucket'"),
            )),
        }
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "token_bucket",
        }
    }
}

/// One limit: a rate, a burst, and the algorithm that enforces them, with its derived constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub rate: Rate,
    pub burst: u32,
    pub algorithm: Algorithm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Gcra(gcra::Gcra),
    TokenBucket(token_bucket::TokenBucket),
}

impl Limit {
    /// A limit of `rate` allowing `burst` requests at once (default: the rate's count).
    ///
    /// # Errors
    /// A burst of zero, above `u32::MAX`, or so large that `burst × period / count` overflows.
    pub fn new(rate: Rate, burst: Option<u64>, kind: Kind) -> Result<Self> {
        let burst = burst.unwrap_or(rate.count);
        if burst == 0 || burst > u64::from(u32::MAX) {
            return Err(Error::value("burst", format!("must be between 1 and {}, got {burst}", u32::MAX)));
        }
        let span = u128::from(burst) * u128::from(rate.period_ns) / u128::from(rate.count);
        if span > (1u128 << 62) {
            return Err(Error::value(
                "burst",
                format!("{burst} requests at {rate} span more than a century; use a smaller burst"),
            ));
        }
        // Checked above: burst fits in u32.
        #[allow(clippy::cast_possible_truncation)]
        let burst = burst as u32;
        let algorithm = match kind {
            Kind::Gcra => Algorithm::Gcra(gcra::Gcra::new(rate, burst)),
            Kind::TokenBucket => Algorithm::TokenBucket(token_bucket::TokenBucket::new(rate, burst)),
        };
        Ok(Self { rate, burst, algorithm })
    }

    #[must_use]
    pub const fn kind(&self) -> Kind {
        match self.algorithm {
            Algorithm::Gcra(_) => Kind::Gcra,
            Algorithm::TokenBucket(_) => Kind::TokenBucket,
        }
    }

    /// Admit `cost` now, or after a wait of at most `max_wait_ns` (reserving the slot), or refuse.
    #[inline]
    pub fn decide(&self, state: &mut State, now: u64, cost: u64, max_wait_ns: u64) -> Outcome {
        if cost > u64::from(self.burst) {
            return Outcome::refused(u64::MAX);
        }
        match &self.algorithm {
            Algorithm::Gcra(g) => g.decide(state, now, cost, max_wait_ns),
            Algorithm::TokenBucket(tb) => tb.decide(state, now, cost, max_wait_ns),
        }
    }

    /// Give back `cost` admitted earlier but not used (a cancelled wait).
    pub fn refund(&self, state: &mut State, now: u64, cost: u64) {
        match &self.algorithm {
            Algorithm::Gcra(g) => g.refund(state, now, cost),
            Algorithm::TokenBucket(tb) => tb.refund(state, cost),
        }
    }

    #[must_use]
    pub fn report(&self, state: &State, now: u64) -> Report {
        match &self.algorithm {
            Algorithm::Gcra(g) => g.report(state, now),
            Algorithm::TokenBucket(tb) => tb.report(state, now),
        }
    }
}
