"""Waiting: ``throttle`` and ``athrottle`` reserve a slot, wait for it, honour ``timeout`` and give back what they drop.

Timed waits run on a ``ManualClock``, which a wait advances to the waiter's deadline instead of sleeping.
The cancellation and Ctrl-C tests use the real clock but never wait for time to pass: they interrupt a
60 s wait at once and check that its slot was returned.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import signal
import sys
import threading
import time
from typing import Any

import pytest
import ratekeeper as rk
from hypothesis import given
from hypothesis import strategies as st


def test_throttle_admits_at_once_when_there_is_room(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    decision = limiter.throttle("alice")
    assert (decision.allowed, decision.remaining) == (True, 2)
    assert clock.now() == 0.0


def test_successive_waiters_are_served_one_interval_apart(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    returned_at = []
    for _ in range(5):
        assert limiter.throttle("alice").allowed
        returned_at.append(clock.now())
    assert returned_at == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_throttle_with_cost_waits_for_that_many_intervals(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", burst=3, clock=clock)
    limiter.throttle("alice", cost=3)
    limiter.throttle("alice", cost=2)
    assert clock.now() == 2.0


def test_throttle_counts_delayed_requests(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    for _ in range(3):
        limiter.throttle("alice")
    group = limiter.stats()["groups"]["default"]
    assert (group["requests"], group["allowed"], group["delayed"], group["refused"]) == (3, 3, 2, 0)


def test_timeout_shorter_than_the_wait_raises_and_reserves_nothing(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    limiter.throttle("alice")
    with pytest.raises(rk.RateLimited) as info:
        limiter.throttle("alice", timeout=0.5)
    assert info.value.retry_after == 1.0
    assert (info.value.decision.allowed, info.value.decision.group) == (False, "default")
    assert clock.now() == 0.0
    assert limiter.check("alice").retry_after == 1.0


def test_timeout_equal_to_the_wait_is_enough(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    limiter.throttle("alice")
    assert limiter.throttle("alice", timeout=1.0).allowed
    assert clock.now() == 1.0


def test_zero_timeout_admits_only_what_check_would(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", clock=clock)
    assert limiter.throttle("alice", timeout=0).allowed
    assert limiter.throttle("alice", timeout=0).allowed
    with pytest.raises(rk.RateLimited):
        limiter.throttle("alice", timeout=0)


def test_cost_above_the_burst_raises_at_once_even_without_timeout(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    with pytest.raises(rk.RateLimited) as info:
        limiter.throttle("alice", cost=4)
    assert math.isinf(info.value.retry_after)
    assert clock.now() == 0.0
    assert limiter.check("alice").remaining == 2


def test_rate_limited_message_names_the_group_and_the_wait(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    limiter.throttle("alice")
    with pytest.raises(rk.RateLimited, match=r"'default'.*1\.000s"):
        limiter.throttle("alice", timeout=0)


def test_throttle_on_an_unlimited_path_returns_at_once(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", "1/min")], clock=clock)
    for _ in range(10):
        assert limiter.throttle("alice", "/static").group is None
    assert clock.now() == 0.0


def test_token_bucket_waiters_are_served_window_by_window(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", algorithm="token_bucket", clock=clock)
    returned_at = []
    for _ in range(6):
        limiter.throttle("alice")
        returned_at.append(clock.now())
    assert returned_at == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


@pytest.mark.asyncio
async def test_athrottle_tasks_finish_in_order_at_their_slots(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    finished: list[tuple[int, float]] = []

    async def request(i: int) -> None:
        await limiter.athrottle("alice")
        finished.append((i, clock.now()))

    await asyncio.gather(*(request(i) for i in range(5)))
    assert finished == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]


@pytest.mark.asyncio
async def test_athrottle_serves_one_task_per_interval(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    order: list[int] = []

    async def request(i: int) -> None:
        await limiter.athrottle("alice")
        order.append(i)

    await asyncio.gather(*(request(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert clock.now() == 4.0
    assert limiter.check("alice").retry_after == 1.0


@pytest.mark.asyncio
async def test_athrottle_timeout_raises_and_reserves_nothing(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    await limiter.athrottle("alice")
    with pytest.raises(rk.RateLimited) as info:
        await limiter.athrottle("alice", timeout=0.5)
    assert info.value.retry_after == 1.0
    assert limiter.check("alice").retry_after == 1.0


@pytest.mark.asyncio
async def test_cancelled_athrottle_gives_its_slot_back() -> None:
    limiter = rk.Limiter("1/min")
    limiter.check("alice")
    waiter = asyncio.create_task(limiter.athrottle("alice"))
    await asyncio.sleep(0)
    assert limiter.check("alice").retry_after > 60.0
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.check("alice").retry_after <= 60.0


def test_ctrl_c_interrupts_throttle_and_gives_its_slot_back() -> None:
    limiter = rk.Limiter("1/min")
    limiter.check("alice")
    done = threading.Event()

    def waiting(frame: Any) -> bool:
        while frame is not None:
            if frame.f_code.co_name == "_wait":
                return True
            frame = frame.f_back
        return False

    def ctrl_c(signum: int, frame: Any) -> None:
        # Ctrl-C as Python's default handler takes it, but only in the wait: a press handled elsewhere (a
        # finalizer, which swallows the KeyboardInterrupt, or after the wait ended) is passed over, and the
        # next press comes.
        if waiting(frame):
            raise KeyboardInterrupt

    def press_ctrl_c() -> None:
        main = threading.main_thread().ident
        assert main is not None
        for _ in range(3_000):  # until the wait is interrupted: counted, not timed
            if done.wait(0.01):
                return
            frame = sys._current_frames().get(main)
            if frame is not None and waiting(frame):
                signal.pthread_kill(main, signal.SIGINT)

    default = signal.signal(signal.SIGINT, ctrl_c)
    helper = threading.Thread(target=press_ctrl_c)
    started = time.monotonic()
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            limiter.throttle("alice")
    finally:
        done.set()
        helper.join()
        signal.signal(signal.SIGINT, default)
    assert time.monotonic() - started < 30.0
    assert limiter.check("alice").retry_after <= 60.0


@pytest.mark.asyncio
async def test_a_cancelled_waiter_under_later_ones_gives_nobody_a_promised_slot(clock: rk.ManualClock) -> None:
    # 10/s, burst 1: waiters at 0.1, 0.2 and 0.3; the one at 0.2 is cancelled, then a fourth arrives.
    # Moving the key's arrival time back gave the fourth the 0.3 slot the third already held.
    limiter = rk.Limiter("10/s", burst=1, clock=clock)
    assert limiter.allow("alice")
    served: list[float] = []

    async def waiter() -> None:
        await limiter.athrottle("alice")
        served.append(clock.now())

    first, second, third = (asyncio.create_task(waiter()) for _ in range(3))
    await asyncio.sleep(0)
    second.cancel()
    fourth = asyncio.create_task(waiter())
    await asyncio.gather(first, third, fourth)
    assert second.cancelled()
    assert sorted(served) == pytest.approx([0.1, 0.3, 0.4])


@given(
    st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=60),
    st.sampled_from(["gcra", "sliding_log"]),
)
def test_random_cancellations_never_put_two_admissions_in_one_slot(
    steps: list[tuple[int, bool]], algorithm: str
) -> None:
    # 1 per 100 ms: wherever waiters are cancelled before their slot, no two admissions (the slots kept)
    # are closer than 100 ms. (Window algorithms are checked window by window in the Rust tests.)
    clock = rk.ManualClock()
    limiter = rk.Limiter(rules=[rk.Rule("", "g", "1/100ms", algorithm=algorithm)], clock=clock)
    held: list[tuple[int, Any]] = []
    for advance_ms, cancel in steps:
        clock._advance_to_ns(round(clock.now() * 1e9) + advance_ms * 20_000_000)
        reservation = limiter._reserve("alice", timeout=None, wait_quota=False)
        held.append((reservation.deadline_ns, reservation))
        waiting = [i for i, (deadline, _) in enumerate(held) if deadline > round(clock.now() * 1e9)]
        if cancel and waiting:
            _, victim = held.pop(waiting[len(waiting) // 2])
            limiter._refund(victim)
    slots = sorted(deadline for deadline, _ in held)
    assert all(later - earlier >= 100_000_000 for earlier, later in itertools.pairwise(slots))
