"""Who is asking: key functions for the web integrations.

A key function takes the framework's request (Starlette's ``Request`` for ASGI, ``flask.request`` for
Flask) and returns the peer's key, or ``None`` when the request has none (e.g. a missing header: what
happens then is the middleware's ``on_missing_key``). Any callable does, sync or async; the two here
also read an ASGI scope directly (``from_scope``), so the ASGI middleware needs no ``Request`` object
for them.

- [`client_ip`][ratekeeper.keys.client_ip] — the client's address, behind trusted proxies: ``X-Forwarded-For`` (or, when
  told, ``Forwarded``) walked from the right, skipping trusted hops; never the leftmost, spoofable one.
- [`header`][ratekeeper.keys.header] — a request header, such as ``X-API-Key`` or ``X-Account-ID``.
"""

from __future__ import annotations

import inspect
import ipaddress
import sys
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from ratekeeper._errors import InvalidType, InvalidValue

__all__ = [
    "ClientIP",
    "ForwardingHeader",
    "Header",
    "KeyCallable",
    "KeyFunction",
    "checked_key",
    "client_ip",
    "header",
    "key_of",
    "key_text",
]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: A key function: a callable of the framework's request, sync or async, giving the key (a str, or an int
#: read as its decimal text) or ``None``.
KeyCallable = Callable[[Any], str | int | Awaitable[str | int | None] | None]


class KeyFunction:
    """A key function that can also read an ASGI scope or a WSGI environ without a request object."""

    __slots__ = ()

    def __call__(self, request: Any) -> str | None:
        raise NotImplementedError

    def from_scope(self, scope: Mapping[str, Any]) -> str | None:
        raise NotImplementedError

    def from_environ(self, environ: Mapping[str, Any]) -> str | None:
        raise NotImplementedError

    def _scope_key(self) -> bytes | Literal[False] | None:
        """Where the core may read this key in a scope itself (``Limiter._admit_scope``): a header's
        lower-case name, ``None`` for the client's address, or ``False`` when only ``from_scope`` can."""
        return False


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


#: The forwarding headers :func:`client_ip` can read, by their lower-case names.
ForwardingHeader = Literal["x-forwarded-for", "forwarded"]
_FORWARDING_HEADERS = ("x-forwarded-for", "forwarded")


