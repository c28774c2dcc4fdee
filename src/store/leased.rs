//! Lease mode as a store: a process takes a lease of part of a key's budget from Redis in one script
//! call (`lease:` in decide.lua), decides against it here at in-memory speed, asks for more before it
//! runs out, and gives back what it did not use once the key goes idle.
//!
//! Why it never admits more than the limit: the script grants units exactly as exact mode would admit
//! them, at the instant it grants them, and each unit is spent here only while the algorithm would still
//! count it where it was granted: a fixed window's units within that window, a sliding window's within its
//! current window (where the previous window only weighs less as time passes), and GCRA's `i`-th unit no
//! later than one interval before the arrival time it was given (as memory would admit it: so any span of
//! time holds no more units than memory's bound). The instants come back relative to the script's clock and
//! are read from the moment the call was sent, which is no later than the script ran: a unit lapses here
//! no later than there. A give-back returns only units nobody was granted after (the script checks that
//! the state is still the one the lease wrote).
//!
//! What else a group does (waits, a peek, permits, a `fallback` policy, the sliding log and leaky bucket,
//! whose units cannot be spent later than they are counted) goes through exact mode, one call per
//! decision, on the same states in Redis.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::exact::{Call, RedisDecider};
use super::permits::{PermitLease, Permits};
use super::standing::{self, Share};
use super::{Answer, Exact, Later, StateStore, SyncReport};
use crate::algorithm::{Limit, Report};
use crate::backend::client::Failure;
use crate::backend::health::HealthReport;
use crate::backend::script::{self, LeaseReply, LeaseState};
use crate::backend::standing::{parse_pool, pool_arguments, pool_key, remote_limits};
use crate::backend::Spec;
use crate::config::Policy;
use crate::error::{Error, Result};
use crate::limiter::{
    HeldKey, Kept, Limiter, OwnedTarget, Receipt, Refusal, RemoteKey, Request, Routed, Take, Target, Verdict,
};
use crate::rate::Rate;
use crate::rules::Route;

/// The most units one lease asks for.
const MOST_UNITS: u64 = 1 << 24;

/// Lease mode: exact mode's decider, and the leases this process holds.
#[derive(Debug)]
pub struct Leased {
    exact: Exact,
    book: Arc<Book>,
}

impl Leased {
    /// Opens exact mode's client and starts the sweeper, which gives back the leases of keys idle for a
    /// span (held weakly: it ends with the store).
    ///
    /// # Errors
    /// As [`Exact::open`].
    pub fn open(limiter: Arc<Limiter>, spec: &Spec, span: Duration) -> Result<Self> {
        let max_keys = limiter.max_keys();
        let exact = Exact::open(limiter, spec)?;
        let span_ns = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX).max(1);
        // A shard's table holds twice its share of `max_keys` (keys do not spread evenly).
        let most = max_keys / crate::state_map::StateMap::<()>::shard_count(max_keys) * 2;
        let share = spec.standing.map(|settings| Share::new(settings, span_ns, most));
        if share.is_some() {
            exact.limiter().each_kept(|kept| {
                Leases::made(kept);
            });
        }
        let book = Arc::new(Book::new(span_ns, share));
        start_sweeper(&exact, &book, span);
        Ok(Self { exact, book })
    }

    fn decider(&self) -> &Arc<RedisDecider> {
        &self.exact.decider
    }

    /// Decides from a lease this process holds, without I/O (under the peer's lock, nothing allocated);
    /// else what to ask Redis for. Inlined: its answer is then made where the caller keeps it, not moved
    /// (a decision is 150 bytes).
    #[inline]
    fn decide_held(&self, peer: &str, target: Target<'_>, request: Request) -> Result<Held> {
        if !leasable_request(request) {
            return Ok(Held::Elsewhere);
        }
        let (mut missed, mut fetches) = (None, None);
        let routed = self.limiter().decide_held(peer, target, request, |key, kept| {
            let parts = Parts::of(key.policy, key.limits, request.take)?;
            match self.book.decide(kept, (peer, key), (request, parts), &mut fetches) {
                Ok((verdict, reports)) => Some((verdict, Some(reports))),
                Err(miss) => {
                    missed = Some(miss);
                    None
                }
            }
        })?;
        if let Some(fetches) = fetches {
            self.fetch(peer, fetches);
        }
        Ok(match (routed, missed) {
            (Routed::Free(decision), _) => Held::Decided(decision.into()),
            (Routed::Limited(_), None) => Held::Elsewhere,
            (Routed::Limited(key), Some(Missed::Units(most))) => Held::Miss(key, most),
            (Routed::Limited(key), Some(Missed::Permits(most))) => Held::MissPermits(key, most),
            (Routed::Limited(key), Some(Missed::Both)) => Held::MissBoth(key),
        })
    }

    /// The call asking Redis for a lease of at least the request's cost and at most `most` units.
    fn lease_call(&self, peer: &str, target: Target<'_>, request: Request, key: RemoteKey, most: u64) -> Call {
        let (decider, limiter) = (self.decider(), self.limiter());
        let keys = decider.keys(peer, &key);
        let args = script::lease_arguments(&key, (request.cost, most), decider.caller(limiter));
        let health = decider.health().seen();
        Call { peer: peer.to_owned(), target: OwnedTarget::from(target), request, key, keys, args, health }
    }

    /// The script's arguments asking for a lease of at least `least` and at most `most` of `key`'s
    /// permits, and the lease's members' prefix.
    fn permit_lease(&self, key: &RemoteKey, (least, most): (u64, u64)) -> (Vec<String>, String) {
        let (decider, limiter) = (self.decider(), self.limiter());
        let n = decider.leases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // "~", not ":": exact mode's release of this node's permits ("<node>:") never takes a lease's.
        let prefix = format!("{}~{n}", decider.node);
        let ttl_ms = u64::try_from(decider.settings.lease_ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let leases = script::Leases { prefix: &prefix, ttl_ms };
        (script::permit_lease_arguments(key, (least, most), leases, decider.caller(limiter)), prefix)
    }

    /// The call asking Redis for a lease of at least the request's cost and at most `most` permits, and
    /// the lease's members' prefix.
    fn permit_call(
        &self,
        peer: &str,
        target: Target<'_>,
        request: Request,
        key: RemoteKey,
        most: u64,
    ) -> (Call, String) {
        let decider = self.decider();
        let (args, prefix) = self.permit_lease(&key, (request.cost, most));
        let keys = decider.keys(peer, &key);
        let health = decider.health().seen();
        let call = Call { peer: peer.to_owned(), target: OwnedTarget::from(target), request, key, keys, args, health };
        (call, prefix)
    }

    /// Sends the give-backs a changed limit left for `key` (before a lease or a decision moves the state:
    /// lost, the units stay counted: never more admitted); whether there were any.
    fn send_returns(&self, peer: &str, key: &RemoteKey) -> bool {
        let returns = Book::returning(self.limiter(), peer, key.id);
        let decider = self.decider();
        for (old, units, states) in &returns {
            let args = script::return_arguments(old, *units, states, decider.caller(self.limiter()));
            let _ = decider.client.run(&decider.keys(peer, key), &args);
        }
        !returns.is_empty()
    }

    /// What to ask Redis for after `held`: a lease's call and how its reply lands (the give-backs a changed
    /// limit left sent first, on the same connection), or exact mode's decision: a key with no demand known
    /// here asks for its request alone, which exact mode's compact call does for half the server's time; a
    /// request of rates and permits with one of them missing is decided in exact mode while the missing
    /// lease is fetched.
    fn ask(&self, peer: &str, target: Target<'_>, request: Request, held: Held) -> Asked {
        match held {
            Held::Decided(answer) => Asked::Decided(answer),
            Held::Elsewhere => Asked::Exact(false),
            Held::MissPermits(key, most) => {
                let (call, prefix) = self.permit_call(peer, target, request, key, most);
                Asked::Lease(call, Landing::Permits(prefix, self.limiter().now_ns()))
            }
            Held::MissBoth(key) => {
                self.send_returns(peer, &key);
                Asked::Exact(true)
            }
            Held::Miss(key, most) => {
                let returned = self.send_returns(peer, &key);
                if most <= request.cost && !returned {
                    return Asked::Exact(true);
                }
                let call = self.lease_call(peer, target, request, key, most);
                Asked::Lease(call, Landing::Units(self.limiter().now_ns(), self.book.caps_now()))
            }
        }
    }

    /// Counts an exact-mode decision's units as this process's demand for the key (its next lease's size).
    fn note(&self, peer: &str, target: Target<'_>, answer: &Answer, cost: u64) {
        note_spent(self.limiter(), (peer, target), answer, cost);
    }

    /// Asks for leases in the background: units (the key's lease is running low, or a request of both found
    /// none) and permits (a request of both found none free).
    fn fetch(&self, peer: &str, fetches: Fetches) {
        let Fetches { key, units, permits } = fetches;
        let (decider, limiter) = (self.decider(), self.limiter());
        let keys = decider.keys(peer, &key);
        if let Some(most) = units {
            let args = script::lease_arguments(&key, (1, most), decider.caller(limiter));
            let (anchor, asked) = (limiter.now_ns(), self.book.caps_now());
            self.spawn_fetch((peer, &key, false), (keys.clone(), args), move |book, limiter, (peer, key), lease| {
                book.grant(limiter, (peer, key), lease, (anchor, 0, asked), limiter.now_ns());
            });
        }
        if let Some(most) = permits {
            let (args, prefix) = self.permit_lease(&key, (1, most));
            let (anchor, ttl) = (limiter.now_ns(), decider.settings.lease_ttl);
            self.spawn_fetch((peer, &key, true), (keys, args), move |book, limiter, (peer, key), lease| {
                let now = limiter.now_ns();
                let expires = anchor.saturating_add(u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX));
                let held = PermitLease { prefix, granted: lease.granted, in_flight: 0, expires, last_used: now };
                book.grant_permits(limiter, (peer, key), held, lease.verdict.allowed);
            });
        }
    }

    /// Sends a lease's call (of units, or of `permits`) in the background; `land` puts its reply in the
    /// book (a failure lets another be sent).
    fn spawn_fetch(
        &self,
        (peer, key, permits): (&str, &RemoteKey, bool),
        (keys, args): (Vec<String>, Vec<String>),
        land: impl FnOnce(&Book, &Limiter, (&str, &RemoteKey), &LeaseReply) + Send + 'static,
    ) {
        let decider = self.decider();
        let (book, limiter, decider_arc) = (Arc::clone(&self.book), Arc::clone(self.limiter()), Arc::clone(decider));
        let (peer, key) = (peer.to_owned(), key.clone());
        let (seen, round_trip) = (decider.health().seen(), decider.health().round_trip());
        decider.client.spawn(keys, args, move |reply| {
            round_trip.done();
            let parsed = reply.and_then(|r| script::parse_lease(&key, &r).map_err(|e| Failure(e.to_string())));
            if let Ok(lease) = parsed {
                decider_arc.health().answered(seen);
                land(&book, &limiter, (&peer, &key), &lease);
            } else {
                decider_arc.health().count_error();
                book.fetched(&limiter, &peer, &key, permits);
            }
        });
    }
}

