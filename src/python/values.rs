//! The value classes of the boundary: rates, limits, rules, the manual clock, quota settings, and what
//! the limiter answers (decisions, policies, resolutions, quota info). A decision's response fields are
//! serialized in `fields`.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use super::args::{
    clock_nanos, field, nanos, not_unicode, positive_int, positive_seconds, secs, str_arg, type_name, MAX_MANUAL_SECS,
};
use crate::algorithm::Report;
use crate::algorithm::{Kind, Limit};
use crate::clock::{ManualClock, MAX_DEADLINE_NS};
use crate::config::{Pattern, Policy, RuleSpec};
use crate::error::Error;
use crate::limiter::{Decision, GroupPolicy, Refusal, Resolution};
use crate::quota::QuotaInfo;
use crate::rate;

/// `count` events per `period`: `Rate("10/min")`, `Rate(10, per=60.0)`.
#[pyclass(frozen, eq, hash, name = "Rate", module = "ratekeeper._core")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyRate {
    pub inner: rate::Rate,
}

impl PyRate {
    /// A `Rate` from a `Rate` or a rate string.
    ///
    /// # Errors
    /// Not a rate, named `field`.
    pub fn from_arg(field: &str, obj: &Bound<'_, PyAny>) -> Result<rate::Rate, Error> {
        if let Ok(rate) = obj.cast::<PyRate>() {
            return Ok(rate.get().inner);
        }
        if let Ok(text) = obj.cast::<PyString>() {
            let text = text.to_str().map_err(|_| not_unicode(field))?;
            return text.parse::<rate::Rate>().map_err(|e| e.within(field));
        }
        Err(Error::type_error(field, format!("must be a rate string like '10/min' or a Rate, got {}", type_name(obj))))
    }
}

#[pymethods]
impl PyRate {
    #[new]
    #[pyo3(signature = (spec, per=None))]
    fn py_new(spec: &Bound<'_, PyAny>, #[pyo3(from_py_with = field::per)] per: Option<f64>) -> PyResult<Self> {
        match per {
            None => Ok(Self { inner: Self::from_arg("rate", spec)? }),
            Some(per) => {
                let count = positive_int("count", spec)?;
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
    pub inner: Limit,
}

impl PyLimit {
    /// A `Limit` from a `Limit`, a `Rate` or a rate string; errors name `field`.
    fn from_arg(field: &str, obj: &Bound<'_, PyAny>) -> Result<Limit, Error> {
        if let Ok(limit) = obj.cast::<PyLimit>() {
            return Ok(limit.get().inner);
        }
        if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyRate>() {
            let rate = PyRate::from_arg("rate", obj).map_err(|e| e.within(field))?;
            return Limit::new(rate, None, Kind::Gcra).map_err(|e| e.within(field));
        }
        Err(Error::type_error(field, format!("must be a Limit or a rate string, got {}", type_name(obj))))
    }
}

/// A limit of `rate` with an optional `burst`, enforced by `algorithm`.
pub fn limit_arg(rate: &Bound<'_, PyAny>, burst: Option<&Bound<'_, PyAny>>, algorithm: &str) -> Result<Limit, Error> {
    let rate = PyRate::from_arg("rate", rate)?;
    let burst = match burst.filter(|b| !b.is_none()) {
        None => None,
        Some(b) => Some(positive_int("burst", b)?),
    };
    Limit::new(rate, burst, Kind::parse(algorithm)?)
}

#[pymethods]
impl PyLimit {
    #[new]
    #[pyo3(signature = (
        rate=None, *, burst=None, algorithm="gcra", concurrency=None, adaptive=None, min_limit=None,
        max_limit=None, initial=None, per=None, window=None, tolerance=None, backoff=None, smoothing=None,
        threshold=None, probe_interval=None, probe_samples=None, jitter=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        rate: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::algorithm)] algorithm: &str,
        concurrency: Option<&Bound<'_, PyAny>>,
        adaptive: Option<&Bound<'_, PyAny>>,
        min_limit: Option<&Bound<'_, PyAny>>,
        max_limit: Option<&Bound<'_, PyAny>>,
        initial: Option<&Bound<'_, PyAny>>,
        per: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        tolerance: Option<&Bound<'_, PyAny>>,
        backoff: Option<&Bound<'_, PyAny>>,
        smoothing: Option<&Bound<'_, PyAny>>,
        threshold: Option<&Bound<'_, PyAny>>,
        probe_interval: Option<&Bound<'_, PyAny>>,
        probe_samples: Option<&Bound<'_, PyAny>>,
        jitter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rate = rate.filter(|r| !r.is_none());
        let concurrency = concurrency.filter(|c| !c.is_none());
        let given = |o: Option<&Bound<'_, PyAny>>| o.is_some_and(|o| !o.is_none());
        let settings = AdaptiveArgs {
            min_limit,
            max_limit,
            initial,
            per,
            window,
            tolerance,
            backoff,
            smoothing,
            threshold,
            probe_interval,
            probe_samples,
            jitter,
        };
        if let Some(adaptive) = adaptive.filter(|a| !a.is_none()) {
            if let Some(other) =
                [("rate", rate.is_some()), ("concurrency", concurrency.is_some()), ("burst", given(burst))]
                    .into_iter()
                    .find_map(|(name, set)| set.then_some(name))
            {
                return Err(Error::value(other, "an adaptive limit takes no rate, concurrency or burst").into());
            }
            let controller = crate::adaptive::Controller::parse(&str_arg("adaptive", adaptive)?)?;
            return Ok(Self { inner: Limit::adaptive(settings.settings(controller)?) });
        }
        if let Some(name) = settings.first_given() {
            return Err(
                Error::value(name, "is a setting of an adaptive limit: give adaptive='gradient' or 'aimd'").into()
            );
        }
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

    #[getter]
    fn window(&self) -> Option<f64> {
        match self.inner.adaptive_settings() {
            Some(s) => Some(secs(s.window_ns)),
            None => self.inner.window_ns().map(secs),
        }
    }

    /// The controller of an adaptive limit ("gradient" or "aimd"); None for any other limit.
    #[getter]
    fn adaptive(&self) -> Option<&'static str> {
        self.inner.adaptive_settings().map(|s| s.controller.name())
    }

