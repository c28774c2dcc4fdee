"""The Flask extension on a real WSGI server (Werkzeug's, threaded, on a free loopback port), via httpx."""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Iterator
from typing import Any

import flask
import httpx
import pytest
import ratekeeper as rk
from _web import members
from ratekeeper._core import _Take
from ratekeeper.flask import RateLimit, RateLimitExceeded
from ratekeeper.keys import client_ip, header
from werkzeug.serving import make_server

KEY = {"X-API-Key": "alice"}


class Served:
    """``app`` on Werkzeug's threaded server, stopped on exit."""

    def __init__(self, app: flask.Flask) -> None:
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.server.server_port}", timeout=10)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.shutdown()
        self.thread.join(timeout=10)


def make_app(limiter: rk.Limiter, *, marked: bool = True, **options: Any) -> tuple[flask.Flask, RateLimit]:
    """The test app. ``marked=False`` leaves out every per-view mark (and the views that need one), so the
    extension decides at its WSGI gate, before Flask routes; with marks each view's wrapper decides its request
    inside Flask, once Flask has routed it."""
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=limiter, **options)

    @app.get("/api/items")
    def items() -> dict[str, int]:
        return {"items": 3}

    if marked:

        @app.post("/login")
        @rate_limit.limit("2/min")
        def login() -> dict[str, bool]:
            return {"ok": flask.request.args.get("ok") == "1"}

        @app.get("/a")
        @rate_limit.limit("1/min", group="shared")
        def a() -> str:
            return "a"

        @app.get("/b")
        @rate_limit.limit("1/min", group="shared")
        def b() -> str:
            return "b"

        @app.get("/api/free")
        @rate_limit.exempt
        def free() -> str:
            return "free"

    @app.get("/boom")
    def boom() -> str:
        raise RuntimeError("the view failed")

    @app.get("/stream")
    def stream() -> flask.Response:
        def chunks() -> Iterator[bytes]:
            for _ in range(200):
                yield b"x" * 1024
                time.sleep(0.005)

        return flask.Response(chunks(), mimetype="application/octet-stream")

    if marked:
        bp = flask.Blueprint("admin", __name__, url_prefix="/admin")

        @bp.get("/report")
        def report() -> str:
            return "report"

        rate_limit.limit_blueprint(bp, "1/min")
        app.register_blueprint(bp)
    return app, rate_limit


@pytest.fixture(params=[True, False], ids=["views", "gate"])
def marked(request: pytest.FixtureRequest) -> bool:
    """Whether the app has per-view marks: decided by the view wrappers inside Flask, or at the WSGI gate."""
    value: bool = request.param
    return value


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter(
        rules=[
            rk.Rule("^/api/", "api", "3/min"),
            rk.Rule("^/(boom|stream)", "held", limits=[rk.Limit("1000/min"), rk.Limit(concurrency=1)]),
        ],
        exempt_paths=["^/health$"],
        clock=clock,
    )


def test_path_rules_answer_with_valid_fields_and_refuse_with_429(limiter: rk.Limiter, marked: bool) -> None:
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"))
    with Served(app) as client:
        for remaining in (2, 1, 0):
            response = client.get("/api/items", headers=KEY)
            assert response.status_code == 200
            assert members(response.headers["RateLimit-Policy"]) == {"api": {"q": 3, "w": 60}}
            assert members(response.headers["RateLimit"]) == {"api": {"r": remaining, "t": 20}}
        refused = client.get("/api/items", headers=KEY)
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 20}
    assert refused.headers["Retry-After"] == "20"


def test_per_route_limits_shared_groups_exemptions_and_blueprints(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, key=header("X-API-Key"))
    with Served(app) as client:
        assert [client.post("/login", headers=KEY).status_code for _ in range(3)] == [200, 200, 429]
        assert client.get("/a", headers=KEY).status_code == 200
        assert client.get("/b", headers=KEY).status_code == 429  # one group for both views
        assert [client.get("/api/free", headers=KEY).status_code for _ in range(5)] == [200] * 5
        assert [client.get("/admin/report", headers=KEY).status_code for _ in range(2)] == [200, 429]


