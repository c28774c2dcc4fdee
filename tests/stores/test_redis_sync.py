"""The Redis backend's sync mode: local decisions, usage pushed and pulled in one pipelined
round trip per interval. Timers are set to an hour and syncs are made by hand (``sync_now``), so every
test is deterministic on ManualClocks."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import textwrap
from collections.abc import Callable

import httpx
import pytest
import ratekeeper as rk
from _redis import RedisServer
from _support import ALGORITHMS

HOUR = 3600.0
prefixes = itertools.count()

Nodes = Callable[..., list[tuple[rk.Limiter, rk.ManualClock]]]


@pytest.fixture
def nodes(redis_server: RedisServer, redis_prefix: str) -> Nodes:
    """``nodes(n, **limiter_options)``: n limiters in sync mode sharing one key space, each on its clock."""

    def build(n: int, **options: object) -> list[tuple[rk.Limiter, rk.ManualClock]]:
        prefix = f"{redis_prefix}{next(prefixes)}:"
        built = []
        for _ in range(n):
            clock = rk.ManualClock()
            backend = rk.Redis(redis_server.url, mode="sync", sync_interval=HOUR, prefix=prefix)
            built.append((rk.Limiter(clock=clock, backend=backend, **options), clock))  # type: ignore[arg-type]
        return built

    return build


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "sliding_log"])
def test_after_a_sync_each_node_counts_the_others_usage(nodes: Nodes, algorithm: rk.Algorithm) -> None:
    (a, _), (b, _) = nodes(2, rate="10/min", algorithm=algorithm)
    assert sum(a.allow("alice") for _ in range(6)) == 6
    assert sum(b.allow("alice") for _ in range(4)) == 4
    assert a.sync_now() == (1, 0)  # A pushes its 6; nobody else had pushed
    assert b.sync_now() == (1, 6)  # B pushes its 4 and is charged A's 6
    assert not b.allow("alice")
    assert a.sync_now() == (1, 4)  # A is charged B's 4
    assert not a.allow("alice")
    # Other peers are untouched.
    assert a.allow("bob")
    assert b.allow("bob")


def test_over_admission_is_at_most_the_other_nodes_limits_before_one_sync(nodes: Nodes) -> None:
    # The worst case of the bound's first term: three nodes each admit a full limit before any sync.
    limit = 20
    cluster = nodes(3, rate=f"{limit}/h")
    admitted = sum(lim.allow("k") for lim, _ in cluster for _ in range(limit + 5))
    assert admitted == 3 * limit  # (N - 1) x L over: what a sync interval can let through at most
    for lim, _ in cluster:
        lim.sync_now()
    for lim, _ in cluster:
        lim.sync_now()  # the first nodes to sync learn of the last ones
    assert not any(lim.allow("k") for lim, _ in cluster)


def test_over_admission_within_a_window_follows_the_rate_bound(nodes: Nodes) -> None:
    # Two nodes, each offered 1 request/s against a shared GCRA limit of 10/min with a burst of 10,
    # syncing every 2 s. Alone, a limit admits at most burst + rate x W in any window W. The bound
    # adds R x 2 x interval (R the offered rate of both, 2/s): at most 10 + 10 + 2 x 2 x 2 = 28 in 60 s.
    (a, clock_a), (b, clock_b) = nodes(2, rate="10/min")
    admitted = 0
    for second in range(60):
        admitted += a.allow("k") + b.allow("k")
        clock_a.advance(1.0)
        clock_b.advance(1.0)
        if second % 2 == 1:
            a.sync_now()
            b.sync_now()
    assert 10 <= admitted <= 28


def reconnected(lim: rk.Limiter) -> tuple[int, int]:
    """The first sync that succeeds: the client reconnects after the first call that finds the server
    back (the next calls meet a fresh connection)."""
    for _ in range(100):
        try:
            return lim.sync_now()
        except rk.BackendUnavailable:
            continue
    raise AssertionError("the client never reconnected")


def test_a_failed_sync_keeps_its_usage_for_the_next(tmp_path: object) -> None:
    from pathlib import Path

    server = RedisServer(Path(str(tmp_path)))
    server.start()
    try:
        backend = rk.Redis(server.url, mode="sync", sync_interval=HOUR, timeout=0.05)
        a, b = (rk.Limiter("5/h", clock=rk.ManualClock(), backend=backend) for _ in range(2))
        assert sum(a.allow("k") for _ in range(5)) == 5
        server.stop()
        with pytest.raises(rk.BackendUnavailable):
            a.sync_now()
        assert a.backend_errors == (1, True)
        server.start()
        assert reconnected(a) == (1, 0)  # the 5 admitted during the outage reach Redis now
        assert b.sync_now() == (0, 0)  # b admitted nothing: no key to sync
        assert b.allow("k")
        assert b.sync_now() == (1, 5)
        assert not b.allow("k")
        assert a.backend_errors[1] is False
    finally:
        server.stop()


def test_the_timer_syncs_on_its_own(redis_server: RedisServer, redis_prefix: str) -> None:
    # Real processes on the real clock, with a short interval: each polls (bounded) for what the timer
    # must do rather than sleeping a fixed time.
    worker = textwrap.dedent(
        f"""
        import sys, time
        import ratekeeper as rk
        backend = rk.Redis({redis_server.url!r}, mode="sync", sync_interval=0.02, prefix={redis_prefix!r})
        lim = rk.Limiter("10/h", backend=backend)
        if sys.argv[1] == "spend":
            import redis
            print(sum(lim.allow("k") for _ in range(10)))
            counter = redis.Redis.from_url({redis_server.url!r})
            deadline = time.monotonic() + 10
            # The timer pushes within an interval or two: wait until Redis has the 10.
            while counter.get({redis_prefix + "{7:default:k}:used"!r}) != b"10" and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            deadline = time.monotonic() + 10
            lim.allow("k")
            while lim.check("k") and time.monotonic() < deadline:
                time.sleep(0.01)
            print(int(not lim.check("k")))
        """
    )
    spend = subprocess.run([sys.executable, "-c", worker, "spend"], capture_output=True, text=True, timeout=60)
    assert spend.stdout.strip() == "10", spend.stderr
    watch = subprocess.run([sys.executable, "-c", worker, "watch"], capture_output=True, text=True, timeout=60)
    assert watch.stdout.strip() == "1", watch.stderr


def test_sync_mode_is_checked() -> None:
    with pytest.raises(rk.InvalidValue, match="sync_interval") as error:
        rk.Redis("redis://localhost", mode="sync", sync_interval=0)
    assert error.value.loc == ("sync_interval",)
    assert rk.Redis("redis://localhost", mode="sync").sync_interval == 1.0
    assert rk.Redis("redis://localhost").sync_interval is None
    with pytest.raises(rk.InvalidValue, match="mode='sync'"):
        rk.Limiter("1/s").sync_now()


def test_processes_on_real_clocks_stay_within_the_bound(redis_server: RedisServer, redis_prefix: str) -> None:
    # Three processes offer 100 requests/s each against a shared 30/hour limit, syncing every 20 ms.
    # Alone, each would admit 30: 90 in all. The bound: E <= min((N - 1) L, R (2 interval + 2 RTT)), with
    # R = 300/s; checked with twice that excess allowed, for a busy machine's late timers.
    limit, interval, nodes = 30, 0.02, 3
    worker = textwrap.dedent(
        f"""
        import time
        import ratekeeper as rk
        backend = rk.Redis({redis_server.url!r}, mode="sync", sync_interval={interval}, prefix={redis_prefix!r})
        lim = rk.Limiter("{limit}/h", backend=backend)
        started, admitted = time.monotonic(), 0
        for attempt in range(100):
            admitted += lim.allow("shared")
            time.sleep(max(0.0, started + (attempt + 1) * 0.01 - time.monotonic()))
        print(admitted, time.monotonic() - started)
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True) for _ in range(nodes)
    ]
    results = [p.communicate(timeout=60)[0].split() for p in processes]
    admitted = sum(int(r[0]) for r in results)
    rate = nodes * 100 / max(float(r[1]) for r in results)
    excess = min((nodes - 1) * limit, rate * (2 * interval + 2 * 0.005))
    assert limit <= admitted <= limit + 2 * excess, (admitted, excess)
    assert admitted < nodes * limit  # syncing made a difference: unsynced nodes would admit 90


