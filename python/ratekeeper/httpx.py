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


def _place(url: httpx.URL) -> tuple[str, str]:
    """The call's host (with its port when not the scheme's default) and path: read from the parts the URL keeps
    parsed (``URL._uri_reference``), which its properties would decode again, when there is nothing to decode."""
    parts = getattr(url, "_uri_reference", None)
    if parts is None:  # pragma: no cover - another httpx
        return host_of(url.host, url.port, _DEFAULT_PORTS.get(url.scheme)), url.path
    host, port, path = parts.host, parts.port, parts.path
    if host.startswith("xn--"):
        host = url.host  # IDNA, decoded
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{port}"
    return host, path if path and "%" not in path else url.path


def _call(request: httpx.Request) -> Call:
    try:
        content: bytes | None = request.content
    except httpx.RequestNotRead:
        content = None
    host, path = _place(request.url)
    return Call._lazy(request.method, host, path, request.headers.multi_items, content)


async def _acall(request: httpx.Request) -> Call:
    return _call(request)


def _raw(response: httpx.Response) -> tuple[int, Any]:
    """The status and the headers as httpx keeps them, for the core to pick the rate-limit fields out of:
    ``Headers._list``, its (raw name, lower-case name, value) bytes, which ``Headers.raw`` would copy."""
    headers = response.headers
    return response.status_code, getattr(headers, "_list", None) or headers.raw


def _reply(response: httpx.Response) -> Reply:
    return Reply._lazy(response.status_code, response.headers, httpx.Headers.multi_items)


_READ, _CLOSE = httpx.Response.read, httpx.Response.close
_AREAD, _ACLOSE = httpx.Response.aread, httpx.Response.aclose


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
        outgoing = self.outgoing
        if outgoing._fast:
            host, path = _place(request.url)
            send = self.inner.handle_request
            return outgoing._send_fast(host, path, _call, send, request, _raw, _reply, _READ, _CLOSE)
        return outgoing._send(_call(request), self.inner.handle_request, request, _raw, _reply, _READ, _CLOSE)

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
        outgoing = self.outgoing
        send = self.inner.handle_async_request
        if outgoing._afast:
            ticket = outgoing._admitted(*_place(request.url))
            if ticket is not None:
                response = await send(request)
                status, headers = _raw(response)
                settled = outgoing._core_settle(ticket, headers, status)
                if settled is None:
                    return response
                return await outgoing._afinish(
                    ticket, settled, response, _acall, send, request, _raw, _reply, _AREAD, _ACLOSE
                )
        return await outgoing._asend(_call(request), send, request, _raw, _reply, _AREAD, _ACLOSE)

    async def aclose(self) -> None:
        await self.inner.aclose()