def test_missing_keys_and_spoofed_forwarded_for(limiter: rk.Limiter, marked: bool) -> None:
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"), missing_key_status=401)
    with Served(app) as client:
        missing = client.get("/api/items")
        assert missing.status_code == 401
        assert missing.json()["status"] == 401
    # Werkzeug's test server sees 127.0.0.1; trusting only 10.0.0.0/8, the header is the client's own word.
    app, _ = make_app(limiter, marked=marked, key=client_ip(trusted_proxies=["10.0.0.0/8"]))
    with Served(app) as client:
        codes = [client.get("/api/items", headers={"X-Forwarded-For": f"198.51.100.{i}"}).status_code for i in range(4)]
    assert codes == [200, 200, 200, 429]


def test_delay_mode_waits_on_the_manual_clock(limiter: rk.Limiter, clock: rk.ManualClock, marked: bool) -> None:
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"), mode="delay", max_delay=30.0)
    with Served(app) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(4)] == [200] * 4
    assert clock.now() == 20.0


@pytest.fixture
def gated(clock: rk.ManualClock) -> rk.Limiter:
    """Two requests a minute and one in flight per key, on /api/."""
    return rk.Limiter(
        rules=[rk.Rule("^/api/", "api", limits=[rk.Limit("2/min"), rk.Limit(concurrency=1)])], clock=clock
    )


def test_delay_mode_counts_each_request_once(gated: rk.Limiter, clock: rk.ManualClock) -> None:
    app, _ = make_app(gated, marked=False, key=header("X-API-Key"), mode="delay", max_delay=60.0)
    with Served(app) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(3)] == [200] * 3
    assert clock.now() == 30.0  # the third waited for its slot
    api = gated.stats()["groups"]["api"]
    assert (api["requests"], api["allowed"], api["refused"], api["delayed"]) == (3, 3, 0, 1)


def test_delay_mode_refused_a_permit_spends_no_rate_slot(gated: rk.Limiter, clock: rk.ManualClock) -> None:
    app, _ = make_app(gated, marked=False, key=header("X-API-Key"), mode="delay", max_delay=60.0)
    with Served(app) as client:
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


def test_shadow_mode_refuses_nothing(limiter: rk.Limiter, marked: bool) -> None:
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"), shadow=True)
    with Served(app) as client:
        codes = [client.get("/api/items", headers=KEY).status_code for _ in range(5)]
    assert codes == [200] * 5
    assert limiter.stats()["groups"]["api"]["refused"] == 2


def test_permits_come_back_after_errors_and_streams(limiter: rk.Limiter, marked: bool) -> None:
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"))
    with Served(app) as client:
        for _ in range(3):
            assert client.get("/boom", headers=KEY).status_code == 500
        with client.stream("GET", "/stream", headers=KEY) as response:
            chunks = response.iter_bytes()
            next(chunks)
            held = client.get("/boom", headers=KEY)
            assert held.status_code == 429
            assert held.json()["detail"] == "Too many concurrent requests"
        # Closed midway: Werkzeug closes the response iterable, which gives the permit back.
        deadline = time.monotonic() + 5
        while client.get("/boom", headers=KEY).status_code == 429:
            assert time.monotonic() < deadline, "the permit of the abandoned stream was never released"
            time.sleep(0.05)


def test_refund_when_counts_only_failed_logins(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, key=header("X-API-Key"), refund_when=lambda status: status < 400)
    with Served(app) as client:
        assert [client.post("/login", headers=KEY).status_code for _ in range(5)] == [200] * 5


def test_legacy_fields_and_a_custom_refusal(limiter: rk.Limiter, marked: bool) -> None:
    def teapot(decision: rk.Decision) -> flask.Response:
        return flask.Response(f"slow down, {decision.group}", status=418)

    app, _ = make_app(
        limiter, marked=marked, key=header("X-API-Key"), headers=rk_headers(legacy=True), on_refused=teapot
    )
    with Served(app) as client:
        first = client.get("/api/items", headers=KEY)
        assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == ("3", "2")
        for _ in range(2):
            client.get("/api/items", headers=KEY)
        refused = client.get("/api/items", headers=KEY)
    assert (refused.status_code, refused.text) == (418, "slow down, api")


def rk_headers(**options: bool) -> Any:
    from ratekeeper._http import HeaderOptions

    return HeaderOptions(**options)


