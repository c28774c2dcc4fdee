"""The shared-memory store (``backend=rk.Shared``) against the in-memory limiter, across processes, and
against pyrate-limiter's multiprocess bucket, side by side in one run.

What is measured
    1. hot key          ``allow(peer)`` on one peer, ns per call: ``rk.Limiter("1000000000/min",
                        max_keys=1_000_000)`` in this process's memory against the same limiter with
                        ``backend=rk.Shared(path=...)``; the ratio shared / memory (target <= 1.3x).
    2. 100k keys        the same, cycling over 100,000 distinct 32-character peers, warmed (every key
                        exists before timing starts); ratio shared / memory (target <= 2x).
    3. two processes    decisions/s of one process alone, then of two processes started together
                        (a barrier), each on its own 1,000 keys (disjoint sets, so only the shared store's
                        shard locks are in common), for a fixed duration; the ratio two / one. Shared:
                        both processes attach to one region (target >= 1.7x on 2 cores). Memory: each
                        process has its own limiter, the reference of what the machine scales to.
    4. one key, exact   two processes started together hammer ONE peer of one region, 200,000 attempts
                        each, with a limit of 100,000 per 365 days (GCRA: after the burst of 100,000 the
                        next admission would come 315 s after the first, far beyond the run; a limit of
                        100,000/hour would let one more through every 36 ms of the run, so its count
                        could not be exact). Reported: decisions/s (400,000 over the span from the first
                        start to the last end; best of 5 runs, each on a fresh region). Checked in
                        every run: exactly 100,000 admitted in all, by the processes' own counts and by
                        the region's; both processes finish (no livelock).
    5. pyrate-limiter   pyrate-limiter's ``MultiprocessBucket`` (a sliding log in a
                        ``multiprocessing.Manager`` list, under a ``multiprocessing.RLock``: every
                        decision is a few round trips to the manager's process), built as
                        ``MultiprocessBucket.init`` builds it and used through its ``Limiter``
                        (``try_acquire(name)``, the documented blocking default), with the same limit
                        10**9/min. It is one bucket for every name (per-key buckets would need a
                        ``BucketFactory`` of one's own), so only a hot key is timed: decisions/s in one
                        process, against ratekeeper's shared store on a hot key (scenario 1); the
                        speed-up (target >= 20x). Beside it, for reference, pyrate's other multiprocess
                        option when the installed version has it: ``StateBucket`` with GCRA over a
                        ``MultiprocessStateStore`` (a Manager list too).

How it is timed
    Scenarios 1, 2 and 5 use compare.py's loop: the admit method bound once and driven by ``for x in xs:
    fn(x)`` over a pre-built list between two ``time.perf_counter_ns()`` reads (loop overhead included).
    N is calibrated per contender so that one run takes ~0.3 s; the runs of the contenders of a scenario
    are interleaved (run 1 of each, then run 2, ...) and the best of 5 is reported. Each contender gets a
    fresh limiter, and each shared limiter a fresh region.
    Scenario 3 spawns fresh interpreters (``multiprocessing``, start method ``spawn`` as uvicorn's
    ``--workers`` do; ``--start-method fork`` to change it), each building its own limiter (the shared
    one attaching to a region the parent made) and warming its keys before the barrier; each then runs
    chunks of 10,000 calls of the same loop until 1 s has passed, and reports calls / its own elapsed
    time; the processes' rates are summed. Five interleaved rounds (memory 1 process, memory 2, shared 1,
    shared 2), best of each. A round fails loudly unless the processes' timed windows overlap by >= 80 %.
    Each worker also reports the share of its window it had a CPU for (``time.process_time``): under
    100 %, something else ran on the machine, and the ratio says less about the store.

Sanity checks (a failure raises, whatever the flags)
    No call of scenarios 1, 2, 3 or 5 may be refused: the limiters' own counts (``stats()``: the group's
    ``allowed`` and ``refused``, and the region's, counted by every process) must equal the calls made,
    and pyrate's log must hold one item per call. Scenario 4: the totals above.

Targets (printed as PASS / MISS; with ``--check`` a miss is exit status 1)
    hot key shared/memory <= 1.3x; 100k keys <= 2x; shared 2 processes / 1 >= 1.7x; pyrate >= 20x.

Usage
    python benches/shared_bench.py            # full run (about a minute of 2 cores)
    python benches/shared_bench.py --quick    # smoke run: short runs, 2 repeats
    python benches/shared_bench.py --check    # exit 1 if a target is missed
    python benches/shared_bench.py --start-method fork

Every region file is made under /dev/shm with a unique name and removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import platform
import queue
import secrets
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from itertools import cycle, islice
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import ratekeeper as rk
from compare import HOT_PEER, LIMIT_PER_MIN, LIMIT_STR, calibrate, make_peers, time_calls, version_of
from machine import describe, write_results

MAX_KEYS = 1_000_000  # memory and shared alike; the region is sized from it (~45 MB)
NUM_KEYS = 100_000
PROCESS_KEYS = 1_000  # each process's own keys in scenario 3
CHUNK = 10_000  # calls between two clock reads in scenario 3
EXACT_ADMITTED = 100_000
EXACT_PERIOD_S = 365 * 86_400.0
EXACT_ATTEMPTS = 200_000  # per process
EXACT_MAX_KEYS = 1_000
MIN_OVERLAP = 0.8
BARRIER_TIMEOUT_S = 120.0
TIMES = "\N{MULTIPLICATION SIGN}"
MEMORY, SHARED = "memory", "shared"


@dataclass
class Settings:
    target_s: float = 0.3  # one run of scenarios 1, 2 and 5
    repeats: int = 5
    seconds: float = 1.0  # one run of scenario 3
    start_method: str = "spawn"


# ---------------------------------------------------------------------------------------------
# Regions and limiters
# ---------------------------------------------------------------------------------------------


@contextmanager
def region(label: str) -> Iterator[str]:
    """A unique region path under /dev/shm, removed on the way out (the limiter makes the file)."""
    path = f"/dev/shm/ratekeeper-bench-{os.getpid()}-{secrets.token_hex(6)}-{label}"
    try:
        yield path
    finally:
        with suppress(FileNotFoundError):
            os.unlink(path)


def open_limiter(path: str | None) -> Any:
    """The limiter of scenarios 1-3: in memory (``path`` None) or in the region at ``path``."""
    backend = None if path is None else rk.Shared(path=path)
    return rk.Limiter(LIMIT_STR, max_keys=MAX_KEYS, backend=backend)


def open_exact_limiter(path: str) -> Any:
    """The limiter of scenario 4: 100,000 per 365 days in the region at ``path``."""
    rate = rk.Rate(EXACT_ADMITTED, per=EXACT_PERIOD_S)
    return rk.Limiter(rate=rate, max_keys=EXACT_MAX_KEYS, backend=rk.Shared(path=path))


def decisions(limiter: Any) -> tuple[int, int]:
    """``(allowed, refused)`` of this process's limiter (its one group)."""
    group = limiter.stats()["groups"]["default"]
    return group["allowed"], group["refused"]


