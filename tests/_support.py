"""Helpers shared by the test modules: driving traffic on a ManualClock, running threads, units."""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, get_args

import ratekeeper as rk
from hypothesis import HealthCheck, settings

NS_PER_US = 1_000

#: Every algorithm of a rate limit, read from the public type, so that a new one is tested everywhere at
#: once. ``"concurrency"`` is not among them: it is a kind of limit (``Limit(concurrency=5)``), not an algorithm.
ALGORITHMS: tuple[rk.Algorithm, ...] = get_args(rk.Algorithm)

#: Where a limiter keeps its states, or who decides: this process's memory, a shared-memory region
#: (``rk.Shared``), Redis in exact mode (``rk.Redis``: one script call per decision) or Redis in sync mode
#: (``rk.Redis(mode="sync")``: decided in this process, usage pushed to Redis at each sync); each Redis mode
#: against Valkey too.
Store = Literal["memory", "shared", "redis_exact", "redis_sync", "valkey_exact", "valkey_sync"]
STORES: tuple[Store, ...] = get_args(Store)


class MakeLimiter(Protocol):
    """The ``make_limiter`` fixture: ``rk.Limiter(*args, **options)`` on the test's store, a fresh one at
    every call (in Redis, under a key prefix of its own, so two limiters never share a key)."""

    def __call__(self, *args: Any, **options: Any) -> rk.Limiter: ...


Test = TypeVar("Test", bound=Callable[..., None])


def fresh_per_example(test: Test) -> Test:
    """For hypothesis tests that take ``make_limiter`` (a function-scoped fixture, so shared by every
    example): safe, as long as each example builds its limiters by calling it and never reuses another's.

    A function, not a ``settings`` object made here: this module is imported by conftest before it loads
    the hypothesis profile, and a ``settings`` made then would pin the library's defaults (100 examples,
    a 200 ms deadline) instead of the profile's. Made at decoration, it inherits the profile in force.
    """
    return settings(suppress_health_check=[HealthCheck.function_scoped_fixture])(test)


def removed_with(limiter: rk.Limiter, region: Path) -> rk.Limiter:
    """``limiter``, whose shared region's file ``region`` is removed when it is collected: a test's
    many regions do not pile up, and none is removed under a live limiter (which would make it anew at
    its next decision, following the file at its path)."""
    weakref.finalize(limiter, region.unlink, True)
    return limiter


def ns(seconds: float) -> float:
    """Nanoseconds of a time the limiter reports in seconds (exactly ns / 1e9), or ``inf`` for never."""
    return seconds if math.isinf(seconds) else round(seconds * 1e9)


@dataclass(frozen=True)
class Admission:
    at_ns: int
    cost: int


def run(
    limiter: rk.Limiter, clock: rk.ManualClock, requests: list[tuple[int, int]], peer: str = "peer"
) -> list[Admission]:
    """Sends ``(gap_us, cost)`` requests; the admitted ones with their times in ns after the clock's start."""
    at_ns = 0
    admitted = []
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        at_ns += gap_us * NS_PER_US
        if limiter.allow(peer, cost=cost):
            admitted.append(Admission(at_ns, cost))
    return admitted


def run_threads(count: int, work: Callable[[int], None]) -> None:
    """Runs ``work(i)`` on ``count`` threads released together, and re-raises the first failure."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def run_threads_while(count: int, work: Callable[[int], None], beside: Callable[[], None]) -> None:
    """:func:`run_threads`, with ``beside()`` called over and over on one more thread until they end."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            beside()

    other = threading.Thread(target=loop)
    other.start()
    try:
        run_threads(count, work)
    finally:
        stop.set()
        other.join()


def admitted(limiter: rk.Limiter, peer: str, times: int, path: str | None = None) -> int:
    """How many of ``times`` requests of ``peer`` the limiter admits, sent at once."""
    return sum(limiter.allow(peer, path) for _ in range(times))


def assert_within_limits_in_force(admissions: dict[int, int], changes: list[tuple[int, int, Fraction]]) -> None:
    """In every closed interval between two admission times, admitted <= max burst + integral of the rates + 1.

    ``admissions``: count per time in µs; ``changes``: (from µs, burst, rate per µs) in time order.
    """
    times = sorted(admissions)
    ends = [at for at, _, _ in changes[1:]] + [math.inf]

    def integral(a: int, b: int) -> Fraction:
        total = Fraction(0)
        for (start, _, rate), end in zip(changes, ends, strict=True):
            low, high = max(a, start), min(b, end)
            if high > low:
                total += rate * (high - low)
        return total

    def max_burst(a: int, b: int) -> int:
        return max(burst for (start, burst, _), end in zip(changes, ends, strict=True) if start <= b and end >= a)

    for i, t_i in enumerate(times):
        total = 0
        for t_j in times[i:]:
            total += admissions[t_j]
            bound = max_burst(t_i, t_j) + integral(t_i, t_j) + 1
            assert total <= bound, f"{total} admitted in [{t_i}, {t_j}] µs, bound {float(bound)}"


def seen(decision: rk.Decision) -> tuple[object, ...]:
    """What a caller sees of a decision: every number and name, to compare two stores' decisions."""
    return (
        decision.allowed,
        decision.group,
        decision.limit,
        decision.remaining,
        decision.retry_after,
        decision.reset_after,
        decision.next_after,
        decision.refused_by,
    )