def test_the_extension_is_registered_and_checks_its_options(limiter: rk.Limiter) -> None:
    app, rate_limit = make_app(limiter)
    assert app.extensions["ratekeeper"] is rate_limit
    with pytest.raises(rk.InvalidValue) as error:
        RateLimit(limiter=limiter, mode="wait")  # type: ignore[arg-type]
    assert error.value.loc == ("mode",)


def test_a_view_that_raises_gives_its_permit_back_before_the_response_is_sent(
    limiter: rk.Limiter, marked: bool
) -> None:
    # Deterministic twin of the server test: the permit is free as soon as the 500 exists, so a client
    # that asks again the moment it has read it is not refused (the error page looks like a stream).
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"))
    client = app.test_client()
    for _ in range(3):
        assert client.get("/boom", headers=KEY).status_code == 500
        probe = limiter._acquire("alice", "/boom", take=_Take.BOTH)
        assert probe.allowed
        limiter._release("alice", "/boom")


def test_without_marks_a_refusal_is_answered_before_flask_routes_or_runs_the_apps_hooks(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, marked=False, key=header("X-API-Key"))
    seen: list[str] = []
    app.before_request(lambda: seen.append(flask.request.path) and None)
    with Served(app) as client:
        allowed = [client.get("/api/items", headers=KEY) for _ in range(3)]
        refused = client.get("/api/items", headers=KEY)
    assert [response.status_code for response in allowed] == [200, 200, 200]
    assert members(allowed[-1].headers["RateLimit"]) == {"api": {"r": 0, "t": 20}}
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 20}
    assert members(refused.headers["RateLimit-Policy"]) == {"api": {"q": 3, "w": 60}}
    assert seen == ["/api/items"] * 3  # the refusal never reached Flask
    head = app.test_client().head("/api/items", headers=KEY)
    assert (head.status_code, head.data, head.headers["Content-Type"]) == (429, b"", "application/json")


def test_without_marks_refund_when_gives_successful_requests_back(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, marked=False, key=header("X-API-Key"), refund_when=lambda status: status < 400)
    with Served(app) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(6)] == [200] * 6
        assert [client.get("/api/missing", headers=KEY).status_code for _ in range(4)] == [404, 404, 404, 429]


def test_a_view_raising_through_flask_gives_its_permit_back(limiter: rk.Limiter, marked: bool) -> None:
    # app.testing: Flask re-raises the view's exception instead of serving a 500.
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"))
    app.testing = True
    client = app.test_client()
    for _ in range(3):
        with pytest.raises(RuntimeError, match="the view failed"):
            client.get("/boom", headers=KEY)
        probe = limiter._acquire("alice", "/boom", take=_Take.BOTH)
        assert probe.allowed
        assert probe.permits_held
        limiter._release("alice", "/boom")


# --- the structure: a WSGI gate and view wrappers, no Flask hooks ----------------------------------------------


def hooks(app: flask.Flask) -> list[Any]:
    """Every request hook registered on ``app`` (and its blueprints)."""
    registries = (app.before_request_funcs, app.after_request_funcs, app.teardown_request_funcs)
    return [hook for registry in registries for functions in registry.values() for hook in functions]


def test_the_extension_registers_no_request_hooks(limiter: rk.Limiter, marked: bool) -> None:
    app, _ = make_app(limiter, marked=marked, key=header("X-API-Key"))
    with Served(app) as client:
        assert client.get("/api/items", headers=KEY).status_code == 200
        assert client.get("/api/missing", headers=KEY).status_code == 404
    assert hooks(app) == []


def test_a_marked_app_decides_unmarked_views_and_404s_by_path(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, key=header("X-API-Key"))  # marked: views decide, not the gate
    with Served(app) as client:
        items = client.get("/api/items", headers=KEY)
        missing = client.get("/api/missing", headers=KEY)  # no view: decided when its response starts
        assert (items.status_code, missing.status_code) == (200, 404)
        assert members(missing.headers["RateLimit"]) == {"api": {"r": 1, "t": 20}}
        assert client.get("/api/items", headers=KEY).status_code == 200
        refused = client.get("/api/missing", headers=KEY)
        assert client.get("/api/items", headers=KEY).status_code == 429
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 20}
    api = limiter.stats()["groups"]["api"]
    assert (api["allowed"], api["refused"]) == (3, 2)


