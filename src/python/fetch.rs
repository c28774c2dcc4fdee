//! Quota fetch jobs for the Python workers that call the user's provider.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyLookupError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::args::{nanos, type_name};
use super::values::PyRate;
use crate::limiter::{Landing, Limiter, ProviderAnswer, RemoteKey};
use crate::quota::{FetchJob, FetchQueue};

/// The jobs quota workers run; held by the workers instead of the limiter, so that an unreferenced
/// limiter is collected (and its drop closes this queue, which stops them).
#[pyclass(frozen, name = "_FetchQueue", module = "ratekeeper._core")]
pub struct PyFetchQueue {
    pub inner: Arc<FetchQueue>,
}

#[pymethods]
impl PyFetchQueue {
    /// The next job, waiting up to `timeout` seconds without the GIL; None on timeout or once closed.
    fn take(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<PyFetchJob>> {
        let timeout = Duration::from_nanos(nanos("timeout", Some(timeout))?.min(u64::MAX / 4));
        let queue = Arc::clone(&self.inner);
        Ok(py.detach(move || queue.take(timeout)).map(|job| PyFetchJob { job }))
    }

    /// Marks a taken job done (whatever came of it): `wait_quotas` returns once every job is done.
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

/// One fetch: call the provider for (`peer`, `group`) and hand the answer to `Limiter._finish_fetch`.
#[pyclass(frozen, name = "_FetchJob", module = "ratekeeper._core")]
pub struct PyFetchJob {
    pub job: FetchJob,
}

#[pymethods]
impl PyFetchJob {
    #[getter]
    fn peer(&self) -> &str {
        &self.job.peer
    }

    #[getter]
    fn group(&self) -> &str {
        &self.job.group
    }
}

/// What came of a finished fetch; `warning` is what to log (the first failure of a run), if anything.
#[pyclass(frozen, name = "_FetchResult", module = "ratekeeper._core")]
pub struct PyFetchResult {
    /// "landed", "late", "unknown" or "failed".
    #[pyo3(get)]
    outcome: &'static str,
    #[pyo3(get)]
    warning: Option<String>,
}

/// How long a worker may wait for the provider's answer to `job` (the quota timeout (`Quotas(timeout=)`) counted from when
/// the job was taken), in seconds.
pub fn time_left(limiter: &Limiter, job: &FetchJob) -> f64 {
    let timeout = Duration::from_nanos(limiter.quota_settings().timeout_ns);
    let elapsed = job.taken.map_or(Duration::ZERO, |taken| taken.elapsed());
    timeout.saturating_sub(elapsed).as_secs_f64()
}

/// Classifies the provider's answer (or what it raised) and hands it to the core.
/// Hands `answer` (or the provider's `error`) to the limiter; with `replay`, when it moved the key's
/// states, what the store needs to move its own.
pub fn finish(
    limiter: &Limiter,
    job: &FetchJob,
    answer: &Bound<'_, PyAny>,
    error: Option<&Bound<'_, PyAny>>,
    replay: bool,
) -> (PyFetchResult, Option<RemoteKey>) {
    let answer = match error.filter(|e| !e.is_none()) {
        // The provider's way to say "no such account".
        Some(error) if error.is_instance_of::<PyLookupError>() => ProviderAnswer::Unknown,
        Some(error) => ProviderAnswer::Failed(Some(describe(error))),
        None if answer.is_none() => ProviderAnswer::Quota(None),
        None if answer.is_instance_of::<PyString>() || answer.is_instance_of::<PyRate>() => {
            match PyRate::from_arg("quota", answer) {
                Ok(rate) => ProviderAnswer::Quota(Some(rate)),
                Err(error) => ProviderAnswer::Failed(Some(error.to_string())),
            }
        }
        None => ProviderAnswer::Failed(Some(format!(
            "returned {} {}, expected a Rate, a str or None",
            type_name(answer),
            answer.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string())
        ))),
    };
    let mut moved = None;
    let (outcome, warning) = match limiter.finish_fetch(job, answer, replay) {
        Landing::Landed(key) => {
            moved = key;
            ("landed", None)
        }
        Landing::Late => ("late", None),
        Landing::Unknown => ("unknown", None),
        Landing::Failed { first, reason } => (
            "failed",
            first.then(|| {
                format!(
                    "ratekeeper: quota fetch for peer {:?} in group {:?} failed ({}); keeping its current quota \
                     and retrying with backoff (logged once until a fetch succeeds)",
                    job.peer,
                    job.group,
                    reason.as_deref().unwrap_or("no reason given")
                )
            }),
        ),
    };
    (PyFetchResult { outcome, warning }, moved)
}

/// `TimeoutError: ...` for an exception the provider raised.
fn describe(error: &Bound<'_, PyAny>) -> String {
    let text = error.str().map_or_else(|_| String::new(), |s| s.to_string());
    if text.is_empty() {
        type_name(error)
    } else {
        format!("{}: {text}", type_name(error))
    }
}
