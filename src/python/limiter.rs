//! `ratekeeper._core.Limiter`: the core's decisions for Python; the Python subclass adds waiting.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use super::aio::{Completion, PyCompletions};
use super::args::{self, field, nanos, optional_text, positive_int, secs, strings, target, text, type_name, Cost};
use super::fetch::{finish, time_left, PyFetchJob, PyFetchQueue, PyFetchResult};
use super::scope::{with_scope_request, ScopeKey};
use super::stats::stats_dict;
use super::store::open_store;
use super::values::{
    limit_arg, PyDecision, PyGroupPolicy, PyManualClock, PyQuotaInfo, PyQuotas, PyRate, PyResolution, PyRule,
    DEFAULT_QUOTA_TIMEOUT, DEFAULT_QUOTA_TTL, DEFAULT_QUOTA_WORKERS,
};
use crate::clock::Clock;
use crate::config::{Config, RuleSpec, RulesConfig};
use crate::error::Error;
use crate::limiter::{self, Limiter, OwnedTarget, Receipt, Request, Take, Target};
use crate::quota::QuotaSettings;
use crate::rules::{Route, MAX_GROUP_NAMES};
use crate::store::{Answer, StateStore, Store};

const NAMES_PER_CHUNK: usize = 64;

/// What a store asks to log once: an outage of its backend began or ended.
pub(super) fn log_notice(py: Python<'_>, answer: &Answer) {
    if let Some(notice) = &answer.notice {
        log(py, "warning", notice);
    }
}

/// A message on the `ratekeeper` logger (a failure to log is not the caller's problem).
fn log(py: Python<'_>, level: &str, message: &str) {
    let logged = py
        .import("logging")
        .and_then(|logging| logging.call_method1("getLogger", ("ratekeeper",)))
        .and_then(|logger| logger.call_method1(level, (message,)));
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}

type NameChunk = [OnceLock<Py<PyString>>; NAMES_PER_CHUNK];

/// Interned group names by group id, filled on first use and never changed (an id keeps its name for
/// the limiter's life): reading one is an atomic load or two, with no lock shared between threads. The
/// first 64 ids (most limiters have no more groups) need no chunk to be found first.
struct GroupNames {
    first: NameChunk,
    rest: Box<[OnceLock<Box<NameChunk>>]>,
}

impl GroupNames {
    fn new() -> Self {
        let rest = (1..MAX_GROUP_NAMES / NAMES_PER_CHUNK).map(|_| OnceLock::new()).collect();
        Self { first: std::array::from_fn(|_| OnceLock::new()), rest }
    }

    #[inline]
    fn get(&self, py: Python<'_>, id: u32, limiter: &Limiter) -> Py<PyString> {
        let id = id as usize;
        let cell = match id.checked_sub(NAMES_PER_CHUNK) {
            None => &self.first[id],
            Some(later) => {
                let chunk = self.rest[later / NAMES_PER_CHUNK]
                    .get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())));
                &chunk[later % NAMES_PER_CHUNK]
            }
        };
        if let Some(name) = cell.get() {
            return name.clone_ref(py);
        }
        Self::intern(py, cell, id, limiter)
    }

    /// Made outside the cell: another thread may set it first, with the same name.
    #[cold]
    fn intern(py: Python<'_>, cell: &OnceLock<Py<PyString>>, id: usize, limiter: &Limiter) -> Py<PyString> {
        let name = limiter.group_name(u32::try_from(id).unwrap_or(u32::MAX)).unwrap_or_else(|| "?".to_owned());
        let _ = cell.set(PyString::intern(py, &name).unbind());
        cell.get().map_or_else(|| PyString::intern(py, &name).unbind(), |n| n.clone_ref(py))
    }
}

/// A slot reserved by `throttle` / `athrottle`: how long to wait for it, and what gives it back.
#[pyclass(frozen, name = "_Reservation", module = "ratekeeper._core")]
pub struct PyReservation {
    #[pyo3(get)]
    decision: Py<PyDecision>,
    /// Seconds to wait before going ahead.
    #[pyo3(get)]
    wait: f64,
    /// When the wait ends, on the limiter's clock.
    #[pyo3(get)]
    deadline_ns: u64,
    receipt: Receipt,
    /// What was reserved, for `_refund` to give back.
    request: Reserved,
}

/// The request a reservation was made for.
pub struct Reserved {
    peer: String,
    target: OwnedTarget,
    cost: u64,
}

