//! The per-call work of the outgoing transports (`ratekeeper._outgoing.Outgoing`), in plain Rust: a
//! call's admission in all the groups that apply to it, all or nothing, and the reading of its reply
//! (the server's word, capping its budgets' groups, the counters). What needs Python stays there:
//! waiting, retrying, the user's key, cost and spent functions, and making a group for a budget the
//! server states for the first time (`Limiter.add_group`): [`Settled::unmade`] says which.
//!
//! The limiter is reached through [`Budgets`], which the Python boundary implements over the
//! limiter's store (and the tests over a fake).

use std::sync::Arc;
use std::time::Instant;

use ahash::AHashMap;
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::error::{Error, ErrorKind, Result};
use crate::limiter::Decision;
use crate::server_words::{self, Dialect, Said, Warning, Word};

mod anchor;
use anchor::{Anchor, Shown};

/// A call that the server's word says to retry, with no wait stated, waits this many seconds.
pub const NO_WORD_WAIT: f64 = 1.0;
/// The budget of a host whose server asked for a wait (`Retry-After`): its auto-group counts nothing
/// (its limit is more than a window's calls) until a wait caps it.
pub const HELD_BUDGET: &str = "retry-after";
/// [`HELD_BUDGET`]'s limit per window, the most a limit takes; also the most a budget of no stated size
/// is taken to hold.
pub const HELD_LIMIT: u64 = 4_294_967_295;
/// The most routes a host of resources learns ([`Host::routes`]), and plans it keeps.
const MOST_ROUTES: usize = 1024;
/// What a call held at a window's end waits past it, in seconds.
const SHORTEST_SLEEP: f64 = 0.001;
/// Seconds a window is taken to outlast the resets of a server that rounds them down: a second, the
/// most whole seconds drop.
const LATE_RESET: f64 = 1.0;

/// The caps one reply puts on groups, (group, remaining, `reset_after`): inline for a reply of up to
/// four budgets (every dialect's), so that settling a call allocates nothing.
type Caps = SmallVec<[(Arc<str>, u64, f64); 4]>;

/// What the engine asks of the limiter: a check (spends when admitted), a give-back, a server's word,
/// and the group a path is routed to.
pub trait Budgets {
    /// Spends `units` of `key` in `group` when they are there, reporting what is left.
    ///
    /// # Errors
    /// An unknown group, or a store that cannot answer.
    fn check(&self, key: &str, group: &str, units: u64) -> Result<Decision>;

    /// Gives back `units` spent in `group`.
    ///
    /// # Errors
    /// As `check`.
    fn give_back(&self, key: &str, group: &str, units: u64) -> Result<()>;

    /// The server's word for `key` in `group` (`Limiter::cap`).
    ///
    /// # Errors
    /// An unknown group, a group without a fixed window, or a store that cannot answer.
    fn cap(&self, key: &str, group: &str, remaining: u64, reset_after: f64, age: f64) -> Result<bool>;

    /// The group the limiter's rules route `path` of `key` to, if any.
    ///
    /// # Errors
    /// As `check`.
    fn routed(&self, key: &str, path: Option<&str>) -> Result<Option<String>>;
}

/// The engine's settings, as `Outgoing(...)` checked them.
#[derive(Debug, Clone)]
pub struct Settings {
    /// budget -> group, for the budgets whose group the user declared, in the user's order.
    pub declared: Vec<(String, String)>,
    pub auto_groups: bool,
    /// The window of an auto-group whose server states none, in seconds.
    pub window: f64,
    pub dialect: Option<Dialect>,
    pub obey: bool,
}

/// One key's counters (`HostStats` in Python).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub calls: u64,
    pub waits: u64,
    pub waited: f64,
    pub refused: u64,
    pub throttled: u64,
    pub retries: u64,
    /// The dialect of the server's last word (`""`: none yet).
    pub dialect: &'static str,
    /// Each budget's remaining and seconds to reset, as the server last said, in the order first said.
    pub remaining: Vec<(String, u64)>,
    pub reset: Vec<(String, f64)>,
    /// The client's wall clock at the server's last word, 0.0 before one.
    pub said_at: f64,
    /// Where the server's words placed each budget's window (see [`Anchor`]).
    anchors: Vec<Anchor>,
    /// When each budget that refills is full again (epoch seconds), as the words said it at the latest:
    /// a word that comes late (out of order, or from a call that crossed others) never makes it sooner.
    full_at: Vec<(Box<str>, f64)>,
}

/// Counts to add to a key's counters outside a reply (`Outgoing._count`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub waits: u64,
    pub waited: f64,
    pub refused: u64,
    pub retries: u64,
}

/// Where a call spends: (group, units, whether the group is a budget's) in order, and budget -> group.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub steps: Vec<(Arc<str>, u64, bool)>,
    pub budgets: Vec<(String, Arc<str>)>,
    /// The call's route, at a host whose budgets are alternatives (GitHub's resources): what its answer
    /// teaches ([`Host::routes`]).
    pub route: Option<Arc<str>>,
}

/// One admitted attempt (of a call whose key and host the caller keeps).
#[derive(Debug)]
pub struct Ticket {
    pub plan: Arc<Plan>,
    pub admitted_at: Instant,
    /// Where the short way's admission found the call's host and its counters in the engine's state
    /// (which only grows), so that its reply is not looked up by name again.
    found: Option<Found>,
}

#[derive(Debug, Clone, Copy)]
struct Found {
    host: usize,
    stats: Option<usize>,
}

impl Ticket {
    /// A call admitted now in every step of `plan`.
    #[must_use]
    pub fn new(plan: Arc<Plan>) -> Self {
        Self { plan, admitted_at: Instant::now(), found: None }
    }

    /// Seconds since the call was admitted.
    #[must_use]
    pub fn age(&self) -> f64 {
        self.admitted_at.elapsed().as_secs_f64()
    }
}

/// What came of an admission.
#[derive(Debug)]
pub enum Admission {
    Admitted(Ticket),
    /// A group refused (nothing is spent): its decision.
    Refused(Decision),
    /// Admitted this close to the end of a budget's window, given back: seconds to hold the call.
    Held(f64),
}

/// A budget the server stated whose auto-group is not made (or not at that size): Python makes it
/// (`Limiter.add_group`), tells the engine ([`Engine::made`]) and caps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Unmade {
    pub budget: String,
    pub limit: u64,
    pub window: f64,
    pub remaining: u64,
    pub reset_after: f64,
    /// The group's algorithm: `"gcra"` for a budget that refills all the time (`OpenAI`'s, `Anthropic`'s:
    /// their reset is when it is full again), else `"fixed_window"` (a reset ends a window).
    pub algorithm: &'static str,
}

/// What a reply said, once taken in.
#[derive(Debug, Default)]
pub struct Settled {
    pub word: Word,
    /// Seconds to wait before sending the call again; `None` when the reply is the call's answer.
    pub retry: Option<f64>,
    pub unmade: Vec<Unmade>,
    /// Words a group did not take, for the caller to log: (group, why).
    pub not_applied: Vec<(String, Error)>,
    /// Values of the reply that were ignored, for the caller to log once.
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone)]
struct AutoGroup {
    budget: String,
    group: Arc<str>,
    limit: u64,
    window: f64,
}

