"""In-process clients for the slowapi compatibility tests: an ASGI app driven by httpx on an event loop of
the test's own (no server, no thread), so a ManualClock decides every wait."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class InProcess:
    """A synchronous client of ``app``, as slowapi's tests use Starlette's TestClient; the requests come
    from ``client`` (address, port)."""

    def __init__(self, app: Any, client: tuple[str, int] = ("127.0.0.1", 123)) -> None:
        self.loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app, client=client)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://testserver")

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.loop.run_until_complete(self.client.get(path, **options))

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