def test_a_request_answered_by_the_apps_before_request_is_decided_by_its_views_mark(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, key=header("X-API-Key"))
    # An app hook answering before the view runs: the view's wrapper never sees the request.
    app.before_request(lambda: ("closed", 503) if flask.request.path == "/login" else None)
    with Served(app) as client:
        codes = [client.post("/login", headers=KEY).status_code for _ in range(3)]
        assert client.get("/api/items", headers=KEY).status_code == 200
    assert codes == [503, 503, 429]  # the login group's 2/min, not the path's rules
    group = next(name for name in limiter.stats()["groups"] if name.endswith("login"))
    assert limiter.stats()["groups"][group]["refused"] == 1


def test_view_wrappers_keep_the_views_name_docs_and_marks(limiter: rk.Limiter) -> None:
    app, rate_limit = make_app(limiter, key=header("X-API-Key"))

    @app.get("/documented")
    @rate_limit.limit("5/min", group="documented")
    def documented() -> str:
        """What the view does."""
        return "documented"

    original = app.view_functions["documented"]
    with Served(app) as client:
        assert client.get("/documented", headers=KEY).status_code == 200
    wrapper = app.view_functions["documented"]
    assert wrapper is not original
    assert wrapper.__wrapped__ is original  # type: ignore[attr-defined]
    assert (wrapper.__name__, wrapper.__doc__) == ("documented", "What the view does.")
    assert [limit.name for limit in wrapper._ratekeeper_limits] == ["documented"]  # type: ignore[attr-defined]


def test_marks_in_either_decorator_order_and_blueprints_limited_after_registration(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/nothing-here$", "unused", "1/min")], clock=clock)  # only the marks limit
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=limiter, key=header("X-API-Key"))

    @rate_limit.limit("1/min")  # outside the route: the function Flask registered carries the mark
    @app.get("/outer")
    def outer() -> str:
        return "outer"

    bp = flask.Blueprint("reports", __name__, url_prefix="/reports")

    @bp.get("/daily")
    def daily() -> str:
        return "daily"

    app.register_blueprint(bp)
    rate_limit.limit_blueprint(bp, "1/min")  # after registering: the views are wrapped at the first request
    with Served(app) as client:
        assert [client.get("/outer", headers=KEY).status_code for _ in range(2)] == [200, 429]
        assert [client.get("/reports/daily", headers=KEY).status_code for _ in range(2)] == [200, 429]


def test_a_mark_added_after_the_first_request_is_honoured(limiter: rk.Limiter) -> None:
    app, rate_limit = make_app(limiter, marked=False, key=header("X-API-Key"))
    with Served(app) as client:
        assert client.get("/api/items", headers=KEY).status_code == 200  # decided at the gate
        rate_limit.exempt(app.view_functions["items"])
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(5)] == [200] * 5
    assert limiter.stats()["groups"]["api"]["requests"] == 1


def test_key_callables_and_costs_are_given_flask_request_for_views_and_404s(limiter: rk.Limiter) -> None:
    seen: list[str] = []

    def key(request: flask.Request) -> str | None:
        seen.append(request.path)
        return request.headers.get("X-API-Key")

    app, _ = make_app(limiter, marked=False, key=key, cost=lambda request: 2 if request.path == "/api/items" else 1)
    with Served(app) as client:
        assert client.get("/api/items", headers=KEY).status_code == 200  # 2 of 3
        assert client.get("/api/missing", headers=KEY).status_code == 404  # 1 of 3
        assert client.get("/api/missing", headers=KEY).status_code == 429
    assert seen == ["/api/items", "/api/missing", "/api/missing"]


def test_an_async_view_stays_async_and_is_limited(limiter: rk.Limiter) -> None:
    pytest.importorskip("asgiref")  # Flask runs async views through it
    app, rate_limit = make_app(limiter, key=header("X-API-Key"))

    @app.get("/slow")
    @rate_limit.limit("1/min")
    async def slow() -> str:
        return "slow"

    with Served(app) as client:
        assert [client.get("/slow", headers=KEY).status_code for _ in range(2)] == [200, 429]
    assert inspect.iscoroutinefunction(app.view_functions["slow"])


