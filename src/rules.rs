//! The rules in force: routing (a path to the group of the first rule whose pattern matches, exempt
//! peers and paths) and the groups with their limits, replaced whole by a reconfiguration.
//!
//! A group keeps its state keys across reconfigurations: they derive from its name's seed and each
//! limit's index, so a key's states stay where they are and a reconfiguration rescales them in place
//! (see `limiter::reconfigure`).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use regex::{Regex, RegexSet};

use crate::algorithm::Limit;
use crate::config::{compile, flat, Policy, RuleSpec, RulesConfig, MAX_PATTERN_BYTES};
use crate::error::{Error, Result};
use crate::quota::QuotaSettings;

/// Where a request goes.
/// What a request is decided for: the group its path routes to, or a group the caller names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Path(Option<&'a str>),
    Group(&'a str),
}

impl<'a> From<Option<&'a str>> for Target<'a> {
    fn from(path: Option<&'a str>) -> Self {
        Self::Path(path)
    }
}

/// A `Target` that outlives the caller's strings (a reply that comes back on another thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedTarget {
    Path(Option<String>),
    Group(String),
}

impl From<Target<'_>> for OwnedTarget {
    fn from(target: Target<'_>) -> Self {
        match target {
            Target::Path(path) => Self::Path(path.map(str::to_owned)),
            Target::Group(group) => Self::Group(group.to_owned()),
        }
    }
}

impl OwnedTarget {
    #[must_use]
    pub fn borrow(&self) -> Target<'_> {
        match self {
            Self::Path(path) => Target::Path(path.as_deref()),
            Self::Group(group) => Target::Group(group),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Neither limited nor counted against anything: no rule matches the path.
    Unlimited,
    /// An exempt peer or path: allowed, counted (against the group its path routes to, if any), no
    /// state touched.
    Exempt(Option<usize>),
    /// Limited by the group with this index.
    Group(usize),
}

/// The pattern of a group reached only by name (Python's `ratekeeper.limiter.NAMED_ONLY`): it matches no
/// path.
pub const NAMED_ONLY: &str = "a^";

#[derive(Debug)]
pub struct Router {
    /// Patterns of the rules, in order; the first match wins. Tried one by one: `is_match` stops at
    /// the first hit and costs 15-40 ns for typical rules, where `RegexSet::matches` (which must find
    /// every match) costs 120-230 ns. `None`: the empty pattern, which matches every path (the
    /// catch-all `"default"` group of `Limiter("10/min")`), decided without running a regex.
    rules: Vec<Option<Regex>>,
    /// The group of each rule.
    groups: Vec<usize>,
    /// The route of a request without a path: the first rule that matches the empty string.
    no_path: Route,
    exempt_peers: HashSet<String, ahash::RandomState>,
    exempt_paths: Option<RegexSet>,
}

impl Router {
    /// Routes over compiled `rules` (pattern, group index).
    ///
    /// # Errors
    /// An exempt path that does not compile, named by its place (`exempt_paths[0]`).
    pub fn new(
        rules: Vec<(Regex, usize)>,
        exempt_peers: impl IntoIterator<Item = String>,
        exempt_paths: &[String],
    ) -> Result<Self> {
        // A group reached only by name (`add_group`, whose pattern is `NAMED_ONLY`) is never a path's: it is
        // left out of the walk, where it would run a regex for nothing on every request.
        let (rules, groups): (Vec<Regex>, Vec<usize>) =
            rules.into_iter().filter(|(r, _)| r.as_str() != NAMED_ONLY).unzip();
        let no_path = rules.iter().position(|r| r.is_match("")).map_or(Route::Unlimited, |i| Route::Group(groups[i]));
        let rules = rules.into_iter().map(|r| (!r.as_str().is_empty()).then_some(r)).collect();
        let exempt_paths = if exempt_paths.is_empty() {
            None
        } else {
            // A pattern too long is refused before the set parses it (seconds for megabytes).
            if let Some(i) = exempt_paths.iter().position(|p| p.len() > MAX_PATTERN_BYTES) {
                return Err(compile(&exempt_paths[i])
                    .err()
                    .unwrap_or_else(|| Error::value("pattern", "too long"))
                    .moved_to(&format!("exempt_paths[{i}]")));
            }
            // Compiled once; only a failure compiles them one by one, to name the bad one.
            Some(RegexSet::new(exempt_paths).map_err(|e| {
                let bad = exempt_paths.iter().enumerate().find_map(|(i, p)| compile(p).err().map(|e| (i, e)));
                match bad {
                    Some((i, error)) => error.moved_to(&format!("exempt_paths[{i}]")),
                    None => Error::value("exempt_paths", flat(&e)),
                }
            })?)
        };
        Ok(Self { rules, groups, no_path, exempt_peers: exempt_peers.into_iter().collect(), exempt_paths })
    }

