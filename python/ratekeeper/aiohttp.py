"""An aiohttp client middleware that paces outgoing calls and obeys the servers' rate-limit fields.

    import aiohttp
    import ratekeeper as rk
    from ratekeeper.aiohttp import Middleware

    pace = Middleware(rk.Limiter(rules=[]), api_key_header="authorization")
    async with aiohttp.ClientSession(middlewares=(pace,)) as session: ...

Each call awaits its turn (``asyncio.sleep``, never blocking the event loop) in the budgets of its host and
API key, which the servers' fields cap after every response; a 429 is retried after the wait the server asks
for. See [`Outgoing`][ratekeeper.httpx.Outgoing] for the options. Needs aiohttp 3.12 or later, whose client
sessions take middlewares (``pip install 'ratekeeper[aiohttp]'``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

try:
    from aiohttp import ClientConnectorError, ClientRequest, ClientResponse, StreamReader
    from aiohttp.client_middlewares import ClientHandlerType
    from aiohttp.payload import AsyncIterablePayload, BytesPayload, StreamReaderPayload
    from multidict import CIMultiDictProxy
    from yarl import URL
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "ratekeeper.aiohttp needs aiohttp 3.12 or later (client middlewares): pip install 'ratekeeper[aiohttp]'"
    ) from error

from ratekeeper._outgoing import _NOT_SENT, Call, HostStats, Outgoing, Reply, engine_of, host_of
from ratekeeper.limiter import Limiter

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ratekeeper._outgoing import OutgoingOptions

__all__ = ["Middleware"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _not_sent(error: BaseException) -> bool:
    """No connection was made (refused, unresolved, its TLS handshake failed): the request never left."""
    return isinstance(error, ClientConnectorError)


_NOT_SENT.append(_not_sent)


# (scheme, netloc, raw path) -> (host, path), for the URLs a process calls again and again (bounded: past it, URLs
# are read each time). yarl makes every request's URL anew, and reading its host and path decodes them again.
_PLACES: dict[tuple[str, str, str], tuple[str, str]] = {}
_MOST_PLACES = 4096


def _place(request: ClientRequest) -> tuple[str, str]:
    """The call's host (with its port when not the scheme's default) and path."""
    url = request.url
    try:
        parts = (url._scheme, url._netloc, url._path)  # yarl's URL keeps them (slots) as the URL was given
    except AttributeError:  # pragma: no cover - another yarl
        return _read_place(url)
    place = _PLACES.get(parts)
    if place is None:
        place = _read_place(url)
        if len(_PLACES) < _MOST_PLACES and "@" not in parts[1]:  # credentials are not kept in memory
            _PLACES[parts] = place
    return place


def _read_place(url: URL) -> tuple[str, str]:
    # The host as sent (an IDNA name in its ``xn--`` form, as every adapter keys it), the path decoded.
    return host_of(url.raw_host or "", url.explicit_port, _DEFAULT_PORTS.get(url.scheme)), url.path


async def _call(request: ClientRequest) -> Call:
    body = request.body
    # Bytes and JSON bodies are in memory; a stream or a file is not read here (it could be read once only).
    content = await body.as_bytes() if isinstance(body, BytesPayload) else None
    host, path = _place(request)
    return Call._lazy(request.method.upper(), host, path, request.headers.items, content)


def _raw(response: ClientResponse) -> tuple[int, Any]:
    """The status and the headers as they came (``raw_headers``: bytes), for the core to pick the rate-limit
    fields out of."""
    return response.status, response.raw_headers


def _reply(response: ClientResponse) -> Reply:
    return Reply._lazy(response.status, response.headers, _pairs)


def _pairs(headers: CIMultiDictProxy[str]) -> Iterable[tuple[str, str]]:
    return headers.items()


async def _release(response: ClientResponse) -> None:
    response.release()


async def _read(response: ClientResponse) -> bytes:
    """The body, for ``spent``; read whole, it is put back as the response's stream too, so that a caller
    iterating ``response.content`` still gets it (``read``, ``text`` and ``json`` keep it anyway)."""
    body = await response.read()
    content = StreamReader(response.content._protocol, 2**16, loop=response._loop)
    content.feed_data(body)
    content.feed_eof()
    response.content = content
    return body


def _replayable(request: ClientRequest) -> bool:
    """Whether the request's body can be sent again for a retry: not a stream once read (aiohttp would send it
    empty)."""
    body = request.body
    consumed = getattr(body, "consumed", None)
    if consumed is not None:
        return not consumed
    return not isinstance(body, (AsyncIterablePayload, StreamReaderPayload))  # pragma: no cover - older aiohttp


class Middleware:
    """An aiohttp client middleware: ``aiohttp.ClientSession(middlewares=(Middleware(lim),))``, or for some
    requests only, ``session.get(url, middlewares=(pace,))``.

    Args:
        limiter: the [`Limiter`][ratekeeper.Limiter] holding the budgets, or an
            [`Outgoing`][ratekeeper.httpx.Outgoing] shared with other transports (then no options).
        **options: [`Outgoing`][ratekeeper.httpx.Outgoing]'s options (``wait``, ``timeout``, ``retries``, ...).

    Raises:
        InvalidType, InvalidValue: a bad option, naming it.
        RateLimited: at a call, when its turn is further away than ``timeout`` (or ``wait=False``).
    """

    def __init__(self, limiter: Limiter | Outgoing, **options: Unpack[OutgoingOptions]) -> None:
        self.outgoing = engine_of(limiter, options)

    def stats(self) -> dict[str, HostStats]:
        """[`Outgoing.stats`][ratekeeper.httpx.Outgoing.stats] of this middleware's engine."""
        return self.outgoing.stats()

    async def __call__(self, request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
        """Sends ``request`` when its turn comes; retries a 429 as the options say."""
        outgoing = self.outgoing
        admit = outgoing._aadmit_heard
        if admit is not None:  # the short way (see Outgoing.__init__), written out: this is every call's path
            host, path = _place(request)
            ticket = admit(host, path)
            if ticket is not None:
                try:
                    response = await handler(request)
                except BaseException as error:
                    outgoing._failed(ticket, error)
                    raise
                settled = outgoing._core_settle(ticket, response.raw_headers, response.status)
                if settled is None:
                    return response
                return await outgoing._afinish(
                    ticket, settled, response, _call, handler, request, _raw, _reply, _read, _release, _replayable
                )
        return await outgoing._asend(
            await _call(request), handler, request, _raw, _reply, _read, _release, replayable=_replayable
        )