/// Lands a lease's reply: `keep` puts what it granted in the book and says what to report, and the
/// request's decision is counted; a failure decides as `on_error` says, as exact mode's would.
fn landed(
    decider: &RedisDecider,
    limiter: &Limiter,
    call: &Call,
    reply: std::result::Result<Vec<String>, Failure>,
    keep: impl FnOnce(&LeaseReply, u64) -> Vec<Report>,
) -> Result<Answer> {
    let parsed = reply.and_then(|r| script::parse_lease(&call.key, &r).map_err(|e| Failure(e.to_string())));
    let lease = match parsed {
        Ok(lease) => lease,
        Err(failure) => return decider.finish(limiter, call, Err(failure)),
    };
    let recovered = decider.health().answered(call.health);
    let reports = keep(&lease, limiter.now_ns());
    let decision = limiter.record_remote(&call.peer, &call.key, lease.verdict, Some(reports), call.request);
    let notice =
        recovered.then(|| "ratekeeper: the Redis backend answers again; decisions are made in Redis".to_owned());
    Ok(Answer { decision, notice })
}

/// Lands a lease of units: held from `anchor`, the request's own taken (`asked`: the count of caps
/// when it was asked for).
fn land(
    book: &Book,
    decider: &RedisDecider,
    limiter: &Limiter,
    call: &Call,
    (anchor, asked): (u64, u64),
    reply: std::result::Result<Vec<String>, Failure>,
) -> Result<Answer> {
    landed(decider, limiter, call, reply, |lease, now| {
        let spent = if lease.verdict.allowed { call.request.cost } else { 0 };
        let held = book.grant(limiter, (&call.peer, &call.key), lease, (anchor, spent, asked), now);
        with_held(&lease.reports, held)
    })
}

/// Lands a lease of permits: held here, the request's taken; a refusal quiets the key for a span.
fn land_permits(
    book: &Book,
    decider: &RedisDecider,
    limiter: &Limiter,
    call: &Call,
    (prefix, anchor): (String, u64),
    reply: std::result::Result<Vec<String>, Failure>,
) -> Result<Answer> {
    let ttl = u64::try_from(decider.settings.lease_ttl.as_nanos()).unwrap_or(u64::MAX);
    landed(decider, limiter, call, reply, |lease, now| {
        let held = PermitLease {
            prefix,
            granted: lease.granted,
            in_flight: if lease.verdict.allowed { call.request.cost } else { 0 },
            expires: anchor.saturating_add(ttl),
            last_used: now,
        };
        book.grant_permits(limiter, (&call.peer, &call.key), held, lease.verdict.allowed);
        lease.reports.clone()
    })
}

/// After what a lease held: decided, or exact mode decides (true: a leasable key's first request, whose
/// units count as its demand), or a lease is asked for.
enum Asked {
    Decided(Answer),
    Exact(bool),
    Lease(Call, Landing),
}

/// How a lease's reply lands: units (asked for at this instant, with this count of caps), or permits
/// (named by this prefix).
enum Landing {
    Units(u64, u64),
    Permits(String, u64),
}

impl Landing {
    fn land(
        self,
        book: &Book,
        decider: &RedisDecider,
        limiter: &Limiter,
        call: &Call,
        reply: std::result::Result<Vec<String>, Failure>,
    ) -> Result<Answer> {
        match self {
            Self::Units(anchor, asked) => land(book, decider, limiter, call, (anchor, asked), reply),
            Self::Permits(prefix, anchor) => land_permits(book, decider, limiter, call, (prefix, anchor), reply),
        }
    }
}

