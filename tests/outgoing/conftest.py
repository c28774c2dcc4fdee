"""Fixtures of the outgoing-calls tests: rate-limited APIs served by uvicorn on free loopback ports."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _api import LimitedApi
from _web import Server


class Served:
    """A running ``LimitedApi`` and its base URL."""

    def __init__(self, api: LimitedApi, port: int) -> None:
        self.api, self.url = api, f"http://127.0.0.1:{port}"


ServeApi = Callable[..., Served]


@pytest.fixture
def serve_api() -> Iterator[ServeApi]:
    """``serve_api(dialect, limit, window, tokens=None)``: a ``LimitedApi`` on uvicorn until the test ends."""
    with contextlib.ExitStack() as stack:

        def serve(dialect: str, limit: int, window: float, **options: Any) -> Served:
            api = LimitedApi(dialect, limit, window, **options)
            server = Server(api)
            stack.enter_context(server)
            return Served(api, server.port)

        yield serve
