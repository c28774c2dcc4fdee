"""Mistakes caught where they are made (issue 34): a bad rate, key function or option is refused when the
route or view is declared or when the app starts, naming the route, line, option or setting; never a 500
at the first request. And keys may be a str or an int in every integration alike.

The ASGI middleware's start-up failure is seen as users see it: a real uvicorn, started in a subprocess
by a fixture, exits with "Application startup failed" and the option's message.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar

import flask
import httpx
import pytest
import ratekeeper as rk
from _web import Server, stop
from fastapi import Depends, FastAPI, Header, Request
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.fastapi import RouteLimits
from ratekeeper.flask import RateLimit
from ratekeeper.keys import client_ip, header
from test_flask import Served
from test_web_servers import free_port

HERE = os.path.relpath(__file__)


def declared_here(error: BaseException, tb: Any) -> None:
    """``error`` names the line of this file where the raising call was made (the traceback's first entry)."""
    assert isinstance(error, rk.InvalidArgument)
    assert error.file == f"{HERE}:{tb.tb_lineno}"
    assert str(error).startswith(f"{HERE}:{tb.tb_lineno}: ")


# --- the ASGI middleware: a bad option fails the server's start-up --------------------------------------------------

APP = """\
import ratekeeper as rk
from fastapi import FastAPI, Header
from starlette.applications import Starlette
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.keys import client_ip


def current_user(x_api_key: str = Header()) -> str:
    return x_api_key


app = {factory}()
app.add_middleware(RateLimitMiddleware, limiter=rk.Limiter("1/s"), {options})
"""


@pytest.fixture
def uvicorn_run(tmp_path: Path) -> Iterator[Callable[[str], tuple[int | None, str]]]:
    """Starts ``uvicorn served:app`` (the lifespan on "auto", its default) on the source given, in a
    subprocess; returns its exit code once it exits (``None`` if it listens instead: it started), and its
    output. Stopped in teardown if it runs."""
    started: list[subprocess.Popen[bytes]] = []

    def run(source: str) -> tuple[int | None, str]:
        (tmp_path / "served.py").write_text(source)
        port = free_port()
        log = tmp_path / "uvicorn.log"
        command = [sys.executable, "-m", "uvicorn", "served:app", "--app-dir", str(tmp_path)]
        command += ["--host", "127.0.0.1", "--port", str(port)]
        with log.open("wb") as output:
            process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        started.append(process)
        deadline = time.monotonic() + 30
        while process.poll() is None:  # until it exits, or listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"uvicorn neither started nor exited:\n{log.read_text()}"
                time.sleep(0.02)
        return process.poll(), log.read_text(errors="replace")

    yield run
    for process in started:
        if process.poll() is None:
            stop(process)


@pytest.mark.parametrize(
    ("factory", "options", "message"),
    [
        (
            "FastAPI",
            'key="X-API-Key"',
            "key: must be a callable of the request, got the str 'X-API-Key'; for a header: header('X-API-Key')",
        ),
        ("FastAPI", "key=client_ip", "key: client_ip makes the key function: call it, client_ip()"),
        ("FastAPI", "key=current_user", "key: current_user(x_api_key=Header(...)) is a FastAPI dependency"),
        ("Starlette", 'mode="wait"', "mode: must be 'refuse' or 'delay', got 'wait'"),
    ],
)
def test_a_bad_middleware_option_stops_uvicorn_at_start_up_naming_it(
    uvicorn_run: Callable[[str], tuple[int | None, str]], factory: str, options: str, message: str
) -> None:
    code, output = uvicorn_run(APP.format(factory=factory, options=options))
    assert code == 3, f"uvicorn started (or failed otherwise), its output:\n{output}"  # uvicorn's STARTUP_FAILURE
    assert f"ratekeeper.asgi.RateLimitMiddleware: {message}" in output
    assert "Application startup failed" in output
    assert "appears unsupported" not in output


def test_a_good_middleware_starts_under_uvicorn(uvicorn_run: Callable[[str], tuple[int | None, str]]) -> None:
    code, output = uvicorn_run(APP.format(factory="FastAPI", options='key=client_ip(), mode="refuse"'))
    assert code is None, output


def test_without_the_lifespan_a_bad_middleware_option_is_raised_at_each_request() -> None:
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=rk.Limiter("1/s"), key="X-API-Key")  # type: ignore[arg-type]

    async def ask() -> None:
        # In process, without a lifespan: the app's exception reaches the test (a server answers 500, logs it).
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            await client.get("/")

    for _ in range(2):
        with pytest.raises(rk.InvalidType, match=r"^key: must be a callable of the request, got the str"):
            asyncio.run(ask())
    # Made by hand (not by Starlette's middleware stack), the middleware raises at once, as ever.
    with pytest.raises(rk.InvalidType, match=r"^key: must be a callable"):
        RateLimitMiddleware(app, limiter=rk.Limiter("1/s"), key="X-API-Key")  # type: ignore[arg-type]


