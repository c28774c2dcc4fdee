"""slowapi 0.1.10's promises (its ``tests/test_fastapi_extension.py``, ``test_starlette_extension.py``,
``test_streaming.py``, ``test_base.py`` and ``test_util.py``), kept by ratekeeper's FastAPI route limits and
ASGI middleware: the same requests, statuses, headers, waits and counts, each test named after slowapi's.

slowapi's ``@limiter.limit(...)`` is a ``Depends(limits.route(...))`` here, its ``Limiter(strategy=...)``
the ``RouteLimits(algorithm="fixed_window")`` that makes every group decide as slowapi's default strategy
does, and its ``headers_enabled=True`` our ``HeaderOptions(legacy=True, reset="epoch")``. slowapi's
``get_ipaddr`` reads ``X-Forwarded-For`` from anyone; ``client_ip(trusted_proxies=[...])`` reads it from the
proxies named (the test client's 127.0.0.1 here). slowapi's tests freeze time with hiro; these move the
limiter's ManualClock. Where ratekeeper decides otherwise on purpose, the test says so and checks
ratekeeper's answer (the migration page lists each difference).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import pytest
import ratekeeper as rk
from _compat_slowapi import InProcess
from fastapi import Depends, FastAPI, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.fastapi import RouteLimits
from ratekeeper.keys import client_ip
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.routing import Route

# slowapi's get_ipaddr: the address a proxy forwarded (here from the test client, a trusted proxy).
GET_IPADDR = client_ip(trusted_proxies=["127.0.0.1"])
FORWARDED_FOR_2 = {"X-Forwarded-For": "127.0.0.2"}
FORWARDED_FOR_3 = {"X-Forwarded-For": "127.0.0.3"}
# slowapi's headers_enabled=True: X-RateLimit-Limit, -Remaining and -Reset, the reset as a Unix time.
SLOWAPI_HEADERS = rk.HeaderOptions(legacy=True, reset="epoch")
LEGACY = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter(rules=[], clock=clock)


def build_fastapi_app(limiter: rk.Limiter, **options: Any) -> tuple[FastAPI, RouteLimits]:
    """slowapi's ``build_fastapi_app``: an app and its limits, deciding by fixed windows as slowapi does."""
    app = FastAPI()
    options.setdefault("key", GET_IPADDR)
    return app, RouteLimits(app, limiter=limiter, algorithm="fixed_window", **options)


def answer(returns: str) -> Any:
    """A route's answer: a Response object, or a dict FastAPI serializes (slowapi's "not_response" tests)."""
    return PlainTextResponse("test") if returns == "response" else {"key": "value"}


# --- tests/test_fastapi_extension.py --------------------------------------------------------------------------------


@pytest.mark.parametrize("returns", ["response", "dict"], ids=["single_decorator", "single_decorator_not_response"])
def test_single_decorator(limiter: rk.Limiter, returns: str) -> None:
    app, limits = build_fastapi_app(limiter)

    @app.get("/t1", dependencies=[Depends(limits.route("5/minute"))])
    async def t1() -> Any:
        return answer(returns)

    with InProcess(app) as client:
        codes = [client.get("/t1").status_code for _ in range(10)]
    assert codes == [200] * 5 + [429] * 5


@pytest.mark.parametrize(
    "returns", ["response", "dict"], ids=["single_decorator_with_headers", "single_decorator_not_response_with_headers"]
)
def test_single_decorator_with_headers(limiter: rk.Limiter, returns: str) -> None:
    app, limits = build_fastapi_app(limiter, headers=SLOWAPI_HEADERS)

    @app.get("/t1", dependencies=[Depends(limits.route("5/minute"))])
    async def t1() -> Any:
        return answer(returns)

    with InProcess(app) as client:
        responses = [client.get("/t1") for _ in range(10)]
    assert [response.status_code for response in responses] == [200] * 5 + [429] * 5
    for response in responses[:5]:
        assert response.headers["X-RateLimit-Limit"] == "5"
        # Kept different: slowapi also sends Retry-After on allowed responses; ours is on 429s only
        # (RFC 9110: it says how long to wait before asking again, and an allowed client need not wait).
        assert "Retry-After" not in response.headers
    assert all(response.headers["Retry-After"] == "60" for response in responses[5:])


