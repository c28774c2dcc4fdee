//! The Python boundary: the only file that uses pyo3. Docstrings live in `python/ratekeeper/_core.pyi`.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::algorithm::{Kind, Limit};
use crate::clock::{Clock, ManualClock};
use crate::error::{Error, ErrorKind};
use crate::limiter::{self, Config, Limiter, Policy, Receipt, RuleSpec};
use crate::rate::{self, NANOS_PER_SEC};
use crate::rules::{self, Route};

impl From<Error> for PyErr {
    fn from(error: Error) -> Self {
        match error.kind {
            ErrorKind::Value => PyValueError::new_err(error.to_string()),
            ErrorKind::Type => PyTypeError::new_err(error.to_string()),
        }
    }
}

#[allow(clippy::cast_precision_loss)]
fn secs(ns: u64) -> f64 {
    if ns == u64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / 1e9
    }
}

/// Seconds as a duration in nanoseconds (`None` and infinity: for ever).
fn nanos(field: &str, seconds: Option<f64>) -> PyResult<u64> {
    match seconds {
        None => Ok(u64::MAX),
        Some(s) if s.is_nan() || s < 0.0 => Err(Error::value(field, format!("must be >= 0 seconds, got {s}")).into()),
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        Some(s) => Ok(if s * 1e9 >= u64::MAX as f64 { u64::MAX } else { (s * 1e9).round() as u64 }),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// The `cost` argument: a positive int, checked at the boundary.
#[derive(Clone, Copy)]
struct Cost(u64);

impl<'a, 'py> FromPyObject<'a, 'py> for Cost {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.extract::<i64>() {
            Ok(n) if n >= 1 => Ok(Self(n.unsigned_abs())),
            Ok(n) => Err(Error::value("cost", format!("must be a positive integer, got {n}")).into()),
            Err(_) if obj.is_instance_of::<pyo3::types::PyInt>() => {
                Err(Error::value("cost", format!("must be a positive integer below 2**63, got {}", &*obj)).into())
            }
            Err(_) => Err(Error::type_error("cost", format!("must be an int, got {}", type_name(&obj))).into()),
        }
    }
}

/// `count` events per `period`: `Rate("10/min")`, `Rate(10, per=60.0)`.
#[pyclass(frozen, eq, hash, name = "Rate", module = "ratekeeper._core")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyRate {
    inner: rate::Rate,
}

impl PyRate {
    /// A `Rate` from a `Rate` or a rate string; errors name `field`.
    fn from_arg(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<rate::Rate> {
        if let Ok(rate) = obj.cast::<PyRate>() {
            return Ok(rate.get().inner);
        }
        if let Ok(text) = obj.cast::<PyString>() {
            return Ok(text.to_str()?.parse::<rate::Rate>().map_err(|e| e.within(field))?);
        }
        Err(Error::type_error(field, format!("must be a rate string like '10/min' or a Rate, got {}", type_name(obj)))
            .into())
    }
}

#[pymethods]
impl PyRate {
    #[new]
    #[pyo3(signature = (spec, per=None))]
    fn py_new(spec: &Bound<'_, PyAny>, per: Option<f64>) -> PyResult<Self> {
        match per {
            None => Ok(Self { inner: Self::from_arg("rate", spec)? }),
            Some(per) => {
                let count = spec
                    .extract::<u64>()
                    .map_err(|_| Error::type_error("count", format!("must be a positive int with per=, got {spec}")))?;
                Ok(Self { inner: rate::Rate::per_seconds(count, per)? })
            }
        }
    }

    #[getter]
    fn count(&self) -> u64 {
        self.inner.count
    }

