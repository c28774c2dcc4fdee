//! Arguments from Python, and the core's errors as Python exceptions (one place for both).

use std::borrow::Cow;

use pyo3::exceptions::{PyConnectionError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple, PyType};

use crate::clock::MAX_MANUAL_NS;
use crate::error::{Error, ErrorKind, Loc};
use crate::limiter::Target;

static INVALID_VALUE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static BACKEND_UNAVAILABLE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `ratekeeper.InvalidValue` / `InvalidType` (subclasses of `ValueError` / `TypeError`) carrying the
/// error's location as `loc`; the builtin classes if the package cannot be imported.
impl From<Error> for PyErr {
    fn from(error: Error) -> Self {
        let error = Error { message: shortened(error.message), ..error };
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

/// A message of a few hundred characters at most: a huge value quoted in it (a 10 MB rate string or
/// group name) is cut in the middle, keeping its start and the end of the text.
fn shortened(message: String) -> String {
    const KEEP: usize = 200;
    if message.len() <= 3 * KEEP {
        return message;
    }
    let mut head = KEEP;
    while !message.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = message.len() - KEEP;
    while !message.is_char_boundary(tail) {
        tail += 1;
    }
    let left_out = message[head..tail].chars().count();
    format!("{}...[{left_out} characters left out]...{}", &message[..head], &message[tail..])
}

#[allow(clippy::cast_precision_loss)]
pub fn secs(ns: u64) -> f64 {
    if ns == u64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / 1e9
    }
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

// --- Numbers -----------------------------------------------------------------------------------------------
//
// pyo3's own `f64` / `i64` / `usize` / `bool` extraction neither names our field nor refuses a bool
// (an int to Python), and overflows as `OverflowError`; every number argument comes through here instead.

/// `bool` is a subclass of `int` in Python, refused wherever a number is expected. `PyBool_Check` is one
/// type-pointer compare (bool cannot be subclassed).
#[inline]
fn is_bool(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBool>()
}

/// An int from `min` up to `i64::MAX` (a count, a cost, a burst); not a bool, a float or a str.
pub fn int_at_least(field: &str, obj: &Bound<'_, PyAny>, min: u64) -> Result<u64, Error> {
    if is_bool(obj) {
        return Err(Error::type_error(field, format!("must be an int, got bool ({})", obj_text(obj))));
    }
    let wanted = || if min == 1 { "a positive integer".to_owned() } else { format!("an integer >= {min}") };
    match obj.extract::<i64>() {
        Ok(n) => u64::try_from(n)
            .ok()
            .filter(|&n| n >= min)
            .ok_or_else(|| Error::value(field, format!("must be {}, got {n}", wanted()))),
        Err(_) if obj.is_instance_of::<PyInt>() => {
            Err(Error::value(field, format!("must be {} below 2**63, got {}", wanted(), int_text(obj))))
        }
        Err(_) => Err(Error::type_error(field, format!("must be an int, got {}", type_name(obj)))),
    }
}

/// A positive int below 2**63.
pub fn positive_int(field: &str, obj: &Bound<'_, PyAny>) -> Result<u64, Error> {
    int_at_least(field, obj, 1)
}

/// An int past 64 bits as text: its digits if short, else its size (`str()` of a huge int raises).
fn int_text(obj: &Bound<'_, PyAny>) -> String {
    match obj.call_method0("bit_length").and_then(|b| b.extract::<u64>()) {
        Ok(bits) if bits <= 256 => obj_text(obj),
        Ok(bits) => format!("an int of {bits} bits"),
        Err(_) => "an int out of range".to_owned(),
    }
}

fn obj_text(obj: &Bound<'_, PyAny>) -> String {
    obj.str().map_or_else(|_| "?".to_owned(), |s| s.to_string_lossy().into_owned())
}

/// A number of seconds as given (an int or a float, or anything with `__float__`), not yet checked for
/// range: a bool, a str or None is refused. An int too large for a float is infinite.
pub fn seconds(field: &str, obj: &Bound<'_, PyAny>) -> Result<f64, Error> {
    if is_bool(obj) {
        return Err(Error::type_error(field, format!("must be a number of seconds, got bool ({})", obj_text(obj))));
    }
    match obj.extract::<f64>() {
        Ok(s) => Ok(s),
        // An int no float holds: past either end, as its sign says (a huge negative is refused as negative).
        Err(_) if obj.is_instance_of::<PyInt>() => {
            Ok(if obj.lt(0).unwrap_or(false) { f64::NEG_INFINITY } else { f64::INFINITY })
        }
        Err(_) => Err(Error::type_error(field, format!("must be a number of seconds, got {}", type_name(obj)))),
    }
}

/// A part of a whole: a number strictly between 0 and 1, as millionths (at least one).
pub fn fraction_ppm(field: &str, obj: &Bound<'_, PyAny>) -> Result<u32, Error> {
    let value = if is_bool(obj) { None } else { obj.extract::<f64>().ok() };
    let Some(value) = value else {
        return Err(Error::type_error(field, format!("must be a number between 0 and 1, got {}", type_name(obj))));
    };
    if !(value > 0.0 && value < 1.0) {
        return Err(Error::value(field, format!("must be between 0 and 1 (exclusive), got {value:?}")));
    }
    // In (0, 1): at most a million, at least one.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(((value * 1e6).round() as u32).clamp(1, 999_999))
}

/// Seconds as a duration in nanoseconds (`None` and infinity: for ever); NaN and negatives refused.
pub fn nanos(field: &str, seconds: Option<f64>) -> Result<u64, Error> {
    match seconds {
        None => Ok(u64::MAX),
        Some(s) if s.is_nan() || s < 0.0 => Err(Error::value(field, format!("must be >= 0 seconds, got {s:?}"))),
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        Some(s) => Ok(if s * 1e9 >= u64::MAX as f64 { u64::MAX } else { (s * 1e9).round() as u64 }),
    }
}

/// A duration in seconds that must be finite and above zero, in nanoseconds.
pub fn positive_seconds(field: &str, seconds: f64) -> Result<u64, Error> {
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(Error::value(field, format!("must be a positive number of seconds, got {seconds:?}")));
    }
    nanos(field, Some(seconds))
}

/// An instant or a move of a manual clock, in nanoseconds: finite, >= 0 and at most `MAX_MANUAL_NS`.
pub fn clock_nanos(field: &str, seconds: f64) -> Result<u64, Error> {
    #[allow(clippy::cast_precision_loss)]
    if !seconds.is_finite() || seconds < 0.0 || seconds * 1e9 > MAX_MANUAL_NS as f64 {
        return Err(Error::value(field, format!("must be between 0 and {MAX_MANUAL_SECS} seconds, got {seconds:?}")));
    }
    nanos(field, Some(seconds))
}

/// A time a server's word states, in nanoseconds: finite, >= 0 and below 2**53 ns (about 104 days),
/// which every store keeps exactly.
pub fn word_nanos(field: &str, seconds: f64) -> Result<u64, Error> {
    if !seconds.is_finite() || !(0.0..=9_007_199.0).contains(&seconds) {
        return Err(Error::value(field, format!("must be between 0 and 9007199 seconds (2**53 ns), got {seconds:?}")));
    }
    nanos(field, Some(seconds))
}

/// `MAX_MANUAL_NS` in seconds, for messages: about 146 years.
pub const MAX_MANUAL_SECS: &str = "4611686018 (2**62 ns, about 146 years)";

/// The `cost` argument: a positive int, checked at the boundary.
#[derive(Clone, Copy)]
pub struct Cost(pub u64);

impl<'a, 'py> FromPyObject<'a, 'py> for Cost {
    type Error = PyErr;

