use std::sync::Arc;

use super::*;
use crate::algorithm::{Kind, Limit, Outcome};
use crate::clock::{Clock, ManualClock};
use crate::config::{Pattern, Policy, RuleSpec, RulesConfig};
use crate::metrics::GroupCounters;

/// A decision for `path` as the tests before `Request` wrote it.
pub(crate) fn decide(
    lim: &Limiter,
    peer: &str,
    path: Option<&str>,
    cost: u64,
    max_wait: u64,
    report: bool,
) -> Decision {
    let request = Request { cost, max_wait_ns: max_wait, report, take: Take::Rates, peek: false, counts_refusal: true };
    lim.decide(peer, Target::Path(path), request).unwrap()
}

const S: u64 = 1_000_000_000;

fn limit(rate: &str, kind: Kind) -> Limit {
    Limit::new(rate.parse().unwrap(), None, kind).unwrap()
}

fn rule(pattern: &str, group: &str, rate: &str) -> RuleSpec {
    RuleSpec::single(pattern, group, limit(rate, Kind::Gcra)).unwrap()
}

fn limiter(rules: Vec<RuleSpec>) -> (Limiter, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    let config = Config {
        rules: RulesConfig { rules, exempt_peers: vec!["admin".into()], exempt_paths: vec!["^/health".into()] },
        ..Config::default()
    };
    (Limiter::new(config, Clock::Manual(clock.clone()), crate::state_map::StatesIn::Heap).unwrap(), clock)
}

fn allowed(lim: &Limiter, peer: &str, path: Option<&str>) -> bool {
    decide(lim, peer, path, 1, 0, false).outcome.allowed
}

#[test]
fn peers_and_groups_are_limited_separately() {
    let (lim, clock) = limiter(vec![rule("^/api/", "api", "2/s"), rule("", "default", "1/s")]);
    assert!(allowed(&lim, "a", Some("/api/x")));
    assert!(allowed(&lim, "a", Some("/api/y")));
    assert!(!allowed(&lim, "a", Some("/api/z")));
    assert!(allowed(&lim, "b", Some("/api/z")));
    assert!(allowed(&lim, "a", Some("/other")));
    assert!(!allowed(&lim, "a", None));
    clock.advance_ns(S);
    assert!(allowed(&lim, "a", None));
    let stats = lim.stats();
    assert_eq!(
        stats.groups[0].counters,
        GroupCounters { requests: 4, allowed: 3, refused: 1, delayed: 0, ..GroupCounters::default() }
    );
    assert_eq!(stats.keys, 3);
}

#[test]
fn exempt_and_disabled_requests_touch_no_state() {
    let (lim, _) = limiter(vec![rule("", "default", "1/min")]);
    for _ in 0..5 {
        assert!(allowed(&lim, "admin", Some("/x")));
        assert!(allowed(&lim, "p", Some("/health")));
    }
    assert_eq!(lim.len(), 0);
    assert_eq!(lim.stats().exempt, 10);
    lim.set_enabled(false);
    assert!(allowed(&lim, "p", None) && allowed(&lim, "p", None));
    assert_eq!(lim.len(), 0);
    lim.set_enabled(true);
    assert!(allowed(&lim, "p", None));
    assert!(!allowed(&lim, "p", None));
}

#[test]
fn reset_forgets_one_peer_or_all() {
    let (lim, _) = limiter(vec![rule("", "default", "1/min")]);
    assert!(allowed(&lim, "a", None) && allowed(&lim, "b", None));
    lim.reset(Some("a"));
    assert!(allowed(&lim, "a", None));
    assert!(!allowed(&lim, "b", None));
    lim.reset(None);
    assert!(lim.is_empty());
}

#[test]
fn a_group_defined_twice_must_agree() {
    let err = Limiter::new(
        Config {
            rules: RulesConfig {
                rules: vec![rule("^/a", "g", "1/s"), rule("^/b", "g", "2/s")],
                ..RulesConfig::default()
            },
            ..Config::default()
        },
        Clock::monotonic(),
        crate::state_map::StatesIn::Heap,
    )
    .unwrap_err();
    assert_eq!(err.path(), "rules[1].group");
}

#[test]
fn refund_returns_a_reserved_slot() {
    let (lim, _) = limiter(vec![rule("", "default", "1/s")]);
    assert_eq!(decide(&lim, "a", None, 1, u64::MAX, false).outcome.wait_ns, 0);
    let second = decide(&lim, "a", None, 1, u64::MAX, false);
    assert_eq!(second.outcome.wait_ns, S);
    lim.refund("a", None.into(), 1, second.receipt).unwrap();
    assert_eq!(decide(&lim, "a", None, 1, u64::MAX, false).outcome.wait_ns, S);
    // The wait given back is not counted as delayed: only the one still reserved is.
    assert_eq!(lim.stats().groups[0].counters.delayed, 1);
}