/// Counts the units of an admission exact mode made as this process's demand for its key.
fn note_spent(limiter: &Limiter, (peer, target): (&str, Target<'_>), answer: &Answer, cost: u64) {
    if !answer.decision.outcome.allowed {
        return;
    }
    if let Ok(Routed::Limited(key)) = limiter.route_remote(peer, target) {
        Book::note_spent(limiter, peer, &key, cost);
    }
}

enum Held {
    /// Decided here (from a lease, or nothing limits the request).
    Decided(Answer),
    /// The key's lease has nothing left: ask for one of at most this many units.
    Miss(RemoteKey, u64),
    /// The key's permit leases have no permit free: ask for a lease of at most this many permits.
    MissPermits(RemoteKey, u64),
    /// A request of rates and permits found one of them missing: exact mode decides it (the missing lease
    /// is on its way).
    MissBoth(RemoteKey),
    /// Not a decision a lease makes: exact mode decides.
    Elsewhere,
}

/// A decision that a lease can make: now, counted.
const fn leasable_request(request: Request) -> bool {
    request.max_wait_ns == 0 && !request.peek
}

/// How a limit's leased units lapse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LapseKind {
    /// At the arrival time each was given: one interval apart (ns, rounded up).
    Gcra { interval_ns: u64 },
    /// At the end of the window the state was written in.
    Window,
    /// At the end of the current window: the state's instant less one window.
    Sliding { window_ns: u64 },
}

fn lapse_kind(limit: &Limit) -> Option<LapseKind> {
    match limit.script_params()? {
        ("gcra", [_, interval_ns, interval_rem, _, _]) => {
            Some(LapseKind::Gcra { interval_ns: interval_ns + u64::from(interval_rem > 0) })
        }
        ("windows", _) => Some(LapseKind::Window),
        ("sliding_window", [_, window_ns, _, _, _]) => Some(LapseKind::Sliding { window_ns }),
        _ => None,
    }
}

/// A verdict made here, from a lease.
const fn local_verdict(allowed: bool, retry_ns: u64, now: u64) -> Verdict {
    Verdict {
        allowed,
        wait_ns: 0,
        retry_ns: if allowed { 0 } else { retry_ns },
        now,
        written: 0,
        refused_by: if allowed { None } else { Some(Refusal::Rate) },
    }
}

/// What Redis reported, with the units this process holds added to what is left.
fn with_held(reports: &[Report], held: u64) -> Vec<Report> {
    reports.iter().map(|r| Report { remaining: r.remaining.saturating_add(held).min(r.limit), ..*r }).collect()
}

/// One lease's units: `next..=last`, unit `i` lapsing `lapse(i)` after `anchor` (the local instant its
/// call was sent).
#[derive(Debug, Clone)]
struct Chunk {
    anchor: u64,
    next: u64,
    last: u64,
    /// Per limit: unit `i` lapses `offset + i * step` ns after the anchor (the earliest limit's rules).
    lapses: Vec<(i128, u64)>,
    /// What a give-back must find in Redis (the states the lease wrote).
    states: Vec<LeaseState>,
}

impl Chunk {
    /// The chunk of `lease`, granted under `limits` (the key's, or with standing shares the part Redis
    /// keeps: its GCRA intervals are longer).
    fn of(limits: &[Limit], lease: &LeaseReply, anchor: u64, spent: u64) -> Self {
        let mut lapses = Vec::with_capacity(limits.len());
        let mut states = Vec::with_capacity(limits.len());
        let granted = i128::from(lease.granted);
        for (index, (limit, &(t, a))) in limits.iter().zip(&lease.states).enumerate() {
            if limit.is_concurrency() {
                // A group of rates and permits: its permits are leased apart.
                continue;
            }
            let t = i128::from(t);
            // The last instant each unit is still counted where it was granted (see the module's head).
            lapses.push(match lapse_kind(limit) {
                // Unit i's arrival time is t - (granted - i) intervals; memory admits a unit no later than
                // one interval before its arrival time.
                Some(LapseKind::Gcra { interval_ns }) => (t - (granted + 1) * i128::from(interval_ns), interval_ns),
                Some(LapseKind::Sliding { window_ns }) => (t - i128::from(window_ns) - 1, 0),
                Some(LapseKind::Window) | None => (t - 1, 0),
            });
            if let Ok(t) = u64::try_from(t) {
                let remainder = if matches!(lapse_kind(limit), Some(LapseKind::Gcra { .. })) { a } else { 0 };
                states.push(LeaseState { index, at: lease.verdict.now.saturating_add(t), remainder });
            }
        }
        Self { anchor, next: spent + 1, last: lease.granted, lapses, states }
    }

    /// A server's word moved the fixed windows of `limits` (the key's, as leased) to end `ends_after` ns
    /// after `now`: their units lapse then.
    fn realign(&mut self, limits: &[Limit], now: u64, ends_after: u64) {
        let last = i128::from(now) + i128::from(ends_after) - 1 - i128::from(self.anchor);
        let rates = limits.iter().filter(|l| !l.is_concurrency());
        for (lapse, limit) in self.lapses.iter_mut().zip(rates) {
            if limit.is_fixed_window() {
                *lapse = (last, 0);
            }
        }
    }

    /// Skips the units lapsed at `now`; the units left.
    fn left(&mut self, now: u64) -> u64 {
        let elapsed = i128::from(now) - i128::from(self.anchor);
        for &(offset, step) in &self.lapses {
            if step == 0 {
                if elapsed > offset {
                    self.next = self.last + 1;
                }
            } else if elapsed > offset + i128::from(self.next) * i128::from(step) {
                // The first unit still live: offset + i * step >= elapsed.
                let first = (elapsed - offset + i128::from(step) - 1) / i128::from(step);
                self.next = self.next.max(u64::try_from(first).unwrap_or(u64::MAX));
            }
        }
        (self.last + 1).saturating_sub(self.next)
    }
}

/// The leases of one key (a group and a peer).
#[derive(Debug)]
struct Lease {
    peer: Box<str>,
    /// The limiter's hash of the peer (where the lease sits in its shard's table).
    peer_hash: u64,
    /// The key as its last lease was granted (limits included: a change of them drops the units).
    key: RemoteKey,
    chunks: VecDeque<Chunk>,
    /// No lease is asked for before this instant (Redis refused one; a local refusal lasts until then).
    quiet_until: u64,
    /// When Redis said the refused request would be admitted.
    retry_at: u64,
    /// A prefetch is on its way.
    fetching: bool,
    /// Units spent since `since`: the demand the next lease's size follows.
    spent: u64,
    since: u64,
    last_used: u64,
    /// Units of limits the key no longer has, to give back before its next lease (taken out once).
    returning: Vec<Return>,
    /// What Redis reported at the last grant, and when.
    reports: Vec<Report>,
    reported_at: u64,
    /// The units the last lease granted: a prefetch goes out when less than half as many are left.
    last_granted: u64,
    /// How long the last lease took to land.
    round_trip_ns: u64,
    /// The key's leases of concurrency permits.
    permits: Permits,
    /// The server's words this process took for the key (`Leased::cap`).
    caps: Caps,
}

/// A key's server's words taken here (`Leased::cap`): a lease asked for before the last one lands with
/// units Redis granted before it, of which only `room` more may be kept (the rest dropped, counted as used).
#[derive(Debug, Default, Clone, Copy)]
struct Caps {
    /// Caps on their way to Redis (the lease is kept until they land).
    pending: u32,
    /// The count of `Book::caps` when the last one was applied.
    count: u64,
    /// When one was last taken (the lease is kept a span after it, for the leases on their way).
    at: u64,
    room: u64,
}

