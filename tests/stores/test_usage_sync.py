"""Usage export for sync between nodes: ``track_usage=True``, ``drain_pending`` and ``absorb``.

``drain_pending()`` hands out, per (peer, group) key, the units this limiter admitted since the last drain
(cost counted, refusals not), each key once, and starts counting afresh. ``absorb(peer, group, n)`` adds n
units used elsewhere to the key as used now, so the key may then be refused until they drain away.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import ratekeeper as rk
from _support import admitted, run_threads_while


def tracked(clock: rk.ManualClock, **options: object) -> rk.Limiter:
    return rk.Limiter(
        "10/min",
        rules=[rk.Rule("^/api", "api", "5/min")],
        track_usage=True,
        clock=clock,
        **options,  # type: ignore[arg-type]
    )


def test_drain_pending_gives_the_admitted_units_of_each_key_once(clock: rk.ManualClock) -> None:
    limiter = tracked(clock)
    assert admitted(limiter, "alice", 3) == 3
    assert limiter.check("alice", cost=2).allowed
    assert admitted(limiter, "bob", 2, "/api/x") == 2
    assert admitted(limiter, "carol", 7, "/api/x") == 5  # 2 refused: not counted
    assert sorted(limiter.drain_pending()) == [("alice", "default", 5), ("bob", "api", 2), ("carol", "api", 5)]
    assert limiter.drain_pending() == []
    assert limiter.allow("alice", "/api/x")
    assert limiter.drain_pending() == [("alice", "api", 1)]
    assert limiter.drain_pending() == []


def test_a_refused_cost_is_not_counted(clock: rk.ManualClock) -> None:
    limiter = tracked(clock)
    assert not limiter.check("alice", "/api/x", cost=6).allowed
    assert limiter.check("alice", "/api/x", cost=4).allowed
    assert not limiter.check("alice", "/api/x", cost=2).allowed
    assert limiter.drain_pending() == [("alice", "api", 4)]


def test_throttled_and_named_group_admissions_are_counted(clock: rk.ManualClock) -> None:
    limiter = tracked(clock)
    for _ in range(7):
        limiter.throttle("alice", "/api/x")  # 5 at once, then 2 after waiting
    limiter.throttle("alice", group="api", cost=1)
    assert limiter.drain_pending() == [("alice", "api", 8)]


@pytest.mark.asyncio
async def test_athrottle_admissions_are_counted_and_a_cancelled_one_is_not(clock: rk.ManualClock) -> None:
    limiter = tracked(clock)
    await asyncio.gather(*(limiter.athrottle("alice", "/api/x") for _ in range(6)))
    assert limiter.drain_pending() == [("alice", "api", 6)]
    assert clock.now() == 12.0
    waiter = asyncio.create_task(limiter.athrottle("alice", "/api/x"))
    for _ in range(20):  # until the task has reserved its slot (a refused check changes nothing)
        await asyncio.sleep(0)
        if limiter.check("alice", "/api/x").retry_after > 12.0:
            break
    assert not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.drain_pending() == []


def test_exempt_and_unrouted_requests_are_not_counted(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(
        rules=[rk.Rule("^/api", "api", "5/min")], exempt_peers=["admin"], track_usage=True, clock=clock
    )
    assert admitted(limiter, "admin", 3, "/api/x") == 3
    assert admitted(limiter, "alice", 3, "/static") == 3
    assert limiter.drain_pending() == []
    limiter.off()
    assert admitted(limiter, "alice", 3, "/api/x") == 3
    assert limiter.drain_pending() == []


def test_drain_pending_without_track_usage_is_an_invalid_value(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/min", clock=clock)
    limiter.check("alice")
    with pytest.raises(rk.InvalidValue) as info:
        limiter.drain_pending()
    assert isinstance(info.value, ValueError)
    assert info.value.loc == ("track_usage",)


# --- absorb ------------------------------------------------------------------------------------------------------


def test_absorb_filling_the_limit_refuses_the_key_until_it_drains(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("5/min", track_usage=True, clock=clock)
    limiter.absorb("alice", "default", 5)
    refused = limiter.check("alice")
    assert (refused.allowed, refused.remaining, refused.retry_after) == (False, 0, 12.0)
    assert limiter.allow("bob")  # only that key
    clock.advance(60)
    assert admitted(limiter, "alice", 10) == 5


def test_absorb_part_of_the_limit_leaves_the_rest(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("5/min", track_usage=True, clock=clock)
    limiter.check("alice")
    limiter.absorb("alice", "default", 3)
    assert admitted(limiter, "alice", 10) == 1


def test_absorbed_units_are_not_drained_again(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("5/min", track_usage=True, clock=clock)
    limiter.absorb("alice", "default", 2)
    limiter.absorb("bob", "default", 1)
    assert limiter.drain_pending() == []
    assert admitted(limiter, "alice", 10) == 3
    assert limiter.drain_pending() == [("alice", "default", 3)]


def test_absorb_into_an_unknown_group_is_an_invalid_value(clock: rk.ManualClock) -> None:
    limiter = tracked(clock)
    with pytest.raises(rk.InvalidValue, match="nope"):
        limiter.absorb("alice", "nope", 1)


def test_no_unit_is_lost_or_counted_twice_while_draining_under_threads(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1000000/min", track_usage=True, clock=clock)
    threads, rounds, peers = 8, 2_000, 5
    drained: Counter[tuple[str, str]] = Counter()

    def drain() -> None:
        for peer, group, units in limiter.drain_pending():
            drained[peer, group] += units

    def work(i: int) -> None:
        for n in range(rounds):
            assert limiter.allow(f"peer-{(i + n) % peers}", cost=1 + n % 3)

    run_threads_while(threads, work, drain)
    drain()
    expected: Counter[tuple[str, str]] = Counter()
    for i in range(threads):
        for n in range(rounds):
            expected[f"peer-{(i + n) % peers}", "default"] += 1 + n % 3
    assert drained == expected
