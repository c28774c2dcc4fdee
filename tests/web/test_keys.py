"""Key functions read the same key from an ASGI scope, a WSGI environ and either framework's request.

The ASGI middleware reads ``from_scope``, the Flask extension ``from_environ``, and a user calling a key
function on a request gets ``__call__``: all three must agree, or a limit would depend on the server.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import ratekeeper as rk
from ratekeeper import InvalidValue
from ratekeeper.keys import KeyFunction, client_ip, header
from starlette.requests import HTTPConnection
from werkzeug.wrappers import Request


def request_of(peer: str, headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same request as an ASGI scope and as a WSGI environ."""
    scope = {
        "type": "http",
        "path": "/",
        "headers": [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()],
        "client": (peer, 50000),
    }
    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": peer}
    environ.update({"wsgi.input": io.BytesIO(), "SERVER_NAME": "test", "SERVER_PORT": "80"})
    for name, value in headers.items():
        wsgi_name = name.upper().replace("-", "_")
        environ[wsgi_name if wsgi_name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{wsgi_name}"] = value
    return scope, environ


def keys_of(key: KeyFunction, peer: str, headers: dict[str, str]) -> set[str | None]:
    scope, environ = request_of(peer, headers)
    return {
        key.from_scope(scope),
        key.from_environ(environ),
        key(HTTPConnection(scope)),  # Starlette
        key(Request(environ)),  # Flask / Werkzeug
    }


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-API-Key": "k1"}, "k1"),
        ({"x-api-key": "  k2 "}, "k2"),
        ({"X-API-Key": ""}, None),
        ({"X-API-Key": "   "}, None),
        ({"X-Other": "k3"}, None),
        ({}, None),
    ],
)
def test_a_header_key_is_the_same_from_every_source(headers: dict[str, str], expected: str | None) -> None:
    assert keys_of(header("X-API-Key"), "192.0.2.1", headers) == {expected}


def test_a_content_header_has_no_http_prefix_in_the_environ() -> None:
    assert keys_of(header("Content-Type"), "192.0.2.1", {"Content-Type": "text/csv"}) == {"text/csv"}


TRUSTED = ["10.0.0.0/8"]


@pytest.mark.parametrize(
    ("peer", "headers", "expected"),
    [
        ("192.0.2.1", {}, "192.0.2.1"),
        # An untrusted peer's own header is its word, not evidence.
        ("192.0.2.1", {"X-Forwarded-For": "198.51.100.7"}, "192.0.2.1"),
        # Behind a trusted proxy: the rightmost address that is not a trusted proxy, never the spoofable first.
        ("10.0.0.5", {"X-Forwarded-For": "1.2.3.4, 198.51.100.7, 10.0.0.9"}, "198.51.100.7"),
        # Only X-Forwarded-For, the header the proxies write: a Forwarded header passes through them as
        # the client wrote it, so it is never read (by default).
        ("10.0.0.5", {"Forwarded": "for=1.2.3.4", "X-Forwarded-For": "203.0.113.1"}, "203.0.113.1"),
        ("10.0.0.5", {"Forwarded": "for=1.2.3.4"}, "10.0.0.5"),
        # Ports, brackets and the canonical form of an address.
        ("10.0.0.5", {"X-Forwarded-For": "198.51.100.7:4711"}, "198.51.100.7"),
        ("10.0.0.5", {"X-Forwarded-For": "[2001:DB8::1]:4711, 10.0.0.9"}, "2001:db8::1"),
        ("10.0.0.5", {"X-Forwarded-For": "2001:db8:0::1"}, "2001:db8::1"),
        # A trusted hop that wrote no address: its clients share its key, none picks its own.
        ("10.0.0.5", {"X-Forwarded-For": "1.2.3.4, unknown, 10.0.0.9"}, "10.0.0.9"),
        ("10.0.0.5", {"X-Forwarded-For": "1.2.3.4, not-an-address"}, "10.0.0.5"),
        # Every hop a trusted proxy: the leftmost, which a trusted proxy wrote.
        ("10.0.0.5", {"X-Forwarded-For": "10.0.0.7, 10.0.0.9"}, "10.0.0.7"),
        ("10.0.0.5", {}, "10.0.0.5"),
    ],
)
def test_the_client_ip_is_the_same_from_every_source(peer: str, headers: dict[str, str], expected: str) -> None:
    assert keys_of(client_ip(trusted_proxies=TRUSTED), peer, headers) == {expected}


