"""Per-route limits declared at the route with a FastAPI dependency, on a real uvicorn."""

from __future__ import annotations

import pytest
import ratekeeper as rk
from _web import Server, members
from fastapi import APIRouter, Depends, FastAPI
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