    /// An adaptive limit's settings by name (None for any other limit): what `repr` and config read.
    #[getter]
    fn adaptive_settings<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        let Some(s) = self.inner.adaptive_settings() else { return Ok(None) };
        let out = pyo3::types::PyDict::new(py);
        for (name, value) in adaptive_fields(s) {
            out.set_item(name, value.into_pyobject(py)?)?;
        }
        Ok(Some(out))
    }

    fn __repr__(&self) -> String {
        limit_repr(&self.inner)
    }
}

/// A value of an adaptive limit's setting, as Python reads it.
#[derive(Clone, Copy, PartialEq)]
enum SettingValue {
    Int(u32),
    Float(f64),
    Text(&'static str),
    Nothing,
}

impl<'py> IntoPyObject<'py> for SettingValue {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(match self {
            Self::Int(n) => n.into_pyobject(py)?.into_any(),
            Self::Float(x) => x.into_pyobject(py)?.into_any(),
            Self::Text(t) => PyString::new(py, t).into_any(),
            Self::Nothing => py.None().into_bound(py),
        })
    }
}

impl std::fmt::Display for SettingValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Int(n) => write!(f, "{n}"),
            Self::Float(x) => write!(f, "{x:?}"),
            Self::Text(t) => write!(f, "'{t}'"),
            Self::Nothing => write!(f, "None"),
        }
    }
}