fn group(limits: Vec<Limit>, policy: Policy) -> (Limiter, Arc<ManualClock>) {
    limiter(vec![RuleSpec { pattern: Pattern::new("").unwrap(), group: "g".into(), limits, policy, reduction: true }])
}

#[test]
fn all_policy_is_all_or_nothing() {
    // 2/s and 3/min: the per-minute limit refuses the fourth request without the per-second one
    // spending anything.
    let (lim, clock) = group(vec![limit("2/s", Kind::Gcra), limit("3/min", Kind::SlidingWindow)], Policy::All);
    assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
    assert!(!allowed(&lim, "a", None));
    clock.advance_ns(S);
    assert!(allowed(&lim, "a", None));
    let refused = decide(&lim, "a", None, 1, 0, true);
    assert!(!refused.outcome.allowed);
    // Refused by the minute limit: the second limit still has both its slots.
    assert_eq!(refused.report.unwrap().remaining, 0);
    clock.advance_ns(119 * S);
    assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
}

#[test]
fn fallback_policy_tries_the_next_limit() {
    // The node limiter's case: a sliding window of 2/s, then a leaky bucket of 3 tokens leaking 3 per 30 s.
    let (lim, clock) =
        group(vec![limit("2/s", Kind::SlidingWindow), limit("3/30s", Kind::LeakyBucket)], Policy::Fallback);
    let admitted = (0..10).filter(|_| allowed(&lim, "a", None)).count();
    assert_eq!(admitted, 5);
    clock.advance_ns(S);
    let report = decide(&lim, "a", None, 1, 0, true).report.unwrap();
    assert_eq!((report.limit, report.remaining), (5, 0));
    assert!(lim.reduce("a", None.into(), 2).unwrap());
    assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
}

#[test]
fn waiters_reserve_across_all_limits_at_one_instant() {
    let (lim, _) = group(vec![limit("1/s", Kind::Gcra), limit("2/10s", Kind::FixedWindow)], Policy::All);
    let waits: Vec<u64> = (0..4).map(|_| decide(&lim, "a", None, 1, u64::MAX, false).outcome.wait_ns).collect();
    assert_eq!(waits, [0, S, 10 * S, 11 * S]);
}

fn acquire(lim: &Limiter, peer: &str) -> Decision {
    lim.decide(peer, Target::Path(None), Request::new(1).taking(Take::RatesAndPermits)).unwrap()
}

#[test]
fn concurrency_permits_are_gates_taken_by_acquire() {
    let (lim, _) = group(vec![limit("100/s", Kind::Gcra), Limit::concurrency(2).unwrap()], Policy::All);
    assert!(acquire(&lim, "a").outcome.allowed);
    assert!(acquire(&lim, "a").outcome.allowed);
    let third = acquire(&lim, "a");
    assert_eq!((third.outcome, third.refused_by), (Outcome::refused(0), Some(Refusal::Concurrency)));
    // Plain decisions do not take permits.
    assert!(allowed(&lim, "a", None));
    lim.release("a", None.into(), 1).unwrap();
    assert!(acquire(&lim, "a").outcome.allowed);
}

#[test]
fn sliding_log_keys_keep_their_stamps_beside_the_slot() {
    let (lim, clock) = group(vec![limit("2/10s", Kind::SlidingLog)], Policy::All);
    assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
    assert_eq!(decide(&lim, "a", None, 1, 0, false).outcome.retry_after_ns, 10 * S);
    clock.advance_ns(10 * S);
    assert!(allowed(&lim, "a", None));
    lim.reset(Some("a"));
    assert!(allowed(&lim, "a", None) && allowed(&lim, "a", None));
}

#[test]
fn reduction_can_be_disabled() {
    let (lim, _) = limiter(vec![RuleSpec {
        pattern: Pattern::new("").unwrap(),
        group: "g".into(),
        limits: vec![limit("1/min", Kind::LeakyBucket)],
        policy: Policy::All,
        reduction: false,
    }]);
    assert!(allowed(&lim, "a", None));
    assert!(!lim.reduce("a", None.into(), 1).unwrap());
    assert!(!allowed(&lim, "a", None));
}

#[test]
fn concurrent_updates_of_different_groups_all_take_effect() {
    // Before, update_rule read the rules outside the reconfiguration lock: of two concurrent updates
    // one was often lost. Eight threads, each updating its own group, many rounds.
    let groups: Vec<String> = (0..8).map(|i| format!("g{i}")).collect();
    let rules = groups.iter().map(|g| rule(&format!("^/{g}"), g, "1/s")).collect();
    let (lim, _) = limiter(rules);
    for round in 2..40u64 {
        std::thread::scope(|s| {
            for g in &groups {
                let lim = &lim;
                s.spawn(move || lim.update_rule(g, Some(format!("{round}/s").parse().unwrap()), None).unwrap());
            }
        });
        let rules = lim.rules();
        for g in &rules.groups {
            assert_eq!(g.limits[0].rate.unwrap().count, round, "{} lost its update in round {round}", g.name);
        }
    }
}