@pytest.mark.parametrize(
    ("forwarded", "expected"),
    [
        ('for=1.2.3.4, for="198.51.100.8:4711"', "198.51.100.8"),
        ('for="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::17"),
        ("For=198.51.100.8;proto=https;by=10.0.0.9", "198.51.100.8"),
        ('for=1.2.3.4;host="a,b;c", for=198.51.100.8', "198.51.100.8"),  # separators inside a quoted value
        ('for=1.2.3.4, for="_hidden"', "_hidden"),  # an obfuscated identifier: the proxy's name for its client
        ('for="_hidden:_port"', "_hidden"),
        ("for=1.2.3.4, for=unknown", "10.0.0.5"),  # unknown to a trusted proxy: that proxy's key
        ("for=1.2.3.4, proto=https", "10.0.0.5"),  # an element without for=: unknown too
        ("for=198.51.100.8, for=10.0.0.9", "198.51.100.8"),
    ],
)
def test_forwarded_is_read_only_when_asked_for(forwarded: str, expected: str) -> None:
    key = client_ip(trusted_proxies=TRUSTED, header="forwarded")
    # X-Forwarded-For is not the header these proxies write: ignored.
    assert keys_of(key, "10.0.0.5", {"Forwarded": forwarded, "X-Forwarded-For": "203.0.113.1"}) == {expected}


def test_forwarded_split_over_header_lines_is_one_list() -> None:
    key = client_ip(trusted_proxies=TRUSTED, header="forwarded")
    scope = {"type": "http", "headers": [(b"forwarded", b"for=1.2.3.4"), (b"forwarded", b"for=198.51.100.8")]}
    scope["client"] = ("10.0.0.5", 50000)
    assert key.from_scope(scope) == "198.51.100.8"


def test_an_unknown_forwarding_header_is_refused() -> None:
    with pytest.raises(InvalidValue) as error:
        client_ip(trusted_proxies=TRUSTED, header="x-real-ip")  # type: ignore[arg-type]
    assert error.value.loc == ("header",)


# The ASGI middleware's hot path: the core reads the key from the scope itself (Limiter._admit_scope).
# It must decide under the very key from_scope gives, or give the request back to Python undecided.
@pytest.mark.parametrize(
    "value",
    [b"k1", b"  k2 ", b"", b"   ", b"caf\xe9", b"\x1c\xa0 k3\x85\t", b"\xff"],
)
def test_the_core_reads_a_header_key_as_from_scope_does(value: bytes) -> None:
    key = header("X-API-Key")
    # A repeated header: from_scope takes the first.
    scope = {"type": "http", "path": "/", "headers": [(b"host", b"h"), (b"x-api-key", value), (b"x-api-key", b"k9")]}
    expected = key.from_scope(scope)
    limiter = rk.Limiter(rate="1/minute")
    admitted = limiter._admit_scope(True, False, key._scope_key(), scope)  # type: ignore[arg-type]
    if expected is None:
        assert admitted is None  # nothing decided: the middleware applies on_missing_key
        return
    assert isinstance(admitted, tuple)
    assert not limiter.check(expected, "/").allowed  # the core spent this very key's one request
    assert limiter.check("k9", "/").allowed


@pytest.mark.parametrize("client", [("192.0.2.1", 50000), ("2001:db8::1", 1, 0, 0)])
def test_the_core_reads_the_client_address_as_from_scope_does(client: tuple[Any, ...]) -> None:
    key = client_ip()
    scope = {"type": "http", "path": "/", "headers": [], "client": client}
    limiter = rk.Limiter(rate="1/minute")
    assert limiter._admit_scope(True, False, key._scope_key(), scope) is not None  # type: ignore[arg-type]
    assert not limiter.check(client[0], "/").allowed


@pytest.mark.parametrize(
    "scope",
    [
        {"type": "lifespan"},
        {"type": "websocket", "path": "/", "headers": [(b"x-api-key", b"k1")]},
        {"type": "http", "path": "/", "headers": ((b"x-api-key", b"k1"),)},  # a tuple, not a list
        {"type": "http", "path": "/", "headers": [[b"x-api-key", b"k1"]]},  # lists, not tuples
        {"type": "http", "path": "/", "headers": [(b"x-api-key", bytearray(b"k1"))]},
        {"type": "http", "path": b"/", "headers": [(b"x-api-key", b"k1")]},  # a bytes path
    ],
)
def test_the_core_leaves_a_scope_it_does_not_read_to_python_undecided(scope: dict[str, Any]) -> None:
    limiter = rk.Limiter(rate="1/minute")
    assert limiter._admit_scope(True, False, b"x-api-key", scope) is None  # type: ignore[arg-type]
    assert limiter._admit_scope(True, False, None, {**scope, "client": None}) is None  # type: ignore[arg-type]
    assert limiter.check("k1", "/").allowed  # nothing was spent


def test_only_the_key_functions_the_core_reads_alike_are_read_by_it() -> None:
    class Lowered(type(header("X"))):  # type: ignore[misc]
        def from_scope(self, scope: Any) -> str | None:
            found = super().from_scope(scope)
            return found.lower() if found else None

    assert header("X-API-Key")._scope_key() == b"x-api-key"
    assert client_ip()._scope_key() is None
    assert client_ip(trusted_proxies=["10.0.0.0/8"])._scope_key() is False  # resolved in Python
    assert Lowered("X-API-Key")._scope_key() is False  # its own from_scope is used


@pytest.mark.parametrize(
    ("peer", "headers", "prefixes", "expected"),
    [
        ("192.0.2.77", {}, (24, 128), "192.0.2.0/24"),
        ("2001:db8:1:2:aaaa::1", {}, (32, 64), "2001:db8:1:2::/64"),
        ("2001:db8:1:2:aaaa::1", {}, (32, 128), "2001:db8:1:2:aaaa::1"),  # IPv6 kept whole
        ("192.0.2.77", {}, (32, 64), "192.0.2.77"),  # IPv4 kept whole
        ("192.0.2.77", {}, (0, 0), "0.0.0.0/0"),  # every client one budget
        # Behind a trusted proxy the client it names is grouped, never the proxy.
        ("10.0.0.5", {"X-Forwarded-For": "198.51.100.7"}, (16, 128), "198.51.0.0/16"),
        ("10.0.0.5", {"X-Forwarded-For": "[2001:db8::9]:80"}, (32, 48), "2001:db8::/48"),
    ],
)
def test_a_prefix_groups_a_network_into_one_key_from_every_source(
    peer: str, headers: dict[str, str], prefixes: tuple[int, int], expected: str
) -> None:
    ipv4, ipv6 = prefixes
    key = client_ip(trusted_proxies=TRUSTED, ipv4_prefix=ipv4, ipv6_prefix=ipv6)
    assert keys_of(key, peer, headers) == {expected}
    # Without proxies too, where the core would otherwise read the address itself.
    if not headers:
        assert keys_of(client_ip(ipv4_prefix=ipv4, ipv6_prefix=ipv6), peer, {}) == {expected}


def test_addresses_of_one_network_share_a_budget() -> None:
    limiter = rk.Limiter("2/min", clock=rk.ManualClock())
    key = client_ip(ipv6_prefix=64)
    peers = ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3"]
    scopes = [request_of(peer, {})[0] for peer in peers]
    assert [limiter.allow(str(key.from_scope(scope))) for scope in scopes] == [True, True, False]
    assert limiter.allow(str(key.from_scope(request_of("2001:db8:1:3::1", {})[0])))  # the next /64


def test_a_prefix_is_read_in_python_not_by_the_core() -> None:
    assert client_ip(ipv6_prefix=64)._scope_key() is False
    assert client_ip(ipv4_prefix=32, ipv6_prefix=128)._scope_key() is None
    assert "ipv6_prefix=64" in repr(client_ip(ipv6_prefix=64))


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"ipv4_prefix": 33}, rk.InvalidValue, r"ipv4_prefix: must be between 0 and 32.*got 33"),
        ({"ipv6_prefix": -1}, rk.InvalidValue, r"ipv6_prefix: must be between 0 and 128.*got -1"),
        ({"ipv6_prefix": "64"}, rk.InvalidType, r"ipv6_prefix: must be an int, got str"),
        ({"ipv4_prefix": True}, rk.InvalidType, r"ipv4_prefix: must be an int, got bool"),
    ],
)
def test_a_bad_prefix_is_refused_naming_it(options: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        client_ip(**options)