/// An adaptive limit's settings by their keyword, in the constructor's order.
fn adaptive_fields(s: &crate::adaptive::Settings) -> [(&'static str, SettingValue); 12] {
    use SettingValue::{Float, Int, Nothing, Text};
    [
        ("min_limit", Int(s.min_limit)),
        ("max_limit", Int(s.max_limit)),
        ("initial", Int(s.initial)),
        ("per", Text(s.per.name())),
        ("window", Float(secs(s.window_ns))),
        ("tolerance", Float(s.tolerance)),
        ("backoff", Float(s.backoff)),
        ("smoothing", Float(s.smoothing)),
        ("threshold", if s.threshold_ns == 0 { Nothing } else { Float(secs(s.threshold_ns)) }),
        ("probe_interval", Float(secs(s.probe_interval_ns))),
        ("probe_samples", Int(s.probe_samples)),
        ("jitter", Float(s.jitter)),
    ]
}

/// The adaptive settings a `Limit(...)` was given (each may be absent or None: its default).
struct AdaptiveArgs<'a, 'py> {
    min_limit: Option<&'a Bound<'py, PyAny>>,
    max_limit: Option<&'a Bound<'py, PyAny>>,
    initial: Option<&'a Bound<'py, PyAny>>,
    per: Option<&'a Bound<'py, PyAny>>,
    window: Option<&'a Bound<'py, PyAny>>,
    tolerance: Option<&'a Bound<'py, PyAny>>,
    backoff: Option<&'a Bound<'py, PyAny>>,
    smoothing: Option<&'a Bound<'py, PyAny>>,
    threshold: Option<&'a Bound<'py, PyAny>>,
    probe_interval: Option<&'a Bound<'py, PyAny>>,
    probe_samples: Option<&'a Bound<'py, PyAny>>,
    jitter: Option<&'a Bound<'py, PyAny>>,
}

impl AdaptiveArgs<'_, '_> {
    fn all(&self) -> [(&'static str, Option<&Bound<'_, PyAny>>); 12] {
        [
            ("min_limit", self.min_limit),
            ("max_limit", self.max_limit),
            ("initial", self.initial),
            ("per", self.per),
            ("window", self.window),
            ("tolerance", self.tolerance),
            ("backoff", self.backoff),
            ("smoothing", self.smoothing),
            ("threshold", self.threshold),
            ("probe_interval", self.probe_interval),
            ("probe_samples", self.probe_samples),
            ("jitter", self.jitter),
        ]
    }

    fn first_given(&self) -> Option<&'static str> {
        self.all().into_iter().find_map(|(name, o)| o.is_some_and(|o| !o.is_none()).then_some(name))
    }

    fn settings(&self, controller: crate::adaptive::Controller) -> Result<crate::adaptive::Settings, Error> {
        fn given<'py>(o: Option<&Bound<'py, PyAny>>) -> Option<Bound<'py, PyAny>> {
            o.filter(|o| !o.is_none()).cloned()
        }
        let mut s = crate::adaptive::Settings::new(controller);
        let count = |name: &str, o: &Bound<'_, PyAny>| -> Result<u32, Error> {
            let n = super::args::int_at_least(name, o, 0)?;
            u32::try_from(n).map_err(|_| Error::value(name, format!("must be at most {}, got {n}", u32::MAX)))
        };
        let number = |name: &str, o: &Bound<'_, PyAny>| -> Result<f64, Error> {
            if o.is_instance_of::<pyo3::types::PyBool>() {
                return Err(Error::type_error(name, "must be a number, got bool"));
            }
            o.extract::<f64>().map_err(|_| Error::type_error(name, format!("must be a number, got {}", type_name(o))))
        };
        let duration = |name: &str, o: &Bound<'_, PyAny>| -> Result<u64, Error> {
            positive_seconds(name, super::args::seconds(name, o)?)
        };
        if let Some(o) = given(self.min_limit) {
            s.min_limit = count("min_limit", &o)?;
        }
        if let Some(o) = given(self.max_limit) {
            s.max_limit = count("max_limit", &o)?;
        }
        let initial_given = given(self.initial).is_some();
        if let Some(o) = given(self.initial) {
            s.initial = count("initial", &o)?;
        }
        if let Some(o) = given(self.per) {
            s.per = crate::adaptive::Per::parse(&str_arg("per", &o)?)?;
        }
        if let Some(o) = given(self.window) {
            s.window_ns = duration("window", &o)?;
        }
        if let Some(o) = given(self.tolerance) {
            s.tolerance = number("tolerance", &o)?;
        }
        if let Some(o) = given(self.backoff) {
            s.backoff = number("backoff", &o)?;
        }
        if let Some(o) = given(self.smoothing) {
            s.smoothing = number("smoothing", &o)?;
        }
        if let Some(o) = given(self.threshold) {
            s.threshold_ns = duration("threshold", &o)?;
        }
        if let Some(o) = given(self.probe_interval) {
            s.probe_interval_ns = duration("probe_interval", &o)?;
        }
        if let Some(o) = given(self.probe_samples) {
            s.probe_samples = count("probe_samples", &o)?;
        }
        if let Some(o) = given(self.jitter) {
            s.jitter = number("jitter", &o)?;
        }
        s.checked(initial_given)
    }
}