def region_decisions(limiter: Any) -> tuple[int, int]:
    """``(allowed, refused)`` of the whole region: every process's decisions."""
    shared = limiter.stats()["shared"]
    return shared["allowed"], shared["refused"]


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(f"sanity check failed: {message}")


# ---------------------------------------------------------------------------------------------
# Scenarios 1, 2 and 5: one process, interleaved runs
# ---------------------------------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    fn: Callable[[str], object]
    inputs: Callable[[int], list[str]]
    calls: int = 0  # every call made through ``run``, warm-up included
    best_ns: float = float("inf")

    def run(self, n: int) -> int:
        xs = self.inputs(n)
        gc.collect()
        self.calls += len(xs)
        return time_calls(self.fn, xs)


def interleaved(contenders: list[Contender], settings: Settings) -> None:
    """Warm up and calibrate each contender, then run them in turn; ``best_ns`` is each one's best."""
    sizes = {}
    for contender in contenders:
        contender.run(1_000)
        sizes[contender.name] = calibrate(contender.run, settings.target_s)
    for _ in range(settings.repeats):
        for contender in contenders:
            n = sizes[contender.name]
            contender.best_ns = min(contender.best_ns, contender.run(n) / n)


def hot_inputs(n: int) -> list[str]:
    return [HOT_PEER] * n


