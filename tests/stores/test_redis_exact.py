"""The Redis backend's exact mode: the same decisions as the in-memory core, on a real redis-server.

Every test here decides the same requests twice, in memory and in Redis, on two ManualClocks moved
together, and compares every number a caller sees. Each test (and each hypothesis example) keeps its
keys apart by a prefix of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import ratekeeper as rk
from _redis import RedisServer
from _support import ALGORITHMS, seen
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

S = 1_000_000_000
examples = itertools.count()
QUOTAS = [None, "2/10s", "20/min", "3/s", "100/min"]
# `pair` builds fresh limiters, under a fresh key prefix, at every call: safe across examples.
fresh_per_example = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


Build = Callable[..., rk.Limiter]


@pytest.fixture
def pair(
    redis_server: RedisServer, redis_prefix: str
) -> Callable[..., tuple[rk.Limiter, rk.Limiter, rk.ManualClock, rk.ManualClock]]:
    """``pair(**limiter_options)``: a memory limiter and a Redis one, each on a ManualClock at ``start``."""

    def build(start: int = 10 * S, **options: object) -> tuple[rk.Limiter, rk.Limiter, rk.ManualClock, rk.ManualClock]:
        memory_clock, redis_clock = rk.ManualClock(start / S), rk.ManualClock(start / S)
        memory = rk.Limiter(clock=memory_clock, **options)  # type: ignore[arg-type]
        backend = rk.Redis(redis_server.url, prefix=f"{redis_prefix}{next(examples)}:", on_error="raise")
        redis = rk.Limiter(clock=redis_clock, backend=backend, **options)  # type: ignore[arg-type]
        return memory, redis, memory_clock, redis_clock

    return build


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_burst_then_refusals_match_memory(
    pair: Callable[..., tuple[rk.Limiter, ...]], algorithm: rk.Algorithm
) -> None:
    memory, redis, memory_clock, redis_clock = pair(rate="5/10s", algorithm=algorithm)
    for step in range(40):
        assert seen(redis.check("alice")) == seen(memory.check("alice")), f"request {step}"
        memory_clock.advance(0.7)
        redis_clock.advance(0.7)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@fresh_per_example
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 3 * S), st.integers(1, 4), st.sampled_from(["alice", "bob"])), min_size=1, max_size=40
    ),
    start=st.integers(0, 10**6 * S),
    rate=st.sampled_from(["3/s", "5/10s", "7/3s", "10/min", "4/250ms"]),
    burst=st.sampled_from([None, 1, 6]),
)
def test_every_decision_matches_memory(
    pair: Callable[..., tuple[rk.Limiter, ...]],
    algorithm: rk.Algorithm,
    steps: list[tuple[int, int, str]],
    start: int,
    rate: str,
    burst: int | None,
) -> None:
    memory, redis, memory_clock, redis_clock = pair(start=start, rate=rate, burst=burst, algorithm=algorithm)
    for advance, cost, peer in steps:
        memory_clock.advance(advance / S)
        redis_clock.advance(advance / S)
        assert seen(redis.check(peer, cost=cost)) == seen(memory.check(peer, cost=cost))


@pytest.mark.parametrize("policy", ["all", "fallback"])
@fresh_per_example
@given(steps=st.lists(st.tuples(st.integers(0, 2 * S), st.integers(1, 3)), min_size=1, max_size=40))
def test_policies_over_several_limits_match_memory(
    pair: Callable[..., tuple[rk.Limiter, ...]], policy: rk.PolicyName, steps: list[tuple[int, int]]
) -> None:
    rules = [
        rk.Rule(
            r"^/api",
            "api",
            limits=[
                rk.Limit("3/s"),
                rk.Limit("10/min", algorithm="sliding_window"),
                rk.Limit("4/2s", algorithm="token_bucket"),
                rk.Limit("5/3s", algorithm="sliding_log"),
            ],
            policy=policy,
        )
    ]
    memory, redis, memory_clock, redis_clock = pair(rules=rules)
    for advance, cost in steps:
        memory_clock.advance(advance / S)
        redis_clock.advance(advance / S)
        assert seen(redis.check("alice", "/api/x", cost=cost)) == seen(memory.check("alice", "/api/x", cost=cost))


def test_waiters_reserve_the_same_slots_as_in_memory(pair: Callable[..., tuple[rk.Limiter, ...]]) -> None:
    memory, redis, _, _ = pair(rate="2/s")
    for _ in range(6):
        assert redis._reserve("alice", None, timeout=5.0).wait == memory._reserve("alice", None, timeout=5.0).wait
    # Beyond the longest wait: refused alike, and nothing reserved.
    assert seen(redis._reserve("alice", None, timeout=0.1).decision) == seen(
        memory._reserve("alice", None, timeout=0.1).decision
    )


def test_exempt_and_unrouted_requests_never_reach_redis(pair: Callable[..., tuple[rk.Limiter, ...]]) -> None:
    rules = [rk.Rule(r"^/api", "api", "1/min")]
    _, redis, _, _ = pair(rules=rules, exempt_peers=["admin"])
    assert redis.check("admin", "/api").allowed
    assert redis.check("admin", "/api").group is None
    assert redis.check("alice", "/static").group is None
    assert redis.stats()["exempt"] >= 2  # type: ignore[operator]


def test_counts_land_in_stats(pair: Callable[..., tuple[rk.Limiter, ...]]) -> None:
    _, redis, _, _ = pair(rate="2/min")
    assert [redis.allow("alice") for _ in range(3)] == [True, True, False]
    group = redis.stats()["groups"]["default"]  # type: ignore[index]
    assert (group["requests"], group["allowed"], group["refused"]) == (3, 2, 1)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@fresh_per_example
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["check", "reduce"]), st.integers(0, 2 * S), st.integers(1, 3)),
        min_size=1,
        max_size=30,
    )
)
def test_reductions_give_back_what_memory_gives_back(
    pair: Callable[..., tuple[rk.Limiter, ...]], algorithm: rk.Algorithm, steps: list[tuple[str, int, int]]
) -> None:
    memory, redis, memory_clock, redis_clock = pair(rate="5/10s", algorithm=algorithm)
    for operation, advance, units in steps:
        memory_clock.advance(advance / S)
        redis_clock.advance(advance / S)
        if operation == "reduce":
            assert redis.reduce("alice", n=units) == memory.reduce("alice", n=units)
        else:
            assert seen(redis.check("alice", cost=units)) == seen(memory.check("alice", cost=units))
    assert redis.stats()["groups"]["default"]["reductions"] == memory.stats()["groups"]["default"]["reductions"]  # type: ignore[index]


@pytest.mark.parametrize("policy", ["all", "fallback"])
def test_a_cancelled_wait_gives_its_slot_back_as_in_memory(
    pair: Callable[..., tuple[rk.Limiter, ...]], policy: rk.PolicyName
) -> None:
    limits = [rk.Limit("2/s"), rk.Limit("3/s", algorithm="sliding_window"), rk.Limit("4/s", algorithm="sliding_log")]
    rules = [rk.Rule(r"^/", "api", limits=limits, policy=policy)]
    memory, redis, _, _ = pair(rules=rules)
    for lim in (memory, redis):
        for _ in range(9):  # every limit spent, under either policy
            lim.allow("alice", "/")
    reservations = [(lim, lim._reserve("alice", "/", timeout=5.0)) for lim in (memory, redis)]
    assert reservations[0][1].wait == reservations[1][1].wait > 0
    for lim, reservation in reservations:
        lim._refund(reservation)
    assert seen(redis.check("alice", "/")) == seen(memory.check("alice", "/"))
    assert redis._reserve("alice", "/", timeout=5.0).wait == memory._reserve("alice", "/", timeout=5.0).wait


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "sliding_log"])
@fresh_per_example
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["check", "check", "quota"]), st.integers(0, 2 * S), st.sampled_from(QUOTAS)),
        min_size=1,
        max_size=30,
    )
)
def test_a_changed_quota_carries_usage_over_as_in_memory(
    pair: Callable[..., tuple[rk.Limiter, ...]], algorithm: rk.Algorithm, steps: list[tuple[str, int, str | None]]
) -> None:
    # A key starts on the failsafe, then its own quota lands; what it used carries over. In
    # memory the change is applied when the quota is set, in Redis at the key's next decision: a quota
    # step decides at once, so both apply it at the same instant.
    memory, redis, memory_clock, redis_clock = pair(rate="5/10s", algorithm=algorithm)
    for operation, advance, quota in steps:
        memory_clock.advance(advance / S)
        redis_clock.advance(advance / S)
        if operation == "quota":
            memory.set_quota("alice", "default", quota)
            redis.set_quota("alice", "default", quota)
        assert seen(redis.check("alice")) == seen(memory.check("alice"))


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "sliding_log"])
def test_toggling_a_quota_between_two_rates_on_a_frozen_clock_admits_the_larger_burst_once(
    pair: Callable[..., tuple[rk.Limiter, ...]], algorithm: rk.Algorithm
) -> None:
    # The script's rescale used to count usage only up to the smaller burst and forget the rest.
    memory, redis, _, _ = pair(rate="20/s", algorithm=algorithm)
    for lim in (memory, redis):
        total = sum(lim.allow("alice") for _ in range(50))
        for i in range(10):
            lim.set_quota("alice", "default", ["10/min", "20/s"][i % 2])
            total += sum(lim.allow("alice") for _ in range(50))
        assert total == 20
    assert seen(redis.check("alice")) == seen(memory.check("alice"))


@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket"])
def test_a_cancelled_wait_under_a_later_one_gives_nothing_back_as_in_memory(
    pair: Callable[..., tuple[rk.Limiter, ...]], algorithm: rk.Algorithm
) -> None:
    memory, redis, _, _ = pair(rate="10/s", burst=1, algorithm=algorithm)
    waits = []
    for lim in (memory, redis):
        assert lim.allow("alice")
        held = [lim._reserve("alice", None, timeout=5.0) for _ in range(3)]
        lim._refund(held[1])
        waits.append(lim._reserve("alice", None, timeout=5.0).wait)
    # Slots at 0.1, 0.2 (cancelled) and 0.3: the newcomer goes after the last one held.
    assert waits == [pytest.approx(0.4), pytest.approx(0.4)]


def test_a_huge_reduction_of_a_sliding_log_returns_at_once(pair: Callable[..., tuple[rk.Limiter, ...]]) -> None:
    memory, redis, _, _ = pair(rate="5/min", algorithm="sliding_log")
    for lim in (memory, redis):
        assert sum(lim.allow("alice") for _ in range(5)) == 5
        assert lim.reduce("alice", n=2**63 - 1)
    assert seen(redis.check("alice")) == seen(memory.check("alice"))


@pytest.mark.parametrize("limit", [rk.Limit("4294967295/s", algorithm="sliding_log"), rk.Limit(concurrency=100_001)])
def test_limits_kept_as_a_member_per_unit_are_bounded_in_exact_mode(redis_server: RedisServer, limit: rk.Limit) -> None:
    # A cost of 2**32 - 1 would have the script add that many members, blocking Redis.
    with pytest.raises(rk.InvalidValue, match="100000"):
        rk.Limiter(rules=[rk.Rule("^/", "g", limits=[limit])], backend=rk.Redis(redis_server.url))


def test_limits_installed_later_are_held_to_the_scripts_bounds(redis_server: RedisServer, redis_prefix: str) -> None:
    # The bound was checked at construction only: update_rule, add_group and set_quota slipped past it.
    backend = rk.Redis(redis_server.url, prefix=f"{redis_prefix}later:")
    limiter = rk.Limiter(rules=[rk.Rule("^/", "g", "10/s", algorithm="sliding_log")], backend=backend)
    with pytest.raises(rk.InvalidValue, match="100000"):
        limiter.update_rule("g", "4294967295/s")
    with pytest.raises(rk.InvalidValue, match="100000"):
        limiter.add_group("huge", [rk.Limit(concurrency=100_001)])
    with pytest.raises(rk.InvalidValue, match="100000"):
        limiter.set_quota("alice", "g", "1000000/s")
    # Nothing was installed: the limits in force are the ones that fit.
    assert [str(rule.limits[0]) for rule in limiter.rules] == ["Limit('10/s', burst=10, algorithm='sliding_log')"]
    assert limiter.quota("alice", "g").source != "set"


# On Redis's own clock (no ManualClock) the script decides at its TIME, this process at its monotonic
# clock: a cancelled wait names its slot by the instant the script replied, which the script compares
# exactly. A slot of 10 s keeps these tests far from any machine's speed.
SLOT = 10.0


def on_redis_time(redis_server: RedisServer, redis_prefix: str, algorithm: rk.Algorithm) -> rk.Limiter:
    backend = rk.Redis(redis_server.url, prefix=f"{redis_prefix}{algorithm}:", on_error="raise", timeout=2.0)
    return rk.Limiter("1/10s", burst=1, algorithm=algorithm, backend=backend)


@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket", "sliding_window", "sliding_log", "leaky_bucket"])
def test_a_cancelled_newest_wait_on_redis_time_gives_its_slot_back(
    redis_server: RedisServer, redis_prefix: str, algorithm: rk.Algorithm
) -> None:
    limiter = on_redis_time(redis_server, redis_prefix, algorithm)
    assert limiter.allow("alice")
    first = limiter._reserve("alice", timeout=60.0)
    assert first.wait > 0
    limiter._refund(first)
    again = limiter._reserve("alice", timeout=60.0)
    assert again.wait <= first.wait  # the same slot again, not the one after it (a slot further away)


@pytest.mark.asyncio
@pytest.mark.parametrize("ask", ["acheck", "aallow", "athrottle"])
async def test_tasks_cancelled_while_redis_decides_keep_nothing(
    redis_server: RedisServer, redis_prefix: str, ask: str
) -> None:
    # Cancelled after their requests went to Redis, before the answers came back (or as they came): what Redis
    # admitted for them is given back when the answers come, as if they had never asked; one after the other,
    # and many at once.
    backend = rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise")
    limiter = rk.Limiter("10/hour", algorithm="fixed_window", backend=backend)
    for batch in (1, 1, 1, 4):
        asking = [asyncio.ensure_future(getattr(limiter, ask)("alice")) for _ in range(batch)]
        await asyncio.sleep(0)  # the requests are on their way: the tasks await Redis's answers
        for task in asking:
            task.cancel()
        await asyncio.gather(*asking, return_exceptions=True)
    # One more request on the same connection: its answer comes after theirs, which are then in.
    assert await limiter.aallow("bob")
    for _ in range(10_000):  # their give-backs run on threads: counted, not timed
        if (await asyncio.to_thread(limiter.peek, "alice")).remaining == 10:
            break
        await asyncio.sleep(0.001)
    assert limiter.peek("alice").remaining == 10


@pytest.mark.asyncio
async def test_a_cancelled_athrottle_on_redis_time_gives_its_slot_back(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    limiter = on_redis_time(redis_server, redis_prefix, "gcra")
    assert limiter.allow("alice")
    waiter = asyncio.ensure_future(limiter.athrottle("alice", timeout=60.0))
    for _ in range(10_000):  # until the wait is reserved: counted, not timed
        if limiter.stats()["groups"]["default"]["delayed"]:  # type: ignore[index]
            break
        await asyncio.sleep(0.001)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    for _ in range(1000):  # the refund runs on a thread once the cancellation is seen
        if limiter._reserve("alice", timeout=60.0, group=None).wait <= SLOT:
            break
        await asyncio.sleep(0.001)
    else:
        pytest.fail("the cancelled wait's slot never came back")


def test_waits_cancelled_in_any_order_on_redis_time_give_back_as_memory_does(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    waits = []
    for limiter in (rk.Limiter("1/10s", burst=1), on_redis_time(redis_server, redis_prefix, "gcra")):
        assert limiter.allow("alice")
        held = [limiter._reserve("alice", timeout=60.0) for _ in range(3)]  # slots 1, 2 and 3 ahead
        limiter._refund(held[1])  # under a later one: its slot comes back once the later one is gone
        limiter._refund(held[2])  # the newest
        waits.append(limiter._reserve("alice", timeout=60.0).wait)
        limiter._refund(held[0])
        waits.append(limiter._reserve("alice", timeout=60.0).wait)
    # Slot 1 still held, so the newcomer takes slot 2, given back by the one under the newest; then, the
    # waiter of slot 1 gone too, the key holds the newcomer's slot alone, and the next goes after it.
    memory_waits, redis_waits = waits[:2], waits[2:]
    for second, third in (memory_waits, redis_waits):
        assert SLOT < second <= 2 * SLOT
        assert 2 * SLOT < third <= 3 * SLOT


@pytest.mark.asyncio
async def test_a_task_cancelled_while_taking_permits_on_redis_leaves_them_free(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    # concurrent(max_wait=...) from asyncio takes its permits in a worker thread: a task cancelled while they are
    # taken gives them back (and its rate slot) once they are.
    taking, go_on = threading.Event(), threading.Event()

    class Held(rk.Limiter):
        def _acquire(self, *args: Any, **options: Any) -> rk.Decision:
            if options.get("take") is None:  # concurrent(max_wait)'s permits, not a probe's
                taking.set()
                assert go_on.wait(10)
            return super()._acquire(*args, **options)

    backend = rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise")
    limiter = Held(rules=[rk.Rule("^/api/", "g", limits=["1000/min", rk.Limit(concurrency=2)])], backend=backend)

    async def hold() -> None:
        async with limiter.concurrent("peer", "/api/x", max_wait=5.0):
            await asyncio.Event().wait()

    def free_permits() -> int:
        with contextlib.ExitStack() as held:
            for taken in range(10):
                try:
                    held.enter_context(limiter.concurrent("peer", "/api/x", rates=False))
                except rk.RateLimited:
                    return taken
        return 10

    holder = asyncio.ensure_future(hold())
    assert await asyncio.to_thread(taking.wait, 10)
    holder.cancel()  # while the permits are being taken
    with pytest.raises(asyncio.CancelledError):
        await holder
    go_on.set()
    for _ in range(10_000):  # the give-back runs on a worker thread once they are taken: counted, not timed
        if await asyncio.to_thread(free_permits) == 2:
            break
        await asyncio.sleep(0.001)
    assert free_permits() == 2


@pytest.mark.asyncio
async def test_a_web_requests_permits_go_back_though_its_task_is_cancelled_while_they_do(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    # The middleware gives a request's permits back off the loop when it ends. A task cancelled again (a server
    # stopping) while that job waited for a worker thread dropped the job, and the permits stayed taken.
    from ratekeeper._gatekeeper import Gatekeeper
    from ratekeeper._http import WebOptions

    backend = rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise")
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "g", limits=[rk.Limit(concurrency=1)])], backend=backend)
    gatekeeper = Gatekeeper(WebOptions(limiter))
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    admission = await gatekeeper.aadmit("peer", "/api/x")
    assert admission.status == 0
    assert admission.permits
    busy, go_on = threading.Event(), threading.Event()
    loop.run_in_executor(None, lambda: (busy.set(), go_on.wait(10)))  # the one worker, taken
    assert busy.wait(10)  # not in a thread of the loop's: its one is the busy one
    releasing = asyncio.ensure_future(gatekeeper.arelease(admission))
    await asyncio.sleep(0)  # the release is queued behind the busy worker
    releasing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await releasing
    go_on.set()
    for _ in range(10_000):  # the release runs once the worker is free: counted, not timed
        again = await gatekeeper.aadmit("peer", "/api/x")
        if again.status == 0:
            break
        await asyncio.sleep(0.001)
    assert again.status == 0