#[test]
fn a_group_named_by_the_caller_is_decided_without_routing() {
    let (lim, _) = limiter(vec![rule("^/login$", "login", "2/min"), rule("", "default", "100/min")]);
    let by_name = |peer| lim.decide(peer, Target::Group("login"), Request::new(1)).unwrap();
    assert!(by_name("a").outcome.allowed);
    // The same key as requests routed to the group by path.
    assert!(allowed(&lim, "a", Some("/login")));
    assert!(!by_name("a").outcome.allowed);
    assert_eq!(by_name("admin").route, Route::Exempt(Some(0)));
    let unknown = lim.decide("a", Target::Group("nope"), Request::new(1)).unwrap_err();
    assert_eq!(unknown.path(), "group");
}

#[test]
fn permits_alone_do_not_charge_the_rate_limits() {
    let (lim, _) = group(vec![limit("2/min", Kind::Gcra), Limit::concurrency(5).unwrap()], Policy::All);
    let permits = Request::new(1).taking(Take::Permits).reporting();
    assert!(allowed(&lim, "a", None));
    for _ in 0..3 {
        assert!(lim.decide("a", Target::Path(None), permits).unwrap().outcome.allowed);
    }
    // Three permits held, one admission charged: the rate limit still admits its second request.
    let second = decide(&lim, "a", None, 1, 0, true);
    assert_eq!((second.outcome.allowed, second.report.unwrap().remaining), (true, 0));
    let gates = lim.decide("a", Target::Path(None), Request::new(3).taking(Take::Permits)).unwrap();
    assert_eq!((gates.outcome.allowed, gates.refused_by), (false, Some(Refusal::Concurrency)));
}

#[test]
fn permits_after_a_rate_admission_are_the_same_request_in_the_counters() {
    let (lim, _) = group(vec![limit("10/min", Kind::Gcra), Limit::concurrency(1).unwrap()], Policy::All);
    let permits = Request::new(1).taking(Take::Permits);
    // Admitted at its rate, then its permit: one request.
    assert!(allowed(&lim, "a", None));
    assert!(lim.decide("a", Target::Path(None), permits).unwrap().outcome.allowed);
    // Admitted at its rate, then refused its permit (the first holds it): one request, refused.
    assert!(allowed(&lim, "a", None));
    assert!(!lim.decide("a", Target::Path(None), permits).unwrap().outcome.allowed);
    let counters = lim.stats().groups[0].counters;
    assert_eq!((counters.requests, counters.allowed, counters.refused), (2, 1, 1));
    assert_eq!(lim.top_refused(1, None).unwrap().peers, [("a".to_owned(), 1)]);
}

#[test]
fn usage_is_drained_once_and_absorbed_usage_refuses() {
    let clock = Arc::new(ManualClock::new(0));
    let config = Config {
        rules: RulesConfig { rules: vec![rule("", "g", "5/min")], ..RulesConfig::default() },
        track_usage: true,
        ..Config::default()
    };
    let lim = Limiter::new(config, Clock::Manual(clock.clone()), crate::state_map::StatesIn::Heap).unwrap();
    assert!(decide(&lim, "a", None, 2, 0, false).outcome.allowed);
    assert!(allowed(&lim, "a", None));
    assert_eq!(lim.drain_pending().unwrap(), [("a".to_owned(), "g".to_owned(), 3)]);
    assert!(lim.drain_pending().unwrap().is_empty());
    // Two used here, three elsewhere: the key is full until they drain at 12 s a request.
    lim.absorb("a", "g", 2).unwrap();
    assert!(!allowed(&lim, "a", None));
    clock.advance_ns(12 * S);
    assert!(allowed(&lim, "a", None));
    assert!(lim.drain_pending().unwrap().iter().all(|(_, _, units)| *units == 1));
}

#[test]
fn a_reservation_given_back_is_not_counted_as_delayed_nor_as_usage() {
    let (lim, _) = limiter(vec![rule("", "default", "1/s")]);
    assert!(allowed(&lim, "a", None));
    let waiter = decide(&lim, "a", None, 1, u64::MAX, false);
    assert!(waiter.receipt.wait_ns > 0);
    assert_eq!(lim.stats().groups[0].counters.delayed, 1);
    lim.refund("a", Target::Path(None), 1, waiter.receipt).unwrap();
    assert_eq!(lim.stats().groups[0].counters.delayed, 0);
}