    #[getter]
    fn period(&self) -> f64 {
        self.inner.period_secs()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        format!("Rate('{}')", self.inner)
    }
}

/// One limit: a rate enforced by an algorithm, or a number of concurrent requests.
#[pyclass(frozen, eq, name = "Limit", module = "ratekeeper._core")]
#[derive(Clone, PartialEq)]
pub struct PyLimit {
    inner: Limit,
}

impl PyLimit {
    /// A `Limit` from a `Limit` or a rate string; errors name `field`.
    fn from_arg(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Limit> {
        if let Ok(limit) = obj.cast::<PyLimit>() {
            return Ok(limit.get().inner);
        }
        if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyRate>() {
            return Ok(Limit::new(PyRate::from_arg("rate", obj).map_err(|e| within(&e, field))?, None, Kind::Gcra)?);
        }
        Err(Error::type_error(field, format!("must be a Limit or a rate string, got {}", type_name(obj))).into())
    }
}

/// Prefixes a boundary error with an outer field: `rate: ...` inside `limits[1]` -> `limits[1].rate: ...`.
fn within(error: &PyErr, outer: &str) -> PyErr {
    Python::attach(|py| {
        let message = error.value(py).to_string();
        let message = if message.starts_with('[') { format!("{outer}{message}") } else { format!("{outer}.{message}") };
        if error.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(message)
        } else {
            PyValueError::new_err(message)
        }
    })
}

#[pymethods]
impl PyLimit {
    #[new]
    #[pyo3(signature = (rate=None, *, burst=None, algorithm="gcra", concurrency=None))]
    fn py_new(
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        algorithm: &str,
        concurrency: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rate = rate.filter(|r| !r.is_none());
        let concurrency = concurrency.filter(|c| !c.is_none());
        let inner = match (rate, concurrency) {
            (Some(rate), None) => limit_arg(rate, burst, algorithm)?,
            (None, Some(permits)) => {
                if burst.is_some_and(|b| !b.is_none()) {
                    return Err(Error::value("burst", "a concurrency limit takes no burst").into());
                }
                Limit::concurrency(positive_int("concurrency", permits)?)?
            }
            (Some(_), Some(_)) => {
                return Err(Error::value("concurrency", "give either a rate or concurrency=N, not both").into())
            }
            (None, None) => return Err(Error::value("rate", "give a rate such as '10/s', or concurrency=N").into()),
        };
        Ok(Self { inner })
    }

    #[getter]
    fn rate(&self) -> Option<PyRate> {
        self.inner.rate.map(|inner| PyRate { inner })
    }

    #[getter]
    fn burst(&self) -> u32 {
        self.inner.burst
    }

    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.kind().name()
    }

    #[getter]
    fn concurrency(&self) -> Option<u32> {
        self.inner.is_concurrency().then_some(self.inner.burst)
    }

    fn __repr__(&self) -> String {
        limit_repr(&self.inner)
    }
}

fn limit_repr(limit: &Limit) -> String {
    match limit.rate {
        None => format!("Limit(concurrency={})", limit.burst),
        Some(rate) => format!("Limit('{rate}', burst={}, algorithm='{}')", limit.burst, limit.kind().name()),
    }
}

/// A routing rule: requests whose path matches `pattern` count against `group`, limited by `rate` or
/// by several `limits` combined by `policy`.
#[pyclass(frozen, name = "Rule", module = "ratekeeper._core")]
pub struct PyRule {
    spec: RuleSpec,
}