/// What a decision takes: the private protocol's enum (`Take` in the core).
#[pyclass(frozen, eq, from_py_object, name = "_Take", module = "ratekeeper._core")]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PyTake {
    /// The rate limits only.
    #[pyo3(name = "RATES")]
    Rates,
    /// The concurrency permits only (the request already has its rate admission).
    #[pyo3(name = "PERMITS")]
    Permits,
    /// The rate limits and the permits, all or nothing.
    #[pyo3(name = "BOTH")]
    Both,
}

impl From<PyTake> for Take {
    fn from(take: PyTake) -> Self {
        match take {
            PyTake::Rates => Self::Rates,
            PyTake::Permits => Self::Permits,
            PyTake::Both => Self::RatesAndPermits,
        }
    }
}

/// The Rust half of `ratekeeper.Limiter`; the Python subclass adds the waiting methods.
#[pyclass(frozen, subclass, weakref, name = "Limiter", module = "ratekeeper._core")]
pub struct PyLimiter {
    names: GroupNames,
    clock: Option<Py<PyManualClock>>,
    quotas: Py<PyQuotas>,
    /// How long the first request of a key waits for its quota (0: not at all).
    quota_wait: Duration,
    /// Who decides, for the limiter it owns: this process (its states in its heap, or in a region shared
    /// by the machine's processes with `backend=rk.Shared(...)`), or Redis (`backend=rk.Redis(...)`).
    store: Store,
    backend: Option<Py<PyAny>>,
}

impl PyLimiter {
    /// The limiter the store decides for.
    #[inline]
    pub(super) fn core(&self) -> &Arc<Limiter> {
        self.store.limiter()
    }

    /// `quota_wait`: lets the first request of a key wait (without the GIL) for its fetch to land.
    #[inline]
    pub(super) fn wait_first_fetch(&self, py: Python<'_>, peer: &str, target: Target<'_>) {
        if !self.quota_wait.is_zero() {
            self.wait_for_quota(py, peer, target);
        }
    }

    #[inline(never)]
    fn wait_for_quota(&self, py: Python<'_>, peer: &str, target: Target<'_>) {
        if let Some(seen) = self.core().first_fetch_pending(peer, target) {
            py.detach(|| self.core().wait_first_fetch(peer, target, seen, self.quota_wait));
        }
    }

    /// Runs a store operation, letting other Python threads run while it waits on I/O.
    #[inline]
    pub(super) fn in_store<T: Send>(&self, py: Python<'_>, op: impl FnOnce(&Store) -> T + Send) -> T {
        if self.store.waits_on_io() {
            py.detach(|| op(&self.store))
        } else {
            op(&self.store)
        }
    }

