//! The outgoing transports' engine for Python (`ratekeeper._core._Outgoing`, used by
//! `ratekeeper._outgoing.Outgoing`): a call's admission and its reply's reading, one call into the core
//! each; and `_read_server_word`, the reader behind `ratekeeper._server_words.read`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};
use smallvec::SmallVec;

use super::args::word_nanos;
use super::limiter::{log_notice, PyLimiter};
use crate::error::{Error, Result};
use crate::limiter::{Decision, Request, Target};
use crate::outgoing::{Admission, Budgets, Counts, Engine, Plan, Settings, Ticket};
use crate::server_words::{self, field_of_name, field_of_raw, Dialect, Said, Warning, INLINE_VALUES};
use crate::store::StateStore;

/// The limiter's budgets as the engine reaches them: through its store, letting other threads run
/// while a store waits on I/O, logging what the store asks to.
struct Through<'a, 'py> {
    py: Python<'py>,
    limiter: &'a PyLimiter,
}

impl Budgets for Through<'_, '_> {
    fn check(&self, key: &str, group: &str, units: u64) -> Result<Decision> {
        let target = Target::Group(group);
        self.limiter.wait_first_fetch(self.py, key, target);
        let answer = self
            .limiter
            .in_store(self.py, |store| store.decide(key, target, Request::new(units).reporting().looking()))?;
        log_notice(self.py, &answer);
        Ok(answer.decision)
    }

    fn give_back(&self, key: &str, group: &str, units: u64) -> Result<()> {
        self.limiter.in_store(self.py, |store| store.reduce(key, Target::Group(group), units)).map(|_| ())
    }

    fn cap(&self, key: &str, group: &str, remaining: u64, reset_after: f64, age: f64) -> Result<bool> {
        let times = (word_nanos("reset_after", reset_after)?, word_nanos("age", age)?);
        self.limiter.in_store(self.py, |store| store.cap(key, Target::Group(group), remaining, times))
    }

    fn routed(&self, key: &str, path: Option<&str>) -> Result<Option<String>> {
        Ok(self.limiter.core().routed_group(key, path))
    }
}

/// The engine of one `Outgoing`.
#[pyclass(frozen, name = "_Outgoing", module = "ratekeeper._core")]
pub struct PyOutgoing {
    engine: Engine,
    limiter: Py<PyLimiter>,
}

/// Where a call spends (`_Outgoing.plan`).
#[pyclass(frozen, name = "_Plan", module = "ratekeeper._core")]
pub struct PyPlan {
    plan: Arc<Plan>,
}

#[pymethods]
impl PyPlan {
    /// `(group, units, whether the group is a budget's)`, in the order they are spent.
    #[getter]
    fn steps(&self) -> Vec<(String, u64, bool)> {
        self.plan.steps.iter().map(|(group, units, is_budget)| (group.to_string(), *units, *is_budget)).collect()
    }
}

/// One admitted attempt of a call (what `_Outgoing.settle` takes in).
#[pyclass(frozen, name = "_Ticket", module = "ratekeeper._core")]
pub struct PyTicket {
    key: Py<PyString>,
    host: Py<PyString>,
    ticket: Ticket,
    estimate: Option<Py<PyDict>>,
}

#[pymethods]
impl PyTicket {
    /// The key the call's budgets are kept under.
    #[getter]
    fn key(&self, py: Python<'_>) -> Py<PyString> {
        self.key.clone_ref(py)
    }

    /// The host called.
    #[getter]
    fn host(&self, py: Python<'_>) -> Py<PyString> {
        self.host.clone_ref(py)
    }

    /// Budget -> the group it spent in.
    #[getter]
    fn budgets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let budgets = PyDict::new(py);
        for (budget, group) in &self.ticket.plan.budgets {
            budgets.set_item(budget, &**group)?;
        }
        Ok(budgets)
    }

    /// Budget -> the units the cost function estimated (empty without one).
    #[getter]
    fn estimate<'py>(&self, py: Python<'py>) -> Bound<'py, PyDict> {
        self.estimate.as_ref().map_or_else(|| PyDict::new(py), |e| e.bind(py).clone())
    }

    /// Seconds since the call was admitted.
    fn age(&self) -> f64 {
        self.ticket.age()
    }
}

