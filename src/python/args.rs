//! Arguments from Python, and the core's errors as Python exceptions (one place for both).

use pyo3::exceptions::{PyConnectionError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};

use crate::error::{Error, ErrorKind, Loc};
use crate::limiter::Target;

static INVALID_VALUE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static BACKEND_UNAVAILABLE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `ratekeeper.InvalidValue` / `InvalidType` (subclasses of `ValueError` / `TypeError`) carrying the
/// error's location as `loc`; the builtin classes if the package cannot be imported.
impl From<Error> for PyErr {
    fn from(error: Error) -> Self {
        Python::attach(|py| {
            let (cell, name) = match error.kind {
                ErrorKind::Value => (&INVALID_VALUE, "InvalidValue"),
                ErrorKind::Type => (&INVALID_TYPE, "InvalidType"),
                ErrorKind::Backend => (&BACKEND_UNAVAILABLE, "BackendUnavailable"),
            };
            let raised = cell.import(py, "ratekeeper._errors", name).and_then(|class| {
                if error.kind == ErrorKind::Backend {
                    return class.call1((&error.message,));
                }
                let loc = error.loc.iter().map(|part| match part {
                    Loc::Key(key) => PyString::new(py, key).into_any(),
                    Loc::Index(index) => {
                        let Ok(index) = index.into_pyobject(py);
                        index.into_any()
                    }
                });
                let loc = PyTuple::new(py, loc)?;
                class.call1((loc, &error.message))
            });
            match raised {
                Ok(exception) => PyErr::from_value(exception),
                Err(_) => match error.kind {
                    ErrorKind::Value => PyValueError::new_err(error.to_string()),
                    ErrorKind::Type => PyTypeError::new_err(error.to_string()),
                    ErrorKind::Backend => PyConnectionError::new_err(error.to_string()),
                },
            }
        })
    }
}

#[allow(clippy::cast_precision_loss)]
pub fn secs(ns: u64) -> f64 {
    if ns == u64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / 1e9
    }
}

/// Seconds as a duration in nanoseconds (`None` and infinity: for ever).
pub fn nanos(field: &str, seconds: Option<f64>) -> Result<u64, Error> {
    match seconds {
        None => Ok(u64::MAX),
        Some(s) if s.is_nan() || s < 0.0 => Err(Error::value(field, format!("must be >= 0 seconds, got {s}"))),
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        Some(s) => Ok(if s * 1e9 >= u64::MAX as f64 { u64::MAX } else { (s * 1e9).round() as u64 }),
    }
}

/// A duration in seconds that must be finite and above zero, in nanoseconds.
pub fn positive_seconds(field: &str, seconds: f64) -> Result<u64, Error> {
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(Error::value(field, format!("must be a positive number of seconds, got {seconds}")));
    }
    nanos(field, Some(seconds))
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// The `cost` argument: a positive int, checked at the boundary.
#[derive(Clone, Copy)]
pub struct Cost(pub u64);

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

pub fn positive_int(field: &str, obj: &Bound<'_, PyAny>) -> Result<u64, Error> {
    match obj.extract::<i64>() {
        Ok(n) if n >= 1 => Ok(n.unsigned_abs()),
        Ok(n) => Err(Error::value(field, format!("must be a positive integer, got {n}"))),
        Err(_) => Err(Error::type_error(field, format!("must be an int, got {}", type_name(obj)))),
    }
}

/// A str argument of the hot path, borrowed; the error names the field (pyo3's only notes it).
#[inline]
pub fn text<'a>(field: &str, obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    match obj.cast::<PyString>() {
        Ok(s) => s.to_str(),
        Err(_) => Err(Error::type_error(field, format!("must be a str, got {}", type_name(obj))).into()),
    }
}

#[inline]
pub fn optional_text<'a>(field: &str, obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a str>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => text(field, o).map(Some),
    }
}

/// What a request is for: its path, or the group named with `group=` (not both).
#[inline]
pub fn target<'a>(path: Option<&'a Bound<'_, PyAny>>, group: Option<&'a Bound<'_, PyAny>>) -> PyResult<Target<'a>> {
    let path = optional_text("path", path)?;
    match optional_text("group", group)? {
        None => Ok(Target::Path(path)),
        Some(_) if path.is_some() => {
            Err(Error::value("group", "give a path (routed by the rules) or a group, not both").into())
        }
        Some(group) => Ok(Target::Group(group)),
    }
}

pub fn str_arg(field: &str, obj: &Bound<'_, PyAny>) -> Result<String, Error> {
    obj.cast::<PyString>()
        .map(|s| s.to_string_lossy().into_owned())
        .map_err(|_| Error::type_error(field, format!("must be a str, got {}", type_name(obj))))
}

/// A list of str; a single str is refused (it would be read as its characters).
pub fn strings(field: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    if obj.is_instance_of::<PyString>() {
        return Err(Error::type_error(field, "must be a list of str, not a single str").into());
    }
    let iter = obj
        .try_iter()
        .map_err(|_| Error::type_error(field, format!("must be a list of str, got {}", type_name(obj))))?;
    iter.enumerate().map(|(i, item)| Ok(str_arg(&format!("{field}[{i}]"), &item?)?)).collect()
}
