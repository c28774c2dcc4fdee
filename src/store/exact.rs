//! Exact mode as a store: Redis decides every request atomically, in one call of `decide.lua` (`FCALL`,
//! or `EVALSHA` on a server without functions: see `backend::function`), which reads, decides and writes
//! the key's states on Redis's own clock (or a `ManualClock`'s time). This process still routes the
//! request, finds its limits (quotas included) and counts the outcome; only the states live in Redis.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Answer, Later, StateStore};
use crate::backend::client::{Client, Failure};
use crate::backend::health::{Health, HealthReport};
use crate::backend::standing::Standing;
use crate::backend::{reset_failed, script, unlink_owned, unlink_peer, OnError, Settings, Spec};
use crate::error::{Error, Result};
use crate::limiter::{Decision, Limiter, OwnedTarget, Receipt, RemoteKey, Request, Routed, Target, Verdict};
use crate::rate::Rate;

/// The store: the limiter whose rules route requests, and the decider its replies land on (shared with
/// the client's runtime thread).
#[derive(Debug)]
pub struct Exact {
    limiter: Arc<Limiter>,
    pub(super) decider: Arc<RedisDecider>,
}

impl Exact {
    /// # Errors
    /// A bad URL or option, or a limit of `limiter` the script cannot decide exactly (its limits
    /// installed later are held to the same bound).
    pub fn open(limiter: Arc<Limiter>, spec: &Spec) -> Result<Self> {
        RedisDecider::check(&limiter)?;
        let mut decider = RedisDecider::new(spec.settings.clone())?;
        decider.standing = spec.standing;
        Ok(Self { limiter, decider: Arc::new(decider) })
    }
}

impl StateStore for Exact {
    fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    fn waits_on_io(&self) -> bool {
        true
    }

    fn replays_moves(&self) -> bool {
        true
    }

    fn decide(&self, peer: &str, target: Target<'_>, request: Request) -> Result<Answer> {
        self.decider.decide(&self.limiter, peer, target, request)
    }

    fn decide_later(&self, peer: &str, target: Target<'_>, request: Request, done: Later) -> Result<Option<Answer>> {
        let call = match self.decider.prepare(&self.limiter, peer, target, request)? {
            Prepared::Done(decision) => return Ok(Some(decision.into())),
            Prepared::Call(call) => call,
        };
        let (decider, limiter) = (Arc::clone(&self.decider), Arc::clone(&self.limiter));
        self.decider.send(call, move |call, reply| done(decider.finish(&limiter, &call, reply)));
        Ok(None)
    }

    fn reduce(&self, peer: &str, target: Target<'_>, n: u64) -> Result<bool> {
        self.decider.reduce(&self.limiter, peer, target, n)
    }

    fn cap(&self, peer: &str, target: Target<'_>, remaining: u64, times: (u64, u64)) -> Result<bool> {
        Ok(self.decider.cap_word(&self.limiter, peer, target, remaining, times)?.0)
    }

    fn refund(&self, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        self.decider.refund(&self.limiter, peer, target, cost, receipt)
    }

    fn release(&self, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        self.decider.release(&self.limiter, peer, target, cost)
    }

    fn set_quota(&self, peer: &str, group: &str, rate: Option<Rate>) -> Result<()> {
        match self.limiter.set_quota_moving(peer, group, rate)? {
            Some(key) => self.decider.move_states(&self.limiter, peer, &key),
            None => Ok(()),
        }
    }

    fn moved(&self, peer: &str, key: &RemoteKey) -> Result<()> {
        self.decider.move_states(&self.limiter, peer, key)
    }

    /// Here first (the states `on_error="local"` decides with, quota records), then in Redis.
    fn reset(&self, peer: Option<&str>) -> Result<()> {
        self.limiter.reset(peer);
        self.decider.reset(&self.limiter, peer)
    }

    fn health(&self) -> HealthReport {
        self.decider.health().report()
    }
}