#[pymethods]
impl PyOutgoing {
    #[new]
    #[pyo3(signature = (limiter, groups, *, auto_groups, window, dialect, obey))]
    fn py_new(
        limiter: &Bound<'_, PyLimiter>,
        groups: &Bound<'_, PyDict>,
        auto_groups: bool,
        window: f64,
        dialect: Option<&str>,
        obey: bool,
    ) -> PyResult<Self> {
        let declared = groups.iter().map(|(b, g)| Ok((b.extract()?, g.extract()?))).collect::<PyResult<_>>()?;
        let dialect = dialect_named(dialect)?;
        let settings = Settings { declared, auto_groups, window, dialect, obey };
        Ok(Self { engine: Engine::new(settings), limiter: limiter.clone().unbind() })
    }

    /// Spends the call's units in every group that applies to it, all or nothing: its `_Ticket` when
    /// admitted, else the refusal's `Decision`, or the seconds to hold a call admitted too close to a
    /// filling window's end (not with `guard=False`).
    #[pyo3(signature = (key, host, path, estimate, guard))]
    fn admit<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyString>,
        host: &Bound<'py, PyString>,
        path: Option<&str>,
        estimate: Option<&Bound<'py, PyDict>>,
        guard: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let units = units_of(estimate)?;
        let limiter = self.limiter.get();
        let call = (key.to_str()?, host.to_str()?, path);
        match self.engine.admit(&Through { py, limiter }, call, &units, guard)? {
            Admission::Admitted(ticket) => {
                let (key, host) = (key.clone().unbind(), host.clone().unbind());
                let estimate = estimate.map(|e| e.clone().unbind());
                Ok(Bound::new(py, PyTicket { key, host, ticket, estimate })?.into_any())
            }
            Admission::Refused(decision) => Ok(Bound::new(py, limiter.decision(py, &decision))?.into_any()),
            Admission::Held(seconds) => Ok(PyFloat::new(py, seconds).into_any()),
        }
    }

    /// The short way's admission, for calls keyed by their host with no cost estimate: the `_Ticket`
    /// of a call to `host`'s `path` admitted now, or None (nothing spent) when no call to `host` came
    /// back yet (`heard_from`) or this one is not admitted at once: it goes the long way (`admit`).
    pub(super) fn admit_heard(
        &self,
        py: Python<'_>,
        host: &Bound<'_, PyString>,
        path: Option<&str>,
    ) -> PyResult<Option<PyTicket>> {
        let limiter = self.limiter.get();
        let Some(ticket) = self.engine.admit_heard(&Through { py, limiter }, host.to_str()?, path)? else {
            return Ok(None);
        };
        let host = host.clone().unbind();
        Ok(Some(PyTicket { key: host.clone_ref(py), host, ticket, estimate: None }))
    }

    /// `admit_heard` of a call whose URL httpx keeps parsed as `parts`
    /// (`httpx._urlparse.ParseResult`: scheme, userinfo, host, port, path, query, fragment; the port
    /// None when it is the scheme's default), its host and path read here: the same `_Ticket` or None,
    /// or False when the parts are for Python to read (a path with escapes or none, parts of another
    /// shape), which then asks `admit_heard`.
    fn admit_parts<'py>(&self, py: Python<'py>, parts: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let Some((host, path)) = url_parts(py, parts)? else {
            return Ok(PyBool::new(py, false).to_owned().into_any());
        };
        match self.admit_heard(py, &host, Some(path.to_str()?))? {
            Some(ticket) => Ok(Bound::new(py, ticket)?.into_any()),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// A call to `host` came back (answered, failed or refused): its calls may take the short way.
    fn heard_from(&self, host: &str) {
        self.engine.heard_from(host);
    }

    /// Where the call spends, for asyncio over a store that waits on I/O, which awaits each check itself
    /// (`Limiter.acheck`) and then asks for its `ticket`; no I/O here.
    #[pyo3(signature = (key, host, path, estimate))]
    fn plan(
        &self,
        py: Python<'_>,
        key: &str,
        host: &str,
        path: Option<&str>,
        estimate: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPlan> {
        let units = units_of(estimate)?;
        let limiter = self.limiter.get();
        Ok(PyPlan { plan: self.engine.plan_of(&Through { py, limiter }, (key, host, path), &units)? })
    }

    /// Seconds to hold a call admitted `min(ends)` seconds before the end of a budget's window that is
    /// more than half used, when calls to `host` take longer to reach the server; else 0.0.
    fn crossing(&self, host: &str, ends: Vec<f64>) -> f64 {
        self.engine.crossing(host, ends.into_iter().reduce(f64::min))
    }

    /// The ticket of a call admitted now in every step of `plan`.
    #[pyo3(signature = (key, host, plan, estimate))]
    #[allow(clippy::unused_self)] // the engine's method for Python, beside `plan` and `crossing`
    fn ticket(
        &self,
        key: &Bound<'_, PyString>,
        host: &Bound<'_, PyString>,
        plan: &PyPlan,
        estimate: Option<&Bound<'_, PyDict>>,
    ) -> PyTicket {
        PyTicket {
            key: key.clone().unbind(),
            host: host.clone().unbind(),
            ticket: Ticket::new(plan.plan.clone()),
            estimate: estimate.map(|e| e.clone().unbind()),
        }
    }

    /// Takes in the reply to `ticket`'s call: its `headers` as the client keeps them (see
    /// `said_of`) and `status`. None when nothing is left for Python, else `(retry, unmade)`: the
    /// seconds to wait before sending the call again (None: the reply is the answer), and
    /// `(budget, limit, window, remaining, reset_after, algorithm)` of each budget whose auto-group is to be
    /// made.
    fn settle<'py>(
        &self,
        py: Python<'py>,
        ticket: &Bound<'py, PyTicket>,
        headers: &Bound<'py, PyAny>,
        status: i64,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.settle_ticket(py, ticket.get(), headers, status)
    }

    /// Gives back what `ticket`'s call spent: it never reached the server (no connection was made).
    fn unspend(&self, py: Python<'_>, ticket: &Bound<'_, PyTicket>) -> PyResult<()> {
        let ticket = ticket.get();
        let limiter = self.limiter.get();
        let key = ticket.key.bind(py).to_str()?;
        Ok(self.engine.unspend(&Through { py, limiter }, key, &ticket.ticket)?)
    }

    /// Python made (or resized) `group` for `budget` at `host`, `limit` per `window` seconds.
    fn made(&self, host: &str, budget: &str, group: &str, limit: u64, window: f64) {
        self.engine.made(host, budget, group, limit, window);
    }

    /// Whether a refusal by `group` for `key`'s call to `host` is the limit's own guess, which the server's
    /// next word may end sooner (see `Engine::guessing`): a call waits on rather than fail at once.
    fn guessing(&self, key: &str, host: &str, group: &str) -> bool {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.engine.guessing((key, host), group, now)
    }

    /// `(group, limit, window)` of `budget`'s auto-group at `host` as last made, or None.
    fn made_group(&self, host: &str, budget: &str) -> Option<(String, u64, f64)> {
        self.engine.made_group(host, budget)
    }

    /// Adds to `key`'s counters.
    #[pyo3(signature = (key, *, waits = 0, waited = 0.0, refused = 0, retries = 0))]
    fn count(&self, key: &str, waits: u64, waited: f64, refused: u64, retries: u64) {
        self.engine.count(key, Counts { waits, waited, refused, retries });
    }

    /// Each key's counters, as `HostStats` dicts (copies).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let all = PyDict::new(py);
        for (key, s) in self.engine.stats() {
            let stats = PyDict::new(py);
            stats.set_item("calls", s.calls)?;
            stats.set_item("waits", s.waits)?;
            stats.set_item("waited", s.waited)?;
            stats.set_item("refused", s.refused)?;
            stats.set_item("throttled", s.throttled)?;
            stats.set_item("retries", s.retries)?;
            stats.set_item("dialect", s.dialect)?;
            let remaining = PyDict::new(py);
            for (name, value) in s.remaining {
                remaining.set_item(name, value)?;
            }
            let reset = PyDict::new(py);
            for (name, value) in s.reset {
                reset.set_item(name, value)?;
            }
            stats.set_item("remaining", remaining)?;
            stats.set_item("reset", reset)?;
            stats.set_item("said_at", s.said_at)?;
            all.set_item(key, stats)?;
        }
        Ok(all)
    }
}