#[pymethods]
impl PyRule {
    #[new]
    #[pyo3(signature = (pattern, group, rate=None, *, burst=None, algorithm="gcra", limits=None, policy="all", reduction=true))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        pattern: &Bound<'_, PyAny>,
        group: &Bound<'_, PyAny>,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        algorithm: &str,
        limits: Option<&Bound<'_, PyAny>>,
        policy: &str,
        reduction: bool,
    ) -> PyResult<Self> {
        let pattern = str_arg("pattern", pattern)?;
        rules::compile(&pattern)?;
        let group = str_arg("group", group)?;
        if group.is_empty() {
            return Err(Error::value("group", "must be a non-empty name").into());
        }
        let limits = match (rate.filter(|r| !r.is_none()), limits.filter(|l| !l.is_none())) {
            (Some(rate), None) => vec![limit_arg(rate, burst, algorithm)?],
            (None, Some(limits)) => {
                if burst.is_some_and(|b| !b.is_none()) || algorithm != "gcra" {
                    return Err(Error::value("limits", "give burst and algorithm inside each Limit").into());
                }
                if limits.is_instance_of::<PyString>() {
                    return Err(Error::type_error("limits", "must be a list of Limit, not a single str").into());
                }
                let iter = limits.try_iter().map_err(|_| {
                    Error::type_error("limits", format!("must be a list of Limit, got {}", type_name(limits)))
                })?;
                let limits = iter
                    .enumerate()
                    .map(|(i, item)| PyLimit::from_arg(&format!("limits[{i}]"), &item?))
                    .collect::<PyResult<Vec<_>>>()?;
                if limits.is_empty() {
                    return Err(Error::value("limits", "must hold at least one Limit").into());
                }
                if limits.len() > 64 {
                    return Err(Error::value("limits", format!("at most 64 limits, got {}", limits.len())).into());
                }
                limits
            }
            (Some(_), Some(_)) => return Err(Error::value("limits", "give either rate or limits, not both").into()),
            (None, None) => return Err(Error::value("rate", "give a rate such as '10/s', or limits=[...]").into()),
        };
        Ok(Self { spec: RuleSpec { pattern, group, limits, policy: Policy::parse(policy)?, reduction } })
    }

    #[getter]
    fn pattern(&self) -> &str {
        &self.spec.pattern
    }

    #[getter]
    fn group(&self) -> &str {
        &self.spec.group
    }

    #[getter]
    fn limits(&self) -> Vec<PyLimit> {
        self.spec.limits.iter().map(|&inner| PyLimit { inner }).collect()
    }

    /// The rate of the first limit (the only one, for a rule made with `rate`).
    #[getter]
    fn rate(&self) -> Option<PyRate> {
        self.spec.limits[0].rate.map(|inner| PyRate { inner })
    }

    #[getter]
    fn burst(&self) -> u32 {
        self.spec.limits[0].burst
    }

    #[getter]
    fn algorithm(&self) -> &'static str {
        self.spec.limits[0].kind().name()
    }

    #[getter]
    fn policy(&self) -> &'static str {
        self.spec.policy.name()
    }

    #[getter]
    fn reduction(&self) -> bool {
        self.spec.reduction
    }

    fn __repr__(&self) -> String {
        let limits: Vec<String> = self.spec.limits.iter().map(limit_repr).collect();
        format!(
            "Rule({:?}, {:?}, limits=[{}], policy='{}', reduction={})",
            self.spec.pattern,
            self.spec.group,
            limits.join(", "),
            self.spec.policy.name(),
            if self.spec.reduction { "True" } else { "False" }
        )
    }
}

fn positive_int(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    match obj.extract::<i64>() {
        Ok(n) if n >= 1 => Ok(n.unsigned_abs()),
        Ok(n) => Err(Error::value(field, format!("must be a positive integer, got {n}")).into()),
        Err(_) => Err(Error::type_error(field, format!("must be an int, got {}", type_name(obj))).into()),
    }
}

/// A str argument of the hot path, borrowed; the error names the field (pyo3's only notes it).
#[inline]
fn text<'a>(field: &str, obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    match obj.cast::<PyString>() {
        Ok(s) => s.to_str(),
        Err(_) => Err(Error::type_error(field, format!("must be a str, got {}", type_name(obj))).into()),
    }
}

fn optional_text<'a>(field: &str, obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a str>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => text(field, o).map(Some),
    }
}

fn str_arg(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    obj.cast::<PyString>()
        .map(|s| s.to_string_lossy().into_owned())
        .map_err(|_| Error::type_error(field, format!("must be a str, got {}", type_name(obj))).into())
}

fn limit_arg(rate: &Bound<'_, PyAny>, burst: Option<&Bound<'_, PyAny>>, algorithm: &str) -> PyResult<Limit> {
    let rate = PyRate::from_arg("rate", rate)?;
    let burst = match burst {
        None => None,
        Some(b) if b.is_none() => None,
        Some(b) => Some(positive_int("burst", b)?),
    };
    Ok(Limit::new(rate, burst, Kind::parse(algorithm)?)?)
}

