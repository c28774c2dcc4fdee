//! What the ASGI middleware's hot path reads from a scope: the key and the path, without a Python frame.
//!
//! It reads them exactly as `keys.Header.from_scope` and `keys.ClientIP.from_scope` (no trusted proxies)
//! do, and gives up (`None`) on anything else: the middleware's general path then reads the scope in
//! Python and decides, so a scope this does not read is never decided twice.

use std::borrow::Cow;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// Where the key is: a request header (its lower-case name, as ASGI carries it), or the client's address.
#[derive(Clone, Copy)]
pub enum ScopeKey<'a> {
    Header(&'a [u8]),
    ClientAddress,
}

/// Calls `decide(peer, path)` with the key and path of an HTTP `scope`; `None` when the scope is not an
/// HTTP request this reads, or it carries no key.
pub fn with_scope_request<T>(
    scope: &Bound<'_, PyAny>,
    key: ScopeKey<'_>,
    decide: impl FnOnce(&str, &str) -> PyResult<T>,
) -> PyResult<Option<T>> {
    let py = scope.py();
    let Ok(scope) = scope.cast::<PyDict>() else { return Ok(None) };
    let Some(kind) = scope.get_item(intern!(py, "type"))? else { return Ok(None) };
    // Servers pass the interned "http" of their source: the same object as ours, compared by address.
    let http = intern!(py, "http");
    if !kind.is(http) && as_str(&kind) != Some("http") {
        return Ok(None);
    }
    let path = scope.get_item(intern!(py, "path"))?;
    let path = match &path {
        None => "",
        Some(path) => match as_str(path) {
            Some(path) => path,
            None => return Ok(None),
        },
    };
    match key {
        ScopeKey::ClientAddress => {
            let Some(client) = scope.get_item(intern!(py, "client"))? else { return Ok(None) };
            let Ok(client) = client.cast_into::<PyTuple>() else { return Ok(None) };
            let Ok(host) = client.get_item(0) else { return Ok(None) };
            match as_str(&host) {
                Some(peer) if !peer.is_empty() => decide(peer, path).map(Some),
                _ => Ok(None),
            }
        }
        ScopeKey::Header(name) => {
            let Some(headers) = scope.get_item(intern!(py, "headers"))? else { return Ok(None) };
            // ASGI servers give a list: read in place, without an iterator object.
            let Ok(headers) = headers.cast_into::<PyList>() else { return Ok(None) };
            for item in headers.iter() {
                let Ok(pair) = item.cast::<PyTuple>() else { return Ok(None) };
                if pair.len() != 2 {
                    return Ok(None);
                }
                let Ok(field) = pair.get_item(0)?.cast_into::<PyBytes>() else { return Ok(None) };
                if field.as_bytes() != name {
                    continue;
                }
                let Ok(value) = pair.get_item(1)?.cast_into::<PyBytes>() else { return Ok(None) };
                let peer = latin1(value.as_bytes());
                let peer = peer.trim_matches(python_whitespace);
                if peer.is_empty() {
                    return Ok(None);
                }
                return decide(peer, path).map(Some);
            }
            Ok(None)
        }
    }
}

/// The text of a str, or None for anything else (a str with a lone surrogate included).
fn as_str<'a>(obj: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    obj.cast::<PyString>().ok()?.to_str().ok()
}

/// `bytes.decode("latin-1")`: every byte is the code point of its value.
fn latin1(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) if bytes.is_ascii() => Cow::Borrowed(text),
        _ => Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect()),
    }
}

/// What `str.strip()` removes: Unicode white space, and the separators U+001C..U+001F besides.
fn python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin1_decodes_every_byte_to_its_code_point() {
        assert_eq!(latin1(b"bench"), "bench");
        assert!(matches!(latin1(b"bench"), Cow::Borrowed(_)));
        assert_eq!(latin1(&[0x61, 0xe9, 0xff]), "a\u{e9}\u{ff}");
    }

    #[test]
    fn strip_matches_python() {
        // " \t\x1c\x85\xa0" are all str.isspace() in Python.
        let text = latin1(b" \t\x1c\x85\xa0key\xa0\r\n");
        assert_eq!(text.trim_matches(python_whitespace), "key");
    }
}
