"""Adaptive limits behind the web integrations: a real uvicorn server refuses what the limit cannot take
with 503 (or 429) and Retry-After and serves the rest; the middleware records 5xx and exceptions as drops;
a decorated outgoing call holds an adaptive permit. No timing is asserted: the server runs on the real
clock, so only what happens, not when."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from _web import Server
from ratekeeper.asgi import RateLimitMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route


def adaptive_stats(limiter: rk.Limiter) -> rk.AdaptiveStats:
    return limiter.stats()["groups"]["api"]["adaptive"][0]


def app_with(limiter: rk.Limiter, **options: Any) -> RateLimitMiddleware:
    async def slow(request: Request) -> PlainTextResponse:
        return PlainTextResponse("served")

    async def fail(request: Request) -> PlainTextResponse:
        return PlainTextResponse("broken", status_code=502)

    async def crash(request: Request) -> PlainTextResponse:
        raise RuntimeError("boom")

    routes = [Route("/api/slow", slow), Route("/api/fail", fail), Route("/api/crash", crash)]
    return RateLimitMiddleware(Starlette(routes=routes), limiter=limiter, **options)


@pytest.mark.parametrize("status", [503, 429])
def test_a_real_server_refuses_past_the_limit_and_serves_the_rest(status: int) -> None:
    # A fresh limit probes at its floor (1 permit): one request held open fills it.
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", limits=[rk.Limit(adaptive="gradient")])])
    held_open: dict[str, Any] = {}

    async def held(request: Request) -> PlainTextResponse:
        held_open["loop"] = asyncio.get_running_loop()
        held_open["event"] = event = asyncio.Event()
        await event.wait()
        return PlainTextResponse("served")

    app = Starlette(routes=[Route("/api/held", held)])
    server = Server(RateLimitMiddleware(app, limiter=limiter, concurrency_status=status))
    with server as client:
        results: list[httpx.Response] = []
        first = threading.Thread(target=lambda: results.append(client.get("/api/held")))
        first.start()
        while "event" not in held_open:
            threading.Event().wait(0.01)
        refused = client.get("/api/held")
        assert refused.status_code == status
        assert "retry-after" in refused.headers
        assert refused.json()["status"] == status
        held_open["loop"].call_soon_threadsafe(held_open["event"].set)
        first.join(timeout=10)
        assert [r.status_code for r in results] == [200]
        assert results[0].text == "served"
    stats = adaptive_stats(limiter)
    assert stats["in_flight"] == 0
    assert stats["samples"] == 1
    assert limiter.stats()["groups"]["api"]["refused"] == 1


def test_the_middleware_records_5xx_and_exceptions_as_drops() -> None:
    clock = rk.ManualClock()
    limit = rk.Limit(adaptive="aimd", probe_samples=1)
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", limits=[limit])], clock=clock)
    app = app_with(limiter)

    async def main() -> None:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/api/slow")).status_code == 200
            assert (await client.get("/api/fail")).status_code == 502
            assert (await client.get("/api/crash")).status_code == 500

    asyncio.run(main())
    stats = adaptive_stats(limiter)
    assert stats["samples"] == 3
    assert stats["drops"] == 2
    assert stats["in_flight"] == 0


def test_a_decorated_call_holds_an_adaptive_permit_and_learns_from_it() -> None:
    clock = rk.ManualClock()
    limit = rk.Limit(adaptive="gradient", per="key", probe_samples=2)
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", limits=[limit])], clock=clock)

    @limiter.limited("upstream", "/api")
    def call(fail: bool) -> str:
        assert adaptive_stats(limiter)["in_flight"] == 1
        clock.advance(0.05)
        if fail:
            raise ConnectionError("upstream said 503")
        return "ok"

    assert call(False) == "ok"
    with pytest.raises(ConnectionError):
        call(True)
    stats = adaptive_stats(limiter)
    assert (stats["samples"], stats["drops"], stats["in_flight"], stats["gates"]) == (2, 1, 0, 1)
    assert stats["baseline_latency"] == pytest.approx(0.05)


def test_fastapi_route_limits_record_drops_but_not_client_errors() -> None:
    from fastapi import Depends, FastAPI, HTTPException
    from ratekeeper.fastapi import RouteLimits

    clock = rk.ManualClock()
    limiter = rk.Limiter(rules=[rk.Rule("^/other", "other", "10/s")], clock=clock)
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter)
    limited = Depends(limits.route(rk.Limit(adaptive="aimd", probe_samples=1), group="api"))

    @app.get("/ok", dependencies=[limited])
    def ok() -> str:
        return "ok"

    @app.get("/missing", dependencies=[limited])
    def missing() -> str:
        raise HTTPException(404)

    @app.get("/broken", dependencies=[limited])
    def broken() -> str:
        raise HTTPException(503)

    async def main() -> None:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/ok")).status_code == 200
            assert (await client.get("/missing")).status_code == 404
            assert (await client.get("/broken")).status_code == 503

    asyncio.run(main())
    stats = adaptive_stats(limiter)
    assert (stats["samples"], stats["drops"], stats["in_flight"]) == (3, 1, 0)