    /// The decision of `check` and `allow`. A request routed by path takes the store's hot path, with
    /// no `Target` built (a value returned through memory there cost a store-forwarding stall,
    /// measured at 5 ns a call).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn decide_now(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
        request: Request,
    ) -> PyResult<limiter::Decision> {
        let peer = args::peer(peer)?;
        let peer = &*peer;
        if group.is_none_or(PyAnyMethods::is_none) {
            let path = optional_text("path", path)?;
            self.wait_first_fetch(py, peer, Target::Path(path));
            if !self.store.waits_on_io() {
                return Ok(self.store.decide_here(peer, path, request));
            }
            return self.decide(py, peer, Target::Path(path), request);
        }
        let target = target(path, group)?;
        self.wait_first_fetch(py, peer, target);
        self.decide(py, peer, target, request)
    }

    /// A decision for `peer` in its store, logging what the store asks to. Out of line: the hot path of
    /// `allow` and `check` (`decide_here`) stays small (inlined, it cost 5 to 12 ns a call).
    #[inline(never)]
    fn decide(&self, py: Python<'_>, peer: &str, target: Target<'_>, request: Request) -> PyResult<limiter::Decision> {
        let answer = match self.store.decide_at_once(peer, target, request) {
            Some(answer) => answer?,
            None => self.in_store(py, |store| store.decide(peer, target, request))?,
        };
        log_notice(py, &answer);
        Ok(answer.decision)
    }

    /// A web request at `cost`: the fields `(ietf, legacy, raw)` of an allowed one holding no permits (no
    /// `Decision` made), or the `Decision` of any other, carrying its key (`Decision._peer`).
    fn admit_web<'py>(
        &self,
        py: Python<'py>,
        peer: &str,
        target: Target<'_>,
        cost: u64,
        (ietf, legacy, raw): (bool, bool, bool),
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = Request::new(cost).reporting().taking(Take::RatesAndPermits);
        let decision = self.decide(py, peer, target, request)?;
        let mut decision = self.decision(py, &decision);
        if decision.is_allowed() && !decision.holds_permits() {
            return Ok(decision.field_tuple(py, ietf, legacy, raw)?.into_any());
        }
        // A refusal or permits held: the adapter's receipt needs the key, which it need not read again.
        decision.peer = Some(PyString::new(py, peer).unbind());
        Ok(Bound::new(py, decision)?.into_any())
    }

    fn reservation(&self, py: Python<'_>, decision: &limiter::Decision, request: Reserved) -> PyResult<PyReservation> {
        Ok(PyReservation {
            decision: Py::new(py, self.decision(py, decision))?,
            wait: secs(decision.outcome.wait_ns),
            deadline_ns: decision.now.saturating_add(decision.outcome.wait_ns),
            receipt: decision.receipt,
            request,
        })
    }

    /// Completes an asyncio `future` with a store's decision (on the loop's thread), unless it was
    /// cancelled meanwhile; logs what the store asks to, as the blocking path does.
    ///
    /// # Errors
    /// The future's methods raised (a closed loop).
    pub fn complete_future(
        &self,
        py: Python<'_>,
        future: &Bound<'_, PyAny>,
        answer: Result<Answer, Error>,
        request: Reserved,
    ) -> PyResult<()> {
        if let Ok(answer) = &answer {
            log_notice(py, answer);
        }
        if future.call_method0(intern!(py, "done"))?.is_truthy()? {
            return Ok(());
        }
        match answer {
            Ok(answer) => {
                let reservation = self.reservation(py, &answer.decision, request)?;
                future.call_method1(intern!(py, "set_result"), (reservation,))?
            }
            Err(error) => future.call_method1(intern!(py, "set_exception"), (PyErr::from(error).into_value(py),))?,
        };
        Ok(())
    }

    #[inline]
    pub(super) fn decision(&self, py: Python<'_>, d: &limiter::Decision) -> PyDecision {
        let group = match (d.route, d.group) {
            (Route::Group(_), Some(id)) => Some(self.names.get(py, id, self.core())),
            _ => None,
        };
        PyDecision::new(d, group)
    }

    fn settings(py: Python<'_>, quotas: &PyQuotas, max_keys: usize) -> Result<QuotaSettings, Error> {
        let _ = py;
        Ok(QuotaSettings {
            provider: quotas.provider.is_some(),
            failsafe: quotas.failsafe.as_ref().map(|r| r.inner),
            ttl_ns: nanos("quotas.ttl", Some(quotas.ttl))?,
            timeout_ns: nanos("quotas.timeout", Some(quotas.timeout))?,
            // Queued fetches keep their records: an eighth of the bound at most.
            queue_capacity: (max_keys / 8).clamp(16, 10_000),
        })
    }
}

fn rule_specs(rules: &Bound<'_, PyAny>) -> PyResult<Vec<RuleSpec>> {
    let iter = rules
        .try_iter()
        .map_err(|_| Error::type_error("rules", format!("must be a list of Rule, got {}", type_name(rules))))?;
    iter.enumerate()
        .map(|(i, item)| {
            let item = item?;
            let rule = item.cast::<PyRule>().map_err(|_| {
                Error::type_error(format!("rules[{i}]"), format!("must be a Rule, got {}", type_name(&item)))
            })?;
            Ok(rule.get().spec.clone())
        })
        .collect()
}

/// The quota settings of `quotas=` (`None`: no quotas, the defaults of `Quotas()`).
fn quota_settings(py: Python<'_>, quotas: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyQuotas>> {
    match quotas.filter(|q| !q.is_none()) {
        Some(quotas) => Ok(quotas
            .cast::<PyQuotas>()
            .map_err(|_| {
                Error::type_error("quotas", format!("must be a ratekeeper.Quotas, got {}", type_name(quotas)))
            })?
            .clone()
            .unbind()),
        None => Py::new(
            py,
            PyQuotas::new(None, None, (DEFAULT_QUOTA_TTL, DEFAULT_QUOTA_TIMEOUT, DEFAULT_QUOTA_WORKERS, 0.0))?,
        ),
    }
}