def test_a_streamed_view_of_a_marked_app_holds_its_permit_until_the_body_ends(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, key=header("X-API-Key"))
    client = app.test_client()
    response = client.get("/stream", headers=KEY, buffered=False)
    body = iter(response.response)
    next(body)
    assert client.get("/boom", headers=KEY).status_code == 429  # the stream's permit is held
    for _ in body:
        pass
    response.close()
    assert client.get("/boom", headers=KEY).status_code == 500  # given back: the view ran (and failed)


def test_an_app_with_a_429_handler_answers_refusals_itself_even_without_marks(limiter: rk.Limiter) -> None:
    app, _ = make_app(limiter, marked=False, key=header("X-API-Key"))
    app.register_error_handler(429, lambda error: ({"later": error.description}, 429))
    with Served(app) as client:
        assert [client.get("/api/items", headers=KEY).status_code for _ in range(3)] == [200, 200, 200]
        refused = client.get("/api/items", headers=KEY)
        missing = client.get("/api/nothing-here", headers={"X-API-Key": "bob"})
    assert (refused.status_code, refused.json()) == (429, {"later": "Rate limit exceeded"})
    assert refused.headers["Retry-After"] == "20"  # the fields added to the app's own answer
    assert members(refused.headers["RateLimit"]) == {"api": {"r": 0, "t": 20}}
    assert missing.status_code == 404


def test_a_bad_option_names_its_field(limiter: rk.Limiter) -> None:
    with pytest.raises(rk.InvalidValue) as error:
        RateLimit(limiter=limiter, algorithm="fixed")  # type: ignore[arg-type]
    assert error.value.loc == ("algorithm",)
    with pytest.raises(rk.InvalidValue) as error:
        RateLimit(limiter=limiter, default_limits=["10 per fortnight"])
    assert error.value.loc[0] == "default_limits"
    rate_limit = RateLimit(limiter=limiter)
    with pytest.raises(rk.InvalidValue) as error:
        rate_limit.limit("5/min", cost=0)
    assert error.value.loc == ("cost",)
    with pytest.raises(rk.InvalidType) as error:
        rate_limit.limit("5/min", methods="POST")
    assert error.value.loc == ("methods",)


# --- decided in the view's wrapper, once Flask has routed: a key function, a view's own limit -------------------


class CountingErrors(flask.Flask):
    """A Flask app counting the exceptions its error handling is given."""

    handled = 0

    def handle_user_exception(self, e: Exception) -> Any:
        self.handled += 1
        return super().handle_user_exception(e)


def test_a_marked_views_refusal_is_the_json_429_with_its_fields_not_raised_through_flask(clock: rk.ManualClock) -> None:
    app = CountingErrors(__name__)
    rate_limit = RateLimit(app, limiter=rk.Limiter(rules=[], clock=clock), key=header("X-API-Key"))
    statuses: list[int] = []

    @app.get("/login")
    @rate_limit.limit("1/min", group="login")
    def login() -> str:
        return "in"

    @app.get("/quiet")
    @rate_limit.limit("1/min", group="quiet", error_message="Slow down")
    def quiet() -> str:
        return "quiet"

    @app.after_request
    def seen(response: flask.Response) -> flask.Response:
        statuses.append(response.status_code)  # the app's hooks still see the refusal
        return response

    client = app.test_client()
    assert client.get("/login", headers=KEY).status_code == 200
    refused = client.get("/login", headers=KEY)
    assert refused.status_code == 429
    assert refused.json == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 60}
    assert refused.headers["Content-Type"] == "application/json"
    assert refused.headers["Retry-After"] == "60"
    assert members(refused.headers["RateLimit-Policy"]) == {"login": {"q": 1, "w": 60}}
    assert members(refused.headers["RateLimit"]) == {"login": {"r": 0, "t": 60}}
    head = client.head("/login", headers=KEY)
    assert (head.status_code, head.data, head.headers["Retry-After"]) == (429, b"", "60")
    assert [client.get("/quiet", headers=KEY).status_code for _ in range(2)] == [200, 429]
    assert client.get("/quiet", headers=KEY).json["detail"] == "Slow down"  # error_message
    assert statuses == [200, 429, 429, 200, 429, 429]
    assert app.handled == 0  # answered by the view's wrapper: nothing raised through Flask's error handling
    assert limiter_refused(rate_limit, "login") == 2


def limiter_refused(rate_limit: RateLimit, group: str) -> int:
    refused: int = rate_limit.limiter.stats()["groups"][group]["refused"]
    return refused


