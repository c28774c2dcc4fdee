//! Lease mode's standing shares, as one process holds one (see `backend::standing` for the split and the
//! pool): the share it holds and until when, and the states of its keys, kept in each limiter shard beside
//! its leases and decided under the same lock.
//!
//! Why the fleet never admits more than the limit: each slot's share of a key admits, in any span `d`, at
//! most its burst plus its rate × `d`, whoever holds it, because
//! - a process spends its share only while it holds the slot, by its own clock from when it sent the call
//!   that renewed it (which is no later than the pool's clock started the time to live);
//! - a new holder's keys start empty at the instant the pool says the last holder may have spent last (its
//!   time to live's end, or its give-back; for a pool made anew, a time to live after that): before it
//!   nothing, then at the share's rate; and a key whose state is dropped while it still constrains, or
//!   whose limits change, starts empty again (`Table::floor`, or at the change);
//! - the parts of every limit add up to it (`backend::standing`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::leased::slot;
use crate::algorithm::{Limit, Log, Report, State};
use crate::backend::standing::{PoolReply, Standing, MOST_LIMITS};
use crate::config::Policy;
use crate::limiter::{HeldKey, Request};
use crate::rules::Rules;

/// The pool's time to live of a slot: this many lease spans, and at least a second.
const TTL_SPANS: u64 = 10;
const LEAST_TTL_NS: u64 = 1_000_000_000;
/// Taken off the time a slot is held here: the pool counts whole milliseconds.
const MARGIN_NS: u64 = 2_000_000;

/// The share this process holds, if any: what the sweeper's calls to the pool said.
#[derive(Debug)]
pub struct Share {
    pub settings: Standing,
    pub ttl_ns: u64,
    /// The most keys a shard's table holds.
    most: usize,
    /// The limiter's clock: the share is spent before this instant only (0: none held).
    live_until: AtomicU64,
    /// The limiter's clock: the keys start empty at this instant (a last holder may have spent until then).
    empty_at: AtomicU64,
    /// When the latest call the pool said a share is held to was sent: a "none" from a call sent before it
    /// is older news.
    held_sent: AtomicU64,
    /// The slot held (1-based; 0: none), and the fingerprint of the settings it was claimed under, with the
    /// version of the rules it was made of.
    slot: AtomicU32,
    fingerprint: parking_lot::Mutex<(String, u64)>,
}

impl Share {
    #[must_use]
    pub fn new(settings: Standing, span_ns: u64, most: usize) -> Self {
        Self {
            settings,
            ttl_ns: span_ns.saturating_mul(TTL_SPANS).max(LEAST_TTL_NS),
            most: most.max(1),
            live_until: AtomicU64::new(0),
            empty_at: AtomicU64::new(0),
            held_sent: AtomicU64::new(0),
            slot: AtomicU32::new(0),
            fingerprint: parking_lot::Mutex::new((String::new(), 0)),
        }
    }

    /// The slot held at `now` (1-based), if any.
    pub fn slot(&self, now: u64) -> Option<u32> {
        (now < self.live_until.load(Ordering::Acquire)).then(|| self.slot.load(Ordering::Relaxed)).filter(|&s| s > 0)
    }

    /// The settings' fingerprint under `rules` (worked out again only when they changed); a share claimed
    /// under other settings is no longer spent (the pool frees it as the time to live ends). `None` when
    /// rules newer than these were seen already: a call made of older ones is not sent (it would turn the
    /// pool back to them, and the next call forward again, each change starting the share's keys empty).
    pub fn fingerprint_now(&self, rules: &Rules) -> Option<String> {
        let mut held = self.fingerprint.lock();
        let version = rules.version();
        if version < held.1 {
            return None;
        }
        if version > held.1 || held.0.is_empty() {
            let groups = rules.groups.iter().map(|g| (g.name.as_str(), &g.limits[..]));
            let fingerprint = self.settings.fingerprint(groups);
            if held.0 != fingerprint {
                held.0 = fingerprint;
                self.live_until.store(0, Ordering::Release);
            }
            held.1 = version;
        }
        Some(held.0.clone())
    }

