"""Concurrency permits: ``rk.Limit(concurrency=N)`` in a rule's limits, held with ``Limiter.concurrent``.

Permits are taken on entering ``with`` / ``async with`` and given back on leaving, whether the body returns,
raises or is cancelled. A refusal raises ``rk.RateLimited`` with ``retry_after == 0.0`` (a permit frees when a
request finishes, at no known time). ``check`` and ``allow`` never take permits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import pytest
import ratekeeper as rk
from _support import run_threads

GROUP = "g"
PEER = "peer"


def gated(clock: rk.ManualClock, *limits: rk.Limit | str, policy: str = "all") -> rk.Limiter:
    return rk.Limiter(rules=[rk.Rule("^/api/", GROUP, limits=list(limits), policy=policy)], clock=clock)


def free_permits(limiter: rk.Limiter, peer: str = PEER) -> int:
    """How many permits ``peer`` can take now: acquisitions until one is refused, all given back after.
    Only permits are taken (``rates=False``), so probing charges no rate limit."""
    retry_after = None
    taken = 0
    with contextlib.ExitStack() as held:
        while retry_after is None and taken < 1_000:
            try:
                held.enter_context(limiter.concurrent(peer, "/api/x", rates=False))
                taken += 1
            except rk.RateLimited as refused:
                retry_after = refused.retry_after
    assert retry_after == 0.0
    return taken


def test_permits_are_taken_on_entering_and_given_back_on_leaving(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "100/s", rk.Limit(concurrency=2))
    with limiter.concurrent(PEER, "/api/a") as first:
        assert first.allowed
        assert first.group == GROUP
        with limiter.concurrent(PEER, "/api/b"):
            with pytest.raises(rk.RateLimited) as refused, limiter.concurrent(PEER, "/api/c"):
                pytest.fail("a third request entered")
            assert refused.value.retry_after == 0.0
            assert not refused.value.decision.allowed
            with limiter.concurrent("other", "/api/c"):  # permits are per peer
                pass
        with limiter.concurrent(PEER, "/api/c"):
            pass
    assert free_permits(limiter) == 2


def test_permits_are_given_back_when_the_body_raises(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=1))
    for _ in range(3):
        with pytest.raises(KeyError), limiter.concurrent(PEER, "/api/x"):
            raise KeyError("boom")
    assert free_permits(limiter) == 1


def test_a_permit_costs_its_cost(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=3))
    with limiter.concurrent(PEER, "/api/x", cost=2):
        with pytest.raises(rk.RateLimited), limiter.concurrent(PEER, "/api/x", cost=2):
            pass
        with limiter.concurrent(PEER, "/api/x", cost=1):
            pass
    assert free_permits(limiter) == 3


def test_plain_checks_take_no_permits(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "100/s", rk.Limit(concurrency=1))
    with limiter.concurrent(PEER, "/api/x"):
        for _ in range(10):
            assert limiter.check(PEER, "/api/x").allowed
            assert limiter.allow(PEER, "/api/x")
        with pytest.raises(rk.RateLimited), limiter.concurrent(PEER, "/api/x"):
            pass
    assert limiter.check(PEER, "/api/x").allowed
    assert free_permits(limiter) == 1


@pytest.mark.parametrize("policy", ["all", "fallback"])
def test_a_group_of_gates_only_limits_concurrency(policy: str, clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=2), policy=policy)
    assert all(limiter.allow(PEER, "/api/x") for _ in range(100))
    assert free_permits(limiter) == 2


def test_a_gate_refusal_spends_no_rate_and_a_rate_refusal_takes_no_permit(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "2/min", rk.Limit(concurrency=1))
    with limiter.concurrent(PEER, "/api/x"):  # 1 of 2 per minute
        for _ in range(5):
            with pytest.raises(rk.RateLimited) as gate, limiter.concurrent(PEER, "/api/x"):
                pass
            assert gate.value.retry_after == 0.0
    with limiter.concurrent(PEER, "/api/x"):  # 2 of 2: the gate's refusals spent nothing
        pass
    for _ in range(5):
        with pytest.raises(rk.RateLimited) as rate, limiter.concurrent(PEER, "/api/x"):
            pass
        assert rate.value.retry_after == 30.0
    clock.advance(30)
    with limiter.concurrent(PEER, "/api/x"):  # the rate's refusals took no permit
        pass


def test_max_wait_waits_for_the_rate_then_takes_a_permit_as_one_request(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "2/min", rk.Limit(concurrency=1))
    for _ in range(3):
        with limiter.concurrent(PEER, "/api/x", max_wait=60.0):
            pass
    assert clock.now() == 30.0  # the third waited for its slot
    counters = limiter.stats()["groups"][GROUP]
    assert (counters["requests"], counters["allowed"], counters["refused"], counters["delayed"]) == (3, 3, 0, 1)


def test_max_wait_refused_a_permit_gives_its_rate_slot_back(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "2/min", rk.Limit(concurrency=1))
    with limiter.concurrent(PEER, "/api/x"):  # in flight: the permit and slot 1 of 2
        with pytest.raises(rk.RateLimited) as refused, limiter.concurrent(PEER, "/api/x", max_wait=60.0):
            pytest.fail("entered without a permit")
        assert refused.value.decision.refused_by == "concurrency"
    with limiter.concurrent(PEER, "/api/x", max_wait=60.0):  # slot 2 is still free: no wait
        pass
    assert clock.now() == 0.0
    counters = limiter.stats()["groups"][GROUP]
    assert (counters["requests"], counters["allowed"], counters["refused"]) == (3, 2, 1)


@pytest.mark.asyncio
async def test_async_max_wait_after_a_wait_refused_a_permit_gives_everything_back(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "1/min", rk.Limit(concurrency=1))
    async with limiter.concurrent(PEER, "/api/x"):  # in flight: the permit and the minute's slot
        with pytest.raises(rk.RateLimited):
            async with limiter.concurrent(PEER, "/api/x", max_wait=60.0):  # waits 60 s, then no permit
                pytest.fail("entered without a permit")
    assert clock.now() == 60.0
    counters = limiter.stats()["groups"][GROUP]
    # The wait was given back with the slot: not delayed; the next minute's slot is free now.
    assert (counters["requests"], counters["refused"], counters["delayed"], counters["abandoned"]) == (2, 1, 0, 1)
    assert limiter.allow(PEER, "/api/x")


def test_max_wait_cannot_go_with_rates_false(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "2/min", rk.Limit(concurrency=1))
    with pytest.raises(rk.InvalidValue) as error:
        limiter.concurrent(PEER, "/api/x", rates=False, max_wait=1.0)
    assert error.value.loc == ("max_wait",)


@pytest.mark.asyncio
async def test_async_with_gives_permits_back_on_exit_and_on_exceptions(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=1))
    async with limiter.concurrent(PEER, "/api/x") as decision:
        assert decision.allowed
        with pytest.raises(rk.RateLimited) as refused:
            async with limiter.concurrent(PEER, "/api/x"):
                pytest.fail("a second request entered")
        assert refused.value.retry_after == 0.0
    with pytest.raises(ValueError, match="boom"):
        async with limiter.concurrent(PEER, "/api/x"):
            raise ValueError("boom")
    assert free_permits(limiter) == 1


@pytest.mark.asyncio
async def test_cancelling_a_task_inside_async_with_gives_its_permit_back(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=1))
    entered, never = asyncio.Event(), asyncio.Event()

    async def handler() -> None:
        async with limiter.concurrent(PEER, "/api/x"):
            entered.set()
            await never.wait()

    task = asyncio.create_task(handler())
    await entered.wait()
    with pytest.raises(rk.RateLimited):
        async with limiter.concurrent(PEER, "/api/x"):
            pass
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with limiter.concurrent(PEER, "/api/x") as decision:
        assert decision.allowed
    assert free_permits(limiter) == 1


def test_threads_never_hold_more_than_the_permits(clock: rk.ManualClock) -> None:
    permits, threads, rounds = 3, 16, 200
    limiter = gated(clock, rk.Limit(concurrency=permits))
    lock = threading.Lock()
    inside = 0
    most = 0
    entered = [0] * threads
    refused = [0] * threads
    retries: set[float] = set()

    def work(i: int) -> None:
        nonlocal inside, most
        for _ in range(rounds):
            try:
                with limiter.concurrent(PEER, "/api/x"):
                    with lock:
                        inside += 1
                        most = max(most, inside)
                    time.sleep(0)  # let another thread run while this one holds its permit
                    with lock:
                        inside -= 1
                entered[i] += 1
            except rk.RateLimited as error:
                retries.add(error.retry_after)
                refused[i] += 1

    run_threads(threads, work)  # re-raises any thread's failure
    assert 1 <= most <= permits
    assert retries <= {0.0}
    assert inside == 0
    assert sum(entered) + sum(refused) == threads * rounds
    assert sum(entered) > 0
    group = limiter.stats()["groups"][GROUP]
    assert (group["requests"], group["allowed"], group["refused"]) == (threads * rounds, sum(entered), sum(refused))
    assert free_permits(limiter) == permits


def test_a_decision_says_whether_it_holds_permits_to_give_back(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(
        rules=[
            rk.Rule("^/api/", GROUP, limits=["100/s", rk.Limit(concurrency=1)]),
            rk.Rule("^/plain", "plain", "100/s"),
        ],
        clock=clock,
    )
    with limiter.concurrent(PEER, "/api/a") as held:
        assert held.permits_held
        with pytest.raises(rk.RateLimited) as refused, limiter.concurrent(PEER, "/api/b"):
            pass
        assert not refused.value.decision.permits_held
    with limiter.concurrent(PEER, "/plain") as plain:
        assert plain.allowed
        assert not plain.permits_held  # a group without permits: nothing to give back
    assert not limiter.check(PEER, "/api/a").permits_held  # check never takes permits
    assert free_permits(limiter) == 1


# --- one Permit object entered more than once --------------------------------------------------------------------
# A Permit is reusable one entry at a time, like a lock: each `with` is a new admission (rates charged,
# permits taken) and leaving gives its permits back. Entering it while it is entered (nested, another
# thread, another task) raises RuntimeError and takes nothing, so no entry's permits can be lost.


def test_a_permit_entered_again_inside_its_block_is_refused_and_leaks_nothing(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=5))
    permit = limiter.concurrent(PEER, "/api/x")
    with permit as decision:
        with pytest.raises(RuntimeError, match="already entered"), permit:
            pytest.fail("the permit was entered twice")
        assert permit.decision is decision  # the refused entry did not replace the holder's decision
        assert free_permits(limiter) == 4  # the outer entry still holds its permit
    assert free_permits(limiter) == 5


def test_a_permit_can_be_reused_after_leaving_and_each_entry_is_a_new_admission(clock: rk.ManualClock) -> None:
    limiter = gated(clock, "2/s", rk.Limit(concurrency=5))
    permit = limiter.concurrent(PEER, "/api/x")
    with permit as first:
        assert free_permits(limiter) == 4
    with permit as second:  # a fresh admission, with its own decision
        assert second is not first
        assert permit.decision is second
        assert second.remaining == 0  # the rate was charged again: 2 admissions of "2/s"
    with pytest.raises(rk.RateLimited) as refused, permit:  # a third entry in the same second: refused
        pytest.fail("admitted past the rate")
    assert refused.value.decision.refused_by == "rate"
    clock.advance(1.0)
    with permit:  # a refusal leaves the permit reusable
        pass
    assert free_permits(limiter) == 5


def test_a_permit_refused_for_lack_of_permits_can_be_entered_once_one_frees(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=1))
    permit = limiter.concurrent(PEER, "/api/x")
    with limiter.concurrent(PEER, "/api/x"), pytest.raises(rk.RateLimited), permit:
        pytest.fail("entered with no permit free")
    with permit as decision:  # the refusal did not leave it marked as entered
        assert decision.allowed
        assert free_permits(limiter) == 0
    assert free_permits(limiter) == 1


@pytest.mark.asyncio
async def test_two_tasks_entering_one_permit_leak_nothing(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=5))
    permit = limiter.concurrent(PEER, "/api/x")
    entered, leave = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with permit:
            entered.set()
            await leave.wait()

    task = asyncio.create_task(holder())
    await entered.wait()
    with pytest.raises(RuntimeError, match="already entered"):
        async with permit:  # a second task on the same object, while the first holds it
            pytest.fail("the permit was entered twice")
    assert free_permits(limiter) == 4
    leave.set()
    await task
    assert free_permits(limiter) == 5
    async with permit:  # reusable once the first task left
        assert free_permits(limiter) == 4
    assert free_permits(limiter) == 5


def test_two_threads_entering_one_permit_at_once_leak_nothing(clock: rk.ManualClock) -> None:
    limiter = gated(clock, rk.Limit(concurrency=5))
    outcomes: list[str] = []
    both_tried = threading.Barrier(2)
    for _ in range(50):
        permit = limiter.concurrent(PEER, "/api/x")
        outcomes.clear()

        def enter(_: int, permit: rk.Permit = permit) -> None:
            try:
                with permit:
                    outcomes.append("entered")
                    both_tried.wait(timeout=10)  # hold the permit until the other thread has tried
            except RuntimeError:
                outcomes.append("refused")
                both_tried.wait(timeout=10)

        run_threads(2, enter)  # released together by a barrier
        assert sorted(outcomes) == ["entered", "refused"]
        assert free_permits(limiter) == 5


def test_threads_hammering_one_shared_permit_leak_nothing(clock: rk.ManualClock) -> None:
    threads, rounds = 8, 500
    limiter = gated(clock, rk.Limit(concurrency=5))
    permit = limiter.concurrent(PEER, "/api/x")
    entered = [0] * threads

    def work(i: int) -> None:
        for _ in range(rounds):
            with contextlib.suppress(RuntimeError), permit:
                entered[i] += 1
                time.sleep(0)  # let another thread try while this one holds it

    run_threads(threads, work)
    assert sum(entered) > 0
    assert limiter.stats()["groups"][GROUP]["allowed"] == sum(entered)  # a refused re-entry decides nothing
    assert free_permits(limiter) == 5


# --- concurrent(rates=False) -----------------------------------------------------------------------------------


def rate_and_permits(clock: rk.ManualClock, permits: int) -> rk.Limiter:
    """``2/min`` and ``permits`` concurrency permits on ``^/api/``."""
    return rk.Limiter(rules=[rk.Rule("^/api/", "g", limits=["2/min", rk.Limit(concurrency=permits)])], clock=clock)


def test_permits_without_rates_charge_no_rate_limit(clock: rk.ManualClock) -> None:
    limiter = rate_and_permits(clock, permits=5)
    assert limiter.throttle("alice", "/api/x").remaining == 1
    with limiter.concurrent("alice", "/api/x", rates=False), limiter.concurrent("alice", "/api/x", rates=False):
        pass
    decisions = [limiter.check("alice", "/api/x") for _ in range(2)]
    assert [(d.allowed, d.remaining) for d in decisions] == [(True, 0), (False, 0)]


def test_permits_without_rates_are_still_bounded(clock: rk.ManualClock) -> None:
    limiter = rate_and_permits(clock, permits=2)
    with limiter.concurrent("alice", "/api/x", rates=False), limiter.concurrent("alice", "/api/x", rates=False):
        with pytest.raises(rk.RateLimited) as info, limiter.concurrent("alice", "/api/x", rates=False):
            pytest.fail("a third permit was taken")
        assert info.value.decision.refused_by == "concurrency"
    with limiter.concurrent("alice", "/api/x", rates=False), limiter.concurrent("alice", "/api/x", rates=False):
        pass  # both were given back


def test_a_request_that_waited_for_its_rate_slot_gets_its_permit(clock: rk.ManualClock) -> None:
    limiter = rate_and_permits(clock, permits=1)
    limiter.throttle("alice", "/api/x")
    limiter.throttle("alice", "/api/x")
    limiter.throttle("alice", "/api/x")  # waited: the rate is used up right now
    assert clock.now() == 30.0
    assert not limiter.allow("alice", "/api/x")
    with limiter.concurrent("alice", "/api/x", rates=False) as decision:
        assert decision.allowed
    with pytest.raises(rk.RateLimited) as info, limiter.concurrent("alice", "/api/x"):
        pytest.fail("the rate admitted a request while used up")
    assert info.value.decision.refused_by == "rate"


ROUTED = """
[groups.slow]
paths = ["^/slow"]
limits = [{concurrency = 1}]
[groups.other]
paths = ["^/other"]
limits = [{concurrency = 1}]
"""
REROUTED = ROUTED.replace('["^/slow"]', '["^/elsewhere"]').replace('["^/other"]', '["^/slow", "^/other"]')
REMOVED = '[groups.other]\npaths = ["^/slow", "^/other"]\nlimits = [{concurrency = 1}]\n'


@pytest.mark.parametrize("after", [REROUTED, REMOVED], ids=["rerouted", "removed"])
def test_a_permit_held_across_a_reload_goes_back_to_the_group_that_took_it(tmp_path: Path, after: str) -> None:
    file = tmp_path / "ratekeeper.toml"
    file.write_text(ROUTED)
    limiter = rk.Limiter.from_file(file)
    with limiter.concurrent(PEER, "/slow", rates=False):
        file.write_text(after)
        limiter.reload(file)  # /slow now routes to "other" (and "slow" may be gone)
    # "other" lent nothing: its one permit is free for a request on /slow now.
    with limiter.concurrent(PEER, "/slow", rates=False) as decision:
        assert decision.group == "other"
    if "[groups.slow]" in after:
        with limiter.concurrent(PEER, group="slow", rates=False):
            pass  # the permit "slow" lent came back
