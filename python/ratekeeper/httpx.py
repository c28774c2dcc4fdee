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

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

try:
    import httpx
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("ratekeeper.httpx needs httpx: pip install 'ratekeeper[httpx]'") from error

from ratekeeper._core import _HttpxSend
from ratekeeper._errors import InvalidType
from ratekeeper._outgoing import _NOT_SENT, Call, HostStats, Outgoing, Reply, engine_of, host_of
from ratekeeper.limiter import Limiter

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ratekeeper._outgoing import OutgoingOptions

_Send = Callable[[httpx.Request], httpx.Response]


def _not_sent(error: BaseException) -> bool:
    """No connection was made (refused, unresolved, timed out connecting): the request never left."""
    return isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))


_NOT_SENT.append(_not_sent)

__all__ = ["AsyncTransport", "Call", "HostStats", "Outgoing", "Reply", "Transport"]


def _place(url: httpx.URL) -> tuple[str, str]:
    """The call's host (with its port when not the scheme's default, which httpx leaves out) and path: read
    from the parts the URL keeps parsed (``URL._uri_reference``), which its properties would decode again,
    when there is nothing to decode (a path with escapes, or none: see ``_decoded_place``). The host is kept as
    it goes on the wire, an IDNA name in its ``xn--`` form, as every adapter keys it."""
    _, _, host, port, path, _, _ = url._uri_reference
    if "%" in path or not path:
        return _decoded_place(url)
    return (host if port is None else host_of(host, port, None)), path


def _decoded_place(url: httpx.URL) -> tuple[str, str]:
    """``_place`` from the URL's properties: its host as sent (``raw_host``), its path decoded."""
    return host_of(url.raw_host.decode("ascii"), url.port, None), url.path


# Whether httpx keeps a URL's parts as a 7-tuple (``httpx._urlparse.ParseResult``), which the core reads
# (``admit_parts``) and so does ``_place``; another httpx's URLs are read through their properties.
_PARTS = getattr(getattr(httpx.URL("http://a/"), "_uri_reference", None), "_fields", None) == (
    "scheme",
    "userinfo",
    "host",
    "port",
    "path",
    "query",
    "fragment",
)
if not _PARTS:  # pragma: no cover - another httpx
    _place = _decoded_place


def _call(request: httpx.Request) -> Call:
    try:
        content: bytes | None = request.content
    except httpx.RequestNotRead:
        content = None
    host, path = _place(request.url)
    return Call._lazy(request.method, host, path, request.headers.multi_items, content)


async def _acall(request: httpx.Request) -> Call:
    return _call(request)


# Whether httpx keeps its headers as ``Headers._list``, (raw name, lower-case name, value) bytes, which the core
# picks the rate-limit fields out of as they are (``Headers.raw`` would copy them).
_LIST = isinstance(getattr(httpx.Headers([("a", "b")]), "_list", None), list)


def _raw(response: httpx.Response) -> tuple[int, Any]:
    """The status and the headers as httpx keeps them, for the core to pick the rate-limit fields out of."""
    headers = response.headers
    return response.status_code, headers._list if _LIST else headers.raw


def _reply(response: httpx.Response) -> Reply:
    return Reply._lazy(response.status_code, response.headers, httpx.Headers.multi_items)


_READ, _CLOSE = httpx.Response.read, httpx.Response.close
_AREAD, _ACLOSE = httpx.Response.aread, httpx.Response.aclose


def _replayable(request: httpx.Request) -> bool:
    """Whether ``request`` can be sent again: its body is bytes (content, json, a form), not a stream or file
    httpx reads once (which a retry would send empty, or raise ``StreamConsumed`` for)."""
    return isinstance(request.stream, httpx.ByteStream)


def _handle(outgoing: Outgoing, send: _Send, request: httpx.Request) -> httpx.Response:
    """``Transport.handle_request``, written out: this is every call's path where the core's is not."""
    admit = outgoing._admit_parts
    if admit is not None:  # the short way (see Outgoing.__init__)
        url = request.url
        ticket = admit(url._uri_reference) if _PARTS else False
        if ticket is False:  # an escaped path: read here
            host, path = _place(url)
            ticket = outgoing._core.admit_heard(host, path)
        if ticket is not None:
            try:
                response = send(request)
            except BaseException as error:
                outgoing._failed(ticket, error)
                raise
            headers = response.headers
            settled = outgoing._core_settle(ticket, headers._list if _LIST else headers.raw, response.status_code)
            if settled is None:
                return response
            return _finished(outgoing, send, ticket, settled, response, request)
    return _long_way(outgoing, send, request)


