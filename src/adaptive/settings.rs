//! An adaptive limit's settings: which controller, its bounds and its constants, each defaulted so that
//! no number needs choosing.

use crate::error::{Error, Result};

/// The controllers an adaptive limit can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    /// Additive increase, multiplicative decrease.
    Aimd,
    /// The ratio of the baseline latency to the sampled one.
    Gradient,
}

impl Controller {
    /// # Errors
    /// An unknown controller name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "aimd" => Ok(Self::Aimd),
            "gradient" => Ok(Self::Gradient),
            _ => Err(Error::value("adaptive", format!("unknown controller {name:?}; expected 'gradient' or 'aimd'"))),
        }
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Aimd => "aimd",
            Self::Gradient => "gradient",
        }
    }
}

/// What one adaptive limit counts: every peer of its group together (the service behind it has one
/// capacity), or each key on its own (e.g. outgoing calls keyed by the upstream they go to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    Group,
    Key,
}

impl Per {
    /// # Errors
    /// An unknown name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "group" => Ok(Self::Group),
            "key" => Ok(Self::Key),
            _ => Err(Error::value("per", format!("must be 'group' or 'key', got {name:?}"))),
        }
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Group => "group",
            Self::Key => "key",
        }
    }
}

/// An adaptive limit's settings. The floats are checked finite, so equality is an equivalence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub controller: Controller,
    pub per: Per,
    /// The floor: never fewer permits (and the permits a probe pins the limit to).
    pub min_limit: u32,
    /// The ceiling.
    pub max_limit: u32,
    /// The permits before anything is learned.
    pub initial: u32,
    /// How often the limit is updated (each window ends after this long, jittered, once it has a sample).
    pub window_ns: u64,
    /// A window's mean latency above `baseline × (1 + tolerance)` is a sign of queueing.
    pub tolerance: f64,
    /// The factor a drop, a timeout (and, for AIMD, latency above the threshold) multiply the limit by.
    pub backoff: f64,
    /// Gradient: the share of the way to its target the limit goes in one window when it decreases.
    pub smoothing: f64,
    /// AIMD: a fixed latency threshold; 0: the learned baseline × (1 + tolerance).
    pub threshold_ns: u64,
    /// How often the baseline is re-learned by a probe.
    pub probe_interval_ns: u64,
    /// Samples a probe measures.
    pub probe_samples: u32,
    /// Timers vary by up to ± this share.
    pub jitter: f64,
}

impl Eq for Settings {}

impl Settings {
    /// The defaults of `controller`: a floor of 1, a ceiling of 1000, 10 permits to start with,
    /// 100 ms windows, latency tolerated up to 20 % (AIMD) or 10 % (gradient) over the baseline,
    /// × 0.9 on a sign of overload, a probe every 30 s of 10 samples, ± 10 % jitter. The gradient's
    /// tolerance is half AIMD's because it also grows by √limit a window: it settles about
    /// `tolerance + √limit / 2` over the knee, AIMD about `tolerance / 2`. Tighter, a server that sheds
    /// load on its own event loop reads the refusals' cost as queueing and pins its limit low (see
    /// `benches/adaptive_bench.py`); looser, the limit settles further past the knee. The gradient's
    /// decrease goes a quarter of the way to its target a window (Gradient2 smooths by 0.2): half, one
    /// noisy window under a storm of refusals took it halfway down, and the refusals it then made
    /// slowed the next windows more (against wrk its throughput ranged 24-87 % of capacity; now 82-85 %).
    #[must_use]
    pub const fn new(controller: Controller) -> Self {
        Self {
            controller,
            per: Per::Group,
            min_limit: 1,
            max_limit: 1000,
            initial: 10,
            window_ns: 100_000_000,
            tolerance: match controller {
                Controller::Aimd => 0.2,
                Controller::Gradient => 0.1,
            },
            backoff: 0.9,
            smoothing: 0.25,
            threshold_ns: 0,
            probe_interval_ns: 30_000_000_000,
            probe_samples: 10,
            jitter: 0.1,
        }
    }

    /// Checks the settings together; an `initial` left at its default is brought within the bounds.
    ///
    /// # Errors
    /// A value out of its range, named by its field.
    pub fn checked(mut self, initial_given: bool) -> Result<Self> {
        if self.min_limit == 0 {
            return Err(Error::value("min_limit", "must be at least 1, got 0"));
        }
        if self.max_limit < self.min_limit {
            return Err(Error::value(
                "max_limit",
                format!("must be at least min_limit ({}), got {}", self.min_limit, self.max_limit),
            ));
        }
        if initial_given {
            if !(self.min_limit..=self.max_limit).contains(&self.initial) {
                return Err(Error::value(
                    "initial",
                    format!(
                        "must be between min_limit ({}) and max_limit ({}), got {}",
                        self.min_limit, self.max_limit, self.initial
                    ),
                ));
            }
        } else {
            self.initial = self.initial.clamp(self.min_limit, self.max_limit);
        }
        let share = |field: &str, value: f64, low_open: bool, high: f64| -> Result<()> {
            let low_ok = if low_open { value > 0.0 } else { value >= 0.0 };
            if value.is_finite() && low_ok && value <= high {
                Ok(())
            } else {
                let low = if low_open { "above 0" } else { "at least 0" };
                Err(Error::value(field, format!("must be {low} and at most {high}, got {value}")))
            }
        };
        share("tolerance", self.tolerance, false, 10.0)?;
        share("smoothing", self.smoothing, true, 1.0)?;
        share("jitter", self.jitter, false, 0.5)?;
        if !(self.backoff.is_finite() && self.backoff >= 0.5 && self.backoff < 1.0) {
            return Err(Error::value("backoff", format!("must be at least 0.5 and below 1, got {}", self.backoff)));
        }
        if self.window_ns == 0 {
            return Err(Error::value("window", "must be above 0 seconds, got 0"));
        }
        if self.probe_interval_ns < self.window_ns {
            return Err(Error::value("probe_interval", "must be at least one window"));
        }
        if self.probe_samples == 0 {
            return Err(Error::value("probe_samples", "must be at least 1, got 0"));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_field() {
        assert!(Settings::new(Controller::Gradient).checked(false).is_ok());
        let bad = |f: fn(&mut Settings)| {
            let mut s = Settings::new(Controller::Aimd);
            f(&mut s);
            s.checked(true).unwrap_err().loc
        };
        assert_eq!(bad(|s| s.min_limit = 0), vec![crate::error::Loc::Key("min_limit".into())]);
        assert_eq!(bad(|s| s.max_limit = 0), vec![crate::error::Loc::Key("max_limit".into())]);
        assert_eq!(bad(|s| s.initial = 5000), vec![crate::error::Loc::Key("initial".into())]);
        assert_eq!(bad(|s| s.backoff = 1.0), vec![crate::error::Loc::Key("backoff".into())]);
        assert_eq!(bad(|s| s.tolerance = f64::NAN), vec![crate::error::Loc::Key("tolerance".into())]);
        assert_eq!(bad(|s| s.smoothing = 0.0), vec![crate::error::Loc::Key("smoothing".into())]);
        let mut low = Settings::new(Controller::Aimd);
        low.max_limit = 4;
        assert_eq!(low.checked(false).unwrap().initial, 4, "a default initial is brought under the ceiling");
    }
}
