//! The one error type of the core; `python.rs` maps it to Python exceptions in one place.
//!
//! An error keeps where the mistake is as a location (`rules[2].pattern` is the keys and indexes
//! `rules`, `2`, `pattern`), so that callers who wrap the core (config files, presets) move it to their
//! own place instead of rewording its text.

use std::fmt::{self, Write};

/// What kind of mistake the caller made; decides the Python exception class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A value of the right type but outside what is accepted (`ValueError`).
    Value,
    /// A value of the wrong type (`TypeError`).
    Type,
    /// A backend (Redis) that cannot answer, when the caller asked to be told (`BackendUnavailable`,
    /// a `ConnectionError`).
    Backend,
}

/// One step of a location: a field name or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loc {
    Key(String),
    Index(usize),
}

/// A configuration or argument error that names the field and the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    /// Where the mistake is, from the outside in: `[Key("rules"), Index(2), Key("pattern")]`.
    pub loc: Vec<Loc>,
    /// What is wrong, including the value, e.g. `'10/fortnight' is not a rate`.
    pub message: String,
}

/// A location written as in messages: `rules[2].pattern`, `limits[1]`, `[0]`, or `""` for none.
fn parse_path(path: &str) -> Vec<Loc> {
    let mut loc = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut indexes) = part.split_once('[').map_or((part, ""), |(k, rest)| (k, rest));
        if !key.is_empty() {
            loc.push(Loc::Key(key.to_owned()));
        }
        while let Some((index, rest)) = indexes.split_once(']') {
            match index.parse() {
                Ok(i) => loc.push(Loc::Index(i)),
                Err(_) => loc.push(Loc::Key(index.to_owned())),
            }
            indexes = rest.strip_prefix('[').unwrap_or(rest);
        }
    }
    loc
}

impl Error {
    /// A `ValueError` at `field`, a location written as in messages (`"rules[2].pattern"`).
    pub fn value(field: impl AsRef<str>, message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Value, loc: parse_path(field.as_ref()), message: message.into() }
    }

    /// A `TypeError` at `field`.
    pub fn type_error(field: impl AsRef<str>, message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Type, loc: parse_path(field.as_ref()), message: message.into() }
    }

    /// A backend that cannot answer: not the caller's mistake, so no location.
    pub fn backend(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Backend, loc: Vec::new(), message: message.into() }
    }

    /// The same error, placed under an outer location: `rate` inside `rules[2]` is `rules[2].rate`.
    #[must_use]
    pub fn within(mut self, outer: &str) -> Self {
        let mut loc = parse_path(outer);
        loc.append(&mut self.loc);
        self.loc = loc;
        self
    }

    /// The same error under the list index `index`: `rate` in item 1 is `[1].rate`.
    #[must_use]
    pub fn at(mut self, index: usize) -> Self {
        self.loc.insert(0, Loc::Index(index));
        self
    }

    /// The same error at `field` instead of where it was.
    #[must_use]
    pub fn moved_to(mut self, field: &str) -> Self {
        self.loc = parse_path(field);
        self
    }

    /// The location as written in messages.
    #[must_use]
    pub fn path(&self) -> String {
        let mut text = String::new();
        for part in &self.loc {
            match part {
                Loc::Index(i) => {
                    let _ = write!(text, "[{i}]");
                }
                Loc::Key(k) if text.is_empty() => text.push_str(k),
                Loc::Key(k) => {
                    text.push('.');
                    text.push_str(k);
                }
            }
        }
        text
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.loc.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path(), self.message)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nests_locations() {
        let e = Error::value("pattern", "unclosed group").within("rules[2]");
        assert_eq!(e.to_string(), "rules[2].pattern: unclosed group");
        assert_eq!(e.loc, [Loc::Key("rules".into()), Loc::Index(2), Loc::Key("pattern".into())]);
        let e = Error::value("rate", "bad").at(1).within("limits");
        assert_eq!(e.path(), "limits[1].rate");
        assert_eq!(Error::value("", "whole").to_string(), "whole");
        assert_eq!(Error::value("a[1][2].b", "x").path(), "a[1][2].b");
    }
}
