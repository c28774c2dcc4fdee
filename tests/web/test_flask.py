"""The Flask extension on a real WSGI server (Werkzeug's, threaded, on a free loopback port), via httpx."""

from __future__ import annotations

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
from ratekeeper.flask import RateLimit
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
    extension decides at its WSGI gate, before Flask routes; with marks it decides in ``before_request``."""
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


@pytest.fixture(params=[True, False], ids=["hooks", "gate"])
def marked(request: pytest.FixtureRequest) -> bool:
    """Whether the app has per-view marks: decided in before_request, or at the WSGI gate."""
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
