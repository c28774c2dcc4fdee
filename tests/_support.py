"""Helpers shared by the test modules: driving traffic on a ManualClock, running threads, units."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Callable

import ratekeeper as rk

NS_PER_US = 1_000


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