/// A clock that moves only when told to; waits on it advance it instead of sleeping.
#[pyclass(frozen, name = "ManualClock", module = "ratekeeper._core")]
pub struct PyManualClock {
    inner: Arc<ManualClock>,
}

#[pymethods]
impl PyManualClock {
    #[new]
    #[pyo3(signature = (start=0.0))]
    fn py_new(start: f64) -> PyResult<Self> {
        Ok(Self { inner: Arc::new(ManualClock::new(nanos("start", Some(start))?)) })
    }

    fn now(&self) -> f64 {
        secs(self.inner.now_ns())
    }

    fn advance(&self, seconds: f64) -> PyResult<()> {
        if seconds.is_infinite() {
            return Err(Error::value("seconds", "must be finite").into());
        }
        self.inner.advance_ns(nanos("seconds", Some(seconds))?);
        Ok(())
    }

    /// Moves the clock to an instant in nanoseconds unless it is already past it.
    fn _advance_to_ns(&self, deadline_ns: u64) {
        self.inner.advance_to_ns(deadline_ns);
    }

    fn __repr__(&self) -> String {
        format!("ManualClock({})", secs(self.inner.now_ns()))
    }
}

/// What the limiter decided for one request.
#[pyclass(frozen, name = "Decision", module = "ratekeeper._core")]
pub struct PyDecision {
    #[pyo3(get)]
    allowed: bool,
    #[pyo3(get)]
    group: Option<Py<PyString>>,
    #[pyo3(get)]
    limit: Option<u64>,
    #[pyo3(get)]
    remaining: Option<u64>,
    #[pyo3(get)]
    retry_after: f64,
    #[pyo3(get)]
    reset_after: f64,
}

#[pymethods]
impl PyDecision {
    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let group = self.group.as_ref().map_or_else(|| "None".to_owned(), |g| format!("'{}'", g.bind(py)));
        let opt = |v: Option<u64>| v.map_or_else(|| "None".to_owned(), |v| v.to_string());
        format!(
            "Decision(allowed={}, group={group}, limit={}, remaining={}, retry_after={:?}, reset_after={:?})",
            if self.allowed { "True" } else { "False" },
            opt(self.limit),
            opt(self.remaining),
            self.retry_after,
            self.reset_after,
        )
    }
}

/// The Rust half of `ratekeeper.Limiter`; the Python subclass adds the waiting methods.
#[pyclass(frozen, subclass, name = "Limiter", module = "ratekeeper._core")]
pub struct PyLimiter {
    inner: Limiter,
    group_names: Vec<Py<PyString>>,
    clock: Option<Py<PyManualClock>>,
}

impl PyLimiter {
    fn decision(&self, py: Python<'_>, d: &limiter::Decision) -> PyDecision {
        let group = match d.route {
            Route::Group(g) => Some(self.group_names[g].clone_ref(py)),
            Route::Unlimited | Route::Exempt => None,
        };
        PyDecision {
            allowed: d.outcome.allowed,
            group,
            limit: d.report.map(|r| r.limit),
            remaining: d.report.map(|r| r.remaining),
            retry_after: secs(d.outcome.retry_after_ns),
            reset_after: d.report.map_or(0.0, |r| secs(r.reset_after_ns)),
        }
    }
}

fn strings(field: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    if obj.is_instance_of::<PyString>() {
        return Err(Error::type_error(field, "must be a list of str, not a single str").into());
    }
    let iter = obj
        .try_iter()
        .map_err(|_| Error::type_error(field, format!("must be a list of str, got {}", type_name(obj))))?;
    iter.enumerate().map(|(i, item)| str_arg(&format!("{field}[{i}]"), &item?)).collect()
}