#[derive(Debug, Default)]
struct Host {
    /// Its auto-groups, in the order they were made.
    auto: Vec<AutoGroup>,
    /// The plans of calls with no cost estimate, by routed group (at a host of resources, those routed to
    /// no group: [`Host::route_plans`]); emptied when an auto-group is made.
    plans: Vec<(Option<String>, Arc<Plan>)>,
    /// Whether each call spends in one of its budgets, not all: GitHub's resources (`core`, `search`,
    /// `graphql`, ...), which its answers name (`x-ratelimit-resource`).
    resources: bool,
    /// Route -> the resource its answers named, learned (at most [`MOST_ROUTES`]).
    routes: AHashMap<Arc<str>, String>,
    /// A route's first segment -> the resource of the last route learned with it.
    firsts: AHashMap<Box<str>, String>,
    /// At a host of resources, the plans of calls routed to no group of the rules, by route (at most
    /// [`MOST_ROUTES`]): found by the path's route as a slice, with nothing allocated.
    route_plans: AHashMap<Arc<str>, Arc<Plan>>,
    /// The dialect of its last word that stated budgets: its auto-groups' budgets are that dialect's.
    dialect: Option<Dialect>,
    /// Its IETF budgets whose words showed they refill all the time ([`Shown::Refills`]): see
    /// [`Host::reset_of`].
    refilling: Vec<Box<str>>,
    /// Its budgets whose windows were seen to outlast their resets ([`Shown::LateResets`]): their
    /// groups' windows end [`LATE_RESET`] later than the server says.
    late: Vec<Box<str>>,
    /// How long a call takes to reach the server, as its answers tell (see [`Engine::settle`]).
    latency: Option<f64>,
    /// Whether a call to it came back (answered, failed or refused): its calls may take the short way
    /// ([`Engine::admit_heard`]).
    heard: bool,
    /// Where the counters of the key that is this host are in `State::stats`, once counted.
    stats: Option<usize>,
}

impl Host {
    /// Drops the plans made: the groups or routes they were made of changed.
    fn forget_plans(&mut self) {
        self.plans.clear();
        self.route_plans.clear();
    }

    /// The resource a call of `route` spends in, at a host of resources: the one its answers named, or
    /// (a route not heard yet) that of a route with its first segment, else `core`, else the first made.
    fn resource_of(&self, route: &str) -> Option<&str> {
        if let Some(resource) = self.routes.get(route) {
            return Some(resource);
        }
        let sibling = self.firsts.get(first_segment(route)).map(String::as_str);
        let made = self.auto.iter().map(|a| a.budget.as_str()).filter(|&b| b != HELD_BUDGET);
        sibling.or_else(|| made.clone().find(|&b| b == "core")).or_else(|| made.clone().next())
    }

    /// Each budget of `word` (the reply to a call of `age` seconds, `now`), in order: seconds until it has
    /// more than the word says is left ([`Host::reset_of`]), once the word is placed among the key's
    /// (`counters`') earlier ones and what it shows of the server learned. A refilling dialect's (`OpenAI`'s,
    /// Anthropic's) reset is when its budget is full: as said.
    fn resets_of(&mut self, word: &Word, counters: &mut Stats, (now, age): (f64, f64)) -> SmallVec<[f64; 4]> {
        let refilling_dialect = refills(word.dialect);
        let mut resets = SmallVec::new();
        for budget in &word.budgets {
            if refilling_dialect {
                resets.push(budget.reset_after);
                continue;
            }
            let learned = match Anchor::place(&mut counters.anchors, budget, now + budget.reset_after, (now - age, age))
            {
                Shown::Nothing => None,
                Shown::Refills => Some(&mut self.refilling),
                Shown::LateResets => Some(&mut self.late),
            };
            if let Some(learned) = learned.filter(|l| !l.iter().any(|b| **b == *budget.name)) {
                learned.push(budget.name.as_ref().into());
            }
            resets.push(self.reset_of(budget, counters, (now, age)));
        }
        resets
    }

    /// When `budget`, as a word states it, has more than what the word says is left, as its words showed
    /// its server: a budget that refills all the time (an IETF one whose resets fell inside its window) is
    /// full again once what it lacks has refilled, `(q - r) * w / q` from now, whatever its `t` (the next
    /// unit's) says, never sooner than a word of `counters`' key said before, nor than a window after the
    /// key's window opened: a window that ends then starts full as the bucket is. A window that outlasts
    /// its resets (a server that rounds them down) ends a second after its word.
    fn reset_of(&self, budget: &server_words::Budget, counters: &mut Stats, (now, age): (f64, f64)) -> f64 {
        let is = |learned: &[Box<str>]| learned.iter().any(|b| **b == *budget.name);
        match (budget.limit, budget.window) {
            (Some(limit), Some(window)) if limit >= 1 && is(&self.refilling) => {
                #[allow(clippy::cast_precision_loss)]
                let lacking = limit.saturating_sub(budget.remaining) as f64 / limit as f64;
                let full_at = now + budget.reset_after.max(lacking * window);
                // A call admitted after the last full time was admitted in a window that opened since (at that
                // time when the key is busy, else at the call), which lasts a window: its calls on their way,
                // which no word counted yet, spend the bucket they found full. A word never ends it sooner.
                let sent = now - age;
                let held = counters.full_at.iter_mut().find(|(b, _)| **b == *budget.name);
                let before = held.as_ref().map_or(f64::NEG_INFINITY, |(_, at)| *at);
                let opened = if before > sent {
                    before
                } else if before + window > now {
                    before + window
                } else {
                    sent + window
                };
                let at = opened.max(full_at);
                match held {
                    Some((_, held)) => *held = at,
                    None => counters.full_at.push((budget.name.as_ref().into(), at)),
                }
                at - now
            }
            _ if is(&self.late) => budget.reset_after + LATE_RESET,
            _ => budget.reset_after,
        }
    }

    /// Takes in what an answer says of the host's budgets: a server that now speaks another dialect names
    /// other budgets (the groups of the old ones would pace its calls for good, never capped again); a
    /// GitHub word names the resource its call spent in.
    fn learn(&mut self, word: &Word, route: Option<&Arc<str>>) {
        if let (Some(dialect), false) = (word.dialect, word.budgets.is_empty()) {
            if self.dialect.is_some_and(|spoken| spoken != dialect) {
                self.auto.retain(|a| a.budget == HELD_BUDGET);
                self.forget_plans();
                self.refilling.clear();
                self.late.clear();
                self.routes.clear();
                self.firsts.clear();
                self.resources = false;
            }
            self.dialect = Some(dialect);
        }
        if word.dialect != Some(Dialect::GitHub) {
            return;
        }
        if !self.resources {
            self.resources = true;
            self.forget_plans(); // plans by route from now on
        }
        if let (Some(route), [budget]) = (route, word.budgets.as_slice()) {
            if self.routes.get(route).is_some_and(|b| *b == *budget.name) {
                return;
            }
            if self.routes.len() < MOST_ROUTES || self.routes.contains_key(route) {
                let planned = self.resource_of(route) == Some(&*budget.name);
                self.routes.insert(route.clone(), budget.name.to_string());
                self.firsts.insert(first_segment(route).into(), budget.name.to_string());
                if !planned {
                    self.forget_plans();
                }
            }
        }
    }
}

/// `route`'s first segment (`/search` of `/search/issues`).
fn first_segment(route: &str) -> &str {
    let end = route.match_indices('/').nth(1).map_or(route.len(), |(at, _)| at);
    &route[..end]
}

/// What a GitHub resource is learned by: `path`'s first two segments (`/search/code`, `/repos/octocat`).
fn route_of(path: Option<&str>) -> &str {
    let path = path.unwrap_or("/");
    let end = path.match_indices('/').nth(2).map_or(path.len(), |(at, _)| at);
    &path[..end]
}

