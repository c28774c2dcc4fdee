//! Who decides: this process (on the limiter's states, in its heap or a shared region: [`Local`]), or
//! Redis, exactly ([`Exact`]) or with usage synced between nodes ([`Synced`]). A store owns the limiter
//! whose rules route each request and whose counters count it; where that limiter's states live is the
//! other seam (`state_map::StatesIn`).
//!
//! [`StateStore`] is the contract; [`Store`] dispatches to each implementation with a `match` rather
//! than a trait object, so that the local decision stays inlined in the hot path. A new store is one
//! file and one variant, not a branch at each call site.

mod exact;
mod leased;
mod local;
mod permits;
mod standing;
mod synced;

use std::sync::Arc;

pub use exact::Exact;
pub use leased::Leased;
pub use local::Local;
pub use synced::{SyncReport, Synced};

use crate::adaptive::Sample;
use crate::backend::health::HealthReport;
use crate::backend::Spec;
use crate::error::{Error, Result};
use crate::limiter::{AdaptiveAdmission, Decision, Limiter, Receipt, RemoteKey, Request, Target};
use crate::rate::Rate;

/// A store's decision, and what its caller should log once (an outage of a remote store began or
/// ended).
#[derive(Debug)]
pub struct Answer {
    pub decision: Decision,
    pub notice: Option<String>,
}

impl From<Decision> for Answer {
    #[inline]
    fn from(decision: Decision) -> Self {
        Self { decision, notice: None }
    }
}

/// Where a decision that waits on I/O hands its answer (on the store's own thread).
pub type Later = Box<dyn FnOnce(Result<Answer>) + Send>;

/// What every store does. Its limiter holds the rules, the quotas and the counters every store shares,
/// and this process's states, which every default method decides on (a store that keeps its states
/// elsewhere overrides them). A store never raises into the caller's request unless its settings ask
/// for it (`on_error="raise"`).
pub trait StateStore: Send + Sync {
    /// The limiter the store decides for.
    fn limiter(&self) -> &Arc<Limiter>;

    /// Whether a decision waits on I/O: callers then let other threads run meanwhile, and asyncio
    /// awaits [`StateStore::decide_later`] instead of blocking its loop.
    fn waits_on_io(&self) -> bool {
        false
    }

    /// Whether the store replays the moves memory made at a change of limits (see `LimitMove`): it is
    /// then handed them when a key's quota changes ([`StateStore::moved`]).
    fn replays_moves(&self) -> bool {
        false
    }

    /// Decides `peer`'s request (admits, reserves a later slot for a waiter, or refuses).
    ///
    /// # Errors
    /// A `Target::Group` that names no group; a remote store that cannot answer under `on_error="raise"`.
    #[inline]
    fn decide(&self, peer: &str, target: Target<'_>, request: Request) -> Result<Answer> {
        Ok(self.limiter().decide(peer, target, request)?.into())
    }

    /// The decision of a request routed by `path` on the states this process holds, for a store that
    /// does not wait on I/O: the hot path of `allow` and `check`, with no `Target` built and the
    /// decision returned as it is, not in a `Result` or an `Option` (either cost 3 to 12 ns a call).
    /// A store keeping its states in this process's map (memory, sync mode) takes this one; a remote
    /// store is never asked (it waits on I/O), and here would give what `on_error="local"` decides.
    #[inline]
    fn decide_here(&self, peer: &str, path: Option<&str>, request: Request) -> Decision {
        self.limiter().decide_path(peer, path, request)
    }

    /// [`StateStore::decide`] when it needs no I/O (a lease held here decides), else `None`: a store that
    /// waits on I/O is asked this first, so that a decision made at once keeps the caller's thread (no
    /// release of the GIL).
    fn decide_at_once(&self, peer: &str, target: Target<'_>, request: Request) -> Option<Result<Answer>> {
        let _ = (peer, target, request);
        None
    }

