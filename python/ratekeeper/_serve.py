"""The per-account quota server over HTTP: ``python -m ratekeeper serve`` (needs ``pip install 'ratekeeper[serve]'``).

Every request to any path answers ``200 ok`` unless the limiter refuses it (429, JSON body, ``Retry-After``
and the IETF ``RateLimit`` fields). Requests are keyed by the ``X-Account-ID`` header; a request without
it is decided as ``ANONYMOUS``. Each account's quota comes from a provider (``AccountDirectory``,
the table in ``QUOTAS``), fetched off the request path by worker threads: until an account's
quota lands, or when the provider does not know it, the account runs on the failsafe quota (5/min).

========================  ======================================================================
``X-Account-ID``           what the limiter does
========================  ======================================================================
alice@example.com          1/min
bob@example.com            100/min
carol@example.com          1000/min
dave@example.com           10/s
(no header)                ``ANONYMOUS``: 10/min
invalid@example.com        the provider raises ``LookupError``: stays on the failsafe, 5/min
invalidN (new each time)   every id is new: the failsafe admits its first request (fail open)
admin@example.com          exempt: never limited (the experiment's control)
========================  ======================================================================

``benches/http_profiles.py`` runs wrk against this server, one profile per row, all at once.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ratekeeper._core import ManualClock, Quotas
from ratekeeper.limiter import Limiter

__all__ = [
    "ACCOUNT_HEADER",
    "ADMIN",
    "ANONYMOUS",
    "FAILSAFE",
    "METRICS_PATH",
    "QUOTAS",
    "AccountDirectory",
    "build_app",
    "serve",
]

ACCOUNT_HEADER = "X-Account-ID"
METRICS_PATH = "/metrics"
ANONYMOUS = "ANONYMOUS"
ADMIN = "admin@example.com"
FAILSAFE = "5/min"
# The catch-all rule's rate: what an account gets when the provider answers None (none does here).
DEFAULT_RATE = "60/min"
QUOTAS: dict[str, str] = {
    "alice@example.com": "1/min",
    "bob@example.com": "100/min",
    "carol@example.com": "1000/min",
    "dave@example.com": "10/s",
    ANONYMOUS: "10/min",
}
# The state map is bounded so that a flood of new ids cannot exhaust memory.
MAX_KEYS = 100_000

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class AccountDirectory:
    """The quota provider: a table lookup that raises ``LookupError`` for an unknown account.

    It counts its calls (thread-safe), so a caller can see how often quotas were fetched.
    """

    def __init__(self, quotas: dict[str, str] | None = None) -> None:
        self.quotas = dict(QUOTAS if quotas is None else quotas)
        self.calls = 0
        self.unknown = 0
        self._lock = threading.Lock()

    def __call__(self, peer: str, group: str) -> str:
        quota = self.quotas.get(peer)
        with self._lock:
            self.calls += 1
            if quota is None:
                self.unknown += 1
        if quota is None:
            raise LookupError(f"no such account: {peer!r}")
        return quota


def build_limiter(directory: AccountDirectory | None = None, *, clock: ManualClock | None = None) -> Limiter:
    """The server's limiter: one catch-all group, per-account quotas, ``admin`` exempt."""
    return Limiter(
        rate=DEFAULT_RATE,
        exempt_peers=[ADMIN],
        quotas=Quotas(AccountDirectory() if directory is None else directory, failsafe=FAILSAFE),
        max_keys=MAX_KEYS,
        clock=clock,
    )


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    """The served app: ``200 ok`` for every HTTP request; lifespan is acknowledged."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b"ok\n"
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(limiter: Limiter, *, metrics: bool = True) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app: ``_ok`` behind the rate-limit middleware, keyed by ``X-Account-ID``; with
    ``metrics`` and prometheus-client installed, ``GET /metrics`` (not limited) serves the limiter's
    Prometheus metrics through prometheus-client's own ASGI app."""
    from ratekeeper.asgi import RateLimitMiddleware
    from ratekeeper.keys import header

    limited = RateLimitMiddleware(
        _ok, limiter=limiter, key=header(ACCOUNT_HEADER), on_missing_key="anonymous", anonymous_key=ANONYMOUS
    )
    if not metrics:
        return limited
    try:
        from prometheus_client import CollectorRegistry, make_asgi_app
    except ImportError:
        return limited
    from ratekeeper.prometheus import RateLimitCollector

    registry = CollectorRegistry()
    registry.register(RateLimitCollector(limiter, top_refused=10))
    exposition = make_asgi_app(registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == METRICS_PATH:
            await exposition(scope, receive, send)
        else:
            await limited(scope, receive, send)

    return app


def serve(host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serves ``build_app`` on uvicorn until interrupted (Ctrl-C or SIGTERM)."""
    try:
        import uvicorn
    except ImportError as error:
        raise ImportError(
            "python -m ratekeeper serve needs uvicorn: pip install 'ratekeeper[serve]'"
            " (from a checkout: pip install '.[serve]')"
        ) from error
    with build_limiter() as limiter:
        config = uvicorn.Config(build_app(limiter), host=host, port=port, log_level="warning", access_log=False)
        server = uvicorn.Server(config)
        print(f"serving on http://{host}:{port}/ (keyed by {ACCOUNT_HEADER}; Ctrl-C stops)", flush=True)
        print(f"metrics on http://{host}:{port}{METRICS_PATH} (with prometheus-client installed)", flush=True)
        server.run()