impl Lease {
    fn new(peer: &str, peer_hash: u64, key: &RemoteKey, now: u64) -> Self {
        Self {
            peer: peer.into(),
            peer_hash,
            key: key.clone(),
            chunks: VecDeque::new(),
            quiet_until: 0,
            retry_at: 0,
            fetching: false,
            spent: 0,
            since: now,
            last_used: now,
            returning: Vec::new(),
            reports: Vec::new(),
            reported_at: now,
            last_granted: 0,
            round_trip_ns: 0,
            permits: Permits::default(),
            caps: Caps::default(),
        }
    }

    /// Units held at `now`, lapsed ones dropped.
    fn held(&mut self, now: u64) -> u64 {
        let (mut held, mut spent) = (0, false);
        for chunk in &mut self.chunks {
            let left = chunk.left(now);
            held += left;
            spent |= left == 0;
        }
        // Most calls drop nothing: the walk above, without retain's moves.
        if spent {
            self.chunks.retain(|chunk| chunk.next <= chunk.last);
        }
        held
    }

    /// Takes `cost` units from the first chunk that has them (lapsed units dropped first: `held`).
    fn take(&mut self, cost: u64, now: u64) -> bool {
        let Some(chunk) = self.chunks.iter_mut().find(|c| c.last + 1 - c.next >= cost) else { return false };
        chunk.next += cost;
        self.spent += cost;
        self.last_used = now;
        true
    }

    /// The size of the next lease: twice what the key spent here over a span, at the rate it spent since
    /// the last lease landed, measured over a span at least (at least `cost`). So a lease at most doubles
    /// what was spent since the last: a burst of two requests does not take a key's whole budget, and a
    /// busy key grows its leases by doubling, a round trip each.
    ///
    /// A GCRA unit lapses one interval after the one before it from where the key's arrival time was, so
    /// the units of a lease from a full bucket lapse while its reply is on its way: the lease asks for
    /// twice those more, or a key busier than its rate would never hold a unit.
    fn size(&self, cost: u64, span_ns: u64, now: u64) -> u64 {
        let elapsed = now.saturating_sub(self.since).max(span_ns);
        let wanted = u128::from(self.spent) * u128::from(span_ns) * 2 / u128::from(elapsed);
        let in_transit = self
            .key
            .limits
            .iter()
            .filter_map(|l| match lapse_kind(l) {
                Some(LapseKind::Gcra { interval_ns }) => {
                    Some(self.round_trip_ns.saturating_mul(2) / interval_ns.max(1))
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        u64::try_from(wanted).unwrap_or(MOST_UNITS).saturating_add(in_transit).clamp(cost.max(1), MOST_UNITS)
    }

    /// Reports for a decision made here, a limit each: a rate limit's from Redis's at the last lease, moved
    /// on by the time since, with the units held added; a concurrency limit's from the permits free here.
    fn reports_now(&self, limits: &[Limit], held: u64, now: u64) -> Vec<Report> {
        let elapsed = now.saturating_sub(self.reported_at);
        let free = self.permits.free();
        limits
            .iter()
            .enumerate()
            .map(|(i, limit)| {
                let unknown = Report {
                    limit: u64::from(limit.burst),
                    remaining: if limit.is_concurrency() { free } else { held },
                    reset_after_ns: 0,
                    window_ns: None,
                    next_ns: 0,
                };
                match self.reports.get(i) {
                    Some(r) if !limit.is_concurrency() => Report {
                        remaining: r.remaining.saturating_add(held).min(r.limit),
                        reset_after_ns: r.reset_after_ns.saturating_sub(elapsed),
                        next_ns: if held > 0 { 0 } else { r.next_ns.saturating_sub(elapsed) },
                        ..*r
                    },
                    _ => unknown,
                }
            })
            .collect()
    }

    /// Whether a chunk holds `cost` units (lapsed units dropped first: `held`).
    fn can_take(&self, cost: u64) -> bool {
        self.chunks.iter().any(|c| c.last + 1 - c.next >= cost)
    }

    /// The key's limits are no longer the ones its leases were granted under: the units go back before the
    /// state is moved to the new limits (a state moved first counts them as used: never more admitted), and
    /// no permit lease takes another request (what requests hold stays theirs until released).
    fn limits_changed(&mut self, now: u64) {
        for (units, states) in self.chunks_returns(now) {
            self.returning.push((self.key.clone(), units, states));
        }
        self.quiet_until = 0;
        self.permits.retire();
    }

    /// Keeps at most `most` of the units held (the first chunks' first), dropping the rest: counted as used
    /// in Redis, never spent. The units kept.
    fn keep_at_most(&mut self, most: u64, now: u64) -> u64 {
        let mut kept = 0;
        for chunk in &mut self.chunks {
            let keep = chunk.left(now).min(most - kept);
            chunk.last = (chunk.next + keep).saturating_sub(1);
            if keep == 0 {
                chunk.next = chunk.last + 1;
            }
            kept += keep;
        }
        self.chunks.retain(|chunk| chunk.next <= chunk.last);
        kept
    }

    /// What to give back: the units held, per chunk.
    fn chunks_returns(&mut self, now: u64) -> Vec<(u64, Vec<LeaseState>)> {
        let mut returns = Vec::new();
        for chunk in &mut self.chunks {
            let left = chunk.left(now);
            if left > 0 && !chunk.states.is_empty() {
                returns.push((left, chunk.states.clone()));
            }
        }
        self.chunks.clear();
        returns
    }
}

/// Units to give back: the key they were leased under, how many, and the states the lease wrote.
type Return = (RemoteKey, u64, Vec<LeaseState>);

/// What the leases here cannot decide: ask Redis for a lease of at most this many units or permits (the
/// request decided by it), or, for a request of both with one missing, let exact mode decide it while the
/// missing lease is fetched.
enum Missed {
    Units(u64),
    Permits(u64),
    Both,
}

/// A decision from the leases here (the verdict and reports), or what they miss.
type Decided = std::result::Result<(Verdict, Vec<Report>), Missed>;

/// Leases to ask for in the background, for this key: of units (its lease ran low, or a request of both
/// found none) and of permits (a request of both found none free), at most this many.
struct Fetches {
    key: RemoteKey,
    units: Option<u64>,
    permits: Option<u64>,
}

/// What of a group a lease decides for a request: its rate limits (the windows and GCRA), its concurrency
/// limits (permits), or both at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parts {
    Rates,
    Permits,
    Both,
}

impl Parts {
    /// What a lease decides of a request taking `take` in a group of `limits` under `policy`; `None`: exact
    /// mode decides (another policy, a limit no lease holds, or nothing leased to take).
    fn of(policy: Policy, limits: &[Limit], take: Take) -> Option<Self> {
        if policy != Policy::All {
            return None;
        }
        let (mut rates, mut permits) = (false, false);
        for limit in limits {
            if limit.is_concurrency() {
                permits = true;
            } else if lapse_kind(limit).is_some() {
                rates = true;
            } else {
                return None;
            }
        }
        match (rates && take != Take::Permits, permits && take != Take::Rates) {
            (true, true) => Some(Self::Both),
            (true, false) => Some(Self::Rates),
            (false, true) => Some(Self::Permits),
            (false, false) => None,
        }
    }
}

/// The bits of a group's concurrency limits (what an admission holding permits wrote).
fn permit_bits(limits: &[Limit]) -> u64 {
    limits.iter().enumerate().filter(|(_, l)| l.is_concurrency()).fold(0, |bits, (i, _)| bits | 1 << i)
}

/// The leases of one limiter shard's keys, kept in the shard (`ShardData::kept`): found under the lock
/// a decision takes anyway, by the hash it made of the peer.
#[derive(Debug, Default)]
struct Leases {
    table: hashbrown::HashTable<Lease>,
    /// The keys' states on this process's standing share.
    standing: standing::Table,
}

/// Where a key's lease (and its standing share's states) sits in its shard's table: the peer's hash, with
/// the group's id mixed in.
pub(super) fn slot(peer_hash: u64, id: u32) -> u64 {
    peer_hash ^ u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Leases {
    /// The shard's leases, if it has any.
    fn of(kept: &mut Kept) -> Option<&mut Self> {
        kept.as_mut()?.downcast_mut()
    }

    /// The shard's leases, an empty table put in it first when it has none (or another store's data).
    fn made(kept: &mut Kept) -> &mut Self {
        if !kept.as_ref().is_some_and(|k| k.is::<Self>()) {
            *kept = Some(Box::new(Self::default()));
        }
        // Just made when it was not one.
        kept.as_mut().and_then(|k| k.downcast_mut()).unwrap_or_else(|| unreachable!("a lease table"))
    }

    fn get(&mut self, peer: &str, peer_hash: u64, id: u32) -> Option<&mut Lease> {
        find_lease(&mut self.table, peer, peer_hash, id)
    }

    /// The key's lease, made from `key` when it has none.
    fn entry(&mut self, peer: &str, peer_hash: u64, key: &RemoteKey, now: u64) -> &mut Lease {
        let id = key.id;
        self.table
            .entry(slot(peer_hash, id), |l| l.key.id == id && *l.peer == *peer, |l| slot(l.peer_hash, l.key.id))
            .or_insert_with(|| Lease::new(peer, peer_hash, key, now))
            .into_mut()
    }
}

/// `peer`'s lease of group `id` in a shard's table.
fn find_lease<'t>(
    table: &'t mut hashbrown::HashTable<Lease>,
    peer: &str,
    peer_hash: u64,
    id: u32,
) -> Option<&'t mut Lease> {
    table.find_mut(slot(peer_hash, id), |l| l.key.id == id && *l.peer == *peer)
}

/// How leases are found and given back: in the limiter's shards (`Leases`), with what lands from Redis
/// waited for here.
#[derive(Debug)]
struct Book {
    span_ns: u64,
    /// Notified when a prefetch lands (or fails): a request that found its key's lease empty while one
    /// was on its way waits for it rather than asking for another. Taken after a shard's lock, never
    /// before it (see `wait_prefetch`).
    waiting: Mutex<()>,
    landed: Condvar,
    /// Server's words this process took (`Leased::cap`), counted: a lease is asked for with the count then,
    /// so that one asked for before its key's last cap is told apart when it lands.
    caps: AtomicU64,
    /// This process's standing share, with standing shares set.
    share: Option<Share>,
}

impl Book {
    fn new(span_ns: u64, share: Option<Share>) -> Self {
        Self { span_ns, waiting: Mutex::new(()), landed: Condvar::new(), caps: AtomicU64::new(0), share }
    }

