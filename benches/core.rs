//! Criterion benches of the Rust core alone (no Python): one decision on a hot key, over 100k keys,
//! with regex routing, per algorithm, a group of two limits under `all`, a sliding log holding 10 and
//! 10,000 live stamps, two threads on distinct keys, GCRA with its states in a shared region, and the
//! clocks a decision reads (quanta's, the kernel's, a shared region's).

use std::hint::black_box;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use _core::algorithm::{Kind, Limit};
use _core::clock::{Clock, ManualClock};
use _core::config::{Config, Pattern, Policy, RuleSpec, RulesConfig};
use _core::limiter::{Decision, Limiter, Request};
use _core::rate::Rate;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const HUGE: &str = "1000000000/min";

/// Every algorithm whose state is one 16-byte slot; the sliding log keeps every stamp of its window, so at
/// `HUGE` its memory would grow without bound: it is timed apart, on a manual clock (`sliding_log`).
const SLOT_KINDS: [Kind; 5] =
    [Kind::Gcra, Kind::TokenBucket, Kind::FixedWindow, Kind::SlidingWindow, Kind::LeakyBucket];

fn huge(kind: Kind) -> Limit {
    Limit::new(HUGE.parse().unwrap(), None, kind).unwrap()
}

fn rule(pattern: &str, group: &str, kind: Kind) -> RuleSpec {
    RuleSpec::single(pattern, group, huge(kind)).unwrap()
}

/// One decision for `path`, as `allow` (no report) or `check` (with one) asks for it.
#[inline]
fn decide(lim: &Limiter, peer: &str, path: Option<&str>, report: bool) -> Decision {
    let request = if report { Request::new(1).reporting() } else { Request::new(1) };
    lim.decide_path(peer, path, request)
}

fn limiter(rules: Vec<RuleSpec>) -> Limiter {
    Limiter::new(
        Config { rules: RulesConfig { rules, ..RulesConfig::default() }, ..Config::default() },
        Clock::monotonic(),
        _core::state_map::StatesIn::Heap,
    )
    .unwrap()
}

fn peers(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{:032x}", (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))).collect()
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.throughput(Throughput::Elements(1));
    for kind in SLOT_KINDS {
        let lim = limiter(vec![rule("", "default", kind)]);
        group.bench_function(format!("{}/hot_key", kind.name()), |b| {
            b.iter(|| decide(&lim, black_box("alice"), None, false).outcome.allowed);
        });
        assert!(decide(&lim, "alice", None, false).outcome.allowed, "{} refused", kind.name());
        if matches!(kind, Kind::Gcra | Kind::TokenBucket) {
            let keys = peers(100_000);
            let mut i = 0;
            group.bench_function(format!("{}/100k_keys", kind.name()), |b| {
                b.iter(|| {
                    i = (i + 1) % keys.len();
                    decide(&lim, black_box(&keys[i]), None, false).outcome.allowed
                });
            });
        }
    }
    let lim = limiter(vec![RuleSpec {
        pattern: Pattern::new("").unwrap(),
        group: "default".into(),
        limits: vec![huge(Kind::Gcra), huge(Kind::SlidingWindow)],
        policy: Policy::All,
        reduction: true,
    }]);
    group.bench_function("all_policy_2_limits/hot_key", |b| {
        b.iter(|| decide(&lim, black_box("alice"), None, false).outcome.allowed);
    });
    assert!(decide(&lim, "alice", None, false).outcome.allowed);
    let lim = limiter(vec![
        rule("^/api/v1/", "v1", Kind::Gcra),
        rule("^/api/v2/", "v2", Kind::Gcra),
        rule("^/tx/", "tx", Kind::Gcra),
        rule("", "default", Kind::Gcra),
    ]);
    let paths = ["/api/v1/users", "/api/v2/query", "/tx/abc", "/other"];
    let mut i = 0;
    group.bench_function("gcra/4_rules_path", |b| {
        b.iter(|| {
            i = (i + 1) % paths.len();
            decide(&lim, black_box("alice"), Some(paths[i]), false).outcome.allowed
        });
    });
    group.bench_function("gcra/check_with_report", |b| {
        b.iter(|| decide(&lim, black_box("alice"), None, true).report);
    });
    group.finish();
}

/// Nanoseconds the manual clock moves before each decision of `sliding_log`.
const STEP_NS: u64 = 1_000;

