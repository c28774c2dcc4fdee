"""Per-route limits declared at the route with a FastAPI dependency, on a real uvicorn."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import ratekeeper as rk
from _web import Server, members
from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import StreamingResponse
from ratekeeper.fastapi import RouteLimits
from ratekeeper.keys import header

KEY = {"X-API-Key": "alice"}


def make_app(limiter: rk.Limiter) -> FastAPI:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.post("/login", dependencies=[Depends(limits.route("2/min"))])
    def login() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/items/{item}", dependencies=[Depends(limits.route("3/min"))])
    def item(item: int) -> dict[str, int]:
        return {"item": item}

    router = APIRouter()

    @router.get("/a", dependencies=[Depends(limits.route("1/min", group="shared"))])
    def a() -> str:
        return "a"

    @router.get("/b", dependencies=[Depends(limits.route("1/min", group="shared"))])
    def b() -> str:
        return "b"

    app.include_router(router, prefix="/shared")
    return app


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter("1000/min", clock=clock)


def test_a_route_has_its_own_limit_by_its_template(limiter: rk.Limiter) -> None:
    with Server(make_app(limiter)) as client:
        logins = [client.post("/login", headers=KEY) for _ in range(3)]
        assert [r.status_code for r in logins] == [200, 200, 429]
        assert members(logins[0].headers["RateLimit-Policy"]) == {"POST /login": {"q": 2, "w": 60}}
        assert logins[2].json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 30}
        assert logins[2].headers["Retry-After"] == "30"
        # One group for every item: the route template, not the path.
        codes = [client.get(f"/items/{i}", headers=KEY).status_code for i in range(4)]
        assert codes == [200, 200, 200, 429]
    assert "GET /items/{item}" in limiter.groups


def test_routes_of_an_included_router_share_a_named_group(limiter: rk.Limiter) -> None:
    with Server(make_app(limiter)) as client:
        assert client.get("/shared/a", headers=KEY).status_code == 200
        assert client.get("/shared/b", headers=KEY).status_code == 429
        assert client.get("/shared/b", headers={"X-API-Key": "bob"}).status_code == 200


def test_a_route_limit_with_no_limits_is_refused_at_declaration() -> None:
    with pytest.raises(rk.InvalidValue) as error:
        RouteLimits(FastAPI(), limiter=rk.Limiter("1/s")).route()
    assert error.value.loc == ("limits",)


def test_a_route_concurrency_limit_holds_its_permit_until_the_response_is_sent(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))
    inside = threading.Semaphore(0)  # one release per request that reached the route
    finish = threading.Event()  # lets the admitted request's body end

    def body() -> Iterator[bytes]:
        yield b"started "
        finish.wait(10)
        yield b"done"

    @app.get("/slow", dependencies=[Depends(limits.route(rk.Limit(concurrency=1)))])
    def slow() -> StreamingResponse:
        inside.release()
        return StreamingResponse(body())

    with Server(app) as client, ThreadPoolExecutor(3) as pool:
        requests = [pool.submit(client.get, "/slow", headers=KEY) for _ in range(3)]
        assert inside.acquire(timeout=10)  # the first one is in the route, its body streaming
        # Every other request is answered while the first one's body is still being sent, or reaches
        # the route too (a limit ignored): 3 events in all, then the first response may end.
        for request in requests:
            request.add_done_callback(lambda _: inside.release())
        for _ in range(2):
            assert inside.acquire(timeout=10)
        finish.set()
        statuses = sorted(request.result().status_code for request in requests)
        assert statuses == [200, 429, 429]
        refused = next(request.result() for request in requests if request.result().status_code == 429)
        assert refused.json()["detail"] == "Too many concurrent requests"