def check_admitted_all(name: str, limiter: Any, calls: int, shared: bool) -> None:
    allowed, refused = decisions(limiter)
    expect(refused == 0 and allowed == calls, f"{name}: {allowed:,} allowed, {refused:,} refused of {calls:,} calls")
    if shared:
        allowed, refused = region_decisions(limiter)
        expect(
            refused == 0 and allowed == calls, f"{name}: the region counted {allowed:,} allowed, {refused:,} refused"
        )


def measure_one_process(scenario: str, settings: Settings, keys: list[str]) -> dict[str, float]:
    """ns per call of ``allow`` in memory and shared, for the hot key or the 100k keys; ``"region_bytes"``: the
    size of the shared limiter's region file."""
    with region("single") as path:
        limiters = {MEMORY: open_limiter(None), SHARED: open_limiter(path)}
        region_bytes = os.stat(path).st_size
        contenders = []
        for backend, limiter in limiters.items():
            if scenario == "hot":
                contenders.append(Contender(backend, limiter.allow, hot_inputs))
            else:
                time_calls(limiter.allow, keys)  # every key exists before timing starts
                contenders.append(Contender(backend, limiter.allow, lambda n: list(islice(cycle(keys), n))))
        interleaved(contenders, settings)
        for contender in contenders:
            warm = 0 if scenario == "hot" else len(keys)
            limiter = limiters[contender.name]
            check_admitted_all(
                f"{scenario} {contender.name}", limiter, contender.calls + warm, contender.name == SHARED
            )
            if contender.name == SHARED:
                held = limiter.stats()["shared"]["keys"]
                expect(held == (1 if scenario == "hot" else len(keys)), f"the region holds {held:,} keys")
        return {**{contender.name: contender.best_ns for contender in contenders}, "region_bytes": region_bytes}


PYRATE_LOG = "pyrate MultiprocessBucket"
PYRATE_STATE = "pyrate StateBucket GCRA + MultiprocessStateStore"


def measure_pyrate(settings: Settings) -> tuple[dict[str, float], str]:
    """ns per call of ``try_acquire`` on a hot key for pyrate's multiprocess stores; a note if skipped."""
    try:
        import pyrate_limiter
        from pyrate_limiter import Duration, Limiter, MultiprocessBucket, Rate
    except ImportError as exc:
        return {}, f"pyrate-limiter: skipped ({exc}); `pip install -r benches/requirements.txt`"
    rates = [Rate(LIMIT_PER_MIN, Duration.MINUTE)]
    # What MultiprocessBucket.init (and MultiprocessStateStore.init) build: a Manager list and a
    # multiprocessing RLock; with a Manager of our own, so that its server process is shut down at the end.
    with ExitStack() as stack:
        manager = stack.enter_context(multiprocessing.Manager())
        log_bucket = MultiprocessBucket(rates, manager.list(), multiprocessing.RLock())
        log_limiter = stack.enter_context(Limiter(log_bucket))

        def log_check(calls: int) -> None:
            held = log_bucket.count()  # one item per admission; its window (1 minute) outlasts the runs
            expect(held == calls, f"{PYRATE_LOG} holds {held:,} items after {calls:,} calls")

        pairs = [(Contender(PYRATE_LOG, log_limiter.try_acquire, hot_inputs), log_check)]
        store = getattr(pyrate_limiter, "MultiprocessStateStore", None)
        if store is not None:
            state_bucket = pyrate_limiter.StateBucket(
                rates, pyrate_limiter.GCRA(), store=store(manager.list(), multiprocessing.RLock())
            )
            state_limiter = stack.enter_context(Limiter(state_bucket))

            def state_check(calls: int) -> None:
                # No log to count, and a refused call would wait (the blocking default) instead of returning
                # False: checked here, the last put was admitted at once.
                expect(state_bucket.failing_rate is None, f"{PYRATE_STATE}: the last call was refused")

            pairs.append((Contender(PYRATE_STATE, state_limiter.try_acquire, hot_inputs), state_check))
        interleaved([contender for contender, _ in pairs], settings)
        for contender, check in pairs:
            expect(contender.fn(HOT_PEER) is True, f"{contender.name} refused a call")
            check(contender.calls + 1)
        return {contender.name: contender.best_ns for contender, _ in pairs}, ""


