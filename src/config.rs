//! What a limiter is built from: rules as configured, exemptions, bounds and quota settings.

use regex::Regex;

use crate::algorithm::Limit;
use crate::error::{Error, Result};
use crate::quota::QuotaSettings;

/// How a group's rate limits combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Every limit must admit ("10/s and 1000/hour"); a refusal by one consumes nothing from the others.
    All,
    /// The first limit that admits takes the request (sliding window, then leaky tokens).
    Fallback,
}

impl Policy {
    /// # Errors
    /// An unknown policy name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "all" => Ok(Self::All),
            "fallback" => Ok(Self::Fallback),
            _ => Err(Error::value("policy", format!("unknown policy {name:?}; expected 'all' or 'fallback'"))),
        }
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Fallback => "fallback",
        }
    }
}

/// A rule's pattern, compiled once: where it is given (a `Rule`) and routed alike.
#[derive(Debug, Clone)]
pub struct Pattern {
    regex: Regex,
}

impl Pattern {
    /// # Errors
    /// A pattern that is not a valid regular expression, named `pattern`.
    pub fn new(pattern: &str) -> Result<Self> {
        Ok(Self { regex: compile(pattern)? })
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        self.regex.as_str()
    }

    #[must_use]
    pub fn regex(&self) -> &Regex {
        &self.regex
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// A rule as configured: requests whose path matches `pattern` are limited by `group`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    pub pattern: Pattern,
    pub group: String,
    /// Rate limits, combined by `policy`, and concurrency limits, which are gates taken with permits.
    pub limits: Vec<Limit>,
    pub policy: Policy,
    /// Whether `reduce` may give tokens back (the node limiter's `is_manual_reduction_disabled`, inverted).
    pub reduction: bool,
}

impl RuleSpec {
    /// A rule with one limit.
    ///
    /// # Errors
    /// A pattern that does not compile.
    pub fn single(pattern: &str, group: &str, limit: Limit) -> Result<Self> {
        Ok(Self {
            pattern: Pattern::new(pattern)?,
            group: group.into(),
            limits: vec![limit],
            policy: Policy::All,
            reduction: true,
        })
    }
}

/// The routing part of a configuration: what `reconfigure` replaces.
#[derive(Debug, Clone, Default)]
pub struct RulesConfig {
    pub rules: Vec<RuleSpec>,
    pub exempt_peers: Vec<String>,
    pub exempt_paths: Vec<String>,
}

impl RulesConfig {
    /// The most entries a sliding log of these rules keeps for a key (its limit), 0 without one.
    #[must_use]
    pub fn longest_log(&self) -> usize {
        self.rules.iter().flat_map(|r| &r.limits).filter(|l| l.uses_log()).map(|l| l.burst as usize).max().unwrap_or(0)
    }
}

/// Everything a limiter is built from.
#[derive(Debug, Clone)]
pub struct Config {
    pub rules: RulesConfig,
    pub max_keys: usize,
    pub quotas: QuotaSettings,
    /// Whether decisions record each key's admissions for `drain_pending` (syncing usage between nodes).
    pub track_usage: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            rules: RulesConfig::default(),
            max_keys: 1_000_000,
            quotas: QuotaSettings::default(),
            track_usage: false,
        }
    }
}

/// The longest path pattern accepted (in bytes): far above any route table written by hand.
pub const MAX_PATTERN_BYTES: usize = 100_000;

/// Compiles one pattern, naming it in the error.
///
/// # Errors
/// A pattern that is not a valid regular expression.
pub fn compile(pattern: &str) -> Result<Regex> {
    // Refused before parsing: the regex crate would spend seconds on a pattern of megabytes before its
    // size limit refused it.
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(Error::value(
            "pattern",
            format!("is {} bytes long; a pattern may be at most {MAX_PATTERN_BYTES}", pattern.len()),
        ));
    }
    Regex::new(pattern).map_err(|e| Error::value("pattern", format!("{pattern:?} is not a valid regex: {}", flat(&e))))
}

/// The regex crate's message on one line, without its ASCII-art pointer.
pub(crate) fn flat(error: &regex::Error) -> String {
    match error {
        regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find(|l| l.starts_with("error:"))
            .unwrap_or("syntax error")
            .trim_start_matches("error: ")
            .to_owned(),
        other => other.to_string(),
    }
}
