//! The in-memory store: the limiter's own lock-striped state map decides.

use crate::error::Result;
use crate::limiter::{Limiter, Receipt, Request, Target};

use super::{Answer, StateStore};

/// States in this process's memory; nothing to wait for, nothing to fail.
#[derive(Debug, Default, Clone, Copy)]
pub struct Memory;

impl StateStore for Memory {
    fn waits_on_io(&self) -> bool {
        false
    }

    #[inline]
    fn decide(&self, limiter: &Limiter, peer: &str, target: Target<'_>, request: Request) -> Result<Answer> {
        Ok(limiter.decide(peer, target, request)?.into())
    }

    fn reduce(&self, limiter: &Limiter, peer: &str, target: Target<'_>, n: u64) -> Result<bool> {
        limiter.reduce(peer, target, n)
    }

    fn refund(&self, limiter: &Limiter, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        limiter.refund(peer, target, cost, receipt)
    }

    fn release(&self, limiter: &Limiter, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        limiter.release(peer, target, cost)
    }

    fn reset(&self, limiter: &Limiter, peer: Option<&str>) -> Result<()> {
        limiter.reset(peer);
        Ok(())
    }
}