impl PyOutgoing {
    /// `settle` of a ticket the caller holds (or `_HttpxSend` made).
    pub(super) fn settle_ticket<'py>(
        &self,
        py: Python<'py>,
        ticket: &PyTicket,
        headers: &Bound<'py, PyAny>,
        status: i64,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut kept = Kept::default();
        let mut said = Said::new();
        said_of(headers, &mut kept, &mut said)?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let limiter = self.limiter.get();
        let (key, host) = (ticket.key.bind(py).to_str()?, ticket.host.bind(py).to_str()?);
        let settled =
            self.engine.settle(&Through { py, limiter }, (key, host), &ticket.ticket, &said, (status, now))?;
        warn(py, &settled.warnings);
        for (group, error) in settled.not_applied {
            let error = PyErr::from(error).into_value(py);
            let message = "the server's word for %s in group %r was not applied: %s";
            let logged = outgoing_logger(py).and_then(|log| log.call_method1("warning", (message, key, group, error)));
            if let Err(error) = logged {
                error.write_unraisable(py, None);
            }
        }
        if settled.retry.is_none() && settled.unmade.is_empty() {
            return Ok(None);
        }
        let unmade =
            settled.unmade.into_iter().map(|u| (u.budget, u.limit, u.window, u.remaining, u.reset_after, u.algorithm));
        Ok(Some((settled.retry, PyTuple::new(py, unmade)?).into_pyobject(py)?))
    }
}

