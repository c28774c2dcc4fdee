"""Who is asking: key functions for the web integrations.

A key function takes the framework's request (Starlette's ``Request`` for ASGI, ``flask.request`` for
Flask) and returns the peer's key, or ``None`` when the request has none (e.g. a missing header: what
happens then is the middleware's ``on_missing_key``). Any callable does, sync or async; the two here
also read an ASGI scope directly (``from_scope``), so the ASGI middleware needs no ``Request`` object
for them.

- :func:`client_ip` — the client's address, behind trusted proxies: ``X-Forwarded-For`` (or
  ``Forwarded``) walked from the right, skipping trusted hops; never the leftmost, spoofable one.
- :func:`header` — a request header, such as ``X-API-Key`` or ``X-Account-ID``.
"""

from __future__ import annotations

import inspect
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Union

from ratekeeper._errors import InvalidType, InvalidValue

__all__ = ["ClientIP", "Header", "KeyCallable", "KeyFunction", "client_ip", "header", "key_of"]

_Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
#: A key function: a callable of the framework's request, sync or async, giving the key or ``None``.
KeyCallable = Callable[[Any], Union[str, Awaitable[Union[str, None]], None]]


class KeyFunction:
    """A key function that can also read an ASGI scope or a WSGI environ without a request object."""

    __slots__ = ()

    def __call__(self, request: Any) -> str | None:
        raise NotImplementedError

    def from_scope(self, scope: Mapping[str, Any]) -> str | None:
        raise NotImplementedError

    def from_environ(self, environ: Mapping[str, Any]) -> str | None:
        raise NotImplementedError


def _scope_header(scope: Mapping[str, Any], name: bytes) -> str | None:
    """The last value of header ``name`` (lower-case bytes) in an ASGI scope, or several joined by ``,``."""
    values = [value for key, value in scope.get("headers", ()) if key == name]
    if not values:
        return None
    return b",".join(values).decode("latin-1")


def _request_header(request: Any, name: str) -> str | None:
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    values = headers.getlist(name) if hasattr(headers, "getlist") else None
    if values:  # Werkzeug keeps repeated headers apart
        return ",".join(values)
    value = headers.get(name)
    return None if value is None else str(value)


def _request_peer(request: Any) -> str | None:
    client = getattr(request, "client", None)  # Starlette
    if client is not None:
        return str(client.host) if client.host else None
    remote = getattr(request, "remote_addr", None)  # Flask / Werkzeug
    return str(remote) if remote else None


class ClientIP(KeyFunction):
    """The client's IP address; see :func:`client_ip`."""

    __slots__ = ("_forwarded", "_networks")

    def __init__(self, trusted_proxies: Iterable[str], forwarded: bool) -> None:
        if isinstance(trusted_proxies, str):
            raise InvalidType("trusted_proxies", "must be a list of addresses or networks, not a single str")
        networks: list[_Network] = []
        for index, proxy in enumerate(trusted_proxies):
            if not isinstance(proxy, str):
                raise InvalidType(("trusted_proxies", index), f"must be a str, got {type(proxy).__name__}")
            try:
                networks.append(ipaddress.ip_network(proxy, strict=False))
            except ValueError:
                raise InvalidValue(("trusted_proxies", index), f"{proxy!r} is not an IP address or network") from None
        self._networks: tuple[_Network, ...] = tuple(networks)
        self._forwarded = forwarded

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self._networks)

    def _resolve(self, peer: str | None, forwarded_for: str | None, forwarded: str | None) -> str | None:
        # Only a request that reached us from a trusted proxy may say who it was forwarded for.
        if peer is None or not self._networks or not self._trusted(peer):
            return peer
        hops = _hops(forwarded) if self._forwarded and forwarded is not None else None
        if hops is None and forwarded_for is not None:
            hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
        if not hops:
            return peer
        # From the right: the first address not in the trusted set is the client; a proxy to the left
        # of it could have been written by anyone.
        for hop in reversed(hops):
            if not self._trusted(hop):
                return hop
        return hops[0]

    def __call__(self, request: Any) -> str | None:
        return self._resolve(
            _request_peer(request), _request_header(request, "x-forwarded-for"), _request_header(request, "forwarded")
        )

    def from_environ(self, environ: Mapping[str, Any]) -> str | None:
        peer = environ.get("REMOTE_ADDR") or None
        if not self._networks:
            return peer
        return self._resolve(peer, environ.get("HTTP_X_FORWARDED_FOR"), environ.get("HTTP_FORWARDED"))

    def from_scope(self, scope: Mapping[str, Any]) -> str | None:
        client = scope.get("client")
        peer = str(client[0]) if client else None
        if not self._networks:  # the common case: no proxy, no header to read
            return peer
        return self._resolve(peer, _scope_header(scope, b"x-forwarded-for"), _scope_header(scope, b"forwarded"))

    def __repr__(self) -> str:
        return f"client_ip(trusted_proxies={[str(n) for n in self._networks]!r})"


