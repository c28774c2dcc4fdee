"""The ASGI middleware on a real server: uvicorn on a free loopback port, driven by httpx.

The rate-limit fields are parsed with an independent Structured Field parser (http_sfv), so they are
valid, not just present. Timing runs on a ManualClock: a delayed request advances it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from _redis import RedisServer
from _web import Server, members
from fastapi import FastAPI, WebSocket
from fastapi.responses import StreamingResponse
from ratekeeper._core import _Take
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.keys import client_ip, header


def make_app(limiter: rk.Limiter, **options: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/api/items")
    def items() -> dict[str, int]:
        return {"items": 3}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("the handler failed")

    @app.get("/stream")
    def stream() -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(1000):
                yield b"x" * 1024
                await asyncio.sleep(0.001)

        return StreamingResponse(chunks())

    @app.websocket("/ws")
    async def ws(socket: WebSocket) -> None:
        await socket.accept()
        await socket.send_text("hello")
        await socket.close()

    app.add_middleware(RateLimitMiddleware, limiter=limiter, **options)
    return app


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter(
        rules=[
            rk.Rule("^/api/", "api", "3/min"),
            rk.Rule("^/(boom|stream|ws)", "held", limits=[rk.Limit("1000/min"), rk.Limit(concurrency=1)]),
        ],
        exempt_paths=["^/health$"],
        clock=clock,
    )


@pytest.fixture
def served(limiter: rk.Limiter) -> Iterator[httpx.Client]:
    with Server(make_app(limiter, key=header("X-API-Key"))) as client:
        yield client


KEY = {"X-API-Key": "alice"}
# The server drops the connection after a handler raised: such requests ask for a connection of their own.
BOOM = {**KEY, "Connection": "close"}


def test_allowed_and_refused_responses_carry_valid_fields(served: httpx.Client) -> None:
    for remaining in (2, 1, 0):
        response = served.get("/api/items", headers=KEY)
        assert response.status_code == 200
        assert members(response.headers["RateLimit-Policy"]) == {"api": {"q": 3, "w": 60}}
        # GCRA: one more request comes back 20 s after the first use.
        assert members(response.headers["RateLimit"]) == {"api": {"r": remaining, "t": 20}}
        assert "Retry-After" not in response.headers
    refused = served.get("/api/items", headers=KEY)
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 20}
    assert refused.headers["Retry-After"] == "20"
    assert members(refused.headers["RateLimit"]) == {"api": {"r": 0, "t": 20}}
    # Another key has its own budget; exempt paths carry no fields.
    assert served.get("/api/items", headers={"X-API-Key": "bob"}).status_code == 200
    health = served.get("/health")
    assert health.status_code == 200
    assert "RateLimit" not in health.headers


def test_a_request_without_its_key_is_refused_unless_the_path_is_not_limited(served: httpx.Client) -> None:
    missing = served.get("/api/items")
    assert missing.status_code == 429
    assert missing.json()["status"] == 429
    assert served.get("/health").status_code == 200


def test_anonymous_requests_share_one_key(limiter: rk.Limiter) -> None:
    app = make_app(limiter, key=header("X-API-Key"), on_missing_key="anonymous")
    with Server(app) as client:
        assert [client.get("/api/items").status_code for _ in range(4)] == [200, 200, 200, 429]
        assert client.get("/api/items", headers=KEY).status_code == 200


def test_a_spoofed_forwarded_for_from_an_untrusted_client_is_ignored(limiter: rk.Limiter) -> None:
    # The test client connects from 127.0.0.1. Trusted: it is the proxy, and the forwarded client counts.
    with Server(make_app(limiter, key=client_ip(trusted_proxies=["127.0.0.1"]))) as client:
        spoof = {"X-Forwarded-For": "6.6.6.6, 203.0.113.9"}
        assert [client.get("/api/items", headers=spoof).status_code for _ in range(4)] == [200, 200, 200, 429]
        # Another client behind the same proxy is someone else.
        assert client.get("/api/items", headers={"X-Forwarded-For": "203.0.113.10"}).status_code == 200
    # Untrusted: the header is anyone's to write, so every request is the peer itself.
    with Server(make_app(limiter, key=client_ip(trusted_proxies=["10.0.0.0/8"]))) as client:
        codes = [client.get("/api/items", headers={"X-Forwarded-For": f"198.51.100.{i}"}).status_code for i in range(4)]
        assert codes == [200, 200, 200, 429]


def test_delay_mode_waits_for_the_slot_on_the_manual_clock(limiter: rk.Limiter, clock: rk.ManualClock) -> None:
    with Server(make_app(limiter, key=header("X-API-Key"), mode="delay", max_delay=30.0)) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(3)] == [200, 200, 200]
        assert clock.now() == 0.0
        # 3/min: each further request waits for the next 20 s slot (the clock is advanced, not slept on).
        assert client.get("/api/items", headers=KEY).status_code == 200
        assert clock.now() == 20.0
        assert client.get("/api/items", headers=KEY).status_code == 200
        assert clock.now() == 40.0
    with Server(make_app(limiter, key=header("X-API-Key"), mode="delay", max_delay=5.0)) as client:
        for _ in range(3):
            assert client.get("/api/items", headers={"X-API-Key": "dave"}).status_code == 200
        # The slot is 20 s away, past max_delay: refused at once, nothing reserved.
        refused = client.get("/api/items", headers={"X-API-Key": "dave"})
        assert refused.status_code == 429
        assert refused.json()["retry_after"] == 20
        assert clock.now() == 40.0


@pytest.fixture
def gated(clock: rk.ManualClock) -> rk.Limiter:
    """Two requests a minute and one in flight per key, on /api/."""
    return rk.Limiter(
        rules=[rk.Rule("^/api/", "api", limits=[rk.Limit("2/min"), rk.Limit(concurrency=1)])], clock=clock
    )


def test_delay_mode_counts_each_request_once(gated: rk.Limiter, clock: rk.ManualClock) -> None:
    with Server(make_app(gated, key=header("X-API-Key"), mode="delay", max_delay=60.0)) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(3)] == [200] * 3
    assert clock.now() == 30.0  # the third waited for its slot
    api = gated.stats()["groups"]["api"]
    assert (api["requests"], api["allowed"], api["refused"], api["delayed"]) == (3, 3, 0, 1)


def test_delay_mode_refused_a_permit_spends_no_rate_slot(gated: rk.Limiter, clock: rk.ManualClock) -> None:
    with Server(make_app(gated, key=header("X-API-Key"), mode="delay", max_delay=60.0)) as client:
        # Another request of alice's is in flight (it took the permit and the first of two slots).
        with gated.concurrent("alice", "/api/items"):
            refused = client.get("/api/items", headers=KEY)
            assert refused.status_code == 429
            assert refused.json()["detail"] == "Too many concurrent requests"
        # The refusal took nothing: the second slot is still free, no wait.
        assert client.get("/api/items", headers=KEY).status_code == 200
    assert clock.now() == 0.0
    api = gated.stats()["groups"]["api"]
    assert (api["requests"], api["allowed"], api["refused"], api["delayed"]) == (3, 2, 1, 0)
    assert gated.top_refused(1) == [("alice", 1)]


def test_shadow_mode_counts_but_refuses_nothing(limiter: rk.Limiter) -> None:
    with Server(make_app(limiter, key=header("X-API-Key"), shadow=True)) as client:
        codes = [client.get("/api/items", headers=KEY).status_code for _ in range(5)]
        last = client.get("/api/items", headers=KEY)
    assert codes == [200] * 5
    assert members(last.headers["RateLimit"])["api"]["r"] == 0
    assert "Retry-After" not in last.headers
    assert limiter.stats()["groups"]["api"]["refused"] == 3


def test_permits_come_back_after_errors_streams_and_disconnects(served: httpx.Client, limiter: rk.Limiter) -> None:
    # Concurrency 1: a leaked permit would refuse every later request of the key.
    for _ in range(3):
        assert served.get("/boom", headers=BOOM).status_code == 500
    assert served.get("/stream", headers=KEY).status_code == 200
    with served.stream("GET", "/stream", headers=KEY) as response:
        assert response.status_code == 200
        chunks = response.iter_bytes()  # kept: dropping the iterator would close the stream
        next(chunks)
        # Held while the body streams: a second request of the key is refused for concurrency.
        second = served.get("/boom", headers=BOOM)
        assert second.status_code == 429
        assert second.json() == {"detail": "Too many concurrent requests", "status": 429, "retry_after": 0}
    # The client left midway; the server notices and gives the permit back.
    deadline = time.monotonic() + 5
    while True:
        probe = limiter._acquire("alice", "/boom", take=_Take.BOTH)
        if probe.allowed:
            limiter._release("alice", "/boom")
            break
        assert time.monotonic() < deadline, "the permit of the abandoned stream was never released"
        time.sleep(0.01)
    assert served.get("/boom", headers=BOOM).status_code == 500  # admitted again (and the handler fails)


async def handshake(app: Any, extensions: dict[str, Any]) -> list[dict[str, Any]]:
    """Drives one WebSocket handshake through ``app`` at the ASGI level; returns what it sent."""
    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "server": ("127.0.0.1", 80),
        "root_path": "",
        "query_string": b"",
        "subprotocols": [],
        "path": "/ws",
        "headers": [(b"x-api-key", b"alice")],
        "client": ("127.0.0.1", 5000),
        "extensions": extensions,
    }
    inbox = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return inbox.pop(0) if inbox else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.asyncio
async def test_a_refused_websocket_is_closed_before_accept_or_answered_429(limiter: rk.Limiter) -> None:
    app = make_app(limiter, key=header("X-API-Key"))
    accepted = await handshake(app, {})
    assert accepted[0]["type"] == "websocket.accept"
    # Concurrency 1 is held while the first connection lives; here a second one is refused.
    limiter.concurrent("alice", "/ws").__enter__()
    refused = await handshake(app, {})
    assert refused == [{"type": "websocket.close", "code": 1008, "reason": "rate limited"}]
    # A server with the denial-response extension lets the client see a real 429.
    answered = await handshake(app, {"websocket.http.response": {}})
    assert [m["type"] for m in answered] == ["websocket.http.response.start", "websocket.http.response.body"]
    assert answered[0]["status"] == 429


def test_refund_when_counts_only_failures(limiter: rk.Limiter) -> None:
    app = make_app(limiter, key=header("X-API-Key"), refund_when=lambda status: status < 400)
    with Server(app) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(10)] == [200] * 10
    assert limiter.check("alice", "/api/items").remaining == 2


def test_a_refund_in_redis_is_not_made_on_the_event_loop(redis_server: RedisServer, redis_prefix: str) -> None:
    backend = rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise")
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "3/min")], backend=backend)
    refunded_on: list[int] = []
    reduce = limiter.reduce

    def recording_reduce(*args: Any, **kwargs: Any) -> bool:
        refunded_on.append(threading.get_ident())
        return reduce(*args, **kwargs)

    limiter.reduce = recording_reduce  # type: ignore[method-assign]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = RateLimitMiddleware(app, limiter=limiter, key=header("X-API-Key"), refund_when=lambda s: s >= 500)
    scope = {"type": "http", "path": "/api/items", "headers": [(b"x-api-key", b"alice")], "client": ("1.2.3.4", 1)}

    async def request() -> int:
        async def send(message: Any) -> None:
            pass

        await middleware(scope, None, send)  # type: ignore[arg-type]
        return threading.get_ident()

    loop_threads = [asyncio.run(request()) for _ in range(5)]
    assert len(refunded_on) == 5
    assert not set(refunded_on) & set(loop_threads)  # a Redis round trip never blocks the loop
    assert limiter.check("alice", "/api/items").remaining == 2  # every failure was given back


def test_bad_options_are_named() -> None:
    limiter = rk.Limiter("1/s")
    with pytest.raises(rk.InvalidValue) as error:
        RateLimitMiddleware(FastAPI(), limiter=limiter, mode="wait")  # type: ignore[arg-type]
    assert error.value.loc == ("mode",)
    with pytest.raises(rk.InvalidType) as bad_type:
        RateLimitMiddleware(FastAPI(), limiter="lim")  # type: ignore[arg-type]
    assert bad_type.value.loc == ("limiter",)
    # A dict where HeaderOptions belongs fails here, not at the first request.
    with pytest.raises(rk.InvalidType, match="HeaderOptions, got dict") as bad_headers:
        RateLimitMiddleware(FastAPI(), limiter=limiter, headers={"on_allowed": False})  # type: ignore[arg-type]
    assert bad_headers.value.loc == ("headers",)


def test_the_fields_are_added_to_a_copy_of_the_apps_start_message(limiter: rk.Limiter) -> None:
    # A raw ASGI app sending the same message object (and headers list) for every response.
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
    body = {"type": "http.response.body", "body": b"ok"}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(start)
        await send(body)

    with Server(RateLimitMiddleware(app, limiter=limiter, key=header("X-API-Key"))) as client:
        responses = [client.get("/api/items", headers=KEY) for _ in range(2)]
    assert [members(r.headers["RateLimit"]) for r in responses] == [{"api": {"r": r, "t": 20}} for r in (2, 1)]
    assert start["headers"] == [(b"content-type", b"text/plain")]


def call(app: Any, scope: dict[str, Any]) -> int:
    """The status ``app`` answers an HTTP ``scope`` with, called in process."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return int(sent[0]["status"])