#[derive(Debug, Default)]
struct State {
    /// The hosts, and where each is in `hosts`.
    hosts: Vec<Host>,
    host_index: AHashMap<String, usize>,
    /// Each key's counters, in the order first counted, and where each is in `stats`.
    stats: Vec<(String, Stats)>,
    stats_index: AHashMap<String, usize>,
}

impl State {
    fn stats_of(&mut self, key: &str) -> &mut Stats {
        let at = self.stats_at(key);
        &mut self.stats[at].1
    }

    /// Where `key`'s counters are in `stats` (made when new).
    fn stats_at(&mut self, key: &str) -> usize {
        if let Some(&at) = self.stats_index.get(key) {
            at
        } else {
            self.stats.push((key.to_owned(), Stats::default()));
            self.stats_index.insert(key.to_owned(), self.stats.len() - 1);
            self.stats.len() - 1
        }
    }

    fn host(&mut self, host: &str) -> &mut Host {
        let at = self.host_at(host);
        &mut self.hosts[at]
    }

    /// Where `host` is in `hosts` (made when new).
    fn host_at(&mut self, host: &str) -> usize {
        if let Some(&at) = self.host_index.get(host) {
            at
        } else {
            self.hosts.push(Host::default());
            self.host_index.insert(host.to_owned(), self.hosts.len() - 1);
            self.hosts.len() - 1
        }
    }

    fn known_host(&self, host: &str) -> Option<&Host> {
        self.host_index.get(host).and_then(|&at| self.hosts.get(at))
    }
}

/// The engine of one `Outgoing`: shared by its transports, threads and tasks.
#[derive(Debug)]
pub struct Engine {
    settings: Settings,
    declared: Vec<(String, Arc<str>)>,
    state: Mutex<State>,
}

/// Whether the budget `decision` spent in is more than half used: only then may calls that cross into
/// the server's next window fill it past its limit.
fn filling(decision: &Decision) -> bool {
    decision.report.is_some_and(|r| r.remaining.saturating_mul(2) < r.limit)
}

/// Whether the budgets of `dialect` refill all the time, full again at their reset (`OpenAI`: "the time
/// until the rate limit resets to its initial state"; Anthropic: "fully replenished"), rather than in
/// windows that their reset ends.
const fn refills(dialect: Option<Dialect>) -> bool {
    matches!(dialect, Some(Dialect::OpenAi | Dialect::Anthropic))
}

/// The window of a refilling budget that `budget` implies, in whole seconds: its reset is when it is
/// full again, so what it used refills in `reset_after` (`None` when nothing is used, or the reset is
/// under 10 s, whose rounding would make the figure a guess). At most 30 days.
fn implied_window(budget: &server_words::Budget) -> Option<f64> {
    let limit = budget.limit?;
    if budget.remaining >= limit || budget.reset_after < 10.0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let window = budget.reset_after * limit as f64 / (limit - budget.remaining) as f64;
    Some(window.round().clamp(1.0, 30.0 * 86_400.0))
}

/// Whether a reply refuses its call for the rate: a 429; a 503 or 403 with a wait; a 403 with a budget
/// said to be spent (GitHub's primary limit: "do not retry until x-ratelimit-reset").
fn throttled(status: i64, word: &Word) -> bool {
    status == 429
        || ((status == 403 || status == 503) && word.retry_after.is_some())
        || (status == 403 && word.budgets.iter().any(|b| b.remaining == 0))
}

#[allow(clippy::cast_precision_loss)]
fn secs(ns: u64) -> f64 {
    if ns == u64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / 1e9
    }
}

impl Engine {
    #[must_use]
    pub fn new(settings: Settings) -> Self {
        let declared = settings.declared.iter().map(|(b, g)| (b.clone(), Arc::from(g.as_str()))).collect();
        Self { settings, declared, state: Mutex::new(State::default()) }
    }

    #[must_use]
    pub const fn settings(&self) -> &Settings {
        &self.settings
    }

    fn declared_group(&self, budget: &str) -> Option<&Arc<str>> {
        self.declared.iter().find(|(b, _)| b == budget).map(|(_, g)| g)
    }

    /// Where a call of `host` routed to `routed` spends, at `estimate` (budget -> units; 1 for a budget
    /// it leaves out): its routed group (`"requests"`' units), then each budget's group (declared
    /// ones win over auto-groups).
    fn make_plan(
        &self,
        host: &Host,
        routed: Option<&str>,
        estimate: &[(String, u64)],
        route: Option<Arc<str>>,
    ) -> Plan {
        let units = |budget: &str| estimate.iter().find(|(b, _)| b == budget).map_or(1, |(_, u)| *u);
        let resource = route.as_ref().and_then(|route| host.resource_of(route));
        let mut budgets: Vec<(String, Arc<str>)> = host
            .auto
            .iter()
            .filter(|a| resource.is_none_or(|r| a.budget == r || a.budget == HELD_BUDGET))
            .map(|a| (a.budget.clone(), a.group.clone()))
            .collect();
        for (budget, group) in &self.declared {
            match budgets.iter_mut().find(|(b, _)| b == budget) {
                Some(entry) => entry.1 = group.clone(),
                None => budgets.push((budget.clone(), group.clone())),
            }
        }
        let mut spent: Vec<(Arc<str>, u64)> = Vec::with_capacity(budgets.len() + 1);
        if let Some(routed) = routed {
            spent.push((Arc::from(routed), units("requests")));
        }
        for (budget, group) in &budgets {
            match spent.iter_mut().find(|(g, _)| g == group) {
                Some(entry) => entry.1 += units(budget),
                None => spent.push((group.clone(), units(budget))),
            }
        }
        let steps = spent.into_iter().map(|(group, units)| {
            let is_budget = budgets.iter().any(|(_, g)| *g == group);
            (group, units, is_budget)
        });
        Plan { steps: steps.collect(), budgets, route }
    }

    fn plan(&self, host: &str, routed: Option<String>, path: Option<&str>, estimate: &[(String, u64)]) -> Arc<Plan> {
        let mut state = self.state.lock();
        let host = state.host(host);
        if !estimate.is_empty() {
            let route = host.resources.then(|| Arc::from(route_of(path)));
            return Arc::new(self.make_plan(host, routed.as_deref(), estimate, route));
        }
        self.plan_without_estimate(host, routed, path)
    }

    /// The plan of a call of `host` with no cost estimate, made once per routed group, or at a host of
    /// resources once per route (a call its rules route too, rare there, has a plan made for it).
    fn plan_without_estimate(&self, host: &mut Host, routed: Option<String>, path: Option<&str>) -> Arc<Plan> {
        if host.resources {
            let route = route_of(path);
            if let (Some(plan), None) = (host.route_plans.get(route), &routed) {
                return plan.clone();
            }
            let route: Arc<str> = Arc::from(route);
            let plan = Arc::new(self.make_plan(host, routed.as_deref(), &[], Some(route.clone())));
            if routed.is_none() && host.route_plans.len() < MOST_ROUTES {
                host.route_plans.insert(route, plan.clone());
            }
            return plan;
        }
        if let Some((_, plan)) = host.plans.iter().find(|(r, _)| *r == routed) {
            return plan.clone();
        }
        let plan = Arc::new(self.make_plan(host, routed.as_deref(), &[], None));
        host.plans.push((routed, plan.clone()));
        plan
    }

