//! The decision script's arguments and reply (`decide.lua`): plain data, no I/O.

use std::borrow::Cow;

use super::standing::{self, Standing};
use crate::algorithm::{Limit, Report};
use crate::config::Policy;
use crate::error::{Error, Result};
use crate::limiter::{Refusal, RemoteKey, Request, Take, Verdict};
use crate::rate::NANOS_PER_SEC;

/// The script's source: it defines `decide`, called as a Redis Function or by `EVALSHA` (`function.rs`).
pub const DECIDE: &str = include_str!("decide.lua");

/// Lua numbers are doubles: integers are exact below 2^53.
const EXACT: u64 = 1 << 53;

/// Longest `<len>:<group>:<peer>` kept readable in a key; longer ones (and any with braces) are hashed.
const MAX_PLAIN_TAG: usize = 64;

/// `{<len(group)>:<group>:<peer>}`: the hash tag every key of one (peer, group) shares, so that a
/// decision touches one Cluster slot. The group's length in bytes comes first because a `:` may be in
/// either name: `x` with peer `a:b` and `x:a` with peer `b` would otherwise be one tag, one budget. A
/// long pair, or one with braces (which would move the tag), is hashed: `{#<SHA-1 of the same text>}`,
/// which no readable tag can equal (those start with a digit).
#[must_use]
pub fn hash_tag(group: &str, peer: &str) -> String {
    let pair = format!("{}:{group}:{peer}", group.len());
    if pair.len() > MAX_PLAIN_TAG || pair.contains(['{', '}']) {
        let digest = sha1_smol::Sha1::from(pair.as_bytes()).digest().to_string();
        format!("{{#{}}}", &digest[..32])
    } else {
        format!("{{{pair}}}")
    }
}

/// The keys of `peer`'s states in `group`, one per limit: `<prefix><tag>:<limit index>`, and
/// `<prefix><tag>:<limit index>:permits` for a concurrency limit. A rate limit whose algorithm changes
/// keeps its key (the script moves the state to the new algorithm); permits in use are never a rate's
/// state.
#[must_use]
pub fn state_keys(prefix: &str, group: &str, peer: &str, limits: &[Limit]) -> Vec<String> {
    state_keys_up_to(prefix, group, peer, limits, limits.len())
}

/// [`state_keys`], and the keys of the rate limits after them up to index `up_to` (exclusive): limits
/// the group no longer has, whose states a move takes away.
#[must_use]
pub fn state_keys_up_to(prefix: &str, group: &str, peer: &str, limits: &[Limit], up_to: usize) -> Vec<String> {
    let name = format!("{prefix}{}", hash_tag(group, peer));
    (0..up_to.max(limits.len()))
        .map(|i| match limits.get(i) {
            Some(limit) if limit.is_concurrency() => format!("{name}:{i}:permits"),
            _ => format!("{name}:{i}"),
        })
        .collect()
}

/// Sync mode's counter of `peer`'s usage in `group`, summed over the nodes: `<prefix><tag>:used`.
#[must_use]
pub fn usage_key(prefix: &str, group: &str, peer: &str) -> String {
    format!("{prefix}{}:used", hash_tag(group, peer))
}

/// A `SCAN MATCH` pattern for every key under `prefix` (the prefix taken literally, then a tag): what
/// `reset()` removes. A prefix that begins another's (`rk:` and `rk:eu:`) does not match the other's
/// keys, whose tag comes later.
#[must_use]
pub fn owned_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("{*");
    pattern
}

/// The most sorted-set members a key's sliding log or permits may hold in Redis.
pub const MAX_MEMBERS: u64 = 100_000;

