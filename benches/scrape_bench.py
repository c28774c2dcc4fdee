"""What a Prometheus scrape of a big limiter costs, and what metrics cost a decision.

What is measured
    A limiter with 100 groups (one regex rule each) holding 1,000,000 states (10,000 peers per group),
    a tenth of them refused once so that the refused-peers sketches are full. Then, median and max of
    20 runs each, in milliseconds:
      stats()                         the read every export starts from (locks one shard at a time)
      collect()                       RateLimitCollector: stats() turned into metric families
      generate_latest(registry)       the whole scrape body, as /metrics serves it
      ... with top_refused=10         the same with the peers refused most

Target (issue 11): a scrape under 5 ms, never walking the keys. The scrape's cost must not depend on
the number of keys: the same is timed at 10,000 states for comparison. A group's rarer series (waits,
reductions, ...) appear once they leave zero; the last rows time the scrape once every group has them.

Usage
    python benches/scrape_bench.py
    python benches/scrape_bench.py --quick     # smoke run: 100,000 states, 3 runs
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import ratekeeper as rk
from machine import describe, write_results
from prometheus_client import CollectorRegistry, generate_latest
from ratekeeper.prometheus import RateLimitCollector

GROUPS = 100
RUNS = 20


def build(states: int) -> rk.Limiter:
    rules = [rk.Rule(f"^/g{i}/", f"g{i}", "1/hour") for i in range(GROUPS)]
    lim = rk.Limiter(rules=rules, max_keys=max(states, 1000), clock=rk.ManualClock())
    per_group = states // GROUPS
    paths = [f"/g{i}/x" for i in range(GROUPS)]
    peers = [f"peer-{n:07d}" for n in range(per_group)]
    for path in paths:
        for peer in peers:
            lim.allow(peer, path)
        for peer in peers[::10]:
            lim.allow(peer, path)  # refused: fills the sketches
    assert len(lim) == per_group * GROUPS, len(lim)
    return lim


def collected(collector: RateLimitCollector) -> list[object]:
    return list(collector.collect())


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    fn()
    runs = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs), max(runs)


def waited_everywhere(lim: rk.Limiter) -> rk.Limiter:
    """Every group's series present: a wait (and so a wait histogram) and a reduction in each group."""
    for i in range(GROUPS):
        lim.throttle("waiter", f"/g{i}/x")
        lim.throttle("waiter", f"/g{i}/x")  # an hour's wait, on the manual clock
        lim.reduce("waiter", f"/g{i}/x")
    return lim


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 100,000 states instead of 1,000,000, 3 runs")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    args = parser.parse_args(argv)
    global RUNS
    big = 100_000 if args.quick else 1_000_000
    RUNS = 3 if args.quick else RUNS
    print("| states | read | median ms | max ms |\n|---:|---|---:|---:|")
    rows = []
    many = build(big)
    cases_of = [(10_000, "", build(10_000)), (big, "", many)]
    for states, label, lim in [*cases_of, (big, "every group waited", None)]:
        lim = lim if lim is not None else waited_everywhere(many)
        plain, top = CollectorRegistry(), CollectorRegistry()
        collector = RateLimitCollector(lim)
        plain.register(collector)
        top.register(RateLimitCollector(lim, top_refused=10))
        cases: list[tuple[str, Callable[[], object]]] = [
            ("stats()", lim.stats),
            ("collect()", partial(collected, collector)),
            ("generate_latest", partial(generate_latest, plain)),
            ("generate_latest, top_refused=10", partial(generate_latest, top)),
        ]
        for name, fn in cases:
            median, worst = timed(fn)
            print(f"| {states:,}{', ' + label if label else ''} | {name} | {median:.2f} | {worst:.2f} |", flush=True)
            rows.append({"states": states, "case": label, "read": name, "median_ms": median, "max_ms": worst})
    machine = describe(["prometheus-client"])
    write_results(args.json, "scrape", {"groups": GROUPS, "rows": rows}, machine, runs=RUNS)


if __name__ == "__main__":
    main()