    /// [`StateStore::decide`] without waiting: `Some` when decided at once, else `done` gets the answer.
    ///
    /// # Errors
    /// As [`StateStore::decide`], when decided at once.
    fn decide_later(&self, peer: &str, target: Target<'_>, request: Request, done: Later) -> Result<Option<Answer>> {
        let _ = done;
        self.decide(peer, target, request).map(Some)
    }

    /// Gives `n` back to the key's rate limits (a handler's manual reduction); false when nothing limits
    /// the request or its group disables reduction.
    ///
    /// # Errors
    /// As [`StateStore::decide`].
    fn reduce(&self, peer: &str, target: Target<'_>, n: u64) -> Result<bool> {
        self.limiter().reduce(peer, target, n)
    }

    /// A server's word for `peer`: at most `remaining` more before `times.0` ns from now, heard in reply
    /// to a request admitted `times.1` ns ago; taken by the group's fixed windows ([`Limiter::cap`]): true
    /// when one took it.
    ///
    /// # Errors
    /// As [`StateStore::decide`]; a group without a fixed window.
    fn cap(&self, peer: &str, target: Target<'_>, remaining: u64, times: (u64, u64)) -> Result<bool> {
        self.limiter().cap(peer, target, remaining, times.0, times.1)
    }

    /// Gives back the slot of a wait that did not end (timeout, cancel), as its `receipt` says.
    ///
    /// # Errors
    /// As [`StateStore::decide`].
    fn refund(&self, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        self.limiter().refund(peer, target, cost, receipt)
    }

    /// Releases `cost` concurrency permits (a request ended).
    ///
    /// # Errors
    /// As [`StateStore::decide`].
    fn release(&self, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        self.limiter().release(peer, target, cost)
    }

    /// Sets `peer`'s quota in `group` (`None`: the rule's rate), moving the key's states to it.
    ///
    /// # Errors
    /// An unknown group, one without a rate limit, a rate that does not fit; a remote store that cannot
    /// answer under `on_error="raise"`.
    fn set_quota(&self, peer: &str, group: &str, rate: Option<Rate>) -> Result<()> {
        self.limiter().set_quota(peer, group, rate)
    }

    /// Memory moved `peer`'s states in `key`'s group (a fetched quota landed): a remote store moves its own.
    ///
    /// # Errors
    /// A remote store that cannot answer under `on_error="raise"`.
    fn moved(&self, peer: &str, key: &RemoteKey) -> Result<()> {
        let _ = (peer, key);
        Ok(())
    }

    /// Forgets `peer`'s states (every peer's with `None`), here and where the store keeps them.
    ///
    /// # Errors
    /// A remote store did not carry it out (whatever `on_error` says).
    fn reset(&self, peer: Option<&str>) -> Result<()> {
        self.limiter().reset(peer);
        Ok(())
    }

    /// Round trips, errors and outages of a remote store (nothing for a local one).
    fn health(&self) -> HealthReport {
        HealthReport::default()
    }

    /// Pushes this node's usage and absorbs the others' now (sync mode).
    ///
    /// # Errors
    /// A store that does not sync, or Redis did not answer.
    fn sync_now(&self) -> Result<SyncReport> {
        Err(Error::value("backend", "sync_now needs backend=rk.Redis(..., mode='sync') or mode='lease'"))
    }
}

/// The stores a limiter's decisions can be made in.
#[derive(Debug)]
pub enum Store {
    /// This process decides (`backend=None`, or `rk.Shared(...)`: the limiter's states are then in a
    /// shared region).
    Local(Local),
    /// Redis decides each request atomically (`mode="exact"`).
    Exact(Exact),
    /// This process decides from leases of the keys' budgets that Redis grants (`mode="lease"`).
    Leased(Leased),
    /// This process decides; Redis sums the nodes' usage (`mode="sync"`).
    Synced(Synced),
}

/// Calls `$method` on whichever store this is.
macro_rules! each_store {
    ($store:expr, $s:ident => $call:expr) => {
        match $store {
            Store::Local($s) => $call,
            Store::Exact($s) => $call,
            Store::Leased($s) => $call,
            Store::Synced($s) => $call,
        }
    };
}

