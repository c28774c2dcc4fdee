"""A ``requests`` adapter that paces outgoing calls and obeys the servers' rate-limit fields.

    import requests
    import ratekeeper as rk
    from ratekeeper.requests import Adapter

    session = requests.Session()
    session.mount("https://", Adapter(rk.Limiter(rules=[]), api_key_header="authorization"))

Each call waits its turn (blocking its thread) in the budgets of its host and API key, which the servers'
fields cap after every response; a 429 is retried after the wait the server asks for. See
[`Outgoing`][ratekeeper.httpx.Outgoing] for the options. Needs requests (``pip install 'ratekeeper[requests]'``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

try:
    from requests import PreparedRequest, Response
    from requests.adapters import DEFAULT_POOLBLOCK, DEFAULT_POOLSIZE, DEFAULT_RETRIES, HTTPAdapter
    from requests.exceptions import ConnectionError as ConnectionFailed
    from requests.exceptions import ConnectTimeout
    from requests.structures import CaseInsensitiveDict
    from urllib3.exceptions import ConnectTimeoutError
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("ratekeeper.requests needs requests: pip install 'ratekeeper[requests]'") from error

from ratekeeper._outgoing import _NOT_SENT, Call, HostStats, Outgoing, Reply, engine_of, host_of
from ratekeeper.limiter import Limiter

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ratekeeper._outgoing import OutgoingOptions

__all__ = ["Adapter"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


# URL -> (host, path), for the URLs a process calls again and again (bounded: past it, URLs are split each time).
_PLACES: dict[str, tuple[str, str]] = {}
_MOST_PLACES = 4096


def _place(url: str) -> tuple[str, str]:
    """The call's host (with its port when not the scheme's default) and path: the host as sent (requests
    sends an IDNA name in its ``xn--`` form), the path decoded, as every adapter keys and routes them."""
    # Kept by the URL without its query, which says nothing of the place (and may hold a token); not at all
    # when it holds credentials.
    base = url.partition("?")[0] if "?" in url else url
    place = _PLACES.get(base)
    if place is None:
        parts = urlsplit(base)
        path = unquote(parts.path) if "%" in parts.path else parts.path
        place = (host_of(parts.hostname or "", parts.port, _DEFAULT_PORTS.get(parts.scheme)), path or "/")
        if len(_PLACES) < _MOST_PLACES and "@" not in parts.netloc:
            _PLACES[base] = place
    return place


def _call(request: PreparedRequest) -> Call:
    body = request.body
    content = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else None
    host, path = _place(request.url or "")
    return Call._lazy((request.method or "GET").upper(), host, path, request.headers.items, content)


_CLOSE = Response.close


def _replayable(request: PreparedRequest) -> bool:
    """Whether ``request`` can be sent again: its body is bytes or text (data, json, files encoded), not a
    generator or file requests reads once (which a retry would send empty, or short of its length)."""
    return request.body is None or isinstance(request.body, (bytes, str))


def _not_sent(error: BaseException) -> bool:
    """No connection was made (refused, unresolved, timed out connecting): the request never left."""
    if isinstance(error, ConnectTimeout):
        return True
    if not isinstance(error, ConnectionFailed) or not error.args:
        return False
    cause = error.args[0]  # urllib3's MaxRetryError, its reason the connection's failure (NewConnectionError too)
    return isinstance(getattr(cause, "reason", cause), ConnectTimeoutError)


_NOT_SENT.append(_not_sent)


def _raw(response: Response) -> tuple[int, Any]:
    """The status and the headers as requests keeps them, for the core to pick the rate-limit fields out of:
    ``CaseInsensitiveDict._store``, lower-case name -> (name, value), which ``items()`` would walk in Python."""
    headers = response.headers
    return response.status_code, getattr(headers, "_store", None) or headers.items()


def _reply(response: Response) -> Reply:
    return Reply._lazy(response.status_code, response.headers, CaseInsensitiveDict.items)


def _body(response: Response) -> bytes:
    return response.content


class Adapter(HTTPAdapter):
    """A ``requests`` transport adapter: ``session.mount("https://", Adapter(lim))``.

    Args:
        limiter: the [`Limiter`][ratekeeper.Limiter] holding the budgets, or an
            [`Outgoing`][ratekeeper.httpx.Outgoing] shared with other transports (then no options).
        pool_connections: ``HTTPAdapter``'s own: the connection pools it keeps.
        pool_maxsize: ``HTTPAdapter``'s own: the connections a pool keeps.
        max_retries: ``HTTPAdapter``'s own: urllib3's retrying of failed connections (a 429 is retried by
            ``retries``).
        pool_block: ``HTTPAdapter``'s own: whether a full pool blocks.
        **options: [`Outgoing`][ratekeeper.httpx.Outgoing]'s options (``wait``, ``timeout``, ``retries``, ...).

    Raises:
        InvalidType, InvalidValue: a bad option, naming it.
        RateLimited: at a call, when its turn is further away than ``timeout`` (or ``wait=False``).
    """

    def __init__(
        self,
        limiter: Limiter | Outgoing,
        *,
        pool_connections: int = DEFAULT_POOLSIZE,
        pool_maxsize: int = DEFAULT_POOLSIZE,
        max_retries: Any = DEFAULT_RETRIES,
        pool_block: bool = DEFAULT_POOLBLOCK,
        **options: Unpack[OutgoingOptions],
    ) -> None:
        self.outgoing = engine_of(limiter, options)
        super().__init__(pool_connections, pool_maxsize, max_retries, pool_block)

    def stats(self) -> dict[str, HostStats]:
        """[`Outgoing.stats`][ratekeeper.httpx.Outgoing.stats] of this adapter's engine."""
        return self.outgoing.stats()

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> Response:
        """Sends ``request`` when its turn comes; retries a 429 as the options say."""
        outgoing = self.outgoing
        admit = outgoing._admit_heard
        if admit is not None:  # the short way (see Outgoing.__init__), written out: this is every call's path
            host, path = _place(request.url or "")
            ticket = admit(host, path)
            if ticket is not None:
                try:
                    response = super().send(request, stream, timeout, verify, cert, proxies)
                except BaseException as error:
                    outgoing._failed(ticket, error)
                    raise
                fields: Any
                try:
                    fields = response.headers._store  # type: ignore[attr-defined]  # see _raw
                except AttributeError:  # not requests' CaseInsensitiveDict
                    fields = response.headers.items()
                settled = outgoing._core_settle(ticket, fields, response.status_code)
                if settled is None:
                    return response
                send = self._sender(stream, timeout, verify, cert, proxies)
                return outgoing._finish(
                    ticket, settled, response, _call, send, request, _raw, _reply, _body, _CLOSE, _replayable
                )
        send = self._sender(stream, timeout, verify, cert, proxies)
        return outgoing._send(_call(request), send, request, _raw, _reply, _body, _CLOSE, replayable=_replayable)

    def _sender(
        self,
        stream: bool,
        timeout: float | tuple[float, float] | tuple[float, None] | None,
        verify: bool | str,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None,
        proxies: Mapping[str, str] | None,
    ) -> Callable[[PreparedRequest], Response]:
        """``HTTPAdapter.send`` with this call's options, for the long way."""

        def send(request: PreparedRequest) -> Response:
            return super(Adapter, self).send(request, stream, timeout, verify, cert, proxies)

        return send