# --- FastAPI route limits: a bad rate is refused at the route's declaration --------------------------------------


@pytest.mark.parametrize("rate", ["10/minn", "ten per minute", "0/min"])
def test_a_bad_rate_at_a_fastapi_route_is_refused_where_the_route_is_declared(rate: str) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=rk.Limiter(rules=[]))
    with pytest.raises(ValueError, match=rate) as raised:

        @app.get("/reports", dependencies=[Depends(limits.route(rate))])
        def reports() -> str:
            return "reports"

    declared_here(raised.value, raised.tb)
    assert raised.value.loc[0].startswith("limits")  # type: ignore[attr-defined]


def test_the_peers_spelling_of_a_rate_is_accepted_at_a_fastapi_route(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[], clock=clock)
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.get("/reports", dependencies=[Depends(limits.route("2 per minute"))])
    def reports() -> str:
        return "reports"

    with Server(app) as client:
        codes = [client.get("/reports", headers={"X-API-Key": "alice"}).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_a_bad_rate_computed_per_request_names_the_route() -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=rk.Limiter(rules=[]))

    @app.get("/reports/{year}", dependencies=[Depends(limits.route(lambda request: "10/minn"))])
    def reports(year: int) -> str:
        return "reports"

    async def ask() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            await client.get("/reports/2026")

    # Only the request shows the rate: the error (a server's 500 and its log) names the route.
    with pytest.raises(ValueError, match=r'"10/minn" is not a rate.*the route GET /reports/\{year\}'):
        asyncio.run(ask())


# --- FastAPI: a dependency given as a key function ----------------------------------------------------------------


def current_user(x_api_key: str = Header(...)) -> str:
    """The recipe's kind of user dependency: FastAPI fills ``x_api_key``; ratekeeper calls ``key(request)``."""
    return x_api_key


def annotated_user(x_api_key: Annotated[str, Header()]) -> str:
    return x_api_key


def with_database(request: Request, database: object) -> str:
    return "u-1"


@pytest.mark.parametrize("key", [current_user, annotated_user], ids=["default", "annotated"])
def test_a_fastapi_dependency_as_a_key_is_refused_where_it_is_given(key: Callable[..., str]) -> None:
    name = key.__name__
    told = (
        f"key: {name}(x_api_key=Header(...)) is a FastAPI dependency, but ratekeeper calls key(request) with the "
        "request alone, so FastAPI never fills x_api_key; give "
    )
    ways = "key=header('x-api-key'), or key=lambda request: request.headers.get('x-api-key')"
    with pytest.raises(rk.InvalidType) as limits:
        RouteLimits(FastAPI(), limiter=rk.Limiter("1/s"), key=key)
    assert str(limits.value) == f"{told}key=Depends({name}) for FastAPI to resolve it, or {ways}"
    with pytest.raises(rk.InvalidType) as route:
        RouteLimits(FastAPI(), limiter=rk.Limiter("1/s")).route("1/s", key=key)
    assert str(route.value).endswith(f"{told}key=Depends({name}) for FastAPI to resolve it, or {ways}")
    declared_here(route.value, route.tb)
    with pytest.raises(rk.InvalidType) as middleware:
        RateLimitMiddleware(FastAPI(), limiter=rk.Limiter("1/s"), key=key)
    assert str(middleware.value) == told + ways  # no Depends there


def test_a_key_that_needs_more_than_the_request_is_refused() -> None:
    with pytest.raises(rk.InvalidType) as raised:
        RouteLimits(FastAPI(), limiter=rk.Limiter("1/s"), key=with_database)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "key: with_database(request: 'Request', database: 'object') -> 'str' cannot be called with the request "
        "alone: ratekeeper calls key(request); a FastAPI dependency goes in Depends: key=Depends(with_database)"
    )
    with pytest.raises(rk.InvalidType, match=r"^key: <lambda>\(\) cannot be called with the request alone"):
        RateLimit(flask.Flask(__name__), limiter=rk.Limiter("1/s"), key=lambda: "k")  # type: ignore[arg-type,misc]