    /// The limits Redis leases `key`'s units under: with standing shares, a split group's remote part.
    fn leased_limits<'k>(&self, key: &'k RemoteKey) -> std::borrow::Cow<'k, [Limit]> {
        remote_limits(self.share.as_ref().map(|s| s.settings), &key.limits, key.policy)
    }

    /// A request of the rates alone decided on the standing share: admitted, or `None` (Redis decides).
    fn on_share(
        &self,
        standing: &mut standing::Table,
        key: HeldKey<'_>,
        request: Request,
        parts: Parts,
    ) -> Option<(Verdict, Vec<Report>)> {
        if parts != Parts::Rates {
            return None;
        }
        let reports = self.share.as_ref()?.decide(standing, key, request)?;
        Some((local_verdict(true, 0, key.now), reports))
    }

    /// Wakes the requests waiting for a prefetch (after the shard's lock is let go).
    fn notify_landed(&self) {
        let _waiting = self.waiting.lock();
        self.landed.notify_all();
    }

    /// Waits at most `timeout` for the fetch of units (and with `permits`, of permits) of `peer`'s key `id`
    /// to land; false when none is on its way.
    fn wait_prefetch(&self, limiter: &Limiter, (peer, id): (&str, u32), permits: bool, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut waited = false;
        loop {
            // The waiting lock is taken before the shard's is let go: a landing, which clears `fetching`
            // under the shard's lock and then notifies under the waiting lock, cannot slip between.
            let guard = limiter.with_kept(peer, |kept, hash| {
                let lease = Leases::of(kept).and_then(|l| l.get(peer, hash, id));
                let fetching = lease.is_some_and(|l| l.fetching || (permits && l.permits.fetching));
                fetching.then(|| self.waiting.lock())
            });
            let Some(mut guard) = guard else { return waited };
            waited = true;
            if self.landed.wait_until(&mut guard, deadline).timed_out() {
                return true;
            }
        }
    }

    /// Decides the request for `key` from what `kept` (the peer's shard's) holds, taking `parts` of the
    /// group: the verdict and reports, or what to ask Redis for; `fetches` gets the leases to fetch in the
    /// background (marked on their way). An out-parameter: the common answer, a decision with nothing to
    /// fetch, then moves no empty key around.
    fn decide(
        &self,
        kept: &mut Kept,
        (peer, key): (&str, HeldKey<'_>),
        (request, parts): (Request, Parts),
        fetches: &mut Option<Fetches>,
    ) -> Decided {
        let (cost, now) = (request.cost, key.now);
        let missed = match parts {
            Parts::Rates => Missed::Units(cost.max(1)),
            Parts::Permits => Missed::Permits(cost),
            Parts::Both => Missed::Both,
        };
        // With standing shares every shard's table was made when the store opened (`Leased::open`).
        let Some(Leases { table, standing }) = Leases::of(kept) else { return Err(missed) };
        let Some(lease) = find_lease(table, peer, key.peer_hash, key.id) else {
            return self.on_share(standing, key, request, parts).ok_or(missed);
        };
        if lease.key.limits != key.limits {
            lease.limits_changed(now);
            return Err(missed);
        }
        let reports =
            |lease: &Lease, held| if request.report { lease.reports_now(key.limits, held, now) } else { Vec::new() };
        let permits = permit_bits(key.limits);
        let held = if parts == Parts::Permits { 0 } else { lease.held(now) };
        let units_ok = parts == Parts::Permits || lease.can_take(cost);
        let permits_ok = parts == Parts::Rates || lease.permits.has_free(cost, now);
        if units_ok && permits_ok {
            // All or nothing: both checked before either is taken, under the shard's lock.
            let held = if parts == Parts::Permits { 0 } else { held - cost * u64::from(lease.take(cost, now)) };
            let written = if parts == Parts::Rates { 0 } else { u64::from(lease.permits.take(cost, now)) * permits };
            let verdict = Verdict { written, ..local_verdict(true, 0, now) };
            let low = parts != Parts::Permits && held.saturating_mul(2) < lease.last_granted.max(1);
            if low && !lease.fetching && now >= lease.quiet_until {
                lease.fetching = true;
                let units = Some(lease.size(cost, self.span_ns, now));
                *fetches = Some(Fetches { key: lease.key.clone(), units, permits: None });
            }
            return Ok((verdict, reports(lease, held)));
        }
        if !units_ok && permits_ok {
            // The lease is spent: the share decides before Redis is asked (counted as the key's demand).
            if let Some(decided) = self.on_share(standing, key, request, parts) {
                lease.spent += cost;
                lease.last_used = now;
                return Ok(decided);
            }
        }
        if !units_ok && now < lease.quiet_until {
            // Redis refused a lease moments ago.
            let verdict = local_verdict(false, lease.retry_at.saturating_sub(now), now);
            return Ok((verdict, reports(lease, 0)));
        }
        if !permits_ok && now < lease.permits.quiet_until {
            let verdict = Verdict { refused_by: Some(Refusal::Concurrency), ..local_verdict(false, 0, now) };
            return Ok((verdict, reports(lease, held)));
        }
        match parts {
            Parts::Rates => Err(Missed::Units(lease.size(cost, self.span_ns, now))),
            Parts::Permits => Err(Missed::Permits(lease.permits.size(cost))),
            Parts::Both => {
                let units = (!units_ok && !lease.fetching).then(|| {
                    lease.fetching = true;
                    lease.size(cost, self.span_ns, now)
                });
                let permits = (!permits_ok && !lease.permits.fetching).then(|| {
                    lease.permits.fetching = true;
                    lease.permits.size(cost)
                });
                if units.is_some() || permits.is_some() {
                    *fetches = Some(Fetches { key: lease.key.clone(), units, permits });
                }
                Err(Missed::Both)
            }
        }
    }

    /// Lands a lease: its units (`spent` of them taken by the request that asked) are held from `anchor`;
    /// a refusal quiets the key for its retry (at most a span). The units held after it.
    fn grant(
        &self,
        limiter: &Limiter,
        (peer, key): (&str, &RemoteKey),
        lease: &LeaseReply,
        (anchor, spent, asked): (u64, u64, u64),
        now: u64,
    ) -> u64 {
        let held = limiter.with_kept(peer, |kept, hash| {
            let held = Leases::made(kept).entry(peer, hash, key, now);
            if held.key.limits != key.limits {
                held.limits_changed(now);
                let (returning, permits) = (std::mem::take(&mut held.returning), std::mem::take(&mut held.permits));
                *held = Lease { returning, permits, caps: held.caps, ..Lease::new(peer, hash, key, now) };
            }
            held.fetching = false;
            // The demand the next lease follows is measured from here.
            (held.spent, held.since, held.round_trip_ns) = (spent, now, now.saturating_sub(anchor));
            held.reports.clone_from(&lease.reports);
            held.reported_at = now;
            if lease.verdict.allowed && lease.granted > 0 {
                held.key = key.clone();
                let mut chunk = Chunk::of(&self.leased_limits(key), lease, anchor, spent);
                if asked < held.caps.count {
                    // Granted before a server's word capped the key, which did not count them: kept as far
                    // as they fit under it, the rest dropped (counted as used; given back, they would lift
                    // the key above the word).
                    let units = (chunk.last + 1).saturating_sub(chunk.next);
                    let keep = units.min(held.caps.room);
                    held.caps.room -= keep;
                    chunk.last = (chunk.next + keep).saturating_sub(1);
                }
                if chunk.next <= chunk.last {
                    held.chunks.push_back(chunk);
                }
                held.last_used = now;
                held.last_granted = lease.granted;
            } else if !lease.verdict.allowed {
                held.retry_at = now.saturating_add(lease.verdict.retry_ns);
                held.quiet_until = now.saturating_add(lease.verdict.retry_ns.min(self.span_ns));
            }
            held.held(now)
        });
        self.notify_landed();
        held
    }

    /// Lands a lease of permits (a refusal: none is asked for again for a span).
    fn grant_permits(&self, limiter: &Limiter, (peer, key): (&str, &RemoteKey), held: PermitLease, allowed: bool) {
        let now = limiter.now_ns();
        limiter.with_kept(peer, |kept, hash| {
            let lease = Leases::made(kept).entry(peer, hash, key, now);
            if lease.key.limits != key.limits {
                lease.limits_changed(now);
                lease.key = key.clone();
            }
            lease.permits.fetching = false;
            if allowed && held.granted > 0 {
                lease.permits.grant(held);
            } else if !allowed {
                lease.permits.quiet_until = now.saturating_add(self.span_ns);
            }
        });
    }

    /// Gives back `cost` permits a request held from a lease here; false when none did (the request's
    /// permits are in Redis, which this process is about to release: a lease refused a moment ago may be
    /// granted now, so the key asks again rather than refusing for the rest of the span).
    fn release_permits(limiter: &Limiter, peer: &str, id: u32, cost: u64) -> bool {
        let now = limiter.now_ns();
        limiter.with_kept(peer, |kept, hash| {
            let Some(lease) = Leases::of(kept).and_then(|l| l.get(peer, hash, id)) else { return false };
            let released = lease.permits.release(cost, now);
            if !released {
                lease.permits.quiet_until = 0;
            }
            released
        })
    }

    /// What the key's leases of limits it no longer has hold, taken out to be given back.
    fn returning(limiter: &Limiter, peer: &str, id: u32) -> Vec<Return> {
        limiter.with_kept(peer, |kept, hash| {
            let lease = Leases::of(kept).and_then(|l| l.get(peer, hash, id));
            lease.map(|l| std::mem::take(&mut l.returning)).unwrap_or_default()
        })
    }

    /// A server's word of `most` left is being taken for `peer`'s `key`: the lease keeps at most `most`
    /// of the units it holds (the rest dropped, counted as used) and a cap is marked on its way. The
    /// units kept, which the cap in Redis leaves room for beside them.
    fn keep_units(limiter: &Limiter, peer: &str, key: &RemoteKey, most: u64) -> u64 {
        let now = limiter.now_ns();
        limiter.with_kept(peer, |kept, hash| {
            let lease = Leases::made(kept).entry(peer, hash, key, now);
            lease.caps.pending += 1;
            lease.caps.at = now;
            lease.keep_at_most(most, now)
        })
    }

    /// `peer`'s cap of `key` to `remaining` is applied in Redis, having kept `kept` units here; `taken`:
    /// `None` when the word was not taken, else how long until the windows end and what they had left
    /// before it (if Redis said). The units Redis granted before the word, which it did not count (landed
    /// meanwhile, or on their way), may be spent only as far as they fit under it beside what Redis has
    /// left: the rest are dropped. The units held lapse where the word ends the windows, which would
    /// otherwise be spent in the window after it.
    fn capped(
        &self,
        limiter: &Limiter,
        (peer, key): (&str, &RemoteKey),
        (remaining, kept): (u64, u64),
        taken: Option<(u64, Option<u64>)>,
    ) {
        let count = self.caps.fetch_add(1, Ordering::SeqCst) + 1;
        let now = limiter.now_ns();
        limiter.with_kept(peer, |kept_here, hash| {
            let Some(lease) = Leases::of(kept_here).and_then(|l| l.get(peer, hash, key.id)) else { return };
            lease.caps.pending = lease.caps.pending.saturating_sub(1);
            let Some((ends_after, left_before)) = taken else { return };
            // What Redis has left now is min(left_before, remaining - kept); unknown, assume the most.
            let beside = left_before.map_or(remaining - kept, |left| left.min(remaining - kept));
            let room = (remaining - kept).saturating_sub(beside);
            lease.caps.count = lease.caps.count.max(count);
            let held = lease.keep_at_most(kept + room, now);
            lease.caps.room = (kept + room).saturating_sub(held.max(kept));
            let Lease { chunks, key, .. } = lease;
            for chunk in chunks.iter_mut() {
                chunk.realign(&key.limits, now, ends_after);
            }
        });
    }

    /// The count of caps taken, read as a lease is asked for.
    fn caps_now(&self) -> u64 {
        self.caps.load(Ordering::SeqCst)
    }

    /// An admission exact mode made for `key`: its demand here, which the key's next lease follows.
    fn note_spent(limiter: &Limiter, peer: &str, key: &RemoteKey, cost: u64) {
        let now = limiter.now_ns();
        limiter.with_kept(peer, |kept, hash| {
            let lease = Leases::made(kept).entry(peer, hash, key, now);
            if lease.key.limits == key.limits {
                lease.spent += cost;
                lease.last_used = now;
            }
        });
    }

    /// A fetch of units (`permits`: of permits) that failed: another may be sent.
    fn fetched(&self, limiter: &Limiter, peer: &str, key: &RemoteKey, permits: bool) {
        limiter.with_kept(peer, |kept, hash| {
            if let Some(lease) = Leases::of(kept).and_then(|l| l.get(peer, hash, key.id)) {
                if permits {
                    lease.permits.fetching = false;
                } else {
                    lease.fetching = false;
                }
            }
        });
        self.notify_landed();
    }

    /// Takes out what the leases of keys idle for a span hold (every lease's with `everything`), and the
    /// permit leases no request held for a span, to give back.
    fn sweep(&self, limiter: &Limiter, everything: bool) -> Vec<Giving> {
        let now = limiter.now_ns();
        let mut givings = Vec::new();
        limiter.each_kept(|kept| {
            let Some(leases) = Leases::of(kept) else { return };
            leases.standing.prune(now);
            leases.table.retain(|lease| {
                let idle = everything || (now.saturating_sub(lease.last_used) >= self.span_ns && !lease.fetching);
                if idle {
                    for (units, states) in lease.chunks_returns(now) {
                        givings.push(Giving::Units(lease.peer.to_string(), lease.key.clone(), units, states));
                    }
                }
                for permits in lease.permits.idle(now, self.span_ns, everything) {
                    givings.push(Giving::Permits(lease.peer.to_string(), lease.key.clone(), permits));
                }
                let quiet = now < lease.quiet_until
                    || now < lease.permits.quiet_until
                    || lease.caps.pending > 0
                    || (lease.caps.at > 0 && now.saturating_sub(lease.caps.at) < self.span_ns);
                !lease.chunks.is_empty()
                    || lease.fetching
                    || lease.permits.fetching
                    || !lease.permits.is_empty()
                    || !lease.returning.is_empty()
                    || (quiet && !everything)
            });
        });
        givings
    }

    /// Forgets `peer`'s leases (every peer's with `None`), giving nothing back (a reset removes the states).
    fn forget(limiter: &Limiter, peer: Option<&str>) {
        match peer {
            Some(peer) => limiter.with_kept(peer, |kept, hash| {
                if let Some(leases) = Leases::of(kept) {
                    leases.table.retain(|l| *l.peer != *peer);
                    leases.standing.forget(hash);
                }
            }),
            None => limiter.each_kept(|kept| {
                if let Some(leases) = Leases::of(kept) {
                    leases.table.clear();
                    leases.standing = standing::Table::default();
                }
            }),
        }
    }
}

