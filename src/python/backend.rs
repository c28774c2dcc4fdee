//! `rk.Redis`: where a limiter keeps its states when several processes share its limits.

use std::time::Duration;

use pyo3::prelude::*;

use super::args::{field, positive_seconds, str_arg, type_name};
use crate::backend::client::{redact, Client};
use crate::backend::standing::Standing;
use crate::backend::{OnError, Settings, Spec};
use crate::error::Error;

#[pyclass(frozen, name = "Redis", module = "ratekeeper._core")]
pub struct PyRedis {
    pub spec: Spec,
    mode: &'static str,
}

#[pymethods]
impl PyRedis {
    #[new]
    #[pyo3(signature = (
        url, *, mode="exact", timeout=0.05, prefix="ratekeeper:", on_error="local", sync_interval=None, tls_ca_file=None,
        lease_ttl=300.0, lease_span=None, standing_shares=None, standing_fraction=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        url: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = field::mode)] mode: &str,
        #[pyo3(from_py_with = field::timeout)] timeout: f64,
        #[pyo3(from_py_with = field::prefix)] prefix: &str,
        #[pyo3(from_py_with = field::on_error)] on_error: &str,
        #[pyo3(from_py_with = field::sync_interval)] sync_interval: Option<f64>,
        #[pyo3(from_py_with = field::tls_ca_file)] tls_ca_file: Option<std::path::PathBuf>,
        #[pyo3(from_py_with = field::lease_ttl)] lease_ttl: f64,
        #[pyo3(from_py_with = field::lease_span)] lease_span: Option<f64>,
        #[pyo3(from_py_with = field::standing_shares)] standing_shares: Option<u64>,
        #[pyo3(from_py_with = field::standing_fraction)] standing_fraction: Option<u32>,
    ) -> PyResult<Self> {
        if !url.is_instance_of::<pyo3::types::PyString>() {
            let message = format!("must be a str such as 'redis://localhost:6379/0', got {}", type_name(url));
            return Err(Error::type_error("url", message).into());
        }
        let url = str_arg("url", url)?;
        let mode = match mode {
            "exact" => "exact",
            "sync" => "sync",
            "lease" => "lease",
            _ => return Err(Error::value("mode", format!("must be 'exact', 'sync' or 'lease', got '{mode}'")).into()),
        };
        // A mode's own setting given for another mode would do nothing: said, not ignored.
        let given = [
            ("sync_interval", sync_interval.is_some(), "sync"),
            ("lease_span", lease_span.is_some(), "lease"),
            ("standing_shares", standing_shares.is_some(), "lease"),
            ("standing_fraction", standing_fraction.is_some(), "lease"),
        ];
        for (field, given, its_mode) in given {
            if given && mode != its_mode {
                let message =
                    format!("is {its_mode} mode's setting: give it with mode='{its_mode}', not mode='{mode}'");
                return Err(Error::value(field, message).into());
            }
        }
        let sync_interval = Duration::from_nanos(positive_seconds("sync_interval", sync_interval.unwrap_or(1.0))?);
        let timeout = Duration::from_nanos(positive_seconds("timeout", timeout)?);
        let on_error = OnError::parse(on_error)?;
        // Checked now, so that a typo fails here rather than at the first request.
        Client::check_url(&url)?;
        let tls_ca = match tls_ca_file {
            None => None,
            Some(path) => Some(
                std::fs::read(&path)
                    .map_err(|e| Error::value("tls_ca_file", format!("cannot read {}: {e}", path.display())))?,
            ),
        };
        let standing = standing_of(standing_shares, standing_fraction)?;
        let lease_ttl = Duration::from_nanos(positive_seconds("lease_ttl", lease_ttl)?);
        let lease_span = Duration::from_nanos(positive_seconds("lease_span", lease_span.unwrap_or(0.1))?);
        let settings = Settings { url, tls_ca, timeout, prefix: prefix.to_owned(), on_error, lease_ttl };
        let spec = Spec {
            settings,
            sync_interval: (mode == "sync").then_some(sync_interval),
            lease_span: (mode == "lease").then_some(lease_span),
            standing,
        };
        Ok(Self { spec, mode })
    }

    #[getter]
    fn url(&self) -> &str {
        &self.spec.settings.url
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.mode
    }

    #[getter]
    fn sync_interval(&self) -> Option<f64> {
        self.spec.sync_interval.map(|d| d.as_secs_f64())
    }

    #[getter]
    fn lease_span(&self) -> Option<f64> {
        self.spec.lease_span.map(|d| d.as_secs_f64())
    }

    #[getter]
    fn standing_shares(&self) -> Option<u32> {
        self.spec.standing.map(|s| s.shares)
    }

    #[getter]
    fn standing_fraction(&self) -> Option<f64> {
        self.spec.standing.map(|s| f64::from(s.fraction_ppm) / 1e6)
    }

    #[getter]
    fn lease_ttl(&self) -> f64 {
        self.spec.settings.lease_ttl.as_secs_f64()
    }

    #[getter]
    fn timeout(&self) -> f64 {
        self.spec.settings.timeout.as_secs_f64()
    }

    #[getter]
    fn prefix(&self) -> &str {
        &self.spec.settings.prefix
    }

    #[getter]
    fn on_error(&self) -> &'static str {
        self.spec.settings.on_error.name()
    }

    fn __repr__(&self) -> String {
        format!(
            "Redis({:?}, mode={:?}, timeout={}, prefix={:?}, on_error={:?}{})",
            redact(&self.spec.settings.url),
            self.mode,
            self.spec.settings.timeout.as_secs_f64(),
            self.spec.settings.prefix,
            self.spec.settings.on_error.name(),
            self.spec.sync_interval.map_or_else(String::new, |d| format!(", sync_interval={}", d.as_secs_f64()))
                + &self.spec.lease_span.map_or_else(String::new, |d| format!(", lease_span={}", d.as_secs_f64()))
                + &self.spec.standing.map_or_else(String::new, |s| format!(
                    ", standing_shares={}, standing_fraction={}",
                    s.shares,
                    f64::from(s.fraction_ppm) / 1e6
                ))
        )
    }
}

/// The most standing shares: a pool call reads every slot.
const MOST_SHARES: u64 = 1024;

/// Lease mode's standing shares from `standing_shares` and `standing_fraction` (default a half).
fn standing_of(shares: Option<u64>, fraction_ppm: Option<u32>) -> PyResult<Option<Standing>> {
    let Some(shares) = shares else {
        if fraction_ppm.is_some() {
            let message = "needs standing_shares: how many processes hold a share (standing_shares=4)";
            return Err(Error::value("standing_fraction", message).into());
        }
        return Ok(None);
    };
    if shares > MOST_SHARES {
        return Err(Error::value("standing_shares", format!("must be at most {MOST_SHARES}, got {shares}")).into());
    }
    // At most 1024: fits.
    let shares = u32::try_from(shares).unwrap_or(u32::MAX);
    Ok(Some(Standing { shares, fraction_ppm: fraction_ppm.unwrap_or(500_000) }))
}