@pytest.mark.parametrize(
    ("returns", "reverse"),
    [("response", False), ("dict", False), ("dict", True)],
    ids=["multiple_decorators", "multiple_decorators_not_response", "declared_in_the_other_order"],
)
def test_multiple_decorators(limiter: rk.Limiter, returns: str, reverse: bool) -> None:
    app, limits = build_fastapi_app(limiter, headers=SLOWAPI_HEADERS)
    per_address = Depends(limits.route("50/minute"))
    for_everyone = Depends(limits.route("100 per minute", key=lambda request: "test"))
    stacked = [for_everyone, per_address] if reverse else [per_address, for_everyone]

    @app.get("/t1", dependencies=stacked)
    async def t1() -> Any:
        return answer(returns)

    with InProcess(app) as client:
        forwarded = [client.get("/t1", headers=FORWARDED_FOR_2).status_code for _ in range(100)]
        direct = [client.get("/t1").status_code for _ in range(50)]
        assert client.get("/t1").status_code == 429
        assert client.get("/t1", headers=FORWARDED_FOR_3).status_code == 429
    assert forwarded == [200] * 50 + [429] * 50
    # A refused request counts against none of its limits, so the order they are declared in does not
    # matter (in slowapi it does: a limit checked before the refusing one has counted the request).
    assert direct == [200] * 50


@pytest.mark.parametrize("asynchronous", [True, False], ids=["missing_request_param", "missing_request_param_sync"])
def test_endpoint_missing_request_param(limiter: rk.Limiter, asynchronous: bool) -> None:
    # Kept different: slowapi refuses a route without a `request` parameter at decoration; a dependency
    # reads the request from FastAPI, so the route is limited whatever its parameters.
    app, limits = build_fastapi_app(limiter)

    async def t3_async() -> PlainTextResponse:
        return PlainTextResponse("test")

    def t3_sync() -> PlainTextResponse:
        return PlainTextResponse("test")

    app.get("/t3", dependencies=[Depends(limits.route("5/minute"))])(t3_async if asynchronous else t3_sync)
    with InProcess(app) as client:
        codes = [client.get("/t3").status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]


def test_dynamic_limit_provider_depending_on_key(limiter: rk.Limiter) -> None:
    def custom_key_func(request: Request) -> str:
        return "admin" if request.headers.get("TOKEN") == "secret" else "user"

    def dynamic_limit_provider(request: Request) -> str:
        return "10/minute" if custom_key_func(request) == "admin" else "5/minute"

    app, limits = build_fastapi_app(limiter, key=custom_key_func)

    @app.get("/t1", dependencies=[Depends(limits.route(dynamic_limit_provider))])
    async def t1() -> dict[str, str]:
        return {"key": "value"}

    with InProcess(app) as client:
        users = [client.get("/t1").status_code for _ in range(10)]
        admins = [client.get("/t1", headers={"TOKEN": "secret"}).status_code for _ in range(20)]
    assert users == [200] * 5 + [429] * 5
    assert admins == [200] * 10 + [429] * 10


def test_disabled_limiter(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter, default_limits=["5/minute"])

    @app.get("/t1", dependencies=[Depends(limits.route("5/minute"))])
    async def t1() -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t2", dependencies=[Depends(limits.route("5/minute"))])
    def t2() -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t3")
    def t3() -> PlainTextResponse:
        return PlainTextResponse("also a test")

    limiter.off()  # slowapi's Limiter(enabled=False)
    with InProcess(app) as client:
        codes = [client.get(path).status_code for path in ("/t1", "/t2", "/t3") for _ in range(10)]
    assert codes == [200] * 30


def test_cost(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter)

    @app.get("/t1", dependencies=[Depends(limits.route("50/minute", cost=10))])
    async def t1() -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t2", dependencies=[Depends(limits.route("50/minute", cost=15))])
    async def t2() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        for i in range(10):
            assert client.get("/t1").status_code == (200 if i < 5 else 429)
            assert client.get("/t2").status_code == (200 if i < 3 else 429)


def test_callable_cost(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter)

    @app.get("/t1", dependencies=[Depends(limits.route("50/minute", cost=lambda request: int(request.headers["foo"])))])
    async def t1() -> PlainTextResponse:
        return PlainTextResponse("test")

    def one_and_a_half(request: Request) -> int:
        return int(request.headers["foo"]) * 1.5  # type: ignore[return-value]

    @app.get("/t2", dependencies=[Depends(limits.route("50/minute", cost=one_and_a_half))])
    async def t2() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        assert [client.get("/t1", headers={"foo": "10"}).status_code for _ in range(10)] == [200] * 5 + [429] * 5
        # Kept different: slowapi counts a cost of 7.5; a request counts whole requests here, and a
        # fractional cost is a clear error naming the callable rather than a silent rounding.
        with pytest.raises(rk.InvalidValue) as fractional:
            client.get("/t2", headers={"foo": "5"})
    assert fractional.value.loc == ("cost",)
    assert "one_and_a_half must return a whole number of requests >= 1, got 7.5" in str(fractional.value)


