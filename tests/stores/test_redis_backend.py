"""The Redis backend as users meet it: keys and their TTLs in a real redis-server, limits shared by
several processes, outages under each ``on_error`` policy and recovery, and bad settings."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ratekeeper as rk
import redis
from _redis import RedisServer
from ratekeeper._core import _Take

S = 1_000_000_000


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis(port=redis_server.port, decode_responses=True) as connection:
        yield connection


def test_a_key_lives_as_long_as_its_state_constrains_through_admissions(
    redis_server: RedisServer, redis_prefix: str, client: redis.Redis
) -> None:
    """Each admission moves GCRA's end later and its key's time to live with it; a window's later
    admissions keep the key's time to live (the window's end), never shorten it."""
    url = redis_server.url
    # (A loaded machine answers late; a late answer must fail the test, not decide locally.)
    gcra = rk.Limiter("2/min", backend=rk.Redis(url, prefix=f"{redis_prefix}g:", timeout=5.0, on_error="raise"))
    assert gcra.allow("alice")
    (key,) = client.keys(f"{redis_prefix}g:*")
    # Each admission takes 30 s of the minute: the state constrains for 30 s, then 60 (less the time
    # the calls took).
    assert 20_000 < client.pttl(key) <= 30_000
    assert gcra.allow("alice")
    assert 50_000 < client.pttl(key) <= 60_000
    windows = rk.Redis(url, prefix=f"{redis_prefix}w:", timeout=5.0, on_error="raise")
    window = rk.Limiter("3/h", algorithm="fixed_window", backend=windows)
    assert window.allow("alice")
    (key,) = client.keys(f"{redis_prefix}w:*")
    first = client.pttl(key)
    assert window.allow("alice")
    assert window.allow("alice")
    assert not window.allow("alice")
    assert first - 60_000 < client.pttl(key) <= first
    # A sliding log lives a window past its newest stamp: its stamps and the meta member it keeps.
    logs = rk.Redis(url, prefix=f"{redis_prefix}l:", timeout=5.0, on_error="raise")
    log = rk.Limiter("2/h", algorithm="sliding_log", backend=logs)
    assert log.allow("alice")
    assert log.allow("alice")
    assert not log.allow("alice")
    (key,) = client.keys(f"{redis_prefix}l:*")
    assert 3_540_000 < client.pttl(key) <= 3_600_000
    assert client.zcard(key) == 3


def test_keys_share_a_hash_tag_and_expire_when_idle(
    redis_server: RedisServer, redis_prefix: str, client: redis.Redis
) -> None:
    rules = [rk.Rule(r"^/api", "api", limits=[rk.Limit("2/s"), rk.Limit("100/h", algorithm="fixed_window")])]
    lim = rk.Limiter(rules=rules, backend=rk.Redis(redis_server.url, prefix=redis_prefix))
    assert lim.allow("alice", "/api/x")
    keys = sorted(client.keys(f"{redis_prefix}*"))
    assert keys == [f"{redis_prefix}{{3:api:alice}}:0", f"{redis_prefix}{{3:api:alice}}:1"]
    # GCRA's state stops constraining within its tolerance (1 s), the hour window at its end.
    assert 0 < client.pttl(keys[0]) <= 1000
    assert 3_500_000 < client.pttl(keys[1]) <= 3_600_000
    # A long peer is hashed into a key of bounded length, in one slot with its other limits.
    assert lim.allow("x" * 1000, "/api/x")
    hashed = [k for k in client.keys(f"{redis_prefix}*") if "#" in k]
    assert len(hashed) == 2
    assert all(len(k) < len(redis_prefix) + 64 for k in hashed)


def test_processes_sharing_one_redis_admit_exactly_the_limit(redis_server: RedisServer, redis_prefix: str) -> None:
    # Four processes, 40 attempts each, on one key of 60/hour: exactly 60 admitted in all.
    worker = textwrap.dedent(
        f"""
        import ratekeeper as rk
        lim = rk.Limiter("60/h", backend=rk.Redis({redis_server.url!r}, prefix={redis_prefix!r}, on_error="raise"))
        print(sum(lim.allow("shared") for _ in range(40)))
        """
    )
    processes = [subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    admitted = [int(p.communicate(timeout=60)[0]) for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert sum(admitted) == 60


def test_a_limit_is_shared_by_two_limiters(redis_server: RedisServer, redis_prefix: str) -> None:
    first, second = (rk.Limiter("3/min", backend=rk.Redis(redis_server.url, prefix=redis_prefix)) for _ in range(2))
    assert [first.allow("bob"), second.allow("bob"), first.allow("bob"), second.allow("bob")] == [True] * 3 + [False]
    refused = second.check("bob")
    assert not refused
    assert 0 < refused.retry_after <= 20


@pytest.mark.parametrize(
    ("on_error", "expected"),
    [("allow", [True, True, True]), ("deny", [False, False, False]), ("local", [True, False, False])],
)
def test_an_outage_is_decided_by_on_error_then_redis_decides_again(
    own_redis_server: RedisServer, on_error: str, expected: list[bool], caplog: pytest.LogCaptureFixture
) -> None:
    lim = rk.Limiter("1/min", backend=rk.Redis(own_redis_server.url, on_error=on_error, timeout=0.05))  # type: ignore[arg-type]
    assert lim.allow("carol")
    own_redis_server.stop()
    with caplog.at_level(logging.WARNING, logger="ratekeeper"):
        assert [lim.allow("dave") for _ in range(3)] == expected
    assert lim.backend_errors == (3, True)
    assert (lim.stats()["backend_errors"], lim.stats()["backend_down"]) == (3, True)
    # Logged once, when the outage began.
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "unavailable" in caplog.records[0].getMessage()
    assert f"on_error={on_error!r}" in caplog.records[0].getMessage()
    own_redis_server.start()
    # Decisions go back to Redis once the client reconnects (it leaves a failed server alone for a
    # quarter of a second): polled, bounded.
    deadline = time.monotonic() + 10
    while lim.backend_errors[1]:
        assert time.monotonic() < deadline, "decisions never went back to Redis"
        lim.allow("probe")
        time.sleep(0.02)
    # The restarted server is empty: dave starts afresh in Redis, whatever the outage decided.
    assert [lim.allow("dave") for _ in range(3)] == [True, False, False]
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_raise_reports_the_outage_to_the_caller(own_redis_server: RedisServer) -> None:
    lim = rk.Limiter("1/min", backend=rk.Redis(own_redis_server.url, on_error="raise", timeout=0.05))
    own_redis_server.stop()
    with pytest.raises(rk.BackendUnavailable, match=f"127.0.0.1:{own_redis_server.port}") as error:
        lim.allow("erin")
    assert isinstance(error.value, ConnectionError)


def test_an_unreachable_server_never_hangs_a_decision() -> None:
    # Nothing listens on port 1: construction succeeds (the connection is lazy), decisions fall back.
    lim = rk.Limiter("1/min", backend=rk.Redis("redis://127.0.0.1:1/0", timeout=0.02, on_error="deny"))
    decision = lim.check("frank")
    assert not decision
    assert decision.retry_after == 1.0


def test_bad_settings_are_named() -> None:
    cases: list[tuple[dict[str, object], type[Exception], tuple[object, ...], str]] = [
        ({"url": "http://localhost"}, rk.InvalidValue, ("url",), "not a Redis URL"),
        ({"url": 6379}, rk.InvalidType, ("url",), "must be a str"),
        ({"url": "redis://localhost", "timeout": 0}, rk.InvalidValue, ("timeout",), "positive"),
        ({"url": "redis://localhost", "on_error": "ignore"}, rk.InvalidValue, ("on_error",), "'ignore'"),
        ({"url": "redis://localhost", "mode": "cluster"}, rk.InvalidValue, ("mode",), "'cluster'"),
        # A mode's own setting for another mode would do nothing.
        ({"url": "redis://localhost", "sync_interval": 1.0}, rk.InvalidValue, ("sync_interval",), "mode='sync'"),
        (
            {"url": "redis://localhost", "mode": "lease", "sync_interval": 1.0},
            rk.InvalidValue,
            ("sync_interval",),
            "not mode='lease'",
        ),
        ({"url": "redis://localhost", "lease_span": 0.5}, rk.InvalidValue, ("lease_span",), "not mode='exact'"),
        ({"url": "redis://localhost", "mode": "sync", "lease_span": 0.5}, rk.InvalidValue, ("lease_span",), "lease"),
    ]
    for kwargs, error, loc, text in cases:
        url = kwargs.pop("url")
        with pytest.raises(error, match=text) as raised:
            rk.Redis(url, **kwargs)  # type: ignore[arg-type]
        assert raised.value.loc == loc  # type: ignore[attr-defined]
    assert rk.Redis("redis://localhost", mode="sync").sync_interval == 1.0
    assert rk.Redis("redis://localhost", mode="lease").lease_span == 0.1
    assert rk.Redis("redis://localhost", mode="lease", lease_span=None).lease_span == 0.1
    expected = r"must be a ratekeeper\.Redis, a ratekeeper\.Shared or None, got str"
    with pytest.raises(rk.InvalidType, match=expected) as wrong:
        rk.Limiter("1/s", backend="redis://localhost")  # type: ignore[arg-type]
    assert wrong.value.loc == ("backend",)


def test_concurrency_permits_are_shared_leases(redis_server: RedisServer, redis_prefix: str) -> None:
    clock = rk.ManualClock()
    rules = [rk.Rule(r"^/", "api", limits=[rk.Limit("100/s"), rk.Limit(concurrency=2)])]

    def node() -> rk.Limiter:
        backend = rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise", lease_ttl=30)
        return rk.Limiter(rules=rules, clock=clock, backend=backend)

    first, second = node(), node()
    held = [first._acquire("ann", "/", take=_Take.BOTH), second._acquire("ann", "/", take=_Take.BOTH)]
    assert all(d.allowed and d.permits_held for d in held)
    refused = first._acquire("ann", "/", take=_Take.BOTH)
    assert not refused
    assert refused.refused_by == "concurrency"
    assert refused.retry_after == 0.0
    assert refused.remaining == 0
    second._release("ann", "/")
    assert first._acquire("ann", "/", take=_Take.BOTH).allowed
    # A process that dies holding permits: its leases expire after lease_ttl and the permits come back.
    assert not second._acquire("ann", "/", take=_Take.BOTH)
    clock.advance(31)
    assert second._acquire("ann", "/", take=_Take.BOTH).allowed


def test_concurrency_decisions_match_memory(redis_server: RedisServer, redis_prefix: str) -> None:
    rules = [rk.Rule(r"^/", "api", limits=[rk.Limit("3/s"), rk.Limit(concurrency=2)])]
    memory = rk.Limiter(rules=rules, clock=rk.ManualClock())
    backend = rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise")
    redis_limiter = rk.Limiter(rules=rules, clock=rk.ManualClock(), backend=backend)

    def seen(d: rk.Decision) -> tuple[object, ...]:
        return (d.allowed, d.refused_by, d.remaining, d.limit, d.retry_after, d.permits_held)

    steps = ["take", "take", "take", "free", "take", "permits", "free", "free", "take", "take"]
    for step in steps:
        for lim in (memory, redis_limiter):
            if step == "free":
                lim._release("bo", "/")
        if step != "free":
            rates = step == "take"
            assert seen(redis_limiter._acquire("bo", "/", take=_Take.BOTH if rates else _Take.PERMITS)) == seen(
                memory._acquire("bo", "/", take=_Take.BOTH if rates else _Take.PERMITS)
            ), step


def test_passwords_stay_out_of_repr() -> None:
    backend = rk.Redis("redis://user:secret@10.0.0.5:6379/0")
    assert "secret" not in repr(backend)
    assert backend.url == "redis://user:secret@10.0.0.5:6379/0"
    assert (backend.mode, backend.timeout, backend.prefix, backend.on_error) == ("exact", 0.05, "ratekeeper:", "local")


@pytest.mark.asyncio
async def test_asyncio_callers_share_the_limit_without_blocking_the_loop(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    lim = rk.Limiter("60/h", backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    running = asyncio.create_task(ticker())
    admitted = await asyncio.gather(*(lim.aallow("shared") for _ in range(100)))
    running.cancel()
    assert sum(admitted) == 60
    # The loop ran other tasks while the decisions were in flight.
    assert ticks > 0
    refused = await lim.acheck("shared")
    assert not refused
    assert refused.remaining == 0
    assert 0 < refused.retry_after <= 60


@pytest.mark.asyncio
async def test_async_and_blocking_calls_agree(redis_server: RedisServer, redis_prefix: str) -> None:
    clock = rk.ManualClock()
    lim = rk.Limiter("2/s", clock=clock, backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    assert (await lim.acheck("gina")).remaining == 1
    assert lim.check("gina").remaining == 0
    assert not await lim.aallow("gina")
    # athrottle reserves the next slot in Redis and waits for it on the ManualClock.
    decision = await lim.athrottle("gina", timeout=1.0)
    assert decision.allowed
    assert clock.now() == pytest.approx(0.5)
    with pytest.raises(rk.RateLimited):
        await lim.athrottle("gina", timeout=0.1)


@pytest.mark.asyncio
async def test_an_async_outage_follows_on_error(own_redis_server: RedisServer) -> None:
    lim = rk.Limiter("5/min", backend=rk.Redis(own_redis_server.url, on_error="raise", timeout=0.05))
    assert await lim.aallow("hank")
    own_redis_server.stop()
    with pytest.raises(rk.BackendUnavailable):
        await lim.acheck("hank")
    local = rk.Limiter("1/min", backend=rk.Redis(own_redis_server.url, on_error="local", timeout=0.05))
    assert [await local.aallow("ivan") for _ in range(2)] == [True, False]


@pytest.mark.asyncio
async def test_a_cancelled_call_leaves_the_loop_healthy(redis_server: RedisServer, redis_prefix: str) -> None:
    lim = rk.Limiter("10/min", backend=rk.Redis(redis_server.url, prefix=redis_prefix))
    pending = asyncio.ensure_future(lim.acheck("judy"))
    await asyncio.sleep(0)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    # The reply that comes back for the cancelled call is dropped; later calls are answered.
    assert (await lim.acheck("judy")).allowed


def test_two_servers_behind_a_balancer_share_one_limit(redis_server: RedisServer, redis_prefix: str) -> None:
    from _web import Server
    from fastapi import FastAPI
    from ratekeeper.asgi import RateLimitMiddleware
    from ratekeeper.keys import header

    def app() -> FastAPI:
        lim = rk.Limiter("3/min", backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
        served = FastAPI()
        served.add_middleware(RateLimitMiddleware, limiter=lim, key=header("X-API-Key"))

        @served.get("/")
        def root() -> str:
            return "ok"

        return served

    with Server(app()) as first, Server(app()) as second:
        statuses = [client.get("/", headers={"X-API-Key": "k"}).status_code for client in (first, second) * 3]
        refused = second.get("/", headers={"X-API-Key": "k"})
    assert statuses == [200, 200, 200, 429, 429, 429]
    assert refused.json()["detail"] == "Rate limit exceeded"
    assert 0 < int(refused.headers["Retry-After"]) <= 20


def test_a_config_file_names_the_backend(redis_server: RedisServer, redis_prefix: str, tmp_path: Path) -> None:
    path = tmp_path / "ratekeeper.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            default = "2/min"

            [backend]
            url = "{redis_server.url}"
            prefix = "{redis_prefix}"
            timeout = 0.5
            on_error = "raise"
            """
        )
    )
    first, second = rk.Limiter.from_file(path), rk.Limiter.from_file(path)
    assert first.backend is not None
    assert (first.backend.prefix, first.backend.timeout, first.backend.on_error) == (redis_prefix, 0.5, "raise")
    assert [first.allow("kim"), second.allow("kim"), first.allow("kim")] == [True, True, False]