#[pymethods]
impl PyLimiter {
    #[new]
    #[pyo3(signature = (
        rate=None, *, rules=None, exempt_peers=None, exempt_paths=None, max_keys=1_000_000, burst=None,
        algorithm="gcra", clock=None, quotas=None, track_usage=false, backend=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        rate: Option<&Bound<'_, PyAny>>,
        rules: Option<&Bound<'_, PyAny>>,
        exempt_peers: Option<&Bound<'_, PyAny>>,
        exempt_paths: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::max_keys)] max_keys: usize,
        burst: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::algorithm)] algorithm: &str,
        clock: Option<&Bound<'_, PyAny>>,
        quotas: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::track_usage)] track_usage: bool,
        backend: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut specs = match rules.filter(|r| !r.is_none()) {
            Some(rules) => rule_specs(rules)?,
            None => Vec::new(),
        };
        match rate.filter(|r| !r.is_none()) {
            Some(rate) => specs.push(RuleSpec::single("", "default", limit_arg(rate, burst, algorithm)?)?),
            None if rules.is_none_or(PyAnyMethods::is_none) => {
                return Err(Error::value("rate", "give a rate (e.g. Limiter('10/min')) or rules=[Rule(...)]").into())
            }
            None => {}
        }
        let (clock, manual) = match clock.filter(|c| !c.is_none()) {
            None => (Clock::monotonic(), None),
            Some(c) => {
                let manual = c.cast::<PyManualClock>().map_err(|_| {
                    Error::type_error("clock", format!("must be a ManualClock or None, got {}", type_name(c)))
                })?;
                (Clock::Manual(manual.get().inner.clone()), Some(manual.clone().unbind()))
            }
        };
        let quotas = quota_settings(py, quotas)?;
        let settings = Self::settings(py, quotas.get(), max_keys)?;
        let quota_wait = Duration::from_nanos(nanos("quota_wait", Some(quotas.get().wait))?.min(u64::MAX / 2));
        let rules = RulesConfig {
            rules: specs,
            exempt_peers: strings("exempt_peers", exempt_peers)?,
            exempt_paths: strings("exempt_paths", exempt_paths)?,
        };
        let config = Config { rules, max_keys, quotas: settings, track_usage };
        let store = open_store(py, backend, config, clock, manual.is_some())?;
        let backend = backend.filter(|b| !b.is_none()).map(|b| b.clone().unbind());
        Ok(Self { names: GroupNames::new(), clock: manual, quotas, quota_wait, store, backend })
    }

    /// Decides a request now and says why: a `Decision` (truthy when allowed). Never blocks; a refusal
    /// changes no state. `group=` decides for that group by name instead of routing `path`.
    #[pyo3(signature = (peer, path=None, *, cost=Cost(1), group=None), text_signature = "(self, peer, path=None, *, cost=1, group=None)")]
    fn check(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        let decision = self.decide_now(py, peer, path, group, Request::new(cost.0).reporting())?;
        Ok(self.decision(py, &decision))
    }

    /// What `check` would decide now, counting nothing: the key's states are left as they are and its
    /// report is what it has left before the request.
    #[pyo3(signature = (peer, path=None, *, cost=Cost(1), group=None), text_signature = "(self, peer, path=None, *, cost=1, group=None)")]
    fn peek(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        let decision = self.decide_now(py, peer, path, group, Request::peeking(cost.0))?;
        Ok(self.decision(py, &decision))
    }

    /// Decides a request now: True when allowed. The fastest call; never blocks.
    #[pyo3(signature = (peer, path=None, *, cost=Cost(1), group=None), text_signature = "(self, peer, path=None, *, cost=1, group=None)")]
    fn allow(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        Ok(self.decide_now(py, peer, path, group, Request::new(cost.0))?.outcome.allowed)
    }

    /// Admits now or reserves a later slot within `timeout` seconds (None: any wait), taking what `take`
    /// says; with `wait_quota`, a key's first request waits for its quota first.
    #[pyo3(
        signature = (peer, path=None, *, group=None, cost=Cost(1), timeout, take=PyTake::Rates, wait_quota=true),
        text_signature = "(self, peer, path=None, *, group=None, cost=1, timeout, take=..., wait_quota=True)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn _reserve(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        #[pyo3(from_py_with = field::optional_timeout)] timeout: Option<f64>,
        take: PyTake,
        wait_quota: bool,
    ) -> PyResult<PyReservation> {
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        if wait_quota {
            self.wait_first_fetch(py, peer, target);
        }
        let request = Request::new(cost.0).reporting().waiting(nanos("timeout", timeout)?).taking(take.into());
        let decision = self.decide(py, peer, target, request)?;
        self.reservation(py, &decision, Reserved { peer: peer.to_owned(), target: target.into(), cost: cost.0 })
    }

    /// `_reserve` for asyncio: completes `future` with the `_Reservation` through `completions` (the
    /// running loop's channel) once the store answers, never blocking the loop; at once when the
    /// store decides without I/O.
    #[pyo3(
        signature = (peer, path=None, *, group=None, cost=Cost(1), timeout, take=PyTake::Rates, report=true, counts_refusal=true, future, completions),
        text_signature = "(self, peer, path=None, *, group=None, cost=1, timeout, take=..., report=True, counts_refusal=True, future, completions)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn _reserve_later(
        slf: &Bound<'_, Self>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        #[pyo3(from_py_with = field::optional_timeout)] timeout: Option<f64>,
        take: PyTake,
        report: bool,
        counts_refusal: bool,
        future: &Bound<'_, PyAny>,
        completions: &Bound<'_, PyCompletions>,
    ) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        let mut request = Request::new(cost.0).waiting(nanos("timeout", timeout)?).taking(take.into());
        if report {
            request = request.reporting();
        }
        if !counts_refusal {
            request = request.looking();
        }
        let reserved = || Reserved { peer: peer.to_owned(), target: target.into(), cost: cost.0 };
        let (owner, pending) = (slf.clone().unbind(), future.clone().unbind());
        let (sender, later) = (Arc::clone(&completions.get().sender), reserved());
        // On the store's thread, without the GIL: the loop's thread completes the future.
        let done = Box::new(move |answer| {
            sender.send(Completion { limiter: owner, future: pending, answer, request: later });
        });
        match this.store.decide_later(peer, target, request, done) {
            Ok(Some(answer)) => this.complete_future(py, future, Ok(answer), reserved()),
            Ok(None) => Ok(()),
            Err(error) => this.complete_future(py, future, Err(error), reserved()),
        }
    }

    /// Gives back the slot of a reservation whose wait did not end (timeout, cancel, Ctrl-C).
    fn _refund(&self, py: Python<'_>, reservation: &Bound<'_, PyReservation>) -> PyResult<()> {
        let reservation = reservation.get();
        let Reserved { peer, target, cost } = &reservation.request;
        let receipt = reservation.receipt;
        Ok(self.in_store(py, |store| store.refund(peer, target.borrow(), *cost, receipt))?)
    }

    /// Takes what `take` says of the group's limits now (the concurrency permits, with or without the
    /// rate limits' admission).
    #[pyo3(
        signature = (peer, path=None, *, group=None, cost=Cost(1), take=PyTake::Permits),
        text_signature = "(self, peer, path=None, *, group=None, cost=1, take=...)"
    )]
    fn _acquire(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        take: PyTake,
    ) -> PyResult<PyDecision> {
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        let decision = self.decide(py, peer, target, Request::new(cost.0).reporting().taking(take.into()))?;
        Ok(self.decision(py, &decision))
    }

    /// `_acquire(peer, path, take=BOTH)` for a web adapter's hot path: a request allowed without
    /// permits gets its response's fields (`Decision._fields`, or `_raw_fields` when `raw`) and no
    /// `Decision` is made; any other request gets its `Decision`. The options come first, for a
    /// `functools.partial` to hold them.
    fn _admit_web<'py>(
        &self,
        py: Python<'py>,
        ietf: bool,
        legacy: bool,
        raw: bool,
        peer: &Bound<'py, PyAny>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (peer, target) = (args::peer(peer)?, target(Some(path), None)?);
        let peer = &*peer;
        self.admit_web(py, peer, target, 1, (ietf, legacy, raw))
    }

    /// `_admit_web` of a request a view's wrapper decides (WSGI fields): in the group `group` at `cost`
    /// when `group` is given, else by the rules on `path`. None, deciding nothing, while the limiter is
    /// off. The options come first, for a `functools.partial` to hold them.
    #[pyo3(signature = (ietf, legacy, group, cost, peer, path=None))]
    #[allow(clippy::too_many_arguments)]
    fn _admit_view<'py>(
        &self,
        py: Python<'py>,
        ietf: bool,
        legacy: bool,
        group: Option<&Bound<'py, PyAny>>,
        cost: Cost,
        peer: &Bound<'py, PyAny>,
        path: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if !self.core().enabled() {
            return Ok(None);
        }
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        self.admit_web(py, peer, target, cost.0, (ietf, legacy, false)).map(Some)
    }

    /// `_admit_web` of an ASGI HTTP `scope` (raw fields), its key read from the scope: the request header
    /// named `header` (lower-case bytes), or the client's address when `header` is None. None, deciding
    /// nothing, when the scope is not one this reads or carries no key: the caller reads it in Python.
    fn _admit_scope<'py>(
        &self,
        py: Python<'py>,
        ietf: bool,
        legacy: bool,
        header: Option<&Bound<'py, PyBytes>>,
        scope: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = match header {
            Some(name) => ScopeKey::Header(name.as_bytes()),
            None => ScopeKey::ClientAddress,
        };
        with_scope_request(scope, key, |peer, path| {
            self.admit_web(py, peer, Target::Path(Some(path)), 1, (ietf, legacy, true))
        })
    }

    /// Releases `cost` of the concurrency permits `_acquire` took (a request ended). With `admitted_at`
    /// (the admission's `Decision._admitted_at`), the group's adaptive limits learn from the request's
    /// latency until now and its `outcome` ("ok", "dropped" or "timeout").
    #[pyo3(
        signature = (peer, path=None, *, group=None, cost=Cost(1), admitted_at=None, outcome="ok"),
        text_signature = "(self, peer, path=None, *, group=None, cost=1, admitted_at=None, outcome='ok')"
    )]
    #[allow(clippy::too_many_arguments)]
    fn _release(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        admitted_at: Option<u64>,
        outcome: &str,
    ) -> PyResult<()> {
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        let outcome = crate::adaptive::Outcome::parse(outcome)?;
        let sample = admitted_at
            .map(|at| crate::adaptive::Sample { latency_ns: self.core().now_ns().saturating_sub(at), outcome });
        match self.in_store(py, |store| store.release_sampled(peer, target, cost.0, sample)) {
            // Released to the group that took them (an admission's receipt), which a reload removed since:
            // its permits went with it, and nothing is left to give back.
            Err(_) if matches!(target, Target::Group(name) if self.core().rules().group_index(name).is_err()) => Ok(()),
            released => Ok(released?),
        }
    }

    /// Gives `n` tokens back to the key's rate limits (a handler's manual reduction): every rate limit
    /// under policy "all", the last one (the fallback) under "fallback". False when nothing limits the
    /// request or the group disables reduction.
    #[pyo3(signature = (peer, path=None, n=1, *, group=None))]
    fn reduce(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::n)] n: u64,
        group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        Ok(self.in_store(py, |store| store.reduce(peer, target, n))?)
    }

    /// A server's word for the key: at most `remaining` more before `reset_after` seconds from now,
    /// heard in reply to a request admitted `age` seconds ago; taken by the group's fixed windows (true
    /// when one took it).
    #[pyo3(signature = (peer, path=None, *, group=None, remaining, reset_after, age = 0))]
    #[allow(clippy::too_many_arguments)]
    fn cap(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::remaining)] remaining: u64,
        #[pyo3(from_py_with = field::reset_after)] reset_after: u64,
        #[pyo3(from_py_with = field::age)] age: u64,
    ) -> PyResult<bool> {
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        let times = (reset_after, age);
        Ok(self.in_store(py, |store| store.cap(peer, target, remaining, times))?)
    }

    /// Where the request of `peer` goes and what limits it (its per-key quota applied); None when it is
    /// exempt, routed nowhere, or the limiter is off.
    #[pyo3(signature = (peer, path=None, *, group=None))]
    fn resolve(
        &self,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyResolution>> {
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        Ok(self.core().resolve(peer, target)?.map(PyResolution::from))
    }

    /// What a `RateLimit-Policy` header says of `group`: quota and window (with `peer`, its quota).
    #[pyo3(signature = (group, peer=None))]
    fn group_policy(&self, group: &Bound<'_, PyAny>, peer: Option<&Bound<'_, PyAny>>) -> PyResult<PyGroupPolicy> {
        let group = text("group", group)?;
        Ok(self.core().group_policy(group, args::optional_peer(peer)?.as_deref())?.into())
    }

    /// Stops limiting: every request is allowed (and not counted) until `on()`.
    fn off(&self) {
        self.core().set_enabled(false);
    }

    /// Limits again after `off()`.
    fn on(&self) {
        self.core().set_enabled(true);
    }

    /// `rk.Shared`: checks at the next decision that the region's file is still at its path, rather than
    /// at the first decision a quarter of a second after the last check (tests).
    fn _check_region(&self) {
        self.core().check_region_now();
    }

    /// Whether decisions wait on I/O (Redis exact mode), so that the asyncio twins await them; false
    /// when this process decides (memory, sync mode).
    #[getter]
    fn _waits_on_io(&self) -> bool {
        self.store.waits_on_io()
    }

    /// The backend the states live in (`None`: this process).
    #[getter]
    fn backend(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.backend.as_ref().map(|b| b.clone_ref(py))
    }

    /// Round trips to the backend that failed (each decided by `on_error`), and whether the last did.
    #[getter]
    fn backend_errors(&self) -> (u64, bool) {
        let health = self.store.health();
        (health.errors, health.down)
    }

    /// Sync mode: pushes this node's usage and absorbs the others' now, without waiting for the timer.
    /// Returns (keys synced, units the other nodes used that were charged here).
    fn sync_now(&self, py: Python<'_>) -> PyResult<(usize, u64)> {
        let done = py.detach(|| self.store.sync_now())?;
        Ok((done.keys, done.absorbed))
    }

    #[getter]
    fn enabled(&self) -> bool {
        self.core().enabled()
    }

    #[getter]
    fn clock(&self, py: Python<'_>) -> Option<Py<PyManualClock>> {
        self.clock.as_ref().map(|c| c.clone_ref(py))
    }

    #[getter]
    fn max_keys(&self) -> usize {
        self.core().max_keys()
    }

    #[getter]
    fn groups(&self, py: Python<'_>) -> Vec<Py<PyString>> {
        self.core().rules().groups.iter().map(|g| self.names.get(py, g.id, self.core())).collect()
    }

    /// The rules in force (after `update_rule` and `reload` too), in routing order.
    #[getter]
    fn rules(&self) -> Vec<PyRule> {
        self.core().rules().config.rules.iter().map(|spec| PyRule { spec: spec.clone() }).collect()
    }

    #[getter]
    fn exempt_peers(&self) -> Vec<String> {
        self.core().rules().config.exempt_peers.clone()
    }

    #[getter]
    fn exempt_paths(&self) -> Vec<String> {
        self.core().rules().config.exempt_paths.clone()
    }

    /// Forgets the state of `peer` in every group, or of every peer; with a backend, in Redis too (the
    /// limiter's keys there), raising `BackendUnavailable` when Redis cannot answer.
    #[pyo3(signature = (peer=None))]
    fn reset(&self, py: Python<'_>, peer: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let peer = args::optional_peer(peer)?;
        let peer = peer.as_deref();
        Ok(py.detach(|| self.store.reset(peer))?)
    }

    /// Counters and sizes, by group: a `ratekeeper.Stats` dict. Reads one shard at a time.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.store)
    }

    /// The `n` peers refused most (in `group`, or in every group), most first, from bounded sketches.
    #[pyo3(signature = (n = 10, group = None))]
    fn top_refused(
        &self,
        #[pyo3(from_py_with = field::top_n)] n: usize,
        group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(String, u64)>> {
        Ok(self.core().top_refused(n, optional_text("group", group)?)?.peers)
    }

    /// How far `top_refused`'s counts may be from the true counts (for one group: only above them).
    #[pyo3(signature = (group = None))]
    fn top_refused_error(&self, group: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        Ok(self.core().top_refused(0, optional_text("group", group)?)?.error_bound)
    }

    fn __len__(&self) -> usize {
        self.core().len()
    }

    /// Each key's admitted units since the last call, as (peer, group, units); needs `track_usage=True`.
    fn drain_pending(&self) -> PyResult<Vec<(String, String, u64)>> {
        Ok(self.core().drain_pending()?)
    }

    /// Counts `n` units that `peer` used in `group` elsewhere (another node) as used now.
    #[pyo3(signature = (peer, group, n))]
    fn absorb(&self, peer: &Bound<'_, PyAny>, group: &Bound<'_, PyAny>, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let (peer, group) = (args::peer(peer)?, text("group", group)?);
        let peer = &*peer;
        Ok(self.core().absorb(peer, group, positive_int("n", n)?)?)
    }

    #[getter]
    fn track_usage(&self) -> bool {
        self.core().tracks_usage()
    }

    #[pyo3(signature = (peer, group, rate))]
    fn set_quota(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        group: &Bound<'_, PyAny>,
        rate: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (peer, group) = (args::peer(peer)?, text("group", group)?);
        let peer = &*peer;
        let rate = if rate.is_none() { None } else { Some(PyRate::from_arg("rate", rate)?) };
        Ok(self.in_store(py, |store| store.set_quota(peer, group, rate))?)
    }

    #[pyo3(signature = (peer, group))]
    fn quota(&self, peer: &Bound<'_, PyAny>, group: &Bound<'_, PyAny>) -> PyResult<PyQuotaInfo> {
        let (peer, group) = (args::peer(peer)?, text("group", group)?);
        let peer = &*peer;
        let (info, rule_rate) = self.core().quota(peer, group)?;
        Ok(PyQuotaInfo::new(&info, rule_rate, self.core().now_ns()))
    }

    /// Whether the first fetch of `peer`'s key is still running (queued if new).
    #[pyo3(signature = (peer, path=None, *, group=None))]
    fn _quota_pending(
        &self,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        group: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let (peer, target) = (args::peer(peer)?, target(path, group)?);
        let peer = &*peer;
        Ok(self.core().first_fetch_pending(peer, target).is_some())
    }

    #[pyo3(signature = (timeout=None))]
    fn wait_quotas(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = field::optional_timeout)] timeout: Option<f64>,
    ) -> PyResult<bool> {
        let timeout = Duration::from_nanos(nanos("timeout", timeout)?.min(u64::MAX / 4));
        let deadline =
            Instant::now().checked_add(timeout).unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 32));
        let queue = Arc::clone(self.core().fetches());
        Ok(py.detach(move || queue.wait_idle(deadline)))
    }

    fn _fetch_queue(&self) -> PyFetchQueue {
        PyFetchQueue { inner: Arc::clone(self.core().fetches()) }
    }

    /// A worker starts `job` (its quota timeout counts from now); False: no longer wanted, skip it.
    fn _start_fetch(&self, job: &Bound<'_, PyFetchJob>) -> bool {
        self.core().start_fetch(&job.get().job)
    }

    /// Seconds a worker may still wait for the provider's answer to `job`.
    fn _fetch_time_left(&self, job: &Bound<'_, PyFetchJob>) -> f64 {
        time_left(self.core(), &job.get().job)
    }

    /// Hands back a fetch: the provider's `answer`, or the exception it raised as `error`.
    #[pyo3(signature = (job, answer, error=None))]
    fn _finish_fetch(
        &self,
        py: Python<'_>,
        job: &Bound<'_, PyFetchJob>,
        answer: &Bound<'_, PyAny>,
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyFetchResult {
        let job = &job.get().job;
        let (result, moved) = finish(self.core(), job, answer, error, self.store.replays_moves());
        if let Some(key) = moved {
            // A store that cannot move its states now moves them at the key's next decision.
            let _ = self.in_store(py, |store| store.moved(&job.peer, &key));
        }
        result
    }

    /// The quota settings in force.
    #[getter]
    fn quotas(&self, py: Python<'_>) -> Py<PyQuotas> {
        self.quotas.clone_ref(py)
    }

    #[getter]
    fn quota_wait(&self) -> f64 {
        self.quota_wait.as_secs_f64()
    }

    /// Changes the rate and/or burst of `group`'s first rate limit, keeping what each key used.
    #[pyo3(signature = (group, rate=None, burst=None))]
    fn update_rule(
        &self,
        group: &Bound<'_, PyAny>,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let group = text("group", group)?;
        let rate = rate.filter(|r| !r.is_none()).map(|r| PyRate::from_arg("rate", r)).transpose()?;
        let burst = burst.filter(|b| !b.is_none()).map(|b| positive_int("burst", b)).transpose()?;
        Ok(self.core().update_rule(group, rate, burst)?)
    }

    /// Replaces the rules and exemptions, keeping the state of groups that keep their name.
    #[pyo3(signature = (rules, exempt_peers=None, exempt_paths=None))]
    fn _reconfigure(
        &self,
        rules: &Bound<'_, PyAny>,
        exempt_peers: Option<&Bound<'_, PyAny>>,
        exempt_paths: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let config = RulesConfig {
            rules: rule_specs(rules)?,
            exempt_peers: strings("exempt_peers", exempt_peers)?,
            exempt_paths: strings("exempt_paths", exempt_paths)?,
        };
        Ok(self.core().reconfigure(config)?)
    }
}