    #[inline]
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // The common case, an exact int in range, costs one type-pointer compare more than pyo3's i64.
        if obj.is_exact_instance_of::<PyInt>() {
            if let Ok(n @ 1..) = obj.extract::<i64>() {
                return Ok(Self(n.unsigned_abs()));
            }
        }
        Ok(Self(positive_int("cost", &obj)?))
    }
}

// --- `from_py_with` converters: pyo3 calls them with the argument; each names its field ------------------

/// One converter per argument (a field's name is part of its error), for `#[pyo3(from_py_with = ...)]`.
pub mod field {
    use pyo3::prelude::*;

    use super::{flag, fraction_ppm, int_at_least, positive_int, seconds, text, word_nanos};
    use crate::error::Error;

    macro_rules! converters {
        ($($(#[$doc:meta])* $name:ident -> $ty:ty = |$obj:ident| $body:expr;)*) => {$(
            $(#[$doc])*
            pub fn $name($obj: &Bound<'_, PyAny>) -> PyResult<$ty> {
                Ok($body)
            }
        )*};
    }

    /// `None` as `None`, else `convert`.
    fn optional<T>(
        obj: &Bound<'_, PyAny>,
        convert: impl FnOnce(&Bound<'_, PyAny>) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        if obj.is_none() {
            Ok(None)
        } else {
            convert(obj).map(Some)
        }
    }

    converters! {
        max_keys -> usize = |o| usize::try_from(positive_int("max_keys", o)?).unwrap_or(usize::MAX);
        workers -> u64 = |o| positive_int("workers", o)?;
        /// `n` of `reduce`: tokens given back.
        n -> u64 = |o| positive_int("n", o)?;
        /// `n` of `top_refused`: how many peers (0: none).
        top_n -> usize = |o| usize::try_from(int_at_least("n", o, 0)?).unwrap_or(usize::MAX);
        /// `remaining` of `cap`: what a server says is left (0 and up).
        remaining -> u64 = |o| int_at_least("remaining", o, 0)?;
        /// `reset_after` of `cap`, in nanoseconds.
        reset_after -> u64 = |o| word_nanos("reset_after", seconds("reset_after", o)?)?;
        /// `age` of `cap`, in nanoseconds.
        age -> u64 = |o| word_nanos("age", seconds("age", o)?)?;
        ttl -> f64 = |o| seconds("ttl", o)?;
        timeout -> f64 = |o| seconds("timeout", o)?;
        /// A timeout that may be None (no limit): `throttle`'s, `wait_quotas`'s.
        optional_timeout -> Option<f64> = |o| optional(o, |o| seconds("timeout", o))?;
        wait -> f64 = |o| seconds("wait", o)?;
        sync_interval -> Option<f64> = |o| optional(o, |o| seconds("sync_interval", o))?;
        lease_ttl -> f64 = |o| seconds("lease_ttl", o)?;
        lease_span -> Option<f64> = |o| optional(o, |o| seconds("lease_span", o))?;
        standing_shares -> Option<u64> = |o| optional(o, |o| positive_int("standing_shares", o))?;
        standing_fraction -> Option<u32> = |o| optional(o, |o| fraction_ppm("standing_fraction", o))?;
        per -> Option<f64> = |o| optional(o, |o| seconds("per", o))?;
        start -> f64 = |o| seconds("start", o)?;
        /// `seconds` of `ManualClock.advance`.
        advance_by -> f64 = |o| seconds("seconds", o)?;
        track_usage -> bool = |o| flag("track_usage", o)?;
        reduction -> bool = |o| flag("reduction", o)?;
    }

    /// `tls_ca_file` of `Redis`: a path, or None.
    pub fn tls_ca_file(obj: &Bound<'_, PyAny>) -> PyResult<Option<std::path::PathBuf>> {
        if obj.is_none() {
            return Ok(None);
        }
        obj.extract::<std::path::PathBuf>().map(Some).map_err(|_| {
            if obj.is_instance_of::<pyo3::types::PyString>() {
                Error::value("tls_ca_file", "must be a path the file system can encode").into()
            } else {
                let message = format!("must be a str or os.PathLike, got {}", super::type_name(obj));
                Error::type_error("tls_ca_file", message).into()
            }
        })
    }

    pub fn algorithm<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
        text("algorithm", obj)
    }

    pub fn policy<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
        text("policy", obj)
    }