/// A hot key on a manual clock moved `STEP_NS` before each decision. With a window of `live × STEP_NS`, the
/// key's log holds exactly `live` stamps at every decision, so the rows differ only in the log's length:
/// a decision is a binary search (O(log n)) plus an append and a drain at the ends (amortised O(1)).
/// GCRA on the same clock is the reference: a manual clock reads faster than the monotonic one.
fn sliding_log(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide_manual_clock");
    group.throughput(Throughput::Elements(1));
    let rows = [(Kind::Gcra, 1u64), (Kind::SlidingLog, 10), (Kind::SlidingLog, 10_000)];
    for (kind, live) in rows {
        let clock = Arc::new(ManualClock::new(0));
        // Twice the live stamps, so that no decision is refused.
        let rate = Rate::new(2 * live, live * STEP_NS).unwrap();
        let rules = vec![RuleSpec::single("", "default", Limit::new(rate, None, kind).unwrap()).unwrap()];
        let lim = Limiter::new(
            Config { rules: RulesConfig { rules, ..RulesConfig::default() }, ..Config::default() },
            Clock::Manual(Arc::clone(&clock)),
            _core::state_map::StatesIn::Heap,
        )
        .unwrap();
        let name =
            if kind == Kind::SlidingLog { format!("sliding_log/{live}_live_stamps") } else { "gcra/hot_key".into() };
        // Filled to its steady state first, so the check below holds also when a filter skips the row.
        for _ in 0..2 * live {
            clock.advance_ns(STEP_NS);
            decide(&lim, "alice", None, false);
        }
        group.bench_function(name, |b| {
            b.iter(|| {
                clock.advance_ns(STEP_NS);
                decide(&lim, black_box("alice"), None, false).outcome.allowed
            });
        });
        clock.advance_ns(STEP_NS);
        let decision = decide(&lim, "alice", None, true);
        assert!(decision.outcome.allowed, "{} refused", kind.name());
        if kind == Kind::SlidingLog {
            assert_eq!(decision.report.unwrap().remaining, live, "the log does not hold {live} stamps");
        }
    }
    group.finish();
}

/// Time for `threads` threads, each deciding `calls` times over its own `keys_each` keys.
fn threaded(lim: &Arc<Limiter>, threads: usize, keys_each: usize, calls: usize) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let lim = Arc::clone(lim);
            thread::spawn(move || {
                let keys = peers(keys_each).into_iter().map(|k| format!("{t}-{k}")).collect::<Vec<_>>();
                for i in 0..calls {
                    black_box(decide(&lim, &keys[i % keys.len()], None, false));
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    start.elapsed()
}

fn scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads");
    group.sample_size(10);
    // One hot key per thread (in different shards), and 1,000 keys per thread: the second shares shard
    // locks between the threads, whose cache lines then move between cores on most decisions.
    for keys_each in [1usize, 1_000] {
        let lim = Arc::new(limiter(vec![rule("", "default", Kind::Gcra)]));
        for threads in [1usize, 2] {
            group.throughput(Throughput::Elements((threads * 1_000_000) as u64));
            group.bench_function(format!("{threads}_threads_{keys_each}_keys_each"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| threaded(&lim, threads, keys_each, 1_000_000)).sum());
            });
        }
    }
    group.finish();
}

/// GCRA with its states in a shared region (`rk.Shared`), next to the same limiter in memory: a hot key
/// and 100k keys. The region's file is removed once mapped.
fn shared_region(c: &mut Criterion) {
    let path = std::env::temp_dir().join(format!("rk-bench-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let region = Arc::new(_core::state_map::region::layout::SharedRegion::open(&path, 1_000_000, 0).unwrap());
    std::fs::remove_file(&path).unwrap();
    let config = Config {
        rules: RulesConfig { rules: vec![rule("", "default", Kind::Gcra)], ..RulesConfig::default() },
        ..Config::default()
    };
    // The clocks a decision may read: the in-memory limiter's (quanta's TSC), the kernel's, the region's.
    let region_clock = Clock::Region(Arc::new(_core::clock::RegionClock::new(&region)));
    let mut clocks = c.benchmark_group("clock");
    for (name, clock) in [("quanta", Clock::monotonic()), ("kernel", Clock::Machine), ("region", region_clock.clone())]
    {
        clocks.bench_function(name, |b| b.iter(|| black_box(&clock).now_ns()));
    }
    clocks.finish();
    let shared =
        Limiter::new(config, region_clock, _core::state_map::StatesIn::Region(region, _core::limiter::OnStall::Allow))
            .unwrap();
    let memory = limiter(vec![rule("", "default", Kind::Gcra)]);
    let mut group = c.benchmark_group("shared");
    group.throughput(Throughput::Elements(1));
    let keys = peers(100_000);
    for (name, lim) in [("memory", &memory), ("region", &shared)] {
        group.bench_function(format!("gcra/hot_key/{name}"), |b| {
            b.iter(|| decide(lim, black_box("alice"), None, false).outcome.allowed);
        });
        assert!(decide(lim, "alice", None, false).outcome.allowed);
        let mut i = 0;
        group.bench_function(format!("gcra/100k_keys/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                decide(lim, black_box(&keys[i]), None, false).outcome.allowed
            });
        });
    }
    group.finish();
}

criterion_group!(benches, decisions, sliding_log, scaling, shared_region);
criterion_main!(benches);