fn limit_repr(limit: &Limit) -> String {
    if let Some(settings) = limit.adaptive_settings() {
        // Only what differs from the controller's defaults, as a constructor call would give it.
        let defaults =
            adaptive_fields(&crate::adaptive::Settings::new(settings.controller).checked(false).unwrap_or(*settings));
        let changed: Vec<String> = adaptive_fields(settings)
            .into_iter()
            .zip(defaults)
            .filter(|((_, value), (_, default))| value != default)
            .map(|((name, value), _)| format!(", {name}={value}"))
            .collect();
        return format!("Limit(adaptive='{}'{})", settings.controller.name(), changed.concat());
    }
    match limit.rate {
        None => format!("Limit(concurrency={})", limit.burst),
        Some(rate) => format!("Limit('{rate}', burst={}, algorithm='{}')", limit.burst, limit.kind().name()),
    }
}

pub fn limits_of(limits: &[Limit]) -> Vec<PyLimit> {
    limits.iter().map(|&inner| PyLimit { inner }).collect()
}

/// A routing rule: requests whose path matches `pattern` count against `group`, limited by `rate` or
/// by several `limits` combined by `policy`.
#[pyclass(frozen, name = "Rule", module = "ratekeeper._core")]
pub struct PyRule {
    pub spec: RuleSpec,
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
        #[pyo3(from_py_with = field::algorithm)] algorithm: &str,
        limits: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::policy)] policy: &str,
        #[pyo3(from_py_with = field::reduction)] reduction: bool,
    ) -> PyResult<Self> {
        let pattern = Pattern::new(&str_arg("pattern", pattern)?)?;
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
                    .map(|(i, item)| Ok(PyLimit::from_arg(&format!("limits[{i}]"), &item?)?))
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
        self.spec.pattern.as_str()
    }

    #[getter]
    fn group(&self) -> &str {
        &self.spec.group
    }

    #[getter]
    fn limits(&self) -> Vec<PyLimit> {
        limits_of(&self.spec.limits)
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
            self.spec.pattern.as_str(),
            self.spec.group,
            limits.join(", "),
            self.spec.policy.name(),
            if self.spec.reduction { "True" } else { "False" }
        )
    }
}

/// A clock that moves only when told to; waits on it advance it instead of sleeping.
#[pyclass(frozen, name = "ManualClock", module = "ratekeeper._core")]
pub struct PyManualClock {
    pub inner: Arc<ManualClock>,
}

#[pymethods]
impl PyManualClock {
    #[new]
    #[pyo3(signature = (start=0.0))]
    fn py_new(#[pyo3(from_py_with = field::start)] start: f64) -> PyResult<Self> {
        Ok(Self { inner: Arc::new(ManualClock::new(clock_nanos("start", start)?)) })
    }

    fn now(&self) -> f64 {
        secs(self.inner.now_ns())
    }

    /// Refuses a move that would carry the clock past 2**62 ns (about 146 years), where time would
    /// soon saturate and every request be admitted.
    fn advance(&self, #[pyo3(from_py_with = field::advance_by)] seconds: f64) -> PyResult<()> {
        let by = clock_nanos("seconds", seconds)?;
        if self.inner.try_advance_ns(by).is_none() {
            let now = secs(self.inner.now_ns());
            let message = format!("would carry the clock from {now} past {MAX_MANUAL_SECS} seconds, got {seconds:?}");
            return Err(Error::value("seconds", message).into());
        }
        Ok(())
    }

    /// Moves the clock to an instant in nanoseconds unless it is already past it (a wait's deadline).
    fn _advance_to_ns(&self, deadline_ns: u64) -> PyResult<()> {
        if deadline_ns > MAX_DEADLINE_NS {
            return Err(Error::value("deadline_ns", format!("must be at most 2**63, got {deadline_ns}")).into());
        }
        self.inner.advance_to_ns(deadline_ns);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("ManualClock({})", secs(self.inner.now_ns()))
    }
}

/// How per-key quotas are obtained; see `Limiter(quotas=...)`.
#[pyclass(frozen, name = "Quotas", module = "ratekeeper._core")]
pub struct PyQuotas {
    #[pyo3(get)]
    pub provider: Option<Py<PyAny>>,
    #[pyo3(get)]
    pub failsafe: Option<PyRate>,
    #[pyo3(get)]
    pub ttl: f64,
    #[pyo3(get)]
    pub timeout: f64,
    #[pyo3(get)]
    pub workers: usize,
    #[pyo3(get)]
    pub wait: f64,
}