def test_key_style(limiter: rk.Limiter) -> None:
    # slowapi counts under the key and the URL ("LIMITER/mock//t1/1/1/minute"); ratekeeper under the key
    # and the route's group, named after its method and path template, where the count can be read.
    app, limits = build_fastapi_app(limiter, key=lambda request: "mock")

    @app.get("/t1", dependencies=[Depends(limits.route("1/minute"))])
    async def t1_func() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        client.get("/t1", headers={"foo": "10"})
    used = limiter.peek("mock", group="GET /t1")
    assert (used.limit, used.remaining) == (1, 0)


# --- tests/test_starlette_extension.py: a Starlette app, limited by the ASGI middleware's path rules ----------------


def starlette_app(limiter: rk.Limiter, *routes: Route, **options: Any) -> Starlette:
    app = Starlette(routes=list(routes))
    app.add_middleware(RateLimitMiddleware, limiter=limiter, key=GET_IPADDR, **options)
    return app


def starlette_limiter(clock: rk.ManualClock, *rules: rk.Rule) -> rk.Limiter:
    return rk.Limiter(rules=list(rules), clock=clock)


@pytest.mark.parametrize("asynchronous", [True, False], ids=["single_decorator_async", "single_decorator_sync"])
def test_single_decorator_starlette(clock: rk.ManualClock, asynchronous: bool) -> None:
    async def t1_async(request: StarletteRequest) -> PlainTextResponse:
        return PlainTextResponse("test")

    def t1_sync(request: StarletteRequest) -> PlainTextResponse:
        return PlainTextResponse("test")

    limiter = starlette_limiter(clock, rk.Rule("^/t1$", "t1", "5/minute", algorithm="fixed_window"))
    app = starlette_app(limiter, Route("/t1", t1_async if asynchronous else t1_sync))
    with InProcess(app) as client:
        responses = [client.get("/t1") for _ in range(10)]
    assert [response.status_code for response in responses] == [200] * 5 + [429] * 5
    assert all(response.text == "test" for response in responses[:5])


def test_shared_decorator(clock: rk.ManualClock) -> None:
    def t(request: StarletteRequest) -> PlainTextResponse:
        return PlainTextResponse("test")

    # slowapi's shared_limit("5/minute", "somescope"): one group for both paths.
    limiter = starlette_limiter(clock, rk.Rule("^/t[12]$", "somescope", "5/minute", algorithm="fixed_window"))
    app = starlette_app(limiter, Route("/t1", t), Route("/t2", t))
    with InProcess(app) as client:
        assert [client.get("/t1").status_code for _ in range(10)] == [200] * 5 + [429] * 5
        assert client.get("/t2").status_code == 429  # the shared limit was reached through /t1


def test_shared_decorator_fastapi(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter)
    shared = Depends(limits.route("5/minute", group="somescope"))

    @app.get("/t1", dependencies=[shared])
    def t1() -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t2", dependencies=[shared])
    def t2() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        assert [client.get("/t1").status_code for _ in range(10)] == [200] * 5 + [429] * 5
        assert client.get("/t2").status_code == 429


def test_multiple_decorators_starlette(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter)

    @app.get(
        "/t1",
        dependencies=[
            Depends(limits.route("10 per minute", key=lambda request: "test")),
            Depends(limits.route("5/minute")),
        ],
    )
    async def t1() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        assert [client.get("/t1", headers=FORWARDED_FOR_2).status_code for _ in range(10)] == [200] * 5 + [429] * 5
        assert [client.get("/t1").status_code for _ in range(5)] == [200] * 5
        assert client.get("/t1").status_code == 429
        assert client.get("/t1", headers=FORWARDED_FOR_3).status_code == 429


def epoch_in(value: str, seconds: int, before: float) -> bool:
    """Whether an ``X-RateLimit-Reset`` is the Unix time ``seconds`` after the request was made."""
    return int(before) + seconds <= int(value) <= int(time.time()) + seconds