/// What the response with `headers` and `status` says about the server's limits, read as of `now`
/// (epoch seconds) in `dialect` (None: the one it carries): `(dialect, budgets, retry_after)`, the
/// dialect `""` for none and each budget `(name, remaining, reset_after, limit, window)`. Values
/// ignored are logged once per dialect and field (`ratekeeper._server_words._warn`).
///
/// # Errors
/// `dialect` names no dialect; `headers` cannot be iterated.
#[pyfunction]
#[pyo3(signature = (headers, status, now, dialect = None))]
#[allow(clippy::type_complexity)]
pub fn _read_server_word(
    py: Python<'_>,
    headers: &Bound<'_, PyAny>,
    status: &Bound<'_, PyAny>,
    now: f64,
    dialect: Option<&str>,
) -> PyResult<(&'static str, Vec<(String, u64, f64, Option<u64>, Option<f64>)>, Option<f64>)> {
    let dialect = dialect_named(dialect)?;
    let mut kept = Kept::default();
    let mut said = Said::new();
    said_of(headers, &mut kept, &mut said)?;
    // A status out of range is no status read for a wait.
    let status = status.extract::<i64>().unwrap_or(0);
    let mut warnings = Vec::new();
    let word = server_words::read(&said, status, now, dialect, &mut warnings);
    warn(py, &warnings);
    let budgets =
        word.budgets.into_iter().map(|b| (b.name.into_owned(), b.remaining, b.reset_after, b.limit, b.window));
    Ok((word.dialect.map_or("", Dialect::name), budgets.collect(), word.retry_after))
}