    /// What the pool said to a call sent at `sent` and answered at `landed` (the limiter's clock; the pool
    /// decided at `sent` with a `ManualClock`, else at its own time, between the two).
    pub fn heard(&self, reply: &PoolReply, (sent, landed): (u64, u64), manual: bool) {
        let until = sent.saturating_add(self.ttl_ns).saturating_sub(MARGIN_NS);
        match *reply {
            PoolReply::Held { slot, free_in_ms } => {
                // The pool's "now" was no later than `landed` here (`sent` with a ManualClock, whose reading
                // it was given): its instant is no later than this.
                let now = if manual { sent } else { landed };
                let free = i128::from(now) + i128::from(free_in_ms) * 1_000_000;
                let free = u64::try_from(free.max(0)).unwrap_or(u64::MAX);
                // Before it goes live: a share spent as soon as it is live starts where the pool says. A
                // renewal says it again, so replies heard out of order (two calls on their way) agree.
                self.empty_at.fetch_max(free, Ordering::AcqRel);
                self.slot.store(slot, Ordering::Relaxed);
                // The pool never ends a share earlier than a renewal before it said (a call that lands late
                // extends nothing), nor does this.
                self.live_until.fetch_max(until, Ordering::AcqRel);
                self.held_sent.fetch_max(sent, Ordering::AcqRel);
            }
            // Replies are heard in any order (a sweeper's and `sync_now`'s on their way at once).
            PoolReply::None { .. } if sent >= self.held_sent.load(Ordering::Acquire) => {
                self.live_until.store(0, Ordering::Release);
            }
            PoolReply::None { .. } => {}
        }
    }

    /// Stops spending the share (it is being given back).
    pub fn drop_share(&self) {
        self.live_until.store(0, Ordering::Release);
    }

    /// Decides `request` for `key` on this process's share, in `table` (the key's shard's): the verdict's
    /// reports (empty unless asked for), or `None` when the share does not admit it (none held, the group
    /// is not split, or the share is spent: Redis decides).
    pub fn decide(&self, table: &mut Table, key: HeldKey<'_>, request: Request) -> Option<Vec<Report>> {
        use hashbrown::hash_table::Entry as Found;
        let now = key.now;
        if now >= self.live_until.load(Ordering::Acquire) || request.cost == 0 {
            return None;
        }
        let Table { entries, splits, floor } = table;
        let shares = shares_of(splits, self.settings, key)?;
        let signature = signature(key.limits);
        let (peer_hash, id) = (key.peer_hash, key.id);
        if entries.len() >= self.most {
            make_room(entries, floor, now);
        }
        let found =
            entries.entry(slot(peer_hash, id), |e| e.peer_hash == peer_hash && e.id == id, |e| slot(e.peer_hash, e.id));
        let (mut states, start) = match &found {
            Found::Occupied(entry) if entry.get().signature == signature => (entry.get().states, *floor),
            // A change of limits: the key starts empty now.
            Found::Occupied(_) => ([State::default(); MOST_LIMITS], now),
            Found::Vacant(_) => ([State::default(); MOST_LIMITS], *floor),
        };
        let start = start.max(self.empty_at.load(Ordering::Acquire));
        let log = Log::new();
        for (state, share) in states.iter_mut().zip(shares.iter().flatten()) {
            let emptied = emptied_at(share, start);
            if state.t < emptied.t {
                *state = emptied;
            }
            *state = match share.evaluate(state, &log, now, request.cost) {
                Ok(crate::algorithm::Admit::State(next)) => next,
                _ => return None,
            };
        }
        let entry = Entry { peer_hash, id, signature, states };
        match found {
            Found::Occupied(mut kept) => *kept.get_mut() = entry,
            Found::Vacant(room) => drop(room.insert(entry)),
        }
        Some(if request.report { reports(key.limits, shares, &states, now) } else { Vec::new() })
    }
}

/// Makes room in a full table: the keys back to full go; if every one still constrains, all go and every
/// key starts empty now (`floor`), which is stricter than any state kept.
fn make_room(entries: &mut hashbrown::HashTable<Entry>, floor: &mut u64, now: u64) {
    let most = entries.len();
    keep_constraining(entries, now);
    if entries.len() >= most {
        entries.clear();
        *floor = now;
    }
}

/// Keeps the keys that still constrain, in a table made anew (as large): removed in place, they would leave
/// tombstones that every lookup of a key not in the table walks past (most keys come and go within a span),
/// which took a third of a decision.
fn keep_constraining(entries: &mut hashbrown::HashTable<Entry>, now: u64) {
    // As large as it was: the keys of the next span fit without growing it again.
    let old = std::mem::replace(entries, hashbrown::HashTable::with_capacity(entries.len()));
    for entry in old.into_iter().filter(|e| !e.idle(now)) {
        entries.insert_unique(slot(entry.peer_hash, entry.id), entry, |e| slot(e.peer_hash, e.id));
    }
}