def test_a_marked_views_refusal_still_reaches_the_apps_429_handler_or_a_trap(clock: rk.ManualClock) -> None:
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=rk.Limiter(rules=[], clock=clock), key=header("X-API-Key"))

    @app.get("/login")
    @rate_limit.limit("1/min", group="login")
    def login() -> str:
        return "in"

    @app.errorhandler(429)
    def too_many(error: RateLimitExceeded) -> tuple[dict[str, object], int]:
        return {"later": error.description, "in": round(error.decision.retry_after)}, 429

    client = app.test_client()
    assert client.get("/login", headers=KEY).status_code == 200
    refused = client.get("/login", headers=KEY)
    assert (refused.status_code, refused.json) == (429, {"later": "Rate limit exceeded", "in": 60})
    assert refused.headers["Retry-After"] == "60"  # the fields added to the handler's answer
    assert members(refused.headers["RateLimit"]) == {"login": {"r": 0, "t": 60}}

    trapping = flask.Flask(__name__)
    trapping.config.update(TRAP_HTTP_EXCEPTIONS=True, TESTING=True)  # HTTP errors raised, not answered
    trap_limit = RateLimit(trapping, limiter=rk.Limiter(rules=[], clock=clock), key=header("X-API-Key"))
    trapping.get("/login")(trap_limit.limit("1/min", group="login")(lambda: "in"))
    client = trapping.test_client()
    assert client.get("/login", headers=KEY).status_code == 200
    with pytest.raises(RateLimitExceeded) as error:
        client.get("/login", headers=KEY)
    assert error.value.decision.group == "login"


def test_a_key_function_sees_the_routed_request_once_per_request(clock: rk.ManualClock) -> None:
    seen: list[tuple[str | None, dict[str, Any], str]] = []

    def key(request: flask.Request) -> str | None:
        assert request is flask.request._get_current_object()  # type: ignore[attr-defined]
        assert request.url_rule is not None
        seen.append((request.endpoint, dict(request.view_args or {}), request.url_rule.rule))
        return request.headers.get("X-API-Key")

    limiter = rk.Limiter(rules=[rk.Rule("^/items/", "items", "2/min")], clock=clock)
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=limiter, key=key)

    @app.get("/items/<int:number>")
    def item(number: int) -> str:
        return str(number)

    @app.get("/orders/<int:number>")
    @rate_limit.limit("1/min", group="orders")
    def order(number: int) -> str:
        return str(number)

    client = app.test_client()
    items = [client.get(f"/items/{number}", headers=KEY) for number in (1, 2, 3)]
    assert [response.status_code for response in items] == [200, 200, 429]
    assert [members(response.headers["RateLimit"])["items"]["r"] for response in items] == [1, 0, 0]
    assert [client.get(f"/orders/{number}", headers=KEY).status_code for number in (7, 8)] == [200, 429]
    assert client.get("/items/4").status_code == 429  # no key: on_missing_key, as before
    assert seen == [
        ("item", {"number": 1}, "/items/<int:number>"),
        ("item", {"number": 2}, "/items/<int:number>"),
        ("item", {"number": 3}, "/items/<int:number>"),
        ("order", {"number": 7}, "/orders/<int:number>"),
        ("order", {"number": 8}, "/orders/<int:number>"),
        ("item", {"number": 4}, "/items/<int:number>"),
    ]


def test_a_limited_helper_refusing_gives_back_what_the_view_counted(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "3/min")], clock=clock)
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=limiter, key=lambda request: request.headers.get("X-API-Key"))

    @rate_limit.limit("1/min", group="helper")
    def helper() -> str:
        return "helped"

    @app.get("/api/work")
    def work() -> str:
        return helper()

    client = app.test_client()
    first = client.get("/api/work", headers=KEY)
    assert (first.status_code, members(first.headers["RateLimit"])["api"]["r"]) == (200, 2)
    refused = client.get("/api/work", headers=KEY)  # the path allowed it, the helper refused it
    assert refused.status_code == 429
    assert members(refused.headers["RateLimit"]) == {"helper": {"r": 0, "t": 60}}
    assert limiter.peek("alice", "/api/work").remaining == 2  # the refused request counts in no limit