def _hops(forwarded: str) -> list[str] | None:
    """The ``for=`` addresses of an RFC 7239 ``Forwarded`` header, in order; ``None`` if it has none."""
    hops = []
    for element in forwarded.split(","):
        for pair in element.split(";"):
            name, _, value = pair.strip().partition("=")
            if name.strip().lower() == "for" and value:
                value = value.strip().strip('"')
                if value.startswith("["):  # "[2001:db8::1]:4711"
                    value = value[1 : value.find("]")]
                elif value.count(":") == 1:  # "192.0.2.60:4711"
                    value = value.split(":", 1)[0]
                hops.append(value)
    return hops or None


def client_ip(trusted_proxies: Sequence[str] = (), *, forwarded: bool = True) -> ClientIP:
    """The client's IP address as the key.

    Args:
        trusted_proxies: addresses or networks (``"10.0.0.0/8"``, ``"127.0.0.1"``) of the proxies in front
            of the service. Only a request whose peer is one of them may name its client in
            ``X-Forwarded-For`` / ``Forwarded``; the client is then the rightmost address that is not a
            trusted proxy. Empty (the default): the peer address itself, headers ignored.
        forwarded: read the standard ``Forwarded`` header before ``X-Forwarded-For``.

    Raises:
        InvalidValue: an entry that is not an address or network (``loc`` ``("trusted_proxies", i)``).
    """
    return ClientIP(trusted_proxies, forwarded)


class Header(KeyFunction):
    """A request header's value; see :func:`header`."""

    __slots__ = ("_environ_name", "_name", "_raw")

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise InvalidType("name", f"must be a str, got {type(name).__name__}")
        if not name or any(c in name for c in " \t:\r\n"):
            raise InvalidValue("name", f"{name!r} is not a header name")
        self._name = name.lower()
        self._raw = self._name.encode("latin-1")
        # PEP 3333: HTTP_ + upper case, "-" as "_"; the two content headers have no prefix.
        environ_name = self._name.upper().replace("-", "_")
        self._environ_name = (
            environ_name if environ_name in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + environ_name
        )

    def __call__(self, request: Any) -> str | None:
        value = _request_header(request, self._name)
        return value.strip() or None if value is not None else None

    def from_environ(self, environ: Mapping[str, Any]) -> str | None:
        value = environ.get(self._environ_name)
        return value.strip() or None if value is not None else None

    def from_scope(self, scope: Mapping[str, Any]) -> str | None:
        for key, value in scope.get("headers", ()):
            if key == self._raw:
                return value.decode("latin-1").strip() or None
        return None

    def __repr__(self) -> str:
        return f"header({self._name!r})"


def header(name: str) -> Header:
    """The value of request header ``name`` (case-insensitive) as the key, e.g. ``header("X-API-Key")``.
    A missing or empty header gives ``None``: the middleware's ``on_missing_key`` decides."""
    return Header(name)


async def key_of(key: KeyCallable, scope: Mapping[str, Any], request: Callable[[], Any]) -> str | None:
    """The key of an ASGI request: read from ``scope`` by the key functions here, or the user's
    callable applied to ``request()`` (made only then), awaited if it is async.

    Raises:
        InvalidType: the callable returned something that is neither a str nor None.
    """
    if isinstance(key, KeyFunction):
        return key.from_scope(scope)
    peer = key(request())
    if inspect.isawaitable(peer):
        peer = await peer
    if peer is not None and not isinstance(peer, str):
        raise InvalidType("key", f"must return a str or None, got {type(peer).__name__}")
    return peer
