//! Standing shares (lease mode): part of every key's budget split in advance into equal shares, one per
//! process, so that a process decides a key it has not seen without a round trip.
//!
//! A group whose limits are all GCRA (policy `all`) is split: of a limit of `count` per period with
//! `burst`, each share is `floor(count × f / n)` per period with `floor(burst × f / n)` at once, and
//! Redis keeps the rest (`count - n × share`, `burst - n × share burst`) for leases and exact decisions.
//! A GCRA admits in any span `d` at most `burst + rate × d`; the parts' bounds add up to the limit's, so
//! the fleet stays under it whatever each part admits. Another limit (windows, logs, permits), a policy
//! `fallback` or a share that would round to nothing leaves its group whole in Redis.
//!
//! The shares are slots of one hash in Redis (the pool), each held by at most one process for a time to
//! live and renewed while it lives; the pool says when each slot's last holder may have spent last, and
//! the new holder counts its keys as emptied then (`crate::store` `standing`).

use std::borrow::Cow;
use std::fmt::Write;

use crate::algorithm::{Algorithm, Kind, Limit};
use crate::config::Policy;
use crate::error::{Error, Result};
use crate::rate::Rate;

/// The most limits a group may have to be split.
pub const MOST_LIMITS: usize = 4;

/// `fraction_ppm` millionths of each key's budget split into `shares` shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub shares: u32,
    pub fraction_ppm: u32,
}

/// A group's limits split: one process's share and the part Redis keeps, per limit.
#[derive(Debug, Clone, Copy)]
pub struct Split {
    pub share: [Option<Limit>; MOST_LIMITS],
    pub remote: [Option<Limit>; MOST_LIMITS],
}

impl Standing {
    /// The split of a group of `limits` under `policy`, or `None` when it stays whole in Redis.
    #[must_use]
    pub fn split(&self, limits: &[Limit], policy: Policy) -> Option<Split> {
        if policy != Policy::All || limits.is_empty() || limits.len() > MOST_LIMITS {
            return None;
        }
        let mut split = Split { share: [None; MOST_LIMITS], remote: [None; MOST_LIMITS] };
        for (i, limit) in limits.iter().enumerate() {
            let (share, remote) = self.split_limit(limit)?;
            split.share[i] = Some(share);
            split.remote[i] = Some(remote);
        }
        Some(split)
    }

    /// The part of `limit` Redis keeps, when it splits.
    #[must_use]
    pub fn remote_part(self, limit: &Limit) -> Option<Limit> {
        self.split_limit(limit).map(|(_, remote)| remote)
    }

    fn split_limit(self, limit: &Limit) -> Option<(Limit, Limit)> {
        if !matches!(limit.algorithm, Algorithm::Gcra(_)) {
            return None;
        }
        let rate = limit.rate?;
        let whole = 1_000_000 * u128::from(self.shares);
        let part = |n: u64| u64::try_from(u128::from(n) * u128::from(self.fraction_ppm) / whole).ok();
        let (count, burst) = (part(rate.count)?, part(u64::from(limit.burst))?);
        if count == 0 || burst == 0 {
            return None;
        }
        let n = u64::from(self.shares);
        // n × part <= fraction × whole < whole: Redis keeps at least one unit of each.
        let (rest_count, rest_burst) = (rate.count - n * count, u64::from(limit.burst) - n * burst);
        let share = Limit::new(Rate::new(count, rate.period_ns).ok()?, Some(burst), Kind::Gcra).ok()?;
        let remote = Limit::new(Rate::new(rest_count, rate.period_ns).ok()?, Some(rest_burst), Kind::Gcra).ok()?;
        Some((share, remote))
    }

    /// What the pool compares to tell processes of other settings apart: the shares, the fraction and
    /// every group's name and limits (as the script reads them). Processes of other settings never hold
    /// shares at once: their parts would not add up to a limit.
    #[must_use]
    pub fn fingerprint<'a>(&self, groups: impl Iterator<Item = (&'a str, &'a [Limit])>) -> String {
        let mut text = format!("{}/{}", self.shares, self.fraction_ppm);
        for (name, limits) in groups {
            let _ = write!(text, ";{}:{name}", name.len());
            for limit in limits {
                let (kind, params) = limit.script_params().unwrap_or(("none", [0; 5]));
                let _ = write!(text, ",{kind}:{}:{params:?}", limit.burst);
            }
        }
        sha1_smol::Sha1::from(text.as_bytes()).digest().to_string()
    }
}

/// The limits Redis keeps of a group's `limits`: with standing shares, a split group's part (owned: a
/// borrowed answer means the group is not split); else all.
#[must_use]
pub fn remote_limits(standing: Option<Standing>, limits: &[Limit], policy: Policy) -> Cow<'_, [Limit]> {
    match standing.and_then(|s| s.split(limits, policy)) {
        Some(split) => Cow::Owned(split.remote.iter().flatten().copied().collect()),
        None => Cow::Borrowed(limits),
    }
}