impl Store {
    /// The store `spec` describes (`None`: this process), deciding for `limiter`, whose limits it may
    /// bound (exact mode refuses limits its script cannot decide exactly, now and whenever they are
    /// installed). Sync mode over a limiter whose states are in a shared region would let a machine's
    /// workers share and machines sync; it works here, but `rk.Limiter` takes one backend, so Python
    /// does not ask for it yet.
    ///
    /// # Errors
    /// A bad URL or option, or a limit the store cannot hold, named by its field.
    pub fn open(limiter: Arc<Limiter>, spec: Option<&Spec>) -> Result<Self> {
        match spec {
            None => Ok(Self::Local(Local::new(limiter))),
            Some(spec) if spec.sync_interval.is_some() => Ok(Self::Synced(Synced::open(limiter, spec)?)),
            Some(spec) if spec.lease_span.is_some() => {
                Ok(Self::Leased(Leased::open(limiter, spec, spec.lease_span.unwrap_or_default())?))
            }
            Some(spec) => Ok(Self::Exact(Exact::open(limiter, spec)?)),
        }
    }

    /// Releases `cost` permits of a request that ended, its adaptive limits learning from `sample`.
    /// The adaptive gates are this process's whatever the store (see `limiter::adaptive`).
    ///
    /// # Errors
    /// As [`StateStore::release`].
    pub fn release_sampled(&self, peer: &str, target: Target<'_>, cost: u64, sample: Option<Sample>) -> Result<()> {
        if self.limiter().release_adaptive(peer, target, cost, sample)? {
            // Taken in this process's states (see `Store::decide`).
            return self.limiter().release(peer, target, cost);
        }
        self.release(peer, target, cost)
    }

    /// The decision of a request of a group of adaptive limits alone, whose permits were `taken`: its states
    /// hold only their ceiling's gate, this process's in every store like the adaptive gates (no round trip;
    /// each machine has the ceiling to itself).
    fn decided_here(
        &self,
        peer: &str,
        target: Target<'_>,
        request: Request,
        taken: &crate::limiter::Taken,
    ) -> Result<Answer> {
        let answer = self.limiter().decide(peer, target, request).map(Answer::from);
        settled(self.limiter(), taken, answer)
    }

    /// Whether `spec` needs the core to track each key's admitted usage (sync mode pushes it).
    #[must_use]
    pub fn tracks_usage(spec: Option<&Spec>) -> bool {
        spec.is_some_and(|s| s.sync_interval.is_some())
    }
}

/// A store's `answer` for a request whose adaptive permits were `taken`: kept if admitted, given back
/// if refused or failed.
fn settled(limiter: &Limiter, taken: &crate::limiter::Taken, answer: Result<Answer>) -> Result<Answer> {
    match answer {
        Ok(mut answer) => {
            limiter.settle_adaptive(taken, &mut answer.decision);
            Ok(answer)
        }
        Err(error) => {
            limiter.cancel_adaptive(taken);
            Err(error)
        }
    }
}

impl StateStore for Store {
    #[inline]
    fn limiter(&self) -> &Arc<Limiter> {
        each_store!(self, s => s.limiter())
    }

    #[inline]
    fn waits_on_io(&self) -> bool {
        each_store!(self, s => s.waits_on_io())
    }

    fn replays_moves(&self) -> bool {
        each_store!(self, s => s.replays_moves())
    }

    // Every decision that takes permits passes its group's adaptive limits first (see
    // `limiter::adaptive`); `decide_here` is asked for rate limits only (`allow` and `check`).
    #[inline]
    fn decide(&self, peer: &str, target: Target<'_>, request: Request) -> Result<Answer> {
        if !self.limiter().adaptive_may_apply(request) {
            return each_store!(self, s => s.decide(peer, target, request));
        }
        match self.limiter().admit_adaptive(peer, target, request)? {
            AdaptiveAdmission::None => each_store!(self, s => s.decide(peer, target, request)),
            AdaptiveAdmission::Refused(decision) => Ok(decision.into()),
            AdaptiveAdmission::Taken(taken) if taken.ceiling_only => self.decided_here(peer, target, request, &taken),
            AdaptiveAdmission::Taken(taken) => {
                let answer = each_store!(self, s => s.decide(peer, target, request));
                settled(self.limiter(), &taken, answer)
            }
        }
    }

