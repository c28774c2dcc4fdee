"""httpx transports that pace outgoing calls and obey the servers' rate-limit fields.

    import httpx
    import ratekeeper as rk
    from ratekeeper.httpx import AsyncTransport

    lim = rk.Limiter(rules=[], backend=rk.Shared("myapp"))
    client = httpx.AsyncClient(transport=AsyncTransport(lim, api_key_header="authorization"))

Each call waits its turn in the budgets of its host (and API key), which the servers' ``RateLimit``,
``X-RateLimit-*``, GitHub, OpenAI and Anthropic fields cap after every response; a 429 is retried after the
wait the server asks for. See [`Outgoing`][ratekeeper.httpx.Outgoing] for the options. Needs httpx
(``pip install 'ratekeeper[httpx]'``).
"""

from __future__ import annotations

from typing import Any

try:
    import httpx
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("ratekeeper.httpx needs httpx: pip install 'ratekeeper[httpx]'") from error

from ratekeeper._outgoing import Call, HostStats, Outgoing, Reply, engine_of, host_of
from ratekeeper.limiter import Limiter

__all__ = ["AsyncTransport", "Call", "HostStats", "Outgoing", "Reply", "Transport"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _call(request: httpx.Request) -> Call:
    url = request.url
    try:
        content: bytes | None = request.content
    except httpx.RequestNotRead:
        content = None
    return Call._lazy(
        request.method,
        host_of(url.host, url.port, _DEFAULT_PORTS.get(url.scheme)),
        url.path,
        request.headers.multi_items,
        content,
    )


def _raw(response: httpx.Response) -> tuple[int, Any]:
    """The status and the headers as httpx keeps them, for the core to pick the rate-limit fields out of:
    ``Headers._list``, its (raw name, lower-case name, value) bytes, which ``Headers.raw`` would copy."""
    headers = response.headers
    return response.status_code, getattr(headers, "_list", None) or headers.raw


def _reply(response: httpx.Response) -> Reply:
    return Reply._lazy(response.status_code, response.headers, httpx.Headers.multi_items)


class Transport(httpx.BaseTransport):
    """An ``httpx.Client`` transport: ``httpx.Client(transport=Transport(lim))``.

    Args:
        limiter: the [`Limiter`][ratekeeper.Limiter] holding the budgets, or an
            [`Outgoing`][ratekeeper.httpx.Outgoing] shared with other transports (then no options).
        inner: the transport that sends the requests; default ``httpx.HTTPTransport()``.
        **options: [`Outgoing`][ratekeeper.httpx.Outgoing]'s options (``wait``, ``timeout``, ``retries``,
            ``groups``, ``cost``, ``spent``, ...).

    Raises:
        InvalidType, InvalidValue: a bad option, naming it.
        RateLimited: at a call, when its turn is further away than ``timeout`` (or ``wait=False``).
    """

    def __init__(
        self, limiter: Limiter | Outgoing, *, inner: httpx.BaseTransport | None = None, **options: Any
    ) -> None:
        self.outgoing = engine_of(limiter, options)
        self.inner = inner if inner is not None else httpx.HTTPTransport()

    def stats(self) -> dict[str, HostStats]:
        """[`Outgoing.stats`][ratekeeper.httpx.Outgoing.stats] of this transport's engine."""
        return self.outgoing.stats()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Sends ``request`` when its turn comes; retries a 429 as the options say."""
        return self.outgoing._send(
            _call(request), self.inner.handle_request, request, _raw, _reply, httpx.Response.read, httpx.Response.close
        )

    def close(self) -> None:
        self.inner.close()


class AsyncTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncClient`` transport: ``httpx.AsyncClient(transport=AsyncTransport(lim))``. A call
    awaits its turn with ``asyncio.sleep``, never blocking the event loop.

    Args:
        limiter: the [`Limiter`][ratekeeper.Limiter] holding the budgets, or an
            [`Outgoing`][ratekeeper.httpx.Outgoing] shared with other transports (then no options).
        inner: the transport that sends the requests; default ``httpx.AsyncHTTPTransport()``.
        **options: [`Outgoing`][ratekeeper.httpx.Outgoing]'s options.

    Raises:
        InvalidType, InvalidValue: a bad option, naming it.
        RateLimited: at a call, when its turn is further away than ``timeout`` (or ``wait=False``).
    """

    def __init__(
        self, limiter: Limiter | Outgoing, *, inner: httpx.AsyncBaseTransport | None = None, **options: Any
    ) -> None:
        self.outgoing = engine_of(limiter, options)
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    def stats(self) -> dict[str, HostStats]:
        """[`Outgoing.stats`][ratekeeper.httpx.Outgoing.stats] of this transport's engine."""
        return self.outgoing.stats()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Sends ``request`` when its turn comes; retries a 429 as the options say."""
        return await self.outgoing._asend(
            _call(request),
            self.inner.handle_async_request,
            request,
            _raw,
            _reply,
            httpx.Response.aread,
            httpx.Response.aclose,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