/// Every span, gives back the leases of keys idle for a span and renews the standing share (claimed
/// first at once), while the store lives.
fn start_sweeper(exact: &Exact, book: &Arc<Book>, span: Duration) {
    call_pool(book, &exact.decider, exact.limiter(), PoolCall::Hold, Sending::Send);
    let (book, limiter, decider) =
        (Arc::downgrade(book), Arc::downgrade(exact.limiter()), Arc::downgrade(&exact.decider));
    exact.decider.client.runtime().spawn(async move {
        let mut timer = tokio::time::interval(span);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        timer.tick().await;
        loop {
            timer.tick().await;
            let (Some(book), Some(limiter), Some(decider)) = (book.upgrade(), limiter.upgrade(), decider.upgrade())
            else {
                break;
            };
            give_back(&book, &decider, &limiter, false, Sending::Send);
            call_pool(&book, &decider, &limiter, PoolCall::Hold, Sending::Send);
        }
    });
}

/// A call to the pool of standing shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PoolCall {
    /// Renew the share held, or claim one.
    Hold,
    /// Give it back (the store ends).
    Release,
}

/// Calls the pool of standing shares on the client's runtime (with standing shares set): the share held
/// is renewed or one is claimed, under the settings' fingerprint now (after a change of rules, the share
/// claimed under the old ones is no longer spent, and one is claimed anew); or it is given back, and no
/// longer spent from now.
fn call_pool(book: &Arc<Book>, decider: &Arc<RedisDecider>, limiter: &Arc<Limiter>, call: PoolCall, how: Sending) {
    let Some(share) = &book.share else { return };
    let Some(fingerprint) = share.fingerprint_now(&limiter.rules()) else { return };
    let (ttl_ms, manual_ms) = (share.ttl_ns / 1_000_000, limiter.manual_now().map(|ns| ns / 1_000_000));
    let operation = match call {
        PoolCall::Hold => "hold",
        PoolCall::Release => "release",
    };
    let args = pool_arguments(operation, &decider.node, (&fingerprint, share.settings), ttl_ms, manual_ms);
    let keys = vec![pool_key(&decider.settings.prefix)];
    if call == PoolCall::Release {
        share.drop_share();
        decider.client.spawn(keys, args, |_| {});
        return;
    }
    // Not a decision's round trip: not counted in `backend_seconds` (the server's command counts have it).
    let sent = limiter.now_ns();
    let hear = move |book: &Book, limiter: &Limiter, reply: std::result::Result<Vec<String>, Failure>| {
        let landed = limiter.now_ns();
        let heard = reply.map_err(|f| Error::backend(f.to_string())).and_then(|r| parse_pool(&r));
        if let (Ok(reply), Some(share)) = (heard, &book.share) {
            share.heard(&reply, (sent, landed), manual_ms.is_some());
        }
    };
    match how {
        Sending::Wait => hear(book, limiter, decider.client.run(&keys, &args)),
        Sending::Send => {
            let (book, limiter) = (Arc::clone(book), Arc::clone(limiter));
            decider.client.spawn(keys, args, move |reply| hear(&book, &limiter, reply));
        }
    }
}

