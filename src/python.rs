//! The Python boundary: the only file that uses pyo3. Docstrings live in `python/ratekeeper/_core.pyi`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::algorithm::{Kind, Limit};
use crate::clock::{Clock, ManualClock};
use crate::error::{Error, ErrorKind};
use crate::limiter::{self, Config, Landing, Limiter, Policy, Receipt, RuleSpec, Rules, RulesConfig};
use crate::quota::{FetchJob, FetchQueue, QuotaSettings};
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

/// A duration in seconds that must be finite and above zero, in nanoseconds.
fn positive_seconds(field: &str, seconds: f64) -> PyResult<u64> {
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(Error::value(field, format!("must be a positive number of seconds, got {seconds}")).into());
    }
    nanos(field, Some(seconds))
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
#[pyclass(frozen, subclass, weakref, name = "Limiter", module = "ratekeeper._core")]
pub struct PyLimiter {
    inner: Limiter,
    /// Interned group names of the rules in force, by group index (replaced by a reconfiguration).
    group_names: ArcSwap<Vec<Py<PyString>>>,
    /// The names at construction, read without an `ArcSwap` guard until a reconfiguration.
    first_names: Vec<Py<PyString>>,
    reconfigured: AtomicBool,
    clock: Option<Py<PyManualClock>>,
    quota_provider: Option<Py<PyAny>>,
    quota_workers: usize,
    /// How long the first request of a key waits for its quota (0: not at all).
    quota_wait: Duration,
}

fn interned_names(py: Python<'_>, rules: &Rules) -> Vec<Py<PyString>> {
    rules.groups.iter().map(|g| PyString::intern(py, &g.name).unbind()).collect()
}

impl PyLimiter {
    /// `quota_wait`: lets the first request of a key wait (without the GIL) for its fetch to land.
    fn wait_first_fetch(&self, py: Python<'_>, peer: &str, path: Option<&str>) {
        if self.quota_wait.is_zero() {
            return;
        }
        if let Some(seen) = self.inner.first_fetch_pending(peer, path) {
            py.detach(|| self.inner.wait_first_fetch(peer, path, seen, self.quota_wait));
        }
    }

    /// Runs a reconfiguration of the core and follows its group names.
    fn reconfigure(&self, py: Python<'_>, change: impl FnOnce() -> crate::error::Result<()>) -> PyResult<()> {
        // Before: from now on names come from `group_names`, which follows the rules.
        self.reconfigured.store(true, Ordering::Release);
        change()?;
        self.group_names.store(Arc::new(interned_names(py, &self.inner.rules())));
        Ok(())
    }

    fn group_name(&self, py: Python<'_>, index: usize) -> Py<PyString> {
        if !self.reconfigured.load(Ordering::Acquire) {
            if let Some(name) = self.first_names.get(index) {
                return name.clone_ref(py);
            }
        }
        match self.group_names.load().get(index) {
            Some(name) => name.clone_ref(py),
            // Decided under rules a reconfiguration has just replaced.
            None => PyString::new(py, "?").unbind(),
        }
    }