def test_a_limiter_dropped_while_its_timer_runs_goes_quietly(redis_server: RedisServer, redis_prefix: str) -> None:
    # The timer's task may be the last to hold the client once the limiter is gone: the client's
    # runtime must then stop without a panic (a runtime cannot be dropped from inside itself).
    worker = textwrap.dedent(
        f"""
        import gc, time
        import ratekeeper as rk
        for _ in range(3):
            backend = rk.Redis({redis_server.url!r}, mode="sync", sync_interval=0.01, prefix={redis_prefix!r})
            lim = rk.Limiter("10/h", backend=backend)
            lim.allow("k")
            del lim, backend
            gc.collect()
            time.sleep(0.1)  # ten intervals: the timer wakes, finds no limiter and ends
        print("done")
        """
    )
    run = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "done"
    assert "panicked" not in run.stderr, run.stderr


# The asyncio twins in sync mode: decisions are local there, so the twins decide at once,
# with no round trip, and agree with the blocking calls.


@pytest.mark.asyncio
async def test_the_asyncio_twins_decide_locally_in_sync_mode(nodes: Nodes) -> None:
    (lim, _), (other, _) = nodes(2, rate="3/h")
    assert await lim.aallow("alice")
    decision = await lim.acheck("alice")
    assert decision.allowed
    assert decision.remaining == 1
    assert (await lim.athrottle("alice", timeout=0)).allowed
    assert not await lim.aallow("alice")
    assert not (await lim.acheck("alice")).allowed
    with pytest.raises(rk.RateLimited):
        await lim.athrottle("alice", timeout=0)
    # The usage they admitted is this node's, pushed at the next sync like any other.
    assert lim.sync_now() == (1, 0)
    assert other.sync_now() == (0, 0)
    assert other.allow("alice")
    assert other.sync_now() == (1, 3)
    assert not other.allow("alice")