/// Checks that the script decides `limit` exactly as the in-memory core does.
///
/// # Errors
/// An algorithm the script does not run, constants beyond what doubles hold exactly, or a sliding log
/// or permits of more than `MAX_MEMBERS`.
pub fn check_limit(limit: &Limit) -> Result<()> {
    let Some((name, params)) = limit.script_params() else {
        return Err(Error::value(
            "algorithm",
            format!("{:?} is not supported by the Redis backend", limit.kind().name()),
        ));
    };
    // A sliding log keeps a sorted-set member per unit in its window, permits one per permit in use, and
    // the script adds or removes them one by one: a larger limit would block Redis for seconds.
    if matches!(name, "sliding_log" | "concurrency") && u64::from(limit.burst) > MAX_MEMBERS {
        return Err(Error::value(
            "burst",
            format!(
                "{} {name} units are too many for the Redis backend, which keeps one sorted-set member per unit: at most {MAX_MEMBERS} (a sliding_window limit counts any number in two integers)",
                limit.burst
            ),
        ));
    }
    if limit.is_concurrency() {
        return Ok(());
    }
    let span = limit.horizon_ns().saturating_mul(2);
    // GCRA adds up to burst interval remainders (each below count) to a remainder below count; every
    // algorithm's instants stay within 2 horizons of now.
    let products = match name {
        "gcra" => u64::from(limit.burst).saturating_mul(params[2]).saturating_add(params[0]),
        _ => 0,
    };
    if span >= EXACT || products >= EXACT {
        return Err(Error::value(
            "rate",
            format!("{} is too large for the Redis backend: its arithmetic must stay below 2^53 (about 104 days in nanoseconds)", limit.rate.map_or_else(String::new, |r| r.to_string())),
        ));
    }
    Ok(())
}

/// What a call of the script is about beyond its limits: the lease prefix of concurrency permits and
/// how long a lease lives.
#[derive(Debug, Clone, Copy)]
pub struct Leases<'a> {
    /// `"<node>:<n>"` for an acquisition, `"<node>:"` to release this node's permits.
    pub prefix: &'a str,
    pub ttl_ms: u64,
}

/// Who calls the script and when: the limiter's name (what the states it writes record having seen)
/// and its clock's reading, which Redis decides at when it is a `ManualClock`'s (`manual`), else at
/// its own `TIME`.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub node: &'a str,
    pub now: u64,
    pub manual: bool,
    /// Lease mode's standing shares: Redis keeps the rest of a split group's limits.
    pub standing: Option<Standing>,
}

/// The limits Redis keeps of `key`'s: all of them, or with standing shares the part of a split group.
fn remote_limits<'k>(key: &'k RemoteKey, caller: Caller<'_>) -> Cow<'k, [Limit]> {
    standing::remote_limits(caller.standing, &key.limits, key.policy)
}

/// The script's `ARGV` for one request: see the head of `decide.lua`.
#[must_use]
pub fn arguments(key: &RemoteKey, request: Request, leases: Leases<'_>, caller: Caller<'_>) -> Vec<String> {
    let operation = match (request.peek, request.report) {
        (true, _) => "peek",
        (false, true) => "1",
        (false, false) => "0",
    };
    if let Some(compact) = compact(key, operation, request, caller) {
        return compact;
    }
    let take = match request.take {
        Take::Rates => "rates",
        Take::RatesAndPermits => "both",
        Take::Permits => "permits",
    };
    encode(key, operation, (request.cost, request.max_wait_ns), take, leases, caller)
}

/// The common decision's `ARGV` in its compact form (see `decide_compact` in `decide.lua`): one rate
/// limit, decided now, nothing to replay: cost, operation, what a state written now has
/// seen, the limit's signature (its 7 fields joined by commas), and a `ManualClock`'s reading. Four
/// arguments instead of twenty: the server parses fewer, and the script finds the limit already parsed.
/// `None` for any other request (the full form).
fn compact(key: &RemoteKey, operation: &str, request: Request, caller: Caller<'_>) -> Option<Vec<String>> {
    let limits = remote_limits(key, caller);
    let [limit] = &*limits else { return None };
    let (name, params) = limit.script_params()?;
    let simple = key.moves.is_empty()
        && request.max_wait_ns == 0
        && !matches!(request.take, Take::Permits)
        && matches!(operation, "0" | "1")
        && name != "concurrency";
    if !simple {
        return None;
    }
    let [p1, p2, p3, p4, p5] = params;
    let mut args = vec![
        request.cost.min(EXACT - 1).to_string(),
        operation.into(),
        format!("{}/{}", caller.node, key.head),
        format!("{name},{},{p1},{p2},{p3},{p4},{p5}", limit.burst),
    ];
    if caller.manual {
        args.push((caller.now / NANOS_PER_SEC).to_string());
        args.push((caller.now % NANOS_PER_SEC).to_string());
    }
    Some(args)
}

const NO_LEASES: Leases<'static> = Leases { prefix: "", ttl_ms: 0 };

/// The script's `ARGV` to reduce: give `tokens` back to the key's limits (a handler's manual reduction).
#[must_use]
pub fn reduce_arguments(key: &RemoteKey, tokens: u64, caller: Caller<'_>) -> Vec<String> {
    encode(key, "reduce", (tokens, 0), "rates", NO_LEASES, caller)
}