/// A refusal's retry time while Redis is down and `on_error="deny"`: when to try again.
const DENY_RETRY_NS: u64 = 1_000_000_000;

/// What decides in Redis: its settings, its client, and its health.
pub(super) struct RedisDecider {
    pub(super) settings: Settings,
    pub(super) client: Client,
    /// This process's name in concurrency leases (random), and the count of leases it took.
    pub(super) node: String,
    pub(super) leases: AtomicU64,
    /// Lease mode's standing shares: the scripts are sent the part of each split group Redis keeps.
    pub(super) standing: Option<Standing>,
    health: Health,
}

impl std::fmt::Debug for RedisDecider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDecider").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl RedisDecider {
    /// # Errors
    /// A bad URL or option, named by its field.
    pub fn new(settings: Settings) -> Result<Self> {
        if settings.timeout.is_zero() {
            return Err(Error::value("timeout", "must be more than 0 seconds"));
        }
        let client = Client::open(&settings, script::DECIDE)?;
        let node = format!("{:016x}", ahash::RandomState::new().hash_one(std::process::id()));
        Ok(Self { settings, client, node, leases: AtomicU64::new(0), standing: None, health: Health::default() })
    }

    /// Round trips, errors and outages since the backend was made.
    #[must_use]
    pub const fn health(&self) -> &Health {
        &self.health
    }

    /// Checks that the limiter's groups can be decided by the script, now and whenever limits are
    /// installed later (`update_rule`, `reload`, `add_group`, quotas).
    ///
    /// # Errors
    /// A limit the script cannot decide exactly, located at its group.
    pub fn check(limiter: &Limiter) -> Result<()> {
        limiter.bound_limits(script::check_limit)
    }

    /// The Redis keys of `peer`'s states in `key`'s group, one per limit, sharing one hash tag.
    #[must_use]
    pub fn keys(&self, peer: &str, key: &RemoteKey) -> Vec<String> {
        // A move of a limit the group no longer has (its state goes) needs that limit's key too.
        let up_to = key.moves.iter().map(|m| m.index + 1).max().unwrap_or(0);
        script::state_keys_up_to(&self.settings.prefix, &key.group, peer, &key.limits, up_to)
    }

    /// Decides `peer`'s request in Redis, waiting for the reply (call it without the GIL); while Redis
    /// cannot answer, as `on_error` says.
    ///
    /// # Errors
    /// A `Target::Group` that names no group; Redis cannot answer and `on_error="raise"`.
    pub fn decide(&self, limiter: &Limiter, peer: &str, target: Target<'_>, request: Request) -> Result<Answer> {
        match self.prepare(limiter, peer, target, request)? {
            Prepared::Done(decision) => Ok(decision.into()),
            Prepared::Call(call) => {
                let round_trip = self.health.round_trip();
                let reply = self.client.run(&call.keys, &call.args);
                round_trip.done();
                self.finish(limiter, &call, reply)
            }
        }
    }

    /// Gives `tokens` back to `peer`'s limits in Redis (a handler's manual reduction); false when nothing limits
    /// the request or its group disables reduction. While Redis cannot answer: `local` reduces in this
    /// process's memory, `allow` and `deny` give nothing back (the usage stays: never more admitted).
    ///
    /// # Errors
    /// A `Target::Group` that names no group; Redis cannot answer and `on_error="raise"`.
    pub fn reduce(&self, limiter: &Limiter, peer: &str, target: Target<'_>, tokens: u64) -> Result<bool> {
        let key = match limiter.route_remote(peer, target)? {
            Routed::Free(_) => return Ok(false),
            Routed::Limited(key) if !key.reduction => return Ok(false),
            Routed::Limited(key) => key,
        };
        let given = self.give_back(&key, peer, &script::reduce_arguments(&key, tokens, self.caller(limiter)))?;
        if given {
            limiter.record_reduction(peer, &key);
            return Ok(true);
        }
        match self.settings.on_error {
            OnError::Local => limiter.reduce(peer, target, tokens),
            _ => Ok(false),
        }
    }

    /// Refunds the slot of a wait that did not end (timeout, cancel): the limits and instant its
    /// `receipt` says; while Redis cannot answer the slot stays taken (never more admitted).
    ///
    /// # Errors
    /// A `Target::Group` that names no group; Redis cannot answer and `on_error="raise"`.
    pub fn refund(&self, limiter: &Limiter, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        if receipt.limits == 0 {
            return Ok(());
        }
        if let Routed::Limited(key) = limiter.route_remote(peer, target)? {
            let slot = (receipt.limits, receipt.remote_at);
            self.give_back(&key, peer, &script::refund_arguments(&key, cost, slot, self.caller(limiter)))?;
        }
        Ok(())
    }

    /// Releases `cost` of the concurrency permits this process holds for `peer` (a request ended).
    /// While Redis cannot answer the leases stay until they expire.
    ///
    /// # Errors
    /// A `Target::Group` that names no group; Redis cannot answer and `on_error="raise"`.
    pub fn release(&self, limiter: &Limiter, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        if let Routed::Limited(key) = limiter.route_remote(peer, target)? {
            if key.limits.iter().any(crate::algorithm::Limit::is_concurrency) {
                let prefix = format!("{}:", self.node);
                self.give_back(
                    &key,
                    peer,
                    &script::release_arguments(&key, cost, self.leases(&prefix), self.caller(limiter)),
                )?;
            }
        }
        Ok(())
    }

    /// A server's word for `peer` ([`Limiter::cap`]), taken by the key's fixed windows in Redis: whether
    /// one took it, and what they had left before it when it was taken in Redis (lease mode: a lease
    /// granted before the word may be spent only as far as it fits under it beside those). While Redis
    /// cannot answer: `local` takes it in this process's memory; otherwise it is lost (not taken; the next
    /// reply brings another).
    ///
    /// # Errors
    /// A `Target::Group` that names no group, a group without a fixed window; Redis cannot answer and
    /// `on_error="raise"`.
    pub fn cap_word(
        &self,
        limiter: &Limiter,
        peer: &str,
        target: Target<'_>,
        remaining: u64,
        times: (u64, u64),
    ) -> Result<(bool, Option<u64>)> {
        let Routed::Limited(key) = limiter.route_remote(peer, target)? else { return Ok((false, None)) };
        if !key.limits.iter().any(crate::algorithm::Limit::takes_word) {
            return Err(crate::limiter::no_fixed_window(&key.group));
        }
        let args = script::cap_arguments(&key, remaining, times, self.caller(limiter));
        match self.run_give_back(&key, peer, &args)? {
            Some(reply) => {
                let taken = reply.first().is_some_and(|f| f == "1");
                Ok((taken, reply.get(1).and_then(|left| left.parse().ok())))
            }
            None if self.settings.on_error == OnError::Local => {
                Ok((limiter.cap(peer, target, remaining, times.0, times.1)?, None))
            }
            None => Ok((false, None)),
        }
    }

    /// This limiter as the script sees it: its name and its clock.
    pub(super) fn caller(&self, limiter: &Limiter) -> script::Caller<'_> {
        script::Caller {
            node: &self.node,
            now: limiter.now_ns(),
            manual: limiter.manual_now().is_some(),
            standing: self.standing,
        }
    }

    /// Moves `peer`'s states in Redis as memory moved them (its quota changed): `key` holds the moves.
    /// While Redis cannot answer the states stay, to be moved at the key's next decision from the limit
    /// they were written under.
    ///
    /// # Errors
    /// Redis cannot answer and `on_error="raise"`.
    pub fn move_states(&self, limiter: &Limiter, peer: &str, key: &RemoteKey) -> Result<()> {
        self.give_back(key, peer, &script::move_arguments(key, self.caller(limiter))).map(drop)
    }

    fn leases<'a>(&self, prefix: &'a str) -> script::Leases<'a> {
        let ttl_ms = u64::try_from(self.settings.lease_ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        script::Leases { prefix, ttl_ms }
    }

    /// Runs a give-back (a reduction, a refund or a release); false when Redis could not answer (and
    /// `on_error` is not `raise`).
    ///
    /// A give-back's failure is counted as an error but moves no health: its callers have no answer to log
    /// an outage with, and the decisions around it begin and end the outage (logged once each).
    fn give_back(&self, key: &RemoteKey, peer: &str, args: &[String]) -> Result<bool> {
        self.run_give_back(key, peer, args).map(|reply| reply.is_some())
    }

    /// `give_back` with the script's reply; `None` when Redis could not answer.
    fn run_give_back(&self, key: &RemoteKey, peer: &str, args: &[String]) -> Result<Option<Vec<String>>> {
        match self.client.run(&self.keys(peer, key), args) {
            Ok(reply) => Ok(Some(reply)),
            Err(failure) => {
                self.health.count_error();
                match self.settings.on_error {
                    OnError::Raise => Err(Error::backend(failure.0)),
                    _ => Ok(None),
                }
            }
        }
    }

    /// The first step of a decision, in this process: route the request; what to ask Redis, if anything.
    ///
    /// # Errors
    /// A `Target::Group` that names no group.
    pub fn prepare(&self, limiter: &Limiter, peer: &str, target: Target<'_>, request: Request) -> Result<Prepared> {
        let key = match limiter.route_remote(peer, target)? {
            Routed::Free(decision) => return Ok(Prepared::Done(decision)),
            Routed::Limited(key) => key,
        };
        let keys = self.keys(peer, &key);
        let prefix = format!("{}:{}", self.node, self.leases.fetch_add(1, Ordering::Relaxed));
        let args = script::arguments(&key, request, self.leases(&prefix), self.caller(limiter));
        let (target, health) = (OwnedTarget::from(target), self.health.seen());
        Ok(Prepared::Call(Call { peer: peer.to_owned(), target, request, key, keys, args, health }))
    }

    /// Sends `call` and hands its reply to `done` on the client's runtime, without waiting.
    pub fn send(
        &self,
        mut call: Call,
        done: impl FnOnce(Call, std::result::Result<Vec<String>, Failure>) + Send + 'static,
    ) {
        // The reply needs only the call's key and request, not what was sent.
        let (keys, args) = (std::mem::take(&mut call.keys), std::mem::take(&mut call.args));
        let round_trip = self.health.round_trip();
        self.client.spawn(keys, args, move |reply| {
            round_trip.done();
            done(call, reply);
        });
    }

    /// The last step: the decision Redis's `reply` makes, counted here; on a failure, `on_error`'s.
    ///
    /// # Errors
    /// Redis could not answer and `on_error="raise"`.
    pub fn finish(
        &self,
        limiter: &Limiter,
        call: &Call,
        reply: std::result::Result<Vec<String>, Failure>,
    ) -> Result<Answer> {
        let parsed = reply.and_then(|reply| script::parse_reply(&call.key, &reply).map_err(|e| Failure(e.to_string())));
        match parsed {
            Ok((verdict, reports)) => {
                let recovered = self.health.answered(call.health);
                let decision = limiter.record_remote(&call.peer, &call.key, verdict, reports, call.request);
                let notice = recovered
                    .then(|| "ratekeeper: the Redis backend answers again; decisions are made in Redis".to_owned());
                Ok(Answer { decision, notice })
            }
            Err(failure) => {
                let notice = self.health.failed(call.health).then(|| {
                    format!(
                        "ratekeeper: the Redis backend is unavailable ({failure}); on_error='{}' decides until it answers again",
                        self.settings.on_error.name()
                    )
                });
                let decision = self.fallback(limiter, call, failure)?;
                Ok(Answer { decision, notice })
            }
        }
    }

    fn fallback(&self, limiter: &Limiter, call: &Call, failure: Failure) -> Result<Decision> {
        let local_now = limiter.now_ns();
        let verdict = |allowed: bool| Verdict {
            allowed,
            wait_ns: 0,
            retry_ns: if allowed { 0 } else { DENY_RETRY_NS },
            now: local_now,
            written: 0,
            refused_by: (!allowed).then_some(crate::limiter::Refusal::Rate),
        };
        let unreported = Request { report: false, ..call.request };
        Ok(match self.settings.on_error {
            OnError::Local => limiter.decide(&call.peer, call.target.borrow(), call.request)?,
            OnError::Allow => limiter.record_remote(&call.peer, &call.key, verdict(true), None, unreported),
            OnError::Deny => limiter.record_remote(&call.peer, &call.key, verdict(false), None, unreported),
            OnError::Raise => return Err(Error::backend(failure.0)),
        })
    }
}

