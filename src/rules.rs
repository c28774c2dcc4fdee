//! Routing: a path to the group of the first rule whose pattern matches, exempt peers and paths.

use std::collections::HashSet;

use regex::{Regex, RegexSet};

use crate::error::{Error, Result};

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Neither limited nor counted against anything: no rule matches the path.
    Unlimited,
    /// An exempt peer or path: allowed, counted, no state touched.
    Exempt,
    /// Limited by the group with this index.
    Group(usize),
}

/// Compiles one pattern, naming it in the error.
///
/// # Errors
/// A pattern that is not a valid regular expression.
pub fn compile(pattern: &str) -> Result<Regex> {
    Regex::new(pattern).map_err(|e| Error::value("pattern", format!("{pattern:?} is not a valid regex: {}", flat(&e))))
}

/// The regex crate's message on one line, without its ASCII-art pointer.
fn flat(error: &regex::Error) -> String {
    match error {
        regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find(|l| l.starts_with("error:"))
            .unwrap_or("syntax error")
            .trim_start_matches("error: ")
            .to_owned(),
        other => other.to_string(),
    }
}

#[derive(Debug)]
pub struct Router {
    /// Patterns of the rules, in order; the first match wins. Tried one by one: `is_match` stops at
    /// the first hit and costs 15-40 ns for typical rules, where `RegexSet::matches` (which must find
    /// every match) costs 120-230 ns.
    rules: Vec<Regex>,
    /// The group of each rule.
    groups: Vec<usize>,
    /// The route of a request without a path: the first rule that matches the empty string.
    no_path: Route,
    exempt_peers: HashSet<String, ahash::RandomState>,
    exempt_paths: Option<RegexSet>,
}

impl Router {
    /// # Errors
    /// A pattern that does not compile, named by its place (`rules[2].pattern`, `exempt_paths[0]`).
    pub fn new(
        rules: &[(String, usize)],
        exempt_peers: impl IntoIterator<Item = String>,
        exempt_paths: &[String],
    ) -> Result<Self> {
        let patterns = rules
            .iter()
            .enumerate()
            .map(|(i, (pattern, _))| compile(pattern).map_err(|e| e.within(&format!("rules[{i}]"))))
            .collect::<Result<Vec<_>>>()?;
        for (i, pattern) in exempt_paths.iter().enumerate() {
            compile(pattern).map_err(|e| Error { field: format!("exempt_paths[{i}]"), ..e })?;
        }
        let groups: Vec<usize> = rules.iter().map(|(_, g)| *g).collect();
        let no_path =
            patterns.iter().position(|r| r.is_match("")).map_or(Route::Unlimited, |i| Route::Group(groups[i]));
        let exempt_paths = if exempt_paths.is_empty() {
            None
        } else {
            Some(RegexSet::new(exempt_paths).map_err(|e| Error::value("exempt_paths", flat(&e)))?)
        };
        Ok(Self { rules: patterns, groups, no_path, exempt_peers: exempt_peers.into_iter().collect(), exempt_paths })
    }

    #[inline]
    #[must_use]
    pub fn route(&self, peer: &str, path: Option<&str>) -> Route {
        if !self.exempt_peers.is_empty() && self.exempt_peers.contains(peer) {
            return Route::Exempt;
        }
        let Some(path) = path else { return self.no_path };
        if let Some(exempt) = &self.exempt_paths {
            if exempt.is_match(path) {
                return Route::Exempt;
            }
        }
        self.route_path(path)
    }

    /// The group of the first rule matching `path`, ignoring exemptions.
    #[inline]
    #[must_use]
    pub fn route_path(&self, path: &str) -> Route {
        self.rules.iter().position(|r| r.is_match(path)).map_or(Route::Unlimited, |i| Route::Group(self.groups[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router() -> Router {
        let rules = [(r"^/api/v1/".to_owned(), 0), (r"^/api/".to_owned(), 1), (r"^/tx/\d+$".to_owned(), 2)];
        Router::new(&rules, ["trusted".to_owned()], &[r"^/health$".to_owned()]).unwrap()
    }

    #[test]
    fn first_matching_rule_wins() {
        let r = router();
        assert_eq!(r.route("p", Some("/api/v1/users")), Route::Group(0));
        assert_eq!(r.route("p", Some("/api/v2/users")), Route::Group(1));
        assert_eq!(r.route("p", Some("/tx/42")), Route::Group(2));
        assert_eq!(r.route("p", Some("/tx/abc")), Route::Unlimited);
        assert_eq!(r.route("p", None), Route::Unlimited);
    }

    #[test]
    fn exemptions_come_first() {
        let r = router();
        assert_eq!(r.route("trusted", Some("/api/v1/x")), Route::Exempt);
        assert_eq!(r.route("p", Some("/health")), Route::Exempt);
        assert_eq!(r.route("p", Some("/healthz")), Route::Unlimited);
    }

    #[test]
    fn a_request_without_path_takes_the_first_rule_matching_the_empty_path() {
        let rules = [(r"^/api/".to_owned(), 0), (String::new(), 1)];
        let r = Router::new(&rules, [], &[]).unwrap();
        assert_eq!(r.route("p", None), Route::Group(1));
    }

    #[test]
    fn bad_patterns_are_named_by_place() {
        let rules = [(r"^/ok".to_owned(), 0), (r"^/api/(v1".to_owned(), 1)];
        let err = Router::new(&rules, [], &[]).unwrap_err();
        assert_eq!(err.field, "rules[1].pattern");
        assert!(err.message.contains("\"^/api/(v1\""), "{}", err.message);
        assert!(err.message.contains("unclosed group"), "{}", err.message);
        let err = Router::new(&[], [], &["[".to_owned()]).unwrap_err();
        assert_eq!(err.field, "exempt_paths[0]");
    }
}