    #[inline]
    #[must_use]
    pub fn route(&self, peer: &str, path: Option<&str>) -> Route {
        if !self.exempt_peers.is_empty() && self.exempt_peers.contains(peer) {
            return Route::Exempt(self.group_of(path));
        }
        let Some(path) = path else { return self.no_path };
        if let Some(exempt) = &self.exempt_paths {
            if exempt.is_match(path) {
                return Route::Exempt(self.group_of(Some(path)));
            }
        }
        self.route_path(path)
    }

    /// The route of a request for the group `index` named by the caller: only peers are exempt.
    #[inline]
    #[must_use]
    pub fn route_group(&self, peer: &str, index: usize) -> Route {
        if !self.exempt_peers.is_empty() && self.exempt_peers.contains(peer) {
            Route::Exempt(Some(index))
        } else {
            Route::Group(index)
        }
    }

    fn group_of(&self, path: Option<&str>) -> Option<usize> {
        match path.map_or(self.no_path, |p| self.route_path(p)) {
            Route::Group(index) => Some(index),
            _ => None,
        }
    }

    /// The group of the first rule matching `path`, ignoring exemptions.
    #[inline]
    #[must_use]
    pub fn route_path(&self, path: &str) -> Route {
        self.rules
            .iter()
            .position(|r| r.as_ref().is_none_or(|r| r.is_match(path)))
            .map_or(Route::Unlimited, |i| Route::Group(self.groups[i]))
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    /// Stable for the group's name over the limiter's life (reconfigurations included): what counters
    /// and states are counted by.
    pub id: u32,
    pub limits: Vec<Limit>,
    pub policy: Policy,
    pub reduction: bool,
    /// One plain rate limit: decided in place, no copies.
    pub(crate) simple: bool,
    /// Mixed with the peer into the key of the group's states and quota record: the name's hash.
    pub(crate) seed: u64,
    /// The limit a per-key quota replaces: the first rate limit.
    pub primary: Option<usize>,
    /// `primary` with the failsafe's rate.
    pub(crate) failsafe: Option<Limit>,
    /// A shared region's id of the first limit (see `SharedRegion::def_id`), so that a simple group's
    /// decision finds it without comparing limits; 0 in memory.
    pub(crate) first_def: u16,
    /// The group's adaptive limits (`Limit::adaptive`), decided apart from `limits` (see
    /// `Limiter::admit_adaptive`): their permits move, so no store's states hold them.
    pub adaptive: Vec<&'static crate::adaptive::Settings>,
    /// Whether `limits` is only the gate of the adaptive ceiling (a group of adaptive limits alone):
    /// every store then keeps its permits in this process, as it does the adaptive gates (a remote
    /// store would spend a round trip per request and release on a ceiling each machine has alone).
    pub ceiling_only: bool,
}

impl Group {
    pub(crate) fn rate_limits(limits: &[Limit]) -> impl Iterator<Item = (usize, &Limit)> {
        limits.iter().enumerate().filter(|(_, l)| !l.is_concurrency())
    }

    pub(crate) fn gates(limits: &[Limit]) -> impl Iterator<Item = (usize, &Limit)> {
        limits.iter().enumerate().filter(|(_, l)| l.is_concurrency())
    }

    /// Takes over the keys of `old` (the group of the same name before a reconfiguration): the same
    /// seed. A group new in `version` gets keys of its own, so one removed and added back starts afresh.
    fn inherit(&mut self, old: Option<&Group>, version: u64, hasher: &ahash::RandomState) {
        self.seed = old.map_or_else(|| hasher.hash_one((&self.name, version)), |old| old.seed);
    }

    /// What tells the state of limit `index` apart from the group's other limits' (0 for the first, so
    /// the hot path mixes nothing).
    #[inline]
    #[must_use]
    pub fn signature(index: usize) -> u32 {
        // index < 64.
        #[allow(clippy::cast_possible_truncation)]
        let index = index as u32;
        index
    }