    /// The group the limiter's rules route a call to, unless it is a declared budget's (which the call
    /// spends in as that budget).
    fn routed(&self, budgets: &impl Budgets, key: &str, path: Option<&str>) -> Result<Option<String>> {
        Ok(budgets.routed(key, path)?.filter(|g| !self.declared.iter().any(|(_, d)| **d == **g)))
    }

    /// Where a call spends (see [`Engine::admit`]), for a caller that checks each step itself (asyncio,
    /// over a store that waits on I/O).
    ///
    /// # Errors
    /// What the limiter raises.
    pub fn plan_of(
        &self,
        budgets: &impl Budgets,
        (key, host, path): (&str, &str, Option<&str>),
        estimate: &[(String, u64)],
    ) -> Result<Arc<Plan>> {
        let routed = self.routed(budgets, key, path)?;
        Ok(self.plan(host, routed, path, estimate))
    }

    /// Spends a call's units in every group that applies to it, all or nothing. `guard`: hold a call
    /// admitted closer to a budget's window end than calls to `host` take to reach the server
    /// (`Outgoing._crossing`).
    ///
    /// # Errors
    /// What the limiter raises (an unknown group, a store that cannot answer).
    pub fn admit(
        &self,
        budgets: &impl Budgets,
        (key, host, path): (&str, &str, Option<&str>),
        estimate: &[(String, u64)],
        guard: bool,
    ) -> Result<Admission> {
        let plan = self.plan_of(budgets, (key, host, path), estimate)?;
        self.spend(budgets, (key, host), plan, guard)
    }

    /// Spends in every step of `plan`, all or nothing (see [`Engine::admit`]).
    fn spend(
        &self,
        budgets: &impl Budgets,
        (key, host): (&str, &str),
        plan: Arc<Plan>,
        guard: bool,
    ) -> Result<Admission> {
        let mut soonest: Option<f64> = None;
        for (index, (group, units, is_budget)) in plan.steps.iter().enumerate() {
            let decision = budgets.check(key, group, *units)?;
            if !decision.outcome.allowed {
                Self::give_back(budgets, key, &plan.steps[..index])?;
                return Ok(Admission::Refused(decision));
            }
            if *is_budget && filling(&decision) {
                let end = decision.report.map_or(0.0, |r| secs(r.reset_after_ns));
                soonest = Some(soonest.map_or(end, |s| s.min(end)));
            }
        }
        let hold = if guard { self.crossing(host, soonest) } else { 0.0 };
        if hold > 0.0 {
            Self::give_back(budgets, key, &plan.steps)?;
            return Ok(Admission::Held(hold));
        }
        Ok(Admission::Admitted(Ticket::new(plan)))
    }

    /// [`Engine::admit`] of a call keyed by its host with no cost estimate, the short way: `None`
    /// (nothing spent) unless a call to `host` came back before ([`Engine::heard_from`]) and this one is
    /// admitted now, unheld; the caller then takes the long way, which waits for the first answer and
    /// for the call's turn.
    ///
    /// # Errors
    /// What the limiter raises (an unknown group, a store that cannot answer).
    pub fn admit_heard(&self, budgets: &impl Budgets, host: &str, path: Option<&str>) -> Result<Option<Ticket>> {
        let routed = self.routed(budgets, host, path)?;
        let (plan, found) = {
            let mut state = self.state.lock();
            let Some(&at) = state.host_index.get(host) else { return Ok(None) };
            match state.hosts.get_mut(at) {
                Some(known) if known.heard => {
                    (self.plan_without_estimate(known, routed, path), Found { host: at, stats: known.stats })
                }
                _ => return Ok(None),
            }
        };
        match self.spend(budgets, (host, host), plan, true)? {
            Admission::Admitted(ticket) => Ok(Some(Ticket { found: Some(found), ..ticket })),
            Admission::Refused(_) | Admission::Held(_) => Ok(None),
        }
    }

    /// A call to `host` came back (answered, failed or refused): the calls after it may take the short
    /// way.
    pub fn heard_from(&self, host: &str) {
        self.state.lock().host(host).heard = true;
    }

    /// Gives back what `ticket` spent for `key`: its call never reached the server (no connection was made).
    ///
    /// # Errors
    /// What the limiter raises (a store that cannot answer).
    pub fn unspend(&self, budgets: &impl Budgets, key: &str, ticket: &Ticket) -> Result<()> {
        Self::give_back(budgets, key, &ticket.plan.steps)
    }

    fn give_back(budgets: &impl Budgets, key: &str, steps: &[(Arc<str>, u64, bool)]) -> Result<()> {
        steps.iter().try_for_each(|(group, units, _)| budgets.give_back(key, group, *units))
    }

    /// Seconds to hold a call admitted `soonest` seconds before the end of a budget's window that is
    /// more than half used, else 0.0: one that would take longer than that to reach the server may be
    /// counted in its next window, which the next local window (starting full) does not count.
    pub fn crossing(&self, host: &str, soonest: Option<f64>) -> f64 {
        let Some(soonest) = soonest else { return 0.0 };
        let latency = self.state.lock().known_host(host).and_then(|h| h.latency).unwrap_or(0.0);
        if latency > 0.0 && 0.0 < soonest && soonest < latency {
            soonest + SHORTEST_SLEEP
        } else {
            0.0
        }
    }

    /// Takes in the reply to `ticket`'s call (of `key` to `host`) with the rate-limit fields `said`:
    /// counts it, keeps the server's word in the counters, caps the groups of its budgets (those made),
    /// and works out the wait before a retry. `now` is the client's wall clock (epoch seconds).
    ///
    /// # Errors
    /// A store that cannot answer (a word a group does not take is in `not_applied`).
    pub fn settle(
        &self,
        budgets: &impl Budgets,
        (key, host_name): (&str, &str),
        ticket: &Ticket,
        said: &Said<'_>,
        (status, now): (i64, f64),
    ) -> Result<Settled> {
        let mut settled = Settled::default();
        let word = server_words::read(said, status, now, self.settings.dialect, &mut settled.warnings);
        let age = ticket.age();
        let mut caps = Caps::new();
        {
            let mut state = self.state.lock();
            let state = &mut *state;
            let (host_at, stats_at) = match ticket.found {
                Some(Found { host, stats: Some(counters) }) => (host, counters),
                Some(Found { host, stats: None }) => (host, state.stats_at(key)),
                None => (state.host_at(host_name), state.stats_at(key)),
            };
            Self::record(&mut state.stats[stats_at].1, &word, status, now);
            let host = &mut state.hosts[host_at];
            host.learn(&word, ticket.plan.route.as_ref());
            if host.stats.is_none() && key == host_name {
                host.stats = Some(stats_at); // the key of the short way's calls
            }
            host.latency = Some(match host.latency {
                Some(latency) if age >= latency => 0.9 * latency + 0.1 * age,
                _ => age,
            });
            if self.settings.obey {
                let resets = host.resets_of(&word, &mut state.stats[stats_at].1, (now, age));
                self.caps_of(host, ticket, (&word, &resets), &mut caps, &mut settled.unmade);
            }
        }
        for (group, remaining, reset_after) in caps {
            match budgets.cap(key, &group, remaining, reset_after, age) {
                Ok(_) => {}
                Err(error) if error.kind != ErrorKind::Backend => settled.not_applied.push((group.to_string(), error)),
                Err(error) => return Err(error),
            }
        }
        settled.retry = Self::retry_wait(status, &word);
        settled.word = word;
        Ok(settled)
    }