#[pymethods]
impl PyLimiter {
    #[new]
    #[pyo3(signature = (
        rate=None, *, rules=None, exempt_peers=None, exempt_paths=None, max_keys=1_000_000, burst=None,
        algorithm="gcra", clock=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        rate: Option<&Bound<'_, PyAny>>,
        rules: Option<&Bound<'_, PyAny>>,
        exempt_peers: Option<&Bound<'_, PyAny>>,
        exempt_paths: Option<&Bound<'_, PyAny>>,
        max_keys: i64,
        burst: Option<&Bound<'_, PyAny>>,
        algorithm: &str,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut specs = Vec::new();
        if let Some(rules) = rules.filter(|r| !r.is_none()) {
            let iter = rules
                .try_iter()
                .map_err(|_| Error::type_error("rules", format!("must be a list of Rule, got {}", type_name(rules))))?;
            for (i, item) in iter.enumerate() {
                let item = item?;
                let rule = item.cast::<PyRule>().map_err(|_| {
                    Error::type_error(format!("rules[{i}]"), format!("must be a Rule, got {}", type_name(&item)))
                })?;
                specs.push(rule.get().spec.clone());
            }
        }
        match rate.filter(|r| !r.is_none()) {
            Some(rate) => specs.push(RuleSpec::single("", "default", limit_arg(rate, burst, algorithm)?)),
            None if rules.is_none_or(PyAnyMethods::is_none) => {
                return Err(Error::value("rate", "give a rate (e.g. Limiter('10/min')) or rules=[Rule(...)]").into())
            }
            None => {}
        }
        let max_keys = usize::try_from(max_keys)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Error::value("max_keys", format!("must be a positive integer, got {max_keys}")))?;
        let (clock, manual) = match clock.filter(|c| !c.is_none()) {
            None => (Clock::monotonic(), None),
            Some(c) => {
                let manual = c.cast::<PyManualClock>().map_err(|_| {
                    Error::type_error("clock", format!("must be a ManualClock or None, got {}", type_name(c)))
                })?;
                (Clock::Manual(manual.get().inner.clone()), Some(manual.clone().unbind()))
            }
        };
        let config = Config {
            rules: specs,
            exempt_peers: strings("exempt_peers", exempt_peers)?,
            exempt_paths: strings("exempt_paths", exempt_paths)?,
            max_keys,
        };
        let inner = Limiter::new(config, clock)?;
        let group_names = inner.groups().iter().map(|g| PyString::intern(py, &g.name).unbind()).collect();
        Ok(Self { inner, group_names, clock: manual })
    }

    #[pyo3(signature = (peer, path=None, *, cost=Cost(1)), text_signature = "(self, peer, path=None, *, cost=1)")]
    fn check(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
    ) -> PyResult<PyDecision> {
        let (peer, path) = (text("peer", peer)?, optional_text("path", path)?);
        Ok(self.decision(py, &self.inner.decide(peer, path, cost.0, 0, true)))
    }

    #[pyo3(signature = (peer, path=None, *, cost=Cost(1)), text_signature = "(self, peer, path=None, *, cost=1)")]
    fn allow(&self, peer: &Bound<'_, PyAny>, path: Option<&Bound<'_, PyAny>>, cost: Cost) -> PyResult<bool> {
        let (peer, path) = (text("peer", peer)?, optional_text("path", path)?);
        Ok(self.inner.decide(peer, path, cost.0, 0, false).outcome.allowed)
    }

    /// Admits now or reserves a later slot within `max_wait` seconds (None: any wait).
    /// Returns `(decision, wait_seconds, deadline_ns, receipt)`; the deadline is on the limiter's clock
    /// and the receipt is what `_refund` needs to give the slot back.
    #[pyo3(signature = (peer, path, cost, max_wait))]
    fn _reserve(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        max_wait: Option<f64>,
    ) -> PyResult<(PyDecision, f64, u64, (u64, u64))> {
        let (peer, path) = (text("peer", peer)?, optional_text("path", path)?);
        let max_wait_ns = nanos("timeout", max_wait)?;
        let decision = self.inner.decide(peer, path, cost.0, max_wait_ns, true);
        let deadline = decision.now.saturating_add(decision.outcome.wait_ns);
        let receipt = (decision.receipt.limits, decision.receipt.at);
        Ok((self.decision(py, &decision), secs(decision.outcome.wait_ns), deadline, receipt))
    }

    #[pyo3(signature = (peer, path, cost, receipt))]
    fn _refund(&self, peer: &str, path: Option<&str>, cost: Cost, receipt: (u64, u64)) {
        self.inner.refund(peer, path, cost.0, Receipt { limits: receipt.0, at: receipt.1 });
    }

    /// Takes the group's concurrency permits (and its rate limits' admission).
    #[pyo3(signature = (peer, path, cost))]
    fn _acquire(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
    ) -> PyResult<PyDecision> {
        let (peer, path) = (text("peer", peer)?, optional_text("path", path)?);
        Ok(self.decision(py, &self.inner.acquire(peer, path, cost.0, true)))
    }

    #[pyo3(signature = (peer, path, cost))]
    fn _release(&self, peer: &str, path: Option<&str>, cost: Cost) {
        self.inner.release(peer, path, cost.0);
    }

    #[pyo3(signature = (peer, path=None, n=Cost(1)), text_signature = "(self, peer, path=None, n=1)")]
    fn reduce(&self, peer: &Bound<'_, PyAny>, path: Option<&Bound<'_, PyAny>>, n: Cost) -> PyResult<bool> {
        let (peer, path) = (text("peer", peer)?, optional_text("path", path)?);
        Ok(self.inner.reduce(peer, path, n.0))
    }

    fn off(&self) {
        self.inner.set_enabled(false);
    }

    fn on(&self) {
        self.inner.set_enabled(true);
    }

    #[getter]
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }

    #[getter]
    fn clock(&self, py: Python<'_>) -> Option<Py<PyManualClock>> {
        self.clock.as_ref().map(|c| c.clone_ref(py))
    }

    #[getter]
    fn max_keys(&self) -> usize {
        self.inner.max_keys()
    }

    #[getter]
    fn groups(&self, py: Python<'_>) -> Vec<Py<PyString>> {
        self.group_names.iter().map(|g| g.clone_ref(py)).collect()
    }

    #[pyo3(signature = (peer=None))]
    fn reset(&self, peer: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.inner.reset(optional_text("peer", peer)?);
        Ok(())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.inner.stats();
        let groups = PyDict::new(py);
        for ((name, counters), group) in self.group_names.iter().zip(&stats.groups).zip(self.inner.groups()) {
            let entry = PyDict::new(py);
            let limits = group
                .limits
                .iter()
                .map(|limit| {
                    let item = PyDict::new(py);
                    item.set_item("rate", limit.rate.map(|r| r.to_string()))?;
                    item.set_item("burst", limit.burst)?;
                    item.set_item("algorithm", limit.kind().name())?;
                    Ok(item)
                })
                .collect::<PyResult<Vec<_>>>()?;
            entry.set_item("limits", limits)?;
            entry.set_item("policy", group.policy.name())?;
            entry.set_item("requests", counters.requests)?;
            entry.set_item("allowed", counters.allowed)?;
            entry.set_item("refused", counters.refused)?;
            entry.set_item("delayed", counters.delayed)?;
            entry.set_item("reductions", counters.reductions)?;
            groups.set_item(name.bind(py), entry)?;
        }
        let out = PyDict::new(py);
        out.set_item("enabled", self.inner.enabled())?;
        out.set_item("keys", stats.keys)?;
        out.set_item("max_keys", self.inner.max_keys())?;
        out.set_item("evictions", stats.evictions)?;
        out.set_item("exempt", stats.exempt)?;
        out.set_item("memory_bytes", self.inner.allocated_bytes())?;
        out.set_item("groups", groups)?;
        Ok(out)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

#[pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::{PyDecision, PyLimit, PyLimiter, PyManualClock, PyRate, PyRule};

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("NANOS_PER_SEC", super::NANOS_PER_SEC)?;
        Ok(())
    }
}