def test_a_limited_helper_refusing_gives_back_what_the_views_own_limit_counted(clock: rk.ManualClock) -> None:
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=rk.Limiter(rules=[], clock=clock), key=lambda request: "alice")

    @rate_limit.limit("1/min", group="helper")
    def helper() -> str:
        return "helped"

    @app.get("/work")
    @rate_limit.limit("9/min", group="work", cost=lambda request: 2)
    def work() -> str:
        return helper()

    client = app.test_client()
    first = client.get("/work")
    assert (first.status_code, members(first.headers["RateLimit"])["work"]["r"]) == (200, 7)
    refused = client.get("/work")  # the view's own limit allowed it (costing 2), the helper refused it
    assert refused.status_code == 429
    assert members(refused.headers["RateLimit"]) == {"helper": {"r": 0, "t": 60}}
    assert rate_limit.limiter.peek("alice", group="work").remaining == 7  # the refused request counts in no limit


def test_views_wrapped_for_a_paths_permits_leave_the_gates_decisions_be(clock: rk.ManualClock) -> None:
    rules = [rk.Rule("^/rated$", "rated", "5/min"), rk.Rule("^/held$", "held", limits=[rk.Limit(concurrency=2)])]
    app = flask.Flask(__name__)
    RateLimit(app, limiter=rk.Limiter(rules=rules, clock=clock), key=header("X-API-Key"))
    app.get("/rated", endpoint="rated")(lambda: "rated")
    app.get("/held", endpoint="held")(lambda: "held")
    client = app.test_client()
    assert client.get("/held", headers=KEY).status_code == 200  # its permit: the views are wrapped to give it back
    codes = [client.get("/rated", headers=KEY).status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]  # each request counted once, by the gate (not again by its view)


def test_a_limit_under_another_decorator_is_decided_after_it(clock: rk.ManualClock) -> None:
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=rk.Limiter(rules=[], clock=clock), key=header("X-API-Key"))

    def with_rate(view: Any) -> Any:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            flask.g.rate = "1/min"
            return view(*args, **kwargs)

        return wrapper

    @app.get("/report")
    @rate_limit.limit("10/min", group="outer")
    @with_rate
    @rate_limit.limit(lambda: flask.g.rate, group="inner")
    def report() -> str:
        return "report"

    client = app.test_client()
    assert [client.get("/report", headers=KEY).status_code for _ in range(2)] == [200, 429]
    groups = rate_limit.limiter.stats()["groups"]
    assert (groups["outer"]["allowed"], groups["inner[1/min]"]["refused"]) == (2, 1)