    #[inline]
    fn decide_here(&self, peer: &str, path: Option<&str>, request: Request) -> Decision {
        each_store!(self, s => s.decide_here(peer, path, request))
    }

    fn decide_at_once(&self, peer: &str, target: Target<'_>, request: Request) -> Option<Result<Answer>> {
        if !self.limiter().adaptive_may_apply(request) {
            return each_store!(self, s => s.decide_at_once(peer, target, request));
        }
        let taken = match self.limiter().admit_adaptive(peer, target, request) {
            Err(error) => return Some(Err(error)),
            Ok(AdaptiveAdmission::None) => return each_store!(self, s => s.decide_at_once(peer, target, request)),
            Ok(AdaptiveAdmission::Refused(decision)) => return Some(Ok(decision.into())),
            Ok(AdaptiveAdmission::Taken(taken)) => taken,
        };
        if taken.ceiling_only {
            return Some(self.decided_here(peer, target, request, &taken));
        }
        let answer = each_store!(self, s => s.decide_at_once(peer, target, request));
        if answer.is_none() {
            // The store must wait on I/O: `decide` takes the permits again.
            self.limiter().cancel_adaptive(&taken);
        }
        answer.map(|answer| settled(self.limiter(), &taken, answer))
    }

    fn decide_later(&self, peer: &str, target: Target<'_>, request: Request, done: Later) -> Result<Option<Answer>> {
        if !self.limiter().adaptive_may_apply(request) {
            return each_store!(self, s => s.decide_later(peer, target, request, done));
        }
        let taken = match self.limiter().admit_adaptive(peer, target, request)? {
            AdaptiveAdmission::None => return each_store!(self, s => s.decide_later(peer, target, request, done)),
            AdaptiveAdmission::Refused(decision) => return Ok(Some(decision.into())),
            AdaptiveAdmission::Taken(taken) if taken.ceiling_only => {
                return self.decided_here(peer, target, request, &taken).map(Some);
            }
            AdaptiveAdmission::Taken(taken) => std::sync::Arc::new(taken),
        };
        let (limiter, later) = (std::sync::Arc::clone(self.limiter()), std::sync::Arc::clone(&taken));
        let done: Later = Box::new(move |answer| done(settled(&limiter, &later, answer)));
        match each_store!(self, s => s.decide_later(peer, target, request, done)) {
            Ok(Some(answer)) => settled(self.limiter(), &taken, Ok(answer)).map(Some),
            Ok(None) => Ok(None),
            Err(error) => {
                self.limiter().cancel_adaptive(&taken);
                Err(error)
            }
        }
    }

    fn reduce(&self, peer: &str, target: Target<'_>, n: u64) -> Result<bool> {
        each_store!(self, s => s.reduce(peer, target, n))
    }

    fn cap(&self, peer: &str, target: Target<'_>, remaining: u64, times: (u64, u64)) -> Result<bool> {
        each_store!(self, s => s.cap(peer, target, remaining, times))
    }

    fn refund(&self, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        each_store!(self, s => s.refund(peer, target, cost, receipt))
    }

    fn release(&self, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        each_store!(self, s => s.release(peer, target, cost))
    }

    fn set_quota(&self, peer: &str, group: &str, rate: Option<Rate>) -> Result<()> {
        each_store!(self, s => s.set_quota(peer, group, rate))
    }

    fn moved(&self, peer: &str, key: &RemoteKey) -> Result<()> {
        each_store!(self, s => s.moved(peer, key))
    }

    fn reset(&self, peer: Option<&str>) -> Result<()> {
        each_store!(self, s => s.reset(peer))
    }

    fn health(&self) -> HealthReport {
        each_store!(self, s => s.health())
    }

    fn sync_now(&self) -> Result<SyncReport> {
        each_store!(self, s => s.sync_now())
    }
}