def _long_way(outgoing: Outgoing, send: _Send, request: httpx.Request) -> httpx.Response:
    """A call that waits its turn, or the first to a host: ``Outgoing._send``."""
    return outgoing._send(_call(request), send, request, _raw, _reply, _READ, _CLOSE, replayable=_replayable)


def _finished(
    outgoing: Outgoing, send: _Send, ticket: Any, settled: Any, response: httpx.Response, request: httpx.Request
) -> httpx.Response:
    """A call sent the short way whose reply left work for Python: ``Outgoing._finish``."""
    return outgoing._finish(ticket, settled, response, _call, send, request, _raw, _reply, _READ, _CLOSE, _replayable)


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
        self,
        limiter: Limiter | Outgoing,
        *,
        inner: httpx.BaseTransport | None = None,
        **options: Unpack[OutgoingOptions],
    ) -> None:
        if inner is not None and not isinstance(inner, httpx.BaseTransport):
            raise InvalidType("inner", f"must be an httpx.BaseTransport, got {type(inner).__name__}")
        self._outgoing = engine_of(limiter, options)
        self.inner = inner if inner is not None else httpx.HTTPTransport()

    @property
    def outgoing(self) -> Outgoing:
        """The engine: the budgets, the options and the counters."""
        return self._outgoing

    @outgoing.setter
    def outgoing(self, outgoing: Outgoing) -> None:
        self._outgoing = outgoing
        self._make_short_way()

    @property
    def inner(self) -> httpx.BaseTransport:
        """The transport that sends the requests."""
        return self._inner

    @inner.setter
    def inner(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner
        self._make_short_way()

    def _make_short_way(self) -> None:
        """Every call's path: the core's `_HttpxSend`, set on the instance where httpx looks `handle_request`
        up, takes a call the short way in one call into the core, with no frame of Python's; what it cannot take
        goes to `_handle`, `_long_way` or `_finished`. Not for a subclass's own `handle_request`, an httpx whose
        URLs and headers are kept otherwise, or an engine with no short way. Made of the engine and the inner
        transport's method, not of this transport's methods: no reference cycle. Remade when either changes."""
        self.__dict__.pop("handle_request", None)
        outgoing, send = self._outgoing, self._inner.handle_request
        own = type(self).handle_request is Transport.handle_request
        if own and _PARTS and _LIST and outgoing._admit_parts is not None:
            self.__dict__["handle_request"] = _HttpxSend(
                outgoing._core,
                send,
                partial(_handle, outgoing, send),
                partial(_long_way, outgoing, send),
                partial(_finished, outgoing, send),
                outgoing._failed,
            ).handle_request

    def stats(self) -> dict[str, HostStats]:
        """[`Outgoing.stats`][ratekeeper.httpx.Outgoing.stats] of this transport's engine."""
        return self._outgoing.stats()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Sends ``request`` when its turn comes; retries a 429 as the options say."""
        return _handle(self._outgoing, self._inner.handle_request, request)

    def close(self) -> None:
        self._inner.close()


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
        self,
        limiter: Limiter | Outgoing,
        *,
        inner: httpx.AsyncBaseTransport | None = None,
        **options: Unpack[OutgoingOptions],
    ) -> None:
        if inner is not None and not isinstance(inner, httpx.AsyncBaseTransport):
            raise InvalidType("inner", f"must be an httpx.AsyncBaseTransport, got {type(inner).__name__}")
        self.outgoing = engine_of(limiter, options)
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    def stats(self) -> dict[str, HostStats]:
        """[`Outgoing.stats`][ratekeeper.httpx.Outgoing.stats] of this transport's engine."""
        return self.outgoing.stats()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Sends ``request`` when its turn comes; retries a 429 as the options say."""
        outgoing = self.outgoing
        admit = outgoing._aadmit_parts
        if admit is not None:  # as Transport's
            url = request.url
            ticket = admit(url._uri_reference) if _PARTS else False
            if ticket is False:
                host, path = _place(url)
                ticket = outgoing._core.admit_heard(host, path)
            if ticket is not None:
                try:
                    response = await self.inner.handle_async_request(request)
                except BaseException as error:
                    outgoing._failed(ticket, error)
                    raise
                headers = response.headers
                settled = outgoing._core_settle(ticket, headers._list if _LIST else headers.raw, response.status_code)
                if settled is None:
                    return response
                return await outgoing._afinish(
                    ticket, settled, response, _acall, self.inner.handle_async_request, request, _raw, _reply,
                    _AREAD, _ACLOSE, _replayable,
                )  # fmt: skip
        send = self.inner.handle_async_request
        return await outgoing._asend(
            _call(request), send, request, _raw, _reply, _AREAD, _ACLOSE, replayable=_replayable
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