/// One share of each of `key`'s limits (`None`: its group is not split), from the splits kept.
fn shares_of<'s>(
    splits: &'s mut [Option<KeptSplit>; SPLITS_KEPT],
    settings: Standing,
    key: HeldKey<'_>,
) -> Option<&'s Shares> {
    let kept = &mut splits[key.id as usize % SPLITS_KEPT];
    let same = |k: &KeptSplit| k.policy == key.policy && k.limits.iter().flatten().eq(key.limits.iter());
    if !kept.as_ref().is_some_and(same) {
        if key.limits.len() > MOST_LIMITS {
            // Never split.
            return None;
        }
        let mut limits = [None; MOST_LIMITS];
        for (slot, limit) in limits.iter_mut().zip(key.limits) {
            *slot = Some(*limit);
        }
        let shares = settings.split(key.limits, key.policy).map(|split| split.share);
        *kept = Some(KeptSplit { limits, policy: key.policy, shares });
    }
    kept.as_ref().and_then(|k| k.shares.as_ref())
}

/// A GCRA share's state emptied at `at`: its arrival time a whole tolerance later.
fn emptied_at(share: &Limit, at: u64) -> State {
    let tau = share.script_params().map_or(0, |(_, p)| p[3] + u64::from(p[4] > 0));
    State { t: at.saturating_add(tau), a: 0, b: 0 }
}

/// The reports of a decision on the share: what it has left, out of the limits as the rules give them.
fn reports(limits: &[Limit], shares: &Shares, states: &[State; MOST_LIMITS], now: u64) -> Vec<Report> {
    let log = Log::new();
    limits
        .iter()
        .zip(shares.iter().flatten())
        .zip(states)
        .map(|((limit, share), state)| Report {
            limit: u64::from(limit.burst),
            window_ns: limit.window_ns(),
            ..share.report(state, &log, now)
        })
        .collect()
}

