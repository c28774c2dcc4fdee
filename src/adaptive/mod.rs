//! Adaptive concurrency limits: a number of permits that moves between a floor and a ceiling from the
//! latency and the outcome of the requests it admitted, the way TCP congestion control finds a
//! window. Plain Rust, no clock and no locking: a [`Gate`] is one limit's whole state, fixed-size and
//! `repr(C)` so that it can live in memory shared by processes, and it changes only when told of an
//! admission, a release (with its [`Sample`]) and the time.
//!
//! Two controllers share the gate, its baseline and its defences:
//! - **AIMD**: +1 per window of good samples while the limit is in use; × `backoff` on a drop, a
//!   timeout, or a window whose mean latency is above the threshold.
//! - **Gradient**: the limit follows `limit × baseline × (1 + tolerance) / latency` (clamped to
//!   `[0.5, 1]`, smoothed) when latency is above the tolerance, and grows by `√limit` while it is
//!   within it and the limit is in use (Envoy's gradient controller and Netflix's Gradient2 share the
//!   idea: the ratio of an ideal round trip to the sampled one).
//!
//! Defences against the anchors' known failures (Netflix concurrency-limits #134 and #137, Envoy
//! #11579 and #38338):
//! - growth only while the limit is in use (the window's peak in flight reached 3/4 of the permits)
//!   and latency is within the tolerance of the baseline; drops and timeouts only ever decrease it,
//!   and their latency never enters an estimate;
//! - the baseline (the unloaded latency) is re-learned by a probe every `probe_interval` (jittered):
//!   the permits are pinned to the floor, the requests admitted before are let finish, and only the
//!   latency of requests admitted after the drain is measured, so load can never leak into it (it
//!   cannot creep up); between probes it only goes down; a limit stuck at its floor for 5 windows
//!   probes at once, so a baseline learned too low (the service got slower for good) is replaced;
//! - jitter on the window and the probe timers from a per-gate RNG seeded from the gate's name, so
//!   runs on a manual clock are reproducible and gates of many processes do not probe in step.

pub mod gate;
pub mod settings;
pub mod table;

pub use gate::{Gate, GateView};
pub use settings::{Controller, Per, Settings};

/// How a request admitted by an adaptive limit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Served: its latency is a sample of the service's.
    Ok,
    /// Failed from overload (a 5xx, an exception, a 503 from upstream): a sign to back off.
    Dropped,
    /// Given up on: a sign to back off; its latency says nothing of the service's.
    Timeout,
}

impl Outcome {
    /// # Errors
    /// An unknown outcome name.
    pub fn parse(name: &str) -> crate::error::Result<Self> {
        match name {
            "ok" => Ok(Self::Ok),
            "dropped" => Ok(Self::Dropped),
            "timeout" => Ok(Self::Timeout),
            _ => Err(crate::error::Error::value(
                "outcome",
                format!("unknown outcome {name:?}; expected one of 'ok', 'dropped', 'timeout'"),
            )),
        }
    }
}

/// What a released request tells its gate: how long it held its permit, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub latency_ns: u64,
    pub outcome: Outcome,
}

/// A name's hash that is the same in every process, run and build (FNV-1a, the `fnv` crate's): what seeds
/// a gate's RNG, so that a run on a manual clock is reproducible, and names a gate in a shared region,
/// which processes of two releases may share in a rolling deploy (unlike the limiter's keyed hashes).
#[must_use]
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    for part in parts {
        hasher.write(part);
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        hasher.write_u8(0xff);
    }
    hasher.finish()
}