/// The pool's key: `<prefix>{~standing}` (no group's tag starts with `~`; removed with the prefix's keys).
#[must_use]
pub fn pool_key(prefix: &str) -> String {
    format!("{prefix}{{~standing}}")
}

/// What the pool says to a call: this process holds `slot` (1-based) until its time to live runs out,
/// newly claimed or renewed, its keys empty until `free_in_ms` from the script's now (its last holder may
/// have spent until then); or it holds none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolReply {
    Held {
        slot: u32,
        free_in_ms: i64,
    },
    /// Every slot is held, or held by processes of other settings (`why`); or the share was given back.
    None {
        why: String,
    },
}

/// The pool call's `ARGV`: `standing`, the operation (`hold`: renew this process's slot or claim a free
/// one; `release`: give it back), the process, the settings' fingerprint, the shares, the time to live
/// (ms) and a `ManualClock`'s reading in ms (empty: Redis's `TIME`).
#[must_use]
pub fn pool_arguments(
    operation: &str,
    node: &str,
    (fingerprint, standing): (&str, Standing),
    ttl_ms: u64,
    manual_ms: Option<u64>,
) -> Vec<String> {
    vec![
        "standing".into(),
        operation.into(),
        node.into(),
        fingerprint.into(),
        standing.shares.to_string(),
        ttl_ms.to_string(),
        manual_ms.map_or_else(String::new, |ms| ms.to_string()),
    ]
}

/// The pool's reply: `{ slot, free_in_ms, "claimed" | "renewed" }` or `{ 0, "", why none }`.
///
/// # Errors
/// A reply that is not the script's.
pub fn parse_pool(reply: &[String]) -> Result<PoolReply> {
    let bad = || Error::value("reply", format!("not a ratekeeper standing-share reply: {reply:?}"));
    let [slot, free, what] = reply else { return Err(bad()) };
    let slot = slot.parse::<u32>().map_err(|_| bad())?;
    match what.as_str() {
        "claimed" | "renewed" if slot > 0 => Ok(PoolReply::Held { slot, free_in_ms: free.parse().map_err(|_| bad())? }),
        "claimed" | "renewed" => Err(bad()),
        why if slot == 0 => Ok(PoolReply::None { why: why.to_owned() }),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gcra(rate: &str, burst: Option<u64>) -> Limit {
        Limit::new(rate.parse().unwrap(), burst, Kind::Gcra).unwrap()
    }

    #[test]
    fn parts_add_up_to_the_limit() {
        let standing = Standing { shares: 4, fraction_ppm: 500_000 };
        let limit = gcra("1000/s", Some(300));
        let split = standing.split(&[limit], Policy::All).unwrap();
        let (share, remote) = (split.share[0].unwrap(), split.remote[0].unwrap());
        assert_eq!((share.rate.unwrap().count, share.burst), (125, 37));
        assert_eq!((remote.rate.unwrap().count, remote.burst), (500, 152));
        assert_eq!(remote.rate.unwrap().count + 4 * share.rate.unwrap().count, 1000);
        assert_eq!(remote.burst + 4 * share.burst, 300);
    }

    #[test]
    fn groups_that_cannot_be_split_stay_whole() {
        let standing = Standing { shares: 4, fraction_ppm: 500_000 };
        // A share would round to nothing.
        assert!(standing.split(&[gcra("7/s", None)], Policy::All).is_none());
        assert!(standing.split(&[gcra("1000/s", None), gcra("7/hour", None)], Policy::All).is_none());
        // Not GCRA, or a fallback.
        let window = Limit::new("1000/s".parse().unwrap(), None, Kind::FixedWindow).unwrap();
        assert!(standing.split(&[window], Policy::All).is_none());
        assert!(standing.split(&[gcra("1000/s", None)], Policy::Fallback).is_none());
        assert!(standing.split(&[gcra("8/s", None)], Policy::All).is_some());
    }

    #[test]
    fn fingerprints_tell_settings_and_rules_apart() {
        let (a, b) = ([gcra("10/s", None)], [gcra("20/s", None)]);
        let standing = Standing { shares: 4, fraction_ppm: 500_000 };
        let of = |s: Standing, limits: &[Limit]| s.fingerprint(std::iter::once(("api", limits)));
        assert_eq!(of(standing, &a), of(standing, &a));
        assert_ne!(of(standing, &a), of(standing, &b));
        assert_ne!(of(standing, &a), of(Standing { shares: 3, ..standing }, &a));
    }

    #[test]
    fn pool_replies_are_read_or_refused() {
        let reply = |r: &[&str]| parse_pool(&r.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(reply(&["2", "-5", "claimed"]).unwrap(), PoolReply::Held { slot: 2, free_in_ms: -5 });
        assert_eq!(reply(&["2", "7", "renewed"]).unwrap(), PoolReply::Held { slot: 2, free_in_ms: 7 });
        assert!(reply(&["2", "", "renewed"]).is_err());
        assert_eq!(reply(&["0", "", "full"]).unwrap(), PoolReply::None { why: "full".into() });
        assert!(reply(&["0", "", "claimed"]).is_err());
        assert!(reply(&["x"]).is_err());
    }
}
