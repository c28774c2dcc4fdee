//! `Rate`: a count per period, parsed from strings like `"10/min"`, `"3/60s"` or `"2/500ms"`.

use std::fmt;

use crate::error::{Error, Result};

pub const NANOS_PER_SEC: u64 = 1_000_000_000;
/// The longest period accepted. Keeps `burst × period` products inside `u64` nanoseconds.
pub const MAX_PERIOD_NS: u64 = 10 * 366 * 86_400 * NANOS_PER_SEC;
/// Counts and bursts are kept in 32 bits so that per-key state stays 16 bytes.
pub const MAX_COUNT: u64 = u32::MAX as u64;
/// `MAX_PERIOD_NS` as a float, exact (it is far below 2^53 × 1024).
#[allow(clippy::cast_precision_loss)]
const MAX_PERIOD_NS_F64: f64 = MAX_PERIOD_NS as f64;

/// `count` events per `period_ns` nanoseconds.
///
/// ```
/// use _core::rate::Rate;
/// let rate: Rate = "3/60s".parse().unwrap();
/// assert_eq!((rate.count, rate.period_ns), (3, 60_000_000_000));
/// assert_eq!("2/500ms".parse::<Rate>().unwrap().period_ns, 500_000_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    pub count: u64,
    pub period_ns: u64,
}

impl Rate {
    /// A rate from a count and a period in nanoseconds, validated.
    ///
    /// # Errors
    /// A count of zero or above `u32::MAX`, or a period of zero or over ten years.
    pub fn new(count: u64, period_ns: u64) -> Result<Self> {
        if count == 0 || count > MAX_COUNT {
            return Err(Error::value("count", format!("must be between 1 and {MAX_COUNT}, got {count}")));
        }
        if period_ns == 0 || period_ns > MAX_PERIOD_NS {
            return Err(Error::value(
                "per",
                format!("must be a positive number of seconds up to ten years, got {}", secs(period_ns)),
            ));
        }
        Ok(Self { count, period_ns })
    }

    /// A rate from a count and a period in seconds.
    ///
    /// # Errors
    /// As [`Rate::new`], and for a period that is not a finite number.
    pub fn per_seconds(count: u64, seconds: f64) -> Result<Self> {
        if !seconds.is_finite() || seconds <= 0.0 {
            return Err(Error::value("per", format!("must be a positive number of seconds, got {seconds}")));
        }
        let nanos = (seconds * 1e9).round();
        if !(1.0..=MAX_PERIOD_NS_F64).contains(&nanos) {
            return Err(Error::value("per", format!("must be between 1ns and ten years, got {seconds:?} s")));
        }
        // Checked above to be within (0, MAX_PERIOD_NS].
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Self::new(count, nanos as u64)
    }

    /// The period in seconds.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn period_secs(&self) -> f64 {
        self.period_ns as f64 / 1e9
    }
}

fn secs(ns: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let s = ns as f64 / 1e9;
    format!("{s}s")
}

/// Nanoseconds per unit, for the unit names accepted after the `/`.
fn unit_ns(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" | "nanosecond" | "nanoseconds" => 1,
        "us" | "µs" | "microsecond" | "microseconds" => 1_000,
        "ms" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => NANOS_PER_SEC,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * NANOS_PER_SEC,
        "h" | "hr" | "hour" | "hours" => 3_600 * NANOS_PER_SEC,
        "d" | "day" | "days" => 86_400 * NANOS_PER_SEC,
        "w" | "week" | "weeks" => 7 * 86_400 * NANOS_PER_SEC,
        // As `limits` counts them (Flask-Limiter, slowapi): a month of 30 days, a year of 12 such months.
        "mo" | "month" | "months" => 30 * 86_400 * NANOS_PER_SEC,
        "y" | "year" | "years" => 360 * 86_400 * NANOS_PER_SEC,
        _ => return None,
    })
}

