"""A cancelled wait gives back what no later waiter relies on, in every store.

The promise (docs/concepts.md, "Waits"): a waiter that gives up leaves its key as if it had never asked,
every other admission kept at its instant; when every waiter of a key has given up, in whatever order,
the key decides as if none had asked; no two admissions ever share what the limit allows once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ratekeeper as rk
from _support import MakeLimiter, fresh_per_example
from hypothesis import given
from hypothesis import strategies as st

# Every algorithm a waiter can wait under (a sliding log gives back its own stamps; the rest keep a ledger).
ALGORITHMS = ["gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log", "leaky_bucket"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_thirty_waiters_cancelled_oldest_first_leave_the_key_as_if_none_had_asked(
    make_limiter: MakeLimiter, algorithm: str
) -> None:
    clock, twin_clock = rk.ManualClock(), rk.ManualClock()
    limiter = make_limiter("10/s", burst=1, algorithm=algorithm, clock=clock)
    twin = make_limiter("10/s", burst=1, algorithm=algorithm, clock=twin_clock)
    assert limiter.allow("k")
    assert twin.allow("k")
    waits = [limiter._reserve("k", timeout=60.0) for _ in range(30)]
    assert all(wait.wait > 0 for wait in waits)
    for wait in waits:  # as timers fire: oldest first, never the newest until the last
        limiter._refund(wait)
    assert limiter.check("k").retry_after == pytest.approx(twin.check("k").retry_after)
    clock.advance(0.1)
    twin_clock.advance(0.1)
    assert [limiter.allow("k") for _ in range(3)] == [twin.allow("k") for _ in range(3)]


@pytest.mark.asyncio
@pytest.mark.parametrize("algorithm", ["gcra", "fixed_window", "leaky_bucket"])
async def test_athrottles_timing_out_together_do_not_block_the_key(algorithm: str) -> None:
    """The issue's scene: the burst spent, 30 clients give up their waits at once (wait_for). On the real
    clock (a ManualClock's waits end at once), with slots of 10 s, far beyond the 20 ms timeouts."""
    limiter = rk.Limiter("1/10s", burst=1, algorithm=algorithm)
    assert limiter.allow("k")
    refused_before = limiter.check("k").retry_after
    outcomes = await asyncio.gather(
        *(asyncio.wait_for(limiter.athrottle("k"), 0.02) for _ in range(30)), return_exceptions=True
    )
    assert all(isinstance(outcome, TimeoutError) for outcome in outcomes)
    for _ in range(1000):  # a refund runs once its task has seen the cancellation
        if limiter.check("k").retry_after <= refused_before:
            break
        await asyncio.sleep(0.001)
    # As before the waiters came (less the time that passed); it was 30 slots further.
    assert 0 < limiter.check("k").retry_after <= refused_before


Step = tuple[str, float, int]


def standing_admissions_fit(algorithm: str, admissions: list[tuple[float, int]]) -> bool:
    """Whether a fresh limiter admits every admission still standing, at its instant, in time order:
    what the limit allows, whatever order they were decided in."""
    clock = rk.ManualClock()
    fresh = rk.Limiter("3/s", burst=3, algorithm=algorithm, clock=clock)
    start = clock.now()
    for at, cost in sorted(admissions):
        clock.advance(max(0.0, start + at - clock.now()))
        if not fresh.allow("k", cost=cost):
            return False
    return True


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@fresh_per_example
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["check", "reserve", "reserve", "cancel", "cancel", "advance"]),
            st.sampled_from([0.0, 0.05, 0.2, 0.5, 1.3]),
            st.integers(1, 3),
        ),
        max_size=40,
    ),
    order=st.randoms(use_true_random=False),
)
def test_no_cancellation_order_puts_more_than_the_limit_in_any_window(
    make_limiter: MakeLimiter, algorithm: str, steps: list[Step], order: Any
) -> None:
    clock = rk.ManualClock()
    limiter = make_limiter("3/s", burst=3, algorithm=algorithm, clock=clock)
    start = clock.now()
    standing: list[tuple[float, int]] = []  # (instant from start, cost) of every admission kept
    waiting: list[tuple[Any, float, int]] = []  # reservations still ahead: (reservation, its instant, cost)
    for action, seconds, cost in steps:
        now = clock.now() - start
        if action == "advance":
            clock.advance(seconds)
            waiting = [(r, at, c) for r, at, c in waiting if at > clock.now() - start]  # come: kept for good
        elif action == "check":
            if limiter.allow("k", cost=cost):
                standing.append((now, cost))
        elif action == "reserve":
            reservation = limiter._reserve("k", cost=cost, timeout=10.0)
            if reservation.decision.allowed:
                standing.append((now + reservation.wait, cost))
                if reservation.wait > 0:
                    waiting.append((reservation, now + reservation.wait, cost))
        elif waiting:
            reservation, at, c = waiting.pop(order.randrange(len(waiting)))
            limiter._refund(reservation)
            standing.remove((at, c))
    assert standing_admissions_fit(algorithm, standing)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@fresh_per_example