async def plain(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize(
    "headers",
    [
        [(b"x-api-key", b"k1")],
        ((b"x-api-key", b"k1"),),  # servers other than uvicorn may give a tuple, or lists for pairs
        [[b"x-api-key", b"k1"]],
    ],
)
def test_every_scope_shape_is_limited_alike(clock: rk.ManualClock, headers: Any) -> None:
    limiter = rk.Limiter(rate="1/minute", clock=clock)
    app = RateLimitMiddleware(plain, limiter=limiter, key=header("X-API-Key"))
    scope = {"type": "http", "path": "/", "headers": headers, "client": ("192.0.2.1", 1)}
    assert [call(app, dict(scope)) for _ in range(2)] == [200, 429]
    assert not limiter.check("k1", "/").allowed


def test_a_key_function_subclass_reads_the_scope_its_own_way(clock: rk.ManualClock) -> None:
    class Lowered(type(header("X"))):  # type: ignore[misc]
        def from_scope(self, scope: Any) -> str | None:
            found = super().from_scope(scope)
            return found.lower() if found else None

    limiter = rk.Limiter(rate="1/minute", clock=clock)
    app = RateLimitMiddleware(plain, limiter=limiter, key=Lowered("X-API-Key"))
    statuses = [call(app, {"type": "http", "path": "/", "headers": [(b"x-api-key", k)]}) for k in (b"AB", b"ab")]
    assert statuses == [200, 429]  # one key, "ab", as the subclass reads it


def test_behind_trusted_proxies_the_forwarded_client_is_the_key(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rate="1/minute", clock=clock)
    key = client_ip(trusted_proxies=["10.0.0.0/8"])
    app = RateLimitMiddleware(plain, limiter=limiter, key=key)

    def via_proxy(client: bytes) -> dict[str, Any]:
        return {"type": "http", "path": "/", "headers": [(b"x-forwarded-for", client)], "client": ("10.0.0.5", 1)}

    assert [call(app, via_proxy(c)) for c in (b"198.51.100.7", b"198.51.100.7", b"198.51.100.8")] == [200, 429, 200]


# --- the options every integration shares (issue 32): refusal records, penalties, an epoch reset --------------------


@pytest.mark.parametrize("key", [header("X-API-Key"), client_ip()], ids=["header", "client_ip"])
def test_log_refusals_writes_one_warning_per_refusal(
    limiter: rk.Limiter, caplog: pytest.LogCaptureFixture, key: Any
) -> None:
    caplog.set_level("WARNING", logger="ratekeeper.refusals")
    with Server(make_app(limiter, key=key, log_refusals=True)) as client:
        codes = [client.get("/api/items", headers=KEY).status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    records = [record for record in caplog.records if record.name == "ratekeeper.refusals"]
    peer = "alice" if key.__class__.__name__ == "Header" else "127.0.0.1"
    assert [(r.peer, r.group, r.path, r.levelname) for r in records] == [  # type: ignore[attr-defined]
        (peer, "api", "/api/items", "WARNING")
    ] * 2
    assert records[0].retry_after == 20.0  # type: ignore[attr-defined]


def test_no_refusal_record_unless_asked(limiter: rk.Limiter, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="ratekeeper.refusals")
    with Server(make_app(limiter, key=header("X-API-Key"))) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(4)][-1] == 429
    assert not [record for record in caplog.records if record.name == "ratekeeper.refusals"]


def test_a_penalty_blocks_a_key_that_keeps_breaching(limiter: rk.Limiter, clock: rk.ManualClock) -> None:
    penalty = rk.Penalty(breaches=2, within=60.0, block=300.0)
    with Server(make_app(limiter, key=header("X-API-Key"), penalty=penalty)) as client:
        codes = [client.get("/api/items", headers=KEY).status_code for _ in range(5)]
        clock.advance(60)  # the rate alone would admit three again
        blocked = client.get("/api/items", headers=KEY)
        bob = client.get("/api/items", headers={"X-API-Key": "bob"}).status_code
        clock.advance(240)
        after = client.get("/api/items", headers=KEY).status_code
    assert codes == [200, 200, 200, 429, 429]
    assert (blocked.status_code, blocked.headers["Retry-After"]) == (429, "240")
    assert bob == 200
    assert after == 200


def test_an_epoch_reset_is_the_unix_time_the_next_request_comes_back(limiter: rk.Limiter) -> None:
    options = {"key": header("X-API-Key"), "headers": rk.HeaderOptions(legacy=True, reset="epoch")}
    with Server(make_app(limiter, **options)) as client:
        before = time.time()
        allowed = client.get("/api/items", headers=KEY)
        after = time.time()
    assert int(before) + 20 <= int(allowed.headers["X-RateLimit-Reset"]) <= int(after) + 20
    assert members(allowed.headers["RateLimit"]) == {"api": {"r": 2, "t": 20}}  # the IETF t stays in seconds