/// How a give-back is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    /// Waited for (`sync_now`: done when it returns).
    Wait,
    /// Sent on the client's runtime (the sweeper, a dropped store).
    Send,
}

/// What a sweep gives back: a key's units (the key they were leased under, how many, the states the
/// lease wrote), or a lease of its permits.
#[derive(Debug)]
enum Giving {
    Units(String, RemoteKey, u64, Vec<LeaseState>),
    Permits(String, RemoteKey, PermitLease),
}

/// Gives back what the swept leases hold (every lease's with `everything`): the leases, and the units and
/// permits given.
fn give_back(book: &Book, decider: &RedisDecider, limiter: &Limiter, everything: bool, how: Sending) -> SyncReport {
    let mut report = SyncReport::default();
    let ttl_ms = u64::try_from(decider.settings.lease_ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    for giving in book.sweep(limiter, everything) {
        let (peer, key, args) = match giving {
            Giving::Units(peer, key, units, states) => {
                report.absorbed += units;
                let args = script::return_arguments(&key, units, &states, decider.caller(limiter));
                (peer, key, args)
            }
            Giving::Permits(peer, key, permits) => {
                report.absorbed += permits.granted;
                // The lease's own members: "<prefix>#<j>".
                let prefix = format!("{}#", permits.prefix);
                let leases = script::Leases { prefix: &prefix, ttl_ms };
                let args = script::release_arguments(&key, permits.granted, leases, decider.caller(limiter));
                (peer, key, args)
            }
        };
        report.keys += 1;
        let keys = decider.keys(&peer, &key);
        match how {
            // A give-back that fails leaves the units counted, the permits until they expire: never more
            // admitted.
            Sending::Wait => drop(decider.client.run(&keys, &args)),
            Sending::Send => decider.client.spawn(keys, args, |_| {}),
        }
    }
    report
}

impl StateStore for Leased {
    fn limiter(&self) -> &Arc<Limiter> {
        self.exact.limiter()
    }

    fn waits_on_io(&self) -> bool {
        true
    }

    fn replays_moves(&self) -> bool {
        true
    }

    fn decide_at_once(&self, peer: &str, target: Target<'_>, request: Request) -> Option<Result<Answer>> {
        match self.decide_held(peer, target, request) {
            Ok(Held::Decided(answer)) => Some(Ok(answer)),
            Ok(Held::Miss(..) | Held::MissPermits(..) | Held::MissBoth(_) | Held::Elsewhere) => None,
            Err(error) => Some(Err(error)),
        }
    }

    fn decide(&self, peer: &str, target: Target<'_>, request: Request) -> Result<Answer> {
        let mut held = self.decide_held(peer, target, request)?;
        if let Held::Miss(key, ..) | Held::MissBoth(key) = &held {
            // A fetch on its way brings what this request needs, or Redis has none: waited for, not asked
            // for again.
            let both = matches!(held, Held::MissBoth(_));
            if self.book.wait_prefetch(self.limiter(), (peer, key.id), both, self.decider().settings.timeout) {
                held = self.decide_held(peer, target, request)?;
            }
        }
        let (call, landing) = match self.ask(peer, target, request, held) {
            Asked::Decided(answer) => return Ok(answer),
            Asked::Exact(false) => return self.exact.decide(peer, target, request),
            Asked::Exact(true) => {
                return self.exact.decide(peer, target, request).inspect(|a| self.note(peer, target, a, request.cost));
            }
            Asked::Lease(call, landing) => (call, landing),
        };
        let decider = self.decider();
        let round_trip = decider.health().round_trip();
        let reply = decider.client.run(&call.keys, &call.args);
        round_trip.done();
        landing.land(&self.book, decider, self.limiter(), &call, reply)
    }

    fn decide_later(&self, peer: &str, target: Target<'_>, request: Request, done: Later) -> Result<Option<Answer>> {
        let held = self.decide_held(peer, target, request)?;
        let (mut call, landing) = match self.ask(peer, target, request, held) {
            Asked::Decided(answer) => return Ok(Some(answer)),
            Asked::Exact(false) => return self.exact.decide_later(peer, target, request, done),
            Asked::Exact(true) => {
                let limiter = Arc::clone(self.limiter());
                let (peer_owned, owned) = (peer.to_owned(), OwnedTarget::from(target));
                let noted: Later = Box::new(move |answer: Result<Answer>| {
                    if let Ok(answer) = &answer {
                        note_spent(&limiter, (&peer_owned, owned.borrow()), answer, request.cost);
                    }
                    done(answer);
                });
                return self.exact.decide_later(peer, target, request, noted).inspect(|answer| {
                    if let Some(answer) = answer {
                        self.note(peer, target, answer, request.cost);
                    }
                });
            }
            Asked::Lease(call, landing) => (call, landing),
        };
        let (keys, args) = (std::mem::take(&mut call.keys), std::mem::take(&mut call.args));
        let (book, decider, limiter) = (Arc::clone(&self.book), Arc::clone(self.decider()), Arc::clone(self.limiter()));
        let round_trip = decider.health().round_trip();
        self.decider().client.spawn(keys, args, move |reply| {
            round_trip.done();
            done(landing.land(&book, &decider, &limiter, &call, reply));
        });
        Ok(None)
    }

    fn reduce(&self, peer: &str, target: Target<'_>, n: u64) -> Result<bool> {
        self.exact.reduce(peer, target, n)
    }

    /// The units this process holds of the key count against the server's word: it keeps at most
    /// `remaining` of them, and Redis is capped to what is left beside those, in one round trip as exact
    /// mode's. The units Redis granted before the word (a lease landed meanwhile, or on its way) are kept
    /// only as far as they fit under it (`Book::capped`), and the units held lapse where it ends the window.
    /// Another process's lease of the key is spent until it ends or that process takes a word too.
    fn cap(&self, peer: &str, target: Target<'_>, remaining: u64, times: (u64, u64)) -> Result<bool> {
        // Only a key the word can cap (a fixed window, a GCRA): another is refused by exact mode's cap.
        let key = match self.limiter().route_remote(peer, target)? {
            Routed::Limited(key) if key.limits.iter().any(Limit::takes_word) => key,
            _ => return self.exact.cap(peer, target, remaining, times),
        };
        let kept = Book::keep_units(self.limiter(), peer, &key, remaining);
        let capped = self.decider().cap_word(self.limiter(), peer, target, remaining - kept, times);
        let taken = match &capped {
            Ok((true, left_before)) => Some((times.0, *left_before)),
            _ => None,
        };
        self.book.capped(self.limiter(), (peer, &key), (remaining, kept), taken);
        capped.map(|(taken, _)| taken)
    }

    fn refund(&self, peer: &str, target: Target<'_>, cost: u64, receipt: Receipt) -> Result<()> {
        self.exact.refund(peer, target, cost, receipt)
    }

    /// Permits a lease here gave are taken back here; others (a group decided in exact mode) in Redis.
    fn release(&self, peer: &str, target: Target<'_>, cost: u64) -> Result<()> {
        // Routed by the rules alone (no key locked, no quota read: the group's id is all the book needs).
        let rules = self.limiter().rules();
        if let Route::Group(index) = rules.route(peer, target)? {
            let id = rules.groups.get(index).map(|g| g.id);
            if id.is_some_and(|id| Book::release_permits(self.limiter(), peer, id, cost)) {
                return Ok(());
            }
        }
        self.exact.release(peer, target, cost)
    }

    fn set_quota(&self, peer: &str, group: &str, rate: Option<Rate>) -> Result<()> {
        self.exact.set_quota(peer, group, rate)
    }

    fn moved(&self, peer: &str, key: &RemoteKey) -> Result<()> {
        self.exact.moved(peer, key)
    }

    /// The leases go first (what they hold is not given back: the states go), then the states.
    fn reset(&self, peer: Option<&str>) -> Result<()> {
        Book::forget(self.limiter(), peer);
        self.exact.reset(peer)
    }

    fn health(&self) -> HealthReport {
        let now = self.limiter().now_ns();
        HealthReport { standing_share: self.book.share.as_ref().and_then(|s| s.slot(now)), ..self.exact.health() }
    }

    /// Gives back now what the leases of keys idle for a span hold and renews the standing share (the
    /// sweeper does both every span), waiting for Redis.
    fn sync_now(&self) -> Result<SyncReport> {
        let report = give_back(&self.book, self.decider(), self.limiter(), false, Sending::Wait);
        call_pool(&self.book, self.decider(), self.limiter(), PoolCall::Hold, Sending::Wait);
        Ok(report)
    }
}

impl Drop for Leased {
    /// What the leases hold goes back (sent, not waited for: a process that exits at once may lose it,
    /// and those units lapse as a killed process's do).
    fn drop(&mut self) {
        give_back(&self.book, &self.exact.decider, self.exact.limiter(), true, Sending::Send);
        call_pool(&self.book, &self.exact.decider, self.exact.limiter(), PoolCall::Release, Sending::Send);
    }
}