def test_bad_backend_tables_are_located(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, object], type[Exception], tuple[object, ...]]] = [
        ({"mode": "exact"}, rk.InvalidValue, ("backend",)),
        ({"url": "redis://x", "timeout": "fast"}, rk.InvalidType, ("backend", "timeout")),
        ({"url": "redis://x", "on_error": "shrug"}, rk.InvalidValue, ("backend", "on_error")),
        ({"url": "ftp://x"}, rk.InvalidValue, ("backend", "url")),
        ({"url": "redis://x", "pool": 4}, rk.InvalidValue, ("backend",)),
        ({"url": "redis://x", "sync_interval": 1.0}, rk.InvalidValue, ("backend", "sync_interval")),
        ({"url": "redis://x", "mode": "lease", "lease_span": "long"}, rk.InvalidType, ("backend", "lease_span")),
    ]
    for table, error, loc in cases:
        with pytest.raises(error) as raised:
            rk.Limiter.from_config({"default": "1/s", "backend": table})
        assert raised.value.loc == loc, table  # type: ignore[attr-defined]


def test_a_config_file_sets_each_modes_own_interval() -> None:
    synced = rk.Limiter.from_config(
        {"default": "1/s", "backend": {"url": "redis://x", "mode": "sync", "sync_interval": 2}}
    )
    leased = rk.Limiter.from_config(
        {"default": "1/s", "backend": {"url": "redis://x", "mode": "lease", "lease_span": 0.2}}
    )
    assert synced.backend is not None
    assert leased.backend is not None
    assert (synced.backend.sync_interval, leased.backend.lease_span) == (2.0, 0.2)