/// The script's `ARGV` to refund the slot of a cancelled wait: `written`, the limits it was written to
/// (a bit each), and `at`, its instant on the script's clock (seconds and nanoseconds, as it replied
/// them): compared exactly with the newest slot, which an offset from this process's clock never is.
#[must_use]
pub fn refund_arguments(key: &RemoteKey, cost: u64, (written, at): (u64, u64), caller: Caller<'_>) -> Vec<String> {
    let (secs, nanos) = (at / 1_000_000_000, at % 1_000_000_000);
    encode(key, &format!("refund:{written}:{secs}:{nanos}"), (cost, 0), "rates", NO_LEASES, caller)
}

/// The script's `ARGV` to release `cost` of this node's concurrency permits (`leases.prefix` names
/// the node).
#[must_use]
pub fn release_arguments(key: &RemoteKey, cost: u64, leases: Leases<'_>, caller: Caller<'_>) -> Vec<String> {
    encode(key, "release", (cost, 0), "permits", leases, caller)
}

/// The script's `ARGV` for a server's word: the key's fixed windows (a bit each in the operation) end
/// `reset_after_ns` from now with at most `remaining` permits, heard for a request admitted `age_ns` ago.
#[must_use]
pub fn cap_arguments(
    key: &RemoteKey,
    remaining: u64,
    (reset_after_ns, age_ns): (u64, u64),
    caller: Caller<'_>,
) -> Vec<String> {
    let fixed = key.limits.iter().enumerate().filter(|(_, l)| l.takes_word()).fold(0u64, |bits, (i, _)| bits | 1 << i);
    let operation = format!("cap:{fixed}:{}:{}", reset_after_ns.min(EXACT - 1), age_ns.min(EXACT - 1));
    encode(key, &operation, (remaining, 0), "rates", NO_LEASES, caller)
}

/// The script's `ARGV` for a lease (lease mode): as many units of the rate limits as they admit now, at
/// least `least` and at most `most`.
#[must_use]
pub fn lease_arguments(key: &RemoteKey, (least, most): (u64, u64), caller: Caller<'_>) -> Vec<String> {
    let operation = format!("lease:{}", most.min(EXACT - 1));
    encode(key, &operation, (least, 0), "rates", NO_LEASES, caller)
}

/// The script's `ARGV` for a lease of concurrency permits: members named by `leases.prefix`, at least
/// `least` and at most `most`, each expiring after `leases.ttl_ms` unless released first.
#[must_use]
pub fn permit_lease_arguments(
    key: &RemoteKey,
    (least, most): (u64, u64),
    leases: Leases<'_>,
    caller: Caller<'_>,
) -> Vec<String> {
    let operation = format!("lease:{}", most.min(EXACT - 1));
    encode(key, &operation, (least, 0), "permits", leases, caller)
}

/// The script's `ARGV` to give `units` of a lease back to each limit whose state is still the one the
/// lease wrote: `(limit index, the state's instant on the script's clock, its remainder)`.
#[must_use]
pub fn return_arguments(key: &RemoteKey, units: u64, states: &[LeaseState], caller: Caller<'_>) -> Vec<String> {
    let named: Vec<String> = states
        .iter()
        .map(|s| format!("{},{},{},{}", s.index + 1, s.at / NANOS_PER_SEC, s.at % NANOS_PER_SEC, s.remainder))
        .collect();
    encode(key, &format!("return:{}", named.join("/")), (units, 0), "rates", NO_LEASES, caller)
}

/// A limit's state as a lease wrote it: what a later give-back must still find there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseState {
    pub index: usize,
    /// The state's instant (a window's end, a GCRA arrival time), in ns on the script's clock.
    pub at: u64,
    /// GCRA's remainder of a nanosecond (0 for the windows).
    pub remainder: u64,
}

/// What a lease's reply says: the decision for the least, what each limit has left, the units granted and
/// each limit's state as written (relative to the script's now: `(t, a)`).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseReply {
    pub verdict: Verdict,
    pub reports: Vec<Report>,
    pub granted: u64,
    pub states: Vec<(i64, u64)>,
}

