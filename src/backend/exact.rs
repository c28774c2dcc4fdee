//! Exact mode as a store: Redis decides every request atomically, on its own clock (or a
//! `ManualClock`'s time); this process routes, finds the limits and counts.

use std::sync::Arc;

use super::health::HealthReport;
use super::{Backend, Prepared, Spec};
use crate::error::Result;
use crate::limiter::{Limiter, Receipt, RemoteKey, Request, Target};
use crate::rate::Rate;
use crate::store::{Answer, Later, StateStore};

/// Shared with the replies that land on the client's runtime thread.
#[derive(Debug)]
pub struct Exact {
    backend: Arc<Backend>,
}

impl Exact {
    /// # Errors
    /// A bad URL or option, or a limit of `limiter` the script cannot decide exactly (its limits
    /// installed later are held to the same bound).
    pub fn open(spec: &Spec, limiter: &Limiter) -> Result<Self> {
        Backend::check(limiter)?;
        Ok(Self { backend: Arc::new(Backend::new(spec.settings.clone())?) })
    }
}

impl StateStore for Exact {
    fn waits_on_io(&self) -> bool {
        true
    }

    fn replays_moves(&self) -> bool {
        true
    }

    fn decide(&self, limiter: &Limiter, peer: &str, target: Target<'_>, request: Request) -> Result<Answer> {
        self.backend.decide(limiter, peer, target, request)
    }

    fn decide_later(
        &self,
        limiter: &Arc<Limiter>,
        peer: &str,
        target: Target<'_>,
        request: Request,
        done: Later,
    ) -> Result<Option<Answer>> {
        let call = match self.backend.prepare(limiter, peer, target, request)? {
            Prepared::Done(decision) => return Ok(Some(decision.into())),
            Prepared::Call(call) => call,
        };
        let (backend, limiter) = (Arc::clone(&self.backend), Arc::clone(limiter));
        self.backend.send(call, move |call, reply| done(backend.finish(&limiter, &call, reply)));
        Ok(None)
    }

    fn reduce(&self, limiter: &Limiter, peer: &str, target: Target<'_>, n: u64) -> Result<bool> {
        self.backend.reduce(limiter, peer, target, n)
    }

    fn refund(&self, limiter: &Limiter, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        self.backend.refund(limiter, peer, target, cost, receipt)
    }

    fn release(&self, limiter: &Limiter, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        self.backend.release(limiter, peer, target, cost)
    }

    fn set_quota(&self, limiter: &Limiter, peer: &str, group: &str, rate: Option<Rate>) -> Result<()> {
        match limiter.set_quota_moving(peer, group, rate)? {
            Some(key) => self.backend.move_states(limiter, peer, &key),
            None => Ok(()),
        }
    }

    fn moved(&self, limiter: &Limiter, peer: &str, key: &RemoteKey) -> Result<()> {
        self.backend.move_states(limiter, peer, key)
    }

    /// Here first (the states `on_error="local"` decides with, quota records), then in Redis.
    fn reset(&self, limiter: &Limiter, peer: Option<&str>) -> Result<()> {
        limiter.reset(peer);
        self.backend.reset(limiter, peer)
    }

    fn health(&self) -> HealthReport {
        self.backend.health().report()
    }
}
