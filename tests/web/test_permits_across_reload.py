"""Concurrency permits taken by a request go back to the group that took them, even when ``reload()``
re-routes the request's path to another group, or removes the group, while the request holds them.

The request itself reloads the limiter (its handler or its streamed body calls ``reload``), so the reload
falls between the admission and the release on every run. Afterwards the group that took the permit has
it free again, the group the path now goes to was not given a permit it never lent, and the request got
no error. ASGI (every path of the middleware: the core's quick gate, the quick gate with a key read in
Python, the full path) and Flask/WSGI (at the gate, and in the view wrappers), plain and streamed bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import flask
import pytest
import ratekeeper as rk
from ratekeeper._core import _Take
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.flask import RateLimit
from ratekeeper.keys import client_ip, header

KEY = "192.0.2.1"  # a key and a forwarded address alike

BEFORE = """
[groups.slow]
paths = ["^/slow"]
limits = [{concurrency = 1}]
[groups.other]
paths = ["^/other"]
limits = [{concurrency = 1}]
"""

# /slow now goes to "other"; "slow" is still there, routed from elsewhere.
REROUTED = """
[groups.slow]
paths = ["^/elsewhere"]
limits = [{concurrency = 1}]
[groups.other]
paths = ["^/slow", "^/other"]
limits = [{concurrency = 1}]
"""

# "slow" is gone: its permits with it.
REMOVED = """
[groups.other]
paths = ["^/slow", "^/other"]
limits = [{concurrency = 1}]
"""


def free(limiter: rk.Limiter, group: str) -> bool:
    """Whether the key's permit of ``group`` is free (taken and given back to look)."""
    decision = limiter._acquire(KEY, group=group, take=_Take.BOTH)
    if decision.permits_held:
        limiter._release(KEY, group=group)
    return decision.allowed


class Reloading:
    """A limiter built from a file, and what the request does to it while holding its permit."""

    def __init__(self, tmp_path: Path, after: str) -> None:
        self.file = tmp_path / "ratekeeper.toml"
        self.file.write_text(BEFORE)
        self.limiter = rk.Limiter.from_file(self.file)
        self.after = after
        self.held: list[bool] = []  # whether "slow"'s permit was taken when the request reloaded

    def reload(self) -> None:
        self.held.append(not free(self.limiter, "slow"))
        self.file.write_text(self.after)
        self.limiter.reload(self.file)

    def check(self) -> None:
        assert self.held == [True]  # the request held the permit when the routes changed
        if "[groups.slow]" in self.after:
            assert free(self.limiter, "slow")  # given back to the group that took it
        else:
            assert "slow" not in self.limiter.groups
        assert free(self.limiter, "other")
        assert free(self.limiter, "other")  # and "other" was not lent a second permit it never gave


AFTER = pytest.mark.parametrize("after", [REROUTED, REMOVED], ids=["rerouted", "removed"])


# --- ASGI -------------------------------------------------------------------------------------------------------------

ASGI_PATHS: dict[str, dict[str, Any]] = {
    "core-quick-gate": {"key": header("X-Key")},  # the core reads the key from the scope
    "python-quick-gate": {"key": client_ip(trusted_proxies=["127.0.0.0/8"])},  # read in Python
    "full-path": {"key": header("X-Key"), "refund_when": lambda status: status >= 500},
}


def asgi_app(reloading: Reloading, streamed: bool) -> Callable[..., Any]:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if streamed:
            await send({"type": "http.response.body", "body": b"one", "more_body": True})
        reloading.reload()
        await send({"type": "http.response.body", "body": b"done"})

    return app


async def asgi_request(app: Callable[..., Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/slow",
        "headers": [(b"x-key", KEY.encode()), (b"x-forwarded-for", KEY.encode())],
        "client": ("127.0.0.1", 5000),
    }
    await app(scope, receive, send)
    return sent


@AFTER
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("options", list(ASGI_PATHS.values()), ids=list(ASGI_PATHS))
def test_asgi_gives_permits_back_to_the_group_that_took_them(
    tmp_path: Path, after: str, streamed: bool, options: dict[str, Any]
) -> None:
    reloading = Reloading(tmp_path, after)
    middleware = RateLimitMiddleware(asgi_app(reloading, streamed), limiter=reloading.limiter, **options)
    sent = asyncio.run(asgi_request(middleware))
    assert sent[0]["status"] == 200
    assert sent[-1]["body"] == b"done"
    reloading.check()


# --- Flask / WSGI -----------------------------------------------------------------------------------------------------


def flask_app(reloading: Reloading, streamed: bool, marked: bool) -> flask.Flask:
    app = flask.Flask(__name__)
    rate_limit = RateLimit(app, limiter=reloading.limiter, key=header("X-Key"))

    def chunks() -> Iterator[str]:
        yield "one"
        reloading.reload()
        yield "done"

    @app.get("/slow")
    def slow() -> Any:
        if streamed:
            return flask.Response(chunks())
        reloading.reload()
        return "done"

    if marked:

        @app.get("/marked")
        @rate_limit.limit("100/min")
        def marked_view() -> str:  # a mark: the view wrappers decide every request, /slow by path
            return "ok"

    return app


@AFTER
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("marked", [False, True], ids=["gate", "views"])
def test_flask_gives_permits_back_to_the_group_that_took_them(
    tmp_path: Path, after: str, streamed: bool, marked: bool
) -> None:
    reloading = Reloading(tmp_path, after)
    app = flask_app(reloading, streamed, marked)
    with app.test_client() as client:
        response = client.get("/slow", headers={"X-Key": KEY})
        assert response.status_code == 200
        assert response.get_data(as_text=True).endswith("done")
        response.close()
    reloading.check()