#[test]
fn stats_count_keys_evictions_and_exemptions_by_group() {
    let clock = Arc::new(ManualClock::new(0));
    let rules = vec![rule("^/a", "a", "1/min"), rule("^/b", "b", "1/min")];
    let config = Config {
        rules: RulesConfig { rules, exempt_peers: vec!["admin".into()], ..RulesConfig::default() },
        max_keys: 256,
        ..Config::default()
    };
    let lim = Limiter::new(config, Clock::Manual(clock), crate::state_map::StatesIn::Heap).unwrap();
    // Used often: the flood of one-shot keys in the other group does not evict it.
    assert!(allowed(&lim, "b-peer", Some("/b")));
    for _ in 0..20 {
        assert!(!allowed(&lim, "b-peer", Some("/b")));
    }
    assert!(allowed(&lim, "admin", Some("/b")));
    for i in 0..600 {
        allowed(&lim, &format!("peer{i}"), Some("/a"));
    }
    let stats = lim.stats();
    let (a, b) = (&stats.groups[0], &stats.groups[1]);
    assert!(a.evictions > 300 && a.keys <= 256, "{a:?}");
    assert_eq!((b.evictions, b.keys, b.counters.exempt), (0, 1, 1));
    assert_eq!(stats.exempt, 1);
    assert_eq!(a.keys + b.keys, stats.keys as u64);
}

/// The moves a remote store is sent for `alice`'s key in `group`.
fn moves_of(lim: &Limiter, group: &str) -> Vec<LimitMove> {
    match lim.route_remote("alice", Target::Group(group)).unwrap() {
        Routed::Limited(key) => key.moves,
        Routed::Free(_) => panic!("{group} limits nothing"),
    }
}

#[test]
fn a_change_of_limits_is_a_move_remembered_with_its_instant() {
    let (lim, clock) = limiter(vec![rule("^/a", "a", "60/min"), rule("^/b", "b", "10/s")]);
    clock.advance_ns(5 * S);
    lim.update_rule("a", Some("6/min".parse().unwrap()), None).unwrap();
    let moves = moves_of(&lim, "a");
    assert_eq!(moves.len(), 1);
    let m = &moves[0];
    assert_eq!((m.index, m.at), (0, 5 * S));
    assert_eq!((m.from, m.to), (limit("60/min", Kind::Gcra), Some(limit("6/min", Kind::Gcra))));
    // The other group did not move; a later state has seen the move.
    assert!(moves_of(&lim, "b").is_empty());
    let Routed::Limited(key) = lim.route_remote("alice", Target::Group("a")).unwrap() else { unreachable!() };
    assert!(key.head >= m.seq);
}

#[test]
fn a_key_with_a_quota_moves_through_its_quota_and_a_quota_move_comes_last() {
    let (lim, clock) = limiter(vec![rule("^/a", "a", "60/min")]);
    lim.set_quota("alice", "a", Some("120/min".parse().unwrap())).unwrap();
    clock.advance_ns(S);
    // The rule's burst changes: the quota keeps its rate and takes the new burst.
    lim.update_rule("a", None, Some(30)).unwrap();
    let moves = moves_of(&lim, "a");
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].from.rate, Some("120/min".parse().unwrap()));
    assert_eq!(moves[0].to.and_then(|l| l.rate), Some("120/min".parse().unwrap()));
    assert_eq!(moves[0].to.map(|l| l.burst), Some(30));
    let key = lim.set_quota_moving("alice", "a", Some("10/min".parse().unwrap())).unwrap().unwrap();
    let last = key.moves.last().unwrap();
    assert!(last.seq > key.head, "a quota move is newer than every state written before it");
    assert_eq!(last.to.and_then(|l| l.rate), Some("10/min".parse().unwrap()));
    assert_eq!(key.limits[0].rate, Some("10/min".parse().unwrap()));
    // Setting the same quota again moves nothing.
    assert!(lim.set_quota_moving("alice", "a", Some("10/min".parse().unwrap())).unwrap().is_none());
}

#[test]
fn a_removed_group_added_back_sends_the_removal_so_that_old_states_go() {
    let (lim, clock) = limiter(vec![rule("^/a", "a", "60/min"), rule("^/b", "b", "10/s")]);
    let config = |rules| RulesConfig { rules, exempt_peers: vec![], exempt_paths: vec![] };
    lim.reconfigure(config(vec![rule("^/a", "a", "60/min")])).unwrap();
    clock.advance_ns(S);
    lim.reconfigure(config(vec![rule("^/a", "a", "60/min"), rule("^/b", "b", "10/s")])).unwrap();
    let moves = moves_of(&lim, "b");
    assert_eq!(moves.len(), 1);
    assert_eq!((moves[0].at, moves[0].to), (0, None));
    // A change before the removal is replayed first, so that a state written before it reaches the removal.
    lim.update_rule("b", None, Some(1)).unwrap();
    lim.reconfigure(config(vec![rule("^/a", "a", "60/min")])).unwrap();
    lim.reconfigure(config(vec![rule("^/a", "a", "60/min"), rule("^/b", "b", "10/s")])).unwrap();
    let tos: Vec<Option<u32>> = moves_of(&lim, "b").iter().map(|m| m.to.map(|l| l.burst)).collect();
    assert_eq!(tos, [None, Some(1), None]);
    assert!(moves_of(&lim, "a").is_empty(), "an unchanged group has nothing to replay");
}