/// Parses the reply of a lease (`lease_arguments`).
///
/// # Errors
/// A reply that is not the script's (an older script that does not know leases replies as a decision).
pub fn parse_lease(key: &RemoteKey, reply: &[String]) -> Result<LeaseReply> {
    let (verdict, reports) = parse_reply(key, reply)?;
    let bad = || Error::value("reply", format!("not a ratekeeper lease reply: {reply:?}"));
    let n = key.limits.len();
    let at = 7 + 3 * n;
    if reply.len() != at + 1 + 2 * n {
        return Err(bad());
    }
    let number = |i: usize| -> Result<i64> { reply[i].parse::<i64>().map_err(|_| bad()) };
    let granted = u64::try_from(number(at)?).map_err(|_| bad())?;
    let states = (0..n)
        .map(|i| Ok((number(at + 1 + 2 * i)?, u64::try_from(number(at + 2 + 2 * i)?).map_err(|_| bad())?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(LeaseReply { verdict, reports: reports.unwrap_or_default(), granted, states })
}

/// The script's `ARGV` to move the key's states through its moves, and nothing else (a quota changed).
#[must_use]
pub fn move_arguments(key: &RemoteKey, caller: Caller<'_>) -> Vec<String> {
    encode(key, "move", (1, 0), "rates", NO_LEASES, caller)
}

fn encode(
    key: &RemoteKey,
    operation: &str,
    (cost, max_wait_ns): (u64, u64),
    take: &str,
    leases: Leases<'_>,
    caller: Caller<'_>,
) -> Vec<String> {
    let mut args = Vec::with_capacity(13 + 7 * key.limits.len() + 17 * key.moves.len());
    if caller.manual {
        args.push((caller.now / NANOS_PER_SEC).to_string());
        args.push((caller.now % NANOS_PER_SEC).to_string());
    } else {
        args.extend([String::new(), String::new()]);
    }
    args.push(cost.min(EXACT - 1).to_string());
    args.push(max_wait_ns.min(EXACT - 1).to_string());
    args.push(match key.policy {
        Policy::All => "all".into(),
        Policy::Fallback => "fallback".into(),
    });
    args.push(operation.into());
    args.push(take.into());
    args.push(leases.prefix.into());
    args.push(leases.ttl_ms.to_string());
    args.push(caller.node.into());
    args.push(key.head.to_string());
    args.push(key.limits.len().to_string());
    let limits = remote_limits(key, caller);
    for limit in limits.iter() {
        push_limit(&mut args, Some(limit));
    }
    // A moved limit as Redis keeps it: its part when the key's group is split now (a state written under
    // another part is moved from the limit it records).
    let split = caller.standing.filter(|_| matches!(limits, Cow::Owned(_)));
    let moved = |limit: &Limit| split.and_then(|s| s.remote_part(limit)).unwrap_or(*limit);
    args.push(key.moves.len().to_string());
    for m in &key.moves {
        args.push((m.index + 1).to_string());
        args.push(m.seq.to_string());
        // An instant before now, relative to it (a move is never later than the call that sends it).
        let ago = caller.now.saturating_sub(m.at).min(EXACT - 1);
        args.push(if ago == 0 { "0".into() } else { format!("-{ago}") });
        push_limit(&mut args, Some(&moved(&m.from)));
        push_limit(&mut args, m.to.as_ref().map(moved).as_ref());
    }
    args
}

/// A limit's 7 fields (kind, burst, p1 .. p5); an empty kind for none.
fn push_limit(args: &mut Vec<String>, limit: Option<&Limit>) {
    // `check_limit` ran when the limit was installed.
    match limit.map(|l| (l, l.script_params().unwrap_or(("unsupported", [0; 5])))) {
        Some((limit, (name, params))) => {
            args.push(name.into());
            args.push(limit.burst.to_string());
            args.extend(params.iter().map(u64::to_string));
        }
        None => args.extend(std::iter::once(String::new()).chain(std::iter::repeat_n("0".to_owned(), 6))),
    }
}

/// The script's reply: the verdict, and when asked, what each limit has left.
///
/// # Errors
/// A reply that is not the script's (a server that runs another script under its name).
pub fn parse_reply(key: &RemoteKey, reply: &[String]) -> Result<(Verdict, Option<Vec<Report>>)> {
    let bad = || Error::value("reply", format!("not a ratekeeper script reply: {reply:?}"));
    let number = |i: usize| -> Result<i128> { reply.get(i).and_then(|s| s.parse::<i128>().ok()).ok_or_else(bad) };
    let clamp = |n: i128| u64::try_from(n.max(0)).unwrap_or(u64::MAX);
    let allowed = number(0)? == 1;
    let retry = number(2)?;
    let seconds = clamp(number(3)?);
    let mut verdict = Verdict {
        allowed,
        wait_ns: clamp(number(1)?),
        retry_ns: if retry < 0 { u64::MAX } else { clamp(retry) },
        now: seconds.saturating_mul(NANOS_PER_SEC).saturating_add(clamp(number(4)?)),
        written: clamp(number(5)?),
        refused_by: match reply.get(6).map(String::as_str) {
            Some("") | None => None,
            Some("concurrency") => Some(Refusal::Concurrency),
            Some(_) => Some(Refusal::Rate),
        },
    };
    if allowed {
        verdict.refused_by = None;
    } else if verdict.refused_by.is_none() {
        verdict.refused_by = Some(Refusal::Rate);
    }
    if reply.len() <= 7 {
        return Ok((verdict, None));
    }
    let mut reports = Vec::with_capacity(key.limits.len());
    for (i, limit) in key.limits.iter().enumerate() {
        let at = 7 + 3 * i;
        reports.push(Report {
            limit: u64::from(limit.burst),
            remaining: clamp(number(at)?),
            reset_after_ns: clamp(number(at + 1)?),
            window_ns: limit.window_ns(),
            next_ns: clamp(number(at + 2)?),
        });
    }
    Ok((verdict, Some(reports)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Kind;
    use crate::limiter::LimitMove;

    fn key(kind: Kind) -> RemoteKey {
        RemoteKey {
            group: "api".into(),
            id: 0,
            index: 0,
            limits: vec![Limit::new("3/s".parse().unwrap(), None, kind).unwrap()],
            policy: Policy::All,
            reduction: true,
            moves: Vec::new(),
            head: 0,
        }
    }

    #[test]
    fn names_with_colons_make_distinct_tags() {
        assert_eq!(hash_tag("x", "a:b"), "{1:x:a:b}");
        assert_eq!(hash_tag("x:a", "b"), "{3:x:a:b}");
        assert_eq!(hash_tag("", ":"), "{0:::}");
        // Hashed pairs too: the hash covers the same unambiguous text.
        let long = "p".repeat(100);
        assert_ne!(hash_tag("x", &format!("a:{long}")), hash_tag("x:a", &long));
        assert_ne!(hash_tag("x", "a:{b}"), hash_tag("x:a", "{b}"));
        assert!(hash_tag("g", "a}b{c").starts_with("{#"));
        assert!(hash_tag("g{", "a").starts_with("{#"));
    }

    #[test]
    fn keys_of_one_pair_share_its_tag() {
        let limits = [Limit::new("1/s".parse().unwrap(), None, Kind::Gcra).unwrap(), Limit::concurrency(2).unwrap()];
        assert_eq!(state_keys("rk:", "api", "alice", &limits), ["rk:{3:api:alice}:0", "rk:{3:api:alice}:1:permits"]);
        assert_eq!(usage_key("rk:", "api", "alice"), "rk:{3:api:alice}:used");
        assert_eq!(owned_pattern("rk:"), "rk:{*");
        assert_eq!(owned_pattern(r"t[1]*?\:"), r"t\[1\]\*\?\\:{*");
    }

    #[test]
    fn arguments_follow_the_script_head() {
        let leases = Leases { prefix: "n1:7", ttl_ms: 300_000 };
        let args = arguments(
            &key(Kind::Gcra),
            Request::new(2).reporting().waiting(9),
            leases,
            Caller { node: "n1", now: 5 * NANOS_PER_SEC + 7, manual: true, standing: None },
        );
        assert_eq!(args[..12], ["5", "7", "2", "9", "all", "1", "rates", "n1:7", "300000", "n1", "0", "1"]);
        // gcra: burst, count, interval ns and remainder, tau ns and remainder; then no moves.
        assert_eq!(args[12..], ["gcra", "3", "3", "333333333", "1", "1000000000", "0", "0"]);
        let args = arguments(
            &key(Kind::FixedWindow),
            Request::new(1).waiting(1),
            leases,
            Caller { node: "n1", now: 0, manual: false, standing: None },
        );
        assert_eq!(args[..2], ["", ""]);
        assert_eq!(args[12..], ["windows", "3", "3", "1000000000", "0", "0", "0", "0"]);
    }

    #[test]
    fn a_decision_now_on_one_rate_limit_is_compact() {
        let leases = Leases { prefix: "n1:7", ttl_ms: 300_000 };
        let manual = Caller { node: "n1", now: 5 * NANOS_PER_SEC + 7, manual: true, standing: None };
        let args = arguments(&key(Kind::Gcra), Request::new(2).reporting(), leases, manual);
        // cost, operation, seen, the limit's 7 fields as one signature, the manual clock's reading.
        assert_eq!(args, ["2", "1", "n1/0", "gcra,3,3,333333333,1,1000000000,0", "5", "7"]);
        let server = Caller { node: "n1", now: 0, manual: false, standing: None };
        assert_eq!(
            arguments(&key(Kind::FixedWindow), Request::new(1), leases, server),
            ["1", "0", "n1/0", "windows,3,3,1000000000,0,0,0"]
        );
        assert_eq!(arguments(&key(Kind::SlidingLog), Request::new(1), leases, server).len(), 4);
        // A peek, a wait or a take of permits: the full form.
        assert!(arguments(&key(Kind::Gcra), Request::peeking(1), leases, server).len() > 12);
        assert!(arguments(&key(Kind::Gcra), Request::new(1).waiting(1), leases, server).len() > 12);
        let permits = Request::new(1).taking(Take::Permits);
        assert!(arguments(&key(Kind::Gcra), permits, leases, server).len() > 12);
    }

    #[test]
    fn moves_follow_the_limits_with_their_instant_before_now() {
        let mut remote = key(Kind::Gcra);
        let from = Limit::new("6/s".parse().unwrap(), None, Kind::Gcra).unwrap();
        remote.moves.push(LimitMove { index: 0, seq: 5 << 32, at: 2 * NANOS_PER_SEC, from, to: None });
        let args = move_arguments(&remote, Caller { node: "n1", now: 3 * NANOS_PER_SEC, manual: true, standing: None });
        assert_eq!(args[5], "move");
        let moves = &args[12 + 7..];
        assert_eq!(moves[..4], ["1", "1", &(5_u64 << 32).to_string(), "-1000000000"]);
        assert_eq!(moves[4], "gcra");
        // A limit that is gone: an empty kind.
        assert_eq!(moves[11..], ["", "0", "0", "0", "0", "0", "0"]);
    }

    #[test]
    fn replies_become_verdicts_and_reports() {
        let reply: Vec<String> = ["0", "0", "-1", "2", "5", "0", "rate", "1", "9", "4"].map(String::from).to_vec();
        let (verdict, reports) = parse_reply(&key(Kind::Gcra), &reply).unwrap();
        let now = 2 * NANOS_PER_SEC + 5;
        let refused_by = Some(Refusal::Rate);
        assert_eq!(verdict, Verdict { allowed: false, wait_ns: 0, retry_ns: u64::MAX, now, written: 0, refused_by });
        let report = reports.unwrap()[0];
        assert_eq!((report.limit, report.remaining, report.reset_after_ns, report.next_ns), (3, 1, 9, 4));
        assert!(parse_reply(&key(Kind::Gcra), &["x".into()]).is_err());
    }

    #[test]
    fn what_the_script_cannot_run_exactly_is_refused() {
        check_limit(&Limit::concurrency(3).unwrap()).unwrap();
        check_limit(&Limit::new("3/s".parse().unwrap(), None, Kind::SlidingLog).unwrap()).unwrap();
        // One member per unit: a sliding log of 2^32 - 1 would block Redis adding them.
        let huge_log = Limit::new("4294967295/s".parse().unwrap(), None, Kind::SlidingLog).unwrap();
        assert!(check_limit(&huge_log).unwrap_err().to_string().contains("100000"));
        assert!(check_limit(&Limit::concurrency(100_001).unwrap()).is_err());
        let year = Limit::new("3/365d".parse().unwrap(), None, Kind::Gcra).unwrap();
        // 10^9/s: an interval of exactly 1 ns, no remainder to add up.
        check_limit(&Limit::new("1000000000/s".parse().unwrap(), None, Kind::Gcra).unwrap()).unwrap();
        let odd = Limit::new("4000000007/s".parse().unwrap(), Some(4_000_000_000), Kind::Gcra).unwrap();
        assert!(check_limit(&odd).is_err());
        assert!(check_limit(&year).unwrap_err().to_string().contains("2^53"));
        check_limit(&Limit::new("100/day".parse().unwrap(), None, Kind::SlidingWindow).unwrap()).unwrap();
    }
}