def test_the_per_user_dependency_given_in_depends_keys_each_user(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[], clock=clock)
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=Depends(current_user))

    @app.get("/reports", dependencies=[Depends(limits.route("1/min"))])
    def reports() -> str:
        return "reports"

    with Server(app) as client:
        alice = [client.get("/reports", headers={"X-API-Key": "alice"}).status_code for _ in range(2)]
        bob = client.get("/reports", headers={"X-API-Key": "bob"}).status_code
    assert (alice, bob) == ([200, 429], 200)


# --- Flask ----------------------------------------------------------------------------------------------------------


def test_a_bad_rate_at_a_flask_view_is_refused_naming_its_line() -> None:
    rate_limit = RateLimit(flask.Flask(__name__), limiter=rk.Limiter(rules=[]))
    with pytest.raises(ValueError, match="10/minn") as raised:

        @rate_limit.limit("10/minn")
        def login() -> str:
            return "ok"

    declared_here(raised.value, raised.tb)


def test_a_flask_limit_key_of_the_wrong_shape_is_refused_at_the_decorator() -> None:
    rate_limit = RateLimit(flask.Flask(__name__), limiter=rk.Limiter(rules=[]))
    with pytest.raises(rk.InvalidType, match=r"key: client_ip makes the key function: call it") as raised:
        rate_limit.limit("5/min", key=client_ip)  # type: ignore[arg-type]
    declared_here(raised.value, raised.tb)
    with pytest.raises(rk.InvalidType, match=r"key: header makes the key function"):
        rate_limit.limit("5/min", key=header)  # type: ignore[arg-type]
    rate_limit.limit("5/min", key=lambda: "k")  # Flask-Limiter's key of nothing is taken, as before


# --- Django and DRF -------------------------------------------------------------------------------------------------


@pytest.fixture
def fresh(django_site: None) -> Iterator[rk.Limiter]:
    """A limiter of this test's own in the settings, on a ManualClock."""
    from django.test import override_settings

    limiter = rk.Limiter(rules=[], clock=rk.ManualClock())
    with override_settings(RATEKEEPER={"LIMITER": limiter}):
        yield limiter


def django_statuses(view: Any, count: int) -> list[int]:
    from django.test import RequestFactory

    return [view(RequestFactory().get("/v")).status_code for _ in range(count)]


def test_a_bad_rate_at_a_django_view_is_refused_naming_its_line(django_site: None) -> None:
    from ratekeeper.django import limit, ratelimit

    with pytest.raises(ValueError, match="10/minn") as raised:
        limit("10/minn")
    declared_here(raised.value, raised.tb)
    with pytest.raises(ValueError, match="10/minn") as peer:
        ratelimit(key="ip", rate="10/minn")
    declared_here(peer.value, peer.tb)


def test_a_django_limit_key_of_the_wrong_shape_is_refused_at_the_decorator(django_site: None) -> None:
    from ratekeeper.django import limit, user

    with pytest.raises(rk.InvalidType, match=r"key: client_ip makes the key function: call it"):
        limit("5/min", key=client_ip)  # type: ignore[arg-type]
    with pytest.raises(rk.InvalidType, match=r"fallback: header makes the key function"):
        user(header)  # type: ignore[arg-type]


def test_a_bad_rate_computed_for_a_django_view_names_the_view(fresh: rk.Limiter) -> None:
    from django.http import HttpResponse
    from ratekeeper.django import limit

    @limit(lambda request: "10/minn")
    def reports(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    with pytest.raises(ValueError, match=r"the rate computed for the view .*reports"):
        django_statuses(reports, 1)


def test_a_bad_drf_throttle_rate_fails_when_the_middleware_starts(django_site: None) -> None:
    from django.conf import settings
    from django.http import HttpResponse
    from django.test import override_settings
    from ratekeeper.django import RateLimitMiddleware

    drf = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"items": "3/hour", "uploads": "2/minn"}}
    with override_settings(REST_FRAMEWORK=drf), pytest.raises(rk.InvalidValue, match="2/minn") as raised:
        RateLimitMiddleware(lambda request: HttpResponse())  # what Django's handler makes at start-up
    assert raised.value.loc == ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES", "uploads", "rate")
    # DRF's own throttles only: their rates are DRF's to read.
    own = {**drf, "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.ScopedRateThrottle"]}
    with override_settings(REST_FRAMEWORK=own):
        RateLimitMiddleware(lambda request: HttpResponse())