#[test]
fn moves_are_forgotten_once_no_state_written_before_them_can_remain() {
    let (lim, clock) = limiter(vec![rule("^/a", "a", "60/min")]);
    lim.update_rule("a", Some("30/min".parse().unwrap()), None).unwrap();
    assert_eq!(moves_of(&lim, "a").len(), 1);
    // Four horizons (here about 4 minutes) later, the next change forgets it.
    clock.advance_ns(10 * 60 * S);
    lim.update_rule("a", Some("20/min".parse().unwrap()), None).unwrap();
    let moves = moves_of(&lim, "a");
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].from, limit("30/min", Kind::Gcra));
    // And never more than 32 are kept.
    for i in 0..40 {
        lim.update_rule("a", Some(format!("{}/min", 10 + i % 2).parse().unwrap()), None).unwrap();
    }
    assert_eq!(moves_of(&lim, "a").len(), 32);
}

#[test]
fn a_limit_that_turns_from_a_rate_into_permits_starts_empty() {
    let rate = limit("2/min", Kind::Gcra);
    let permits = Limit::concurrency(5).unwrap();
    let (lim, _) = group(vec![rate], Policy::All);
    assert!(allowed(&lim, "alice", Some("/")) && allowed(&lim, "alice", Some("/")));
    let spec = |limits| RuleSpec { limits, ..RuleSpec::single("", "default", rate).unwrap() };
    lim.reconfigure(RulesConfig { rules: vec![spec(vec![permits])], exempt_peers: vec![], exempt_paths: vec![] })
        .unwrap();
    let request = Request::new(5).reporting().taking(Take::Permits);
    assert!(lim.decide("alice", Target::Path(Some("/")), request).unwrap().outcome.allowed, "all 5 permits free");
}

/// A limiter of `rules` on the shared region at `path` (made by the first call), on `clock`.
fn shared_limiter(path: &std::path::Path, rules: Vec<RuleSpec>, clock: &Arc<ManualClock>) -> Limiter {
    let config =
        Config { rules: RulesConfig { rules, ..RulesConfig::default() }, max_keys: 1_000, ..Config::default() };
    let region = Arc::new(crate::state_map::region::layout::SharedRegion::open(path, 1_000, 1_000).unwrap());
    Limiter::new(
        config,
        Clock::Manual(clock.clone()),
        crate::state_map::StatesIn::Region(region, crate::limiter::OnStall::Allow),
    )
    .unwrap()
}

fn region_path(test: &str) -> std::path::PathBuf {
    crate::state_map::region::test_dir("limiter", test).join("region")
}