@pytest.mark.asyncio
async def test_athrottle_waits_for_its_slot_in_sync_mode(nodes: Nodes) -> None:
    ((lim, clock),) = nodes(1, rate="1/s")
    assert (await lim.athrottle("alice")).allowed
    # The second waits a second of the ManualClock (advanced by the wait, not slept).
    started = clock.now()
    assert (await lim.athrottle("alice", timeout=5)).allowed
    assert clock.now() - started == pytest.approx(1.0)


def test_permits_and_reductions_work_in_sync_mode(nodes: Nodes) -> None:
    rules = [rk.Rule(r"^/", "api", limits=[rk.Limit("2/h"), rk.Limit(concurrency=1)])]
    ((lim, _),) = nodes(1, rules=rules)
    with lim.concurrent("alice", "/"):
        with pytest.raises(rk.RateLimited) as refused, lim.concurrent("alice", "/"):
            pass
        assert refused.value.decision.refused_by == "concurrency"
    assert lim.reduce("alice", "/")  # the first admission given back: two more fit
    with lim.concurrent("alice", "/"):
        pass
    with lim.concurrent("alice", "/"):
        pass
    assert not lim.allow("alice", "/")


def test_the_asgi_middleware_limits_a_sync_mode_limiter(nodes: Nodes) -> None:
    from ratekeeper.asgi import RateLimitMiddleware
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def items(_: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def run(mode: str) -> list[int]:
        ((lim, _),) = nodes(1, rate="2/h")
        app = Starlette(routes=[Route("/api/items", items)])
        app.add_middleware(RateLimitMiddleware, limiter=lim, mode=mode)  # type: ignore[arg-type]
        transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [(await client.get("/api/items")).status_code for _ in range(3)]

    assert asyncio.run(run("refuse")) == [200, 200, 429]
    assert asyncio.run(run("delay")) == [200, 200, 429]