    /// The key of the state of limit `index` for the (peer, group) key `base`: in the same shard.
    #[inline]
    #[must_use]
    pub fn limit_key(&self, base: u64, index: usize) -> u64 {
        crate::state_map::StateMap::<()>::related_key(base, Self::signature(index))
    }

    /// The group's limits for a key whose quota is `quota` (replacing the first rate limit).
    #[inline]
    #[must_use]
    pub fn limits_with(&self, quota: Option<Limit>) -> Cow<'_, [Limit]> {
        match (quota, self.primary) {
            (Some(limit), Some(p)) if limit != self.limits[p] => {
                let mut limits = self.limits.clone();
                limits[p] = limit;
                Cow::Owned(limits)
            }
            _ => Cow::Borrowed(&self.limits),
        }
    }
}

/// Distinct group names a limiter may see over its life (each keeps its id).
pub use crate::state_map::MAX_GROUP_NAMES;

/// Where the ids of group names come from when several processes must agree on them (a shared
/// region's table of names): a name's id and the seed of its keys, registered as used by this process.
pub type GroupRegistry = std::sync::Arc<dyn Fn(&str) -> Result<(u32, u64)> + Send + Sync>;

/// Where the ids of limits come from in a shared region (see `SharedRegion::def_id`).
pub type DefRegistry = std::sync::Arc<dyn Fn(&Limit) -> u16 + Send + Sync>;

/// The ids of every group name a limiter has seen: ids are never reused, so counters kept by id stay
/// right across reconfigurations.
#[derive(Default)]
pub struct GroupIds {
    ids: HashMap<String, u32>,
    names: Vec<String>,
    registry: Option<GroupRegistry>,
    defs: Option<DefRegistry>,
}

impl std::fmt::Debug for GroupIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupIds").field("names", &self.names).finish_non_exhaustive()
    }
}

impl GroupIds {
    /// Ids given by `registry` (the same for a name in every process that shares it).
    #[must_use]
    pub fn registered(registry: GroupRegistry, defs: DefRegistry) -> Self {
        Self { registry: Some(registry), defs: Some(defs), ..Self::default() }
    }

    /// The id of `name`, and the seed of its keys when a registry gives them (`None`: the group's own).
    fn id(&mut self, name: &str) -> Result<(u32, Option<u64>)> {
        if let Some(registry) = &self.registry {
            // Asked every time: the registry counts this process among the name's users, and may have
            // given the id of a name no process used any more to another name meanwhile.
            let (id, seed) = registry(name)?;
            let index = id as usize;
            if index >= self.names.len() {
                self.names.resize(index + 1, String::new());
            }
            if let Some(was) = Some(&self.names[index]).filter(|was| !was.is_empty() && *was != name) {
                self.ids.remove(was);
            }
            name.clone_into(&mut self.names[index]);
            self.ids.insert(name.to_owned(), id);
            return Ok((id, Some(seed)));
        }
        if let Some(&id) = self.ids.get(name) {
            return Ok((id, None));
        }
        if self.names.len() >= MAX_GROUP_NAMES {
            return Err(Error::value(
                "group",
                format!(
                    "{name:?} would be the limiter's {}th group name; at most {MAX_GROUP_NAMES}",
                    MAX_GROUP_NAMES + 1
                ),
            ));
        }
        #[allow(clippy::cast_possible_truncation)]
        let id = self.names.len() as u32;
        self.ids.insert(name.to_owned(), id);
        self.names.push(name.to_owned());
        Ok((id, None))
    }