/// The defaults of `Quotas()`: a limiter without `quotas=` has these settings.
pub const DEFAULT_QUOTA_TTL: f64 = 300.0;
pub const DEFAULT_QUOTA_TIMEOUT: f64 = 5.0;
pub const DEFAULT_QUOTA_WORKERS: u64 = 4;

impl PyQuotas {
    /// Checked settings.
    ///
    /// # Errors
    /// A bad setting, named as the keyword of `Quotas(...)` that gave it (`ttl`).
    pub fn new(
        provider: Option<&Bound<'_, PyAny>>,
        failsafe: Option<&Bound<'_, PyAny>>,
        (ttl, timeout, workers, wait): (f64, f64, u64, f64),
    ) -> Result<Self, Error> {
        let provider = provider.filter(|p| !p.is_none());
        if let Some(provider) = provider {
            if !provider.is_callable() {
                return Err(Error::type_error(
                    "provider",
                    format!("must be a callable (peer, group) -> Rate | str | None, got {}", type_name(provider)),
                ));
            }
        }
        positive_seconds("ttl", ttl)?;
        positive_seconds("timeout", timeout)?;
        nanos("wait", Some(wait))?;
        let workers = usize::try_from(workers)
            .ok()
            .filter(|&n| (1..=256).contains(&n))
            .ok_or_else(|| Error::value("workers", format!("must be between 1 and 256, got {workers}")))?;
        let failsafe = failsafe.filter(|f| !f.is_none()).map(|f| PyRate::from_arg("failsafe", f)).transpose()?;
        Ok(Self {
            provider: provider.map(|p| p.clone().unbind()),
            failsafe: failsafe.map(|inner| PyRate { inner }),
            ttl,
            timeout,
            workers,
            wait,
        })
    }
}

#[pymethods]
impl PyQuotas {
    #[new]
    // Literals, so that the signature shows them; tests/core/test_quotas.py checks they equal the DEFAULT_*.
    #[pyo3(signature = (provider=None, *, failsafe=None, ttl=300.0, timeout=5.0, workers=4, wait=0.0))]
    fn py_new(
        provider: Option<&Bound<'_, PyAny>>,
        failsafe: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = field::ttl)] ttl: f64,
        #[pyo3(from_py_with = field::timeout)] timeout: f64,
        #[pyo3(from_py_with = field::workers)] workers: u64,
        #[pyo3(from_py_with = field::wait)] wait: f64,
    ) -> PyResult<Self> {
        Ok(Self::new(provider, failsafe, (ttl, timeout, workers, wait))?)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let provider = self.provider.as_ref().map_or_else(|| "None".to_owned(), |p| p.bind(py).to_string());
        let failsafe = self.failsafe.as_ref().map_or_else(|| "None".to_owned(), |r| format!("'{}'", r.inner));
        format!(
            "Quotas({provider}, failsafe={failsafe}, ttl={:?}, timeout={:?}, workers={}, wait={:?})",
            self.ttl, self.timeout, self.workers, self.wait
        )
    }
}

/// What the limiter decided for one request.
///
/// Every field is a whole word: a decision is built and then moved into its Python object at once,
/// and a word read back right after a narrower write to it stalls the store buffer (a `bool` field
/// measured 20 ns a `check`). Flags and absent values are encoded; the getters decode them.
#[pyclass(frozen, name = "Decision", module = "ratekeeper._core")]
pub struct PyDecision {
    pub(super) flags: u64,
    pub(super) group: Option<Py<PyString>>,
    pub(super) limit: u64,
    pub(super) remaining: u64,
    pub(super) retry_after: f64,
    reset_after: f64,
    /// NaN: none.
    pub(super) window: f64,
    pub(super) next_after: f64,
    /// The key the core read for a web request (`_admit_scope`), for the receipt of a refusal or of
    /// permits held: the adapter then need not read it again. `None` otherwise.
    pub(super) peer: Option<Py<PyString>>,
    /// The limiter's clock reading (ns) the decision was made at (an adaptive limit's permits: when
    /// they were taken), which a release measures the request's latency from.
    at: u64,
}