#[test]
fn limiters_on_one_region_share_keys_groups_and_counts() {
    let path = region_path("share");
    let clock = Arc::new(ManualClock::new(0));
    let first = shared_limiter(&path, vec![rule("^/a", "a", "3/min"), rule("^/x", "b", "2/min")], &clock);
    // Another process's rules name the groups in another order: ids come from the region, not the order.
    let second = shared_limiter(&path, vec![rule("^/x", "b", "2/min"), rule("^/a", "a", "3/min")], &clock);
    let admitted: usize =
        [&first, &second, &first, &second].iter().map(|lim| usize::from(allowed(lim, "alice", Some("/a")))).sum();
    assert_eq!(admitted, 3);
    assert!(allowed(&second, "alice", Some("/x")) && allowed(&first, "alice", Some("/x")));
    assert!(!allowed(&second, "alice", Some("/x")));
    let summary = first.shared_summary().unwrap();
    assert_eq!((summary.allowed, summary.refused, summary.keys), (5, 2, 2));
    assert_eq!(summary.top_refused, vec![("alice".to_owned(), 2)]);
    assert_eq!(first.len(), 2);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_process_with_other_limits_carries_the_usage_over() {
    let path = region_path("adopt");
    let clock = Arc::new(ManualClock::new(0));
    let old = shared_limiter(&path, vec![rule("", "g", "10/min")], &clock);
    for _ in 0..6 {
        assert!(allowed(&old, "alice", None));
    }
    // As `update_rule` would: 6 of 10 used becomes 6 of 20 used, not a fresh 20.
    let new = shared_limiter(&path, vec![rule("", "g", "20/min")], &clock);
    let admitted = (0..30).filter(|_| allowed(&new, "alice", None)).count();
    assert_eq!(admitted, 14);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_reset_and_a_reconfiguration_reach_the_region() {
    let path = region_path("reset");
    let clock = Arc::new(ManualClock::new(0));
    let first = shared_limiter(&path, vec![rule("", "g", "2/min")], &clock);
    let second = shared_limiter(&path, vec![rule("", "g", "2/min")], &clock);
    assert!(allowed(&first, "alice", None) && allowed(&first, "alice", None));
    assert!(!allowed(&second, "alice", None));
    first.reset(Some("alice"));
    assert!(allowed(&second, "alice", None));
    first.update_rule("g", Some("10/min".parse().unwrap()), None).unwrap();
    // The state moved to 10/min in the region: one used of ten.
    let admitted = (0..20).filter(|_| allowed(&first, "alice", None)).count();
    assert_eq!(admitted, 9);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_process_killed_holding_a_shard_hands_it_on_whole() {
    let path = region_path("killed");
    let clock = Arc::new(ManualClock::new(0));
    let lim = shared_limiter(&path, vec![rule("", "g", "3/min")], &clock);
    assert!(allowed(&lim, "alice", None));
    let peer_hash = lim.hasher.hash_one("alice");
    // SAFETY: the child only locks a shard, writes to the region and kills itself.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut shard = lim.states.lock(peer_hash);
        shard.store(
            12_345 << 8,
            crate::algorithm::State { t: u64::MAX, a: 1, b: 0 },
            0,
            (crate::state_map::Owner::new(0, 0), &limit("3/min", Kind::Gcra)),
        );
        // SAFETY: dies holding the shard's region lock, mid-decision as far as anybody knows.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &raw mut status, 0) };
    assert!(libc::WIFSIGNALED(status));
    let started = std::time::Instant::now();
    // The next decision on the shard takes the lock at once, repairs the shard and decides as before.
    assert!(allowed(&lim, "alice", None) && allowed(&lim, "alice", None));
    assert!(!allowed(&lim, "alice", None));
    assert!(started.elapsed() < std::time::Duration::from_millis(100));
    let summary = lim.shared_summary().unwrap();
    assert_eq!(summary.keys, 2, "alice's state and the dead process's write, each once");
    assert_eq!(lim.len(), 2);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

const RATE_KINDS: [Kind; 6] =
    [Kind::Gcra, Kind::TokenBucket, Kind::FixedWindow, Kind::SlidingWindow, Kind::SlidingLog, Kind::LeakyBucket];

fn rule_of(rate: &str, kind: Kind) -> RuleSpec {
    RuleSpec::single("", "g", limit(rate, kind)).unwrap()
}

#[test]
fn processes_with_other_algorithms_interleaved_never_admit_more_than_the_largest_burst() {
    let clock = Arc::new(ManualClock::new(0));
    for (i, &a) in RATE_KINDS.iter().enumerate() {
        for (j, &b) in RATE_KINDS.iter().enumerate() {
            for (rate_a, rate_b) in [("10/hour", "10/hour"), ("5/hour", "20/hour"), ("20/hour", "5/hour")] {
                let path = region_path(&format!("pairs-{i}-{j}-{rate_a}"));
                let first = shared_limiter(&path, vec![rule_of(rate_a, a)], &clock);
                let second = shared_limiter(&path, vec![rule_of(rate_b, b)], &clock);
                // As a rolling deploy interleaves old and new workers, at one instant.
                let admitted =
                    (0..100).filter(|n| allowed(if n % 3 == 0 { &first } else { &second }, "alice", None)).count();
                let count = |rate: &str| rate.split('/').next().unwrap().parse::<usize>().unwrap();
                let largest = count(rate_a).max(count(rate_b));
                assert!(admitted <= largest, "{a:?} {rate_a} with {b:?} {rate_b}: {admitted} admitted");
                // And one within both limits is never refused: the first five of a fresh key.
                let fresh = (0..5).filter(|n| allowed(if n % 2 == 0 { &first } else { &second }, "bob", None)).count();
                assert_eq!(fresh, 5, "{a:?} {rate_a} with {b:?} {rate_b}");
                std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
            }
        }
    }
}

#[test]
fn a_reload_in_one_process_never_lets_the_others_admit_more() {
    let clock = Arc::new(ManualClock::new(0));
    for (i, &kind) in RATE_KINDS.iter().enumerate() {
        let path = region_path(&format!("reload-{i}"));
        let flapping = shared_limiter(&path, vec![rule_of("10/hour", kind)], &clock);
        let steady = shared_limiter(&path, vec![rule_of("10/hour", kind)], &clock);
        let mut admitted = 0;
        for round in 0..40 {
            let rate = ["20/hour", "10/hour", "5/hour", "15/hour"][round % 4];
            flapping.update_rule("g", Some(rate.parse().unwrap()), None).unwrap();
            admitted += usize::from(allowed(&steady, "alice", None));
            admitted += usize::from(allowed(&flapping, "alice", None));
            clock.advance_ns(S);
        }
        // 40 s of an hour's rates: at most the largest burst in force, 20.
        assert!(admitted <= 20, "{kind:?}: {admitted} admitted");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}

#[test]
fn a_removed_region_file_is_made_anew_and_the_states_carried_into_it() {
    let path = region_path("removed");
    let clock = Arc::new(ManualClock::new(0));
    let old = shared_limiter(&path, vec![rule("", "g", "10/hour")], &clock);
    let other_old = shared_limiter(&path, vec![rule("", "g", "10/hour")], &clock);
    assert_eq!((0..6).filter(|_| allowed(&old, "alice", None)).count(), 6);
    std::fs::remove_file(&path).unwrap();
    // A process started since makes a new file and decides in it: alice is fresh there.
    let started = shared_limiter(&path, vec![rule("", "g", "10/hour")], &clock);
    assert_eq!((0..3).filter(|_| allowed(&started, "alice", None)).count(), 3);
    // The old processes notice at their next decision after the check interval, and carry what alice
    // used into the file now at the path: 6 + 3 of 10 used.
    clock.advance_ns(crate::state_map::region::attached::REGION_CHECK_NS);
    let admitted = (0..10).filter(|n| allowed(if n % 2 == 0 { &old } else { &other_old }, "alice", None)).count()
        + (0..10).filter(|_| allowed(&started, "alice", None)).count();
    assert_eq!(admitted, 1);
    assert!(allowed(&old, "bob", None), "bob was never refused");
    assert_eq!(old.shared_summary().unwrap().path, started.shared_summary().unwrap().path);
    assert_eq!(old.shared_summary().unwrap().keys, 2, "alice and bob, each once");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_region_removed_with_nobody_starting_meanwhile_loses_nothing() {
    let path = region_path("removed-alone");
    let clock = Arc::new(ManualClock::new(0));
    let first = shared_limiter(&path, vec![rule("", "g", "5/hour"), rule("^/x", "x", "2/hour")], &clock);
    let second = shared_limiter(&path, vec![rule("^/x", "x", "2/hour"), rule("", "g", "5/hour")], &clock);
    assert_eq!((0..5).filter(|_| allowed(&first, "alice", None)).count(), 5);
    assert_eq!((0..2).filter(|_| allowed(&second, "alice", Some("/x"))).count(), 2);
    std::fs::remove_file(&path).unwrap();
    first.check_region_now();
    second.check_region_now();
    assert!(!allowed(&first, "alice", None) && !allowed(&second, "alice", None));
    assert!(!allowed(&first, "alice", Some("/x")) && !allowed(&second, "alice", Some("/x")));
    assert!(path.exists(), "the first to notice made the file anew");
    let after = shared_limiter(&path, vec![rule("", "g", "5/hour")], &clock);
    assert!(!allowed(&after, "alice", None), "a process started after the move sees alice spent");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_process_stopped_holding_a_shard_stalls_a_decision_at_most_the_deadline_then_on_stall_decides() {
    let path = region_path("stopped");
    let clock = Arc::new(ManualClock::new(0));
    let config =
        |rules| Config { rules: RulesConfig { rules, ..RulesConfig::default() }, max_keys: 1_000, ..Config::default() };
    let open = || Arc::new(crate::state_map::region::layout::SharedRegion::open(&path, 1_000, 1_000).unwrap());
    let allowing = shared_limiter(&path, vec![rule("", "g", "1/hour")], &clock);
    let denying = Limiter::new(
        config(vec![rule("", "g", "1/hour")]),
        Clock::Manual(clock.clone()),
        crate::state_map::StatesIn::Region(open(), crate::limiter::OnStall::Deny),
    )
    .unwrap();
    assert!(allowed(&allowing, "alice", None));
    let peer_hash = allowing.hasher.hash_one("alice");
    // SAFETY: the child only locks alice's shard and stops itself.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let held = allowing.states.lock(peer_hash);
        // SAFETY: stops this child, holding the lock, until the parent kills it.
        unsafe { libc::raise(libc::SIGSTOP) };
        drop(held);
        // SAFETY: ends the child without running the parent's test harness.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child to stop.
    unsafe { libc::waitpid(pid, &raw mut status, libc::WUNTRACED) };
    assert!(libc::WIFSTOPPED(status));
    let started = std::time::Instant::now();
    let stalled = decide(&allowing, "alice", None, 1, 0, false);
    let waited = started.elapsed();
    assert!(stalled.outcome.allowed, "decided by on_stall='allow' without alice's state (spent)");
    assert!(waited >= crate::state_map::STALL, "waited {waited:?}");
    assert!(waited < std::time::Duration::from_secs(10), "waited {waited:?}: not bounded");
    let refused = decide(&denying, "alice", None, 1, 0, false);
    assert!(!refused.outcome.allowed && refused.outcome.retry_after_ns > 0);
    assert_eq!((allowing.stalls(), denying.stalls()), (1, 1));
    // Another key's shard is not held: decided on its state at once.
    let shift = 64 - allowing.states.shared_region().unwrap().shards().trailing_zeros();
    let other = (0..1_000)
        .map(|i| format!("peer-{i}"))
        .find(|p| allowing.hasher.hash_one(p.as_str()) >> shift != peer_hash >> shift)
        .unwrap();
    assert!(allowed(&allowing, &other, None) && !allowed(&allowing, &other, None));
    // SAFETY: our stopped child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, &raw mut status, 0);
    }
    // The dead holder's lock is taken at once, the shard repaired: alice is spent as before.
    assert!(!allowed(&allowing, "alice", None));
    assert_eq!(allowing.stalls(), 1);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// The shard holding each state of the region: (shard, identity) pairs.
fn region_states(region: &SharedRegion) -> std::collections::HashSet<(usize, u64)> {
    (0..region.shards())
        .flat_map(|shard| {
            let _held = region.lock(shard);
            region.table(shard).iter().map(|slot| (shard, slot.identity())).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn permits_of_killed_processes_come_back_whatever_their_number_in_a_shard() {
    let dir = crate::state_map::region::test_dir("limiter", "leases");
    let region = std::sync::Arc::new(SharedRegion::open(&dir.join("r"), 1_000, 0).unwrap());
    let rule = RuleSpec::single("", "g", Limit::concurrency(1).unwrap()).unwrap();
    let config = Config {
        rules: RulesConfig { rules: vec![rule], ..RulesConfig::default() },
        max_keys: 1_000,
        ..Config::default()
    };
    let lim = Limiter::new(
        config,
        Clock::Manual(std::sync::Arc::new(ManualClock::new(0))),
        crate::state_map::StatesIn::Region(region.clone(), crate::limiter::OnStall::Allow),
    )
    .unwrap();
    let take = |peer: &str| {
        lim.decide(peer, Target::Path(None), Request::new(1).taking(Take::Permits)).unwrap().outcome.allowed
    };
    // Peers whose permits' states land in one shard: found by taking and giving back a permit.
    let mut by_shard: std::collections::HashMap<usize, Vec<String>> = std::collections::HashMap::new();
    for i in 0..400 {
        let peer = format!("peer-{i}");
        let before = region_states(&region);
        assert!(take(&peer));
        lim.release(&peer, Target::Path(None), 1).unwrap();
        for (shard, _) in region_states(&region).difference(&before) {
            by_shard.entry(*shard).or_default().push(peer.clone());
        }
    }
    let peers = by_shard.into_values().max_by_key(Vec::len).unwrap();
    let peers = &peers[..peers.len().min(24)];
    assert!(peers.len() > 16 + 4, "{} peers in one shard", peers.len());
    let holders: Vec<i32> = peers
        .iter()
        .map(|peer| {
            // SAFETY: the child takes a permit, stops, and is killed.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let code = if take(peer) { libc::SIGSTOP } else { libc::SIGUSR1 };
                // SAFETY: stops (or ends) this child: the parent kills it.
                unsafe { libc::raise(code) };
                unsafe { libc::_exit(1) };
            }
            let mut status = 0;
            // SAFETY: our child; returns once it has stopped holding the permit.
            unsafe { libc::waitpid(pid, &raw mut status, libc::WUNTRACED) };
            assert!(libc::WIFSTOPPED(status), "{peer}: the child took the permit");
            pid
        })
        .collect();
    for peer in peers {
        assert!(!take(peer), "{peer}'s permit is held by a live process");
    }
    for pid in holders {
        // SAFETY: our stopped children, killed holding their permits.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    let lost: Vec<&String> = peers.iter().filter(|peer| !take(peer)).collect();
    assert!(lost.is_empty(), "permits of killed holders never came back: {lost:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn routed_group_names_the_group_resolve_does() {
    let (lim, _) = limiter(vec![rule("^/api/", "api", "5/s"), rule("^/", "rest", "9/s")]);
    for (peer, path) in [("p", Some("/api/x")), ("p", Some("/y")), ("p", None), ("admin", Some("/api/x"))] {
        let resolved = lim.resolve(peer, Target::Path(path)).unwrap().map(|r| r.group);
        assert_eq!(lim.routed_group(peer, path), resolved, "{peer} {path:?}");
    }
    assert_eq!(lim.routed_group("p", Some("/health")), None); // an exempt path
    lim.set_enabled(false);
    assert_eq!(lim.routed_group("p", Some("/api/x")), None);
}
