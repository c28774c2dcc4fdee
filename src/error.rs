//! The one error type of the core; `python.rs` maps it to Python exceptions in one place.

use std::fmt;

/// What kind of mistake the caller made; decides the Python exception class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A value of the right type but outside what is accepted (`ValueError`).
    Value,
    /// A value of the wrong type (`TypeError`).
    Type,
}

/// A configuration or argument error that names the field and the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    /// Where the mistake is, e.g. `rules[2].pattern` or `cost`.
    pub field: String,
    /// What is wrong, including the value, e.g. `'10/fortnight' is not a rate`.
    pub message: String,
}

impl Error {
    pub fn value(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Value, field: field.into(), message: message.into() }
    }

    pub fn type_error(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Type, field: field.into(), message: message.into() }
    }

    /// The same error, placed under an outer field: `rate` inside `rules[2]` becomes `rules[2].rate`.
    #[must_use]
    pub fn within(mut self, outer: &str) -> Self {
        self.field = if self.field.is_empty() {
            outer.to_owned()
        } else if self.field.starts_with('[') {
            format!("{outer}{}", self.field)
        } else {
            format!("{outer}.{}", self.field)
        };
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nests_field_paths() {
        let e = Error::value("pattern", "unclosed group").within("rules[2]");
        assert_eq!(e.to_string(), "rules[2].pattern: unclosed group");
        let e = Error::value("[1]", "bad").within("limits");
        assert_eq!(e.field, "limits[1]");
    }
}
