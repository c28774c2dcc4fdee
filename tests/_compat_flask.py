"""Helpers for the tests of Flask-Limiter's promises (``tests/compat/test_compat_flask_limiter*.py``).

Flask-Limiter's tests build an app with ``Limiter(get_remote_address, app=app, ...)`` and drive it with
Flask's test client on a frozen clock; ours build the same app with :class:`ratekeeper.flask.RateLimit`
on a :class:`ratekeeper.ManualClock`, in fixed windows (Flask-Limiter's default strategy).
"""

from __future__ import annotations

from typing import Any

import flask
import ratekeeper as rk
from ratekeeper.flask import RateLimit


def test_ip(request: flask.Request) -> str:
    """Flask-Limiter's tests' ``get_ip_from_header``: the ``Test-IP`` header, else 127.0.0.1."""
    return request.headers.get("Test-IP") or "127.0.0.1"


test_ip.__test__ = False  # type: ignore[attr-defined]  # a key function, not a test


def extension(
    clock: rk.ManualClock, *, algorithm: Any = "fixed_window", app: flask.Flask | None = None, **options: Any
) -> tuple[flask.Flask, RateLimit]:
    """An app and the extension deciding like Flask-Limiter (fixed windows), limited only by what the test
    declares (the limiter has no path rules). The key is the client's address, as ``get_remote_address``."""
    app = app if app is not None else flask.Flask(__name__)
    limiter = rk.Limiter(rules=[], clock=clock)
    return app, RateLimit(app, limiter=limiter, algorithm=algorithm, **options)


def codes(client: Any, method: str, path: str, times: int, **kwargs: Any) -> list[int]:
    """The statuses of ``times`` requests (each response closed: a static file's holds it open)."""
    statuses = []
    for _ in range(times):
        response = client.open(path, method=method, **kwargs)
        statuses.append(response.status_code)
        response.close()
    return statuses