def test_asgi_permits_live_in_redis_for_the_whole_response(redis_server: RedisServer, redis_prefix: str) -> None:
    import threading

    from _web import Server
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    from ratekeeper.asgi import RateLimitMiddleware
    from ratekeeper.keys import header

    release = threading.Event()
    rules = [rk.Rule(r"^/", "api", limits=[rk.Limit("100/s"), rk.Limit(concurrency=1)])]
    lim = rk.Limiter(rules=rules, backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=lim, key=header("X-API-Key"))

    @app.get("/slow")
    def slow() -> StreamingResponse:
        def body() -> Iterator[bytes]:
            yield b"first"
            release.wait(10)
            yield b"last"

        return StreamingResponse(body())

    @app.get("/fast")
    def fast() -> str:
        return "ok"

    key = {"X-API-Key": "k"}
    with Server(app) as client:
        assert [client.get("/fast", headers=key).status_code for _ in range(3)] == [200] * 3
        with client.stream("GET", "/slow", headers=key) as streaming:
            chunks = streaming.iter_raw()
            assert next(chunks) == b"first"
            busy = client.get("/fast", headers=key)
            release.set()
            assert b"".join(chunks) == b"last"
        assert busy.status_code == 429
        assert busy.json()["detail"] == "Too many concurrent requests"
        # The stream's permit was given back when its body ended.
        deadline = time.monotonic() + 5
        while client.get("/fast", headers=key).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.01)
