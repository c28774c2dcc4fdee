"""Options every web integration shares (they live in ``ratekeeper._http``): a penalty for repeated
breaches, a log record per refusal, and ``X-RateLimit-Reset`` as a Unix time.

Driven through the ASGI middleware (on uvicorn) and the Flask extension (its test client): both decide
through the one Gatekeeper.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import flask
import pytest
import ratekeeper as rk
from _support import MakeLimiter
from _web import Server
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.flask import RateLimit
from ratekeeper.keys import client_ip, header
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

KEY = {"X-API-Key": "alice"}


def asgi_app(limiter: rk.Limiter, **options: Any) -> Starlette:
    app = Starlette(routes=[Route("/api/items", lambda request: PlainTextResponse("items"))])
    app.add_middleware(RateLimitMiddleware, limiter=limiter, key=header("X-API-Key"), **options)
    return app


def flask_client(limiter: rk.Limiter, **options: Any) -> Any:
    app = flask.Flask(__name__)
    app.add_url_rule("/api/items", "items", lambda: "items")
    RateLimit(app, limiter=limiter, key=header("X-API-Key"), **options)
    return app.test_client()


@pytest.fixture
def servers() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture
def asgi_client(servers: contextlib.ExitStack) -> Callable[..., Any]:
    """``asgi_client(limiter, **options)``: an httpx client of the middleware on a uvicorn of its own."""

    def serve(limiter: rk.Limiter, **options: Any) -> Any:
        return servers.enter_context(Server(asgi_app(limiter, **options)))

    return serve


@pytest.fixture(params=["asgi", "flask"])
def client_of(request: pytest.FixtureRequest) -> Callable[..., Any]:
    if request.param == "flask":
        return flask_client
    serve: Callable[..., Any] = request.getfixturevalue("asgi_client")
    return serve


def statuses(client: Any, n: int, headers: dict[str, str] = KEY) -> list[int]:
    return [client.get("/api/items", headers=headers).status_code for _ in range(n)]


def test_a_key_that_keeps_breaching_is_blocked_then_let_back(make_limiter: MakeLimiter, client_of: Any) -> None:
    clock = rk.ManualClock()
    limiter = make_limiter(rules=[rk.Rule("^/api/", "api", "2/min")], clock=clock)
    client = client_of(limiter, penalty=rk.Penalty(breaches=3, within=60, block=600))
    assert statuses(client, 5) == [200, 200, 429, 429, 429]  # the third refusal earns the block
    clock.advance(60)  # the rate would admit again ...
    blocked = client.get("/api/items", headers=KEY)
    assert blocked.status_code == 429  # ... but the key serves its penalty
    assert int(blocked.headers["Retry-After"]) == 540
    assert statuses(client, 1, {"X-API-Key": "bob"}) == [200]  # others are not touched
    clock.advance(540)
    assert statuses(client, 2) == [200, 200]


def test_breaches_spread_wider_than_the_window_earn_nothing(client_of: Any) -> None:
    clock = rk.ManualClock()
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "1/min")], clock=clock)
    client = client_of(limiter, penalty=rk.Penalty(breaches=2, within=30, block=600))
    for _ in range(4):
        assert statuses(client, 2) == [200, 429]  # one refusal a minute: never two within 30 s
        clock.advance(60)


def test_a_blocked_key_spends_nothing_and_counts_no_breach(client_of: Any) -> None:
    clock = rk.ManualClock()
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "2/min")], clock=clock)
    client = client_of(limiter, penalty=rk.Penalty(breaches=1, within=10, block=30))
    assert statuses(client, 3) == [200, 200, 429]
    assert statuses(client, 5) == [429] * 5
    assert limiter.stats()["groups"]["api"]["refused"] == 1  # the block decided the rest, not the rate
    clock.advance(30)
    assert statuses(client, 1) == [200]  # the rate's own window passed meanwhile


def test_a_penalty_holds_across_processes_sharing_a_region(tmp_path: Any, client_of: Any) -> None:
    clock = rk.ManualClock()
    rules = [rk.Rule("^/api/", "api", "2/min")]
    path = tmp_path / "region"
    first = rk.Limiter(rules=rules, clock=clock, backend=rk.Shared(path=path))
    second = rk.Limiter(rules=rules, clock=clock, backend=rk.Shared(path=path))
    penalty = rk.Penalty(breaches=2, within=60, block=300)
    one, two = client_of(first, penalty=penalty), client_of(second, penalty=penalty)
    assert statuses(one, 4) == [200, 200, 429, 429]  # blocked on the first worker ...
    clock.advance(120)
    assert statuses(two, 1) == [429]  # ... is blocked on the second


def test_bad_penalties_are_named() -> None:
    with pytest.raises(rk.InvalidValue, match=r"penalty.breaches: must be at least 1, got 0"):
        rk.Penalty(breaches=0)
    with pytest.raises(rk.InvalidValue, match=r"penalty.block: must be a positive number of seconds"):
        rk.Penalty(block=-1)
    with pytest.raises(rk.InvalidType, match=r"penalty.within: must be a number of seconds, got str"):
        rk.Penalty(within="60")  # type: ignore[arg-type]
    with pytest.raises(rk.InvalidType, match=r"penalty: must be a ratekeeper.Penalty or None, got dict"):
        RateLimitMiddleware(Starlette(), limiter=rk.Limiter("1/s"), penalty={"breaches": 3})  # type: ignore[arg-type]
    with pytest.raises(rk.InvalidType, match=r"penalty: must be a ratekeeper.Penalty or None, got dict"):
        flask_client(rk.Limiter("1/s"), penalty={"breaches": 3})


def test_each_refusal_is_logged_when_asked(client_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "1/min")], clock=rk.ManualClock())
    client = client_of(limiter, log_refusals=True)
    with caplog.at_level(logging.WARNING, logger="ratekeeper.refusals"):
        assert statuses(client, 3) == [200, 429, 429]
    records = [r for r in caplog.records if r.name == "ratekeeper.refusals"]
    assert len(records) == 2
    assert records[0].getMessage() == "ratekeeper: refused 'alice' on /api/items (group 'api'), retry after 60.000s"
    assert (records[0].peer, records[0].group, records[0].path) == ("alice", "api", "/api/items")  # type: ignore[attr-defined]
    assert records[0].retry_after == pytest.approx(60.0)  # type: ignore[attr-defined]


def test_refusals_are_not_logged_by_default(client_of: Any, caplog: pytest.LogCaptureFixture) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "1/min")], clock=rk.ManualClock())
    client = client_of(limiter)
    with caplog.at_level(logging.DEBUG, logger="ratekeeper"):
        assert statuses(client, 3) == [200, 429, 429]
    assert not [r for r in caplog.records if r.name == "ratekeeper.refusals"]


@pytest.mark.parametrize("reset", ["seconds", "epoch"])
def test_the_legacy_reset_field_is_seconds_or_a_unix_time(client_of: Any, reset: str) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "2/min")], clock=rk.ManualClock())
    client = client_of(limiter, headers=rk.HeaderOptions(legacy=True, reset=reset))  # type: ignore[arg-type]
    before = int(time.time())
    answers = [client.get("/api/items", headers=KEY) for _ in range(3)]
    after = int(time.time())
    resets = [int(answer.headers["X-RateLimit-Reset"]) for answer in answers]
    seconds = [30, 30, 30]  # from now: when the next request passes (GCRA frees one of 2/min every 30 s)
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    if reset == "seconds":
        assert resets == seconds
    else:
        for value, wait in zip(resets, seconds, strict=True):
            assert before + wait <= value <= after + wait
    assert answers[2].headers["Retry-After"] == "30"  # Retry-After stays in seconds, as HTTP says


def test_an_unknown_reset_form_is_refused() -> None:
    with pytest.raises(rk.InvalidValue, match=r"reset: must be 'seconds' or 'epoch', got 'date'"):
        rk.HeaderOptions(legacy=True, reset="date")  # type: ignore[arg-type]


def test_retry_after_may_be_an_http_date(client_of: Any) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "1/min")], clock=rk.ManualClock())
    client = client_of(limiter, headers=rk.HeaderOptions(retry_after="http-date"))
    before = time.time()
    assert statuses(client, 1) == [200]
    refused = client.get("/api/items", headers=KEY)
    after = time.time()
    assert refused.status_code == 429
    when = email.utils.parsedate_to_datetime(refused.headers["Retry-After"]).timestamp()
    assert int(before) + 60 <= when <= after + 60
    assert "r=0;t=60" in refused.headers["RateLimit"]  # the IETF fields stay in seconds


def test_an_unknown_retry_after_form_is_refused() -> None:
    with pytest.raises(rk.InvalidValue, match=r"retry_after: must be 'seconds' or 'http-date', got 'date'"):
        rk.HeaderOptions(retry_after="date")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "match"),
    [
        (client_ip, r"key: client_ip makes the key function: call it, client_ip\(\)"),
        (header, r"key: header makes the key function: call it with the header's name, header\('X-API-Key'\)"),
        ("X-API-Key", r"key: must be a callable of the request, got the str 'X-API-Key'; for a header: header"),
        (42, r"key: must be a callable of the request, got int"),
    ],
)
def test_a_key_of_the_wrong_shape_is_refused_where_it_is_given(key: object, match: str) -> None:
    limiter = rk.Limiter("1/s")
    with pytest.raises(rk.InvalidType, match=match):
        RateLimitMiddleware(Starlette(), limiter=limiter, key=key)  # type: ignore[arg-type]
    with pytest.raises(rk.InvalidType, match=match):
        RateLimit(flask.Flask(__name__), limiter=limiter, key=key)  # type: ignore[arg-type]
    from fastapi import FastAPI
    from ratekeeper.fastapi import RouteLimits

    with pytest.raises(rk.InvalidType, match=match.replace("the request,", "the request or Depends.dependency.,")):
        RouteLimits(FastAPI(), limiter=limiter).route("1/s", key=key)