# ---------------------------------------------------------------------------------------------
# Scenarios 3 and 4: processes started together
# ---------------------------------------------------------------------------------------------


def throughput_worker(path: str | None, keys: list[str], seconds: float, barrier: Any, results: Any) -> None:
    """Scenario 3, in a child: calls ``allow`` over ``keys`` for ``seconds``; reports (calls, start, end, the
    share of those seconds this process had a CPU: under 100 % when something else ran on the machine)."""
    try:
        limiter = open_limiter(path)
        allow = limiter.allow
        chunk = list(islice(cycle(keys), CHUNK))
        time_calls(allow, keys)  # every key exists
        time_calls(allow, chunk)  # warm
        gc.collect()
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        start, cpu = time.perf_counter(), time.process_time()
        deadline = start + seconds
        calls = 0
        while True:
            time_calls(allow, chunk)
            calls += CHUNK
            end = time.perf_counter()
            if end >= deadline:
                cpu = time.process_time() - cpu
                break
        allowed, refused = decisions(limiter)
        made = calls + len(keys) + CHUNK
        expect(refused == 0 and allowed == made, f"{allowed:,} allowed, {refused:,} refused of {made:,} calls")
        results.put(("ok", calls, start, end, cpu / (end - start)))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def exact_worker(path: str, attempts: int, barrier: Any, results: Any) -> None:
    """Scenario 4, in a child: ``attempts`` calls on one peer; reports (admitted, start, end)."""
    try:
        limiter = open_exact_limiter(path)
        allow = limiter.allow
        xs = [HOT_PEER] * attempts
        gc.collect()
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        start = time.perf_counter()
        admitted = 0
        for x in xs:
            if allow(x):
                admitted += 1
        end = time.perf_counter()
        allowed, refused = decisions(limiter)
        expect(
            (allowed, refused) == (admitted, attempts - admitted),
            f"stats() says {allowed:,} allowed, {refused:,} refused; the loop counted {admitted:,} of {attempts:,}",
        )
        results.put(("ok", admitted, start, end))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def run_together(ctx: BaseContext, target: Callable[..., None], args: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Starts one process per ``args``, released together by a barrier; their ``("ok", ...)`` reports."""
    barrier = ctx.Barrier(len(args))
    results = ctx.Queue()
    processes = [ctx.Process(target=target, args=(*a, barrier, results)) for a in args]
    for process in processes:
        process.start()
    reports: list[tuple[Any, ...]] = []
    try:
        deadline = time.monotonic() + 2 * BARRIER_TIMEOUT_S
        while len(reports) < len(processes):
            try:
                reports.append(results.get(timeout=1.0))
            except queue.Empty:
                dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"a worker died (exit codes {dead}) or hung without a report") from None
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
    errors = [report[1] for report in reports if report[0] != "ok"]
    if errors:
        raise RuntimeError("a worker failed:\n" + "\n".join(errors))
    return [report[1:] for report in reports]


def overlap(windows: list[tuple[float, float]]) -> float:
    """The share of the longest window during which every window was running."""
    common = min(end for _, end in windows) - max(start for start, _ in windows)
    return max(0.0, common) / max(end - start for start, end in windows)


@dataclass
class Scaling:
    rates: dict[tuple[str, int], float] = field(default_factory=dict)  # (backend, processes) -> best decisions/s
    cpu: dict[tuple[str, int], float] = field(default_factory=dict)  # the least CPU share of a worker, best round
    min_overlap: float = 1.0


def measure_scaling(ctx: BaseContext, settings: Settings) -> Scaling:
    key_sets = [make_peers(PROCESS_KEYS, seed=10 + i) for i in range(2)]
    scaling = Scaling()
    with region("scaling") as path:
        creator = open_limiter(path)  # makes the region; the workers attach to it
        made = 0  # calls of the shared workers, warm-up included: the region must have allowed them all
        for round_ in range(1, settings.repeats + 1):
            for backend in (MEMORY, SHARED):
                for processes in (1, 2):
                    where = path if backend == SHARED else None
                    args = [(where, key_sets[i], settings.seconds) for i in range(processes)]
                    reports = run_together(ctx, throughput_worker, args)
                    windows = [(start, end) for _, start, end, _ in reports]
                    if processes > 1:
                        share = overlap(windows)
                        expect(share >= MIN_OVERLAP, f"{backend}: the processes ran together for {share:.0%} only")
                        scaling.min_overlap = min(scaling.min_overlap, share)
                    rate = sum(calls / (end - start) for calls, start, end, _ in reports)
                    if backend == SHARED:
                        made += sum(calls + PROCESS_KEYS + CHUNK for calls, _, _, _ in reports)
                    key = (backend, processes)
                    cpu = min(share for *_, share in reports)
                    if rate > scaling.rates.get(key, 0.0):
                        scaling.rates[key], scaling.cpu[key] = rate, cpu
                    print(
                        f"  round {round_}: {backend}, {processes} process(es): {rate:,.0f}/s (CPU share >= {cpu:.0%})",
                        file=sys.stderr,
                    )
        allowed, refused = region_decisions(creator)
        expect(
            (allowed, refused) == (made, 0), f"the region counted {allowed:,} allowed, {refused:,} refused of {made:,}"
        )
    return scaling


@dataclass
class Exact:
    rate: float = 0.0  # best decisions/s
    admitted: list[list[int]] = field(default_factory=list)  # per run, per process


def measure_exact(ctx: BaseContext, settings: Settings) -> Exact:
    exact = Exact()
    for run in range(1, settings.repeats + 1):
        with region("exact") as path:
            creator = open_exact_limiter(path)
            reports = run_together(ctx, exact_worker, [(path, EXACT_ATTEMPTS)] * 2)
            admitted = [count for count, _, _ in reports]
            span = max(end for _, _, end in reports) - min(start for _, start, _ in reports)
            total = sum(admitted)
            expect(total == EXACT_ADMITTED, f"two processes admitted {total:,} ({admitted}), not {EXACT_ADMITTED:,}")
            attempts = 2 * EXACT_ATTEMPTS
            counted = region_decisions(creator)
            expect(
                counted == (EXACT_ADMITTED, attempts - EXACT_ADMITTED),
                f"the region counted {counted[0]:,} allowed, {counted[1]:,} refused",
            )
            exact.rate = max(exact.rate, attempts / span)
            exact.admitted.append(admitted)
            print(f"  run {run}: one key, 2 processes: {attempts / span:,.0f}/s, admitted {admitted}", file=sys.stderr)
    return exact


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def fmt_ns(ns: float) -> str:
    return f"{ns:,.0f}" if ns >= 100 else f"{ns:.1f}"


def per_s(ns: float) -> float:
    return 1e9 / ns


def verdict(passed: bool) -> str:
    return "PASS" if passed else "MISS"


@dataclass
class Report:
    hot: dict[str, float]
    keys: dict[str, float]
    scaling: Scaling
    exact: Exact
    pyrate: dict[str, float]
    settings: Settings
    notes: list[str] = field(default_factory=list)
    verdicts: list[bool] = field(default_factory=list)

    def row(self, scenario: str, memory: str, shared: str, other: str, ratio: str, target: str, ok: bool | None) -> str:
        if ok is not None:
            self.verdicts.append(ok)
        check = "" if ok is None else verdict(ok)
        return f"| {scenario} | {memory} | {shared} | {other} | {ratio} | {target} | {check} |"

    def render(self) -> str:
        s = self.settings
        hot_ratio = self.hot[SHARED] / self.hot[MEMORY]
        keys_ratio = self.keys[SHARED] / self.keys[MEMORY]
        rates = self.scaling.rates
        scale = {backend: rates[(backend, 2)] / rates[(backend, 1)] for backend in (MEMORY, SHARED)}
        runs = [" + ".join(f"{n:,}" for n in run) for run in self.exact.admitted]
        admitted = runs[-1]
        lines = [
            "## ratekeeper's shared-memory store (backend=rk.Shared) vs. in memory, and vs. pyrate-limiter",
            "",
            (
                f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs; ratekeeper "
                f"{version_of('ratekeeper')}, pyrate-limiter {version_of('pyrate-limiter')}. Limit {LIMIT_STR} "
                f"(every call admitted) except in 4; max_keys={MAX_KEYS:,} for both stores. 1, 2, 5: best of "
                f"{s.repeats} interleaved runs of ~{s.target_s:g} s, loop overhead included. 3: best of {s.repeats} "
                f"interleaved rounds of {s.seconds:g} s ({s.start_method}); the processes ran together for >= "
                f"{self.scaling.min_overlap:.0%} of their windows. 4: {len(self.exact.admitted)} run(s), best rate."
            ),
            "",
            "| scenario | memory | shared | other | ratio | target | check |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
            self.row(
                "1. allow(), hot key (ns/call)",
                fmt_ns(self.hot[MEMORY]),
                fmt_ns(self.hot[SHARED]),
                "",
                f"{hot_ratio:.2f}{TIMES} shared/memory",
                f"<= 1.3{TIMES}",
                hot_ratio <= 1.3,
            ),
            self.row(
                f"2. allow(), {NUM_KEYS:,} keys, warmed (ns/call)",
                fmt_ns(self.keys[MEMORY]),
                fmt_ns(self.keys[SHARED]),
                "",
                f"{keys_ratio:.2f}{TIMES} shared/memory",
                f"<= 2{TIMES}",
                keys_ratio <= 2.0,
            ),
            self.row(
                f"3. 1 process, {PROCESS_KEYS:,} own keys (decisions/s)",
                f"{rates[(MEMORY, 1)]:,.0f}",
                f"{rates[(SHARED, 1)]:,.0f}",
                "",
                "",
                "",
                None,
            ),
            self.row(
                f"3. 2 processes together, {PROCESS_KEYS:,} own keys each (decisions/s, sum)",
                f"{rates[(MEMORY, 2)]:,.0f}",
                f"{rates[(SHARED, 2)]:,.0f}",
                "",
                f"{scale[SHARED]:.2f}{TIMES} shared 2/1 (memory: {scale[MEMORY]:.2f}{TIMES})",
                f">= 1.7{TIMES}",
                scale[SHARED] >= 1.7,
            ),
            self.row(
                f"4. 2 processes, ONE key, {EXACT_ADMITTED:,} per 365 days, 2 {TIMES} {EXACT_ATTEMPTS:,} attempts "
                "(decisions/s)",
                "",
                f"{self.exact.rate:,.0f}",
                "",
                f"admitted {admitted} = {EXACT_ADMITTED:,}",
                f"exactly {EXACT_ADMITTED:,}",
                True,  # measure_exact raised otherwise
            ),
        ]
        for name, ns in self.pyrate.items():
            speedup = ns / self.hot[SHARED]
            target = name == PYRATE_LOG
            lines.append(
                self.row(
                    f"5. {name}, hot key, 1 process (decisions/s)",
                    "",
                    f"{per_s(self.hot[SHARED]):,.0f}",
                    f"{per_s(ns):,.0f}",
                    f"ratekeeper shared {speedup:,.0f}{TIMES} faster",
                    f">= 20{TIMES}" if target else "",
                    speedup >= 20 if target else None,
                )
            )
        lines += [
            "",
            "Notes:",
            "- memory in 3: each process has its own limiter (no shared state): what the machine scales to.",
            "- 3: the least share of its window a worker had a CPU for, in each best round (under 100 %: something "
            "else ran on the machine): "
            + ", ".join(
                f"{backend} {processes} process(es) {self.scaling.cpu[(backend, processes)]:.0%}"
                for backend in (MEMORY, SHARED)
                for processes in (1, 2)
            )
            + ".",
            f"- 4: admitted per process, every run: {'; '.join(runs)}.",
            "- 5: the shared column is scenario 1's shared hot key; pyrate's numbers are try_acquire(name), its "
            "blocking default (never blocks here: nothing is refused).",
            *[f"- {note}" for note in self.notes],
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: ~0.05 s per run, 0.3 s rounds, 2 repeats")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--start-method", choices=("spawn", "fork", "forkserver"), default="spawn")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(target_s=0.05, repeats=2, seconds=0.3) if args.quick else Settings()
    settings.start_method = args.start_method
    ctx = multiprocessing.get_context(settings.start_method)
    keys = make_peers(NUM_KEYS, seed=0)

    print("1. hot key ...", file=sys.stderr)
    hot = measure_one_process("hot", settings, keys)
    print(f"  memory {hot[MEMORY]:.1f} ns, shared {hot[SHARED]:.1f} ns", file=sys.stderr)
    print(f"2. {NUM_KEYS:,} keys ...", file=sys.stderr)
    many = measure_one_process("keys", settings, keys)
    print(f"  memory {many[MEMORY]:.1f} ns, shared {many[SHARED]:.1f} ns", file=sys.stderr)
    print("3. one process, then two ...", file=sys.stderr)
    scaling = measure_scaling(ctx, settings)
    print("4. two processes, one key ...", file=sys.stderr)
    exact = measure_exact(ctx, settings)
    print("5. pyrate-limiter ...", file=sys.stderr)
    pyrate, note = measure_pyrate(settings)

    report = Report(hot, many, scaling, exact, pyrate, settings, notes=[note] if note else [])
    print(report.render())
    write_json(args.json, report)
    return 1 if args.check and not all(report.verdicts) else 0


def write_json(path: Path | None, report: Report) -> None:
    """The figures for ``benches/render.py``."""
    s = report.settings
    data = {
        "hot_ns": {MEMORY: report.hot[MEMORY], SHARED: report.hot[SHARED]},
        "keys_ns": {MEMORY: report.keys[MEMORY], SHARED: report.keys[SHARED]},
        "keys": NUM_KEYS,
        "max_keys": MAX_KEYS,
        "region_bytes": report.hot["region_bytes"],
        "process_keys": PROCESS_KEYS,
        "scaling": [
            {"backend": backend, "processes": n, "per_s": rate, "cpu_share": report.scaling.cpu[backend, n]}
            for (backend, n), rate in report.scaling.rates.items()
        ],
        "exact": {
            "per_s": report.exact.rate,
            "admitted": report.exact.admitted,
            "limit": EXACT_ADMITTED,
            "attempts_each": EXACT_ATTEMPTS,
        },
        "pyrate_ns": report.pyrate,
        "notes": report.notes,
    }
    settings = {"repeats": s.repeats, "target_s": s.target_s, "seconds": s.seconds, "start_method": s.start_method}
    write_results(path, "shared", data, describe(["pyrate-limiter"]), **settings)


if __name__ == "__main__":
    sys.exit(main())
