//! `rk.Shared`: where a limiter keeps its states so that every worker process of one machine shares
//! them, and `_inspect_region`, which looks at a running service's region.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::args::{int_at_least, str_arg, type_name};
use crate::error::Error;
use crate::limiter::OnStall;
use crate::state_map::region::layout::{region_path, RegionSummary, SharedRegion};

#[pyclass(frozen, name = "Shared", module = "ratekeeper._core")]
pub struct PyShared {
    path: PathBuf,
    name: Option<String>,
    log_entries: Option<usize>,
    on_stall: OnStall,
}

impl PyShared {
    /// The region for a limiter of `max_keys` states: made now, or attached to. Its log pool holds
    /// `log_entries` sliding-log entries (default: an eighth of `max_keys`, at least 16,384), whatever the rules: a
    /// process with a sliding log the pool cannot hold for one key is refused, naming the setting.
    ///
    /// # Errors
    /// As `SharedRegion::open`; a sliding log of the rules longer than the whole pool.
    pub fn open(&self, max_keys: usize, needs_log: usize) -> Result<Arc<SharedRegion>, Error> {
        let log_entries = self.log_entries.unwrap_or((max_keys / DEFAULT_LOG_SHARE).max(MIN_DEFAULT_LOG_ENTRIES));
        let region = SharedRegion::open(&self.path, max_keys, log_entries)?;
        if needs_log > region.log_entries() {
            return Err(Error::value(
                "log_entries",
                format!(
                    "a sliding_log limit of {needs_log} needs {needs_log} log entries for one key; the shared region \
                     {} holds {} in all (log_entries={log_entries}): give rk.Shared(log_entries=...) more",
                    self.path.display(),
                    region.log_entries()
                ),
            ));
        }
        Ok(Arc::new(region))
    }
}

impl PyShared {
    /// What decides a request whose shard a stopped process holds.
    #[must_use]
    pub const fn on_stall(&self) -> OnStall {
        self.on_stall
    }
}

/// `log_entries` is `max_keys` over this by default, and at least `MIN_DEFAULT_LOG_ENTRIES` (256 KiB).
const DEFAULT_LOG_SHARE: usize = 8;
const MIN_DEFAULT_LOG_ENTRIES: usize = 16_384;

#[pymethods]
impl PyShared {
    #[new]
    #[pyo3(
        signature = (name=None, *, path=None, log_entries=None, on_stall=None),
        text_signature = "(name=None, *, path=None, log_entries=None, on_stall='allow')"
    )]
    fn py_new(
        name: Option<&Bound<'_, PyAny>>,
        path: Option<&Bound<'_, PyAny>>,
        log_entries: Option<&Bound<'_, PyAny>>,
        on_stall: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let on_stall = on_stall.map(|s| str_arg("on_stall", s)).transpose()?;
        let on_stall = match on_stall.as_deref().unwrap_or("allow") {
            "allow" => OnStall::Allow,
            "deny" => OnStall::Deny,
            other => return Err(Error::value("on_stall", format!("must be 'allow' or 'deny', got {other:?}")).into()),
        };
        let name = name.filter(|n| !n.is_none()).map(|n| str_arg("name", n)).transpose()?;
        let path = match path.filter(|p| !p.is_none()) {
            None => None,
            Some(p) => Some(p.extract::<PathBuf>().map_err(|_| {
                Error::type_error("path", format!("must be a str or os.PathLike, got {}", type_name(p)))
            })?),
        };
        let path = match (&name, path) {
            (Some(_), Some(_)) => return Err(Error::value("path", "give a name or a path, not both").into()),
            (None, None) => {
                return Err(Error::value("name", "give a name (the region is /dev/shm/ratekeeper-NAME) or path=").into())
            }
            (name, path) => region_path(name.as_deref(), path.as_deref())?,
        };
        let log_entries = match log_entries.filter(|l| !l.is_none()) {
            None => None,
            Some(l) => Some(usize::try_from(int_at_least("log_entries", l, 0)?).unwrap_or(usize::MAX)),
        };
        Ok(Self { path, name, log_entries, on_stall })
    }

    #[getter]
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    #[getter]
    fn path(&self) -> String {
        self.path.display().to_string()
    }

    #[getter]
    fn log_entries(&self) -> Option<usize> {
        self.log_entries
    }

    #[getter(on_stall)]
    const fn on_stall_name(&self) -> &'static str {
        match self.on_stall {
            OnStall::Allow => "allow",
            OnStall::Deny => "deny",
        }
    }

    fn __repr__(&self) -> String {
        match &self.name {
            Some(name) => format!("Shared({name:?})"),
            None => format!("Shared(path={:?})", self.path.display().to_string()),
        }
    }
}

/// The summary as a dict: what `stats()["shared"]` and `inspect` show.
pub fn summary_dict<'py>(py: Python<'py>, summary: &RegionSummary) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("path", &summary.path)?;
    dict.set_item("keys", summary.keys)?;
    dict.set_item("max_keys", summary.max_keys)?;
    dict.set_item("evictions", summary.evictions)?;
    dict.set_item("dropped", summary.dropped)?;
    dict.set_item("allowed", summary.allowed)?;
    dict.set_item("refused", summary.refused)?;
    dict.set_item("top_refused", summary.top_refused.clone())?;
    dict.set_item("groups", summary.group_keys.iter().cloned().collect::<std::collections::BTreeMap<_, _>>())?;
    dict.set_item("stalls", summary.stalls)?;
    dict.set_item("clock", summary.clock)?;
    Ok(dict)
}

/// Looks at the region at `path` without writing to it or taking its locks: what
/// `python -m ratekeeper inspect` prints.
///
/// # Errors
/// No region at `path`, or not one this version can read.
#[pyfunction]
#[pyo3(name = "_inspect_region")]
#[allow(clippy::needless_pass_by_value)] // pyo3 hands the argument over owned
pub fn inspect_region(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let region = py.detach(|| SharedRegion::inspect(&path))?;
    let summary = py.detach(|| region.summary(false, &|_| None));
    summary_dict(py, &summary)
}