const ALLOWED: u64 = 1;
pub(super) const REPORTED: u64 = 2;
const BY_RATE: u64 = 4;
const BY_CONCURRENCY: u64 = 8;
const PERMITS_HELD: u64 = 16;

impl PyDecision {
    #[inline]
    pub fn new(d: &Decision, group: Option<Py<PyString>>) -> Self {
        let refused_by = match d.refused_by {
            None => 0,
            Some(Refusal::Rate) => BY_RATE,
            Some(Refusal::Concurrency) => BY_CONCURRENCY,
        };
        let report =
            d.report.unwrap_or(Report { limit: 0, remaining: 0, reset_after_ns: 0, window_ns: None, next_ns: 0 });
        Self {
            flags: u64::from(d.outcome.allowed)
                | if d.report.is_some() { REPORTED } else { 0 }
                | if d.receipt.permits { PERMITS_HELD } else { 0 }
                | refused_by,
            group,
            limit: report.limit,
            remaining: report.remaining,
            retry_after: secs(d.outcome.retry_after_ns),
            reset_after: secs(report.reset_after_ns),
            window: report.window_ns.map_or(f64::NAN, secs),
            next_after: secs(report.next_ns),
            peer: None,
            at: d.now,
        }
    }

    #[must_use]
    pub const fn is_allowed(&self) -> bool {
        self.flags & ALLOWED != 0
    }

    #[must_use]
    pub const fn holds_permits(&self) -> bool {
        self.flags & PERMITS_HELD != 0
    }

    fn reported(&self, value: u64) -> Option<u64> {
        (self.flags & REPORTED != 0).then_some(value)
    }
}

#[pymethods]
impl PyDecision {
    /// A refusal no limit made: by rate, in no group, to be retried after `retry_after` seconds (0 when
    /// it is not a finite wait of 0 or more). The outgoing engine's, for a call refused while its host's
    /// first answer is awaited.
    #[staticmethod]
    fn _refusal(retry_after: f64) -> Self {
        Self {
            flags: BY_RATE,
            group: None,
            limit: 0,
            remaining: 0,
            retry_after: if retry_after.is_finite() { retry_after.max(0.0) } else { 0.0 },
            reset_after: 0.0,
            window: f64::NAN,
            next_after: 0.0,
            peer: None,
            at: 0,
        }
    }

    /// The limiter's clock reading (ns) of the admission, for `Limiter._release(admitted_at=...)`.
    #[getter]
    const fn _admitted_at(&self) -> u64 {
        self.at
    }

    /// The key a web request was decided for, when the core read it (see `PyDecision::peer`).
    #[getter]
    fn _peer(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.peer.as_ref().map(|peer| peer.clone_ref(py))
    }

    /// Whether the request may go ahead.
    #[getter]
    fn allowed(&self) -> bool {
        self.is_allowed()
    }

    /// The group that limits the request; None for exempt or unrouted requests.
    #[getter]
    fn group(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.group.as_ref().map(|g| g.clone_ref(py))
    }

    /// The number of requests `remaining` is out of; None unless a group limits the request.
    #[getter]
    fn limit(&self) -> Option<u64> {
        self.reported(self.limit)
    }

    /// Requests of cost 1 the key could make right now; None unless a group limits the request.
    #[getter]
    fn remaining(&self) -> Option<u64> {
        self.reported(self.remaining)
    }

    /// Seconds until the same request would be admitted (0.0 when allowed; inf: never).
    #[getter]
    fn retry_after(&self) -> f64 {
        self.retry_after
    }

    /// Seconds until the key is back to its full limit.
    #[getter]
    fn reset_after(&self) -> f64 {
        self.reset_after
    }

    /// Seconds until the key may make one more request than `remaining` (the `t` of a `RateLimit`
    /// header); 0.0 when it is at its full limit.
    #[getter]
    fn next_after(&self) -> f64 {
        self.next_after
    }

    /// Seconds of the window `limit` is counted over; None for permits and when no group limits.
    #[getter]
    fn window(&self) -> Option<f64> {
        (!self.window.is_nan()).then_some(self.window)
    }