@given(
    before=st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.7]), st.integers(1, 3)), max_size=8),
    costs=st.lists(st.integers(1, 3), min_size=1, max_size=12),
    changes=st.lists(
        st.tuples(st.sampled_from(["update_rule", "set_quota"]), st.sampled_from(["2/s", "6/s", "3/2s"])), max_size=2
    ),
    after=st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.4]), st.integers(1, 3)), max_size=10),
    order=st.randoms(use_true_random=False),
)
def test_when_every_waiter_gives_up_in_any_order_the_key_decides_as_if_none_had_asked(
    make_limiter: MakeLimiter,
    algorithm: str,
    before: list[tuple[float, int]],
    costs: list[int],
    changes: list[tuple[str, str]],
    after: list[tuple[float, int]],
    order: Any,
) -> None:
    """Also through changes of the key's limit while the waiters wait (a reconfiguration, a quota): the
    twin sees the same changes at the same instants. Not for a sliding log: each admission drops the stamps
    that left the window in force, so a waiter's admission can drop one that a longer window set later
    would have counted, and the twin, which admitted nothing then, keeps (a limit of the sliding log)."""
    if algorithm == "sliding_log":
        changes = []
    clock, twin_clock = rk.ManualClock(), rk.ManualClock()
    limiter = make_limiter("3/s", burst=3, algorithm=algorithm, clock=clock)
    twin = make_limiter("3/s", burst=3, algorithm=algorithm, clock=twin_clock)  # never sees the waiters
    for seconds, cost in before:
        clock.advance(seconds)
        twin_clock.advance(seconds)
        assert limiter.allow("k", cost=cost) == twin.allow("k", cost=cost)
    waiters = []
    for cost in costs:
        reservation = limiter._reserve("k", cost=cost, timeout=30.0)
        if reservation.wait == 0:  # admitted at once, not a waiter: the twin admits it too
            assert reservation.decision.allowed == twin.allow("k", cost=cost)
        else:
            waiters.append(reservation)
    # Changes come while every waiter still waits (one whose slot has come is an admission, not a waiter).
    step = min((reservation.wait for reservation in waiters), default=0.1) / (len(changes) + 1)
    for change, rate in changes:
        clock.advance(step)
        twin_clock.advance(step)
        for lim in (limiter, twin):
            if change == "update_rule":
                lim.update_rule("default", rate, burst=3)
            else:
                lim.set_quota("k", "default", rate)
    order.shuffle(waiters)
    for reservation in waiters:
        limiter._refund(reservation)
    for seconds, cost in after:
        clock.advance(seconds)
        twin_clock.advance(seconds)
        told, twin_told = limiter.check("k", cost=cost), twin.check("k", cost=cost)
        assert (told.allowed, told.retry_after) == pytest.approx((twin_told.allowed, twin_told.retry_after))


# x/time/rate's reservation tests (rate_test.go), in its units: a token each 100 ms, t(n) = n * 100 ms.
# Where a ledger gives back more than Go's rule (Go keeps what a later reservation might have relied on),
# the act time is earlier; it is still within the limit (the property tests above).
GO_TESTS = {
    # name: (rate, burst, steps): ("reserve", at, cost, acts at) | ("cancel", at, index of the reservation)
    # | ("rate", at, new rate)
    "TestCancelLast": ("10/s", 2, [("reserve", 0, 2, 0), ("reserve", 0, 2, 2), ("cancel", 1, 1), ("reserve", 1, 2, 2)]),
    "TestCancelTooLate": (  # Go: no effect, the last acts at t4; here the slot the waiter never used comes back
        "10/s",
        2,
        [("reserve", 0, 2, 0), ("reserve", 0, 2, 2), ("cancel", 3, 1), ("reserve", 3, 2, 3)],
    ),
    "TestCancel0Tokens": (  # Go: the last acts at t3
        "10/s",
        2,
        [("reserve", 0, 2, 0), ("reserve", 0, 1, 1), ("reserve", 0, 1, 2), ("cancel", 0, 1), ("reserve", 0, 1, 2)],
    ),
    "TestCancel1Token": (
        "10/s",
        2,
        [("reserve", 0, 2, 0), ("reserve", 0, 2, 2), ("reserve", 0, 1, 3), ("cancel", 2, 1), ("reserve", 2, 2, 4)],
    ),
    "TestCancelMulti": (  # Go: the last acts at t5
        "10/s",
        4,
        [
            ("reserve", 0, 4, 0),
            ("reserve", 0, 3, 3),
            ("reserve", 0, 1, 4),
            ("reserve", 0, 1, 5),
            ("cancel", 1, 3),
            ("cancel", 1, 1),
            ("reserve", 1, 3, 4),
        ],
    ),
    "TestReserveSetLimitCancel": (
        "5/s",
        2,
        [("reserve", 0, 2, 0), ("reserve", 0, 2, 4), ("rate", 2, "10/s"), ("cancel", 2, 1), ("reserve", 2, 2, 3)],
    ),
}


@pytest.mark.parametrize("name", sorted(GO_TESTS))
def test_go_reservation_tests_act_when_go_does_or_earlier(make_limiter: MakeLimiter, name: str) -> None:
    rate, burst, steps = GO_TESTS[name]
    clock = rk.ManualClock()
    limiter = make_limiter(rate, burst=burst, clock=clock)
    start, tick = clock.now(), 0.1
    held: list[Any] = []
    for step in steps:
        clock.advance(max(0.0, start + step[1] * tick - clock.now()))
        if step[0] == "reserve":
            _, at, cost, acts = step
            reservation = limiter._reserve("k", cost=cost, timeout=10.0)
            held.append(reservation)
            assert at * tick + reservation.wait == pytest.approx(acts * tick), step
        elif step[0] == "cancel":
            limiter._refund(held[step[2]])
        else:
            limiter.update_rule("default", step[2], burst=burst)
