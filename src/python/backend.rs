//! `rk.Redis`: where a limiter keeps its states when several processes share its limits.

use std::time::Duration;

use pyo3::prelude::*;

use super::args::positive_seconds;
use crate::backend::client::redact;
use crate::backend::{OnError, Settings};
use crate::error::Error;

#[pyclass(frozen, name = "Redis", module = "ratekeeper._core")]
pub struct PyRedis {
    pub settings: Settings,
    mode: &'static str,
}

#[pymethods]
impl PyRedis {
    #[new]
    #[pyo3(signature = (url, *, mode="exact", timeout=0.05, prefix="ratekeeper:", on_error="local"))]
    fn py_new(url: &Bound<'_, PyAny>, mode: &str, timeout: f64, prefix: &str, on_error: &str) -> PyResult<Self> {
        let url: String = url.extract().map_err(|_| {
            Error::type_error(
                "url",
                format!("must be a str such as 'redis://localhost:6379/0', got {}", super::args::type_name(url)),
            )
        })?;
        if mode != "exact" {
            return Err(Error::value("mode", format!("must be 'exact', got '{mode}'")).into());
        }
        let timeout = Duration::from_nanos(positive_seconds("timeout", timeout)?);
        let on_error = OnError::parse(on_error)?;
        // Checked now, so that a typo fails here rather than at the first request.
        redis::Client::open(url.as_str())
            .map_err(|e| Error::value("url", format!("{url:?} is not a Redis URL: {e}")))?;
        Ok(Self { settings: Settings { url, timeout, prefix: prefix.to_owned(), on_error }, mode: "exact" })
    }

    #[getter]
    fn url(&self) -> &str {
        &self.settings.url
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.mode
    }

    #[getter]
    fn timeout(&self) -> f64 {
        self.settings.timeout.as_secs_f64()
    }

    #[getter]
    fn prefix(&self) -> &str {
        &self.settings.prefix
    }

    #[getter]
    fn on_error(&self) -> &'static str {
        self.settings.on_error.name()
    }

    fn __repr__(&self) -> String {
        format!(
            "Redis({:?}, mode={:?}, timeout={}, prefix={:?}, on_error={:?})",
            redact(&self.settings.url),
            self.mode,
            self.settings.timeout.as_secs_f64(),
            self.settings.prefix,
            self.settings.on_error.name()
        )
    }
}