    /// Every name, by id (empty where a shared region gave the id to another process's group).
    #[must_use]
    pub fn clone_names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// The name of group `id`.
    #[must_use]
    pub fn name(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str).filter(|name| !name.is_empty())
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.names.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The router and groups in force, replaced whole by a reconfiguration.
#[derive(Debug)]
pub struct Rules {
    pub(crate) router: Router,
    pub groups: Vec<Group>,
    pub config: RulesConfig,
    version: u64,
    /// The recent reconfigurations that changed a group's limits, oldest first: in memory every state
    /// moved at that instant; a remote store replays them at a key's next decision (see `GroupMove`).
    pub(crate) moves: Vec<GroupMove>,
}

/// A reconfiguration that changed a group's limits, or removed the group: the group before and after,
/// and when.
#[derive(Debug, Clone)]
pub(crate) struct GroupMove {
    pub at: u64,
    pub old: Group,
    pub old_version: u64,
    pub new: Group,
    pub new_version: u64,
    /// The group was removed: its states are gone (added back, it starts empty).
    pub gone: bool,
}

impl Rules {
    /// The rules of `config`; with `previous` (a reconfiguration), groups that keep their name keep
    /// their keys.
    ///
    /// # Errors
    /// A rule without limits or with more than 64, a group defined twice with different limits, a
    /// failsafe that does not fit a group's limit, a bad exempt path, too many group names.
    pub fn build(
        config: RulesConfig,
        quotas: &QuotaSettings,
        version: u64,
        hasher: &ahash::RandomState,
        ids: &mut GroupIds,
        previous: Option<&Rules>,
    ) -> Result<Self> {
        let mut groups: Vec<Group> = Vec::new();
        let mut patterns = Vec::with_capacity(config.rules.len());
        for (i, rule) in config.rules.iter().enumerate() {
            let place = |e: Error| e.at(i).within("rules");
            if rule.limits.is_empty() {
                return Err(place(Error::value("limits", "a rule needs at least one limit")));
            }
            if rule.limits.len() > 64 {
                return Err(place(Error::value("limits", "a rule takes at most 64 limits")));
            }
            let index = if let Some(index) = groups.iter().position(|g| g.name == rule.group) {
                let g = &groups[index];
                if g.limits != rule.limits || g.policy != rule.policy || g.reduction != rule.reduction {
                    return Err(place(Error::value(
                        "group",
                        format!("group {:?} is already defined with other limits by an earlier rule", rule.group),
                    )));
                }
                index
            } else {
                let (id, seed) = ids.id(&rule.group).map_err(place)?;
                let mut group = Self::group(rule, quotas, id).map_err(place)?;
                let old = previous.and_then(|rules| rules.groups.iter().find(|g| g.name == group.name));
                group.inherit(old, version, hasher);
                // Processes sharing a region name a group's keys alike, whatever their rules' history.
                if let Some(seed) = seed {
                    group.seed = seed;
                }
                if let Some(defs) = &ids.defs {
                    group.first_def = defs(&group.limits[0]);
                }
                groups.push(group);
                groups.len() - 1
            };
            patterns.push((rule.pattern.regex().clone(), index));
        }
        let router = Router::new(patterns, config.exempt_peers.clone(), &config.exempt_paths)?;
        Ok(Self { router, groups, config, version, moves: Vec::new() })
    }

    fn group(rule: &RuleSpec, quotas: &QuotaSettings, id: u32) -> Result<Group> {
        let adaptive: Vec<_> = rule.limits.iter().filter_map(Limit::adaptive_settings).collect();
        let mut limits: Vec<Limit> = rule.limits.iter().filter(|l| !l.is_adaptive()).copied().collect();
        // A group of adaptive limits only keeps a gate of their ceiling in its states: never the one to
        // refuse, it lets every store count the group's requests in flight and give their permits back
        // by its own paths (Redis's script too), and no group is left without limits.
        let ceiling_only = limits.is_empty() && !adaptive.is_empty();
        if let Some(ceiling) = adaptive.iter().map(|s| s.max_limit).max().filter(|_| ceiling_only) {
            limits.push(Limit::concurrency(u64::from(ceiling))?);
        }
        let simple = limits.len() == 1 && !limits[0].is_concurrency() && !limits[0].uses_log();
        let primary = limits.iter().position(|l| !l.is_concurrency());
        let failsafe = match (primary, quotas.failsafe) {
            (Some(p), Some(rate)) => Some(limits[p].with_rate(rate, None).map_err(|e| e.moved_to("failsafe"))?),
            _ => None,
        };
        Ok(Group {
            name: rule.group.clone(),
            id,
            limits,
            policy: rule.policy,
            reduction: rule.reduction,
            simple,
            seed: 0,
            primary,
            failsafe,
            first_def: 0,
            adaptive,
            ceiling_only,
        })
    }