/// The host (with its port, which httpx leaves out when it is the scheme's default) and path of an
/// httpx URL's `parts`, or None when they are for Python to read (see `_Outgoing.admit_parts`).
pub(super) fn url_parts<'py>(
    py: Python<'py>,
    parts: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, PyString>)>> {
    let Ok(parts) = parts.cast::<PyTuple>() else { return Ok(None) };
    if parts.len() != 7 {
        return Ok(None);
    }
    let (host, port, path) = (parts.get_borrowed_item(2)?, parts.get_borrowed_item(3)?, parts.get_borrowed_item(4)?);
    let (Ok(host), Ok(path)) = (host.cast_exact::<PyString>(), path.cast_exact::<PyString>()) else {
        return Ok(None);
    };
    let name = host.to_str()?;
    let text = path.to_str()?;
    // The host is keyed as sent (an IDNA name in its `xn--` form); an escaped path, unescaped, in Python.
    if text.is_empty() || text.as_bytes().contains(&b'%') {
        return Ok(None);
    }
    if port.is_none() {
        return Ok(Some((host.to_owned(), path.to_owned())));
    }
    let Ok(port) = port.extract::<u16>() else { return Ok(None) };
    // An IPv6 address in brackets, as in a URL (and as `host_of` keys it).
    let host = if name.contains(':') { format!("[{name}]:{port}") } else { format!("{name}:{port}") };
    Ok(Some((PyString::new(py, &host), path.to_owned())))
}

/// A cost function's estimate as (budget, units).
fn units_of(estimate: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, u64)>> {
    match estimate {
        None => Ok(Vec::new()),
        Some(e) => e.iter().map(|(b, u)| Ok((b.extract()?, u.extract()?))).collect(),
    }
}

fn dialect_named(name: Option<&str>) -> PyResult<Option<Dialect>> {
    let Some(name) = name else { return Ok(None) };
    match Dialect::named(name) {
        Some(dialect) => Ok(Some(dialect)),
        None => Err(Error::value("dialect", format!("{name:?} is not a dialect")).into()),
    }
}

/// The values of a reply's rate-limit fields as the headers hold them, (field, value) in the headers'
/// order (so that `Said` joins a repeated field's values in it): nothing allocated for a reply of up to
/// `Said`'s inline count of fields (the transports read one per call).
type Kept<'py> = SmallVec<[(usize, Bound<'py, PyAny>); INLINE_VALUES]>;

/// The rate-limit fields among `headers`, in whichever raw form the client keeps them: pairs of
/// (name, value), each str or bytes (httpx's `Headers.raw`, aiohttp's `raw_headers`, `read`'s
/// pairs); httpx's `Headers._list` triples (raw name, lower-case name, value); or a dict of names to
/// values or to (name, value) pairs (`read_fields`' dict, requests' `CaseInsensitiveDict._store`).
/// Anything else in it is passed over: nothing a server sends raises. The values of the fields kept
/// are held in `kept`, which the fields borrow from.
///
/// Every header of every response passes here, so the exact types the clients use (list, tuple,
/// bytes, str) are tried first: telling them apart is a pointer comparison, where a subclass check is
/// a call into Python.
fn said_of<'a, 'py>(headers: &Bound<'py, PyAny>, kept: &'a mut Kept<'py>, said: &mut Said<'a>) -> PyResult<()> {
    if let Ok(list) = headers.cast_exact::<PyList>() {
        for item in list.iter() {
            keep_item(kept, &item)?;
        }
    } else if let Ok(tuple) = headers.cast_exact::<PyTuple>() {
        for item in tuple.iter_borrowed() {
            keep_item(kept, &item)?;
        }
    } else if let Ok(dict) = headers.cast::<PyDict>() {
        for (name, value) in dict.iter() {
            if let Some(field) = field_named(name.as_borrowed()) {
                match value.cast_exact::<PyTuple>() {
                    Ok(pair) if pair.len() == 2 => kept.push((field, pair.get_item(1)?)),
                    _ => kept.push((field, value)),
                }
            }
        }
    } else if let Ok(list) = headers.cast::<PyList>() {
        for item in list.iter() {
            keep_item(kept, &item)?;
        }
    } else if let Ok(tuple) = headers.cast::<PyTuple>() {
        for item in tuple.iter_borrowed() {
            keep_item(kept, &item)?;
        }
    } else {
        for item in headers.try_iter()? {
            keep_item(kept, &item?)?;
        }
    }
    let kept: &'a Kept<'py> = kept;
    for &(field, ref value) in kept {
        if let Ok(value) = value.cast_exact::<PyBytes>() {
            add_bytes(said, field, value.as_bytes());
        } else if let Ok(value) = value.cast_exact::<PyString>() {
            add_str(said, field, value);
        } else if let Ok(value) = value.cast::<PyBytes>() {
            add_bytes(said, field, value.as_bytes());
        } else if let Ok(value) = value.cast::<PyString>() {
            add_str(said, field, value);
        }
    }
    Ok(())
}