def quiet_app(clock: rk.ManualClock, **options: Any) -> tuple[flask.Flask, RateLimit]:
    """An app with nothing of its own running after a view (no after_request or teardown function): a view's
    refusal may be answered by the gate."""
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=rk.Limiter(rules=[], clock=clock), **options)

    @app.get("/login")
    @rate_limit.limit("1/min", group="login")
    def login() -> str:
        return "in"

    @app.get("/quiet")
    @rate_limit.limit("1/min", group="quiet", error_message=lambda request: f"Slow down, {request.path}")
    def quiet() -> str:
        return "quiet"

    return app, rate_limit


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The statuses the gate answered for a view's wrapper (refusals that skipped Flask's response)."""
    from ratekeeper import flask as extension

    statuses: list[int] = []
    init = extension._Answered.__init__

    def counting(self: Any, admission: Any, body: bytes) -> None:
        statuses.append(admission.status)
        init(self, admission, body)

    monkeypatch.setattr(extension._Answered, "__init__", counting)
    return statuses


def test_in_a_quiet_app_the_gate_answers_a_views_refusal_with_the_same_429(
    clock: rk.ManualClock, answered: list[int]
) -> None:
    app, _ = quiet_app(clock, key=header("X-API-Key"), missing_key_status=401)
    torn_down: list[str] = []
    flask.appcontext_popped.connect(lambda sender, **extra: torn_down.append("popped"), app, weak=False)
    client = app.test_client()
    assert client.get("/login", headers=KEY).status_code == 200
    refused = client.get("/login", headers=KEY)
    assert refused.status_code == 429
    assert refused.json == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 60}
    assert refused.headers["Content-Type"] == "application/json"
    assert refused.headers["Content-Length"] == str(len(refused.data))
    assert refused.headers["Retry-After"] == "60"
    assert members(refused.headers["RateLimit-Policy"]) == {"login": {"q": 1, "w": 60}}
    assert members(refused.headers["RateLimit"]) == {"login": {"r": 0, "t": 60}}
    head = client.head("/login", headers=KEY)
    assert (head.status_code, head.data, head.headers["Retry-After"]) == (429, b"", "60")
    assert [client.get("/quiet", headers=KEY).status_code for _ in range(2)] == [200, 429]
    assert client.get("/quiet", headers=KEY).json["detail"] == "Slow down, /quiet"  # error_message, of the request
    assert answered == [429, 429, 429, 429]
    assert torn_down == ["popped"] * 6  # each request's context is torn down, refused or not
    missing = client.get("/login")  # no key: the missing key's answer, by the gate too
    assert (missing.status_code, missing.json["status"], answered[-1]) == (401, 401, 401)


def test_a_views_refusal_goes_through_flask_when_the_app_or_the_request_has_work_after_it(
    clock: rk.ManualClock, answered: list[int]
) -> None:
    app, _ = quiet_app(clock, key=header("X-API-Key"))
    app.secret_key = "testing"
    torn_down: list[BaseException | None] = []
    finished: list[int] = []

    @app.before_request
    def before() -> None:
        if flask.request.args.get("later"):
            flask.after_this_request(lambda response: response.headers.set("X-Later", "1") or response)
        if flask.request.args.get("session"):
            flask.session["seen"] = True

    client = app.test_client()
    assert client.get("/login", headers=KEY).status_code == 200
    later = client.get("/login?later=1", headers=KEY)
    assert (later.status_code, later.headers["X-Later"]) == (429, "1")  # after_this_request saw the refusal
    saved = client.get("/login?session=1", headers=KEY)
    assert saved.status_code == 429
    assert "session=" in saved.headers["Set-Cookie"]  # the session the request changed is saved with it

    def on_finished(sender: flask.Flask, response: flask.Response, **extra: Any) -> None:
        finished.append(response.status_code)

    flask.request_finished.connect(on_finished, app)
    assert client.get("/login", headers=KEY).status_code == 429
    flask.request_finished.disconnect(on_finished, app)
    assert finished == [429]
    assert answered == []  # none of them was answered by the gate

    hooked, _ = quiet_app(clock, key=header("X-API-Key"))
    hooked.teardown_request(torn_down.append)
    client = hooked.test_client()
    assert [client.get("/login", headers=KEY).status_code for _ in range(2)] == [200, 429]
    assert torn_down == [None, None]  # a teardown function never sees an error for a refusal
    assert answered == []


def test_several_limits_of_a_view_keep_their_fields_and_a_refusal_gives_back_the_others(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/report", "reports", "50/min")], clock=clock)
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=limiter, key=header("X-API-Key"), application_limits=["100/hour"])

    @app.route("/report", methods=["GET", "POST"])
    @rate_limit.limit("2/hour", group="hourly")
    @rate_limit.limit("5/min", group="minutely")
    @rate_limit.limit("1/min", group="posts", methods=["POST"])
    def report() -> str:
        return "report"

    @app.get("/free")
    @rate_limit.exempt
    def free() -> str:
        return "free"

    client = app.test_client()
    first = client.get("/report", headers=KEY)
    assert first.status_code == 200
    assert members(first.headers["RateLimit"]) == {"minutely": {"r": 4, "t": 12}}  # its own, the shortest window
    assert client.get("/report", headers=KEY).status_code == 200
    refused = client.get("/report", headers=KEY)  # the hourly limit refuses
    assert (refused.status_code, members(refused.headers["RateLimit"])) == (429, {"hourly": {"r": 0, "t": 1800}})
    assert limiter.peek("alice", group="minutely").remaining == 3  # the refused request counted in none
    assert limiter.peek("alice", group="flask:application").remaining == 98
    assert client.post("/report", headers={"X-API-Key": "bob"}).status_code == 200
    assert client.post("/report", headers={"X-API-Key": "bob"}).status_code == 429  # posts: 1/min, POST only
    free_response = client.get("/free", headers=KEY)
    assert free_response.status_code == 200
    assert "RateLimit" not in free_response.headers  # exempt: not even the application's limits
    assert limiter.peek("alice", group="flask:application").remaining == 98