def test_a_bad_rate_of_a_drf_throttle_class_is_refused_at_its_class_statement(django_site: None) -> None:
    from ratekeeper.django import RateKeeperThrottle

    with pytest.raises(rk.InvalidValue, match="10/minn") as own:

        class Uploads(RateKeeperThrottle):
            rate = "10/minn"

    assert own.value.loc[0].endswith(".Uploads")  # type: ignore[union-attr]  # its __qualname__, as at a request
    assert own.value.loc[1:] == ("rate", "rate")
    with pytest.raises(rk.InvalidValue, match="3/hourz") as by_scope:

        class Scoped(RateKeeperThrottle):
            scope = "items"
            THROTTLE_RATES: ClassVar[dict[str, str]] = {"items": "3/hourz"}

    assert by_scope.value.loc[1:] == ("THROTTLE_RATES", "items", "rate")


# --- int keys, everywhere alike ---------------------------------------------------------------------------------------


def by_user_id(request: Any) -> int:
    return 42


async def by_user_id_async(request: Any) -> int:
    return 42


@pytest.mark.parametrize("key", [by_user_id, by_user_id_async], ids=["sync", "async"])
def test_an_int_key_in_the_asgi_middleware(clock: rk.ManualClock, key: Callable[[Any], Any]) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "2/min")], clock=clock)
    app = FastAPI()

    @app.get("/api/items")
    def items() -> dict[str, int]:
        return {"items": 3}

    app.add_middleware(RateLimitMiddleware, limiter=limiter, key=key)
    with Server(app) as client:
        codes = [client.get("/api/items").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert limiter.peek("42", "/api/items").remaining == 0


def test_an_int_key_at_a_fastapi_route(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[], clock=clock)
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter)

    @app.get("/reports", dependencies=[Depends(limits.route("2/min", key=by_user_id))])
    def reports() -> str:
        return "reports"

    with Server(app) as client:
        codes = [client.get("/reports").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert limiter.peek("42", group="GET /reports").remaining == 0


def test_an_int_key_in_flask(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "2/min")], clock=clock)
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=limiter, key=by_user_id)

    @app.get("/api/items")
    def items() -> str:
        return "items"

    @app.get("/login")
    @rate_limit.limit("1/min", key=lambda: 7)  # a limit's own key, of nothing (Flask-Limiter's)
    def login() -> str:
        return "ok"

    with Served(app) as client:
        codes = [client.get("/api/items").status_code for _ in range(3)]
        logins = [client.get("/login").status_code for _ in range(2)]
    assert (codes, logins) == ([200, 200, 429], [200, 429])
    assert limiter.peek("42", "/api/items").remaining == 0


def test_an_int_key_in_django(fresh: rk.Limiter) -> None:
    from django.http import HttpResponse
    from django.test import RequestFactory, override_settings
    from ratekeeper.django import RateLimitMiddleware, limit, ratelimit

    @limit("1/min", key=by_user_id)
    def view(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    assert django_statuses(view, 2) == [200, 429]

    @ratelimit(key=lambda group, request: 7, rate="1/m", block=False)
    def peer_view(request: Any) -> HttpResponse:
        return HttpResponse(str(request.limited))

    assert [peer_view(RequestFactory().get("/")).content for _ in range(2)] == [b"False", b"True"]

    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "1/min")], clock=rk.ManualClock())
    with override_settings(RATEKEEPER={"LIMITER": limiter, "KEY": by_user_id}):
        middleware = RateLimitMiddleware(lambda request: HttpResponse("ok"))
        codes = [middleware(RequestFactory().get("/api/items")).status_code for _ in range(2)]
    assert codes == [200, 429]


def test_an_int_key_in_a_drf_throttle(fresh: rk.Limiter) -> None:
    from ratekeeper.django import RateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    class ByAccount(RateKeeperThrottle):
        rate = "1/min"

        def get_cache_key(self, request: Any, view: Any) -> Any:
            return 42

    throttle = ByAccount()
    allowed = [throttle.allow_request(APIRequestFactory().get("/"), None) for _ in range(2)]
    assert allowed == [True, False]


def test_a_key_of_another_type_is_refused_naming_what_it_got() -> None:
    from ratekeeper.keys import key_text

    assert (key_text("a"), key_text(7), key_text(None)) == ("a", "7", None)
    for wrong in (True, 1.5, b"k", object()):
        with pytest.raises(rk.InvalidType, match=r"^key: must return a str, an int or None, got "):
            key_text(wrong)
    with pytest.raises(rk.InvalidType, match=r"^get_cache_key: must return .* got bool$"):
        key_text(False, "get_cache_key")