fn add_bytes<'a>(said: &mut Said<'a>, field: usize, bytes: &'a [u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => said.add(field, text),
        // Latin-1, as HTTP clients decode what is not UTF-8.
        Err(_) => said.add(field, bytes.iter().map(|&b| char::from(b)).collect::<String>()),
    }
}

fn add_str<'a>(said: &mut Said<'a>, field: usize, value: &'a Bound<'_, PyString>) {
    match value.to_str() {
        Ok(text) => said.add(field, text),
        Err(_) => said.add(field, value.to_string_lossy().into_owned()),
    }
}

/// Keeps the value of a header item that is a rate-limit field: a (name, value) pair, or httpx's
/// (raw name, lower-case name, value) triple: either way the name is the item before the last.
fn keep_item<'py>(kept: &mut Kept<'py>, item: &Bound<'py, PyAny>) -> PyResult<()> {
    let Ok(tuple) = item.cast_exact::<PyTuple>().or_else(|_| item.cast::<PyTuple>()) else {
        if let Ok((name, value)) = item.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>() {
            if let Some(field) = field_named(name.as_borrowed()) {
                kept.push((field, value));
            }
        }
        return Ok(());
    };
    let size = tuple.len();
    if size == 2 || size == 3 {
        if let Some(field) = field_named(tuple.get_borrowed_item(size - 2)?) {
            kept.push((field, tuple.get_item(size - 1)?));
        }
    }
    Ok(())
}

/// The field a header name (str or bytes, any case) is, if the reader keeps it.
fn field_named(name: Borrowed<'_, '_, PyAny>) -> Option<usize> {
    if let Ok(name) = name.cast_exact::<PyBytes>() {
        field_of_raw(name.as_bytes())
    } else if let Ok(name) = name.cast_exact::<PyString>() {
        field_of_str(name)
    } else if let Ok(name) = name.cast::<PyBytes>() {
        field_of_raw(name.as_bytes())
    } else if let Ok(name) = name.cast::<PyString>() {
        field_of_str(name)
    } else {
        None
    }
}

fn field_of_str(name: Borrowed<'_, '_, PyString>) -> Option<usize> {
    match name.to_str() {
        Ok(text) => field_of_name(text),
        Err(_) => field_of_name(&name.to_string_lossy()),
    }
}

/// Hands the values ignored to `ratekeeper._server_words._warn`, which logs each once per dialect and
/// field (a failure to log is not the caller's problem).
fn warn(py: Python<'_>, warnings: &[Warning]) {
    if warnings.is_empty() {
        return;
    }
    let warned = py.import(intern!(py, "ratekeeper._server_words")).and_then(|module| {
        let say = module.getattr(intern!(py, "_warn"))?;
        for w in warnings {
            say.call1((w.dialect.map_or("", Dialect::name), w.field, w.value.as_deref(), &w.why))?;
        }
        Ok(())
    });
    if let Err(error) = warned {
        error.write_unraisable(py, None);
    }
}

/// The `ratekeeper.outgoing` logger.
fn outgoing_logger(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import(intern!(py, "logging"))?.call_method1(intern!(py, "getLogger"), ("ratekeeper.outgoing",))
}