    pub fn mode<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
        text("mode", obj)
    }

    pub fn prefix<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
        text("prefix", obj)
    }

    pub fn on_error<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
        text("on_error", obj)
    }
}

/// A bool, strictly: `1` or `"yes"` is more likely a mistake than a wish.
pub fn flag(field: &str, obj: &Bound<'_, PyAny>) -> Result<bool, Error> {
    obj.cast::<PyBool>()
        .map(PyBoolMethods::is_true)
        .map_err(|_| Error::type_error(field, format!("must be a bool (True or False), got {}", type_name(obj))))
}

// --- Text -----------------------------------------------------------------------------------------------

/// A str with a lone surrogate (`'\ud800'`) has no UTF-8 form: no key, name or pattern can hold it.
#[cold]
pub fn not_unicode(field: &str) -> Error {
    Error::value(field, "must be valid Unicode, got a str with a lone surrogate (such as '\\ud800')")
}

/// A str argument of the hot path, borrowed; the error names the field (pyo3's only notes it).
#[inline]
pub fn text<'a>(field: &str, obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    match obj.cast::<PyString>() {
        Ok(s) => s.to_str().map_err(|_| not_unicode(field).into()),
        Err(_) => Err(Error::type_error(field, format!("must be a str, got {}", type_name(obj))).into()),
    }
}

/// A peer: a str, borrowed, or an int (not a bool), as its decimal text. A user id is often an int, and
/// the web integrations' key functions may return one; `allow(42)` and `allow("42")` are one peer.
#[inline]
pub fn peer<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, str>> {
    match obj.cast::<PyString>() {
        Ok(s) => s.to_str().map(Cow::Borrowed).map_err(|_| not_unicode("peer").into()),
        Err(_) if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() => {
            // int(obj) first, as keys.key_text does: an IntEnum's own str() is its name on Python 3.10.
            let value = obj.py().get_type::<PyInt>().call1((obj,))?;
            Ok(Cow::Owned(value.str()?.to_str()?.to_owned()))
        }
        Err(_) => Err(Error::type_error("peer", format!("must be a str or an int, got {}", type_name(obj))).into()),
    }
}

#[inline]
pub fn optional_peer<'a>(obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<Cow<'a, str>>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => peer(o).map(Some),
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

/// An owned str; a lone surrogate is refused rather than replaced (which would change a key or name).
pub fn str_arg(field: &str, obj: &Bound<'_, PyAny>) -> Result<String, Error> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| Error::type_error(field, format!("must be a str, got {}", type_name(obj))))?;
    s.to_str().map(str::to_owned).map_err(|_| not_unicode(field))
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