    /// Counts reconfigurations; quota records re-derive their limit when it changes.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The index of the group named `name`.
    ///
    /// # Errors
    /// No group has that name.
    pub fn group_index(&self, name: &str) -> Result<usize> {
        self.groups.iter().position(|g| g.name == name).ok_or_else(|| {
            let known: Vec<String> = self.groups.iter().map(|g| format!("{:?}", g.name)).collect();
            Error::value("group", format!("no group named {name:?}; the groups are {}", known.join(", ")))
        })
    }

    /// The route of a request: by path, or for the group the caller names.
    ///
    /// # Errors
    /// An unknown group name.
    #[inline]
    pub fn route(&self, peer: &str, target: Target<'_>) -> Result<Route> {
        match target {
            Target::Path(path) => Ok(self.router.route(peer, path)),
            Target::Group(name) => Ok(self.router.route_group(peer, self.group_index(name)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router() -> Router {
        let rules = [(r"^/api/v1/", 0), (r"^/api/", 1), (r"^/tx/\d+$", 2)];
        let rules = rules.iter().map(|(p, g)| (compile(p).unwrap(), *g)).collect();
        Router::new(rules, ["trusted".to_owned()], &[r"^/health$".to_owned()]).unwrap()
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
    fn a_group_reached_only_by_name_routes_no_path() {
        let rules = vec![(compile(NAMED_ONLY).unwrap(), 0), (compile("^/api/").unwrap(), 1), (compile("").unwrap(), 2)];
        let r = Router::new(rules, [], &[]).unwrap();
        assert_eq!(r.rules.len(), 2);
        assert_eq!(r.route("p", Some("/api/x")), Route::Group(1));
        assert_eq!(r.route("p", Some("a")), Route::Group(2));
        assert_eq!(r.route("p", None), Route::Group(2));
        let named = Router::new(vec![(compile(NAMED_ONLY).unwrap(), 0)], [], &[]).unwrap();
        assert_eq!(named.route("p", Some("/a^")), Route::Unlimited);
        assert_eq!(named.route("p", None), Route::Unlimited);
    }

    #[test]
    fn exemptions_come_first_and_know_their_group() {
        let r = router();
        assert_eq!(r.route("trusted", Some("/api/v1/x")), Route::Exempt(Some(0)));
        assert_eq!(r.route("p", Some("/health")), Route::Exempt(None));
        assert_eq!(r.route("p", Some("/healthz")), Route::Unlimited);
        assert_eq!(r.route_group("trusted", 2), Route::Exempt(Some(2)));
        assert_eq!(r.route_group("p", 2), Route::Group(2));
    }

    #[test]
    fn a_request_without_path_takes_the_first_rule_matching_the_empty_path() {
        let rules = vec![(compile(r"^/api/").unwrap(), 0), (compile("").unwrap(), 1)];
        let r = Router::new(rules, [], &[]).unwrap();
        assert_eq!(r.route("p", None), Route::Group(1));
    }

    #[test]
    fn the_empty_pattern_catches_every_path_after_the_rules_before_it() {
        let rules = vec![(compile(r"^/api/").unwrap(), 0), (compile("").unwrap(), 1), (compile("x").unwrap(), 2)];
        let r = Router::new(rules, [], &[]).unwrap();
        assert_eq!(r.route("p", Some("/api/v1")), Route::Group(0));
        for path in ["/", "/x", "", "/\u{e9}t\u{e9}"] {
            assert_eq!(r.route("p", Some(path)), Route::Group(1), "{path:?}");
        }
    }

    #[test]
    fn bad_patterns_are_named_by_place() {
        let err = compile(r"^/api/(v1").unwrap_err();
        assert_eq!(err.path(), "pattern");
        assert!(err.message.contains("\"^/api/(v1\""), "{}", err.message);
        assert!(err.message.contains("unclosed group"), "{}", err.message);
        let err = Router::new(Vec::new(), [], &["ok".to_owned(), "[".to_owned()]).unwrap_err();
        assert_eq!(err.path(), "exempt_paths[1]");
    }

    #[test]
    fn group_ids_are_stable_and_bounded() {
        let mut ids = GroupIds::default();
        assert_eq!((ids.id("a").unwrap().0, ids.id("b").unwrap().0, ids.id("a").unwrap().0), (0, 1, 0));
        assert_eq!(ids.name(1), Some("b"));
        for i in 2..MAX_GROUP_NAMES {
            ids.id(&i.to_string()).unwrap();
        }
        assert!(ids.id("one too many").is_err());
    }
}
