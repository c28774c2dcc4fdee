//! The Redis backend: limits shared by every process that uses the same Redis.
//!
//! Exact mode: each decision is one call of `decide.lua` (`FCALL`, or `EVALSHA` on a server without
//! functions: see `function.rs`), which reads, decides and writes the key's states atomically on
//! Redis's own clock. The limiter still routes the request, finds its
//! limits (quotas included) and counts the outcome here; only the states live in Redis.

pub mod client;
pub mod function;
pub mod health;
pub mod script;
pub mod standing;

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limiter::Limiter;
use client::{Client, Failure};

/// What a decision does while Redis cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Decide in this process's memory until Redis answers again.
    Local,
    Allow,
    Deny,
    /// Raise the error to the caller.
    Raise,
}

impl OnError {
    /// # Errors
    /// An unknown policy name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "local" => Ok(Self::Local),
            "allow" => Ok(Self::Allow),
            "deny" => Ok(Self::Deny),
            "raise" => Ok(Self::Raise),
            _ => Err(Error::value("on_error", format!("must be 'local', 'allow', 'deny' or 'raise', got '{name}'"))),
        }
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Raise => "raise",
        }
    }
}

/// How a backend is set up: what `rk.Redis(...)` holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub url: String,
    /// PEM certificates to trust for `rediss://` instead of the system's (a private CA).
    pub tls_ca: Option<Vec<u8>>,
    pub timeout: Duration,
    pub prefix: String,
    pub on_error: OnError,
    /// How long a concurrency permit's lease lives in Redis: a crashed process's permits come back then.
    pub lease_ttl: Duration,
}

/// What `rk.Redis(...)` describes: where, how, and in which mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub settings: Settings,
    /// Sync mode's interval between pushes of usage (`None`: exact mode).
    pub sync_interval: Option<Duration>,
    /// Lease mode's span: how far ahead a lease reaches, and how long a key stays idle before its lease
    /// is given back (`None`: exact mode).
    pub lease_span: Option<Duration>,
    /// Lease mode's standing shares (`None`: none).
    pub standing: Option<standing::Standing>,
}

/// Keys `SCAN` asks for in one step, and so removed by one `UNLINK`.
const RESET_BATCH: usize = 1000;

/// The error of a reset that Redis did not carry out.
#[must_use]
pub fn reset_failed(failure: &Failure) -> Error {
    Error::backend(format!(
        "reset: the limiter's state here was reset, but its keys in Redis were not removed ({failure}); call reset again"
    ))
}

/// Removes `peer`'s keys in every group: its states' keys and its sync counter, which follow from the
/// rules, so no scan is needed. One `UNLINK` per group (its keys share a slot), all sent at once.
///
/// # Errors
/// Redis could not answer.
pub async fn unlink_peer(
    client: &Client,
    prefix: &str,
    limiter: &Limiter,
    peer: &str,
) -> std::result::Result<(), Failure> {
    let rules = limiter.rules();
    let unlinks = rules.groups.iter().map(|group| {
        let mut unlink = redis::cmd("UNLINK");
        unlink.arg(script::state_keys(prefix, &group.name, peer, &group.limits));
        unlink.arg(script::usage_key(prefix, &group.name, peer));
        client.query_on(unlink, None)
    });
    futures_util::future::try_join_all(unlinks).await.map(drop)
}

/// Removes every key under `prefix` (`SCAN MATCH <prefix>{*`, `UNLINK` each batch), on every primary
/// of a Cluster. Keys written while the scan runs may stay (`SCAN` promises only the keys present
/// throughout).
///
/// # Errors
/// Redis could not answer.
pub async fn unlink_owned(client: &Client, prefix: &str) -> std::result::Result<(), Failure> {
    let pattern = script::owned_pattern(prefix);
    for node in client.primaries().await? {
        let mut cursor = 0_u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(RESET_BATCH);
            let reply = client.query_on(scan, node.as_deref()).await?;
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::from_redis_value(reply)
                .map_err(|e| Failure(format!("Redis at {}: not a SCAN reply: {e}", client.address())))?;
            if !keys.is_empty() {
                let mut unlink = redis::cmd("UNLINK");
                unlink.arg(keys);
                client.query_on(unlink, None).await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_error_names_are_checked() {
        assert_eq!(OnError::parse("deny").unwrap(), OnError::Deny);
        assert!(OnError::parse("ignore").unwrap_err().to_string().contains("'local', 'allow', 'deny' or 'raise'"));
    }
}