    /// "rate" or "concurrency" when refused; None when allowed.
    #[getter]
    fn refused_by(&self) -> Option<&'static str> {
        if self.flags & BY_RATE != 0 {
            Some("rate")
        } else if self.flags & BY_CONCURRENCY != 0 {
            Some("concurrency")
        } else {
            None
        }
    }

    /// Whether this admission took concurrency permits that must be given back (``concurrent`` and the
    /// web integrations do it when the request ends); False for a refusal or a group without them.
    #[getter]
    fn permits_held(&self) -> bool {
        self.flags & PERMITS_HELD != 0
    }

    fn __bool__(&self) -> bool {
        self.is_allowed()
    }

    /// The rate-limit fields of a response, `(name, value)` str pairs for WSGI; see the stub.
    fn _fields<'py>(&self, py: Python<'py>, ietf: bool, legacy: bool) -> PyResult<Bound<'py, PyTuple>> {
        self.field_tuple(py, ietf, legacy, false)
    }

    /// The same fields as lower-case bytes pairs, ready for an ASGI message; see the stub.
    fn _raw_fields<'py>(&self, py: Python<'py>, ietf: bool, legacy: bool) -> PyResult<Bound<'py, PyTuple>> {
        self.field_tuple(py, ietf, legacy, true)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let group = self.group.as_ref().map_or_else(|| "None".to_owned(), |g| format!("'{}'", g.bind(py)));
        let opt = |v: Option<u64>| v.map_or_else(|| "None".to_owned(), |v| v.to_string());
        let window = self.window().map_or_else(|| "None".to_owned(), |w| format!("{w:?}"));
        let refused_by = self.refused_by().map_or_else(|| "None".to_owned(), |r| format!("'{r}'"));
        format!(
            "Decision(allowed={}, group={group}, limit={}, remaining={}, retry_after={:?}, reset_after={:?}, \
             window={window}, refused_by={refused_by})",
            if self.is_allowed() { "True" } else { "False" },
            opt(self.limit()),
            opt(self.remaining()),
            self.retry_after,
            self.reset_after,
        )
    }
}

/// A group's policy as a `RateLimit-Policy` header states it.
#[pyclass(frozen, name = "GroupPolicy", module = "ratekeeper._core")]
pub struct PyGroupPolicy {
    #[pyo3(get)]
    group: String,
    #[pyo3(get)]
    quota: u64,
    #[pyo3(get)]
    window: Option<f64>,
    #[pyo3(get)]
    unit: &'static str,
}

impl From<GroupPolicy> for PyGroupPolicy {
    fn from(policy: GroupPolicy) -> Self {
        let unit = if policy.window_ns.is_some() { "requests" } else { "concurrent-requests" };
        Self { group: policy.group, quota: policy.quota, window: policy.window_ns.map(secs), unit }
    }
}

#[pymethods]
impl PyGroupPolicy {
    fn __repr__(&self) -> String {
        let window = self.window.map_or_else(|| "None".to_owned(), |w| format!("{w:?}"));
        format!("GroupPolicy(group={:?}, quota={}, window={window}, unit='{}')", self.group, self.quota, self.unit)
    }
}

/// Where a request goes and what limits it; see `Limiter.resolve`.
#[pyclass(frozen, name = "Resolution", module = "ratekeeper._core")]
pub struct PyResolution {
    #[pyo3(get)]
    group: String,
    #[pyo3(get)]
    policy: &'static str,
    limits: Vec<Limit>,
}

impl From<Resolution> for PyResolution {
    fn from(resolution: Resolution) -> Self {
        Self { group: resolution.group, policy: resolution.policy.name(), limits: resolution.limits }
    }
}

#[pymethods]
impl PyResolution {
    #[getter]
    fn limits(&self) -> Vec<PyLimit> {
        limits_of(&self.limits)
    }

    fn __repr__(&self) -> String {
        let limits: Vec<String> = self.limits.iter().map(limit_repr).collect();
        format!("Resolution(group={:?}, limits=[{}], policy='{}')", self.group, limits.join(", "), self.policy)
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

impl PyQuotaInfo {
    #[must_use]
    pub fn new(info: &QuotaInfo, rule_rate: Option<rate::Rate>, now: u64) -> Self {
        Self {
            rate: info.rate.or(rule_rate).map(|inner| PyRate { inner }),
            source: info.source.name(),
            age: info.since.map(|since| secs(now.saturating_sub(since))),
            fetching: info.fetching,
            failures: info.failures,
        }
    }
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