def test_headers_no_breach(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter, headers=SLOWAPI_HEADERS)

    @app.get("/t1", dependencies=[Depends(limits.route("10/minute"))])
    def t1() -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t2", dependencies=[Depends(limits.route("2/second; 5 per minute; 10/hour"))])
    def t2() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        before = time.time()
        first = client.get("/t1")
        second = client.get("/t2")
    assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == ("10", "9")
    # Kept different: slowapi's reset is one second past the window's end (now + 61), ours is its end.
    assert epoch_in(first.headers["X-RateLimit-Reset"], 60, before)
    # The smallest window speaks for a route of several limits, as in slowapi.
    assert (second.headers["X-RateLimit-Limit"], second.headers["X-RateLimit-Remaining"]) == ("2", "1")
    assert epoch_in(second.headers["X-RateLimit-Reset"], 1, before)
    # Kept different: no Retry-After on an allowed response.
    assert "Retry-After" not in first.headers
    assert "Retry-After" not in second.headers


def test_headers_breach(limiter: rk.Limiter, clock: rk.ManualClock) -> None:
    app, limits = build_fastapi_app(limiter, headers=SLOWAPI_HEADERS)

    @app.get("/t1", dependencies=[Depends(limits.route("2/second; 10 per minute; 20/hour"))])
    def t(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        for _ in range(11):
            before = time.time()
            response = client.get("/t1")
            clock.advance(1)
    assert response.status_code == 429
    # The refusing limit speaks: 10 per minute, used up, back at the window's end 50 s later.
    assert (response.headers["X-RateLimit-Limit"], response.headers["X-RateLimit-Remaining"]) == ("10", "0")
    assert response.headers["Retry-After"] == "50"
    assert epoch_in(response.headers["X-RateLimit-Reset"], 50, before)


def test_retry_after(limiter: rk.Limiter, clock: rk.ManualClock) -> None:
    app, limits = build_fastapi_app(limiter, headers=SLOWAPI_HEADERS)

    @app.get("/t1", dependencies=[Depends(limits.route("1/minute"))])
    def t(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        assert client.get("/t1").status_code == 200
        refused = client.get("/t1")
        assert refused.status_code == 429
        # slowapi reads Retry-After from the allowed response; here it comes with the 429.
        retry_after = int(refused.headers["Retry-After"])
        assert retry_after > 0
        clock.advance(retry_after)
        assert client.get("/t1").status_code == 200


def test_exempt_decorator(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter, headers=SLOWAPI_HEADERS, key=client_ip(), default_limits=["1/minute"])

    @app.get("/t1")
    def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        assert client.get("/t1", headers={"X-Forwarded-For": "127.0.0.10"}).status_code == 200
        assert client.get("/t1", headers={"X-Forwarded-For": "127.0.0.10"}).status_code == 429

    @app.get("/t2")  # added once the app has served, as slowapi's test does
    @limits.exempt
    def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        assert client.get("/t2", headers={"X-Forwarded-For": "127.0.0.10"}).status_code == 200
        assert client.get("/t2", headers={"X-Forwarded-For": "127.0.0.10"}).status_code == 200


def test_default_and_decorator_limit_merging(limiter: rk.Limiter) -> None:
    app, limits = build_fastapi_app(limiter, key=lambda request: "test", default_limits=["10/minute"])

    # slowapi's override_defaults=False
    @app.get("/t1", dependencies=[Depends(limits.route("5 per minute", key=GET_IPADDR, keep_defaults=True))])
    async def t1() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        assert [client.get("/t1", headers=FORWARDED_FOR_2).status_code for _ in range(10)] == [200] * 5 + [429] * 5
        assert [client.get("/t1").status_code for _ in range(5)] == [200] * 5
        assert client.get("/t1").status_code == 429
        assert client.get("/t1", headers=FORWARDED_FOR_3).status_code == 429


# --- tests/test_streaming.py, tests/test_base.py --------------------------------------------------------------------


def test_asgi_middleware_sends_response_start_once_for_streaming(limiter: rk.Limiter) -> None:
    app, _ = build_fastapi_app(limiter, key=client_ip(), default_limits=["5/minute"], headers=SLOWAPI_HEADERS)

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def chunks() -> Any:
            for i in range(3):
                yield f"chunk{i}\n"

        return StreamingResponse(chunks(), media_type="text/plain")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "path": "/stream",
        "raw_path": b"/stream",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
        "scheme": "http",
        "root_path": "",
    }
    sent: list[MutableMapping[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    starts = [message for message in sent if message["type"] == "http.response.start"]
    body = b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")
    assert len(starts) == 1
    assert body == b"chunk0\nchunk1\nchunk2\n"
    assert b"x-ratelimit-limit" in [name.lower() for name, _ in starts[0]["headers"]]


@pytest.mark.parametrize("enabled", [False, True], ids=["headers_disabled", "headers_enabled"])
def test_headers_configuration_on_responses(limiter: rk.Limiter, enabled: bool) -> None:
    app, limits = build_fastapi_app(limiter, headers=rk.HeaderOptions(legacy=enabled, reset="epoch"))

    @app.get("/test", dependencies=[Depends(limits.route("1/minute"))])
    def endpoint() -> PlainTextResponse:
        return PlainTextResponse("test")

    with InProcess(app) as client:
        allowed, refused = client.get("/test"), client.get("/test")
    assert (allowed.status_code, refused.status_code) == (200, 429)
    for response in (allowed, refused):
        assert all((field in response.headers) is enabled for field in LEGACY)
    # Kept different: Retry-After is on every 429 whatever the fields chosen, and on no allowed response.
    assert "Retry-After" not in allowed.headers
    assert refused.headers["Retry-After"] == "60"


# --- tests/test_util.py: slowapi's key functions and client_ip --------------------------------------------------------


def http_scope(headers: dict[str, str], client: tuple[str, int] | None) -> dict[str, Any]:
    raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    return {"type": "http", "method": "GET", "path": "/", "headers": raw, "client": client}


@pytest.mark.parametrize(
    ("headers", "client", "expected"),
    [
        ({"X-Forwarded-For": "198.51.100.1"}, ("10.0.0.1", 1234), "198.51.100.1"),
        ({"x-forwarded-for": "198.51.100.2"}, ("10.0.0.1", 1234), "198.51.100.2"),
        # Kept different: slowapi takes the leftmost address, which the client writes itself and so may
        # pick at will; ratekeeper the rightmost one no trusted proxy wrote, the one the edge proxy saw.
        ({"X-Forwarded-For": "203.0.113.195, 70.41.3.18, 150.172.238.178"}, ("10.0.0.1", 1234), "150.172.238.178"),
        ({"X-Forwarded-For": "  203.0.113.196  , 70.41.3.18"}, ("10.0.0.1", 1234), "70.41.3.18"),
        ({"X-Forwarded-For": ""}, ("192.168.1.100", 50000), "192.168.1.100"),
        ({"X-Forwarded-For": "   "}, ("192.168.1.100", 50000), "192.168.1.100"),
        ({}, ("192.168.1.100", 50000), "192.168.1.100"),
        # Kept different: no address is no key (RouteLimits then shares one "anonymous" budget between such
        # requests, as slowapi's "127.0.0.1" does, under a name no real client has).
        ({}, None, None),
    ],
)
def test_get_ipaddr(headers: dict[str, str], client: tuple[str, int] | None, expected: str | None) -> None:
    # The proxies in front of the service, named: only a request from one of them may name its client.
    key = client_ip(trusted_proxies=["10.0.0.0/8", "192.168.0.0/16"])
    assert key.from_scope(http_scope(headers, client)) == expected


@pytest.mark.parametrize(("client", "expected"), [(("192.168.1.50", 12345), "192.168.1.50"), (None, None)])
def test_get_remote_address(client: tuple[str, int] | None, expected: str | None) -> None:
    # The peer's address, X-Forwarded-For ignored: client_ip() with no trusted proxies.
    assert client_ip().from_scope(http_scope({"X-Forwarded-For": "198.51.100.1"}, client)) == expected


def test_requests_without_an_address_share_one_budget(limiter: rk.Limiter) -> None:
    """What slowapi's "127.0.0.1" for a request without a client gives: one budget for all of them."""
    app, limits = build_fastapi_app(limiter, key=client_ip())

    @app.get("/t1", dependencies=[Depends(limits.route("2/minute"))])
    def t1() -> str:
        return "test"

    async def get(app: Callable[..., Any]) -> list[int]:
        statuses = []
        for _ in range(3):
            sent: list[MutableMapping[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: MutableMapping[str, Any], sent: list[Any] = sent) -> None:
                sent.append(message)

            scope = {**http_scope({}, None), "query_string": b"", "raw_path": b"/t1", "path": "/t1"}
            scope["http_version"], scope["scheme"], scope["server"], scope["root_path"] = "1.1", "http", None, ""
            await app(scope, receive, send)
            statuses.append(next(m["status"] for m in sent if m["type"] == "http.response.start"))
        return statuses

    assert asyncio.run(get(app)) == [200, 200, 429]
    assert not limiter.peek("anonymous", group="GET /t1").allowed
