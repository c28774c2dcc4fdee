//! The rate-limit fields of a response to a decision, serialized as draft-ietf-httpapi-ratelimit-headers-10
//! says (`RateLimit-Policy` and `RateLimit`), and/or the legacy `X-RateLimit-*` trio, after a refusal's
//! `Retry-After`; built once and reused from a small cache while a group's numbers repeat.

use std::fmt::Write as _;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString, PyTuple};

use super::values::{PyDecision, REPORTED};

impl PyDecision {
    /// What the rate-limit fields of a response to this decision are made of, in whole seconds;
    /// `None` when no group limits the request (then only a refusal's `Retry-After` is sent).
    fn field_key(&self, ietf: bool, legacy: bool, raw: bool) -> FieldKey {
        let refused = !self.is_allowed();
        // Never earlier than `t`: both are this refusal's wait, rounded up. None when it can never pass.
        let retry_after = (refused && self.retry_after.is_finite()).then(|| whole_seconds(self.retry_after));
        let wait = if refused { self.retry_after } else { self.next_after };
        FieldKey {
            retry_after,
            reported: self.flags & REPORTED != 0,
            limit: self.limit,
            window: (!self.window.is_nan()).then(|| whole_seconds(self.window)),
            remaining: self.remaining,
            reset: wait.is_finite().then(|| whole_seconds(wait)),
            ietf,
            legacy,
            raw,
        }
    }

    /// The fields as a tuple of `(name, value)` pairs, str or (`raw`) bytes; from the cache when a
    /// response with the same fields was made lately.
    ///
    /// # Errors
    /// Python could not make the strings (out of memory).
    pub fn field_tuple<'py>(
        &self,
        py: Python<'py>,
        ietf: bool,
        legacy: bool,
        raw: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let key = self.field_key(ietf, legacy, raw);
        let Some(group) = self.group.as_ref().filter(|_| key.reported) else {
            return key.build(py, None);
        };
        let slot = key.slot(group.as_ptr() as usize);
        // try_lock: a thread that finds another in the cache builds its own rather than wait, and building
        // (which may run Python code) never happens under the lock.
        if let Ok(cache) = FIELD_CACHE.try_lock() {
            if let Some(hit) = cache[slot].as_ref().filter(|c| c.key == key && c.group.as_ptr() == group.as_ptr()) {
                return Ok(hit.fields.bind(py).clone());
            }
        }
        let fields = key.build(py, Some(group.bind(py)))?;
        let entry = CachedFields { key, group: group.clone_ref(py), fields: fields.clone().unbind() };
        let old = FIELD_CACHE.try_lock().ok().and_then(|mut cache| cache[slot].replace(entry));
        drop(old); // released after the lock
        Ok(fields)
    }
}

/// What a response's rate-limit fields are made of: equal keys of one group give equal fields.
#[derive(Clone, Copy, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)]
struct FieldKey {
    retry_after: Option<u64>,
    reported: bool,
    limit: u64,
    window: Option<u64>,
    remaining: u64,
    reset: Option<u64>,
    ietf: bool,
    legacy: bool,
    raw: bool,
}

impl FieldKey {
    /// The cache slot of these fields of `group` (its string's address): only the low bits are kept.
    #[allow(clippy::cast_possible_truncation)]
    fn slot(&self, group: usize) -> usize {
        let mixed = (group as u64 >> 4) ^ self.remaining.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.reset.unwrap_or(0);
        (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize & (FIELD_CACHE_SIZE - 1)
    }

    /// The fields of draft-ietf-httpapi-ratelimit-headers-10 for the `group` limiting the request: the
    /// IETF pair and/or the legacy trio, after a refusal's `Retry-After`.
    fn build<'py>(&self, py: Python<'py>, group: Option<&Bound<'py, PyString>>) -> PyResult<Bound<'py, PyTuple>> {
        let mut fields: Vec<(usize, String)> = Vec::with_capacity(5);
        if let Some(retry_after) = self.retry_after {
            fields.push((RETRY_AFTER, retry_after.to_string()));
        }
        if let Some(group) = group {
            if self.ietf {
                let name = sf_string(&group.to_cow()?);
                let policy = match self.window {
                    None => format!("{name};q={};qu=\"concurrent-requests\"", self.limit),
                    Some(window) => format!("{name};q={};w={window}", self.limit),
                };
                let mut state = format!("{name};r={}", self.remaining);
                if let Some(reset) = self.reset {
                    let _ = write!(state, ";t={reset}");
                }
                fields.push((POLICY, policy));
                fields.push((STATE, state));
            }
            if self.legacy {
                fields.push((LEGACY_LIMIT, self.limit.to_string()));
                fields.push((LEGACY_REMAINING, self.remaining.to_string()));
                if let Some(reset) = self.reset {
                    fields.push((LEGACY_RESET, reset.to_string()));
                }
            }
        }
        if self.raw {
            let names = BYTES_NAMES
                .get_or_init(py, || FIELD_NAMES.iter().map(|(_, raw)| PyBytes::new(py, raw).unbind()).collect());
            PyTuple::new(py, fields.iter().map(|(at, value)| (names[*at].bind(py), PyBytes::new(py, value.as_bytes()))))
        } else {
            let names = STR_NAMES
                .get_or_init(py, || FIELD_NAMES.iter().map(|(name, _)| PyString::new(py, name).unbind()).collect());
            PyTuple::new(py, fields.iter().map(|(at, value)| (names[*at].bind(py), PyString::new(py, value))))
        }
    }
}

struct CachedFields {
    key: FieldKey,
    /// Held, so that no other string can take its address while the entry lives.
    group: Py<PyString>,
    fields: Py<PyTuple>,
}

const FIELD_CACHE_SIZE: usize = 64;
static FIELD_CACHE: Mutex<[Option<CachedFields>; FIELD_CACHE_SIZE]> = Mutex::new([const { None }; FIELD_CACHE_SIZE]);

// The fields' names as WSGI writes them, and as ASGI does (lower-case bytes); `FieldKey::build` indexes them.
const FIELD_NAMES: [(&str, &[u8]); 6] = [
    ("Retry-After", b"retry-after"),
    ("RateLimit-Policy", b"ratelimit-policy"),
    ("RateLimit", b"ratelimit"),
    ("X-RateLimit-Limit", b"x-ratelimit-limit"),
    ("X-RateLimit-Remaining", b"x-ratelimit-remaining"),
    ("X-RateLimit-Reset", b"x-ratelimit-reset"),
];
const RETRY_AFTER: usize = 0;
const POLICY: usize = 1;
const STATE: usize = 2;
const LEGACY_LIMIT: usize = 3;
const LEGACY_REMAINING: usize = 4;
const LEGACY_RESET: usize = 5;

static STR_NAMES: PyOnceLock<Vec<Py<PyString>>> = PyOnceLock::new();
static BYTES_NAMES: PyOnceLock<Vec<Py<PyBytes>>> = PyOnceLock::new();

/// Whole seconds, rounded up and never below 0: a client waiting that long is served.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn whole_seconds(seconds: f64) -> u64 {
    seconds.ceil().max(0.0) as u64
}

/// A Structured Field String: printable ASCII in quotes, `\\` and `"` escaped, anything else `?`.
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}