class ClientIP(KeyFunction):
    """The client's IP address; see [`client_ip`][ratekeeper.keys.client_ip]."""

    __slots__ = ("_environ_name", "_header", "_ipv4_prefix", "_ipv6_prefix", "_networks", "_raw", "_whole")

    def __init__(
        self, trusted_proxies: Iterable[str], header: str, ipv4_prefix: int = 32, ipv6_prefix: int = 128
    ) -> None:
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
        if not isinstance(header, str):
            raise InvalidType("header", f"must be a str, got {type(header).__name__}")
        if header.lower() not in _FORWARDING_HEADERS:
            raise InvalidValue("header", f"must be 'x-forwarded-for' or 'forwarded', got {header!r}")
        for name, value, bits in (("ipv4_prefix", ipv4_prefix, 32), ("ipv6_prefix", ipv6_prefix, 128)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidType(name, f"must be an int, got {type(value).__name__}")
            if not 0 <= value <= bits:
                raise InvalidValue(name, f"must be between 0 and {bits} (bits of the address kept), got {value}")
        self._ipv4_prefix, self._ipv6_prefix = ipv4_prefix, ipv6_prefix
        # Whole addresses: the key is the address itself, as the core's quick path reads it.
        self._whole = ipv4_prefix == 32 and ipv6_prefix == 128
        self._networks: tuple[_Network, ...] = tuple(networks)
        self._header = header.lower()
        self._raw = self._header.encode("latin-1")
        self._environ_name = "HTTP_" + self._header.upper().replace("-", "_")

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self._networks)

    def _resolve(self, peer: str | None, value: str | None) -> str | None:
        # Only a request that reached us from a trusted proxy may say who it was forwarded for, and only
        # in the header the proxies write: another header passes through them as the client wrote it.
        if peer is None or value is None or not self._networks or not self._trusted(peer):
            return peer
        hops = _forwarded_hops(value) if self._header == "forwarded" else _x_forwarded_hops(value)
        # From the right: each entry was appended by the hop to its right. While that hop is a trusted
        # proxy, the entry is what it saw; the first that is not a trusted proxy is the client. Anything
        # to its left could have been written by anyone.
        nearest = peer
        for hop in reversed(hops):
            if hop is None:
                # A trusted proxy that did not know its client ("unknown", or no address at all): its
                # clients share the proxy's key rather than pick their own.
                return nearest
            if not self._trusted(hop):
                return hop
            nearest = hop
        return nearest

    def _masked(self, address: str | None) -> str | None:
        """The network of ``address`` under the prefixes (``"192.0.2.0/24"``); the address itself when
        they keep every bit, or when it is not an IP (an RFC 7239 obfuscated name)."""
        if self._whole or address is None:
            return address
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return address
        bits = self._ipv4_prefix if ip.version == 4 else self._ipv6_prefix
        if bits == ip.max_prefixlen:
            return address
        return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))

    def __call__(self, request: Any) -> str | None:
        return self._masked(self._resolve(_request_peer(request), _request_header(request, self._header)))

    def from_environ(self, environ: Mapping[str, Any]) -> str | None:
        peer = environ.get("REMOTE_ADDR") or None
        if not self._networks:
            return self._masked(peer)
        return self._masked(self._resolve(peer, environ.get(self._environ_name)))

    def from_scope(self, scope: Mapping[str, Any]) -> str | None:
        client = scope.get("client")
        peer = str(client[0]) if client else None
        if not self._networks:  # the common case: no proxy, no header to read
            return self._masked(peer)
        return self._masked(self._resolve(peer, _scope_header(scope, self._raw)))

    def _scope_key(self) -> bytes | Literal[False] | None:
        # Behind proxies, or grouped by prefix, the key is made in Python; a subclass may read the scope
        # its own way.
        quick = not self._networks and self._whole and type(self).from_scope is ClientIP.from_scope
        return None if quick else False

    def __repr__(self) -> str:
        prefixes = "" if self._whole else f", ipv4_prefix={self._ipv4_prefix}, ipv6_prefix={self._ipv6_prefix}"
        return f"client_ip(trusted_proxies={[str(n) for n in self._networks]!r}, header={self._header!r}{prefixes})"


def _node(text: str) -> str | None:
    """One hop's address: an IP without port or brackets (in its canonical form), an RFC 7239 obfuscated
    identifier (``_hidden``, a proxy's stable name for its client), or ``None`` (``unknown``, or not an
    address at all)."""
    text = text.strip()
    if text.startswith("["):  # "[2001:db8::1]:4711"
        end = text.find("]")
        text = text[1:end] if end > 0 else ""
    elif text.count(":") == 1:  # "192.0.2.60:4711", "_hidden:_port"
        text = text.split(":", 1)[0]
    if text.startswith("_") and len(text) > 1 and all(c.isalnum() or c in "._-" for c in text[1:]):
        return text
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _x_forwarded_hops(value: str) -> list[str | None]:
    """The addresses of an ``X-Forwarded-For`` value (lines joined by ``,``), left to right."""
    return [_node(hop) for hop in value.split(",") if hop.strip()]