/// The limits' identity, to tell a key's states written under other limits (a reconfiguration, a quota).
fn signature(limits: &[Limit]) -> u64 {
    limits.iter().fold(0xcbf2_9ce4_8422_2325, |h, limit| {
        let rate = limit.rate.map_or((0, 0), |r| (r.count, r.period_ns));
        let mixed = (h ^ rate.0).wrapping_mul(0x0100_0000_01b3) ^ rate.1;
        (mixed ^ u64::from(limit.burst)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One key's states on the share, a limit each; found by the peer's hash and the group's id (two peers of
/// one hash share one state: stricter, never looser).
#[derive(Debug, Clone, Copy)]
struct Entry {
    peer_hash: u64,
    id: u32,
    signature: u64,
    states: [State; MOST_LIMITS],
}

impl Entry {
    /// Whether forgetting it changes nothing: every state is back to full.
    fn idle(&self, now: u64) -> bool {
        self.states.iter().all(|s| s.is_idle(now))
    }
}

/// A group's share limits, a limit each.
type Shares = [Option<Limit>; MOST_LIMITS];

/// The last groups' splits (by group id, direct-mapped): working a split out divides 128-bit numbers,
/// which took a fifth of a decision.
const SPLITS_KEPT: usize = 8;

/// A group's limits as the rules gave them, and one share of each (`None`: the group is not split).
#[derive(Debug, Clone, Copy)]
struct KeptSplit {
    limits: [Option<Limit>; MOST_LIMITS],
    policy: Policy,
    shares: Option<Shares>,
}

/// One shard's keys on the share (at most `Share::most`).
#[derive(Debug, Default)]
pub struct Table {
    entries: hashbrown::HashTable<Entry>,
    splits: [Option<KeptSplit>; SPLITS_KEPT],
    /// Keys without a state start empty at this instant: the table was emptied of states that still
    /// constrained (it was full).
    floor: u64,
}

impl Table {
    /// Forgets the keys back to full (the sweeper's, every span).
    pub fn prune(&mut self, now: u64) {
        keep_constraining(&mut self.entries, now);
    }

    /// Forgets the keys of the peer of this hash (a reset: it starts afresh, as in memory).
    pub fn forget(&mut self, peer_hash: u64) {
        self.entries.retain(|e| e.peer_hash != peer_hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Kind;

    const SECOND: u64 = 1_000_000_000;

    fn limits(rate: &str, burst: u64) -> Vec<Limit> {
        vec![Limit::new(rate.parse().unwrap(), Some(burst), Kind::Gcra).unwrap()]
    }

    fn request() -> Request {
        Request::new(1)
    }

    fn held(share: &Share, claimed_at: u64, free_in_ms: i64) {
        share.heard(&PoolReply::Held { slot: 1, free_in_ms }, (claimed_at, claimed_at), false);
    }

    fn admitted(share: &Share, table: &mut Table, limits: &[Limit], peer_hash: u64, now: u64) -> bool {
        let key = HeldKey { id: 0, peer_hash, policy: Policy::All, limits, now };
        share.decide(table, key, request()).is_some()
    }

    /// 100/s, burst 40, four shares of half: each 12/s, burst 5.
    fn setup() -> (Share, Table, Vec<Limit>) {
        let share = Share::new(Standing { shares: 4, fraction_ppm: 500_000 }, SECOND / 10, 1000);
        (share, Table::default(), limits("100/s", 40))
    }

    #[test]
    fn nothing_is_spent_before_a_share_is_held_or_after_it_lapses() {
        let (share, mut table, limits) = setup();
        assert!(!admitted(&share, &mut table, &limits, 1, 10 * SECOND));
        held(&share, 10 * SECOND, -100_000);
        assert!(admitted(&share, &mut table, &limits, 1, 10 * SECOND));
        // A second after the call that claimed it (the time to live), less the margin.
        assert!(!admitted(&share, &mut table, &limits, 1, 11 * SECOND - MARGIN_NS));
    }

    #[test]
    fn a_share_admits_its_burst_then_its_rate() {
        let (share, mut table, limits) = setup();
        held(&share, 100 * SECOND, -100_000);
        let now = 100 * SECOND;
        let burst = (0..20).take_while(|_| admitted(&share, &mut table, &limits, 7, now)).count();
        assert_eq!(burst, 5);
        // Another key has its own share.
        assert!(admitted(&share, &mut table, &limits, 8, now));
        // 12/s: one more after 1/12 s.
        assert!(!admitted(&share, &mut table, &limits, 7, now + SECOND / 13));
        assert!(admitted(&share, &mut table, &limits, 7, now + SECOND / 12 + 1));
    }

    #[test]
    fn a_new_holders_keys_start_empty_where_the_last_holder_stopped() {
        let (share, mut table, limits) = setup();
        // The last holder may have spent until 300 ms from now.
        held(&share, 100 * SECOND, 300);
        let now = 100 * SECOND;
        assert!(!admitted(&share, &mut table, &limits, 7, now + 300_000_000));
        // Then the share fills at 12/s: one unit a twelfth of a second after.
        assert!(admitted(&share, &mut table, &limits, 7, now + 300_000_000 + SECOND / 12 + 1));
        assert!(!admitted(&share, &mut table, &limits, 7, now + 300_000_000 + SECOND / 12 + 2));
    }

    #[test]
    fn a_full_table_starts_every_key_empty() {
        let share = Share::new(Standing { shares: 4, fraction_ppm: 500_000 }, SECOND / 10, 2);
        let mut table = Table::default();
        let limits = limits("100/s", 40);
        let now = 50 * SECOND;
        held(&share, now, -100_000);
        for peer in 1..=2 {
            assert!(admitted(&share, &mut table, &limits, peer, now));
        }
        // A third key while both constrain: the table forgets them, and every key starts empty now.
        assert!(!admitted(&share, &mut table, &limits, 3, now));
        assert!(!admitted(&share, &mut table, &limits, 1, now));
        assert!(admitted(&share, &mut table, &limits, 1, now + SECOND / 12 + 1));
        // Keys back to full are forgotten without that.
        table.prune(now + 10 * SECOND);
        assert!(table.entries.is_empty());
    }

    #[test]
    fn a_change_of_limits_starts_the_key_empty() {
        let (share, mut table, limits) = setup();
        let now = 50 * SECOND;
        held(&share, now, -100_000);
        assert!(admitted(&share, &mut table, &limits, 7, now));
        let other = super::tests::limits("200/s", 80);
        assert!(!admitted(&share, &mut table, &other, 7, now));
    }

    #[test]
    fn a_renewal_that_lost_the_slot_stops_the_share() {
        let (share, mut table, limits) = setup();
        held(&share, 0, -100_000);
        share.heard(&PoolReply::None { why: "full".into() }, (SECOND / 2, SECOND / 2), false);
        assert!(!admitted(&share, &mut table, &limits, 7, SECOND / 2));
        // A "none" heard after a later call's claim is older news.
        share.heard(&PoolReply::Held { slot: 1, free_in_ms: -100_000 }, (SECOND * 3 / 4, SECOND * 3 / 4), false);
        share.heard(&PoolReply::None { why: "full".into() }, (SECOND / 2, SECOND), false);
        assert!(admitted(&share, &mut table, &limits, 8, SECOND * 3 / 4));
        share.heard(&PoolReply::None { why: "full".into() }, (SECOND * 3 / 4, SECOND), false);
        assert!(!admitted(&share, &mut table, &limits, 8, SECOND * 3 / 4));
        // A renewal heard before the claim it renews says as much as the claim.
        share.heard(&PoolReply::Held { slot: 1, free_in_ms: 200 }, (SECOND, SECOND), false);
        assert!(!admitted(&share, &mut table, &limits, 7, SECOND + SECOND / 10));
        assert!(admitted(&share, &mut table, &limits, 7, SECOND * 3 / 2));
    }
}
