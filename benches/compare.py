"""Time ratekeeper against peer Python rate limiters, side by side, in one process.

What is measured
    The cost of one *admitted* call (the hot path of a rate limiter), in nanoseconds per call.
    Every library is configured for the same limit, 10**9 per minute, so no call is ever rejected;
    a sanity check after each measurement fails loudly if one was.

    Scenarios:
      hot key            the same peer string on every call
      100k keys          cycling through 100,000 distinct 32-character peers (warmed: all keys exist)
      allow(peer, path)  ratekeeper only: 4 regex rules, the path cycling over 4 realistic paths
      check(peer)        ratekeeper only: the call that returns a Decision object, hot key
      algorithms         ratekeeper only: allow(peer), hot key, with each algorithm (a Rule's
                         ``algorithm=``) and with a group of two limits under policy "all". The
                         sliding log keeps every stamp of its window, so at 10**9/min its memory would
                         grow with every call: it is timed at 10**6/s over 2,000 peers (never refused,
                         next to GCRA on the same peers), and on a hot key of a manual clock moved 1 µs
                         before each call with a window of 10 µs or 10 ms, so that the key holds exactly 10
                         or 10,000 live stamps at every call: its cost must not grow with the count beyond
                         O(log n). GCRA is timed with the same step, the reference of those rows.
      memory             ratekeeper only: RSS growth per tracked key after 1,000,000 distinct peers
                         in rk.Limiter("10/min"); run first, before any timing, so that memory freed
                         by other measurements cannot be reused and hide the growth.

How it is timed
    The admit method is bound once (e.g. ``fn = lim.allow``) and driven by one shared loop,
    ``for x in xs: fn(x)``, over a pre-built list, between two ``time.perf_counter_ns()`` reads.
    Nothing is subtracted: the loop's own cost (~10 ns) is in every number. N is calibrated per
    library so that one run takes ~0.3 s; the best of 5 runs is reported. Each library gets a fresh
    limiter per scenario. The garbage collector stays on, as in a real service.

    Peers: limits (memory storage; FixedWindow and MovingWindow), token-bucket (MemoryStorage),
    throttled-py (MemoryStore, GCRA), pyrate-limiter (>= 4.5: one StateBucket with GCRA per key) and a
    ~10-line pure-Python dict GCRA as a baseline. A missing peer is skipped with a note.

Usage
    python benches/compare.py              # full run (about 30-40 s)
    python benches/compare.py --quick      # smoke run: short runs, 2 repeats
    python benches/compare.py --only limits --only token   # plus ratekeeper, always timed as the reference
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from itertools import cycle, islice
from pathlib import Path

LIMIT_PER_MIN = 10**9
LIMIT_STR = f"{LIMIT_PER_MIN}/min"
NUM_KEYS = 100_000
MEMORY_KEYS = 1_000_000
HOT_PEER = "5f0c1a7e9b2d4c3f8a6e0b1d2c3f4a5b"  # 32 characters, like the keyed peers
PATHS = ["/api/v1/users", "/api/v2/query", "/tx/abc", "/other"]
TIMES = "\N{MULTIPLICATION SIGN}"

HOT, KEYS, ROUTED, CHECK = "hot key", "100k keys", "allow(peer, path), 4 rules", "check(peer), hot key"
PEER_SCENARIOS = (HOT, KEYS)
BASELINE = "dict GCRA (pure Python)"
# ratekeeper's algorithms whose state is one slot; the sliding log is timed apart (see the docstring).
SLOT_ALGORITHMS = ("gcra", "token_bucket", "fixed_window", "sliding_window", "leaky_bucket")
LOG_RATE, LOG_KEYS = "1000000/s", 2_000
LIVE_STAMPS = (10, 10_000)
STEP_S = 1e-6
STEPPED = "hot key, manual clock +1 µs per call"
ALL_POLICY = "all policy (2 limits: gcra + sliding_window)"

Admit = Callable[[str], object]


# ---------------------------------------------------------------------------------------------
# Baseline: the smallest reasonable pure-Python GCRA.
# ---------------------------------------------------------------------------------------------


class DictGCRA:
    """GCRA in a dict: key -> theoretical arrival time (TAT), integer nanoseconds."""

    def __init__(self, limit: int, period_s: int) -> None:
        self.interval = period_s * 10**9 // limit  # ns between two admits at the sustained rate
        self.tolerance = (limit - 1) * self.interval  # how far the TAT may run ahead of now: the burst
        self.tat: dict[str, int] = {}

    def allow(self, key: str) -> bool:
        now = time.monotonic_ns()
        tat = self.tat.get(key, now)
        if tat - now > self.tolerance:
            return False
        self.tat[key] = (tat if tat > now else now) + self.interval  # not max(): that costs ~100 ns a call
        return True


# ---------------------------------------------------------------------------------------------
# Contenders. Each ``open`` is a context manager yielding a fresh one-argument admit callable.
# ---------------------------------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    package: str  # distribution name, for the versions line ("" for the in-script baseline)
    open: Callable[[], AbstractContextManager[Admit]]
    admitted: Callable[[object], bool] = bool
    scenarios: tuple[str, ...] = PEER_SCENARIOS
    note: str = ""
    version: str = ""

    def __post_init__(self) -> None:
        if self.package and not self.version:
            self.version = version_of(self.package)


def version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


@contextmanager
def open_dict_gcra() -> Iterator[Admit]:
    yield DictGCRA(LIMIT_PER_MIN, 60).allow


@contextmanager
def open_ratekeeper(rk) -> Iterator[Admit]:
    yield rk.Limiter(LIMIT_STR).allow


def load_ratekeeper() -> tuple[object | None, str]:
    """Import ratekeeper lazily; return (module or None, note)."""
    try:
        import ratekeeper as rk

        rk.Limiter("10/min").allow("probe")
    except Exception as exc:  # any failure means "not usable": time the peers anyway
        return (
            None,
            f"ratekeeper is not usable ({type(exc).__name__}: {exc}); build it with `maturin develop --release`",
        )
    return rk, ""


def limits_contenders() -> list[Contender]:
    from limits import RateLimitItemPerMinute
    from limits.storage import MemoryStorage
    from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

    item = RateLimitItemPerMinute(LIMIT_PER_MIN)

    def opener(strategy):
        @contextmanager
        def open_limits() -> Iterator[Admit]:
            storage = MemoryStorage()
            try:
                yield partial(strategy(storage).hit, item)
            finally:
                storage.timer.cancel()  # its background expiry thread would otherwise tick into the next library

        return open_limits

    moving_note = (
        "limits MovingWindow: hot key not timed: each admit inserts at the front of a per-key list holding "
        "every hit in the window, so at 10**9/min its cost grows without bound with the number of calls."
    )
    sweep_note = (
        "limits: its MemoryStorage walks every key from a background thread every 10 ms; that thread's "
        "share of the GIL is part of the limits numbers, as it would be in a service."
    )
    return [
        Contender("limits FixedWindow", "limits", opener(FixedWindowRateLimiter), note=sweep_note),
        Contender(
            "limits MovingWindow", "limits", opener(MovingWindowRateLimiter), scenarios=(KEYS,), note=moving_note
        ),
    ]


def token_bucket_contenders() -> list[Contender]:
    import token_bucket

    @contextmanager
    def open_token_bucket() -> Iterator[Admit]:
        storage = token_bucket.MemoryStorage()
        yield token_bucket.Limiter(rate=LIMIT_PER_MIN / 60, capacity=LIMIT_PER_MIN, storage=storage).consume

    return [Contender("token-bucket", "token-bucket", open_token_bucket)]


def throttled_contenders() -> list[Contender]:
    from throttled import MemoryStore, RateLimiterType, Throttled, per_min

    @contextmanager
    def open_throttled() -> Iterator[Admit]:
        # The default MemoryStore is an LRU capped at 1024 keys; make room for every key, like the others.
        store = MemoryStore(options={"MAX_SIZE": 2 * MEMORY_KEYS})
        yield Throttled(using=RateLimiterType.GCRA.value, quota=per_min(LIMIT_PER_MIN), store=store, timeout=-1).limit

    def admitted(result) -> bool:
        return not result.limited

    return [Contender("throttled-py GCRA", "throttled-py", open_throttled, admitted)]


def pyrate_contenders() -> list[Contender]:
    from pyrate_limiter import GCRA, BucketFactory, Duration, Limiter, MonotonicClock, Rate, RateItem, StateBucket

    class PerPeerFactory(BucketFactory):
        """One constant-state GCRA bucket per peer (the README's per-name routing recipe).

        StateBucket.leak() is a no-op, so buckets are not registered with the background leaker.
        """

        def __init__(self) -> None:
            self.clock = MonotonicClock()
            self.rates = [Rate(LIMIT_PER_MIN, Duration.MINUTE)]
            self.buckets: dict[str, StateBucket] = {}

        def wrap_item(self, name: str, weight: int = 1) -> RateItem:
            return RateItem(name, self.clock.now(), weight=weight)

        def get(self, item: RateItem) -> StateBucket:
            bucket = self.buckets.get(item.name)
            if bucket is None:
                bucket = self.buckets[item.name] = StateBucket(self.rates, algorithm=GCRA())
            return bucket

    @contextmanager
    def open_pyrate() -> Iterator[Admit]:
        limiter = Limiter(PerPeerFactory())
        try:
            # blocking=True (the default) only matters once a call is refused; none is here.
            yield limiter.try_acquire
        finally:
            limiter.close()

    return [Contender("pyrate-limiter GCRA", "pyrate-limiter", open_pyrate)]


PEER_LOADERS = {
    "limits": limits_contenders,
    "token-bucket": token_bucket_contenders,
    "throttled-py": throttled_contenders,
    "pyrate-limiter": pyrate_contenders,
}


def build_contenders(rk) -> tuple[list[Contender], list[str]]:
    """All contenders that could be set up, ratekeeper first, and notes about the rest."""
    contenders: list[Contender] = []
    notes: list[str] = []
    if rk is not None:
        rk_version = getattr(rk, "__version__", None) or version_of("ratekeeper")
        rk_scenarios = (HOT, KEYS, ROUTED, CHECK)
        contenders.append(
            Contender(
                "ratekeeper", "ratekeeper", partial(open_ratekeeper, rk), scenarios=rk_scenarios, version=rk_version
            )
        )
    contenders.append(Contender(BASELINE, "", open_dict_gcra))
    for dist, loader in PEER_LOADERS.items():
        try:
            contenders.extend(loader())
        except Exception as exc:  # a missing or incompatible peer is skipped, never fatal
            notes.append(f"{dist}: skipped ({type(exc).__name__}: {exc}); `pip install -r benches/requirements.txt`")
    return contenders, notes


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def time_calls(fn: Callable, xs: list) -> int:
    """The one loop every library is timed with: ``fn`` is already a bound method in a local."""
    t0 = time.perf_counter_ns()
    for x in xs:
        fn(x)
    return time.perf_counter_ns() - t0


def time_calls2(fn: Callable, pairs: list) -> int:
    """Same loop for two-argument calls (ratekeeper's ``allow(peer, path)``)."""
    t0 = time.perf_counter_ns()
    for a, b in pairs:
        fn(a, b)
    return time.perf_counter_ns() - t0


@dataclass
class Settings:
    target_s: float = 0.3
    repeats: int = 5


def calibrate(run: Callable[[int], int], target_s: float) -> int:
    """An N for which one run takes about ``target_s`` seconds."""
    n = 1_000
    while True:
        elapsed = run(n)
        if elapsed >= 0.05 * target_s * 1e9:
            return max(n, round(n * target_s * 1e9 / elapsed))
        n *= 4


def make_peers(n: int, seed: int) -> list[str]:
    """``n`` distinct 32-character hex peers (like ``uuid4().hex``), reproducible."""
    rng = random.Random(seed)
    peers = list(dict.fromkeys(f"{rng.getrandbits(128):032x}" for _ in range(n)))
    assert len(peers) == n
    return peers


def scenario_inputs(scenario: str, keys: list[str]) -> Callable[[int], list]:
    """Builds the list a run iterates over: n peers (or n (peer, path) pairs)."""
    if scenario == KEYS:
        return lambda n: list(islice(cycle(keys), n))
    if scenario == ROUTED:
        return lambda n: list(islice(cycle([(HOT_PEER, p) for p in PATHS]), n))
    return lambda n: [HOT_PEER] * n


def best_ns_per_call(fn: Callable, timer: Callable, inputs: Callable[[int], list], settings: Settings) -> float:
    """Warm up, calibrate N, then the best of ``settings.repeats`` runs, in ns per call."""
    timer(fn, inputs(1_000))

    def run(n: int) -> int:
        xs = inputs(n)
        gc.collect()
        return timer(fn, xs)

    n = calibrate(run, settings.target_s)
    return min(run(n) for _ in range(settings.repeats)) / n


def measure(contender: Contender, scenario: str, keys: list[str], settings: Settings) -> float:
    """ns per admitted call of ``contender`` in a peer scenario (hot key or 100k keys)."""
    with contender.open() as fn:
        if scenario == KEYS:
            time_calls(fn, keys)  # every key exists before timing starts: the steady state of a busy service
        ns = best_ns_per_call(fn, time_calls, scenario_inputs(scenario, keys), settings)
        last_peer = keys[-1] if scenario == KEYS else HOT_PEER
        if not contender.admitted(fn(last_peer)):
            raise RuntimeError(f"{contender.name} refused a call: the benchmark must only time admitted calls")
    return ns


def measure_ratekeeper_only(rk, scenario: str, settings: Settings) -> float:
    """ns per call of ``allow(peer, path)`` with 4 routing rules, or of ``check(peer)``, hot key."""
    inputs = scenario_inputs(scenario, [])
    if scenario == CHECK:
        return best_ns_per_call(rk.Limiter(LIMIT_STR).check, time_calls, inputs, settings)
    rules = [
        rk.Rule(r"^/api/v1/", "v1", LIMIT_STR),
        rk.Rule(r"^/api/v2/", "v2", LIMIT_STR),
        rk.Rule(r"^/tx/", "tx", LIMIT_STR),
        rk.Rule(r"", "default", LIMIT_STR),
    ]
    allow = rk.Limiter(rules=rules).allow
    ns = best_ns_per_call(allow, time_calls2, inputs, settings)
    if not all(allow(HOT_PEER, path) for path in PATHS):
        raise RuntimeError("ratekeeper refused a routed call: the benchmark must only time admitted calls")
    return ns


def algorithm_limiter(rk, algorithm: str, rate: object = LIMIT_STR, clock: object = None):
    return rk.Limiter(rules=[rk.Rule("", "default", rate, algorithm=algorithm)], clock=clock)


def stepped(clock, allow: Admit) -> Admit:
    """``allow`` after moving the manual ``clock`` by ``STEP_S``."""
    advance = clock.advance

    def call(peer: str) -> object:
        advance(STEP_S)
        return allow(peer)

    return call


def admitted_or_fail(name: str, admitted: bool) -> None:
    if not admitted:
        raise RuntimeError(f"ratekeeper {name} refused a call: the benchmark must only time admitted calls")


def measure_algorithms(rk, settings: Settings) -> list[tuple[str, str, float]]:
    """(algorithm, scenario, ns per call) of ``allow(peer)`` per algorithm, and of a group of two limits."""
    rows: list[tuple[str, str, float]] = []
    hot = scenario_inputs(HOT, [])
    for algorithm in SLOT_ALGORITHMS:
        allow = algorithm_limiter(rk, algorithm).allow
        rows.append((algorithm, HOT, best_ns_per_call(allow, time_calls, hot, settings)))
        admitted_or_fail(algorithm, allow(HOT_PEER))
    limits = [rk.Limit(LIMIT_STR), rk.Limit(LIMIT_STR, algorithm="sliding_window")]
    allow = rk.Limiter(rules=[rk.Rule("", "default", limits=limits, policy="all")]).allow
    rows.append((ALL_POLICY, HOT, best_ns_per_call(allow, time_calls, hot, settings)))
    admitted_or_fail(ALL_POLICY, allow(HOT_PEER))

    keys = make_peers(LOG_KEYS, seed=2)
    cycled = scenario_inputs(KEYS, keys)
    for algorithm, rate in (("gcra", LIMIT_STR), ("sliding_log", LOG_RATE)):
        allow = algorithm_limiter(rk, algorithm, rate).allow
        time_calls(allow, keys)
        rows.append((algorithm, f"{LOG_KEYS:,} keys, {rate}", best_ns_per_call(allow, time_calls, cycled, settings)))
        admitted_or_fail(algorithm, allow(keys[-1]))

    # A hot key on a manual clock moved 1 µs before each call: a window of `live` µs holds exactly `live` stamps.
    # The step is a Python closure around allow (its cost is in every row), so gcra on the same clock is timed too.
    for algorithm, live in (("gcra", 1), *(("sliding_log", live) for live in LIVE_STAMPS)):
        clock = rk.ManualClock()
        limiter = algorithm_limiter(rk, algorithm, rk.Rate(2 * live, per=live * STEP_S), clock)
        ns = best_ns_per_call(stepped(clock, limiter.allow), time_calls, hot, settings)
        clock.advance(STEP_S)
        decision = limiter.check(HOT_PEER)
        admitted_or_fail(algorithm, decision.allowed)
        if algorithm == "gcra":
            rows.append((algorithm, STEPPED, ns))
        else:
            rows.append((algorithm, f"{STEPPED}, {decision.limit - decision.remaining:,} live stamps", ns))
    return rows


# ---------------------------------------------------------------------------------------------
# Memory (ratekeeper only)
# ---------------------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def measure_memory(rk, n_keys: int) -> tuple[int, int]:
    """(RSS growth in bytes, tracked keys) after admitting ``n_keys`` distinct peers.

    The peer strings are built before the first reading so they are not counted; the limiter is
    created after it, so anything it allocates up front is charged to the keys.
    """
    peers = make_peers(n_keys, seed=1)
    gc.collect()
    before = rss_bytes()
    lim = rk.Limiter("10/min")
    allow = lim.allow
    for peer in peers:
        allow(peer)
    after = rss_bytes()
    return after - before, len(lim)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    library: str
    scenario: str
    ns: float


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    memory: tuple[int, int] | None = None
    # (algorithm, scenario, ns) from ``measure_algorithms``, also in ``rows`` as "ratekeeper <algorithm>".
    algorithms: list[tuple[str, str, float]] = field(default_factory=list)


def fmt_ns(ns: float) -> str:
    return f"{ns:,.0f}" if ns >= 100 else f"{ns:.1f}"


def speedup(row: Row, reference: dict[str, float]) -> str:
    if row.library.startswith("ratekeeper"):
        return "—"
    rk_ns = reference.get(row.scenario)
    return f"{row.ns / rk_ns:,.1f}{TIMES}" if rk_ns else "n/a"


def targets(report: Report, reference: dict[str, float]) -> list[str]:
    """PASS / MISS on the many-keys targets: ``allow`` over 100k keys within 1.6x its hot-key time and at
    least 1.6x faster than the pure-Python dict GCRA over the same keys; at most 64 bytes per key at 1M."""
    lines = ["Targets:"]
    hot, many = reference.get(HOT), reference.get(KEYS)
    if hot and many:
        ratio = many / hot
        lines.append(f"- {KEYS} within 1.6{TIMES} the {HOT}: {ratio:.2f}{TIMES} {'PASS' if ratio <= 1.6 else 'MISS'}")
    baseline = next((r.ns for r in report.rows if r.library == BASELINE and r.scenario == KEYS), None)
    if many and baseline:
        ahead = baseline / many
        lines.append(
            f"- {KEYS} at least 1.6{TIMES} faster than the {BASELINE}: {ahead:.2f}{TIMES} "
            f"{'PASS' if ahead >= 1.6 else 'MISS'}"
        )
    if report.memory is not None and report.memory[1]:
        per_key = report.memory[0] / report.memory[1]
        lines.append(f"- at most 64 bytes/key at 1M keys: {per_key:.1f} {'PASS' if per_key <= 64 else 'MISS'}")
    return lines


def render(report: Report, contenders: list[Contender], settings: Settings) -> str:
    reference = {r.scenario: r.ns for r in report.rows if r.library == "ratekeeper"}
    packages = {c.package: c.version for c in contenders if c.package}
    versions = ", ".join(f"{p} {v}" for p, v in packages.items()) or "none"
    lines = [
        "## ratekeeper vs. peer rate limiters (admit path)",
        "",
        (
            f"Python {platform.python_version()} ({platform.python_implementation()}), {platform.machine()}, "
            f"{os.cpu_count()} CPUs. Limit {LIMIT_STR} everywhere (every call admitted). "
            f"Best of {settings.repeats} runs of ~{settings.target_s:g} s each, loop overhead included."
        ),
        "",
        f"Versions: {versions}.",
        "",
        f"| library | {HOT} ns/call | ratekeeper is N{TIMES} faster | {KEYS} ns/call | ratekeeper is N{TIMES} faster |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    by_library: dict[str, dict[str, Row]] = {}
    for row in report.rows:
        if row.scenario in PEER_SCENARIOS and not row.library.startswith("ratekeeper "):  # not the algorithm rows
            by_library.setdefault(row.library, {})[row.scenario] = row
    for library, rows in by_library.items():
        cells = [
            f"{fmt_ns(rows[s].ns)} | {speedup(rows[s], reference)}" if s in rows else "— | —" for s in PEER_SCENARIOS
        ]
        lines.append(f"| {library} | {' | '.join(cells)} |")
    lines += ["", "| ratekeeper | scenario | ns/call |", "| --- | --- | ---: |"]
    lines += [
        f"| {r.library} | {r.scenario} | {fmt_ns(r.ns)} |"
        for r in report.rows
        if r.scenario not in PEER_SCENARIOS and not r.library.startswith("ratekeeper ")
    ]
    lines += ["", *targets(report, reference)]
    if report.memory is not None:
        growth, tracked = report.memory
        per_key = f"{growth / tracked:,.1f}" if tracked else "n/a"
        lines += [
            "",
            "| library | memory scenario | tracked keys | RSS growth | bytes/key |",
            "| --- | --- | ---: | ---: | ---: |",
            f'| ratekeeper | Limiter("10/min"), 32-char peers | {tracked:,} | {growth / 2**20:,.1f} MiB | {per_key} |',
        ]
    if report.algorithms:
        gcra = {scenario: ns for algorithm, scenario, ns in report.algorithms if algorithm == "gcra"}
        lines += [
            "",
            f"| ratekeeper allow(peer) | scenario | ns/call | {TIMES} gcra (same scenario) |",
            "| --- | --- | ---: | ---: |",
        ]
        for algorithm, scenario, ns in report.algorithms:
            base = gcra.get(scenario) or gcra.get(STEPPED if scenario.startswith(STEPPED) else HOT)
            lines.append(f"| {algorithm} | {scenario} | {fmt_ns(ns)} | {ns / base:.2f}{TIMES} |")
    if report.notes:
        lines += ["", "Notes:", *[f"- {note}" for note in report.notes]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: ~0.05 s per run, 2 repeats")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="time only libraries whose name contains NAME (case-insensitive), plus ratekeeper; repeatable",
    )
    return parser.parse_args(argv)


def selected(contenders: list[Contender], only: list[str] | None) -> list[Contender]:
    """Contenders matching ``--only``; ratekeeper, the reference of the speed-up column, always stays."""
    if not only:
        return contenders
    wanted = [w.lower() for w in only]
    return [c for c in contenders if c.name == "ratekeeper" or any(w in c.name.lower() for w in wanted)]


ALGORITHMS_NOTE = (
    "ratekeeper algorithms: a Rule's algorithm at 10**9/min, hot key. sliding_log keeps every stamp of its "
    f"window (at 10**9/min, every call), so it is timed at {LOG_RATE} over {LOG_KEYS:,} cycled peers (never "
    "refused; gcra on the same peers beside it), and on a hot key of a ManualClock moved 1 µs before each call "
    "(a Python closure, in the time) with a window holding exactly 10 or 10,000 live stamps (read back after the "
    "run), against gcra with the same step. Last column: against gcra in the same scenario."
)


def run_all(rk, contenders: list[Contender], settings: Settings, report: Report) -> None:
    keys = make_peers(NUM_KEYS, seed=0)
    for scenario in PEER_SCENARIOS:
        for contender in contenders:
            if scenario in contender.scenarios:
                report.rows.append(Row(contender.name, scenario, measure(contender, scenario, keys, settings)))
                print(f"  {contender.name:<24} {scenario:<28} {report.rows[-1].ns:>10.1f} ns", file=sys.stderr)
    if any(c.name == "ratekeeper" for c in contenders):
        for scenario in (ROUTED, CHECK):
            report.rows.append(Row("ratekeeper", scenario, measure_ratekeeper_only(rk, scenario, settings)))
            print(f"  {'ratekeeper':<24} {scenario:<28} {report.rows[-1].ns:>10.1f} ns", file=sys.stderr)
        report.algorithms = measure_algorithms(rk, settings)
        for algorithm, scenario, ns in report.algorithms:
            report.rows.append(Row(f"ratekeeper {algorithm}", scenario, ns))
            print(f"  {algorithm:<24} {scenario:<28} {ns:>10.1f} ns", file=sys.stderr)
        report.notes.append(ALGORITHMS_NOTE)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(target_s=0.05, repeats=2) if args.quick else Settings()
    rk, rk_note = load_ratekeeper()
    contenders, notes = build_contenders(rk)
    contenders = selected(contenders, args.only)
    notes += [c.note for c in contenders if c.note]
    report = Report(notes=[rk_note, *notes] if rk_note else notes)

    if any(c.name == "ratekeeper" for c in contenders):
        print(f"measuring memory at {MEMORY_KEYS:,} keys ...", file=sys.stderr)
        report.memory = measure_memory(rk, MEMORY_KEYS)
    print("timing (progress on stderr, table on stdout) ...", file=sys.stderr)
    run_all(rk, contenders, settings, report)
    print(render(report, contenders, settings))
    write_json(args.json, report, contenders, settings)
    return 0


def write_json(path: Path | None, report: Report, contenders: list[Contender], settings: Settings) -> None:
    """The figures for ``benches/render.py``: every row, the memory per key and the versions timed."""
    from machine import describe, write_results

    versions = {c.package: c.version for c in contenders if c.package}
    data = {
        "rows": [{"library": r.library, "scenario": r.scenario, "ns": r.ns} for r in report.rows],
        "algorithms": [{"algorithm": a, "scenario": s, "ns": ns} for a, s, ns in report.algorithms],
        "memory": None
        if report.memory is None
        else {"rss_growth_bytes": report.memory[0], "keys": report.memory[1], "at_keys": MEMORY_KEYS},
        "versions": versions,
        "notes": report.notes,
    }
    machine = describe(p for p in versions if p)
    write_results(path, "compare", data, machine, repeats=settings.repeats, target_s=settings.target_s)


if __name__ == "__main__":
    sys.exit(main())