    /// Counts the answer and keeps the server's word. (With it, [`Engine::settle`] keeps how long calls
    /// to the host take, admission to answer: the fastest answers tell best how soon a call reaches the
    /// server, so a faster call lowers the figure at once and a slower one raises it by a tenth of the
    /// difference.)
    fn record(counters: &mut Stats, word: &Word, status: i64, now: f64) {
        counters.calls += 1;
        if throttled(status, word) {
            counters.throttled += 1;
        }
        if word.says_anything() {
            counters.dialect = word.dialect.map_or("", Dialect::name);
            counters.said_at = now;
            for budget in &word.budgets {
                match counters.remaining.iter_mut().find(|(name, _)| *name == budget.name) {
                    Some(entry) => entry.1 = budget.remaining,
                    None => counters.remaining.push((budget.name.to_string(), budget.remaining)),
                }
                match counters.reset.iter_mut().find(|(name, _)| *name == budget.name) {
                    Some(entry) => entry.1 = budget.reset_after,
                    None => counters.reset.push((budget.name.to_string(), budget.reset_after)),
                }
            }
        }
    }

    /// (group, remaining, `reset_after`) for each budget of `word` whose group is made; the others in
    /// `unmade`. A wait the server asks for holds every call of the host until it is over: with
    /// auto-groups in the host's held group (made on the first such word), so a budget keeps its own
    /// remaining and reset for after it (GitHub's secondary limits: a `Retry-After` beside thousands
    /// left); without, in each group of the call when the word names no budget.
    fn caps_of(
        &self,
        host: &Host,
        ticket: &Ticket,
        (word, resets): (&Word, &[f64]),
        caps: &mut Caps,
        unmade: &mut Vec<Unmade>,
    ) {
        let auto_groups = self.settings.auto_groups;
        let held = word.retry_after.filter(|_| auto_groups);
        for (budget, &reset_after) in word.budgets.iter().zip(resets) {
            if let Some(group) = self.declared_group(&budget.name) {
                caps.push((group.clone(), budget.remaining, reset_after));
                continue;
            }
            if !auto_groups {
                continue;
            }
            let made = host.auto.iter().find(|a| a.budget == budget.name);
            // A size unstated (IETF's RateLimit without its policy, X-RateLimit without its limit) or 0: the
            // most the budget was seen to hold, what is left and the call just answered. Never more than it
            // is, so that the group counts the calls on their way, which what is left does not.
            let limit = budget.limit.filter(|&l| l >= 1).unwrap_or_else(|| {
                let seen = budget.remaining.saturating_add(1).min(HELD_LIMIT);
                made.map_or(seen, |a| a.limit.max(seen))
            });
            let window = budget.window.unwrap_or_else(|| {
                // A refilling budget's window, as its word implies it (OpenAI's per-day budgets beside the
                // per-minute ones); kept while later words imply about the same, against rounding.
                let implied = if refills(word.dialect) { implied_window(budget) } else { None };
                match (implied, made) {
                    (Some(w), Some(a)) if (w / a.window - 1.0).abs() <= 0.2 => a.window,
                    (Some(w), _) => w,
                    (None, Some(a)) => a.window,
                    (None, None) => self.settings.window,
                }
            });
            match made {
                Some(auto) if auto.limit == limit && auto.window.to_bits() == window.to_bits() => {
                    caps.push((auto.group.clone(), budget.remaining, reset_after));
                }
                _ => unmade.push(Unmade {
                    budget: budget.name.to_string(),
                    limit,
                    window,
                    remaining: budget.remaining,
                    reset_after,
                    algorithm: if refills(word.dialect) { "gcra" } else { "fixed_window" },
                }),
            }
        }
        if let Some(wait) = held {
            // The held group's limit is larger than any window's calls: it counts nothing of its own,
            // and holds them all, in the store, so every process waits too.
            match host.auto.iter().find(|a| a.budget == HELD_BUDGET) {
                Some(auto) => caps.push((auto.group.clone(), 0, wait)),
                None => unmade.push(Unmade {
                    budget: HELD_BUDGET.to_string(),
                    limit: HELD_LIMIT,
                    window: self.settings.window,
                    remaining: 0,
                    reset_after: wait,
                    algorithm: "fixed_window",
                }),
            }
        } else if let (Some(wait), true) = (word.retry_after, word.budgets.is_empty()) {
            caps.extend(ticket.plan.budgets.iter().map(|(_, group)| (group.clone(), 0, wait)));
        }
    }

    /// Seconds to wait before sending a throttled call again; `None` for a reply to keep.
    fn retry_wait(status: i64, word: &Word) -> Option<f64> {
        if !throttled(status, word) {
            return None;
        }
        if word.retry_after.is_some() {
            return word.retry_after;
        }
        let spent = word.budgets.iter().filter(|b| b.remaining == 0).map(|b| b.reset_after);
        Some(spent.fold(None, |most: Option<f64>, r| Some(most.map_or(r, |m| m.max(r)))).unwrap_or(NO_WORD_WAIT))
    }

    /// The auto-group of `budget` at `host` as last made (group, limit, window).
    #[must_use]
    pub fn made_group(&self, host: &str, budget: &str) -> Option<(String, u64, f64)> {
        let state = self.state.lock();
        let auto = state.known_host(host)?.auto.iter().find(|a| a.budget == budget)?;
        Some((auto.group.to_string(), auto.limit, auto.window))
    }

    /// Whether a refusal by `group` for `key`'s call to `host` is the limit's own guess, which the server's
    /// next word may end sooner: `group` is one of the host's budgets (an auto-group or a declared one), and
    /// no word of the server's holds at `now` (epoch seconds): none came for `key`, or every reset it said
    /// has passed, so the group's window is its own (`window` long) until the words of the calls now on
    /// their way end it where the server's does.
    pub fn guessing(&self, (key, host): (&str, &str), group: &str, now: f64) -> bool {
        let state = self.state.lock();
        let budget_group = self.declared.iter().any(|(_, g)| **g == *group)
            || state
                .known_host(host)
                .is_some_and(|h| h.auto.iter().any(|a| *a.group == *group && a.budget != HELD_BUDGET));
        if !budget_group {
            return false;
        }
        let Some(&at) = state.stats_index.get(key) else { return true };
        let said = &state.stats[at].1;
        said.reset.iter().all(|(_, reset)| said.said_at + reset <= now)
    }

    /// Python made (or resized) `group` for `budget` at `host`: calls plan with it from now on.
    pub fn made(&self, host: &str, budget: &str, group: &str, limit: u64, window: f64) {
        let mut state = self.state.lock();
        let host = state.host(host);
        let made = AutoGroup { budget: budget.to_owned(), group: Arc::from(group), limit, window };
        match host.auto.iter_mut().find(|a| a.budget == budget) {
            Some(auto) if *auto.group == *group => *auto = made,
            Some(auto) => {
                *auto = made;
                host.forget_plans();
            }
            None => {
                host.auto.push(made);
                host.forget_plans();
            }
        }
    }

    /// Adds `counts` to `key`'s counters.
    pub fn count(&self, key: &str, counts: Counts) {
        let mut state = self.state.lock();
        let counters = state.stats_of(key);
        counters.waits += counts.waits;
        counters.waited += counts.waited;
        counters.refused += counts.refused;
        counters.retries += counts.retries;
    }