    fn decision(&self, py: Python<'_>, d: &limiter::Decision) -> PyDecision {
        let group = match d.route {
            Route::Group(g) => Some(self.group_name(py, g)),
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

#[pymethods]
impl PyLimiter {
    #[new]
    #[pyo3(signature = (
        rate=None, *, rules=None, exempt_peers=None, exempt_paths=None, max_keys=1_000_000, burst=None,
        algorithm="gcra", clock=None, quota_provider=None, failsafe=None, quota_ttl=300.0, quota_timeout=5.0,
        quota_workers=4, quota_wait=0.0
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
        quota_provider: Option<&Bound<'_, PyAny>>,
        failsafe: Option<&Bound<'_, PyAny>>,
        quota_ttl: f64,
        quota_timeout: f64,
        quota_workers: i64,
        quota_wait: f64,
    ) -> PyResult<Self> {
        let mut specs = match rules.filter(|r| !r.is_none()) {
            Some(rules) => rule_specs(rules)?,
            None => Vec::new(),
        };
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
        let quota_provider = quota_provider.filter(|p| !p.is_none());
        if let Some(provider) = quota_provider {
            if !provider.is_callable() {
                return Err(Error::type_error(
                    "quota_provider",
                    format!("must be a callable (peer, group) -> Rate | str | None, got {}", type_name(provider)),
                )
                .into());
            }
        }
        let quota_workers = usize::try_from(quota_workers)
            .ok()
            .filter(|&n| (1..=256).contains(&n))
            .ok_or_else(|| Error::value("quota_workers", format!("must be between 1 and 256, got {quota_workers}")))?;
        let quotas = QuotaSettings {
            provider: quota_provider.is_some(),
            failsafe: failsafe.filter(|f| !f.is_none()).map(|f| PyRate::from_arg("failsafe", f)).transpose()?,
            ttl_ns: positive_seconds("quota_ttl", quota_ttl)?,
            timeout_ns: positive_seconds("quota_timeout", quota_timeout)?,
            // Queued fetches keep their records: an eighth of the bound at most.
            queue_capacity: (max_keys / 8).clamp(16, 10_000),
        };
        let quota_wait = Duration::from_nanos(nanos("quota_wait", Some(quota_wait))?.min(u64::MAX / 2));
        let rules = RulesConfig {
            rules: specs,
            exempt_peers: strings("exempt_peers", exempt_peers)?,
            exempt_paths: strings("exempt_paths", exempt_paths)?,
        };
        let inner = Limiter::new(Config { rules, max_keys, quotas }, clock)?;
        let first_names = interned_names(py, &inner.rules());
        let group_names = ArcSwap::from_pointee(first_names.iter().map(|n| n.clone_ref(py)).collect());
        Ok(Self {
            inner,
            group_names,
            first_names,
            reconfigured: AtomicBool::new(false),
            clock: manual,
            quota_provider: quota_provider.map(|p| p.clone().unbind()),
            quota_workers,
            quota_wait,
        })
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
        self.wait_first_fetch(py, peer, path);
        Ok(self.decision(py, &self.inner.decide(peer, path, cost.0, 0, true)))
    }

    #[pyo3(signature = (peer, path=None, *, cost=Cost(1)), text_signature = "(self, peer, path=None, *, cost=1)")]
    fn allow(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
    ) -> PyResult<bool> {
        let (peer, path) = (text("peer", peer)?, optional_text("path", path)?);
        self.wait_first_fetch(py, peer, path);
        Ok(self.inner.decide(peer, path, cost.0, 0, false).outcome.allowed)
    }

    /// Admits now or reserves a later slot within `max_wait` seconds (None: any wait).
    /// Returns `(decision, wait_seconds, deadline_ns, receipt)`; the deadline is on the limiter's clock
    /// and the receipt is what `_refund` needs to give the slot back.
    #[pyo3(signature = (peer, path, cost, max_wait, wait_quota=true))]
    fn _reserve(
        &self,
        py: Python<'_>,
        peer: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        max_wait: Option<f64>,
        wait_quota: bool,
    ) -> PyResult<(PyDecision, f64, u64, (u64, u64))> {
        let (peer, path) = (text("peer", peer)?, optional_text("path", path)?);
        if wait_quota {
            self.wait_first_fetch(py, peer, path);
        }
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
        self.group_names.load().iter().map(|g| g.clone_ref(py)).collect()
    }

    #[pyo3(signature = (peer=None))]
    fn reset(&self, peer: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.inner.reset(optional_text("peer", peer)?);
        Ok(())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (rules, stats) = self.inner.stats();
        let groups = PyDict::new(py);
        for (counters, group) in stats.groups.iter().zip(&rules.groups) {
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
            entry.set_item("quota_fetches", counters.quota_fetches)?;
            entry.set_item("quota_failures", counters.quota_failures)?;
            groups.set_item(&group.name, entry)?;
        }
        let out = PyDict::new(py);
        out.set_item("enabled", self.inner.enabled())?;
        out.set_item("keys", stats.keys)?;
        out.set_item("max_keys", self.inner.max_keys())?;
        out.set_item("evictions", stats.evictions)?;
        out.set_item("exempt", stats.exempt)?;
        out.set_item("memory_bytes", self.inner.allocated_bytes())?;
        out.set_item("quota_records", stats.quota_records)?;
        let (queued, running) = self.inner.fetches().load();
        out.set_item("quota_queue", queued)?;
        out.set_item("quota_running", running)?;
        out.set_item("groups", groups)?;
        Ok(out)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    #[pyo3(signature = (peer, group, rate))]
    fn set_quota(&self, peer: &Bound<'_, PyAny>, group: &Bound<'_, PyAny>, rate: &Bound<'_, PyAny>) -> PyResult<()> {
        let (peer, group) = (text("peer", peer)?, text("group", group)?);
        let rate = if rate.is_none() { None } else { Some(PyRate::from_arg("rate", rate)?) };
        Ok(self.inner.set_quota(peer, group, rate)?)
    }

    #[pyo3(signature = (peer, group))]
    fn quota(&self, peer: &Bound<'_, PyAny>, group: &Bound<'_, PyAny>) -> PyResult<PyQuotaInfo> {
        let (peer, group) = (text("peer", peer)?, text("group", group)?);
        let (info, rule_rate) = self.inner.quota(peer, group)?;
        let now = self.inner.now_ns();
        Ok(PyQuotaInfo {
            rate: info.rate.or(rule_rate).map(|inner| PyRate { inner }),
            source: info.source.name(),
            age: info.since.map(|since| secs(now.saturating_sub(since))),
            fetching: info.fetching,
            failures: info.failures,
        })
    }

    /// Whether the first fetch of the key `path` routes `peer` to is still running (queued if new).
    #[pyo3(signature = (peer, path))]
    fn _quota_pending(&self, peer: &str, path: Option<&str>) -> bool {
        self.inner.first_fetch_pending(peer, path).is_some()
    }

    #[pyo3(signature = (timeout=None))]
    fn wait_quotas(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = Duration::from_nanos(nanos("timeout", timeout)?.min(u64::MAX / 4));
        let deadline =
            Instant::now().checked_add(timeout).unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 32));
        let queue = Arc::clone(self.inner.fetches());
        Ok(py.detach(move || queue.wait_idle(deadline)))
    }

    fn _fetch_queue(&self) -> PyFetchQueue {
        PyFetchQueue { inner: Arc::clone(self.inner.fetches()) }
    }

    /// Hands back a fetch: `ok` with `rate` (None: the rule's rate), or a failure. Returns
    /// `(outcome, first_failure, reason)`, outcome one of "landed", "late", "failed".
    #[pyo3(signature = (peer, group, token, rate, ok))]
    fn _finish_fetch(
        &self,
        peer: String,
        group: String,
        token: u32,
        rate: Option<&Bound<'_, PyAny>>,
        ok: bool,
    ) -> (&'static str, bool, Option<String>) {
        let job = FetchJob { peer, group, token };
        let answer = match rate.filter(|r| !r.is_none()) {
            _ if !ok => Err(()),
            None => Ok(None),
            Some(rate) => match PyRate::from_arg("quota", rate) {
                Ok(rate) => Ok(Some(rate)),
                Err(error) => {
                    let landing = self.inner.finish_fetch(&job, Err(()));
                    let first = matches!(landing, Landing::Failed { first: true, .. });
                    return ("failed", first, Some(error.to_string()));
                }
            },
        };
        match self.inner.finish_fetch(&job, answer) {
            Landing::Landed => ("landed", false, None),
            Landing::Late => ("late", false, None),
            Landing::Failed { first, reason } => ("failed", first, reason.map(|e| e.to_string())),
        }
    }

    #[getter]
    fn _quota_provider(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.quota_provider.as_ref().map(|p| p.clone_ref(py))
    }

    #[getter]
    fn _quota_workers(&self) -> usize {
        self.quota_workers
    }

    #[getter]
    fn quota_wait(&self) -> f64 {
        self.quota_wait.as_secs_f64()
    }

    #[pyo3(signature = (group, rate=None, burst=None))]
    fn update_rule(
        &self,
        py: Python<'_>,
        group: &Bound<'_, PyAny>,
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let group = text("group", group)?;
        let rate = rate.filter(|r| !r.is_none()).map(|r| PyRate::from_arg("rate", r)).transpose()?;
        let burst = burst.filter(|b| !b.is_none()).map(|b| positive_int("burst", b)).transpose()?;
        self.reconfigure(py, || self.inner.update_rule(group, rate, burst))
    }

    /// Replaces the rules and exemptions, keeping the state of groups that keep their name.
    #[pyo3(signature = (rules, exempt_peers=None, exempt_paths=None))]
    fn _reconfigure(
        &self,
        py: Python<'_>,
        rules: &Bound<'_, PyAny>,
        exempt_peers: Option<&Bound<'_, PyAny>>,
        exempt_paths: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let config = RulesConfig {
            rules: rule_specs(rules)?,
            exempt_peers: strings("exempt_peers", exempt_peers)?,
            exempt_paths: strings("exempt_paths", exempt_paths)?,
        };
        self.reconfigure(py, || self.inner.reconfigure(config))
    }
}

/// What a key's quota is; see `Limiter.quota`.
#[pyclass(frozen, name = "QuotaInfo", module = "ratekeeper._core")]
pub struct PyQuotaInfo {
    #[pyo3(get)]
    rate: Option<PyRate>,
    #[pyo3(get)]
    source: &'static str,
    #[pyo3(get)]
    age: Option<f64>,
    #[pyo3(get)]
    fetching: bool,
    #[pyo3(get)]
    failures: u32,
}

#[pymethods]
impl PyQuotaInfo {
    fn __repr__(&self) -> String {
        let rate = self.rate.as_ref().map_or_else(|| "None".to_owned(), |r| format!("Rate('{}')", r.inner));
        let age = self.age.map_or_else(|| "None".to_owned(), |a| format!("{a:?}"));
        format!(
            "QuotaInfo(rate={rate}, source='{}', age={age}, fetching={}, failures={})",
            self.source,
            if self.fetching { "True" } else { "False" },
            self.failures
        )
    }
}

/// The jobs quota workers run; held by the workers instead of the limiter, so that an unreferenced
/// limiter is collected (and its drop closes this queue, which stops them).
#[pyclass(frozen, name = "_FetchQueue", module = "ratekeeper._core")]
pub struct PyFetchQueue {
    inner: Arc<FetchQueue>,
}

#[pymethods]
impl PyFetchQueue {
    /// The next `(peer, group, token)`, waiting up to `timeout` seconds without the GIL; None on timeout
    /// or once closed.
    fn take(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<(String, String, u32)>> {
        let timeout = Duration::from_nanos(nanos("timeout", Some(timeout))?.min(u64::MAX / 4));
        let queue = Arc::clone(&self.inner);
        Ok(py.detach(move || queue.take(timeout)).map(|job| (job.peer, job.group, job.token)))
    }

    /// Marks a taken job done when its limiter is gone.
    fn done(&self) {
        self.inner.done();
    }

    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }
}

#[pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::{PyDecision, PyFetchQueue, PyLimit, PyLimiter, PyManualClock, PyQuotaInfo, PyRate, PyRule};

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("NANOS_PER_SEC", super::NANOS_PER_SEC)?;
        Ok(())
    }
}