/// `reset`: what the limiter owns in Redis is removed.
impl RedisDecider {
    /// Forgets `peer`'s usage in Redis, in every group of the rules in force (call it without the GIL).
    ///
    /// # Errors
    /// Redis could not answer (whatever `on_error` says: a reset that did not happen must not pass for
    /// one).
    pub fn reset(&self, limiter: &Limiter, peer: Option<&str>) -> Result<()> {
        let (client, prefix) = (&self.client, self.settings.prefix.as_str());
        let removed = match peer {
            Some(peer) => client.runtime().block_on(unlink_peer(client, prefix, limiter, peer)),
            None => client.runtime().block_on(unlink_owned(client, prefix)),
        };
        removed.map_err(|failure| reset_failed(&failure))
    }
}

/// What the first step of a decision came to.
#[derive(Debug)]
pub enum Prepared {
    /// Nothing limits the request (exempt, unrouted, off): decided here.
    Done(Decision),
    /// Redis decides.
    Call(Call),
}

/// One decision to ask Redis for, with what its last step needs.
#[derive(Debug, Clone)]
pub struct Call {
    pub peer: String,
    pub target: OwnedTarget,
    pub request: Request,
    pub key: RemoteKey,
    pub keys: Vec<String>,
    pub args: Vec<String>,
    /// The backend's health when the call was prepared: what its reply may move it from.
    pub health: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Kind, Limit};
    use crate::backend::{OnError, Settings};
    use crate::config::Policy;
    use std::time::Duration;

    fn backend(prefix: &str) -> RedisDecider {
        RedisDecider::new(Settings {
            url: "redis://127.0.0.1:1/0".into(),
            tls_ca: None,
            timeout: Duration::from_millis(20),
            prefix: prefix.into(),
            on_error: OnError::Local,
            lease_ttl: Duration::from_mins(5),
        })
        .unwrap()
    }

    fn key(limits: usize) -> RemoteKey {
        let limit = Limit::new("1/s".parse().unwrap(), None, Kind::Gcra).unwrap();
        RemoteKey {
            group: "api".into(),
            id: 0,
            index: 0,
            limits: vec![limit; limits],
            policy: Policy::All,
            reduction: true,
            moves: Vec::new(),
            head: 0,
        }
    }

    #[test]
    fn keys_of_one_peer_share_a_hash_tag() {
        let b = backend("rk:");
        assert_eq!(b.keys("alice", &key(2)), ["rk:{3:api:alice}:0", "rk:{3:api:alice}:1"]);
        let long = "x".repeat(100);
        let hashed = b.keys(&long, &key(1));
        assert!(hashed[0].starts_with("rk:{#") && hashed[0].len() < 50, "{hashed:?}");
        // Braces in a peer cannot move the tag.
        assert!(b.keys("a}b{c", &key(1))[0].starts_with("rk:{#"));
    }
}
