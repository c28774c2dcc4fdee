//! Criterion benches of the Rust core alone (no Python): one decision on a hot key, over 100k keys,
//! with regex routing, per algorithm, and two threads on distinct keys.

use std::hint::black_box;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use _core::algorithm::{Kind, Limit};
use _core::clock::Clock;
use _core::limiter::{Config, Limiter, RuleSpec};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const HUGE: &str = "1000000000/min";

fn rule(pattern: &str, group: &str, kind: Kind) -> RuleSpec {
    RuleSpec::single(pattern, group, Limit::new(HUGE.parse().unwrap(), None, kind).unwrap())
}

fn limiter(rules: Vec<RuleSpec>) -> Limiter {
    Limiter::new(Config { rules, ..Config::default() }, Clock::monotonic()).unwrap()
}

fn peers(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{:032x}", (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))).collect()
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.throughput(Throughput::Elements(1));
    for kind in [Kind::Gcra, Kind::TokenBucket] {
        let lim = limiter(vec![rule("", "default", kind)]);
        group.bench_function(format!("{}/hot_key", kind.name()), |b| {
            b.iter(|| lim.decide(black_box("alice"), None, 1, 0, false).outcome.allowed);
        });
        let keys = peers(100_000);
        let mut i = 0;
        group.bench_function(format!("{}/100k_keys", kind.name()), |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                lim.decide(black_box(&keys[i]), None, 1, 0, false).outcome.allowed
            });
        });
    }
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
            lim.decide(black_box("alice"), Some(paths[i]), 1, 0, false).outcome.allowed
        });
    });
    group.bench_function("gcra/check_with_report", |b| {
        b.iter(|| lim.decide(black_box("alice"), None, 1, 0, true).report);
    });
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
                    black_box(lim.decide(&keys[i % keys.len()], None, 1, 0, false));
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

criterion_group!(benches, decisions, scaling);
criterion_main!(benches);