impl std::str::FromStr for Rate {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad =
            |why: &str| Error::value("", format!("{text:?} is not a rate ({why}); expected e.g. '10/min', '3/60s'"));
        // "10/min", and the peers' "10 per minute" (limits, Flask-Limiter, slowapi).
        let (count, period) = text
            .split_once('/')
            .or_else(|| {
                let at = text.to_ascii_lowercase().find(" per ")?;
                Some((&text[..at], &text[at + 5..]))
            })
            .ok_or_else(|| bad("no '/'"))?;
        let count: u64 = count.trim().replace('_', "").parse().map_err(|_| bad("the count is not a whole number"))?;
        let period = period.trim();
        let split = period.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(period.len());
        let (amount, unit) = period.split_at(split);
        let amount = amount.replace('_', "");
        let unit = unit.trim().to_ascii_lowercase();
        // A bare number of seconds, as django-ratelimit and DRF-style configs write "100/10".
        let unit_ns = if unit.is_empty() && !amount.is_empty() {
            NANOS_PER_SEC
        } else {
            unit_ns(&unit).ok_or_else(|| bad("unknown unit"))?
        };
        let period_ns = if amount.is_empty() {
            unit_ns
        } else if let Ok(whole) = amount.parse::<u64>() {
            whole.checked_mul(unit_ns).ok_or_else(|| bad("the period is too long"))?
        } else {
            let fractional: f64 = amount.parse().map_err(|_| bad("the period is not a number"))?;
            #[allow(clippy::cast_precision_loss)]
            let ns = (fractional * unit_ns as f64).round();
            if !(1.0..=MAX_PERIOD_NS_F64).contains(&ns) {
                return Err(bad("the period is out of range"));
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let ns = ns as u64;
            ns
        };
        Rate::new(count, period_ns).map_err(|e| bad(&e.message))
    }
}

impl fmt::Display for Rate {
    /// The shortest string that parses back to this rate: `10/min`, `3/60s`, `2/500ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 7] = [
            (7 * 86_400 * NANOS_PER_SEC, "week"),
            (86_400 * NANOS_PER_SEC, "day"),
            (3_600 * NANOS_PER_SEC, "hour"),
            (60 * NANOS_PER_SEC, "min"),
            (NANOS_PER_SEC, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
        ];
        for (ns, name) in UNITS {
            if self.period_ns == ns {
                return write!(f, "{}/{name}", self.count);
            }
        }
        for (ns, name) in UNITS.iter().skip(4) {
            if self.period_ns.is_multiple_of(*ns) {
                return write!(f, "{}/{}{name}", self.count, self.period_ns / ns);
            }
        }
        write!(f, "{}/{}ns", self.count, self.period_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Rate {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse("10/min"), Rate { count: 10, period_ns: 60 * NANOS_PER_SEC });
        assert_eq!(parse("3/60s"), Rate { count: 3, period_ns: 60 * NANOS_PER_SEC });
        assert_eq!(parse("5/second"), Rate { count: 5, period_ns: NANOS_PER_SEC });
        assert_eq!(parse("100/hour"), Rate { count: 100, period_ns: 3_600 * NANOS_PER_SEC });
        assert_eq!(parse("1000/day"), Rate { count: 1000, period_ns: 86_400 * NANOS_PER_SEC });
        assert_eq!(parse("2/500ms"), Rate { count: 2, period_ns: 500_000_000 });
        assert_eq!(parse(" 7 / 1.5s "), Rate { count: 7, period_ns: 1_500_000_000 });
        assert_eq!(parse("1_000/MIN"), Rate { count: 1000, period_ns: 60 * NANOS_PER_SEC });
    }

    #[test]
    fn parses_the_peers_spellings() {
        // django-ratelimit's bare seconds, limits' "per" and its month and year.
        assert_eq!(parse("100/10"), Rate { count: 100, period_ns: 10 * NANOS_PER_SEC });
        assert_eq!(parse("10 per minute"), Rate { count: 10, period_ns: 60 * NANOS_PER_SEC });
        assert_eq!(parse("10 PER 2 minutes"), Rate { count: 10, period_ns: 120 * NANOS_PER_SEC });
        assert_eq!(parse("5/2 hours"), Rate { count: 5, period_ns: 7_200 * NANOS_PER_SEC });
        assert_eq!(parse("1 per month"), Rate { count: 1, period_ns: 30 * 86_400 * NANOS_PER_SEC });
        assert_eq!(parse("1/year"), Rate { count: 1, period_ns: 360 * 86_400 * NANOS_PER_SEC });
    }

    #[test]
    fn rejects_what_is_not_a_rate() {
        for bad in [
            "",
            "10",
            "10/",
            "10 per",
            "per minute",
            "10/fortnight",
            "x/min",
            "0/min",
            "-1/min",
            "1/0s",
            "1.5/min",
            "1/99999week",
        ] {
            let err = bad.parse::<Rate>().unwrap_err();
            assert!(err.message.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn displays_in_a_form_that_parses_back() {
        for text in ["10/min", "3/60s", "2/500ms", "1000/day", "7/1500ms", "1/3ns"] {
            let rate = parse(text);
            assert_eq!(parse(&rate.to_string()), rate, "{text} -> {rate}");
        }
        assert_eq!(parse("3/60s").to_string(), "3/min");
    }
}
