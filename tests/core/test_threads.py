"""Many threads on one limiter: admissions are counted exactly and throttle waiters get distinct slots.

The clock is a frozen ``ManualClock``, so the counts below do not depend on how the threads interleave.
"""

from __future__ import annotations

import ratekeeper as rk
from _support import run_threads

THREADS = 16
CALLS = 200


def test_threads_hammering_one_key_get_exactly_the_burst(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1000/min", clock=clock)
    admitted = [0] * THREADS

    def work(i: int) -> None:
        admitted[i] = sum(limiter.allow("shared") for _ in range(CALLS))

    run_threads(THREADS, work)
    assert sum(admitted) == 1000
    group = limiter.stats()["groups"]["default"]
    assert (group["requests"], group["allowed"], group["refused"]) == (THREADS * CALLS, 1000, THREADS * CALLS - 1000)


def test_threads_checking_one_key_see_each_remaining_count_once(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1000/min", clock=clock)
    seen: list[list[int]] = [[] for _ in range(THREADS)]

    def work(i: int) -> None:
        seen[i] = [d.remaining for d in (limiter.check("shared") for _ in range(CALLS)) if d.allowed]

    run_threads(THREADS, work)
    assert sorted(r for per_thread in seen for r in per_thread) == list(range(1000))


def test_threads_on_their_own_keys_each_get_their_burst(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("50/min", clock=clock)
    admitted = [0] * THREADS

    def work(i: int) -> None:
        admitted[i] = sum(limiter.allow(f"peer-{i}") for _ in range(CALLS))

    run_threads(THREADS, work)
    assert admitted == [50] * THREADS
    assert len(limiter) == THREADS


def test_throttling_threads_get_distinct_consecutive_slots(clock: rk.ManualClock) -> None:
    """Slots of a "1/s" key are at least 1 s apart; n admissions ending at n - 1 s are exactly 0, 1, ..., n - 1 s."""
    waiters = 8
    limiter = rk.Limiter("1/s", clock=clock)
    decisions: list[rk.Decision] = []

    run_threads(waiters, lambda _: decisions.append(limiter.throttle("shared")))

    assert len(decisions) == waiters
    assert all(d.allowed for d in decisions)
    group = limiter.stats()["groups"]["default"]
    assert (group["allowed"], group["delayed"], group["refused"]) == (waiters, waiters - 1, 0)
    assert clock.now() == waiters - 1
    assert limiter.check("shared").retry_after == 1.0