def _split_unquoted(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside RFC 7230 quoted strings (which may hold it, escaped or not)."""
    parts, start, quoted, escaped = [], 0, False, False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
        out, escaped = [], False
        for char in value:
            if char == "\\" and not escaped:
                escaped = True
                continue
            out.append(char)
            escaped = False
        return "".join(out)
    return value


def _forwarded_hops(value: str) -> list[str | None]:
    """The ``for=`` addresses of an RFC 7239 ``Forwarded`` value, one per element, left to right (``None``
    for an element without one: that hop's client is unknown)."""
    hops: list[str | None] = []
    for element in _split_unquoted(value, ","):
        if not element.strip():
            continue
        hop = None
        for pair in _split_unquoted(element, ";"):
            name, _, raw = pair.partition("=")
            if name.strip().lower() == "for":
                hop = _node(_unquote(raw))
        hops.append(hop)
    return hops


def client_ip(
    trusted_proxies: Sequence[str] = (),
    *,
    header: ForwardingHeader = "x-forwarded-for",
    ipv4_prefix: int = 32,
    ipv6_prefix: int = 128,
) -> ClientIP:
    """The client's IP address as the key, or the network it is in.

    Args:
        trusted_proxies: addresses or networks (``"10.0.0.0/8"``, ``"127.0.0.1"``) of the proxies in front
            of the service. Only a request whose peer is one of them may name its client, in ``header``;
            the client is then the rightmost address there that is not a trusted proxy (an entry a
            trusted proxy wrote as ``unknown``: that proxy's address). Empty (the default): the peer
            address itself, headers ignored.
        header: the one header the trusted proxies write: ``"x-forwarded-for"`` (default; nginx's
            ``$proxy_add_x_forwarded_for``, HAProxy's ``option forwardfor``, most load balancers) or
            ``"forwarded"`` (RFC 7239), only if they set it. The other is never read: a proxy passes a
            header it does not write through unchanged, so there it is the client's own word.
        ipv4_prefix: the leading bits of an IPv4 address that make the key: 32 (default) keys each
            address; 24 gives every address of a /24 one budget, as ``"192.0.2.0/24"``.
        ipv6_prefix: the same for IPv6: 128 (default) keys each address; 64 keys each /64, what one
            subscriber usually holds (django-ratelimit's default ``RATELIMIT_IPV6_MASK``), so a client
            cannot take a fresh budget with every address of its own network.

    Raises:
        InvalidValue: an entry that is not an address or network (``loc`` ``("trusted_proxies", i)``), or
            another ``header``, or a prefix outside 0..32 (IPv4) or 0..128 (IPv6).
        InvalidType: a prefix that is not an int.
    """
    return ClientIP(trusted_proxies, header, ipv4_prefix, ipv6_prefix)


class Header(KeyFunction):
    """A request header's value; see [`header`][ratekeeper.keys.header]."""

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

    def _scope_key(self) -> bytes | Literal[False] | None:
        return self._raw if type(self).from_scope is Header.from_scope else False

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
        InvalidType: the callable returned something that is neither a str, an int nor None.
    """
    if isinstance(key, KeyFunction):
        return key.from_scope(scope)
    peer = key(request())
    if inspect.isawaitable(peer):
        peer = await peer
    return key_text(peer)


def key_text(peer: object, loc: str | tuple[str, ...] = "key") -> str | None:
    """What a key function gave, as the key: a str as it is, an int as its decimal text (a user's id), and
    ``None`` (no key) as it is; every integration reads a key function's answer so.

    Raises:
        InvalidType: anything else (a bool too), named by ``loc``.
    """
    if peer is None or isinstance(peer, str):
        return peer
    if isinstance(peer, int) and not isinstance(peer, bool):
        return str(int(peer))  # int(): an IntEnum's own str() would be its name
    raise InvalidType(loc, f"must return a str, an int or None, got {type(peer).__name__}")


def checked_key(
    key: object,
    loc: str | tuple[str, ...] = "key",
    *,
    or_else: str = "",
    depends: bool = False,
    of_nothing: bool = False,
) -> KeyCallable:
    """``key`` checked where it is given (an integration's ``key=``), so a mistake is an error at start-up,
    not a 500 at every request.

    Args:
        key: what was given.
        loc: where it was given, for the error.
        or_else: what else the option takes, for the error (``" or Depends(dependency)"``).
        depends: the option also takes ``Depends(dependency)`` (FastAPI's route limits): a FastAPI
            dependency given as the function itself is told to be given so.
        of_nothing: a callable of no argument is taken too (Flask's ``limit(key=...)``).

    Raises:
        InvalidType: not a callable of the request; [`client_ip`][ratekeeper.keys.client_ip] /
            [`header`][ratekeeper.keys.header] themselves, which make key functions and must be called (``client_ip()``,
            ``header("X-API-Key")``); a callable that cannot be called with the request alone (``key(request)``), such
            as a FastAPI dependency whose parameters FastAPI would fill (``x_api_key: str = Header()``,
            ``Depends(...)``).
    """
    if key is client_ip:
        message = "client_ip makes the key function: call it, client_ip() or client_ip(trusted_proxies=[...])"
        raise InvalidType(loc, message)
    if key is header:
        raise InvalidType(loc, "header makes the key function: call it with the header's name, header('X-API-Key')")
    if isinstance(key, str):
        message = f"must be a callable of the request{or_else}, got the str {key!r}; for a header: header({key!r})"
        raise InvalidType(loc, message)
    if not callable(key):
        raise InvalidType(loc, f"must be a callable of the request{or_else}, got {type(key).__name__}")
    if isinstance(key, KeyFunction):
        return key
    try:
        signature = inspect.signature(key)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return key
    name = getattr(key, "__name__", None) or type(key).__name__
    filled = _framework_parameters(key)
    if filled:
        # FastAPI fills these only for a dependency it resolves; ratekeeper calls key(request).
        given = ", ".join(f"{parameter}={_marker(marker)}" for parameter, marker in filled)
        message = (
            f"{name}({given}) is a FastAPI dependency, but ratekeeper calls key(request) with the request "
            f"alone, so FastAPI never fills {', '.join(parameter for parameter, _ in filled)}; "
        )
        ways = [f"key=Depends({name}) for FastAPI to resolve it"] if depends else []
        ways.extend(_request_reading(filled))
        raise InvalidType(loc, message + "give " + ", or ".join(ways))
    try:
        signature.bind(None)
    except TypeError:
        try:
            signature.bind()
        except TypeError:
            pass
        else:
            if of_nothing:
                return key
        message = f"{name}{signature} cannot be called with the request alone: ratekeeper calls key(request)"
        if depends:
            message += f"; a FastAPI dependency goes in Depends: key=Depends({name})"
        raise InvalidType(loc, message) from None
    return key


def _framework_parameters(function: Callable[..., Any]) -> list[tuple[str, object]]:
    """The parameters of ``function`` that FastAPI fills when it resolves it as a dependency, with what
    declares them: a default (``x_api_key: str = Header()``, ``user = Depends(current_user)``) or an
    ``Annotated`` marker (``x_api_key: Annotated[str, Header()]``). None when FastAPI is not imported: no
    function can then declare one."""
    params = sys.modules.get("fastapi.params")
    if params is None:
        return []
    markers = (params.Param, params.Body, params.Depends)
    try:
        signature = inspect.signature(function, eval_str=True)  # string annotations, as FastAPI reads them
    except Exception:  # an annotation that names what its module does not define: the defaults still tell
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            return []
    found: list[tuple[str, object]] = []
    for parameter in signature.parameters.values():
        candidates = [parameter.default]
        if typing.get_origin(parameter.annotation) is typing.Annotated:
            candidates.extend(parameter.annotation.__metadata__)
        marker = next((candidate for candidate in candidates if isinstance(candidate, markers)), None)
        if marker is not None:
            found.append((parameter.name, marker))
    return found


def _marker(marker: object) -> str:
    """How a FastAPI parameter was declared, in a message: ``Header(...)``, ``Depends(current_user)``."""
    dependency = getattr(marker, "dependency", None)
    if dependency is not None:
        return f"{type(marker).__name__}({getattr(dependency, '__name__', repr(dependency))})"
    return f"{type(marker).__name__}(...)"


def _request_reading(filled: list[tuple[str, object]]) -> list[str]:
    """Key functions of the request reading what the first header, query or cookie parameter read."""
    for parameter, marker in filled:
        kind = type(marker).__name__
        alias = getattr(marker, "alias", None)
        if kind == "Header":
            converts = getattr(marker, "convert_underscores", True)
            wanted = alias or (parameter.replace("_", "-") if converts else parameter)
            return [f"key=header({wanted!r})", f"key=lambda request: request.headers.get({wanted!r})"]
        if kind == "Query":
            return [f"key=lambda request: request.query_params.get({alias or parameter!r})"]
        if kind == "Cookie":
            return [f"key=lambda request: request.cookies.get({alias or parameter!r})"]
    return ["a key function reading the request itself (request.headers, request.query_params, request.cookies)"]