    /// Each key's counters (a copy), in the order the keys were first counted.
    #[must_use]
    pub fn stats(&self) -> Vec<(String, Stats)> {
        self.state.lock().stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::*;
    use crate::algorithm::{Outcome, Report};
    use crate::limiter::Receipt;
    use crate::rules::Route;

    /// Budgets that admit while `left` lasts, and write down what they were asked.
    #[derive(Default)]
    struct Fake {
        left: RefCell<HashMap<String, u64>>,
        limit: u64,
        calls: RefCell<Vec<String>>,
        routed: Option<String>,
    }

    impl Fake {
        fn new(limit: u64) -> Self {
            Self { limit, ..Self::default() }
        }
    }

    impl Budgets for Fake {
        fn check(&self, key: &str, group: &str, units: u64) -> Result<Decision> {
            self.calls.borrow_mut().push(format!("check {key} {group} {units}"));
            let mut left = self.left.borrow_mut();
            let left = left.entry(group.to_owned()).or_insert(self.limit);
            let allowed = *left >= units;
            if allowed {
                *left -= units;
            }
            Ok(Decision {
                route: Route::Unlimited,
                group: None,
                outcome: if allowed { Outcome::admitted(0) } else { Outcome::refused(1_000_000_000) },
                refused_by: None,
                report: Some(Report {
                    limit: self.limit,
                    remaining: *left,
                    reset_after_ns: 500_000_000,
                    window_ns: None,
                    next_ns: 0,
                }),
                now: 0,
                receipt: Receipt { limits: 0, at: 0, wait_ns: 0, permits: false, remote_at: 0 },
            })
        }

        fn give_back(&self, key: &str, group: &str, units: u64) -> Result<()> {
            self.calls.borrow_mut().push(format!("give {key} {group} {units}"));
            *self.left.borrow_mut().get_mut(group).expect("checked") += units;
            Ok(())
        }

        fn cap(&self, key: &str, group: &str, remaining: u64, reset_after: f64, _age: f64) -> Result<bool> {
            if group == "bad" {
                return Err(Error::value("group", "no fixed window"));
            }
            self.calls.borrow_mut().push(format!("cap {key} {group} {remaining} {reset_after}"));
            Ok(true)
        }

        fn routed(&self, _key: &str, _path: Option<&str>) -> Result<Option<String>> {
            Ok(self.routed.clone())
        }
    }

    fn engine(declared: &[(&str, &str)]) -> Engine {
        Engine::new(Settings {
            declared: declared.iter().map(|(b, g)| ((*b).to_owned(), (*g).to_owned())).collect(),
            auto_groups: true,
            window: 60.0,
            dialect: None,
            obey: true,
        })
    }

    fn said<'a>(pairs: &[(&str, &'a str)]) -> Said<'a> {
        let mut said = Said::new();
        for (name, value) in pairs {
            said.add_named(name, *value);
        }
        said
    }

    fn admitted(admission: Admission) -> Ticket {
        match admission {
            Admission::Admitted(ticket) => ticket,
            other => panic!("not admitted: {other:?}"),
        }
    }

    const OPENAI: [(&str, &str); 6] = [
        ("x-ratelimit-limit-requests", "100"),
        ("x-ratelimit-remaining-requests", "99"),
        ("x-ratelimit-reset-requests", "6m0s"),
        ("x-ratelimit-limit-tokens", "1000"),
        ("x-ratelimit-remaining-tokens", "900"),
        ("x-ratelimit-reset-tokens", "1s"),
    ];

    #[test]
    fn first_word_asks_for_its_groups_then_caps_them() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        assert!(budgets.calls.borrow().is_empty()); // no group yet: nothing to spend in
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(&OPENAI), (200, 0.0)).unwrap();
        assert_eq!(settled.retry, None);
        let unmade: Vec<_> =
            settled.unmade.iter().map(|u| (u.budget.as_str(), u.limit, u.window, u.algorithm)).collect();
        // OpenAI's budgets refill all the time, full again at their reset: a GCRA each. One request of 100 refills
        // in 6 minutes: 100 per 10 hours; the tokens' reset, under 10 s, implies no window.
        assert_eq!(unmade, [("requests", 100, 36_000.0, "gcra"), ("tokens", 1000, 60.0, "gcra")]);
        engine.made("api", "requests", "api requests", 100, 36_000.0);
        engine.made("api", "tokens", "api tokens", 1000, 60.0);
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[("tokens".into(), 5)], true).unwrap());
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(&OPENAI), (200, 0.0)).unwrap();
        assert!(settled.unmade.is_empty());
        assert_eq!(
            *budgets.calls.borrow(),
            ["check h api requests 1", "check h api tokens 5", "cap h api requests 99 360", "cap h api tokens 900 1"]
        );
        let stats = engine.stats();
        assert_eq!(stats[0].1.calls, 2);
        assert_eq!(stats[0].1.dialect, "openai");
        assert_eq!(stats[0].1.remaining, [("requests".to_owned(), 99), ("tokens".to_owned(), 900)]);
    }

    #[test]
    fn a_budgets_refusal_is_a_guess_once_every_reset_the_server_said_has_passed() {
        let (engine, budgets) = (engine(&[("requests", "declared")]), Fake::new(10));
        // No word yet: a budget's window is its own.
        assert!(engine.guessing(("h", "api"), "declared", 100.0));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        engine.settle(&budgets, ("h", "api"), &ticket, &said(&OPENAI), (200, 100.0)).unwrap();
        engine.made("api", "tokens", "api tokens", 1000, 60.0);
        // The requests reset is 6 minutes away, the tokens one a second: the word holds until both passed.
        for group in ["declared", "api tokens"] {
            assert!(!engine.guessing(("h", "api"), group, 100.5));
            assert!(!engine.guessing(("h", "api"), group, 459.0));
            assert!(engine.guessing(("h", "api"), group, 461.0));
        }
        // A group of the limiter's own rules is never the server's to move.
        assert!(!engine.guessing(("h", "api"), "routed", 461.0));
    }

    #[test]
    fn a_wait_before_any_budget_is_held_by_a_group_of_its_own() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        // A 429 with only Retry-After, the host's first word: no budget to cap, so the wait's own group is asked for.
        let settled =
            engine.settle(&budgets, ("h", "api"), &ticket, &said(&[("retry-after", "30")]), (429, 0.0)).unwrap();
        assert_eq!(settled.retry, Some(30.0));
        let unmade: Vec<_> =
            settled.unmade.iter().map(|u| (u.budget.as_str(), u.limit, u.window, u.remaining, u.reset_after)).collect();
        assert_eq!(unmade, [(HELD_BUDGET, HELD_LIMIT, 60.0, 0, 30.0)]);
        engine.made("api", HELD_BUDGET, "api retry-after", HELD_LIMIT, 60.0);
        // Made: every call spends in it, and the next wait caps it.
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        let settled =
            engine.settle(&budgets, ("h", "api"), &ticket, &said(&[("retry-after", "5")]), (503, 0.0)).unwrap();
        assert!(settled.unmade.is_empty());
        assert_eq!(*budgets.calls.borrow(), ["check h api retry-after 1", "cap h api retry-after 0 5"]);
    }

    #[test]
    fn a_wait_beside_budgets_is_held_apart_from_them() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        engine.made("api", "core", "api core", 5000, 60.0);
        engine.made("api", HELD_BUDGET, "api retry-after", HELD_LIMIT, 60.0);
        // GitHub's secondary limit: thousands left in the hour, and a minute's wait for every call.
        let github = [
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4000"),
            ("x-ratelimit-reset", "1800"),
            ("x-ratelimit-resource", "core"),
            ("retry-after", "60"),
        ];
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(&github), (403, 0.0)).unwrap();
        assert_eq!(settled.retry, Some(60.0));
        let calls = budgets.calls.borrow();
        assert_eq!(calls[calls.len() - 2..], ["cap h api core 4000 1800", "cap h api retry-after 0 60"]);
        // Its refusals are the server's word, never a guess to look past.
        assert!(!engine.guessing(("h", "api"), "api retry-after", 1e12));
    }

    #[test]
    fn a_budget_of_no_stated_size_is_sized_by_the_most_it_was_seen_to_hold() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        // A limit of 0, an IETF budget with no policy, X-RateLimit without its limit: a group of the size the
        // budget was seen to have, capped at what is left.
        for (pairs, budget, remaining, reset) in [
            (
                &[("x-ratelimit-limit", "0"), ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "30")][..],
                "requests",
                0,
                30.0,
            ),
            (&[("ratelimit", "\"day\";r=0;t=45")][..], "day", 0, 45.0),
            (&[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "20")][..], "requests", 3, 20.0),
        ] {
            let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(pairs), (200, 0.0)).unwrap();
            let unmade: Vec<_> =
                settled.unmade.iter().map(|u| (u.budget.as_str(), u.limit, u.remaining, u.reset_after)).collect();
            // Sized at the most it was seen to hold: what is left, and the call answered.
            assert_eq!(unmade, [(budget, remaining + 1, remaining, reset)]);
        }
        // Made at 4, it grows with a larger word, and never shrinks.
        engine.made("api", "requests", "api requests", 4, 60.0);
        let word = |left| [("x-ratelimit-remaining", left), ("x-ratelimit-reset", "20")];
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(&word("9")), (200, 0.0)).unwrap();
        assert_eq!(settled.unmade[0].limit, 10);
        assert!(engine
            .settle(&budgets, ("h", "api"), &ticket, &said(&word("1")), (200, 0.0))
            .unwrap()
            .unmade
            .is_empty());
    }

    #[test]
    fn a_server_that_changes_dialect_leaves_the_old_dialects_budgets_behind() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        let old = [("x-ratelimit-limit", "10"), ("x-ratelimit-remaining", "9"), ("x-ratelimit-reset", "4")];
        engine.settle(&budgets, ("h", "api"), &ticket, &said(&old), (200, 0.0)).unwrap();
        engine.made("api", "requests", "api requests", 10, 60.0);
        let steps = |engine: &Engine| {
            let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
            ticket.plan.steps.iter().map(|(group, _, _)| group.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(steps(&engine), ["api requests"]);
        let new = [("ratelimit-policy", "\"default\";q=10;w=4"), ("ratelimit", "\"default\";r=8;t=3")];
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(&new), (200, 0.0)).unwrap();
        assert_eq!(settled.unmade[0].budget, "default");
        assert!(steps(&engine).is_empty()); // the old budget's group no longer paces the host
    }

    #[test]
    fn githubs_primary_limit_403_is_a_throttle_retried_at_the_reset() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        let spent = [("x-ratelimit-limit", "60"), ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1800000030")];
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(&spent), (403, 1.8e9)).unwrap();
        assert_eq!(settled.retry, Some(30.0));
        // A 403 with some left is the server's answer (a forbidden call), not a throttle.
        let left = [("x-ratelimit-limit", "60"), ("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "1800000030")];
        assert_eq!(engine.settle(&budgets, ("h", "api"), &ticket, &said(&left), (403, 1.8e9)).unwrap().retry, None);
        assert_eq!(engine.stats()[0].1.throttled, 1);
    }

    #[test]
    fn a_refilling_budgets_window_is_what_its_words_imply() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/")), &[], true).unwrap());
        // OpenAI's per-day budget: 200 a day, one used, full again in 7m12s; a per-minute one beside it.
        let day = [
            ("x-ratelimit-limit-requests", "200"),
            ("x-ratelimit-remaining-requests", "199"),
            ("x-ratelimit-reset-requests", "7m12s"),
            ("x-ratelimit-limit-tokens", "1000"),
            ("x-ratelimit-remaining-tokens", "990"),
            ("x-ratelimit-reset-tokens", "600ms"),
        ];
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &said(&day), (200, 0.0)).unwrap();
        let unmade: Vec<_> = settled.unmade.iter().map(|u| (u.budget.as_str(), u.window)).collect();
        assert_eq!(unmade, [("requests", 86_400.0), ("tokens", 60.0)]); // a reset under 10 s implies nothing
        engine.made("api", "requests", "api requests", 200, 86_400.0);
        engine.made("api", "tokens", "api tokens", 1000, 60.0);
        // Later words implying about the same keep the window made.
        let later = [
            ("x-ratelimit-limit-requests", "200"),
            ("x-ratelimit-remaining-requests", "190"),
            ("x-ratelimit-reset-requests", "1h10m0s"),
        ];
        assert!(engine.settle(&budgets, ("h", "api"), &ticket, &said(&later), (200, 0.0)).unwrap().unmade.is_empty());
    }

    #[test]
    fn a_github_call_spends_in_the_resource_its_route_is_answered_in() {
        let (engine, budgets) = (engine(&[]), Fake::new(10));
        engine.made("gh", "core", "gh core", 5000, 60.0);
        engine.made("gh", "search", "gh search", 30, 60.0);
        let word = |resource: &'static str| {
            [
                ("x-ratelimit-limit", "30"),
                ("x-ratelimit-remaining", "9"),
                ("x-ratelimit-reset", "30"),
                ("x-ratelimit-resource", resource),
            ]
        };
        let call = |path: &'static str, resource: &'static str| {
            let ticket = admitted(engine.admit(&budgets, ("h", "gh", Some(path)), &[], true).unwrap());
            engine.settle(&budgets, ("h", "gh"), &ticket, &said(&word(resource)), (200, 0.0)).unwrap();
            ticket.plan.steps.iter().map(|(group, _, _)| group.to_string()).collect::<Vec<_>>()
        };
        // Before any GitHub word, a call spends in every budget; after it, in its route's resource only.
        assert_eq!(call("/repos/o/r", "core"), ["gh core", "gh search"]);
        assert_eq!(call("/search/issues", "search"), ["gh core"]); // not heard yet: core
        assert_eq!(call("/search/issues", "search"), ["gh search"]);
        assert_eq!(call("/search/repositories", "search"), ["gh search"]); // a sibling route
        assert_eq!(call("/repos/o/r", "core"), ["gh core"]);
        assert_eq!(call("/users/u", "core"), ["gh core"]);
    }

    #[test]
    fn the_short_way_admits_only_a_host_heard_from_and_counts_as_the_long_way() {
        let (engine, budgets) = (engine(&[("requests", "r")]), Fake::new(2));
        // Not heard from yet: nothing spent, the caller goes the long way.
        assert!(engine.admit_heard(&budgets, "api", Some("/")).unwrap().is_none());
        assert!(budgets.calls.borrow().is_empty());
        let first = admitted(engine.admit(&budgets, ("api", "api", Some("/")), &[], true).unwrap());
        engine.settle(&budgets, ("api", "api"), &first, &said(&OPENAI), (200, 0.0)).unwrap();
        engine.heard_from("api");
        let ticket = engine.admit_heard(&budgets, "api", Some("/")).unwrap().expect("admitted");
        engine.settle(&budgets, ("api", "api"), &ticket, &said(&OPENAI), (429, 0.0)).unwrap();
        let stats = engine.stats();
        assert_eq!(stats.len(), 1);
        assert_eq!((stats[0].0.as_str(), stats[0].1.calls, stats[0].1.throttled), ("api", 2, 1));
        // Refused (the limit of 2 is spent): nothing spent, None.
        let calls = budgets.calls.borrow().len();
        assert!(engine.admit_heard(&budgets, "api", Some("/")).unwrap().is_none());
        assert_eq!(budgets.calls.borrow()[calls..], ["check api r 1".to_owned()]);
    }

    #[test]
    fn a_refusal_gives_back_what_the_groups_before_it_took() {
        let (engine, budgets) = (engine(&[("requests", "r"), ("tokens", "t")]), Fake::new(3));
        let estimate = [("tokens".to_owned(), 4)];
        match engine.admit(&budgets, ("h", "api", None), &estimate, true).unwrap() {
            Admission::Refused(decision) => assert!(!decision.outcome.allowed),
            other => panic!("{other:?}"),
        }
        assert_eq!(*budgets.calls.borrow(), ["check h r 1", "check h t 4", "give h r 1"]);
    }

    #[test]
    fn routed_group_spends_first_and_a_declared_one_is_not_routed() {
        let mut budgets = Fake::new(10);
        budgets.routed = Some("search".into());
        let engine = engine(&[("requests", "r")]);
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/s")), &[], true).unwrap());
        assert_eq!(ticket.plan.steps, [(Arc::from("search"), 1, false), (Arc::from("r"), 1, true)]);
        budgets.routed = Some("r".into());
        let ticket = admitted(engine.admit(&budgets, ("h", "api", Some("/s")), &[], true).unwrap());
        assert_eq!(ticket.plan.steps, [(Arc::from("r"), 1, true)]);
    }

    #[test]
    fn a_call_near_a_filling_windows_end_is_held_and_given_back() {
        let (engine, budgets) = (engine(&[("requests", "r")]), Fake::new(3));
        // The first answer sets the latency: longer than the 0.5 s left of the window.
        let ticket = admitted(engine.admit(&budgets, ("h", "api", None), &[], true).unwrap());
        engine.state.lock().host("api").latency = Some(2.0);
        engine.settle(&budgets, ("h", "api"), &ticket, &Said::new(), (200, 0.0)).unwrap();
        engine.state.lock().host("api").latency = Some(2.0);
        match engine.admit(&budgets, ("h", "api", None), &[], true).unwrap() {
            Admission::Held(hold) => assert!((hold - 0.501).abs() < 1e-9),
            other => panic!("{other:?}"),
        }
        // Unguarded, it goes.
        admitted(engine.admit(&budgets, ("h", "api", None), &[], false).unwrap());
    }

    #[test]
    fn an_ietf_budget_shown_to_refill_is_capped_until_it_is_full_never_sooner() {
        let (engine, budgets) = (engine(&[("api", "g")]), Fake::new(10));
        let policy = ("ratelimit-policy", "\"api\";q=10;w=60");
        let word = |now: f64, fields: &str| {
            let ticket = admitted(engine.admit(&budgets, ("h", "api", None), &[], false).unwrap());
            engine
                .settle(&budgets, ("h", "api"), &ticket, &said(&[policy, ("ratelimit", fields)]), (200, now))
                .unwrap();
            // The reset to the millisecond: the call's age, a few microseconds, comes off a window's end.
            let cap = budgets.calls.borrow().last().cloned().unwrap();
            let (head, reset) = cap.rsplit_once(' ').unwrap();
            format!("{head} {}", (reset.parse::<f64>().unwrap() * 1000.0).round() / 1000.0)
        };
        // A GCRA of 10 a minute: its t is when the next unit comes, 6 s apart.
        assert_eq!(word(1000.0, "\"api\";r=9;t=6"), "cap h g 9 6");
        // A reset inside the window said: one such word.
        assert_eq!(word(1008.0, "\"api\";r=9;t=6"), "cap h g 9 6");
        // The second: from now on a word is the bucket's, full once the 2 it lacks have refilled (12 s), and
        // the window the call was admitted in lasts a minute: its calls on their way spend the bucket too.
        assert_eq!(word(1009.0, "\"api\";r=8;t=5"), "cap h g 8 60");
        // A word that comes late says it is full sooner: the key's window still ends at 1069.
        assert_eq!(word(1010.0, "\"api\";r=9;t=6"), "cap h g 9 59");
        // A call after that end, the key busy: its window opened then, and lasts until 1129.
        assert_eq!(word(1070.0, "\"api\";r=9;t=6"), "cap h g 9 59");
        // Idle for longer than a window: the window opened at the call.
        assert_eq!(word(1300.0, "\"api\";r=9;t=6"), "cap h g 9 60");
    }

    #[test]
    fn a_window_seen_to_outlast_its_resets_ends_a_second_after_them() {
        let (engine, budgets) = (engine(&[("requests", "g")]), Fake::new(10));
        let word = |now: f64, left: &str, reset: &str| {
            let ticket = admitted(engine.admit(&budgets, ("h", "api", None), &[], false).unwrap());
            let fields = [("x-ratelimit-limit", "10"), ("x-ratelimit-remaining", left), ("x-ratelimit-reset", reset)];
            engine.settle(&budgets, ("h", "api"), &ticket, &said(&fields), (200, now)).unwrap();
            budgets.calls.borrow().last().cloned().unwrap()
        };
        // int(end - now) of a window that ends at 1004.9.
        assert_eq!(word(1000.5, "5", "4"), "cap h g 5 4");
        // Sent after 1004.5, the end it said, and counted in that window: its resets come late.
        assert_eq!(word(1004.6, "0", "0"), "cap h g 0 1");
        assert_eq!(word(1005.0, "9", "59"), "cap h g 9 60");
    }

    #[test]
    fn a_429_is_counted_and_waits_what_the_server_says() {
        let (engine, budgets) = (engine(&[("requests", "r"), ("tokens", "bad")]), Fake::new(10));
        let ticket = admitted(engine.admit(&budgets, ("h", "api", None), &[], true).unwrap());
        let settled =
            engine.settle(&budgets, ("h", "api"), &ticket, &said(&[("retry-after", "7")]), (429, 0.0)).unwrap();
        assert_eq!(settled.retry, Some(7.0));
        // The wait is held in a group of its own, whatever the algorithms of the declared groups.
        let unmade: Vec<_> = settled.unmade.iter().map(|u| (u.budget.as_str(), u.reset_after)).collect();
        assert_eq!(unmade, [(HELD_BUDGET, 7.0)]);
        // Without auto-groups, every budget of the call waits, and a group that takes no word is told of.
        let declared_only = Engine::new(Settings { auto_groups: false, ..engine.settings.clone() });
        let ticket = admitted(declared_only.admit(&budgets, ("h", "api", None), &[], true).unwrap());
        let settled =
            declared_only.settle(&budgets, ("h", "api"), &ticket, &said(&[("retry-after", "7")]), (429, 0.0)).unwrap();
        assert!(settled.unmade.is_empty());
        assert!(budgets.calls.borrow().contains(&"cap h r 0 7".to_owned()));
        assert_eq!(settled.not_applied.len(), 1);
        let settled = engine.settle(&budgets, ("h", "api"), &ticket, &Said::new(), (429, 0.0)).unwrap();
        assert_eq!(settled.retry, Some(NO_WORD_WAIT));
        assert_eq!(engine.stats()[0].1.throttled, 2);
        engine.count("h", Counts { retries: 1, waited: 0.5, ..Counts::default() });
        assert_eq!((engine.stats()[0].1.retries, engine.stats()[0].1.waited), (1, 0.5));
    }
}
